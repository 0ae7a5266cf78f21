// train_test.cpp — the runtime as a function and through the command line: train() records every
// step; `run --json` and `report --json` print the same summary for the same database; a config
// printed by `run --json` reruns to the same losses through `run --config`, and a RunSpec file runs
// through `run --config` alone with its output; the LibTorch op source
// traces a real training step, with and without input shapes; a two-rank trace merges both ranks;
// the front end links no LibTorch.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "util.h"
#include "trainscope/common/error.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/report.h"
#include "trainscope/rundb/schema.h"
#include "trainscope/runtime/train.h"
#include "trainscope/runtime/trainer.h"
#include "trainscope/workloads/memory.h"

namespace rt = trainscope::runtime;
namespace rdb = trainscope::rundb;
using trainscope::UserError;
using trainscope::testing::cli;
using trainscope::testing::sh;
using trainscope::testing::tempPath;

namespace {

nlohmann::json lastJsonLine(const std::string& output) {
  const auto at = output.rfind("\n{");
  const std::string line = output.substr(at == std::string::npos ? 0 : at + 1);
  return nlohmann::json::parse(line.substr(0, line.find('\n')));
}

}  // namespace

TEST(Train, RecordsEveryStepAndRefusesToReplaceARun) {
  rt::TrainConfig c;
  c.workload = "tiny";
  c.seq = 16;
  c.mbs = 2;
  c.ga = 2;
  c.steps = 3;
  c.device = rt::DeviceRequest::CPU;
  rt::RunOutput out;
  out.out = tempPath("run.db");
  rt::RunResult r = rt::train(c, out);
  EXPECT_EQ(r.end, rt::RunEnd::Completed);
  EXPECT_EQ(r.steps_done, 3);
  EXPECT_EQ(r.database, out.out);
  auto steps = rdb::readSteps(out.out);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[2].tokens, 4 * 16);
  EXPECT_GT(steps[0].loss, 0);
  EXPECT_DOUBLE_EQ(steps[2].loss, r.final_loss);
  EXPECT_GT(steps[1].peak_bytes, 0);
  EXPECT_GT(steps[1].optim_bytes, 0);
  rdb::RunReader reader(out.out);
  EXPECT_EQ(reader.meta("schema_version"), std::to_string(rdb::kSchemaVersion));
  EXPECT_NE(reader.meta("config").find("\"ga\":2"), std::string::npos);
  EXPECT_EQ(r.summary.steps, 2);
  EXPECT_DOUBLE_EQ(r.summary.tokens_per_s, rdb::summarize(reader).tokens_per_s);
  // Bad data is found before the database is created: nothing is left behind.
  rt::TrainConfig bad = c;
  bad.data = "/no/such/tokens.bin";
  rt::RunOutput bad_out;
  bad_out.out = tempPath("never.db");
  EXPECT_THROW(rt::train(bad, bad_out), UserError);
  EXPECT_FALSE(std::filesystem::exists(bad_out.out));
  // A second run must not silently replace what the first recorded.
  EXPECT_THROW(rt::train(c, out), UserError);
  EXPECT_EQ(rdb::readSteps(out.out).size(), 3u);
}

TEST(Train, ModelParameterCountEqualsAnalytic) {
  rt::TrainConfig c = trainscope::testing::tinyConfig();
  rt::Trainer t(c, trainscope::testing::cpu());
  EXPECT_EQ(t.parameterCount(), c.model.parameterCount());
}

TEST(RunSummary, RunJsonAndReportJsonPrintTheSameSummary) {
  const std::string db = tempPath("same-summary.db");
  auto run = cli("run --workload tiny --seq 32 --mbs 2 --ga 2 --steps 4 --device cpu -q --json --trace " + db);
  ASSERT_EQ(run.status, 0) << run.output;
  auto rep = cli("report --json " + db);
  ASSERT_EQ(rep.status, 0) << rep.output;
  const auto a = lastJsonLine(run.output), b = nlohmann::json::parse(rep.output);
  EXPECT_EQ(a["summary"], b["summary"]);
  EXPECT_EQ(a["summary"]["steps"], 3);
  EXPECT_DOUBLE_EQ(a["tokens_per_s"].get<double>(), b["summary"]["tokens_per_s"].get<double>());
  EXPECT_TRUE(b["summary"]["ranks"][0].contains("breakdown"));
}

