// fp8_cache_test.cpp — --precision fp8's weight cache and its Llama runs (runtime/src/model/fp8.h):
// each weight is cast to FP8 (and its column-major copy made) once per optimizer step and reused by
// every micro-batch and recomputation; a checkpointed block's recomputation runs the same FP8
// linears; tiny-llama's fp8 loss tracks bf16's over 200 steps.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>
#include <set>

#include "model/fp8.h"
#include "model/linear.h"
#include "util.h"

namespace rt = trainscope::runtime;
namespace fp8 = trainscope::runtime::fp8;
using namespace trainscope::testing;

namespace {

rt::TrainConfig llamaConfig(rt::Precision p, int64_t mbs, int64_t ga, int64_t seq = 32) {
  rt::TrainConfig c;
  c.workload = "tiny-llama";
  c.seq = seq, c.mbs = mbs, c.ga = ga, c.steps = 20;
  c.device = rt::DeviceRequest::CPU;
  c.min_lr_ratio = 1.0, c.clip = 0.0, c.lr = 1e-3, c.cpu_lanes = 1;
  c.precision = p;
  rt::resolve(c);
  return c;
}

}  // namespace

// Within a step the weight is cast once: four micro-batches' forwards reuse the first one's copy
// (the same tensor), which quantises exactly as a fresh cast would; endStep drops it.
TEST(Fp8Cache, AWeightIsCastOncePerStepAndDroppedAtItsEnd) {
  at::manual_seed(3);
  at::Tensor w = (at::randn({32, 48}) * 0.05).to(at::kBFloat16).requires_grad_(true);
  fp8::Recipe recipe;
  recipe.add(w, "w");
  fp8::Meta* m = recipe.find(w);
  for (int step = 0; step < 2; ++step) {
    at::Tensor first;
    for (int micro = 0; micro < 4; ++micro) {
      at::Tensor x = (at::randn({16, 48}) * (1 + micro)).to(at::kBFloat16);
      fp8::Scope scope(&recipe);
      at::Tensor y = rt::linear(x, w, at::Tensor());
      y.sum().backward();
      ASSERT_TRUE(m->weight_q.defined());
      if (micro == 0) first = m->weight_q;
      EXPECT_TRUE(m->weight_q.is_same(first)) << "micro-batch " << micro << " cast the weight again";
    }
    // The cached copy is the weight's cast at this step's scale, and its column-major twin holds the same values.
    const double s = m->weight_scale;
    const at::Tensor fresh = (w.detach().to(at::kFloat) * s).clamp(-fp8::kE4M3Max, fp8::kE4M3Max).to(at::kFloat8_e4m3fn);
    EXPECT_TRUE(at::equal(m->weight_q.to(at::kFloat), fresh.to(at::kFloat)));
    EXPECT_TRUE(at::equal(m->weight_t.to(at::kFloat), fresh.to(at::kFloat)));
    EXPECT_EQ(recipe.cachedWeightBytes(), 2 * w.numel());  // one byte each, twice
    recipe.endStep({}, 0, step);
    EXPECT_FALSE(m->weight_q.defined());
    EXPECT_EQ(recipe.cachedWeightBytes(), 0);
    // The optimizer changes the weight between steps: the next step casts the new values.
    { c10::NoGradGuard g; w.mul_(1.5); }
  }
}

// Gradient accumulation 4 (one sample a micro-batch, the weights cast once per step) against one
// micro-batch of 4: the same samples, the same FP8 scales, so the same losses up to the bf16
// gradient sums' order (1e-3, as the FP8 layouts are held to).
TEST(Fp8Cache, GradientAccumulationFourGivesTheLossesOfOneMicroBatch) {
  rt::Trainer one(llamaConfig(rt::Precision::FP8, 4, 1), cpu());
  rt::Trainer four(llamaConfig(rt::Precision::FP8, 1, 4), cpu());
  double worst = 0;
  for (int k = 0; k < 8; ++k) {
    const double a = one.step().loss, b = four.step().loss;
    worst = std::max(worst, std::abs(a - b) / a);
    EXPECT_LE(std::abs(a - b) / a, 1e-3) << "step " << k;
    EXPECT_EQ(one.takeFp8Scales().size(), four.takeFp8Scales().size());
  }
  std::printf("fp8 ga 4 vs mbs 4: worst relative loss gap %.3g over 8 steps\n", worst);
}

