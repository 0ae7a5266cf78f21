// test_kernels.cpp — the runtime's own compute paths against LibTorch references:
//   the fused, chunked LM head + cross-entropy vs linear + cross_entropy (values and gradients),
//   the oneDNN linear vs at::linear (values and gradients).
#include <gtest/gtest.h>

#include <torch/csrc/autograd/autograd.h>

#include "fused_head.h"
#include "linear.h"
#include "test_util.h"

namespace rt = trainscope::runtime;
using trainscope::testing::relErr;

namespace {
at::Tensor fused(const at::Tensor& x, const at::Tensor& w, const at::Tensor& t) { return rt::lmHeadCrossEntropy(x, w, t); }
struct HeadResult {
  at::Tensor loss, dx, dw;
};
template <class Fn>
HeadResult runHead(Fn fn, const at::Tensor& x0, const at::Tensor& w0, const at::Tensor& t, double scale) {
  at::Tensor x = x0.detach().clone().requires_grad_(true), w = w0.detach().clone().requires_grad_(true);
  at::Tensor loss = fn(x, w, t);
  (loss * scale).backward();
  return {loss.detach(), x.grad().to(at::kFloat), w.grad().to(at::kFloat)};
}
}  // namespace

TEST(FusedHead, MatchesLinearPlusCrossEntropyInFp32) {
  at::manual_seed(3);
  // N = 1000 rows cross several chunks (and a ragged last one) for V = 5000.
  at::Tensor x = at::randn({1000, 48}), w = at::randn({5000, 48}) * 0.1, t = at::randint(5000, {1000});
  HeadResult ref = runHead(rt::lmHeadCrossEntropyReference, x, w, t, 1.0);
  HeadResult got = runHead(fused, x, w, t, 1.0);
  EXPECT_LE(relErr(got.loss, ref.loss), 1e-6);
  EXPECT_LE(relErr(got.dx, ref.dx), 1e-5);
  EXPECT_LE(relErr(got.dw, ref.dw), 1e-5);
}

TEST(FusedHead, IncomingGradientScalesBothGradients) {
  at::manual_seed(4);
  at::Tensor x = at::randn({64, 16}), w = at::randn({300, 16}), t = at::randint(300, {64});
  HeadResult a = runHead(fused, x, w, t, 1.0);
  HeadResult b = runHead(fused, x, w, t, 1024.0);
  EXPECT_LE(relErr(b.dx / 1024.0, a.dx), 1e-6);
  EXPECT_LE(relErr(b.dw / 1024.0, a.dw), 1e-6);
}

TEST(FusedHead, Fp16GradientsSurviveALargeVocabularyUnderLossScaling) {
  // (softmax - onehot)/N for N*V large is below fp16's smallest subnormal; the fused head applies
  // 1/N and the loss scale in fp32, so fp16 gradients keep the fp32 values.
  at::manual_seed(5);
  at::Tensor x = at::randn({512, 32}), w = at::randn({20000, 32}) * 0.02, t = at::randint(20000, {512});
  HeadResult ref = runHead(rt::lmHeadCrossEntropyReference, x, w, t, 65536.0);
  HeadResult got = runHead(fused, x.to(at::kHalf), w.to(at::kHalf), t, 65536.0);
  EXPECT_LE(relErr(got.loss, ref.loss), 1e-2);
  EXPECT_LE(relErr(got.dw, ref.dw), 2e-2);
  EXPECT_LE(relErr(got.dx, ref.dx), 2e-2);
}

TEST(Linear, MatchesAtLinearWithGradients) {
  at::manual_seed(6);
  for (bool bias : {true, false}) {
    at::Tensor x0 = at::randn({4, 33, 40}), w0 = at::randn({72, 40}), b0 = at::randn({72});
    at::Tensor gy = at::randn({4, 33, 72});
    auto run = [&](bool ours) {
      at::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
      at::Tensor b = bias ? b0.clone().requires_grad_(true) : at::Tensor();
      at::Tensor y = ours ? rt::linear(x, w, b) : at::linear(x, w, b);
      y.backward(gy);
      return std::vector<at::Tensor>{y.detach(), x.grad(), w.grad(), bias ? b.grad() : at::zeros({1})};
    };
    auto ref = run(false), got = run(true);
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_LE(relErr(got[i], ref[i]), 1e-5) << "output " << i;
  }
}
