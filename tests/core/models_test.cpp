// models_test.cpp — the tuner's models (LibTorch-free): model-state bytes, the memory model
// against Korthikanti et al. and under ZeRO, cluster files and the collective fit, the time model's
// breakdown.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "trainscope/common/error.h"
#include "trainscope/runconfig/config.h"
#include "trainscope/tuner/calibrate.h"
#include "trainscope/tuner/models.h"
#include "trainscope/workloads/flops.h"
#include "trainscope/workloads/memory.h"
#include "trainscope/workloads/workload.h"

namespace wl = trainscope::workloads;
namespace rt = trainscope::runconfig;
namespace tn = trainscope::tuner;
using trainscope::UserError;
using trainscope::testing::cli;
using trainscope::testing::tempPath;

TEST(MemoryModel, Gpt2SmallModelStateMatchesTheDocumentedTotals) {
  const wl::Workload w = wl::load("gpt2-124m");
  int64_t n = 0;
  for (const auto& t : wl::parameterTensors(w)) n += t.numel();
  EXPECT_EQ(n, w.parameterCount());
  // docs/memory-model.md, "Model state: bytes per parameter" (exact).
  EXPECT_EQ(wl::modelStateBytes(w, false, wl::OptimizerState::AdamW).optimizer, 995518464);
  EXPECT_EQ(wl::modelStateBytes(w, false, wl::OptimizerState::Adafactor).optimizer, 1286468);
  EXPECT_EQ(wl::modelStateBytes(w, false, wl::OptimizerState::Adam8bit).optimizer, 252768360);
  EXPECT_EQ(wl::modelStateBytes(w, false, wl::OptimizerState::SGD).optimizer, 0);
  EXPECT_EQ(wl::modelStateBytes(w, false, wl::OptimizerState::SGD, true).optimizer, 497759232);
  const auto fp32 = wl::modelStateBytes(w, false, wl::OptimizerState::AdamW);
  const auto bf16 = wl::modelStateBytes(w, true, wl::OptimizerState::AdamW);
  EXPECT_EQ(fp32.params + fp32.grads, 8 * n);
  EXPECT_EQ(bf16.total(), 18 * n);  // 4 + 2 + 4 + 8 per parameter: no 16-bit gradient kept (Megatron-LM's 18)
}

// ---- the tuner's models (LibTorch-free) --------------------------------------------------------

TEST(MemoryModel, MegatronActivationsMatchKorthikantiByHand) {
  // GPT-3 175B on 64 nodes of 8 H100: t = 8, p = 8, d = 8, s = 2048, b = 1, SP + selective, 1F1B.
  // The first stage holds p micro-batches of L/p layers: L · 34·s·b·h/t bytes (Korthikanti et al.
  // 2022, Table 2 with selective recomputation and sequence parallelism). Their runs' attention was
  // Megatron-LM's unfused one (Table 2's 5as²b/t scores): asked for explicitly, as bench/'s rows do.
  const tn::Attention unfused = tn::Attention::Unfused;
  const wl::Workload big = wl::load("gpt3-175b");
  tn::Plan p;
  p.dp = 8, p.tp = 8, p.pp = 8, p.mbs = 1, p.gbs = 1536, p.seq = 2048;
  p.ckpt = rt::Checkpointing::Selective;
  p.sequence_parallel = true;
  ASSERT_EQ(tn::whyInvalid(big, p), "");
  const auto m = tn::predictMemory(big, p, unfused);
  ASSERT_EQ(m.stages.size(), 8u);
  EXPECT_EQ(m.stages[0].megatron_activations, int64_t(34.0 * 2048 * 1 * 12288 / 8 * 96));
  EXPECT_EQ(m.stages[0].inflight, 8);
  // GPT-3 13B, t = 4, p = 1, b = 2, no SP, no recomputation: sbh(10 + 24/t + 5as/(ht)) per layer,
  // 40 layers, plus the fp32 logits 4·s·b·V/t of the output layer.
  const wl::Workload mid = wl::load("gpt3-13b");
  tn::Plan q;
  q.dp = 2, q.tp = 4, q.pp = 1, q.mbs = 2, q.gbs = 4, q.seq = 2048;
  const double sbh = 2048.0 * 2 * double(mid.n_embd);
  const double per_layer = sbh * (10 + 24.0 / 4 + 5.0 * double(mid.n_head) * 2048 / (double(mid.n_embd) * 4));
  EXPECT_EQ(tn::predictMemory(mid, q, unfused).stages[0].megatron_activations,
            int64_t(per_layer * double(mid.n_layer) + 4.0 * 2048 * 2 * double(mid.vocab_size) / 4));
  // Interleaving grows the first stage's activations by 1 + (p - 1)/(p·v).
  tn::Plan r = p;
  r.virtual_stages = 2;
  ASSERT_EQ(tn::whyInvalid(big, r), "");
  EXPECT_EQ(tn::predictMemory(big, r, unfused).stages[0].megatron_activations,
            int64_t(34.0 * 2048 * 12288 / 8 * 96 * (1 + 7.0 / 16)));
}

