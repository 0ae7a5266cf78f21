// zero_test.cpp — ZeRO-2 (runtime/src/parallel/grad_sync.cpp, Mode::Zero2) through the real command
// line and real Gloo process groups:
//   dp2 trains like one process (fp32; small buckets reduce-scattered during backward; gradient
//   accumulation), and like plain DP in bf16 (accumulation, full checkpointing, clipping) and fp16
//   (loss scale, overflow skips); with PP and with TP + SP under clipping; SGD and 8-bit Adam on
//   shards; Adafactor refused by name;
//   a rank keeps 1/d of the gradients and of the optimizer state;
//   the measured per-rank peak for d = 1, 2, 4 against the memory model (`predict`), within 5%;
//   a traced run records the reduce-scatters and all-gathers as collectives linked across ranks.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/report.h"
#include "same_training.h"
#include "util.h"

using trainscope::testing::cli;
using trainscope::testing::CliResult;
using trainscope::testing::sh;
using trainscope::testing::runTiny;
using trainscope::testing::tempPath;
namespace rdb = trainscope::rundb;

namespace {

// The tiny model, 4 steps of a global batch of 8 sequences, constant LR, no clipping (parallel_test.cpp's).
std::string run(const std::string& name, const std::string& extra) { return runTiny("zero2_" + name, extra); }

// same_training.h's comparison, and the same steps skipped (the fp16 loss scale's overflows).
void expectSameTraining(const std::string& ref_db, const std::string& db, double tol = 1e-5, double wtol = 1e-4) {
  trainscope::testing::expectSameTraining(ref_db, db, tol, wtol, /*same_skips=*/true);
}

nlohmann::json lastJson(const std::string& out) {
  const auto at = out.rfind("\n{");
  return nlohmann::json::parse(out.substr(at == std::string::npos ? 0 : at + 1));
}

class Zero2 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ref_ = new std::string(run("dp1", "")); }
  static void TearDownTestSuite() { delete ref_; }
  static std::string* ref_;
};
std::string* Zero2::ref_ = nullptr;

}  // namespace

TEST_F(Zero2, TwoRanksEqualOneProcessAndKeepHalfTheGradientsAndState) {
  const std::string db = run("dp2", "--nproc 2 --zero 2");
  expectSameTraining(*ref_, db);
  // What a rank keeps between steps: ⌈n/2⌉ fp32 gradients and AdamW's m and v for them (its bucket
  // shard: the tiny model is one bucket, so at most one padding element), the weights whole.
  const auto one = rdb::readSteps(*ref_, 0);
  for (int r = 0; r < 2; ++r) {
    const auto two = rdb::readSteps(db, r);
    ASSERT_EQ(two.size(), one.size());
    const int64_t n = one[3].param_bytes / 4;
    EXPECT_EQ(two[3].param_bytes, one[3].param_bytes);
    EXPECT_EQ(two[3].grad_bytes, 4 * ((n + 1) / 2)) << "rank " << r;
    EXPECT_NEAR(double(two[3].optim_bytes), double(one[3].optim_bytes) / 2, 8.0) << "rank " << r;
  }
}

TEST_F(Zero2, SmallBucketsReducedDuringBackwardWithAccumulationOnFourRanks) {
  // 10 KB buckets: the tiny model's 31,616 parameters make many, each reduce-scattered as soon as it
  // fills; mbs 1 on 4 ranks is 2 micro-batches each, every one reduced into the shard.
  const std::string db = run("dp4_small", "--nproc 4 --zero 2 --mbs 1 --bucket-mb 0.01");
  expectSameTraining(*ref_, db);
  int64_t reduce_scatters = 0, all_gathers = 0;
  for (const auto& c : rdb::RunReader(db).collectives()) {
    if (c.group != "dp" || c.rank != 0) continue;
    reduce_scatters += c.op == "reduce_scatter";
    all_gathers += c.op == "all_gather";
  }
  // Per step: one reduce-scatter per bucket per micro-batch, one all-gather per bucket.
  ASSERT_GT(all_gathers, 4);
  EXPECT_EQ(all_gathers % 4, 0);
  EXPECT_EQ(reduce_scatters, 2 * all_gathers);
}

