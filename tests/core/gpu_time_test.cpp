// gpu_time_test.cpp — the GPU time model's terms, each against a hand computation: a GEMM's wave
// quantisation and roofline, a memory-bound kernel and the kernel floor, a collective's size
// regime, the host-dispatch bound, and the op lists of the two frameworks.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "../common/cli.h"

#include "../../models/src/gpu_time.h"
#include "trainscope/tuner/models.h"

namespace tn = trainscope::tuner;

namespace {

tn::Cluster flatGpu() {
  tn::Cluster c;
  c.kind = "gpu";
  c.nodes = 1;
  c.devices_per_node = 8;
  c.memory_bytes = int64_t(80) << 30;
  c.peak_flops = {{"bf16", 100e12}, {"fp16", 100e12}, {"fp32", 10e12}};
  c.memory_bandwidth = 1e12;
  c.memory_efficiency = 0.5;
  c.sm_count = 108;
  c.intra_node = {100e9, 1.0, 1e-6, 0};
  c.inter_node = {10e9, 1.0, 1e-6, 0};
  return c;
}

tn::Op gemm(double m, double n, double k) {
  tn::Op g;
  g.kind = tn::Op::Kind::Gemm;
  g.m = m, g.n = n, g.k = k;
  return g;
}

}  // namespace

TEST(GpuTime, AGemmsLastWaveIsPaidInFull) {
  tn::Cluster c = flatGpu();
  c.memory_bandwidth = 1e16;  // compute-bound: the operands' traffic is free here
  // 109 tiles of 128×128 on 108 SMs: two waves, the second with one tile: 109/216 of peak.
  const tn::Op g = gemm(128.0 * 109, 128, 8192);
  const double flops = 2.0 * 128 * 109 * 128 * 8192;
  EXPECT_NEAR(tn::gpu::gemmSeconds(g, c, 100e12, 2), flops / (100e12 * 109.0 / 216.0), 1e-15);
  // 108 tiles: one full wave.
  EXPECT_NEAR(tn::gpu::gemmSeconds(gemm(128.0 * 108, 128, 8192), c, 100e12, 2), 2.0 * 128 * 108 * 128 * 8192 / 100e12, 1e-15);
}

TEST(GpuTime, AThinGemmIsBoundByItsOperandsTraffic) {
  const tn::Cluster c = flatGpu();
  // k = 8: 2·m·n·8 FLOPs but (m·8 + 8·n + m·n) elements to move — memory-bound at 0.5 TB/s.
  const double m = 128.0 * 108, n = 4096, k = 8, e = 2;
  const double bytes = (m * k + k * n + m * n) * e;
  EXPECT_NEAR(tn::gpu::gemmSeconds(gemm(m, n, k), c, 100e12, e), bytes / 0.5e12, 1e-15);
}

TEST(GpuTime, AMemoryBoundKernelRunsAtAchievedBandwidthAndNeverUnderTheFloor) {
  tn::Cluster c = flatGpu();
  tn::Op m;
  m.bytes = 1e9;
  EXPECT_NEAR(tn::gpu::memorySeconds(m, c), 1e9 / 0.5e12, 1e-15);
  c.kernel_floor_s = 4e-6;
  m.bytes = 1000;  // 2 ns of traffic: the floor
  EXPECT_DOUBLE_EQ(tn::gpu::memorySeconds(m, c), 4e-6);
}

TEST(GpuTime, ACollectiveReachesHalfItsBusBandwidthAtTheHalfSize) {
  tn::NetworkTier tier{100e9, 0.8, 5e-6, 4.0 * (1 << 20)};
  const double n = 8, factor = 2.0 * (n - 1) / n;
  // At the half size: α(1 + log2 n) + bytes · factor / (bandwidth · efficiency / 2).
  const double half = 4.0 * (1 << 20);
  EXPECT_NEAR(tn::gpu::collectiveSeconds(tier, half, n, factor), 5e-6 * 4 + half * factor / (80e9 / 2), 1e-15);
  // Far above it, the large-message rate; one rank moves nothing.
  const double big = 4e10;
  EXPECT_NEAR(tn::gpu::collectiveSeconds(tier, big, n, factor), 5e-6 * 4 + big * factor / (80e9 * big / (big + half)), 1e-12);
  EXPECT_EQ(tn::gpu::collectiveSeconds(tier, big, 1, factor), 0);
}