// Megatron-LM with a fused flash attention kernel (Transformer Engine's, its default today: layer_ops.h)
// keeps no s×s scores: without recomputation a Llama layer is sbh(10 + (8 + 4F/h)/t), not + 5as/(ht).
// llama3-8b, t = 1, p = 1, s = 8192, b = 1, F = 14336: 32 layers of 32·sbh, the first stage's tokens and
// embedding output 8sb + sbh, and the head's input and fp32 logits 4sb(h + V). Unfused (the 2021-2022
// runs' kernel) when asked.
TEST(MemoryModel, MegatronWithFlashAttentionKeepsNoScores) {
  const wl::Workload w = wl::load("llama3-8b");
  tn::Plan p;
  p.dp = 8, p.tp = 1, p.pp = 1, p.mbs = 1, p.gbs = 8, p.seq = 8192;
  p.precision = rt::Precision::BF16;
  ASSERT_EQ(tn::whyInvalid(w, p), "");
  const double s = 8192, h = double(w.n_embd), V = double(w.vocab_size), sbh = s * h;
  const double flash = 32 * sbh * (10 + 8 + 4.0 * double(w.ffnHidden()) / h) + 8 * s + sbh + 4 * s * (h + V);
  EXPECT_NEAR(double(tn::predictMemory(w, p).stages[0].megatron_activations), flash, 1.0);  // the default
  EXPECT_NEAR(double(tn::predictMemory(w, p, tn::Attention::Flash).stages[0].megatron_activations), flash, 1.0);
  const double scores = 32 * sbh * 5.0 * double(w.n_head) * s / h;  // what the unfused kernel adds
  EXPECT_NEAR(double(tn::predictMemory(w, p, tn::Attention::Unfused).stages[0].megatron_activations), flash + scores,
              1.0);
  // The GPT shape's op list (Korthikanti's) drops the same term: gpt3-13b, t = 4, b = 2.
  const wl::Workload mid = wl::load("gpt3-13b");
  tn::Plan q;
  q.dp = 2, q.tp = 4, q.pp = 1, q.mbs = 2, q.gbs = 4, q.seq = 2048;
  EXPECT_LT(tn::predictMemory(mid, q).stages[0].megatron_activations,
            tn::predictMemory(mid, q, tn::Attention::Unfused).stages[0].megatron_activations);
}

