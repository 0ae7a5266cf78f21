// context_parallel_models_test.cpp — the models of context parallelism (Plan::cp), each term against a
// hand computation: the plan's world and validity, the op list of a CP rank (s/cp tokens, queries
// over all s keys), the memory per rank (activations ÷ cp, the ring's K/V blocks — a grouped-query
// model's at its K/V heads' width), and the ring's exposed exchange in the GPU and the CPU time
// models; `predict --cp`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "../common/cli.h"

#include "../../models/src/gpu_time.h"
#include "trainscope/tuner/models.h"

namespace tn = trainscope::tuner;
namespace rt = trainscope::runconfig;

namespace {

trainscope::workloads::Workload gpt() {
  trainscope::workloads::Workload w;
  w.name = "cp-gpt";
  w.n_layer = 4, w.n_head = 16, w.n_embd = 2048, w.n_positions = 8192, w.vocab_size = 32000;
  return w;
}

tn::Plan cpPlan(int64_t cp) {
  tn::Plan p;
  p.cp = cp, p.dp = 1, p.mbs = 1, p.gbs = 2, p.seq = 8192;  // M = 2 micro-batches
  p.precision = rt::Precision::BF16;
  return p;
}

tn::Cluster gpuCluster(double nvlink_bytes_per_s) {
  tn::Cluster c;
  c.kind = tn::ClusterKind::Gpu;
  c.nodes = 1, c.devices_per_node = 8;
  c.memory_bytes = int64_t(80) << 30;
  c.peak_flops = {{"bf16", 100e12}, {"fp16", 100e12}, {"fp32", 10e12}};
  c.memory_bandwidth = 1e12, c.memory_efficiency = 0.5, c.sm_count = 108;
  c.intra_node = {nvlink_bytes_per_s, 1.0, 1e-6, 0};
  c.inter_node = {10e9, 1.0, 1e-6, 0};
  return c;
}

const tn::Op& find(const std::vector<tn::Op>& ops, const std::string& name) {
  for (const auto& o : ops)
    if (o.name == name) return o;
  ADD_FAILURE() << "no op " << name;
  return ops.front();
}

}  // namespace

TEST(ContextParallelModels, ThePlanCountsCpRanksAndNeedsTwoChunksPerRank) {
  const auto w = gpt();
  tn::Plan p = cpPlan(4);
  p.dp = 2, p.tp = 2;
  p.gbs = 4;
  EXPECT_EQ(p.world(), 2 * 4 * 2);
  EXPECT_EQ(p.gradientGroup(), 8);
  EXPECT_EQ(p.localSeq(), 2048);
  EXPECT_EQ(tn::whyInvalid(w, p), "");
  EXPECT_NE(p.describe().find(" cp4 "), std::string::npos) << p.describe();
  p.seq = 8188;  // a multiple of 4, not of 2·cp = 8: the load-balanced chunks do not split
  EXPECT_EQ(tn::whyInvalid(w, p), "context parallelism needs seq=8188 divisible by 2 x cp=8");
  // Interleaving: layers over pp·v, and the micro-batches in groups of pp.
  tn::Plan v = cpPlan(1);
  v.pp = 2, v.virtual_stages = 2, v.gbs = 3;
  EXPECT_EQ(tn::whyInvalid(w, v), "interleaving needs the micro-batches per step (ga=3) divisible by pp=2");
  v.gbs = 4;
  EXPECT_EQ(tn::whyInvalid(w, v), "");
  EXPECT_NE(v.describe().find("interleaved v2"), std::string::npos) << v.describe();
  v.virtual_stages = 4;
  EXPECT_EQ(tn::whyInvalid(w, v), "interleaving needs n_layer=4 divisible by pp x virtual_stages=2 x 4");
  v.pp = 1;
  EXPECT_EQ(tn::whyInvalid(w, v), "interleaving (virtual_stages=4) needs pp > 1");
}

