// cpu_window_time_test.cpp — the CPU time model prices a sliding window (Mistral every layer, Qwen2
// from max_window_layers on) as this runtime's CPU kernels run it (models/src/time_model.cpp,
// cpuAttentionShare; docs/time-model.md, "Sliding windows on the CPU"), against hand computations.
#include <gtest/gtest.h>

#include "trainscope/tuner/models.h"
#include "trainscope/workloads/flops.h"
#include "trainscope/workloads/workload.h"

namespace tn = trainscope::tuner;
namespace wl = trainscope::workloads;
namespace rt = trainscope::runconfig;

namespace {

tn::Plan cpuPlan(int64_t seq, rt::Precision precision) {
  tn::Plan p;
  p.dp = 1, p.tp = 1, p.pp = 1, p.mbs = 2, p.gbs = 4, p.seq = seq;  // 2 micro-batches
  p.precision = precision;
  p.cpu = true;
  return p;
}

wl::Workload windowed(int64_t window, int64_t from_layer = 0) {
  wl::Workload w = wl::load("tiny-llama");  // 2 layers, hidden 64, 4 query heads of 16, GQA 2
  w.n_positions = 1024;
  w.sliding_window = window;
  w.window_from_layer = from_layer;
  return w;
}

}  // namespace

// fp32: cpu_ops::causalAttention runs blocks of 32 query rows, each over the keys from its first
// row's window start to its last row. seq 256, window 64: the blocks at r0 = 0, 32 take 32 and 64
// keys, the six from r0 = 64 on take 32 + 64 − 1 = 95 each: 32·(32 + 64 + 6·95) = 21312 products
// against causal's 32·32·(1 + … + 8) = 36864, a share of 666/1152 = 0.578125 (the continuum's
// windowKeys would say 112/256 = 0.4375: the blocks' diagonal rectangles are not skipped).
TEST(CpuWindowTime, TheFp32KernelsBlocksSetTheWindowsShareOfTheProducts) {
  const tn::Plan p = cpuPlan(256, rt::Precision::FP32);
  EXPECT_DOUBLE_EQ(tn::cpuAttentionShare(windowed(64), p, 0), 666.0 / 1152.0);
  EXPECT_DOUBLE_EQ(tn::cpuAttentionShare(windowed(0), p, 0), 1.0);    // no window
  EXPECT_DOUBLE_EQ(tn::cpuAttentionShare(windowed(256), p, 0), 1.0);  // a window as long as the sequence
  // seq 100 (a last block of 4 rows), window 40: blocks r0 = 0, 32, 64, 96 of 32, 32, 32, 4 rows from
  // keys 0, 0, 25, 57: 32·32 + 32·64 + 32·(96 − 25) + 4·(100 − 57) = 5516, causal 32·(32 + 64 + 96) + 4·100 = 6544.
  EXPECT_DOUBLE_EQ(tn::cpuAttentionShare(windowed(40), cpuPlan(100, rt::Precision::FP32), 0), 5516.0 / 6544.0);
  // Qwen2: layer 0 full, layer 1 windowed.
  EXPECT_DOUBLE_EQ(tn::cpuAttentionShare(windowed(64, 1), p, 0), 1.0);
  EXPECT_DOUBLE_EQ(tn::cpuAttentionShare(windowed(64, 1), p, 1), 666.0 / 1152.0);
  // 16-bit: SDPA with the window as attn_mask skips no block (share 1); under CP the ring skips the
  // block pairs outside the window: the continuum's windowKeys share.
  EXPECT_DOUBLE_EQ(tn::cpuAttentionShare(windowed(64), cpuPlan(256, rt::Precision::BF16), 0), 1.0);
  tn::Plan cp = p;
  cp.cp = 2;
  EXPECT_DOUBLE_EQ(tn::cpuAttentionShare(windowed(64), cp, 0), wl::windowKeys(64, 256) / 256.0);
}

// The step: every windowed layer's core at its share, forward once and backward twice, per micro-batch.
// The unwindowed core of a layer: 4·b·s·s·NH·HS = 4·2·256·256·64 FLOPs at the cluster's matmul
// efficiency for its per-head size; the whole peak (one rank), fp32.
TEST(CpuWindowTime, AWindowedLayersCoreCostsItsShareOfTheProductsInTheStep) {
  const tn::Cluster c = tn::loadCluster("cpu-local");
  const tn::Plan p = cpuPlan(256, rt::Precision::FP32);
  const double flops = 4.0 * 2 * 256 * 256 * 64, heads = 4, share = 666.0 / 1152.0;
  auto core = [&](double f) { return f / (c.peak("fp32") * c.matmulEfficiency(f / heads)); };
  const double per_layer = core(share * flops) - core(flops);  // < 0
  const tn::TimePrediction full = tn::predictTime(windowed(0), p, c), win = tn::predictTime(windowed(64), p, c);
  const double M = 2, layers = 2;
  EXPECT_LT(win.compute_s, full.compute_s);
  EXPECT_NEAR(win.compute_s - full.compute_s, M * layers * 3.0 * per_layer, 1e-12);
  // Qwen2's window from layer 1: one layer's worth.
  EXPECT_NEAR(tn::predictTime(windowed(64, 1), p, c).compute_s - full.compute_s, M * 3.0 * per_layer, 1e-12);
  // Selective checkpointing reruns the windowed cores.
  tn::Plan sel = p;
  sel.ckpt = rt::Checkpointing::Selective;
  EXPECT_NEAR(tn::predictTime(windowed(64), sel, c).recompute_s - tn::predictTime(windowed(0), sel, c).recompute_s,
              M * layers * per_layer, 1e-12);
}

// bf16: the products are not cut (SDPA), but the (1, s, s) bf16 mask is written and read forward
// (2·256·256·2 bytes) and read backward (256·256·2) per windowed layer and micro-batch, at the
// cluster's memory bandwidth (10 GB/s, one rank).
TEST(CpuWindowTime, SixteenBitRunsPayTheMasksBytesNotFewerProducts) {
  const tn::Cluster c = tn::loadCluster("cpu-local");
  const tn::Plan p = cpuPlan(256, rt::Precision::BF16);
  const double bytes = 2.0 * 256 * 256 * 2 + 256.0 * 256 * 2;
  const double delta = tn::predictTime(windowed(64), p, c).compute_s - tn::predictTime(windowed(0), p, c).compute_s;
  EXPECT_NEAR(delta, 2.0 * 2.0 * bytes / c.memory_bandwidth, 1e-12);
}
