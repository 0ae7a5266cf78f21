// test_optim.cpp — AdamW against a hand-computed reference; Adafactor and 8-bit Adam learn and hold
// the state sizes they promise; the learning-rate schedule.
#include <gtest/gtest.h>

#include <cmath>

#include "util.h"
#include "optim/partitioned.h"
#include "trainscope/workloads/memory.h"
#include "trainscope/runtime/gpt.h"
#include "trainscope/runtime/optim.h"

namespace rt = trainscope::runtime;
namespace wl = trainscope::workloads;
using namespace trainscope::testing;

TEST(AdamW, MatchesHandComputedReferenceForThreeSteps) {
  rt::TrainConfig c = tinyConfig();
  c.beta1 = 0.9;
  c.beta2 = 0.95;
  c.eps = 1e-8;
  c.weight_decay = 0.1;
  const double lr = 1e-2;
  at::manual_seed(7);
  std::vector<at::Tensor> params{at::randn({5, 3}), at::randn({4})};
  std::vector<bool> decay{true, false};
  // Reference in double, element by element: torch.optim.AdamW's algorithm.
  std::vector<std::vector<double>> p(2), m(2), v(2);
  for (int i = 0; i < 2; ++i) {
    auto acc = params[i].to(at::kDouble).contiguous();
    p[i].assign(acc.data_ptr<double>(), acc.data_ptr<double>() + acc.numel());
    m[i].assign(p[i].size(), 0.0);
    v[i].assign(p[i].size(), 0.0);
  }
  auto opt = rt::makeOptimizer(c, params, decay);
  for (int t = 1; t <= 3; ++t) {
    std::vector<at::Tensor> grads{at::randn({5, 3}), at::randn({4})};
    opt->step(grads, lr);
    for (int i = 0; i < 2; ++i) {
      auto g = grads[i].to(at::kDouble).contiguous();
      const double* gd = g.data_ptr<double>();
      for (size_t j = 0; j < p[i].size(); ++j) {
        if (decay[i]) p[i][j] *= 1 - lr * c.weight_decay;
        m[i][j] = c.beta1 * m[i][j] + (1 - c.beta1) * gd[j];
        v[i][j] = c.beta2 * v[i][j] + (1 - c.beta2) * gd[j] * gd[j];
        const double mh = m[i][j] / (1 - std::pow(c.beta1, t)), vh = v[i][j] / (1 - std::pow(c.beta2, t));
        p[i][j] -= lr * mh / (std::sqrt(vh) + c.eps);
      }
      at::Tensor ref = at::tensor(p[i], at::kDouble).view(params[i].sizes());
      EXPECT_LE(relErr(params[i], ref), 1e-6) << "param " << i << " step " << t;
    }
  }
  EXPECT_EQ(opt->stateBytes(), 2 * 4 * (15 + 4));
}

TEST(AdamW, ClippingFoldedIntoTheFusedKernelEqualsScalingFirst) {
  rt::TrainConfig c = tinyConfig();
  at::manual_seed(8);
  std::vector<at::Tensor> pa{at::randn({7, 5}), at::randn({6})}, pb{pa[0].clone(), pa[1].clone()};
  auto a = rt::makeOptimizer(c, pa, {true, false}), b = rt::makeOptimizer(c, pb, {true, false});
  for (int t = 0; t < 3; ++t) {
    std::vector<at::Tensor> g{at::randn({7, 5}), at::randn({6})};
    a->step({g[0] * 0.3, g[1] * 0.3}, 1e-2);  // scaled by hand
    b->step(g, 1e-2, 0.3);                      // folded (grad_scale = 1/0.3)
  }
  EXPECT_LE(maxRelErr(pb, pa), 1e-6);
}

TEST(AdamW, StepInPartsEqualsOneStep) {
  // The core lanes run AdamW as disjoint slices over all parameters laid end to end; the slice
  // boundaries here fall inside tensors (35 + 6 + 1 elements in 3 parts).
  rt::TrainConfig c = tinyConfig();
  at::manual_seed(9);
  std::vector<at::Tensor> pa{at::randn({7, 5}), at::randn({6}), at::randn({1})};
  std::vector<at::Tensor> pb{pa[0].clone(), pa[1].clone(), pa[2].clone()};
  auto a = rt::makeOptimizer(c, pa, {true, false, true}), b = rt::makeOptimizer(c, pb, {true, false, true});
  rt::PartitionedStep* parts = rt::partitioned(*b);
  ASSERT_NE(parts, nullptr);
  for (int t = 0; t < 3; ++t) {
    std::vector<at::Tensor> g{at::randn({7, 5}), at::randn({6}), at::randn({1})};
    a->step(g, 1e-2, 0.3);
    parts->beginPartitionedStep();
    for (int k = 0; k < 3; ++k) parts->stepPart(g, 1e-2, 0.3, k, 3);
  }
  EXPECT_EQ(b->steps(), 3);
  EXPECT_LE(maxRelErr(pb, pa), 1e-6);  // a slice's tail may take the kernel's scalar path
  EXPECT_EQ(b->stateBytes(), a->stateBytes());
}

