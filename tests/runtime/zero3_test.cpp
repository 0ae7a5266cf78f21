// zero3_test.cpp — ZeRO-3 (fully sharded parameters, runtime/src/parallel/zero3.h) through the real
// command line and real Gloo process groups:
//   dp 2 trains as one process does (losses, final weights): fp32, full and selective checkpointing
//   with gradient accumulation, bf16; with TP 2; hybrid sharding (shard 2 x replicate 2) on 4 ranks;
//   each layer's parameters all-gathered in forward and backward and its gradients reduce-scattered,
//   counted in the run database; the prefetch of layer l+1 issued while layer l's forward runs;
//   the combinations it does not run refused, naming the flag.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "trainscope/rundb/reader.h"
#include "same_training.h"
#include "util.h"

using trainscope::testing::cli;
using trainscope::testing::CliResult;
using trainscope::testing::sh;
using trainscope::testing::runTiny;
using trainscope::testing::tempPath;
namespace rdb = trainscope::rundb;

namespace {

constexpr int kLayers = 2;  // the tiny workload's

// The tiny model, 4 steps of a global batch of 8 sequences, constant LR, no clipping (as
// parallel_test.cpp, whose tolerances these are).
std::string run(const std::string& name, const std::string& extra) { return runTiny("zero3_" + name, extra); }

using trainscope::testing::expectSameTraining;  // losses 1e-5, weights 1e-4: same_training.h

// Collectives of one rank by "op group".
std::map<std::string, int> countCollectives(const std::string& db, int rank) {
  std::map<std::string, int> n;
  for (const auto& c : rdb::RunReader(db).collectives(rank)) ++n[c.op + " " + c.group];
  return n;
}

class Zero3 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ref_ = new std::string(run("dp1", "")); }
  static void TearDownTestSuite() { delete ref_; }
  static std::string* ref_;
};
std::string* Zero3::ref_ = nullptr;

}  // namespace

TEST_F(Zero3, DataParallelTwoEqualsOneProcessLayerByLayer) {
  const std::string db = run("dp2", "--nproc 2 --zero 3");
  expectSameTraining(*ref_, db);
  // 4 steps x 2 micro-batches (mbs 2, gbs 8, dp 2). Each micro-batch gathers the embeddings' unit and
  // each layer in forward, each layer again in backward, and reduce-scatters every unit's gradients
  // once; no gradient all-reduce, no all-gather after the step.
  const int micro = 4 * 2;
  for (int rank = 0; rank < 2; ++rank) {
    auto n = countCollectives(db, rank);
    EXPECT_EQ(n["all_gather dp"], micro * (1 + 2 * kLayers)) << "rank " << rank;
    EXPECT_EQ(n["reduce_scatter dp"], micro * (1 + kLayers)) << "rank " << rank;
    EXPECT_EQ(n["all_reduce dp"], 4 * 2) << "rank " << rank;  // per step: the loss and the norm's Σg²
  }
  // Each rank holds half of the weights, of the fp32 gradients (4 bytes per parameter, as many as
  // the fp32 weights) and of the optimizer state that one process does (padding aside).
  const auto one = rdb::readSteps(*ref_, 0).back(), two = rdb::readSteps(db, 0).back();
  const double weights = double(one.param_bytes);
  EXPECT_NEAR(double(two.param_bytes), weights / 2, 0.01 * weights);
  EXPECT_NEAR(double(two.grad_bytes), weights / 2, 0.01 * weights);
  EXPECT_NEAR(double(two.optim_bytes), double(one.optim_bytes) / 2, 0.01 * double(one.optim_bytes));
}

TEST_F(Zero3, FullCheckpointingWithGradientAccumulation) {
  // mbs 1: 4 micro-batches per rank, each recomputing its blocks from re-gathered parameters.
  expectSameTraining(*ref_, run("dp2_full_ga", "--nproc 2 --zero 3 --ckpt full --mbs 1"));
}

