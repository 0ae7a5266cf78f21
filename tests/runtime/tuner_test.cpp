// tuner_test.cpp — the tuner's memory model against measured peaks: every configuration of a small
// CPU space (DP, TP, PP, ZeRO-1, ZeRO-3, SP, core lanes, bf16, GPipe, each checkpointing mode) is run for real and
// its measured peak (the run summary's) compared with `trainscope predict`'s. Within 10% each
// (the issue's bound); the distribution is printed. And a study of small-cpu on 2 ranks that searches
// ZeRO 0–3, virtual stages and context parallelism.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "trainscope/rundb/reader.h"
#include "trainscope/tuner/models.h"
#include "trainscope/tuner/cost_model.h"
#include "trainscope/tuner/profile.h"
#include "trainscope/tuner/study.h"
#include "trainscope/workloads/workload.h"
#include "util.h"

using trainscope::testing::cli;

namespace {
nlohmann::json lastJson(const std::string& out) {
  const auto at = out.rfind("\n{");
  return nlohmann::json::parse(out.substr(at == std::string::npos ? 0 : at + 1));
}
}  // namespace

namespace {

// One configuration of a CPU space, run for real and predicted (the memory harness below).
struct Cfg {
  int dp, tp, pp, mbs;
  const char* ckpt;
  int zero;  // ZeRO stage (0: none)
  int lanes = 1, ga = 2;
  const char* extra = "";  // --sequence-parallel, --precision bf16, --pp-schedule gpipe
  int cp = 1;              // context parallelism: the sequence over cp ranks, the ring's K/V blocks
  bool moe_load = false;   // MoE: predict with the run's own recorded routing (predict --moe-load RUN.db)
};

// Runs each configuration of `workload` for 2 steps and compares its measured peak (the run
// summary's) with `trainscope predict`'s: each within 10%, the median within 5% (the issues' aim).
// A new architecture is one more call with its workload (the Llama family's below).
void expectPeaksPredicted(const std::string& workload, const std::vector<Cfg>& space, double each = 0.10,
                          double median = 0.05) {
  std::vector<double> errors;
  for (const Cfg& c : space) {
    const int n = c.dp * c.cp * c.tp * c.pp, gbs = c.mbs * c.dp * c.ga, lanes = c.lanes;
    const std::string shape = " --workload " + workload + " --seq 64 --mbs " + std::to_string(c.mbs) + " --gbs " +
                              std::to_string(gbs) + " --ckpt " + c.ckpt + " --tp " + std::to_string(c.tp) + " --pp " +
                              std::to_string(c.pp) + (c.zero ? " --zero " + std::to_string(c.zero) : "") + c.extra +
                              (c.cp > 1 ? " --cp " + std::to_string(c.cp) : "");
    const std::string db = trainscope::testing::tempPath("peaks-" + std::to_string(errors.size()) + ".db");
    auto run = cli("run" + shape + " --nproc " + std::to_string(n) + " --cpu-lanes " + std::to_string(lanes) +
                   " --steps 2 --device cpu -q --json" + (c.moe_load ? " --overwrite --out " + db : ""));
    ASSERT_EQ(run.status, 0) << run.output;
    const std::string predict = "predict" + shape + " --cluster cpu-local --gpus " + std::to_string(n) +
                                (std::string(c.extra).find("--precision") == std::string::npos ? " --precision fp32" : "") +
                                " --cpu-lanes " + std::to_string(lanes) + " --json";
    auto pred = cli(predict + (c.moe_load ? " --moe-load " + db : ""));
    ASSERT_EQ(pred.status, 0) << pred.output;
    const double measured = lastJson(run.output)["summary"]["peak_bytes"].get<double>();
    const double predicted = lastJson(pred.output)["peak_bytes"].get<double>();
    const double err = (predicted - measured) / measured;
    errors.push_back(std::abs(err));
    std::printf("  %-40s measured %8.2f MiB  predicted %8.2f MiB  %+5.1f%%\n", shape.substr(shape.find("--mbs")).c_str(), measured / (1 << 20),
                predicted / (1 << 20), 100 * err);
    if (c.moe_load) {  // the routing priced, and what random routing's default would have predicted
      const nlohmann::json r = lastJson(pred.output)["moe_routing"];
      auto random = cli(predict);
      ASSERT_EQ(random.status, 0) << random.output;
      const double at_random = lastJson(random.output)["peak_bytes"].get<double>();
      std::printf("    measured routing: hottest EP rank %.4fx (%s); random routing's %.4fx: %8.2f MiB %+5.1f%%\n",
                  r["load"].get<double>(), r["text"].get<std::string>().c_str(),
                  lastJson(random.output)["moe_routing"]["load"].get<double>(), at_random / (1 << 20),
                  100 * (at_random - measured) / measured);
      EXPECT_EQ(r["source"], "measured") << r;
    }
    EXPECT_LE(std::abs(err), each) << shape;
  }
  std::sort(errors.begin(), errors.end());
  std::printf("  |error|: median %.1f%%, max %.1f%% over %zu configurations\n", 100 * errors[errors.size() / 2],
              100 * errors.back(), errors.size());
  // The issue's aim: 5%. Peaks are counted by the allocator, not sampled, so they do not vary.
  EXPECT_LE(errors[errors.size() / 2], median);
}

}  // namespace

