// workloads_test.cpp — workload files, analytic parameter counts and model-state bytes, the FLOPs
// formula, run configs and their JSON/flag forms, and the tuner's models (clusters, memory, time).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "../common/cli.h"
#include "trainscope/runconfig/config.h"
#include "trainscope/tuner/calibrate.h"
#include "trainscope/tuner/models.h"
#include "trainscope/common/error.h"
#include "trainscope/workloads/flops.h"
#include "trainscope/workloads/memory.h"
#include "trainscope/workloads/workload.h"

namespace wl = trainscope::workloads;
namespace rt = trainscope::runtime;
namespace tn = trainscope::tuner;
using trainscope::UserError;
using trainscope::testing::tempPath;

TEST(Workloads, Gpt2SmallHasItsKnownParameterCount) {
  EXPECT_EQ(wl::load("gpt2-124m").parameterCount(), 124439808);
  EXPECT_EQ(wl::load("gpt2-1.5b").parameterCount(), 1557611200);
}

TEST(Workloads, AllShippedWorkloadsLoadAndValidate) {
  auto names = wl::available();
  ASSERT_GE(names.size(), 11u);
  for (const auto& n : names) EXPECT_NO_THROW(wl::load(n)) << n;
}

TEST(Workloads, ReadsHuggingFaceGpt2Config) {
  std::string p = tempPath("config.json");
  std::ofstream(p) << R"({"model_type":"gpt2","n_layer":3,"n_head":4,"n_embd":64,"n_positions":128,
                          "n_ctx":128,"vocab_size":500,"activation_function":"gelu_new"})";
  wl::Workload w = wl::load(p);
  EXPECT_EQ(w.n_layer, 3);
  EXPECT_EQ(w.n_head, 4);
  EXPECT_EQ(w.vocab_size, 500);
}

TEST(Workloads, HeadsNotDividingHiddenIsAUserError) {
  std::string p = tempPath("bad_heads.json");
  std::ofstream(p) << R"({"n_layer":2,"n_head":3,"n_embd":32,"n_positions":64,"vocab_size":128})";
  try {
    wl::load(p);
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_EQ(e.field(), "workload.n_head");
  }
}

TEST(Workloads, HuggingFaceMlpWidthOtherThan4CIsRejected) {
  std::string p = tempPath("inner.json");
  std::ofstream(p) << R"({"n_layer":2,"n_head":2,"n_embd":32,"n_positions":64,"vocab_size":128,"n_inner":100})";
  try {
    wl::load(p);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.field(), "workload.n_inner");
  }
}

TEST(Workloads, UnknownNameListsTheAvailableOnes) {
  try {
    wl::load("gpt5");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.field(), "--workload");
    EXPECT_NE(std::string(e.what()).find("gpt2-124m"), std::string::npos);
  }
}

TEST(Workloads, MissingFieldIsNamed) {
  std::string p = tempPath("missing.json");
  std::ofstream(p) << R"({"n_layer":2,"n_head":2,"n_positions":64,"vocab_size":128})";
  try {
    wl::load(p);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.field(), "workload.n_embd");
  }
}

TEST(Flops, MatchesNarayananFormulas) {
  // Megatron-LM paper: 96 B s l h^2 (1 + s/6h + V/16lh) with full recomputation.
  const double B = 8, s = 2048, l = 24, h = 2048, V = 50257;
  auto f = wl::stepFlops(8, 2048, 24, 2048, 50257, wl::Recompute::Full);
  EXPECT_NEAR(f.hardware / (96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))), 1.0, 1e-12);
  EXPECT_NEAR(f.model / (72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))), 1.0, 1e-12);
  auto sel = wl::stepFlops(8, 2048, 24, 2048, 50257, wl::Recompute::Selective);
  EXPECT_DOUBLE_EQ(sel.hardware - sel.model, 4 * B * s * s * h * l);
}

TEST(Config, GbsMustBeAMultipleOfMbs) {
  rt::TrainConfig c;
  c.workload = "tiny";
  c.mbs = 3;
  c.gbs = 8;
  try {
    rt::resolve(c);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.field(), "--gbs");
  }
}

TEST(Config, GbsGivesGa) {
  rt::TrainConfig c;
  c.workload = "tiny";
  c.mbs = 2;
  c.gbs = 8;
  rt::resolve(c);
  EXPECT_EQ(c.ga_steps, 4);
  EXPECT_EQ(c.global_batch, 8);
}

TEST(Config, UnknownEnumValueNamesFlagAndChoices) {
  try {
    rt::parsePrecision("fp8");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.field(), "--precision");
    EXPECT_NE(std::string(e.what()).find("fp32|bf16|fp16"), std::string::npos);
  }
}