TEST(ContextParallelModels, ACpRankRunsItsTokensAndAttendsOverTheWholeSequence) {
  const auto w = gpt();
  const tn::LayerOps one = tn::layerOps(w, cpPlan(1), tn::Framework::Trainscope);
  const tn::LayerOps two = tn::layerOps(w, cpPlan(2), tn::Framework::Trainscope);
  // The GEMMs of the layer: half the rows.
  EXPECT_DOUBLE_EQ(find(two.forward, "qkv").m, 4096);
  EXPECT_DOUBLE_EQ(find(two.forward, "fc1").flops(), find(one.forward, "fc1").flops() / 2);
  // Flash attention: 4096 queries against 8192 keys — half of the causal products, balanced.
  const tn::Op& fa = find(two.forward, "flash attention");
  EXPECT_DOUBLE_EQ(fa.m, 4096);
  EXPECT_DOUBLE_EQ(fa.n, 8192);
  EXPECT_DOUBLE_EQ(fa.flops(), find(one.forward, "flash attention").flops() / 2);
  // It reads Q and writes O of its tokens, and reads every K and V block: 2·(4096 + 8192)·h·e.
  EXPECT_DOUBLE_EQ(fa.bytes, 2.0 * (4096 + 8192) * 2048 * 2);
  // What the layer keeps is its own tokens' (the blocks come round again in backward): half.
  EXPECT_DOUBLE_EQ(two.saved, one.saved / 2);
}

TEST(ContextParallelModels, MemoryHalvesTheActivationsAndHoldsTheRingsBlocks) {
  const auto w = gpt();
  const tn::StageMemory one = tn::predictMemory(w, cpPlan(1)).stages[0];
  const tn::StageMemory two = tn::predictMemory(w, cpPlan(2)).stages[0];
  // Activations (and the int64 inputs and targets): ÷ cp, to the byte's rounding.
  EXPECT_NEAR(double(two.activations), double(one.activations) / 2, 1.0);
  // The weights are whole on every CP rank.
  EXPECT_EQ(two.params, one.params);
  EXPECT_EQ(two.optimizer, one.optimizer);
  // The ring: K, V and (backward) dK, dV, each current and arriving: 8 blocks of b·(s/cp)·h/t, bf16.
  EXPECT_EQ(one.ring, 0);
  EXPECT_EQ(two.ring, int64_t(8.0 * 1 * 4096 * 2048 * 2));
  // The blocks live during the attention core's backward; the allowance (the other ops' gradients
  // between ops, the fresh embedding gradient) at the layer's other moments: the larger of the two.
  EXPECT_EQ(two.layerBackward(), two.activations + two.head + two.recompute + std::max(two.allowance, two.ring) +
                                     two.grad_bucket + two.gathered);
  EXPECT_GT(two.allowance, two.ring);  // 6·s/cp·b·h·e = 96 MiB and the 125 MiB embedding's fresh gradient
  // Under PP 2 no fresh embedding gradient joins the allowance: 6 · 4096 · 1 · 2048 · 2 = 96 MiB, below
  // the ring's 128 MiB, which then makes the moment.
  tn::Plan pp2 = cpPlan(2);
  pp2.pp = 2, pp2.gbs = 4;
  const tn::StageMemory first = tn::predictMemory(w, pp2).stages[0];
  EXPECT_EQ(first.allowance, int64_t(6.0 * 4096 * 1 * 2048 * 2));
  EXPECT_EQ(first.layerBackward() - first.ring,
            first.activations + first.head + first.recompute + first.grad_bucket + first.gathered);
}