TEST_F(Zero3, SelectiveCheckpointingWithGradientAccumulation) {
  expectSameTraining(*ref_, run("dp2_sel_ga", "--nproc 2 --zero 3 --ckpt selective --mbs 1"));
}

// In bf16 every two-rank layout (DDP, ZeRO-1 alike) differs from one process by ~2e-5 in the loss:
// one process sums 4 micro-batches' fp32 main gradients in another order, and bf16's rounding of the
// next forward magnifies it. ZeRO-3 is held to plain data parallelism in bf16 at the fp32 tolerances
// (measured: bit-identical), and to the one process at bf16's 1e-4.
TEST_F(Zero3, Bf16EqualsDataParallelInBf16) {
  const std::string one = run("dp1_bf16", "--precision bf16"), ddp = run("dp2_bf16", "--nproc 2 --precision bf16");
  const std::string db = run("dp2_zero3_bf16", "--nproc 2 --zero 3 --precision bf16");
  expectSameTraining(ddp, db);
  auto a = rdb::readSteps(one), b = rdb::readSteps(db);
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) EXPECT_LE(std::abs(b[k].loss - a[k].loss) / a[k].loss, 1e-4) << "step " << k;
}

TEST_F(Zero3, WithTensorParallelism) { expectSameTraining(*ref_, run("dp2tp2", "--nproc 4 --tp 2 --zero 3")); }

TEST_F(Zero3, HybridShardTwoReplicateTwoEqualsOneProcess) {
  const std::string db = run("hybrid", "--nproc 4 --zero 3 --zero-shard-size 2");
  expectSameTraining(*ref_, db);
  for (int rank = 0; rank < 4; ++rank) {
    auto n = countCollectives(db, rank);
    // ga 1: gathers and reduce-scatters in the shard group, one all-reduce per unit over the replicas.
    EXPECT_EQ(n["all_gather zero_shard"], 4 * (1 + 2 * kLayers)) << "rank " << rank;
    EXPECT_EQ(n["reduce_scatter zero_shard"], 4 * (1 + kLayers)) << "rank " << rank;
    EXPECT_EQ(n["all_reduce zero_replica"], 4 * (1 + kLayers)) << "rank " << rank;
  }
}

// The prefetch: the all-gather of layer l+1 is issued inside layer l's forward range (before layer l
// computes), so the two intervals overlap by construction; how much of the gather the compute hides
// is a measurement, reported in docs/memory-model.md, not asserted.
TEST(Zero3Trace, PrefetchAllGatherIsIssuedWhileThePreviousLayerRuns) {
  const std::string db = tempPath("zero3_trace.db");
  CliResult r = sh(std::string("timeout 300 ") + TRAINSCOPE_CLI +
                   " run --workload tiny --seq 32 --mbs 2 --gbs 4 --steps 2 --device cpu -q --overwrite --nproc 2"
                   " --zero 3 --trace " + db + " --trace-level ranges");
  ASSERT_EQ(r.status, 0) << r.output;
  rdb::RunReader reader(db);
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<rdb::Range> forwards, layers;
    for (const auto& e : reader.events<rdb::Range>(rank)) {
      if (reader.string(e.name) == "forward") forwards.push_back(e);
      if (reader.string(e.name) == "layer") layers.push_back(e);
    }
    ASSERT_EQ(forwards.size(), 2u);  // 2 steps, one micro-batch each
    int prefetches = 0, gathers = 0;
    for (const auto& c : reader.collectives(rank)) {
      if (c.op != "all_gather" || c.group != "dp") continue;
      ++gathers;
      for (const auto& f : forwards)
        for (const auto& l : layers)
          if (l.start_ns >= f.start_ns && l.end_ns <= f.end_ns && c.start_ns >= l.start_ns && c.start_ns < l.end_ns) {
            EXPECT_GT(c.end_ns, c.start_ns);
            ++prefetches;
          }
    }
    EXPECT_EQ(gathers, 2 * (1 + 2 * kLayers)) << "rank " << rank;
    // In each forward, layers 0 … L−2 each issue the next one's gather; layer 0's own was issued with
    // the embeddings' before the first layer.
    EXPECT_EQ(prefetches, 2 * (kLayers - 1)) << "rank " << rank;
  }
}

