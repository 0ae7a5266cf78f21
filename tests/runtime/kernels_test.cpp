// test_kernels.cpp — the runtime's own compute paths against LibTorch references:
//   the fused, chunked LM head + cross-entropy vs linear + cross_entropy (values and gradients),
//   the oneDNN linear vs at::linear (values and gradients),
//   the hand-fused CPU ops (causal attention, GELU, softmax cross-entropy) vs LibTorch's.
#include <gtest/gtest.h>

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>

#include <array>
#include <atomic>
#include <thread>
#include <set>
#include <mutex>

#include "cpu/cpu_ops.h"
#include "model/fused_head.h"
#include "cpu/gemm_avx512.h"
#include "cpu/intraop.h"
#include "model/linear.h"
#include "util.h"

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
  // K = 40 takes LibTorch's dW GEMM (hand-written GEMMs disallowed too); K = 48 the hand-written one
  // (gemm_avx512.h) where AVX-512 exists.
  for (bool bias : {true, false})
  for (int64_t K : {40, 48}) {
    rt::kernels::allowHandGemms(K == 48);
    at::Tensor x0 = at::randn({4, 33, K}), w0 = at::randn({72, K}), b0 = at::randn({72});
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
  rt::kernels::allowHandGemms(true);
}

TEST(Linear, ResidualAddFusedIntoTheGemmMatchesTheTwoOps) {
  at::manual_seed(7);
  at::Tensor x0 = at::randn({2, 33, 48}), w0 = at::randn({64, 48}), b0 = at::randn({64}), r0 = at::randn({2, 33, 64});
  at::Tensor gy = at::randn({2, 33, 64});
  auto run = [&](bool ours) {
    at::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    at::Tensor b = b0.clone().requires_grad_(true), r = r0.clone().requires_grad_(true);
    at::Tensor y = ours ? rt::linearAdd(x, w, b, r) : r + at::linear(x, w, b);
    y.backward(gy);
    return std::vector<at::Tensor>{y.detach(), x.grad(), w.grad(), b.grad(), r.grad()};
  };
  auto ref = run(false), got = run(true);
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_LE(relErr(got[i], ref[i]), 1e-5) << "output " << i;
}

// ---- hand-fused CPU ops (cpu_ops.h) against the LibTorch ops they replace -----------------------

namespace {
// SDPA on the same fused qkv layout the runtime uses: (B, T, 3C) → (B, T, C).
at::Tensor sdpaReference(const at::Tensor& qkv, int64_t n_head) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  auto parts = qkv.split(C, 2);
  auto heads = [&](const at::Tensor& t) { return t.reshape({B, T, n_head, C / n_head}).transpose(1, 2); };
  at::Tensor y = at::scaled_dot_product_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]), {}, 0.0, true);
  return y.transpose(1, 2).reshape({B, T, C});
}
}  // namespace

TEST(CpuOps, CausalAttentionMatchesSdpaValuesAndGradients) {
  // T = 77 ends in a ragged query block (blocks are 32 rows); T = 128 is the benchmark's shape.
  // Both GEMM paths: the hand-written kernel (where AVX-512 exists) and the BLAS fallback.
  for (bool hand : {true, false})
  for (auto [B, T, C, H] : std::vector<std::array<int64_t, 4>>{{3, 77, 96, 3}, {2, 128, 256, 4}, {1, 1, 16, 2}}) {
    rt::kernels::allowHandGemms(hand);
    at::manual_seed(11);
    at::Tensor qkv0 = at::randn({B, T, 3 * C}), dy = at::randn({B, T, C});
    at::Tensor a = qkv0.clone().requires_grad_(true), b = qkv0.clone().requires_grad_(true);
    at::Tensor ya = rt::cpu_ops::causalAttention(a, H), yb = sdpaReference(b, H);
    ya.backward(dy);
    yb.backward(dy);
    EXPECT_LE(relErr(ya, yb), 1e-5) << "T=" << T;
    EXPECT_LE(relErr(a.grad(), b.grad()), 1e-5) << "T=" << T << " hand-written GEMMs " << hand;
  }
  rt::kernels::allowHandGemms(true);
}

TEST(CpuOps, GeluTanhMatchesLibTorch) {
  at::manual_seed(12);
  // Wide range, including the tails where σ saturates.
  at::Tensor x0 = at::cat({at::randn({5000}) * 3, at::linspace(-30, 30, 1001)}), dy = at::randn({6001});
  at::Tensor a = x0.clone().requires_grad_(true), b = x0.clone().requires_grad_(true);
  at::Tensor ya = rt::cpu_ops::geluTanh(a), yb = at::gelu(b, "tanh");
  ya.backward(dy);
  yb.backward(dy);
  EXPECT_LE(relErr(ya, yb), 1e-6);
  EXPECT_LE(relErr(a.grad(), b.grad()), 1e-5);
  EXPECT_FALSE(at::isnan(ya).any().item<bool>() || at::isnan(a.grad()).any().item<bool>());
}