TEST(ContextParallelModels, AGroupedQueryRingCarriesTheKvHeadsOnly) {
  // Llama-3-8B's attention: 32 query heads, 8 K/V heads of D = 4096/32 = 128. The ring sends the K/V
  // heads as they are (runtime context_parallel.h; Megatron-LM's AttnFuncWithCPAndKVP2P alike), not
  // repeated for their 4 query heads each.
  auto w = gpt();
  w.n_head = 32, w.n_kv_head = 8, w.n_embd = 4096;
  tn::Plan p = cpPlan(2);  // b 1, s 8192: s/cp = 4096 tokens, bf16
  // One K/V block: 2 · b · s/cp · kv · D · e = 2 · 1 · 4096 · (8 · 128) · 2 bytes (a quarter of the
  // 2 · 4096 · 4096 · 2 at the query heads' width); its dK/dV accumulator the same elements in fp32.
  EXPECT_DOUBLE_EQ(tn::ringBlockElements(w, p), 2.0 * 1 * 4096 * (8 * 128));
  EXPECT_DOUBLE_EQ(tn::ringStepBytes(w, p), 2.0 * 1 * 4096 * (8 * 128) * 2);
  EXPECT_DOUBLE_EQ(tn::ringGradBytes(w, p), 2.0 * 1 * 4096 * (8 * 128) * 4);
  // Under TP 4 a rank holds 8/4 = 2 K/V heads; under TP 16 (> 8) one, replicated twice.
  p.tp = 4;
  EXPECT_DOUBLE_EQ(tn::ringStepBytes(w, p), 2.0 * 1 * 4096 * (2 * 128) * 2);
  p.tp = 16;
  EXPECT_DOUBLE_EQ(tn::ringStepBytes(w, p), 2.0 * 1 * 4096 * (1 * 128) * 2);
  // Memory: K, V, dK, dV, each the block in hand and the one arriving: 8 · b · s/cp · kv · D · e.
  p.tp = 1;
  EXPECT_EQ(tn::predictMemory(w, p).stages[0].ring, int64_t(8.0 * 1 * 4096 * (8 * 128) * 2));
  // The flash core under CP reads Q and writes O of its 4096 tokens at the query width h = 4096, and
  // reads every K and V block of the 8192 at the K/V width 8 · 128 = 1024: 2 · (4096·4096 + 8192·1024) · e.
  const tn::LayerOps two = tn::layerOps(w, p, tn::Framework::Trainscope);
  EXPECT_DOUBLE_EQ(find(two.forward, "flash attention").bytes, 2.0 * (4096.0 * 4096 + 8192.0 * 1024) * 2);
}