TEST(Zero3Config, WhatItDoesNotRunIsRefusedNamingTheFlag) {
  const std::string base =
      std::string(TRAINSCOPE_CLI) + " run --workload tiny --seq 32 --mbs 2 --steps 1 --device cpu -q ";
  auto expectRefused = [&](const std::string& flags, const std::string& field) {
    CliResult r = sh(base + flags);
    EXPECT_EQ(r.status, 2) << flags << "\n" << r.output;
    EXPECT_NE(r.output.find(field), std::string::npos) << flags << "\n" << r.output;
  };
  expectRefused("--nproc 4 --pp 2 --zero 3", "--zero");
  expectRefused("--nproc 4 --tp 2 --sequence-parallel --zero 3", "--sequence-parallel");
  expectRefused("--nproc 2 --zero 3 --optimizer adafactor", "--optimizer");
  expectRefused("--nproc 4 --zero 3 --zero-shard-size 3", "--zero-shard-size");
  expectRefused("--nproc 2 --zero 1 --zero-shard-size 2", "--zero-shard-size");
}

namespace {
nlohmann::json lastJson(const std::string& out) {
  const auto at = out.rfind("\n{");
  return nlohmann::json::parse(out.substr(at == std::string::npos ? 0 : at + 1));
}
}  // namespace

// The measured per-rank peak (the allocator's count, not sampled) against `predict`'s for small-cpu
// sharded over d = 1, 2, 4 ranks (d = 1: nothing to shard, the unsharded run), without and with full
// checkpointing, and in bf16 for d = 2, 4; within 5% each. Named for the tuner's memory tests, which
// run alone (tests/CMakeLists.txt). The table is in docs/memory-model.md, "ZeRO-3 as run".
TEST(TunerMemoryModel, ZeroThreeMeasuredPerRankPeaksForOneTwoFourRanks) {
  struct Row {
    const char* ckpt;
    const char* precision;
    int d;
  };
  const Row rows[] = {{"none", "fp32", 1}, {"none", "fp32", 2}, {"none", "fp32", 4}, {"full", "fp32", 1},
                      {"full", "fp32", 2}, {"full", "fp32", 4}, {"none", "bf16", 2}, {"none", "bf16", 4}};
  for (const Row& r : rows) {
    const std::string shape = " --workload small-cpu --seq 64 --mbs 4 --gbs " + std::to_string(8 * r.d) + " --ckpt " +
                              r.ckpt + " --precision " + r.precision + (r.d > 1 ? " --zero 3" : "");
    auto run = cli("run" + shape + " --nproc " + std::to_string(r.d) + " --cpu-lanes 1 --steps 2 --device cpu -q --json");
    ASSERT_EQ(run.status, 0) << run.output;
    auto pred = cli("predict" + shape + " --cluster cpu-local --nodes 2 --gpus " + std::to_string(r.d) +
                    " --cpu-lanes 1 --json");
    ASSERT_EQ(pred.status, 0) << pred.output;
    const double measured = lastJson(run.output)["summary"]["peak_bytes"].get<double>();
    const double predicted = lastJson(pred.output)["peak_bytes"].get<double>();
    std::printf("  ckpt %-4s %s d %d  measured %8.2f MiB  predicted %8.2f MiB  %+5.1f%%\n", r.ckpt, r.precision, r.d,
                measured / (1 << 20), predicted / (1 << 20), 100 * (predicted - measured) / measured);
    EXPECT_LE(std::abs(predicted - measured) / measured, 0.05) << shape;
  }
}