// `predict --framework megatron` prices Megatron-LM as it runs by default today (megatron-core 0.19.2:
// Transformer Engine, --attention-backend auto: a fused flash kernel), in its memory column as in its
// time; --attention unfused gives the 2021-2022 kernel. llama3-8b, tp 1, pp 1, mbs 1, seq 8192, no
// recomputation, bf16: 32 layers of sbh(10 + 8 + 4F/h) bytes, + 8sb + sbh (the first stage's tokens and
// embedding output), + 4sb(h + V) (the head's input and fp32 logits) — by hand, 36.1 GiB.
TEST(MemoryModel, PredictFrameworkMegatronDefaultsToFlashAttention) {
  const std::string base = "predict --workload llama3-8b --cluster h100-80gb-x8 --gpus 8 --tp 1 --pp 1 --mbs 1 "
                           "--gbs 8 --seq 8192 --ckpt none --precision bf16 --framework megatron --json";
  const double s = 8192, h = 4096, F = 14336, V = 128256, sbh = s * h;
  const double flash = 32 * sbh * (18 + 4 * F / h) + 8 * s + sbh + 4 * s * (h + V);
  const double scores = 32 * sbh * 5.0 * 32 * s / h;  // 5as²b/t, a = 32
  auto megatronActivations = [&](const std::string& extra) {
    const auto r = cli(base + extra);
    EXPECT_EQ(r.status, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    return j["stages"][0]["megatron_activations_bytes"].get<double>();
  };
  EXPECT_NEAR(megatronActivations(""), flash, 1.0);
  EXPECT_NEAR(flash / double(1ull << 30), 36.1, 0.05);
  EXPECT_NEAR(megatronActivations(" --attention flash"), flash, 1.0);
  EXPECT_NEAR(megatronActivations(" --attention unfused"), flash + scores, 1.0);
}

TEST(MemoryModel, ZeroShardsShrinkAsOneOverDAndZero3HoldsTheGatheredLayer) {
  // gpt2-124m on one stage, bf16 AdamW: 6 bytes of weights (fp32 master + bf16), 6 of gradients
  // (fp32 main + bf16) and 8 of state per parameter; n = 124,439,808 divides by 2 and 4.
  // docs/memory-model.md, "ZeRO-2 and ZeRO-3": stage 2 keeps ⌈n/d⌉ of the gradients and the state,
  // stage 3 also of the weights, and gathers (bf16) the rest of the stage, the layer in use and the
  // one prefetched (docs/memory-model.md, "ZeRO-3 as run").
  const wl::Workload w = wl::load("gpt2-124m");
  const int64_t n = w.parameterCount(), wte = int64_t(w.vocab_size) * w.n_embd;
  // ZeRO-3 as run (zero3.h): a layer of 12h² + 13h elements, and the rest (wte, wpe, ln_f) one unit.
  const int64_t layer = 12 * w.n_embd * w.n_embd + 13 * w.n_embd, rest = n - w.n_layer * layer;
  auto memory = [&](int64_t d, int stage) {
    tn::Plan p;
    p.dp = d, p.mbs = 1, p.gbs = d, p.seq = 1024, p.zero = rt::zeroStage(stage);
    return tn::predictMemory(w, p).stages.at(0);
  };
  // One DP rank shards nothing: every stage is stage 0 (and the plan is refused as such).
  const tn::StageMemory alone = memory(1, 0);
  for (int z = 1; z <= 3; ++z) {
    const tn::StageMemory m = memory(1, z);
    EXPECT_EQ(m.total(), alone.total()) << z;
    EXPECT_EQ(m.grad_bucket + m.gathered, 0) << z;
    tn::Plan p;
    p.zero = rt::zeroStage(z);
    EXPECT_EQ(tn::whyInvalid(w, p), "ZeRO-" + std::to_string(z) + " needs dp > 1");
  }
  for (int64_t d : {2, 4}) {
    const tn::StageMemory z0 = memory(d, 0), z1 = memory(d, 1), z2 = memory(d, 2), z3 = memory(d, 3);
    EXPECT_EQ(z0.params, 6 * n);
    EXPECT_EQ(z0.grads, 4 * n);  // fp32 main gradients only (18 bytes per parameter)
    EXPECT_EQ(z0.optimizer, 8 * n);
    // ZeRO-1: the runtime's by-tensor partition (docs' table), the weights and gradients whole.
    EXPECT_EQ(z1.params, 6 * n);
    EXPECT_EQ(z1.grads, 4 * n);
    EXPECT_LT(z1.optimizer, 8 * n);
    // ZeRO-2: the gradients and the state shrink as 1/d exactly.
    EXPECT_EQ(z2.params, 6 * n) << d;
    EXPECT_EQ(z2.grads, 4 * n / d) << d;
    EXPECT_EQ(z2.optimizer, 8 * n / d) << d;
    // The runtime's buckets (grad_sync.cpp): the word embedding, larger than 25 MiB, is one, the last
    // (its gradient comes when backward ends). Through the layers' backward the buckets are 25 MiB
    // ones (one filling, the previous one's reduce-scatter in flight: its buffer and ⌈B/d⌉ output;
    // NCCL, no copy), at most 4·(2 + 1/d)·25 MiB — less than the LM head's saved fp32 dW (4·V·h)
    // they come after (docs/memory-model.md, "ZeRO-2 as run"): the layer-backward moment is plain
    // training's. (Before the walk, two wte-sized buckets were priced there: +0.36 GiB at d = 2.)
    const int64_t in_flight = wte + wte / d;
    EXPECT_LT(4 * (2 * (25 << 20) / 4 + (25 << 20) / 4 / d), z2.head) << d;
    EXPECT_EQ(z2.grad_bucket, 0) << d;
    EXPECT_EQ(z2.layerBackward(), z0.layerBackward()) << d;
    EXPECT_EQ(z2.gathered, 0);
    EXPECT_EQ(z2.sync, 4 * in_flight + 2 * 2 * wte);  // the last bucket, with autograd's two bf16 gradients of wte
    // ZeRO-3: the weights too.
    EXPECT_EQ(z3.params, 6 * n / d) << d;
    EXPECT_EQ(z3.grads, 4 * n / d) << d;
    EXPECT_EQ(z3.optimizer, 8 * n / d) << d;
    // A layer's flat fp32 gradients and the one in flight (NCCL: no copy), with its ⌈ℓ/d⌉ output.
    EXPECT_EQ(z3.grad_bucket, 4 * (2 * layer + (layer + d - 1) / d)) << d;
    EXPECT_EQ(z3.gathered, 2 * (rest + 2 * layer)) << d;  // the rest, the layer in use and the one prefetched
    EXPECT_EQ(z3.sync, 0);
    // Activations do not change; the two transients ride on the moments they belong to.
    EXPECT_EQ(z3.activations, z0.activations);
    EXPECT_EQ(z3.layerBackward() - z0.layerBackward(), z3.grad_bucket + z3.gathered);
    EXPECT_EQ(z3.headForward() - z0.headForward(), z3.gathered);
    EXPECT_EQ(z3.total(), z3.params + z3.grads + z3.optimizer + z3.buffers + z3.transient());
    EXPECT_LT(z3.total(), z2.total());
  }
  // fp32: 4 bytes of weights and 4 of gradients, gathered in fp32.
  tn::Plan f;
  f.dp = 4, f.mbs = 1, f.gbs = 4, f.seq = 1024, f.zero = rt::ZeroStage::Parameters;
  f.precision = rt::Precision::FP32;
  const tn::StageMemory m = tn::predictMemory(w, f).stages.at(0);
  EXPECT_EQ(m.params, 4 * n / 4);
  EXPECT_EQ(m.grads, 4 * n / 4);
  EXPECT_EQ(m.gathered, 4 * (rest + 2 * layer));
}

TEST(Clusters, PresetsLoadWithSourcesAndBadFilesNameTheField) {
  for (const auto& name : tn::clusterPresets()) {
    const tn::Cluster c = tn::loadCluster(name);
    EXPECT_GT(c.memory_bytes, 0) << name;
    EXPECT_FALSE(c.sources.empty()) << name;
    EXPECT_GT(c.matmulEfficiency(1e12), 0) << name;
  }
  EXPECT_GE(tn::clusterPresets().size(), 4u);
  EXPECT_EQ(tn::loadCluster("h100-80gb-x8", 64).devices(), 512);
  // A GPU preset's limit is what CUDA reports as the device's memory (PyTorch's "total capacity"),
  // not the datasheet's round figure: 80 GiB had a 79.5 GiB plan fit an A100 it cannot run on.
  EXPECT_EQ(tn::loadCluster("a100-80gb-x8").memory_bytes, int64_t(81050) << 20);
  EXPECT_EQ(tn::loadCluster("a100-40gb-x8").memory_bytes, int64_t(40536) << 20);
  EXPECT_EQ(tn::loadCluster("a100-40gb-x8").memory_bandwidth, 1.555e12);
  EXPECT_EQ(tn::loadCluster("h100-80gb-x8").memory_bytes, int64_t(81082) << 20);
  EXPECT_EQ(tn::loadCluster("h200-x8").memory_bytes, int64_t(143156) << 20);
  try {
    tn::parseCluster(R"({"devices_per_node": 8, "memory_bytes": 1, "peak_flops": {"bf16": 1}})", "c.json");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("c.json: memory_bandwidth"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tn::loadCluster("no-such-cluster"), UserError);
}

// A cluster file with figures in another unit (an audit's: TFLOP/s for FLOP/s, GB for bytes, GB/s
// for bytes/s, microseconds for seconds) had priced steps of 7.6e10 s and "fits" under a 0 GiB limit
// with exit 0. Each is refused, naming the field and the unit.
TEST(Clusters, AFigureInAnotherUnitIsRefusedNamingTheFieldAndTheUnit) {
  const nlohmann::json good = nlohmann::json::parse(R"({"devices_per_node": 8, "memory_bytes": 85899345920,
      "peak_flops": {"bf16": 989e12}, "memory_bandwidth": 3.35e12,
      "intra_node": {"bandwidth": 450e9, "latency": 5e-6}, "inter_node": {"bandwidth": 50e9, "latency": 1e-5}})");
  EXPECT_NO_THROW(tn::parseCluster(good.dump(), "good.json"));
  const std::vector<std::tuple<std::string, nlohmann::json, std::string>> bad = {
      {"/peak_flops/bf16", 989, "peak_flops.bf16"},       {"/memory_bytes", 80, "memory_bytes"},
      {"/memory_bandwidth", 3.35, "memory_bandwidth"},    {"/intra_node/bandwidth", 450, "intra_node.bandwidth"},
      {"/inter_node/latency", 5, "inter_node.latency"},   {"/kernel_floor_s", 3, "kernel_floor_s"}};
  for (const auto& [pointer, value, key] : bad) {
    nlohmann::json j = good;
    j[nlohmann::json::json_pointer(pointer)] = value;
    try {
      tn::parseCluster(j.dump(), "units.json");
      ADD_FAILURE() << key << " = " << value << " was taken";
    } catch (const UserError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("units.json: " + key), std::string::npos) << what;
      EXPECT_NE(what.find("the file's unit is"), std::string::npos) << what;
    }
  }
}