TEST(ContextParallelModels, TheRingShowsWhereAStepOutlastsItsAttentionBlockAndTheLastAccumulatorWhole) {
  // (cp − 1) · max(0, step − block).
  EXPECT_DOUBLE_EQ(tn::ringExposedSeconds(4, 3e-3, 1e-3), 3 * 2e-3);
  EXPECT_DOUBLE_EQ(tn::ringExposedSeconds(4, 1e-3, 3e-3), 0);
  EXPECT_DOUBLE_EQ(tn::ringExposedSeconds(1, 3e-3, 1e-3), 0);
  const auto w = gpt();
  tn::Plan p = cpPlan(4);
  p.seq = 4096;
  // One step moves one rank's K and V in bf16: 2 · b · s/cp · h/t · e = 2 · 1024 · 2048 · 2 bytes; its
  // dK/dV accumulator travels in fp32: 2 · 1024 · 2048 · 4 bytes.
  EXPECT_DOUBLE_EQ(tn::ringStepBytes(w, p), 2.0 * 1024 * 2048 * 2);
  EXPECT_DOUBLE_EQ(tn::ringGradBytes(w, p), 2.0 * 1024 * 2048 * 4);

  // GPU, by hand, per layer and micro-batch: the forward's 3 K/V sends beside a quarter of the
  // attention forward each; backward's 4 blocks beside a K/V send, K/V + accumulator twice, the
  // accumulator alone, then the last accumulator's send whole (3 K/V blocks and 4 accumulators).
  const tn::LayerOps ops = tn::layerOps(w, p, tn::Framework::Trainscope);
  auto expected = [&](const tn::Cluster& c, rt::Checkpointing ckpt) {
    const double peak = c.peak("bf16") * c.sustained_clock;
    const double fwd = tn::gpu::gemmSeconds(find(ops.forward, "flash attention"), c, peak, 2) / 4;
    const double bwd = tn::gpu::gemmSeconds(find(ops.backward, "flash attention backward"), c, peak, 2) / 4;
    const double kv_bytes = 2.0 * 1024 * 2048 * 2, grad_bytes = 2.0 * 1024 * 2048 * 4;
    auto send = [&](double bytes) { return tn::gpu::collectiveSeconds(c.intra_node, bytes, 2, 1.0); };
    auto over = [](double s, double block) { return std::max(0.0, s - block); };
    const double forward = 3 * over(send(kv_bytes), fwd);
    const double backward = over(send(kv_bytes), bwd) + 2 * over(send(kv_bytes + grad_bytes), bwd) +
                            over(send(grad_bytes), bwd) + send(grad_bytes);
    const double passes = ckpt == rt::Checkpointing::Full ? 2.0 : 1.0;  // full reruns the forward's ring
    return 2.0 /* M */ * 4.0 /* layers */ * (passes * forward + backward);
  };
  // NVLink at 400 GB/s: every step hides behind its block of attention (about 65 µs); only the last
  // 16 MiB accumulator's way home (43 µs) shows, in each layer of each micro-batch.
  const tn::Cluster fast = gpuCluster(400e9);
  const double home = tn::gpu::collectiveSeconds(fast.intra_node, 2.0 * 1024 * 2048 * 4, 2, 1.0);
  EXPECT_NEAR(expected(fast, rt::Checkpointing::None), 2 * 4 * home, 1e-15);
  EXPECT_NEAR(tn::predictTime(w, p, fast).cp_comm_s, 2 * 4 * home, 1e-12);
  // At 5 GB/s the steps do not hide: their excess shows too, and is part of the step.
  const tn::Cluster slow = gpuCluster(5e9);
  const tn::TimePrediction t = tn::predictTime(w, p, slow);
  ASSERT_GT(expected(slow, rt::Checkpointing::None), 2 * 4 * home);
  EXPECT_NEAR(t.cp_comm_s, expected(slow, rt::Checkpointing::None), 1e-12);
  EXPECT_NEAR(t.step_s, t.compute_s + t.recompute_s + t.tp_comm_s + t.dp_comm_s + t.pp_comm_s + t.cp_comm_s +
                            t.bubble_s + t.optimizer_s, 1e-12);
  // Under CP selective checkpointing reruns nothing (the ring keeps q, k, v and the output): the
  // same ring and no recomputation; full reruns the block, ring included.
  tn::Plan sel = p, full = p;
  sel.ckpt = rt::Checkpointing::Selective;
  full.ckpt = rt::Checkpointing::Full;
  EXPECT_NEAR(tn::predictTime(w, sel, slow).cp_comm_s, t.cp_comm_s, 1e-12);
  EXPECT_EQ(tn::predictTime(w, sel, slow).recompute_s, 0);
  EXPECT_NEAR(tn::predictTime(w, full, slow).cp_comm_s, expected(slow, rt::Checkpointing::Full), 1e-12);
  EXPECT_GT(tn::predictTime(w, full, slow).recompute_s, 0);
}