namespace {
// Trains the tiny model on the repeating synthetic stream and returns (first, last) loss.
std::pair<double, double> trainWith(rt::OptimizerKind k, double lr, int steps, int64_t* optim_bytes) {
  rt::TrainConfig c = tinyConfig(8, 1, 32);
  c.optimizer = k;
  c.lr = lr;
  rt::Trainer t(c, cpu());
  double first = 0, last = 0;
  for (int s = 0; s < steps; ++s) {
    auto r = t.step();
    if (s == 0) first = r.loss;
    last = r.loss;
    *optim_bytes = r.optim_bytes;
  }
  return {first, last};
}
}  // namespace

TEST(Adafactor, LowersLossAndHoldsFactoredState) {
  int64_t bytes = 0;
  auto [first, last] = trainWith(rt::OptimizerKind::Adafactor, 1e-2, 40, &bytes);
  EXPECT_LT(last, 0.8 * first) << first << " -> " << last;
  rt::TrainConfig c = tinyConfig();
  int64_t expected = 0;
  rt::GptWeights w = rt::initGpt(c.model, 1, at::kCPU);
  for (const auto& p : w.flat())
    expected += wl::optimizerStateBytes({"", p.sizes().vec()}, wl::OptimizerState::Adafactor, false, 0);
  EXPECT_EQ(bytes, expected);
  // e.g. the (V, C) = (128, 32) embedding keeps 4 * (128 + 32) bytes, not 4 * 128 * 32
  EXPECT_EQ(wl::optimizerStateBytes({"wte", {128, 32}}, wl::OptimizerState::Adafactor, false, 0), 4 * (128 + 32));
}

TEST(Adam8bit, LowersLossWithTwoBytesOfStatePerParameter) {
  int64_t bytes = 0;
  auto [first, last] = trainWith(rt::OptimizerKind::Adam8bit, 3e-3, 40, &bytes);
  EXPECT_LT(last, 0.8 * first) << first << " -> " << last;
  rt::TrainConfig c = tinyConfig();
  int64_t expected = 0, numel = 0;
  rt::GptWeights w = rt::initGpt(c.model, 1, at::kCPU);
  for (const auto& p : w.flat()) {
    expected += wl::optimizerStateBytes({"", {p.numel()}}, wl::OptimizerState::Adam8bit, false, c.adam8bit_block);
    numel += p.numel();
  }
  EXPECT_EQ(bytes, expected);
  EXPECT_EQ(wl::optimizerStateBytes({"", {4096}}, wl::OptimizerState::Adam8bit, false, 256), 2 * 4096 + 8 * 16);
  EXPECT_LT(double(bytes) / double(numel), 2.5);  // vs 8 bytes/param for fp32 Adam
}

TEST(Adam8bit, TracksFp32AdamClosely) {
  int64_t b = 0;
  auto adam = trainWith(rt::OptimizerKind::AdamW, 3e-3, 30, &b);
  auto q8 = trainWith(rt::OptimizerKind::Adam8bit, 3e-3, 30, &b);
  EXPECT_LE(std::abs(q8.second - adam.second) / adam.second, 0.10);
}

TEST(Sgd, LowersLoss) {
  int64_t bytes = 0;
  auto [first, last] = trainWith(rt::OptimizerKind::SGD, 0.5, 30, &bytes);
  EXPECT_LT(last, first);
  EXPECT_EQ(bytes, 0);
}

TEST(Schedule, WarmupThenCosineToMinimum) {
  EXPECT_DOUBLE_EQ(rt::learningRate(0, 100, 10, 1.0, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(rt::learningRate(9, 100, 10, 1.0, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(rt::learningRate(10, 100, 10, 1.0, 0.1), 1.0);
  EXPECT_NEAR(rt::learningRate(99, 100, 10, 1.0, 0.1), 0.1, 1e-12);
  // progress (54 - 10) / 89 → 0.1 + 0.45 (1 + cos(pi 44/89))
  EXPECT_NEAR(rt::learningRate(54, 100, 10, 1.0, 0.1), 0.1 + 0.45 * (1 + std::cos(M_PI * 44.0 / 89.0)), 1e-12);
}