TEST(RunConfig, ConfigOfAnEarlierRunReproducesItsLosses) {
  const std::string first = tempPath("first.db"), again = tempPath("again.db"), cfg = tempPath("config.json");
  auto run = cli("run --workload tiny --seq 32 --mbs 2 --gbs 8 --steps 4 --device cpu --lr 2e-3 --warmup 1 "
                 "--ckpt selective --optimizer adamw --clip 0.5 --seed 7 -q --json --out " + first);
  ASSERT_EQ(run.status, 0) << run.output;
  const auto j = lastJsonLine(run.output);
  std::ofstream(cfg) << j["config"].dump();
  auto rerun = cli("run --config " + cfg + " -q --json --out " + again);
  ASSERT_EQ(rerun.status, 0) << rerun.output;
  EXPECT_EQ(lastJsonLine(rerun.output)["config"], j["config"]);  // flags → JSON → flags → the same JSON
  auto a = rdb::readSteps(first), b = rdb::readSteps(again);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].loss, b[k].loss) << "step " << k;  // exactly: the same run
    EXPECT_EQ(a[k].lr, b[k].lr) << "step " << k;
  }
  // A flag after --config overrides it; a bad config file names itself and the key.
  auto over = cli("run --config " + cfg + " --steps 2 -q --json");
  ASSERT_EQ(over.status, 0) << over.output;
  EXPECT_EQ(lastJsonLine(over.output)["steps"], 2);
  const std::string bad = tempPath("bad-config.json");
  std::ofstream(bad) << R"({"workload": "tiny", "mbs": "two"})";
  auto r = cli("run --config " + bad);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("mbs"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(bad), std::string::npos) << r.output;
}

// A RunSpec file alone: `run --config FILE` reads it straight, output and printing included.
TEST(RunConfig, ARunSpecFileAloneRunsWithItsOutputAndTrace) {
  const std::string db = tempPath("spec-run.db"), spec_path = tempPath("spec.json");
  rt::RunSpec s;
  s.config.workload = "tiny";
  s.config.seq = 16;
  s.config.mbs = 2;
  s.config.steps = 3;
  s.config.device = rt::DeviceRequest::CPU;
  s.config.cpu_lanes = 1;
  s.output.trace = db;
  s.output.trace_level = rt::TraceLevel::Ops;
  s.output.overwrite = true;
  s.quiet = true;
  std::ofstream(spec_path) << rt::toJson(s);
  for (int k = 0; k < 2; ++k) {  // the second run replaces the first: the spec says overwrite
    auto r = cli("run --config " + spec_path);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(r.output.find("step "), std::string::npos) << r.output;  // quiet
    EXPECT_EQ(r.output.find("done:"), std::string::npos) << r.output;
  }
  rdb::RunReader reader(db);
  EXPECT_EQ(reader.meta("trace_level"), "ops");
  EXPECT_GT(reader.events<rdb::HostOp>(0).size(), 0u);
  EXPECT_EQ(rdb::readSteps(db).size(), 3u);
  EXPECT_EQ(nlohmann::json::parse(reader.meta("config"))["steps"], 3);
}

TEST(OpSource, TracesARealTrainingStepWithAndWithoutShapes) {
  for (bool shapes : {false, true}) {
    const std::string db = tempPath(shapes ? "ops-shapes.db" : "ops.db");
    auto run = cli("run --workload tiny --seq 16 --mbs 2 --steps 2 --device cpu --cpu-lanes 1 -q --trace-level ops --trace " + db +
                   (shapes ? " --trace-shapes" : ""));
    ASSERT_EQ(run.status, 0) << run.output;
    EXPECT_EQ(run.output.find("Exception"), std::string::npos) << run.output;
    rdb::RunReader r(db);
    const auto ops = r.events<rdb::HostOp>(0);
    ASSERT_GT(ops.size(), 50u);
    int with_shapes = 0, mm = 0, tensor_shapes = 0;
    for (const auto& op : ops) {
      EXPECT_LE(op.start_ns, op.end_ns);
      with_shapes += op.shapes != rdb::kNoString;
      const std::string& name = r.string(op.name);
      mm += name == "aten::mm" || name == "aten::addmm" || name.find("linear") != std::string::npos;
      if (op.shapes != rdb::kNoString && r.string(op.shapes).find("[2,16,") != std::string::npos) ++tensor_shapes;
    }
    EXPECT_GT(mm, 0);
    if (shapes) {
      EXPECT_EQ(with_shapes, int(ops.size()));
      EXPECT_GT(tensor_shapes, 0);  // (B, T, C) activations of the micro-batch
    } else {
      EXPECT_EQ(with_shapes, 0);
    }
  }
}

