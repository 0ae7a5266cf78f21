// tune_io_test.cpp — what tuner/ does for the `tune` and `export` command files: `tune --json`
// (tune_json.h) from the candidates as they stand (the analytic prediction each keeps, not priced
// again), the study's inputs read back typed (study_inputs.h), the Megatron-LM note of `export
// --format megatron` (megatron_prediction.h), and tune's flags checked and parsed (tune_inputs.h).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <cstdio>
#include <stdexcept>

#include "../common/cli.h"
#include "trainscope/common/error.h"
#include "trainscope/tuner/megatron_prediction.h"
#include "trainscope/tuner/models.h"
#include "trainscope/tuner/study_inputs.h"
#include "trainscope/tuner/tune_inputs.h"
#include "trainscope/tuner/tune_json.h"
#include "trainscope/workloads/workload.h"

namespace rt = trainscope::runconfig;
namespace tn = trainscope::tuner;

namespace {

tn::TuneResult rankedSpace(const trainscope::workloads::Workload& w, const tn::Cluster& c) {
  tn::SpaceOptions so;
  so.gbs = 8;
  so.seq = 64;
  tn::TuneResult r;
  r.candidates = tn::enumerateSpace(w, c, so);
  return r;
}

}  // namespace

TEST(TuneJson, EachCandidateKeepsTheAnalyticPredictionItWasPricedAt) {
  const auto w = trainscope::workloads::load("small-cpu");
  const tn::Cluster c = tn::loadCluster("cpu-local");
  const tn::TuneResult r = rankedSpace(w, c);
  int64_t valid = 0;
  for (const auto& cand : r.candidates) {
    if (!cand.rejected.empty()) continue;
    ++valid;
    EXPECT_EQ(cand.analytic_step_s, tn::predictTime(w, cand.plan, c).step_s) << cand.plan.describe();
    EXPECT_EQ(cand.analytic_step_s, cand.predicted_step_s) << cand.plan.describe();  // nothing measured yet
  }
  EXPECT_GT(valid, 1);
}

TEST(TuneJson, PrintsTheCandidatesStoredPredictionsWithoutPricingThemAgain) {
  const auto w = trainscope::workloads::load("small-cpu");
  const tn::Cluster c = tn::loadCluster("cpu-local");
  tn::TuneResult r = rankedSpace(w, c);
  // Re-ranked from measured costs (as the learner does): the current prediction moves, the analytic
  // one stays what the candidate was priced at. Stored values no model would give show which is read.
  for (auto& cand : r.candidates) {
    cand.predicted_step_s = 1000.0 + double(cand.id);
    cand.analytic_step_s = 2000.0 + double(cand.id);
  }
  const nlohmann::json j = nlohmann::json::parse(tn::tuneResultJson("study.db", w, c, r));
  EXPECT_EQ(j["study"], "study.db");
  EXPECT_EQ(j["workload"], w.name);
  ASSERT_EQ(j["ranked"].size(), r.candidates.size());
  for (size_t i = 0; i < r.candidates.size(); ++i) {
    const auto& cand = r.candidates[i];
    const auto& x = j["ranked"][i];
    EXPECT_EQ(x["id"].get<int64_t>(), cand.id);
    EXPECT_EQ(x["predicted_step_s"].get<double>(), cand.predicted_step_s);
    EXPECT_EQ(x["predicted_step_s_analytic"].get<double>(), cand.rejected.empty() ? cand.analytic_step_s : 0.0)
        << cand.plan.describe();
  }
}

TEST(StudyInputs, ReadsTheFieldsTuneWrites) {
  const tn::StudyInputs in = tn::parseStudyInputs(
      R"({"workload":"small-cpu","cluster":"cpu-local","devices":2,"memory_bytes":1073741824,"kind":"cpu","gbs":8})");
  EXPECT_EQ(in.workload, "small-cpu");
  EXPECT_EQ(in.cluster, "cpu-local");
  EXPECT_EQ(in.devices, 2);
  EXPECT_EQ(in.memory_bytes, int64_t(1) << 30);
  EXPECT_EQ(in.kind, tn::ClusterKind::Cpu);
}

TEST(StudyInputs, MissingKeysKeepTheirDefaultsAndDamagedTextThrows) {
  for (const char* text : {"", "{}", R"({"kind":"gpu"})", R"({"kind":"tpu"})"}) {
    const tn::StudyInputs in = tn::parseStudyInputs(text);
    EXPECT_EQ(in.kind, tn::ClusterKind::Gpu) << text;  // studies made before the kind was kept: GPU
    EXPECT_EQ(in.cluster, "") << text;
    EXPECT_EQ(in.devices, 0) << text;
  }
  EXPECT_ANY_THROW(tn::parseStudyInputs("{not json"));
  EXPECT_ANY_THROW(tn::parseStudyInputs("[1,2]"));
  EXPECT_ANY_THROW(tn::parseStudyInputs(R"({"devices":"eight"})"));
}