TEST(TunerMemoryModel, PredictsMeasuredPeaksOfTheCpuSpaceWithinTenPercent) {
  // Every moment that can hold the peak is some configuration's: a layer's backward, the LM head's
  // forward (full checkpointing), ZeRO-1's reduce-scatter, ZeRO-2's last bucket, the core lanes' gradient sum (one
  // micro-batch and several).
  const std::vector<Cfg> space = {{1, 1, 1, 4, "none", false},      {1, 1, 1, 4, "full", false}, {1, 1, 1, 4, "selective", false},
                       {1, 1, 1, 8, "none", false},      {2, 1, 1, 4, "none", false}, {2, 1, 1, 2, "full", false},
                       {1, 2, 1, 4, "none", false},      {1, 1, 2, 4, "none", false}, {2, 1, 1, 4, "none", true},
                       {2, 1, 1, 2, "full", true},       {1, 1, 2, 8, "full", false, 1, 1},
                       {2, 1, 1, 4, "none", false, 1, 2, " --zero 3"}, {2, 1, 1, 2, "selective", false, 1, 2, " --zero 3"},
                       {1, 1, 1, 8, "none", false, 2, 1}, {1, 1, 1, 2, "full", false, 2, 4},
                       {1, 2, 1, 8, "selective", false, 1, 1, " --sequence-parallel"},
                       {1, 1, 2, 2, "none", false, 1, 4, " --precision bf16 --pp-schedule gpipe"},
                       {1, 1, 2, 2, "none", false, 1, 4, " --virtual-stages 2"},  // interleaved 1F1B
                       {2, 1, 1, 4, "none", 2},  {2, 1, 1, 2, "full", 2, 1, 2, " --precision bf16"},  // ZeRO-2
                       {1, 1, 1, 4, "none", 0, 1, 2, "", 2},  {1, 1, 1, 4, "selective", 0, 1, 2, "", 2}};  // CP 2
  expectPeaksPredicted("small-cpu", space);
}