TEST(ContextParallelModels, TheCpuModelPricesTheRingBesideItsAttention) {
  const auto w = gpt();
  tn::Cluster c = tn::loadCluster("cpu-local");
  tn::Plan p = cpPlan(2);
  p.seq = 1024;
  p.cpu = true;
  p.precision = rt::Precision::FP32;
  // By hand: the attention forward of the rank (its 512 queries × 1024 keys), on the node's peak
  // shared by its 2 ranks; sends over Gloo's α–β. At cp 2 the forward sends one K/V block beside
  // half the attention; backward one K/V block beside its first block, the accumulator beside its
  // second, and the accumulator's way home whole (fp32 here: K/V and dK/dV are both 8 MiB).
  const double peak = c.peak("fp32") / 2, h = 2048, a = 16;
  const double flops = 4.0 * 1 * 512 * 1024 * h;
  const double attn = flops / (peak * c.matmulEfficiency(flops / a));
  const double bytes = 2.0 * 512 * h * 4;
  auto alpha_beta = [&](double b) { return c.intra_node.latency * 2 + b / c.intra_node.bandwidth; };
  auto expected = [&]() {
    const double fwd = std::max(0.0, alpha_beta(bytes) - attn / 2);
    const double bwd = 2 * std::max(0.0, alpha_beta(bytes) - 2 * attn / 2) + alpha_beta(bytes);
    return 2.0 /* M */ * 4.0 /* layers */ * (fwd + bwd);
  };
  // Gloo at 2 GB/s: an 8 MiB step (4 ms) hides behind a block of the CPU's attention (about 26 ms);
  // the last accumulator's send does not.
  EXPECT_NEAR(expected(), 2.0 * 4.0 * alpha_beta(bytes), 1e-15);
  EXPECT_NEAR(tn::predictTime(w, p, c).cp_comm_s, expected(), 1e-12);
  // At 100 MB/s (84 ms a step) the steps show as well.
  c.intra_node.bandwidth = 1e8;
  ASSERT_GT(expected(), 2.0 * 4.0 * alpha_beta(bytes));
  EXPECT_NEAR(tn::predictTime(w, p, c).cp_comm_s, expected(), 1e-12);
  // Selective checkpointing under CP reruns no attention and no ring.
  tn::Plan sel = p;
  sel.ckpt = rt::Checkpointing::Selective;
  EXPECT_NEAR(tn::predictTime(w, sel, c).cp_comm_s, expected(), 1e-12);
  EXPECT_EQ(tn::predictTime(w, sel, c).recompute_s, 0);
  // The gradients are summed over dp · cp = 2 ranks even with dp 1.
  EXPECT_GT(tn::predictTime(w, p, c).dp_comm_s, 0);
  EXPECT_EQ(tn::predictTime(w, cpPlan(1), c).dp_comm_s, 0);
}

TEST(PredictCp, SplitsTheDevicesAndReportsTheRing) {
  using trainscope::testing::cli;
  const auto r = cli("predict --workload gpt3-1.3b --cluster h100-80gb-x8 --cp 2 --tp 2 --seq 2048 --json");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_EQ(j["cp"], 2);
  EXPECT_EQ(j["dp"], 2);  // 8 devices = dp 2 · cp 2 · tp 2
  EXPECT_NE(j["plan"].get<std::string>().find(" cp2 "), std::string::npos);
  EXPECT_TRUE(j["time"].contains("cp_comm_s"));
  const auto bad = cli("predict --workload gpt3-1.3b --cluster h100-80gb-x8 --cp 3");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find("--cp"), std::string::npos) << bad.output;
}

TEST(PredictHybrid, ShardGroupsHoldMoreThanShardingOverEveryDpRank) {
  using trainscope::testing::cli;
  auto peak = [](const std::string& extra) {
    const auto r = cli("predict --workload gpt3-1.3b --cluster h100-80gb-x8 --zero 3 --json" + extra);
    EXPECT_EQ(r.status, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    return j["peak_bytes"].get<double>();
  };
  const double all = peak(""), hybrid = peak(" --zero-shard-size 2");
  EXPECT_GT(hybrid, all);  // shards over 2 ranks, not 8
  const auto bad = cli("predict --workload gpt3-1.3b --cluster h100-80gb-x8 --zero 1 --zero-shard-size 2");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find("ZeRO-3"), std::string::npos) << bad.output;
}