TEST(Config, SeqLongerThanPositionsIsRejected) {
  rt::TrainConfig c;
  c.workload = "tiny";
  c.seq = 65;
  EXPECT_THROW(rt::resolve(c), UserError);
}

TEST(Config, JsonAndFlagFormsRoundTrip) {
  rt::TrainConfig c;
  c.workload = "tiny";
  c.seq = 32;
  c.mbs = 2;
  c.gbs = 8;
  c.steps = 7;
  c.ckpt = rt::Checkpointing::Selective;
  c.precision = rt::Precision::BF16;
  c.optimizer = rt::OptimizerKind::Adafactor;
  c.lr = 1.0 / 3.0;  // not a short decimal: must survive the text forms exactly
  c.seed = 18446744073709551557ull;
  c.nproc = 2;
  c.zero = rt::ZeroStage::OptimizerStates;
  c.peak_tflops = 12.5;
  rt::resolve(c);
  const std::string json = rt::toJson(c);
  rt::TrainConfig back = rt::fromJson(json, "test");
  rt::resolve(back);
  EXPECT_EQ(rt::toJson(back), json);
  EXPECT_EQ(back.lr, c.lr);
  EXPECT_EQ(back.seed, c.seed);
  EXPECT_EQ(rt::toArgs(back), rt::toArgs(c));
  const auto args = rt::toArgs(c);
  auto at = [&](const std::string& flag) {
    for (size_t i = 0; i + 1 < args.size(); ++i)
      if (args[i] == flag) return args[i + 1];
    return std::string("<missing>");
  };
  EXPECT_EQ(at("--workload"), "tiny");
  EXPECT_EQ(at("--gbs"), "8");
  EXPECT_EQ(at("--nproc"), "2");
  EXPECT_EQ(at("--ckpt"), "selective");
  EXPECT_EQ(std::stod(at("--lr")), c.lr);
  // A whole `run --json` line is accepted too; a wrong type names the key.
  EXPECT_EQ(rt::toJson([&] {
              auto x = rt::fromJson("{\"steps\": 3, \"config\": " + json + "}", "line");
              rt::resolve(x);
              return x;
            }()),
            json);
  try {
    rt::fromJson(R"({"mbs": "two"})", "cfg.json");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("cfg.json: mbs"), std::string::npos) << e.what();
  }
}

TEST(Config, AWorkloadGivenByPathIsRecordedByAbsolutePath) {
  const std::string p = tempPath("path-model.json");
  std::ofstream(p) << R"({"name":"path-model","n_layer":1,"n_head":2,"n_embd":16,"n_positions":32,"vocab_size":64})";
  rt::TrainConfig c;
  c.workload = p;
  rt::resolve(c);
  auto j = rt::toJson(c);
  EXPECT_NE(j.find("\"workload\":\"path-model\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"workload_spec\":\"" + p + "\""), std::string::npos) << j;
  rt::TrainConfig back = rt::fromJson(j, "t");
  EXPECT_EQ(back.workload, p);
}

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
  // 2022, Table 2 with selective recomputation and sequence parallelism).
  const wl::Workload big = wl::load("gpt3-175b");
  tn::Plan p;
  p.dp = 8, p.tp = 8, p.pp = 8, p.mbs = 1, p.gbs = 1536, p.seq = 2048;
  p.ckpt = rt::Checkpointing::Selective;
  p.sequence_parallel = true;
  ASSERT_EQ(tn::whyInvalid(big, p), "");
  const auto m = tn::predictMemory(big, p);
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
  EXPECT_EQ(tn::predictMemory(mid, q).stages[0].megatron_activations,
            int64_t(per_layer * double(mid.n_layer) + 4.0 * 2048 * 2 * double(mid.vocab_size) / 4));
  // Interleaving grows the first stage's activations by 1 + (p - 1)/(p·v).
  tn::Plan r = p;
  r.virtual_stages = 2;
  ASSERT_EQ(tn::whyInvalid(big, r), "");
  EXPECT_EQ(tn::predictMemory(big, r).stages[0].megatron_activations,
            int64_t(34.0 * 2048 * 12288 / 8 * 96 * (1 + 7.0 / 16)));
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
  try {
    tn::parseCluster(R"({"devices_per_node": 8, "memory_bytes": 1, "peak_flops": {"bf16": 1}})", "c.json");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("c.json: memory_bandwidth"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tn::loadCluster("no-such-cluster"), UserError);
}