TEST(GpuTime, TinyKernelsAreBoundByTheHostsDispatch) {
  tn::Cluster c = flatGpu();
  c.dispatch_s = 1e-3;  // a slow host: 75 ops per layer (forward and backward) cost 75 ms
  trainscope::workloads::Workload w;
  w.name = "toy";
  w.n_layer = 2, w.n_head = 2, w.n_embd = 64, w.n_positions = 128, w.vocab_size = 256;
  tn::Plan p;
  p.mbs = 1, p.gbs = 1, p.seq = 128;
  const tn::TimePrediction t = tn::predictTime(w, p, c);
  EXPECT_EQ(t.bound, "host launch");
  EXPECT_NEAR(t.compute_s, 2 * 75 * 1e-3 + 8 * 1e-3, 1e-9);  // layers × ops × dispatch + the head's ops
  c.dispatch_s = 0;
  EXPECT_EQ(tn::predictTime(w, p, c).bound, "device");
}

TEST(GpuTime, MegatronMaterialisesTheScoresAndTrainscopeDoesNot) {
  trainscope::workloads::Workload w;
  w.n_layer = 4, w.n_head = 16, w.n_embd = 2048, w.n_positions = 2048, w.vocab_size = 51200;
  tn::Plan p;
  p.mbs = 2, p.gbs = 2, p.seq = 2048, p.tp = 4;
  p.precision = trainscope::runtime::Precision::FP16;
  auto bytesOf = [](const tn::LayerOps& l, const std::string& name) {
    for (const auto& o : l.forward)
      if (o.name == name) return o.bytes;
    return -1.0;
  };
  const tn::LayerOps mega = tn::layerOps(w, p, tn::Framework::Megatron);
  // scale-mask-softmax reads and writes b·(a/t)·s² 16-bit scores.
  EXPECT_DOUBLE_EQ(bytesOf(mega, "scale-mask-softmax"), 2.0 * 2 * (16 / 4) * 2048.0 * 2048 * 2);
  const tn::LayerOps ours = tn::layerOps(w, p, tn::Framework::Trainscope);
  EXPECT_EQ(bytesOf(ours, "scale-mask-softmax"), -1.0);
  EXPECT_GT(bytesOf(ours, "flash attention"), 0);
  // Selective recomputation reruns Megatron's attention core, and nothing of a flash kernel.
  p.ckpt = trainscope::runtime::Checkpointing::Selective;
  EXPECT_EQ(tn::layerOps(w, p, tn::Framework::Megatron).recompute.size(), 4u);
  EXPECT_TRUE(tn::layerOps(w, p, tn::Framework::Trainscope).recompute.empty());
}

// predict --batch: one result per line in order, the command line's flags as defaults, a bad line
// answered on its own line (exit 2) without stopping the others.
TEST(PredictBatch, AnswersEveryLineInOrderAndNamesTheBadOnes) {
  using trainscope::testing::cli;
  const std::string in = trainscope::testing::tempPath("batch.jsonl");
  {
    std::ofstream f(in);
    f << R"({"tp": 2, "mbs": 2})" << "\n"
      << R"({"tp": 4, "framework": "megatron", "ckpt": "full"})" << "\n"
      << "\n"
      << R"({"tp": 0})" << "\n"
      << R"({"n_layers": 3})" << "\n";
  }
  const auto r = cli("predict --workload gpt3-1.3b --cluster a100-80gb-x8 --gbs 64 --batch " + in);
  EXPECT_EQ(r.status, 2) << r.output;
  std::vector<nlohmann::json> out;
  std::istringstream lines(r.output);
  for (std::string l; std::getline(lines, l);)
    if (!l.empty() && l[0] == '{') out.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(out.size(), 4u) << r.output;
  EXPECT_EQ(out[0]["line"], 1);
  EXPECT_EQ(out[0]["tp"], 2);
  EXPECT_EQ(out[0]["mbs"], 2);
  EXPECT_EQ(out[0]["gbs"], 64);  // the command line's default
  EXPECT_EQ(out[1]["framework"], "megatron");
  EXPECT_GT(out[1]["time"]["recompute_s"].get<double>(), 0);
  EXPECT_EQ(out[2]["line"], 4);
  EXPECT_NE(out[2]["error"].get<std::string>().find("tp: must be a whole number of at least 1"), std::string::npos);
  EXPECT_NE(out[3]["error"].get<std::string>().find("n_layers: is not a flag of predict"), std::string::npos);
}
