// fsdp_time_test.cpp — PyTorch FSDP's gradient path (models/src/fsdp_time.cpp), against a hand
// computation: FSDP1's gradient predivide factor, the bytes of the flat gradient's assembly, the cast to
// the reduce dtype and the pre-division, and what the assembly adds to a micro-batch's backward.
#include <gtest/gtest.h>

#include <algorithm>

#include "../../models/src/gpu_time.h"
#include "trainscope/tuner/models.h"
#include "flat_cluster.h"

namespace tn = trainscope::tuner;

TEST(FsdpGradient, PredivideFactorIsFsdp1s) {
  // _get_gradient_predivide_factor: double f while n % f == 0 and n / f > f.
  EXPECT_DOUBLE_EQ(tn::gpu::fsdpPredivideFactor(1), 1);
  EXPECT_DOUBLE_EQ(tn::gpu::fsdpPredivideFactor(2), 2);
  EXPECT_DOUBLE_EQ(tn::gpu::fsdpPredivideFactor(8), 4);
  EXPECT_DOUBLE_EQ(tn::gpu::fsdpPredivideFactor(16), 4);
  EXPECT_DOUBLE_EQ(tn::gpu::fsdpPredivideFactor(64), 8);
  EXPECT_DOUBLE_EQ(tn::gpu::fsdpPredivideFactor(6), 4);  // 6 % 2 == 0 and 3 > 2: 4 (FSDP then divides by 1.5)
}

TEST(FsdpGradient, BytesOfTheFlatGradientTheCastAndThePredivide) {
  // 1e6 bf16 gradients reduced in fp32 over 8 ranks: the views' gradients read and the flat one
  // written (2 · 2 bytes); the cast reads 2 and writes 4; the predivide reads and writes 4 each.
  const auto fp32 = tn::gpu::fsdpGradientBytes(1e6, 2, 4, 8);
  EXPECT_DOUBLE_EQ(fp32.copy_bytes, 4e6);
  EXPECT_DOUBLE_EQ(fp32.side_bytes, 6e6 + 8e6);
  // Reduced in bf16 (MixedPrecision PURE): no cast, the predivide in bf16.
  const auto bf16 = tn::gpu::fsdpGradientBytes(1e6, 2, 2, 8);
  EXPECT_DOUBLE_EQ(bf16.copy_bytes, 4e6);
  EXPECT_DOUBLE_EQ(bf16.side_bytes, 4e6);
  // One rank: no FSDP sharding, nothing.
  const auto one = tn::gpu::fsdpGradientBytes(1e6, 2, 4, 1);
  EXPECT_DOUBLE_EQ(one.copy_bytes + one.side_bytes, 0);
}

TEST(FsdpGradient, TheFlatGradientAddsToEachMicroBatchsBackward) {
  tn::Cluster c = trainscope::testing::flatGpu();  // 1 TB/s at 50%: 0.5 GB per ms
  trainscope::workloads::Workload w;
  w.name = "toy", w.n_layer = 4, w.n_head = 16, w.n_embd = 1024, w.n_positions = 512, w.vocab_size = 1024;
  tn::Plan p;
  p.dp = 8, p.mbs = 16, p.gbs = 256, p.seq = 512, p.zero = trainscope::runconfig::ZeroStage::Parameters;
  tn::TimeOptions fsdp, deepspeed;
  fsdp.framework = tn::Framework::Fsdp, deepspeed.framework = tn::Framework::Deepspeed;
  // The same kernels and flash rates (the flat cluster sets no profile): only FSDP's flat gradient
  // differs on the device; both device-bound.
  const tn::TimePrediction a = tn::predictTime(w, p, c, fsdp), b = tn::predictTime(w, p, c, deepspeed);
  ASSERT_EQ(a.bound, "device");
  ASSERT_EQ(b.bound, "device");
  const double layer = tn::gpu::layerParams(w, p), others = tn::gpu::stageParams(w, p, 0) - 4 * layer;
  const double e = double(p.elementBytes());
  auto copy = [&](double n) { return std::max(2.0 * n * e / (1e12 * 0.5), c.kernel_floor_s); };
  const double M = 256.0 / (16 * 8);
  EXPECT_NEAR(a.compute_s - b.compute_s, M * (4 * copy(layer) + copy(others)), 1e-12);
  // Without sharding (ZeRO 0: DDP) nothing is added.
  p.zero = trainscope::runconfig::ZeroStage::None;
  EXPECT_NEAR(tn::predictTime(w, p, c, fsdp).compute_s, tn::predictTime(w, p, c, deepspeed).compute_s, 1e-12);
}