TEST(TimeModel, BreakdownAddsUpAndTheBubbleFollowsTheSchedule) {
  const wl::Workload w = wl::load("gpt3-13b");
  const tn::Cluster c = tn::loadCluster("h100-80gb-x8", 4);
  tn::Plan p;
  p.dp = 4, p.tp = 2, p.pp = 4, p.mbs = 1, p.gbs = 64, p.seq = 2048;
  const auto t = tn::predictTime(w, p, c);
  EXPECT_NEAR(t.step_s, t.compute_s + t.recompute_s + t.tp_comm_s + t.dp_comm_s + t.pp_comm_s + t.bubble_s + t.optimizer_s,
              1e-12);
  // (p − 1) micro-batch times of the slowest stage (its kernels and TP collectives), M = 64/(1·4) = 16.
  EXPECT_NEAR(t.bubble_s, (t.compute_s + t.recompute_s + t.tp_comm_s) * 3.0 / 16.0, 1e-12);
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

// ---- workload files: unknown keys, the stock Hugging Face config, absurd sizes ------------------

namespace {
std::string loadError(const std::string& name, const std::string& json, std::string* field = nullptr) {
  const std::string p = tempPath(name);
  std::ofstream(p) << json;
  try {
    wl::load(p);
  } catch (const UserError& e) {
    if (field) *field = e.field();
    return e.what();
  }
  return "";
}
const char* kShape = R"("n_layer":2,"n_head":2,"n_embd":32,"n_positions":64,"vocab_size":128)";
}  // namespace

TEST(Workloads, UnknownKeysInAWorkloadFileAreRefusedNamingTheNearestKnownKey) {
  std::string field;
  // A misspelling: the key it meant is named.
  std::string e = loadError("typo.json", std::string("{") + kShape + R"(,"dropuot":0.1})", &field);
  EXPECT_EQ(field, "workload.dropuot") << e;
  EXPECT_NE(e.find("unknown key \"dropuot\""), std::string::npos) << e;
  EXPECT_NE(e.find("nearest known key"), std::string::npos) << e;
  // An extra n_layers beside n_layer.
  e = loadError("extra.json", std::string("{") + kShape + R"(,"n_layers":48})", &field);
  EXPECT_EQ(field, "workload.n_layers") << e;
  EXPECT_NE(e.find("did you mean \"n_layer\"? (that key is set as well)"), std::string::npos) << e;
  // A key of another architecture.
  e = loadError("gqa.json", std::string("{") + kShape + R"(,"n_kv_head":8})", &field);
  EXPECT_EQ(field, "workload.n_kv_head") << e;
  // A Hugging Face key in a trainscope file: says how the two formats are told apart.
  e = loadError("hfkey.json", std::string("{") + kShape + R"(,"resid_pdrop":0.1})", &field);
  EXPECT_EQ(field, "workload.resid_pdrop") << e;
  EXPECT_NE(e.find("\"model_type\": \"gpt2\""), std::string::npos) << e;
  // Known keys still load.
  EXPECT_EQ(loadError("ok.json", std::string("{") + kShape + R"(,"name":"x","description":"y","n_ctx":64})"), "");
}

TEST(Workloads, TheStockHuggingFaceGpt2ConfigLoadsWithANoteThatDropoutIsNotTrained) {
  // openai-community/gpt2's config.json, as downloaded.
  const std::string p = tempPath("gpt2-config.json");
  std::ofstream(p) << R"({
  "activation_function": "gelu_new",
  "architectures": [
    "GPT2LMHeadModel"
  ],
  "attn_pdrop": 0.1,
  "bos_token_id": 50256,
  "embd_pdrop": 0.1,
  "eos_token_id": 50256,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2",
  "n_ctx": 1024,
  "n_embd": 768,
  "n_head": 12,
  "n_layer": 12,
  "n_positions": 1024,
  "resid_pdrop": 0.1,
  "summary_activation": null,
  "summary_first_dropout": 0.1,
  "summary_proj_to_labels": true,
  "summary_type": "cls_index",
  "summary_use_proj": true,
  "task_specific_params": {
    "text-generation": {
      "do_sample": true,
      "max_length": 50
    }
  },
  "vocab_size": 50257
}
)";
  const wl::Workload w = wl::load(p);
  EXPECT_EQ(w.parameterCount(), 124439808);
  ASSERT_EQ(w.notes.size(), 1u);
  EXPECT_NE(w.notes[0].find("resid_pdrop 0.1, embd_pdrop 0.1, attn_pdrop 0.1"), std::string::npos) << w.notes[0];
  EXPECT_NE(w.notes[0].find("trains without dropout"), std::string::npos) << w.notes[0];
}