// Full recomputation reruns the block on detached copies of its weights; those copies run the
// originals' FP8 linears (fp8::AliasScope), so the gradients equal those without recomputation.
// (Before, the recomputed block's linears ran bf16: gradients off by FP8's error, ~1e-2.)
TEST(Fp8Cache, FullRecomputationRunsTheSameFp8Linears) {
  rt::TrainConfig none = llamaConfig(rt::Precision::FP8, 2, 2), full = none;
  full.ckpt = rt::Checkpointing::Full;
  rt::Trainer a(none, cpu()), b(full, cpu());
  const double la = a.computeGradients(0), lb = b.computeGradients(0);
  EXPECT_NEAR(la, lb, 1e-6 * std::abs(la));
  const auto ga = a.mainGrads(), gb = b.mainGrads();
  ASSERT_EQ(ga.size(), gb.size());
  EXPECT_LE(maxRelErr(gb, ga), 1e-5);
}

// The fp8-vs-bf16 curve for tiny-llama (RMSNorm, RoPE, SwiGLU, GQA, untied), the tolerance
// docs/config-reference.md states for --precision fp8: over 200 steps the fp8 loss stays within 5% of
// bf16's at every step after the first 10, the mean of the last 20 within 2%; every block linear's
// three scales are recorded at every step.
TEST(Fp8Cache, TinyLlamaTracksBf16Over200Steps) {
  auto config = [](rt::Precision p) {
    rt::TrainConfig c = llamaConfig(p, 4, 1, 32);
    c.lr = 1e-3;
    c.steps = 200;
    return c;
  };
  rt::Trainer b16(config(rt::Precision::BF16), cpu());
  rt::Trainer f8(config(rt::Precision::FP8), cpu());
  const int64_t linears = 4 * f8.config().model.n_layer;  // qkv, projection, gate+up, down
  double worst = 0, tail16 = 0, tail8 = 0;
  int worst_at = 0;
  for (int k = 0; k < 200; ++k) {
    const double l16 = b16.step().loss, l8 = f8.step().loss;
    if (k % 10 == 0) std::printf("  step %3d bf16 %.4f fp8 %.4f\n", k, l16, l8);
    const auto rows = f8.takeFp8Scales();
    ASSERT_EQ(int64_t(rows.size()), linears * 3) << "step " << k;
    std::set<std::string> tensors;
    for (const auto& r : rows) {
      tensors.insert(r.tensor);
      ASSERT_EQ(r.step, k);
      ASSERT_GT(r.scale, 0) << r.tensor << " " << r.role;
      ASSERT_TRUE(std::isfinite(r.amax)) << r.tensor << " " << r.role;
    }
    ASSERT_EQ(int64_t(tensors.size()), linears);
    ASSERT_TRUE(std::isfinite(l8)) << "step " << k;
    if (k >= 10 && std::abs(l8 - l16) / l16 > worst) worst = std::abs(l8 - l16) / l16, worst_at = k;
    if (k >= 180) tail16 += l16 / 20, tail8 += l8 / 20;
  }
  EXPECT_LT(tail16, 4.5);  // bf16 learned something (ln 256 = 5.55)
  EXPECT_LE(worst, 0.05);
  EXPECT_LE(std::abs(tail8 - tail16) / tail16, 0.02) << "bf16 " << tail16 << " fp8 " << tail8;
  std::printf("tiny-llama fp8 vs bf16 over 200 steps: worst step gap %.4f (step %d), last-20 mean bf16 %.5f fp8 %.5f\n", worst,
              worst_at, tail16, tail8);
}