TEST(FsdpOverlap, OverlappedCollectivesSlowTheLayerTheyHideBehind) {
  // A layer lasts max(chain, compute + s · min(chain, compute)); what shows is that less the compute.
  // chain 2 ms beside 3 ms of compute at s 0.5: 3 + 1 = 4 ms, 1 ms shows per later layer.
  EXPECT_DOUBLE_EQ(tn::gpu::zeroLayerSeconds(2e-3, 1e-3, 1e-3, 3e-3, 4, 1, 0.5), 2e-3 + 3 * 1e-3);
  // chain 4 ms beside 3 ms: the compute slowed over all of it, 3 + 1.5 = 4.5 ms: 1.5 ms shows.
  EXPECT_DOUBLE_EQ(tn::gpu::zeroLayerSeconds(2e-3, 2e-3, 2e-3, 3e-3, 4, 1, 0.5), 2e-3 + 3 * 1.5e-3);
  // s 0: as before (max(0, chain − compute)); no prefetch: every collective shows, none overlaps.
  EXPECT_DOUBLE_EQ(tn::gpu::zeroLayerSeconds(2e-3, 1e-3, 1e-3, 3e-3, 4, 1, 0), 2e-3);
  EXPECT_DOUBLE_EQ(tn::gpu::zeroLayerSeconds(2e-3, 2e-3, 1e-3, 3e-3, 4, 0, 0.5), 2e-3 + 3 * 3e-3);
  // The fsdp profile's default and its bounds: a share of the rate, in [0, 0.5].
  EXPECT_DOUBLE_EQ(tn::builtinProfile(tn::Framework::Fsdp).overlap_slowdown, 0.1);
  EXPECT_DOUBLE_EQ(tn::builtinProfile(tn::Framework::Megatron).overlap_slowdown, 0);
}

TEST(FsdpRing, AllGathersAndReduceScattersPayEachRingHopsLatency) {
  // 10 us a hop, 100 GB/s, 8 MB over 128 ranks, factor 127/128: 127 hops (a tree's 1 + log2 128 = 8
  // in collectiveSeconds); the bandwidth term unchanged.
  const tn::NetworkTier tier{100e9, 1.0, 10e-6, 0};
  const double bw = 8e6 * 127.0 / 128.0 / 100e9;
  EXPECT_NEAR(tn::gpu::ringCollectiveSeconds(tier, 8e6, 128, 127.0 / 128.0), 127 * 10e-6 + bw, 1e-12);
  EXPECT_NEAR(tn::gpu::collectiveSeconds(tier, 8e6, 128, 127.0 / 128.0), 8 * 10e-6 + bw, 1e-12);
  // Two ranks: one hop, never below the tree's charge (2 for n = 2); one rank: nothing.
  EXPECT_NEAR(tn::gpu::ringCollectiveSeconds(tier, 8e6, 2, 0.5), 2 * 10e-6 + 8e6 * 0.5 / 100e9, 1e-12);
  EXPECT_DOUBLE_EQ(tn::gpu::ringCollectiveSeconds(tier, 8e6, 1, 0), 0);
}

TEST(ReduceDtype, TheOptionsReduceDtypeDoublesTheReduceScattersBytesFromBf16ToFp32) {
  // DeepSpeed ZeRO-2 on 8 ranks of the flat cluster, no latency, nothing hidden (dp_overlap 0): per
  // micro-batch a reduce-scatter of P gradients in the reduce dtype, P·r·(n − 1)/n bytes at 100 GB/s,
  // then one all-gather of the fp32 master weights, P·4·(n − 1)/n. fp32 (4 bytes) is twice bf16's (2).
  tn::Cluster c = trainscope::testing::flatGpu();
  c.intra_node.latency = 0;
  trainscope::workloads::Workload w;
  w.name = "toy", w.n_layer = 4, w.n_head = 16, w.n_embd = 1024, w.n_positions = 512, w.vocab_size = 1024;
  tn::Plan p;
  p.dp = 8, p.mbs = 4, p.gbs = 64, p.seq = 512, p.zero = trainscope::runconfig::ZeroStage::Gradients;
  tn::TimeOptions o;
  o.framework = tn::Framework::Deepspeed, o.dp_overlap = 0;
  const double P = tn::gpu::stageParams(w, p, 0), M = 64.0 / (4 * 8), n = 8;
  const double gather = P * 4 * (n - 1) / n / 100e9;
  auto reduce = [&](double bytes) {
    o.reduce_bytes = bytes;
    return tn::predictTime(w, p, c, o).dp_comm_s - gather;
  };
  const double fp32 = reduce(4), bf16 = reduce(2), profile = reduce(0);
  EXPECT_NEAR(bf16, M * P * 2 * (n - 1) / n / 100e9, 1e-12);
  EXPECT_NEAR(fp32, M * P * 4 * (n - 1) / n / 100e9, 1e-12);
  EXPECT_NEAR(fp32 / bf16, 2.0, 1e-12);
  EXPECT_NEAR(profile, bf16, 1e-12);  // DeepSpeed's profile: communication_data_type = the model's (bf16)
  // The option overrides the profile and nothing else: profileFor puts it in, the cluster keeps its own.
  o.reduce_bytes = 4;
  EXPECT_DOUBLE_EQ(tn::profileFor(c, o).reduce_bytes, 4);
  EXPECT_DOUBLE_EQ(c.profile(tn::Framework::Deepspeed).reduce_bytes, 2);
}