TEST(CpuOps, SoftmaxCrossEntropyInPlaceGivesLossAndLogitGradient) {
  at::manual_seed(13);
  at::Tensor logits = at::randn({37, 1000}) * 4, t = at::randint(1000, {37});
  const double ref_loss = at::cross_entropy_loss(logits, t, {}, at::Reduction::Sum).item<double>();
  at::Tensor ref_grad = at::softmax(logits, 1) - at::one_hot(t, 1000).to(at::kFloat);
  at::Tensor work = logits.clone();
  const double loss = rt::cpu_ops::softmaxCrossEntropyInPlace(work, t);
  EXPECT_LE(std::abs(loss - ref_loss) / ref_loss, 1e-6);
  EXPECT_LE(relErr(work, ref_grad), 1e-6);
}

TEST(CpuOps, WeightGradientGemmMatchesMm) {
  if (!rt::kernels::handGemmsAvailable()) GTEST_SKIP() << "no AVX-512 on this CPU";
  at::manual_seed(14);
  // (M, N, K): tails in every dimension — M past a 128-row chunk, N not a multiple of 8, K of 48.
  const std::array<std::array<int64_t, 3>, 6> shapes{{{1, 1, 16}, {7, 13, 32}, {130, 29, 64}, {257, 72, 112},
                                                     {300, 8, 48}, {129, 100, 1024}}};
  for (const auto& [M, N, K] : shapes)
    for (bool accumulate : {false, true}) {
      at::Tensor a = at::randn({M, N + 5}).narrow(1, 2, N);  // strided rows: lda = N + 5
      at::Tensor b = at::randn({M, K});
      at::Tensor c0 = at::randn({N, K}), bias0 = at::randn({N});
      at::Tensor c = accumulate ? c0.clone() : at::full({N, K}, NAN), bias = accumulate ? bias0.clone() : at::full({N}, NAN);
      rt::kernels::gemmTN(M, N, K, a.data_ptr<float>(), a.stride(0), b.data_ptr<float>(), b.stride(0),
                          c.data_ptr<float>(), c.stride(0), accumulate, bias.data_ptr<float>());
      at::Tensor ref = at::mm(a.t(), b) + (accumulate ? c0 : at::zeros_like(c0));
      at::Tensor ref_bias = a.sum(0) + (accumulate ? bias0 : at::zeros_like(bias0));
      EXPECT_LE(relErr(c, ref), 1e-5) << M << "x" << N << "x" << K << " accumulate " << accumulate;
      EXPECT_LE(relErr(bias, ref_bias), 1e-5) << M << "x" << N << "x" << K << " accumulate " << accumulate;
    }
}

TEST(CpuOps, SmallGemmMatchesMmForBothLayoutsOfA) {
  if (!rt::kernels::handGemmsAvailable()) GTEST_SKIP() << "no AVX-512 on this CPU";
  at::manual_seed(15);
  // (M, N, R): row tails past the 6-row tile, column tails inside a vector, N past one 64-column tile.
  const std::array<std::array<int64_t, 3>, 5> shapes{{{1, 1, 1}, {32, 128, 64}, {13, 77, 9}, {128, 64, 32}, {7, 200, 5}}};
  for (const auto& [M, N, R] : shapes)
    for (bool trans_a : {false, true})
      for (float beta : {0.0f, 0.5f}) {
        at::Tensor a = trans_a ? at::randn({R, M + 3}).narrow(1, 0, M) : at::randn({M, R + 3}).narrow(1, 0, R);
        at::Tensor b = at::randn({R, N + 2}).narrow(1, 0, N);
        at::Tensor c0 = at::randn({M, N + 1}).narrow(1, 0, N);
        at::Tensor c = beta == 0.0f ? at::full({M, N + 1}, NAN).narrow(1, 0, N) : c0.clone();
        const int64_t lda = a.stride(0);
        rt::kernels::gemmSmall(M, N, R, 0.75f, a.data_ptr<float>(), trans_a ? 1 : lda, trans_a ? lda : 1,
                               b.data_ptr<float>(), b.stride(0), beta, c.data_ptr<float>(), c.stride(0));
        at::Tensor ref = 0.75 * at::mm(trans_a ? a.t() : a, b) + (beta == 0.0f ? at::zeros_like(c0) : beta * c0);
        EXPECT_LE(relErr(c, ref), 1e-5) << M << "x" << N << "x" << R << " trans_a " << trans_a << " beta " << beta;
      }
}

TEST(CpuOps, IntraOpLoopsRunOnSeveralThreads) {
  // at::parallel_for is inline and silently serial in code built without -fopenmp; the runtime's
  // kernels go through intraop::parallelFor, which must really fork.
  const int before = at::get_num_threads();
  at::set_num_threads(2);
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::atomic<int64_t> covered{0};
  rt::intraop::parallelFor(0, 1000, 1, [&](int64_t b, int64_t e) {
    covered += e - b;
    std::lock_guard<std::mutex> lock(mu);
    ids.insert(std::this_thread::get_id());
  });
  at::set_num_threads(before);
  EXPECT_EQ(covered.load(), 1000);
  EXPECT_EQ(ids.size(), 2u);
}