namespace {

rt::TrainConfig dpConfig() {
  rt::TrainConfig c;
  c.workload = "small-cpu";
  c.seq = 64;
  c.mbs = 2;
  c.gbs = 8;
  c.nproc = 2;
  c.zero = rt::ZeroStage::OptimizerStates;
  rt::resolve(c);
  return c;
}

}  // namespace

TEST(MegatronPrediction, OnAGpuPresetBothFrameworksArePriced) {
  tn::StudyInputs in;
  in.cluster = "a100-80gb-x8";
  in.devices = 8;
  const std::string note = tn::megatronPrediction(in, dpConfig());
  EXPECT_EQ(note.rfind("predicted on a100-80gb-x8: Megatron-LM ", 0), 0u) << note;
  EXPECT_NE(note.find("this runtime "), std::string::npos) << note;
}

TEST(MegatronPrediction, ACpuStudyOrAnUnknownClusterSaysWhyThereIsNone) {
  tn::StudyInputs cpu;
  cpu.cluster = "cpu-local";
  cpu.kind = tn::ClusterKind::Cpu;
  EXPECT_NE(tn::megatronPrediction(cpu, dpConfig()).find("no Megatron-LM prediction: the study ran on a CPU cluster"),
            std::string::npos);
  tn::StudyInputs unknown;
  unknown.cluster = "no-such-cluster";
  const std::string note = tn::megatronPrediction(unknown, dpConfig());
  EXPECT_NE(note.find("the study's cluster \"no-such-cluster\" is not a preset here"), std::string::npos) << note;
}

TEST(FrameworkPrediction, ExportPricesTheTargetsFrameworkBesideThisRuntimes) {
  tn::StudyInputs in;
  in.cluster = "a100-80gb-x8";
  in.devices = 8;
  const rt::TrainConfig c = dpConfig();
  const std::string ds = tn::frameworkPrediction(in, c, tn::Framework::Deepspeed);
  EXPECT_EQ(ds.rfind("predicted on a100-80gb-x8: DeepSpeed ", 0), 0u) << ds;
  EXPECT_NE(ds.find("this runtime "), std::string::npos) << ds;
  // The fsdp profile prices PyTorch's data parallelism: this ZeRO-1 layout is DDP there (Accelerate's
  // files run ZeRO-1 as DDP), ZeRO-2/3 over dp 2 FSDP.
  const std::string ddp = tn::frameworkPrediction(in, c, tn::Framework::Fsdp);
  EXPECT_EQ(ddp.rfind("predicted on a100-80gb-x8: PyTorch DDP ", 0), 0u) << ddp;
  rt::TrainConfig sharded = c;
  sharded.zero = rt::ZeroStage::Parameters;
  const std::string fsdp = tn::frameworkPrediction(in, sharded, tn::Framework::Fsdp);
  EXPECT_EQ(fsdp.rfind("predicted on a100-80gb-x8: PyTorch FSDP ", 0), 0u) << fsdp;
  // The same times predict gives under each --framework.
  tn::Cluster cl = tn::loadCluster("a100-80gb-x8");
  const tn::Plan p = tn::planOf(c);
  char want[64];
  std::snprintf(want, sizeof(want), "DeepSpeed %.4g s/step", tn::predictTime(c.model, p, cl, {-1.0, tn::Framework::Deepspeed}).step_s);
  EXPECT_NE(ds.find(want), std::string::npos) << ds << " / " << want;
  EXPECT_EQ(tn::frameworkPrediction(in, c, tn::Framework::Megatron), tn::megatronPrediction(in, c));
}