TEST(TraceEndToEnd, TwoRankRunMergesBothRanksWithExactDropCounts) {
  const std::string db = tempPath("e2e.db");
  auto run = sh(std::string("timeout 300 ") + TRAINSCOPE_CLI +
                " run --workload tiny --seq 32 --mbs 2 --gbs 8 --steps 3 --device cpu --nproc 2 -q "
                "--trace " + db + " --trace-level ops");
  ASSERT_EQ(run.status, 0) << run.output;
  rdb::RunReader r(db);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_GT(r.events<rdb::Range>(rank).size(), 0u);
    EXPECT_GT(r.events<rdb::HostOp>(rank).size(), 0u);
    int all_reduce = 0, steps = 0;
    for (const auto& c : r.collectives(rank)) all_reduce += c.op == "all_reduce";
    for (const auto& e : r.events<rdb::Range>(rank)) steps += r.string(e.name) == "step";
    EXPECT_GT(all_reduce, 0);
    EXPECT_EQ(steps, 3);
    EXPECT_GT(r.events<rdb::Counter>(rank).size(), 0u);
  }
  EXPECT_EQ(r.ranks().size(), 2u);
  EXPECT_EQ(r.meta("merged_ranks"), "0,1");
  const auto drops = r.drops();
  EXPECT_EQ(drops.size(), 2u * 8);
  for (const auto& d : drops) EXPECT_EQ(d.emitted, d.stored + d.dropped);
  EXPECT_FALSE(std::filesystem::exists(db + ".rank1"));
  const rdb::Report rep = rdb::computeReport(db);
  ASSERT_EQ(rep.summary.ranks.size(), 2u);
  ASSERT_TRUE(rep.summary.ranks[0].breakdown);
  EXPECT_GT(rep.summary.ranks[0].breakdown->compute_s, 0);
  EXPECT_GT(rep.summary.ranks[0].breakdown->comm_s, 0);
  EXPECT_TRUE(rep.warnings.empty());
}

TEST(FrontEnd, CommandsThatDoNotTrainLinkNoLibTorch) {
  auto r = sh(std::string("ldd ") + TRAINSCOPE_CLI);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.find("libtorch"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("libc10"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("libcuda"), std::string::npos) << r.output;
}

TEST(MemoryModel, TrainersMeasuredSplitEqualsTheAnalyticFormulas) {
  namespace wl = trainscope::workloads;
  const std::pair<rt::OptimizerKind, wl::OptimizerState> opts[] = {
      {rt::OptimizerKind::AdamW, wl::OptimizerState::AdamW},
      {rt::OptimizerKind::Adafactor, wl::OptimizerState::Adafactor},
      {rt::OptimizerKind::Adam8bit, wl::OptimizerState::Adam8bit},
      {rt::OptimizerKind::SGD, wl::OptimizerState::SGD}};
  for (const auto& [kind, state] : opts)
    for (rt::Precision p : {rt::Precision::FP32, rt::Precision::BF16}) {
      rt::TrainConfig c = trainscope::testing::tinyConfig(2, 1, 16);
      c.optimizer = kind;
      c.precision = p;
      c.momentum = kind == rt::OptimizerKind::SGD ? 0.9 : 0.0;
      rt::resolve(c);
      rt::Trainer t(c, rt::chooseDevice(rt::DeviceRequest::CPU, p));
      const auto r = t.step();
      const auto want = wl::modelStateBytes(c.model, p != rt::Precision::FP32, state, c.momentum > 0, c.adam8bit_block);
      EXPECT_EQ(r.param_bytes, want.params) << toString(kind) << " " << toString(p);
      EXPECT_EQ(r.grad_bytes, want.grads) << toString(kind) << " " << toString(p);
      EXPECT_EQ(r.optim_bytes, want.optimizer) << toString(kind) << " " << toString(p);
    }
}