TEST(Workloads, ModelTypeMustBeTheStringGpt2AndHuggingFaceTyposAreRefused) {
  std::string field;
  for (const char* type : {"5", "null", "\"llama\"", "[\"gpt2\"]"}) {
    const std::string e = loadError("type.json", std::string("{") + kShape + ",\"model_type\":" + type + "}", &field);
    EXPECT_EQ(field, "workload.model_type") << type << ": " << e;
  }
  // In a Hugging Face config, transformers' other keys load; a misspelt or unknown shape key does not.
  const std::string hf = std::string("{\"model_type\":\"gpt2\",") + kShape;
  EXPECT_EQ(loadError("hf.json", hf + R"(,"transformers_version":"4.44.0","use_cache":true,"torch_dtype":"float32"})"), "");
  EXPECT_NE(loadError("hf-typo.json", hf + R"(,"n_layers":24})", &field), "");
  EXPECT_EQ(field, "workload.n_layers");
  EXPECT_NE(loadError("hf-moe.json", hf + R"(,"n_experts":8})", &field), "");
  EXPECT_EQ(field, "workload.n_experts");
  EXPECT_NE(loadError("hf-act.json", hf + R"(,"activation_function":5})", &field), "");
  EXPECT_EQ(field, "workload.activation_function");
  EXPECT_NE(loadError("hf-drop.json", hf + R"(,"attn_pdrop":1.5})", &field), "");
  EXPECT_EQ(field, "workload.attn_pdrop");
}

TEST(Workloads, AbsurdSizesAreRefusedBeforeAnyModelIsBuilt) {
  std::string field;
  // 2^31 - 1 layers: the memory model's per-layer tensor list would allocate until killed.
  std::string e = loadError("deep.json", R"({"n_layer":2147483647,"n_head":2,"n_embd":32,"n_positions":64,"vocab_size":128})",
                            &field);
  EXPECT_EQ(field, "workload.n_layer") << e;
  // 12·C² overflows int64 for C = 2^31 - 1 (n_head 1 divides it).
  e = loadError("wide.json", R"({"n_layer":1,"n_head":1,"n_embd":2147483647,"n_positions":64,"vocab_size":128})", &field);
  EXPECT_EQ(field, "workload") << e;
  EXPECT_NE(e.find("parameters, beyond what trainscope models"), std::string::npos) << e;
  EXPECT_NO_THROW(wl::load("gpt3-175b"));
}

TEST(Config, Adam8bitBlockAndThreadsHaveBoundsAndLanesAreRefusedByResolve) {
  auto fieldOf = [](rt::TrainConfig c) {
    try {
      rt::resolve(c);
    } catch (const UserError& e) {
      return e.field();
    }
    return std::string();
  };
  rt::TrainConfig c;
  c.workload = "tiny";
  c.optimizer = rt::OptimizerKind::Adam8bit;
  c.adam8bit_block = 2147483647;  // every bias would hold two 2 GiB blocks; the memory model assumes 256
  EXPECT_EQ(fieldOf(c), "--adam8bit-block");
  c.adam8bit_block = 4096;
  EXPECT_EQ(fieldOf(c), "");
  rt::TrainConfig t;
  t.workload = "tiny";
  t.threads = 100000;
  t.oversubscribe = true;  // still refused: it would only livelock the host
  EXPECT_EQ(fieldOf(t), "--threads");
  // Lanes that the config rules out are refused by resolve(), which the launcher runs once.
  rt::TrainConfig l;
  l.workload = "tiny";
  l.nproc = 2;
  l.mbs = 2;
  l.cpu_lanes = 2;
  EXPECT_EQ(fieldOf(l), "--cpu-lanes");
  l.local_sgd = 1;  // no gradient all-reduce: lanes are fine
  EXPECT_EQ(fieldOf(l), "");
}

// ---- mixture-of-experts workloads (docs/architecture.md, "Mixture of experts") ------------------