// Issue 34: a CPU study's export prints the job's prediction as its runner would run it on the Gloo
// ranks (the fsdp profile's host work over the CPU rates; a Trainer on CPU runs DDP), the same time
// `predict --framework fsdp` gives there; FSDP (SHARD_GRAD_OP / FULL_SHARD) is named as such, and ZeRO-1
// under the Trainer gets the runner's reason instead of a number.
TEST(FrameworkPrediction, ACpuStudyPricesTheJobAsItsRunnerRunsItThere) {
  tn::StudyInputs cpu;
  cpu.cluster = "cpu-local";
  cpu.kind = tn::ClusterKind::Cpu;
  cpu.devices = 2;
  rt::TrainConfig c = dpConfig();
  c.zero = rt::ZeroStage::None;
  const tn::Cluster cl = tn::loadCluster("cpu-local");
  const tn::Plan p = tn::planOf(c);
  const tn::TimePrediction hf = tn::predictTime(c.model, p, cl, {-1.0, tn::Framework::Fsdp});
  ASSERT_GT(hf.host_s, 0);  // the job's Python host work: cpu-local's fitted fsdp constants
  const std::string note = tn::frameworkPrediction(cpu, c, tn::Framework::Fsdp);
  EXPECT_EQ(note.rfind("predicted on cpu-local: Hugging Face Trainer/Accelerate (DDP) ", 0), 0u) << note;
  char want[96];
  std::snprintf(want, sizeof(want), "(DDP) %.4g s/step (of which the job's Python host work %.4g s)", hf.step_s, hf.host_s);
  EXPECT_NE(note.find(want), std::string::npos) << note << " / " << want;
  std::snprintf(want, sizeof(want), "this runtime %.4g s/step",
                tn::predictTime(c.model, p, cl, {-1.0, tn::Framework::Trainscope}).step_s);
  EXPECT_NE(note.find(want), std::string::npos) << note << " / " << want;
  // DeepSpeed: priced once the file fits its host costs; until then the reason and the calibrate to run.
  const tn::FrameworkProfile& dsp = cl.profile(tn::Framework::Deepspeed);
  const bool ds_fitted = dsp.host_micro_batch_s > 0 || dsp.host_op_s > 0 || dsp.host_backward_op_s > 0;
  const std::string ds_want = ds_fitted ? "predicted on cpu-local: DeepSpeed " : "no DeepSpeed prediction on cpu-local: ";
  const std::string ds = tn::frameworkPrediction(cpu, c, tn::Framework::Deepspeed);
  EXPECT_EQ(ds.rfind(ds_want, 0), 0u) << ds;
  if (!ds_fitted) EXPECT_NE(ds.find("--fit frameworks.deepspeed.host_op_s"), std::string::npos) << ds;
  // SHARD_GRAD_OP / FULL_SHARD on CPU ranks: --runner hf runs them as FSDP (the probe's cpu_fsdp shim),
  // priced and named as such.
  for (rt::ZeroStage z : {rt::ZeroStage::Gradients, rt::ZeroStage::Parameters}) {
    c.zero = z;
    const std::string fsdp = tn::frameworkPrediction(cpu, c, tn::Framework::Fsdp);
    const std::string name = z == rt::ZeroStage::Gradients ? "SHARD_GRAD_OP" : "FULL_SHARD";
    EXPECT_EQ(fsdp.rfind("predicted on cpu-local: Hugging Face Trainer (FSDP " + name + ") ", 0), 0u) << fsdp;
    std::snprintf(want, sizeof(want), ") %.4g s/step",
                  tn::predictTime(c.model, tn::planOf(c), cl, {-1.0, tn::Framework::Fsdp}).step_s);
    EXPECT_NE(fsdp.find(want), std::string::npos) << fsdp << " / " << want;
    EXPECT_EQ(tn::frameworkPrediction(cpu, c, tn::Framework::Deepspeed).rfind(ds_want, 0), 0u);
  }
  c.zero = rt::ZeroStage::OptimizerStates;
  EXPECT_NE(tn::frameworkPrediction(cpu, c, tn::Framework::Fsdp).find("ZeRO-1 is DeepSpeed's"), std::string::npos);
}

// ---- a tune's inputs as the command line takes them (tune_inputs.h) --------------------------------

namespace {

std::string fieldOf(const tn::TuneInputs& in) {
  try {
    tn::checkedSpace(in);
  } catch (const trainscope::UserError& e) {
    return e.field();
  }
  return "";
}

tn::TuneInputs studyOf(int64_t gbs) {
  tn::TuneInputs in;
  in.study = "study.db";
  in.gbs = gbs;
  return in;
}

}  // namespace

