// test_precision.cpp — bf16 tracks fp32; fp16's dynamic loss scaler skips overflowing steps and
// recovers.
#include <gtest/gtest.h>

#include "util.h"

namespace rt = trainscope::runtime;
using namespace trainscope::testing;

namespace {
rt::TrainConfig trainingConfig(rt::Precision p) {
  rt::TrainConfig c = tinyConfig(8, 1, 32);
  c.precision = p;
  c.lr = 3e-3;
  return c;
}
double lossAfter(rt::Trainer& t, int steps) {
  double last = 0;
  for (int k = 0; k < steps; ++k) last = t.step().loss;
  return last;
}
}  // namespace

TEST(Precision, Bf16StaysWithinAFewPercentOfFp32) {
  rt::Trainer f32(trainingConfig(rt::Precision::FP32), cpu());
  rt::Trainer b16(trainingConfig(rt::Precision::BF16), cpu());
  const double l32 = lossAfter(f32, 30), l16 = lossAfter(b16, 30);
  EXPECT_LT(l32, 4.0);  // it learned something (ln 128 = 4.85 at the start)
  EXPECT_LE(std::abs(l16 - l32) / l32, 0.05) << "fp32 " << l32 << " bf16 " << l16;
}

TEST(Precision, Bf16KeepsFp32MasterWeights) {
  rt::Trainer t(trainingConfig(rt::Precision::BF16), cpu());
  t.step();
  for (const auto& p : t.masterParams()) EXPECT_EQ(p.scalar_type(), at::kFloat);
  for (const auto& g : t.mainGrads()) EXPECT_EQ(g.scalar_type(), at::kFloat);
}

TEST(Precision, Fp16ScalerSkipsForcedOverflowAndRecovers) {
  rt::TrainConfig c = trainingConfig(rt::Precision::FP16);
  c.fp16_init_scale = 1024;
  rt::Trainer t(c, cpu());
  for (int k = 0; k < 3; ++k) EXPECT_FALSE(t.step().skipped);
  auto before = snapshot(t.masterParams());
  const double scale = t.lossScale();
  t.injectOverflowOnce();
  auto r = t.step();
  EXPECT_TRUE(r.skipped);
  EXPECT_DOUBLE_EQ(t.lossScale(), scale / 2);
  EXPECT_EQ(maxRelErr(t.masterParams(), before), 0.0) << "a skipped step must not move the weights";
  double first = 0, last = 0;
  for (int k = 0; k < 10; ++k) {
    auto s = t.step();
    EXPECT_FALSE(s.skipped);
    if (k == 0) first = s.loss;
    last = s.loss;
  }
  EXPECT_LT(last, first);
}

TEST(Precision, Fp16HugeInitialScaleBacksOffUntilStepsSucceed) {
  rt::TrainConfig c = trainingConfig(rt::Precision::FP16);
  c.fp16_init_scale = 1e12;  // overflows fp16 gradients for sure
  rt::Trainer t(c, cpu());
  int skipped = 0;
  double first = 0, last = 0;
  for (int k = 0; k < 60; ++k) {
    auto r = t.step();
    skipped += r.skipped;
    if (k == 0) first = r.loss;
    last = r.loss;
  }
  EXPECT_GE(skipped, 1);
  EXPECT_LT(skipped, 40);
  EXPECT_LT(t.lossScale(), 1e12);
  EXPECT_LT(last, first);
}

TEST(Precision, NonFiniteGradientInFp32IsSkippedNotApplied) {
  rt::Trainer t(trainingConfig(rt::Precision::FP32), cpu());
  t.step();
  auto before = snapshot(t.masterParams());
  t.injectOverflowOnce();
  EXPECT_TRUE(t.step().skipped);
  EXPECT_EQ(maxRelErr(t.masterParams(), before), 0.0);
  EXPECT_FALSE(t.step().skipped);
}

TEST(Precision, Fp16GrowsScaleAfterCleanInterval) {
  rt::TrainConfig c = trainingConfig(rt::Precision::FP16);
  c.fp16_init_scale = 256;
  c.fp16_growth_interval = 3;
  rt::Trainer t(c, cpu());
  for (int k = 0; k < 3; ++k) t.step();
  EXPECT_DOUBLE_EQ(t.lossScale(), 512);
}