// bf16/fp16: plain DP itself differs from one process in bf16 by more than the fp32 tolerances (each
// layout sums the fp32 main gradients in its own order, and the bf16 weights round the difference
// up), so ZeRO-2 is compared with plain DP on the same ranks, which it must equal: the same
// micro-batches, the same sums. Against one process: the losses, to bf16's 1e-4.
TEST_F(Zero2, Bf16WithAccumulationCheckpointingAndClippingEqualsDataParallel) {
  const std::string flags = "--precision bf16 --ckpt full --clip 0.5 --mbs 1";  // ga 4 on 2 ranks
  const std::string plain = run("dp2_bf16_plain", "--nproc 2 " + flags);
  const std::string zero = run("dp2_bf16_zero", "--nproc 2 --zero 2 --bucket-mb 0.02 " + flags);
  expectSameTraining(plain, zero);
  expectSameTraining(run("dp1_bf16", flags), zero, 1e-4, 1.0);
}

TEST_F(Zero2, Fp16LossScaleSkipsTheSameStepsAsDataParallel) {
  // An initial scale of 2^23 overflows: the first steps are skipped, halving the scale, on every rank alike.
  const std::string flags = "--precision fp16 --fp16-init-scale 8388608 --steps 8 --mbs 1";
  const std::string zero = run("dp2_fp16_zero", "--nproc 2 --zero 2 " + flags);
  expectSameTraining(run("dp2_fp16_plain", "--nproc 2 " + flags), zero);
  const auto steps = rdb::readSteps(zero, 0);
  EXPECT_TRUE(steps.front().skipped);
  EXPECT_FALSE(steps.back().skipped);
  EXPECT_LT(steps.back().loss_scale, steps.front().loss_scale);
}

TEST_F(Zero2, SgdAndEightBitAdamUpdateTheirShards) {
  // SGD is element-wise: equal to one process. 8-bit Adam quantises in blocks of each shard's slice,
  // not of the whole tensor, so it only tracks one process (its own quantisation error).
  const std::string sgd = "--optimizer sgd --lr 0.5 --momentum 0.9";
  expectSameTraining(run("dp1_sgd", sgd), run("dp2_sgd", "--nproc 2 --zero 2 " + sgd));
  const auto a = rdb::readSteps(run("dp1_8bit", "--optimizer adam8bit"));
  const auto b = rdb::readSteps(run("dp2_8bit", "--nproc 2 --zero 2 --optimizer adam8bit"), 0);
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) EXPECT_NEAR(b[k].loss, a[k].loss, 1e-3 * a[k].loss) << "step " << k;
}

TEST_F(Zero2, WithPipelineAndWithSequenceParallelismUnderClipping) {
  // Three layers so that stages differ; clipping on, so the global norm over the shards (each element
  // counted once across DP shards, TP and PP) decides every update. Under PP the tied embedding stays
  // whole on its two stages; under SP the replicated tensors' partial gradients are summed over TP
  // shard by shard.
  const std::string wl = tempPath("zero2_tiny3.json");
  std::ofstream(wl) << R"({"name":"tiny3","n_layer":3,"n_head":2,"n_embd":32,"n_positions":64,"vocab_size":128})";
  const std::string flags = "--workload " + wl + " --clip 0.5 --bucket-mb 0.01 ";
  const std::string ref = run("tiny3_ref", flags);
  expectSameTraining(ref, run("tiny3_pp2", flags + "--nproc 4 --pp 2 --zero 2"));
  expectSameTraining(ref, run("tiny3_tp2_sp", flags + "--nproc 4 --tp 2 --sequence-parallel --zero 2"));
}

TEST(Zero2Config, AdafactorAndLocalSgdAreRefusedByName) {
  CliResult r = sh(std::string(TRAINSCOPE_CLI) + " run --workload tiny --nproc 2 --zero 2 --optimizer adafactor");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--zero"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Adafactor"), std::string::npos) << r.output;
  r = sh(std::string(TRAINSCOPE_CLI) + " run --workload tiny --nproc 2 --zero 2 --local-sgd 2");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--local-sgd"), std::string::npos) << r.output;
}