TEST(TuneInputs, TheListsBecomeTheSpaceAndInterleavedAsksForChunks) {
  tn::TuneInputs in = studyOf(8);
  in.mbs = "2,4", in.zero = "0,2", in.schedules = "interleaved", in.virtual_stages = "1,2";
  const tn::SpaceOptions so = tn::checkedSpace(in);
  EXPECT_EQ(so.gbs, 8);
  EXPECT_EQ(so.mbs, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(so.zero, (std::vector<rt::ZeroStage>{rt::ZeroStage::None, rt::ZeroStage::Gradients}));
  EXPECT_EQ(so.schedules, (std::vector<rt::PipelineSchedule>{rt::PipelineSchedule::OneFOneB}));
  EXPECT_FALSE(so.plain_one_f_one_b);  // 1F1B only interleaved
  in.no_zero = true;
  EXPECT_EQ(tn::checkedSpace(in).zero, (std::vector<rt::ZeroStage>{rt::ZeroStage::None}));
  in.virtual_stages = "1";
  EXPECT_EQ(fieldOf(in), "--pp-schedules");
}

TEST(TuneInputs, EachBadValueIsRefusedNamingItsFlag) {
  auto with = [](auto set) {
    tn::TuneInputs in = studyOf(8);
    set(in);
    return fieldOf(in);
  };
  EXPECT_EQ(with([](tn::TuneInputs& in) { in.study = "  "; }), "--study");
  EXPECT_EQ(with([](tn::TuneInputs& in) { in.gbs = 0; }), "--gbs");
  EXPECT_EQ(with([](tn::TuneInputs& in) { in.mbs = "2,x"; }), "--mbs");
  EXPECT_EQ(with([](tn::TuneInputs& in) { in.mbs = ","; }), "--mbs");
  EXPECT_EQ(with([](tn::TuneInputs& in) { in.zero = "4"; }), "--zero");
  EXPECT_EQ(with([](tn::TuneInputs& in) { in.inject = "0:explode"; }), "--inject");
  EXPECT_EQ(with([](tn::TuneInputs& in) { in.search = "bayesian"; }), "--search");
  EXPECT_EQ(with([](tn::TuneInputs& in) { in.finalists = 1; }), "--finalists");
  EXPECT_EQ(with([](tn::TuneInputs& in) { in.trial_timeout = 1e8; }), "--trial-timeout");
  EXPECT_EQ(with([](tn::TuneInputs&) {}), "");
}

TEST(TuneInputs, DurationsTakeAUnitAndStayWithinTheClock) {
  EXPECT_EQ(tn::parseDuration(""), 0);
  EXPECT_EQ(tn::parseDuration("90"), 90);
  EXPECT_EQ(tn::parseDuration("90s"), 90);
  EXPECT_EQ(tn::parseDuration("20m"), 1200);
  EXPECT_EQ(tn::parseDuration("2h"), 7200);
  for (const char* bad : {"soon", "5d", "-1m", "0", "1e9h"}) {
    try {
      tn::parseDuration(bad);
      ADD_FAILURE() << bad << " was taken";
    } catch (const trainscope::UserError& e) {
      EXPECT_EQ(e.field(), "--budget") << bad;
    }
  }
}

TEST(TuneInputs, TheOptionsCarryTheInputsAndTheFrontEnd) {
  tn::TuneInputs in = studyOf(8);
  in.exhaustive = true, in.steps = 1, in.inject = "0:crash";
  const tn::Cluster c = tn::loadCluster("cpu-local");
  const tn::TuneOptions o = tn::tuneOptions(in, c, nullptr, "/opt/bin/trainscope", 60);
  EXPECT_EQ(o.study_path, "study.db");
  EXPECT_EQ(o.search, "exhaustive");  // --exhaustive: an alias
  EXPECT_EQ(o.base_steps, 2);         // step 0 is warm-up
  EXPECT_EQ(o.budget_s, 60);
  EXPECT_EQ(o.trainscope, "/opt/bin/trainscope");
  EXPECT_EQ(o.work_dir, "study.db.trials");
  EXPECT_EQ(o.mem_limit, c.memory_bytes);  // a CPU cluster's trials run under its memory
  EXPECT_EQ(o.inject, "0:crash");
}

// A ranked-only pick (--predict-only, --max-trials 0) whose predicted peak is over the limit, inside
// the models' 10% margin, was recommended "valid and predicted to fit" with no word (an audit's
// llama3-8b fp8 pick at 87,339 MiB under 81,920). Now a note says so and names the fastest predicted
// within the limit; a pick within it gets none.
TEST(TuneOutput, ARankedPickOverTheLimitInsideTheMarginIsNoted) {
  using trainscope::testing::cli;
  using trainscope::testing::tempPath;
  const std::string tune = "tune --workload tiny-llama --cluster cpu-local --gbs 8 --predict-only --study " +
                           tempPath("over_limit.db");
  const auto ranked = cli(tune + " --json");
  ASSERT_EQ(ranked.status, 0) << ranked.output;
  const nlohmann::json top = nlohmann::json::parse(ranked.output.substr(ranked.output.find('{')))["ranked"][0];
  ASSERT_EQ(top["rejected"], "");
  const int64_t peak = top["predicted_peak"].get<int64_t>();
  const auto over = cli(tune + " --mem-limit " + std::to_string(peak * 95 / 100));
  ASSERT_EQ(over.status, 0) << over.output;
  EXPECT_NE(over.output.find("note: its predicted peak"), std::string::npos) << over.output;
  EXPECT_NE(over.output.find("inside the models' margin"), std::string::npos) << over.output;
  EXPECT_NE(over.output.find("the fastest predicted within the limit is"), std::string::npos) << over.output;
  const auto within = cli(tune + " --mem-limit " + std::to_string(peak));
  ASSERT_EQ(within.status, 0) << within.output;
  EXPECT_EQ(within.output.find("note: its predicted peak"), std::string::npos) << within.output;
}