TEST(MoeWorkloads, PresetsCountTotalAndActiveParametersByHand) {
  // DeepSpeed-MoE's 1.3B+MoE-128 (its Table 1: 52B): 12 of 24 layers hold 128 experts of 8C² + 5C
  // plus a router of 128·C instead of one 4C MLP; a token passes through one expert.
  const wl::Workload ds = wl::load("gpt-moe-1.3b-128e");
  const int64_t C = ds.n_embd, dense = wl::load("gpt3-1.3b").parameterCount();
  EXPECT_EQ(ds.moeLayers(), 12);
  EXPECT_EQ(ds.parameterCount(), dense + 12 * (128 * C + 127 * (8 * C * C + 5 * C)));
  EXPECT_EQ(ds.activeParameterCount(), dense + 12 * 128 * C);
  EXPECT_NEAR(double(ds.parameterCount()) / 52e9, 1.0, 0.01);
  // Mixtral-like: 8 GELU experts of width F = 14336 in all 32 layers, top-2.
  const wl::Workload mx = wl::load("mixtral-8x7b-like");
  const int64_t H = 4096, F = 14336, expert = 2 * H * F + F + H;
  const int64_t base = 32000 * H + 32768 * H + 32 * (4 * H * H + 8 * H) + 2 * H;  // no MLP
  EXPECT_EQ(mx.parameterCount(), base + 32 * (8 * H + 8 * expert));
  EXPECT_EQ(mx.activeParameterCount(), base + 32 * (8 * H + 2 * expert));
  EXPECT_FALSE(mx.notes.empty());  // says the experts are GELU, not SwiGLU
  // The memory model's tensor list covers the same parameters.
  for (const auto* w : {&ds, &mx}) {
    int64_t n = 0;
    for (const auto& t : wl::parameterTensors(*w)) n += t.numel();
    EXPECT_EQ(n, w->parameterCount()) << w->name;
  }
  // A dense workload is unchanged: active = total.
  const wl::Workload g = wl::load("gpt2-124m");
  EXPECT_EQ(g.activeParameterCount(), g.parameterCount());
}

TEST(MoeWorkloads, FlopsCountActiveExpertsAndDenseIsUnchanged) {
  const wl::Workload g = wl::load("gpt2-124m");
  EXPECT_EQ(wl::stepFlops(g, 8, 1024, wl::Recompute::Full).model,
            wl::stepFlops(8, 1024, g.n_layer, g.n_embd, g.vocab_size, wl::Recompute::Full).model);
  // tiny-moe: every layer top-2 of 4 experts of width 4C: per token forward each layer's MLP costs
  // 2·C·E (router) + 2·(4·C·4C) instead of 16·C²: 16·C² + 2·C·E more.
  const wl::Workload m = wl::load("tiny-moe");
  const double C = 32, tokens = 4.0 * 32, E = 4;
  const auto dense = wl::stepFlops(4, 32, m.n_layer, m.n_embd, m.vocab_size, wl::Recompute::Full);
  const auto moe = wl::stepFlops(m, 4, 32, wl::Recompute::Full);
  const double per_fwd = 2 * tokens * (16 * C * C + 2 * C * E);
  EXPECT_DOUBLE_EQ(moe.model - dense.model, 3 * per_fwd);
  EXPECT_DOUBLE_EQ(moe.hardware - dense.hardware, 4 * per_fwd);  // full recomputation runs it again
}

TEST(MoeWorkloads, BadKeysAreUserErrorsNamingTheKeyAndTheFix) {
  std::string field;
  auto moe = [](const std::string& extra) { return std::string("{") + kShape + R"(,"n_experts":4)" + extra + "}"; };
  std::string e = loadError("k3.json", moe(R"(,"top_k":3)"), &field);
  EXPECT_EQ(field, "workload.top_k") << e;
  EXPECT_NE(e.find("set top_k to 1"), std::string::npos) << e;
  e = loadError("e1.json", std::string("{") + kShape + R"(,"n_experts":1})", &field);
  EXPECT_EQ(field, "workload.n_experts") << e;
  e = loadError("every.json", moe(R"(,"moe_every":3)"), &field);  // beyond n_layer = 2
  EXPECT_EQ(field, "workload.moe_every") << e;
  e = loadError("cf.json", moe(R"(,"capacity_factor":-1)"), &field);
  EXPECT_EQ(field, "workload.capacity_factor") << e;
  EXPECT_NE(e.find("drop-less"), std::string::npos) << e;
  e = loadError("aux.json", moe(R"(,"aux_loss_coeff":"big")"), &field);
  EXPECT_EQ(field, "workload.aux_loss_coeff") << e;
  e = loadError("shared.json", moe(R"(,"shared_expert":1)"), &field);
  EXPECT_EQ(field, "workload.shared_expert") << e;
  // A MoE key on a dense model: says to set n_experts.
  e = loadError("dense.json", std::string("{") + kShape + R"(,"top_k":2})", &field);
  EXPECT_EQ(field, "workload.top_k") << e;
  EXPECT_NE(e.find("set n_experts"), std::string::npos) << e;
  // And good ones load.
  EXPECT_EQ(loadError("ok.json", moe(R"(,"top_k":2,"moe_every":2,"capacity_factor":1.25,"shared_expert":true)")), "");
}