// A traced run: the gradient reduce-scatters and the weights' all-gathers are collectives of the dp
// group, and the viewer's rule (rundb::linkCollectives) links each across both ranks.
TEST(Zero2Trace, ReduceScattersAndAllGathersAreLinkedCollectives) {
  const std::string db = tempPath("zero2_trace.db");
  CliResult r = sh(std::string("timeout 300 ") + TRAINSCOPE_CLI +
                   " run --workload tiny --seq 32 --mbs 2 --gbs 8 --steps 2 --device cpu -q --overwrite --nproc 2"
                   " --zero 2 --bucket-mb 0.05 --trace " + db);
  ASSERT_EQ(r.status, 0) << r.output;
  rdb::RunReader reader(db);
  const auto rows = reader.collectives();
  const auto links = rdb::linkCollectives(rows, rdb::runLayout(reader.meta()));
  int linked_rs = 0, linked_ag = 0;
  for (const auto& call : links.calls) {
    if (call.rows.size() != 2) continue;
    const auto& c = rows[call.rows[0]];
    EXPECT_EQ(rows[call.rows[1]].op, c.op);
    linked_rs += c.op == "reduce_scatter" && c.group == "dp";
    linked_ag += c.op == "all_gather" && c.group == "dp";
  }
  EXPECT_GT(linked_rs, 0);
  EXPECT_GT(linked_ag, 0);
  for (const auto& c : rows)
    if (c.op == "reduce_scatter") EXPECT_GT(c.busbw(), 0);
}

// The memory model (models/src/memory_model.cpp, addZeroTwo) against the measured per-rank peak of
// small-cpu for d = 1, 2, 4 (d = 1 shards nothing: the runtime runs it as plain training, and it is
// predicted as --zero 0). Printed as docs/memory-model.md's table.
TEST(Zero2Memory, MeasuredPeakPerRankMatchesTheModelForOneTwoAndFourRanks) {
  std::printf("  | d | precision | measured peak | predicted | error | grad bytes | optimizer bytes |\n");
  for (const char* precision : {"fp32", "bf16"})
    for (int d : {1, 2, 4}) {
      const std::string shape = std::string(" --workload small-cpu --seq 64 --mbs 2 --gbs 8 --precision ") + precision;
      const std::string db = tempPath("zero2_memory.db");
      auto ran = cli("run" + shape + " --zero 2 --nproc " + std::to_string(d) +
                     " --cpu-lanes 1 --steps 2 --device cpu -q --json --overwrite --out " + db);
      ASSERT_EQ(ran.status, 0) << ran.output;
      auto pred = cli("predict" + shape + " --zero " + (d == 1 ? "0" : "2") + " --cluster cpu-local --nodes 2 --gpus " +
                      std::to_string(d) + " --json");
      ASSERT_EQ(pred.status, 0) << pred.output;
      const double measured = lastJson(ran.output)["summary"]["peak_bytes"].get<double>();
      const rdb::Step last = rdb::readSteps(db, 0).back();
      const double predicted = lastJson(pred.output)["peak_bytes"].get<double>();
      const double err = (predicted - measured) / measured;
      const nlohmann::json stage = lastJson(pred.output)["stages"][0];
      std::printf("  | %d | %s | %.2f MiB | %.2f MiB | %+.1f%% | %.2f MiB (model %.2f) | %.2f MiB (model %.2f) |\n", d,
                  precision, measured / (1 << 20), predicted / (1 << 20), 100 * err,
                  double(last.grad_bytes) / (1 << 20), stage["grads_bytes"].get<double>() / (1 << 20),
                  double(last.optim_bytes) / (1 << 20), stage["optimizer_bytes"].get<double>() / (1 << 20));
      EXPECT_LE(std::abs(err), 0.05) << precision << " d=" << d;
    }
}