// The Llama family (RMSNorm, RoPE, SwiGLU, GQA, untied head) on the runtime that trains it
// (issue 32's "measured CPU peaks within 5% of predict"): each layout within 5%. Full recomputation
// in fp32 and bf16 at two micro-batch sizes (the rebuilt SwiGLU's backward), and --precision fp8
// under gradient accumulation 2 and 4 (the FP8 weight cache held all step, the CPU's emulated FP8
// GEMMs' backward: docs/memory-model.md, "FP8 on the CPU") at mbs 4 and 8 and under PP 2, with each
// checkpointing mode and ZeRO-3; TP 2 with SP (the column-parallel GEMMs' gathered backward); CP 2
// under each checkpointing mode (the ring's K/V blocks of the 2 K/V heads, not the 4 query heads').
TEST(TunerMemoryModel, PredictsMeasuredPeaksOfTinyLlama) {
  const std::vector<Cfg> space = {{1, 1, 1, 4, "none", 0},      {1, 1, 1, 4, "full", 0},
                                  {1, 1, 1, 4, "selective", 0}, {2, 1, 1, 4, "none", 0},
                                  {1, 2, 1, 4, "none", 0},      {1, 1, 2, 4, "none", 0},
                                  {2, 1, 1, 4, "none", 2},      {1, 1, 1, 4, "none", 0, 1, 2, " --precision bf16"},
                                  {1, 1, 1, 8, "full", 0, 1, 1}, {1, 1, 1, 4, "full", 0, 1, 2, " --precision bf16"},
                                  {1, 1, 1, 4, "none", 0, 1, 2, " --precision fp8"},
                                  {1, 1, 1, 4, "none", 0, 1, 4, " --precision fp8"},
                                  {1, 1, 1, 4, "full", 0, 1, 2, " --precision fp8"},
                                  {1, 1, 1, 4, "selective", 0, 1, 2, " --precision fp8"},
                                  {2, 1, 1, 4, "full", 0, 1, 2, " --zero 3 --precision fp8"},
                                  {1, 1, 1, 8, "none", 0, 1, 2, " --precision fp8"},
                                  {1, 1, 1, 8, "full", 0, 1, 2, " --precision fp8"},
                                  {1, 1, 1, 8, "selective", 0, 1, 2, " --precision fp8"},
                                  {1, 1, 2, 4, "none", 0, 1, 2, " --precision fp8"},
                                  {1, 1, 2, 4, "full", 0, 1, 2, " --precision fp8"},
                                  {1, 2, 1, 4, "selective", 0, 1, 2, " --sequence-parallel"},
                                  {1, 2, 1, 4, "none", 0, 1, 2, " --sequence-parallel"},
                                  {1, 1, 1, 4, "none", 0, 1, 2, "", 2},  // CP 2: the ring's grouped K/V blocks
                                  {1, 1, 1, 4, "selective", 0, 1, 2, "", 2},
                                  {1, 1, 1, 4, "full", 0, 1, 2, "", 2}};
  expectPeaksPredicted("tiny-llama", space, 0.05);
}

// Mixtral (SwiGLU experts, top-2, drop-less, GQA) in one process and with its 4 experts split over
// two ranks (ep 2): each within 5%, under each checkpointing mode. Full recomputation's peak is the
// rebuilt MoE layer's combine backward (ep 1) or its forward's return all-to-all (ep 2), which the
// model prices (moeRecomputedCombineBytes; docs/memory-model.md, "Mixture of experts"); before, these
// rows measured 5.4% (ep 1) and 12-13% (ep 2) above predict. At ep 2 each run's own recorded
// routing is priced (predict --moe-load RUN.db): its hotter rank receives ~1.07-1.13x the rows
// balanced routing gives it, and ep 2 with selective recomputation, whose peak is that rank's last
// MoE layer's forward all-to-all, measured 3.5-6.4% above the balanced prediction run to run
// (docs/memory-model.md, "Routing load").
TEST(TunerMemoryModel, PredictsMeasuredPeaksOfTinyMixtral) {
  const std::vector<Cfg> space = {{1, 1, 1, 4, "none", 0},
                                  {1, 1, 1, 4, "selective", 0},
                                  {1, 1, 1, 4, "full", 0},
                                  {2, 1, 1, 4, "none", 0, 1, 2, " --ep 2", 1, true},
                                  {2, 1, 1, 4, "selective", 0, 1, 2, " --ep 2", 1, true},
                                  {2, 1, 1, 4, "full", 0, 1, 2, " --ep 2", 1, true}};
  expectPeaksPredicted("tiny-mixtral", space, 0.05);
}

TEST(Predict, ReportsEveryFigureAndRefusesAnInvalidPlan) {
  auto r = cli("predict --workload gpt3-175b --cluster h100-80gb-x8 --nodes 64 --tp 8 --pp 8 --mbs 1 --gbs 1536 "
               "--seq 2048 --ckpt selective --sequence-parallel --json");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = lastJson(r.output);
  EXPECT_EQ(j["dp"], 8);
  EXPECT_EQ(j["stages"].size(), 8u);
  EXPECT_TRUE(j["fits"].get<bool>());
  double sum = 0;
  for (const char* k : {"compute_s", "recompute_s", "tp_comm_s", "dp_comm_s", "pp_comm_s", "bubble_s", "optimizer_s"})
    sum += j["time"][k].get<double>();
  EXPECT_NEAR(sum, j["time"]["step_s"].get<double>(), 1e-9);
  EXPECT_GT(j["stages"][0]["megatron_activations_bytes"].get<double>(), 0);
  auto bad = cli("predict --workload gpt2-124m --cluster h100-80gb-x8 --tp 5");
  EXPECT_EQ(bad.status, 2) << bad.output;
  auto heads = cli("predict --workload gpt2-124m --cluster h100-80gb-x8 --tp 8");
  EXPECT_EQ(heads.status, 2) << heads.output;
  EXPECT_NE(heads.output.find("does not divide n_head"), std::string::npos) << heads.output;
}