TEST(TimeModel, BreakdownAddsUpAndTheBubbleFollowsTheSchedule) {
  const wl::Workload w = wl::load("gpt3-13b");
  const tn::Cluster c = tn::loadCluster("h100-80gb-x8", 4);
  tn::Plan p;
  p.dp = 4, p.tp = 2, p.pp = 4, p.mbs = 1, p.gbs = 64, p.seq = 2048;
  const auto t = tn::predictTime(w, p, c);
  EXPECT_NEAR(t.step_s, t.compute_s + t.recompute_s + t.tp_comm_s + t.dp_comm_s + t.pp_comm_s + t.bubble_s + t.optimizer_s,
              1e-12);
  // The fill and drain: the other three stages' micro-batch times (pipelineFillSeconds), each at most
  // the slowest's (its kernels and TP collectives over M = 64/(1·4) = 16) and, at 10 layers a stage,
  // within the head's share of it.
  const double slowest = (t.compute_s + t.recompute_s + t.tp_comm_s) / 16.0;
  EXPECT_LE(t.bubble_s, 3.0 * slowest * (1 + 1e-12));
  EXPECT_GT(t.bubble_s, 0.8 * 3.0 * slowest);
  tn::Plan v = p;
  v.virtual_stages = 2;
  EXPECT_NEAR(tn::predictTime(w, v, c).bubble_s, t.bubble_s / 2, 1e-12);
  EXPECT_GT(t.mfu, 0.1);
  EXPECT_LT(t.mfu, 0.9);
  tn::Plan full = p;
  full.ckpt = rt::Checkpointing::Full;
  EXPECT_GT(tn::predictTime(w, full, c).recompute_s, 0.2 * t.compute_s);
}