TEST(MemLimit, AnAllocationPastTheLimitEndsTheRunOutOfMemoryWithItsBytes) {
  auto r = cli("run --workload small-cpu --seq 64 --mbs 4 --steps 3 --device cpu -q --mem-limit 60M --skip-memory-check");
  EXPECT_EQ(r.status, 3) << r.output;  // kExitOutOfMemory, as a CUDA out-of-memory
  EXPECT_NE(r.output.find("out of memory on rank 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tried to allocate"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("62914560 bytes"), std::string::npos) << r.output;  // the limit, 60 MiB
  EXPECT_EQ(r.output.find("frame #"), std::string::npos) << r.output;
  // Under the limit the same run trains, and its measured peak stays below it.
  auto ok = cli("run --workload small-cpu --seq 64 --mbs 4 --steps 3 --device cpu -q --mem-limit 200M --json");
  ASSERT_EQ(ok.status, 0) << ok.output;
  EXPECT_LE(lastJson(ok.output)["summary"]["peak_bytes"].get<int64_t>(), 200ll << 20);
  auto bad = cli("run --workload tiny --mem-limit 12parsecs");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find("--mem-limit: unknown unit"), std::string::npos) << bad.output;
}

TEST(MemoryCheck, ARunThatCannotFitIsRefusedBeforeAnythingIsAllocated) {
  const std::string db = trainscope::testing::tempPath("never-fits.db");
  auto r = cli("run --workload gpt2-1.5b --mbs 64 --steps 1 --device cpu -q --out " + db);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("needs about"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("are available"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--skip-memory-check"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(db));
  auto limited = cli("run --workload small-cpu --seq 64 --mbs 4 --steps 1 --device cpu -q --mem-limit 40M");
  EXPECT_EQ(limited.status, 2) << limited.output;
  EXPECT_NE(limited.output.find("--mem-limit: this run needs about"), std::string::npos) << limited.output;
  // Small figures in a unit that shows them (it printed "needs 0.00 GiB … 0.00 GiB are available").
  auto tiny = cli("run --workload tiny --steps 1 --device cpu -q --mem-limit 1K");
  EXPECT_EQ(tiny.status, 2) << tiny.output;
  EXPECT_EQ(tiny.output.find("0.00 GiB"), std::string::npos) << tiny.output;
  EXPECT_NE(tiny.output.find("but 1.00 KiB are available"), std::string::npos) << tiny.output;
}

// The measured time model on a real traced run: its costs are read from the ranges, its own plan is
// composed back from them, and `predict --profile` uses them for plans of the same layer shape only.
TEST(MeasuredCosts, AreReadFromARealTracedRunAndComposeItsOwnStep) {
  namespace tn = trainscope::tuner;
  const std::string db = trainscope::testing::tempPath("profile-dp2-full.db");
  const std::string shape = " --workload small-cpu --seq 64 --mbs 2 --gbs 8 --ckpt full";
  auto run = cli("run" + shape + " --nproc 2 --steps 5 --device cpu -q --json --overwrite --trace " + db);
  ASSERT_EQ(run.status, 0) << run.output;
  const double measured = lastJson(run.output)["summary"]["step_time_median_s"].get<double>();

  const auto w = trainscope::workloads::load("small-cpu");
  tn::Plan p;
  p.dp = 2, p.mbs = 2, p.gbs = 8, p.seq = 64, p.ckpt = trainscope::runtime::Checkpointing::Full;
  p.precision = trainscope::runtime::Precision::FP32, p.cpu = true;
  trainscope::rundb::RunReader reader(db);
  const tn::LayerCosts k = tn::costsFromRun(reader, w, p);
  EXPECT_GT(k.layer_fwd_s, 0);
  EXPECT_GT(k.layer_bwd_s, 0);
  EXPECT_GT(k.recompute_full_s, 0);       // full checkpointing: the recompute ranges
  EXPECT_EQ(k.recompute_selective_s, 0);
  EXPECT_GT(k.head_s, 0);
  EXPECT_GT(k.optimizer_s_per_param, 0);
  EXPECT_GT(k.dp_sync_bytes, 0);          // dp 2: the gradient all-reduce's bytes and its exposed time
  EXPECT_GE(k.dp_hidden_share, 0);
  EXPECT_LE(k.dp_hidden_share, 1);
  // The composition of the run's own plan adds up the same trace's parts (medians over its steps),
  // exactly as composeTime defines it. Only figures of this one run are compared, by arithmetic: how
  // fast a busy machine ran the steps moves every part alike and changes none of these equalities.
  // (The composed step against the run's measured median is printed, not held to a ratio: medians
  // of parts are not the median of their sum, and on a loaded machine they drift apart.)
  const tn::Cluster c = tn::loadCluster("cpu-local");
  tn::MeasuredCosts m;
  m.add(tn::shapeKey(p, c), k);
  const auto t = tn::composeTime(w, p, c, m);
  ASSERT_TRUE(t);
  std::printf("  composed %.1f ms, measured %.1f ms (same trace)\n", t->step_s * 1e3, measured * 1e3);
  ASSERT_GT(measured, 0);
  const double M = double(p.ga()), L = double(w.n_layer);  // 2 micro-batches per rank; one stage of all layers
  const double n_params = double(tn::predictMemory(w, p).stages.front().params) / 4.0;  // fp32: 4 bytes each
  const double eps = 1e-12 * t->step_s;                                                // rounding only
  EXPECT_NEAR(t->compute_s, M * (L * (k.layer_fwd_s + k.layer_bwd_s) + k.embed_s + k.head_s), eps);
  EXPECT_NEAR(t->recompute_s, M * L * k.recompute_full_s, eps);
  EXPECT_NEAR(t->dp_comm_s, k.dp_sync_s, eps);  // the same plan: the same all-reduce bytes
  EXPECT_NEAR(t->optimizer_s, k.optimizer_s_per_param * n_params, eps);
  EXPECT_GE(k.other_s, 0);
  EXPECT_NEAR(t->other_s, k.other_s, eps);
  EXPECT_EQ(t->pp_comm_s, 0);
  EXPECT_EQ(t->bubble_s, 0);
  EXPECT_NEAR(t->step_s, t->compute_s + t->recompute_s + t->dp_comm_s + t->optimizer_s + t->other_s, eps);

  const std::string flags = " --cluster cpu-local --gpus 2 --precision fp32 --json --profile " + db;
  auto same = cli("predict" + shape + flags);
  ASSERT_EQ(same.status, 0) << same.output;
  EXPECT_EQ(lastJson(same.output)["time_source"].get<std::string>().rfind("measured", 0), 0u) << same.output;
  EXPECT_NEAR(lastJson(same.output)["time"]["step_s"].get<double>(), t->step_s, 1e-9);
  // Other shapes of this model: none (selective on the same shape still uses the layer costs).
  auto sel = cli("predict --workload small-cpu --seq 64 --mbs 2 --gbs 8 --ckpt selective" + flags);
  EXPECT_EQ(lastJson(sel.output)["time_source"].get<std::string>().rfind("measured", 0), 0u) << sel.output;
  auto tp = cli("predict --workload small-cpu --seq 64 --mbs 2 --gbs 8 --tp 2" + flags);
  ASSERT_EQ(tp.status, 0) << tp.output;
  EXPECT_EQ(lastJson(tp.output)["time_source"], "analytic");
  EXPECT_NE(tp.output.find("no profiled run has this plan's layer shape"), std::string::npos) << tp.output;
  // A one-process run with automatic core lanes is filed under the lanes it used (2 here: one per core
  // of this 2-core machine, at most mbs), found from the threads that ran its forward ranges.
  const std::string auto_lanes = trainscope::testing::tempPath("profile-auto-lanes.db");
  ASSERT_EQ(cli("run" + shape + " --nproc 1 --steps 3 --device cpu -q --overwrite --trace " + auto_lanes).status, 0);
  trainscope::rundb::RunReader lanes_reader(auto_lanes);
  const int64_t lanes = tn::lanesOfRun(lanes_reader);
  EXPECT_GE(lanes, 1);
  auto with_lanes = cli("predict" + shape + " --cluster cpu-local --gpus 1 --precision fp32 --json --cpu-lanes " +
                        std::to_string(lanes) + " --profile " + auto_lanes);
  EXPECT_EQ(lastJson(with_lanes.output)["time_source"].get<std::string>().rfind("measured", 0), 0u) << with_lanes.output;
  // A run of another model, and a run without ranges, are refused with the fix.
  auto other = cli("predict --workload tiny --seq 64 --mbs 2 --gbs 8" + flags);
  EXPECT_EQ(other.status, 2) << other.output;
  EXPECT_NE(other.output.find("--profile"), std::string::npos) << other.output;
  const std::string bare = trainscope::testing::tempPath("profile-untraced.db");
  ASSERT_EQ(cli("run" + shape + " --nproc 1 --steps 3 --device cpu -q --overwrite --out " + bare).status, 0);
  auto untraced = cli("predict" + shape + " --cluster cpu-local --gpus 1 --precision fp32 --profile " + bare);
  EXPECT_EQ(untraced.status, 2) << untraced.output;
  EXPECT_NE(untraced.output.find("--trace"), std::string::npos) << untraced.output;
}

// Issue 22's knobs in a real study of small-cpu on 2 ranks: the space holds ZeRO 0–3, virtual stages
// and CP; each candidate is valid (and then measured like any other) or rejected with its reason —
// the runtime's own refusal while it does not run a knob —, the table and --json show the three
// columns, and the pick is a measured candidate.
TEST(Tune, TwoRanksSearchZeroStagesVirtualStagesAndContextParallelism) {
  const std::string study = trainscope::testing::tempPath("knobs.db");
  const std::string space =
      "tune --workload small-cpu --seq 64 --gbs 8 --mbs 4 --ckpt none --ranks 2 --no-sequence-parallel "
      "--pp-schedules 1f1b --zero 0,1,2,3 --cp 1,2 --virtual-stages 1,2 --mem-limit 100M ";
  // The table shows the three knobs in columns of their own.
  const auto table = cli(space + "--predict-only --study " + trainscope::testing::tempPath("knobs-table.db"));
  ASSERT_EQ(table.status, 0) << table.output;
  EXPECT_NE(table.output.find("  id  zero  v cp ep  "), std::string::npos) << table.output;
  auto r = cli(space + "--trial-steps 2 --first-round 4 --final-rounds 1 --json --study " + study);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = lastJson(r.output);
  std::set<int> zeros;
  std::set<int64_t> vs, cps;
  std::map<int64_t, const nlohmann::json*> by_id;
  for (const auto& x : j["ranked"]) {
    by_id[x["id"].get<int64_t>()] = &x;
    zeros.insert(x["zero"].get<int>());
    vs.insert(x["virtual_stages"].get<int64_t>());
    cps.insert(x["cp"].get<int64_t>());
    const std::string why = x["rejected"];
    const std::string plan = x["plan"];
    if (why.rfind("the runtime refuses it: ", 0) == 0) {
      // resolve()'s error: the flag of the knob it does not run, and its fix.
      EXPECT_NE(why.find("--"), std::string::npos) << why;
      EXPECT_NE(why.find("(fix: "), std::string::npos) << why;
    } else if (why.empty()) {
      EXPECT_GT(x["predicted_step_s"].get<double>(), 0) << plan;
    }
  }
  EXPECT_EQ(zeros, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(vs, (std::set<int64_t>{1, 2}));
  EXPECT_EQ(cps, (std::set<int64_t>{1, 2}));
  // Picked by measurement: the recommendation ran ok, valid, and no finalist pooled faster.
  const int64_t pick = j["recommended"];
  ASSERT_GE(pick, 0);
  EXPECT_TRUE((*by_id.at(pick))["rejected"].get<std::string>().empty());
  const auto trials = trainscope::tuner::readStudy(study).trials;
  const double picked = trainscope::tuner::pooledStepTime(trials, pick);
  EXPECT_GT(picked, 0);
  int64_t last = 0;
  for (const auto& t : trials) last = std::max(last, t.round);
  for (const auto& t : trials)
    if (t.round == last && t.status == trainscope::tuner::TrialStatus::Ok)
      EXPECT_LE(picked, trainscope::tuner::pooledStepTime(trials, t.candidate)) << t.candidate;
}