TEST(Clusters, CollectiveFitRecoversAlphaAndBetaAndTheFileLoads) {
  // all-reduce over 2 ranks: t = 2α + bytes·(2(n−1)/n)/β = 2α + bytes/β; α = 40 µs, β = 2 GB/s.
  std::vector<trainscope::rundb::Collective> rows;
  for (int64_t bytes : {4, 4096, 1 << 20, 25 << 20, 25 << 20, 4}) {
    trainscope::rundb::Collective c;
    c.op = "all_reduce";
    c.group_size = 2;
    c.bytes = bytes;
    c.start_ns = 1'000'000;
    c.end_ns = c.start_ns + int64_t(std::llround((2 * 40e-6 + double(bytes) / 2e9) * 1e9));
    rows.push_back(c);
  }
  const auto fit = trainscope::tuner::fitCollectives(rows);
  EXPECT_NEAR(fit.tier.latency, 40e-6, 1e-8);
  EXPECT_NEAR(fit.tier.bandwidth, 2e9, 2e9 * 1e-4);
  EXPECT_GT(fit.r2, 0.9999);
  EXPECT_EQ(fit.samples, 6);
  // A call the trace's end cut (its end a bound, here 10 ms for 4 bytes): left out, the fit unchanged.
  std::vector<trainscope::rundb::Collective> with_cut = rows;
  with_cut.push_back(rows[0]);
  with_cut.back().end_ns = with_cut.back().start_ns + 10'000'000;
  with_cut.back().cut = true;
  const auto fit_cut = trainscope::tuner::fitCollectives(with_cut);
  EXPECT_EQ(fit_cut.samples, 6);
  EXPECT_DOUBLE_EQ(fit_cut.tier.latency, fit.tier.latency);
  EXPECT_DOUBLE_EQ(fit_cut.tier.bandwidth, fit.tier.bandwidth);
  EXPECT_DOUBLE_EQ(fit_cut.r2, fit.r2);
  // One size only: no fit, and the message says what to check.
  rows.resize(1);
  EXPECT_THROW(trainscope::tuner::fitCollectives(rows), trainscope::UserError);
  // The cluster file built from it loads, with the rates as given.
  const std::string rates =
      R"({"threads":2,"matmul":{"fp32":[[1e6,2e9],[1e9,1e11]],"bf16":[[1e6,1e9],[1e9,4e11]]},"memory_bandwidth":1e10,"vector_flops":1e9})";
  const std::string path = trainscope::testing::tempPath("local.json");
  std::ofstream(path) << trainscope::tuner::localClusterJson(rates, fit, 2, int64_t(1) << 30, "box");
  const auto c = trainscope::tuner::loadCluster(path);
  EXPECT_EQ(c.kind, tn::ClusterKind::Cpu);
  EXPECT_EQ(c.devices_per_node, 2);
  EXPECT_DOUBLE_EQ(c.peak("fp32"), 1e11);
  EXPECT_DOUBLE_EQ(c.peak("bf16"), 4e11);
  EXPECT_NEAR(c.matmulEfficiency(1e6), 0.02, 1e-9);
  EXPECT_NEAR(c.intra_node.latency, 40e-6, 1e-8);
  EXPECT_EQ(c.memory_bytes, int64_t(1) << 30);
}
