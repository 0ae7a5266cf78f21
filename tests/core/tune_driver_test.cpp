// tune_driver_test.cpp — the tuner's seams apart from trial processes: tune() driven by a fake
// TrialRunner (scripted step times, no child process, no run database), and ProcessTrialRunner on
// scripted children that crash, hang, run out of memory or exit cleanly. What the driver must do:
// hand each trial a spec that says what its candidate trains, record every trial in the study,
// skip what failed, and pick the fastest by measurement; what the runner must do: write the spec
// once, run it as `trainscope run --config SPEC`, classify how it ended, and leave nothing running.
#include "trainscope/tuner/tune.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <thread>
#include <map>
#include <set>
#include <sstream>

#include "../common/cli.h"
#include "trainscope/common/error.h"
#include "trainscope/tuner/trial.h"
#include "trainscope/workloads/workload.h"

namespace tn = trainscope::tuner;
namespace rt = trainscope::runconfig;
using trainscope::testing::tempPath;

namespace {

// Step times by candidate (the fake "measurement"); a candidate listed in `crash` ends killed by SIGSEGV.
class FakeRunner : public tn::TrialRunner {
 public:
  std::map<int64_t, double> step_s;
  std::set<int64_t> crash;
  std::vector<tn::TrialSpec> specs;  // every spec handed over, in order

  tn::TrialRecord run(const tn::TrialSpec& spec, tn::TrialRecord t) override {
    specs.push_back(spec);
    t.db_path.clear();  // no run database: the learner keeps these figures
    if (crash.count(t.candidate)) {
      t.status = tn::TrialStatus::Crash;
      t.signal = SIGSEGV;
      t.message = "killed by Segmentation fault";
      return t;
    }
    t.status = tn::TrialStatus::Ok;
    t.step_s = step_s.count(t.candidate) ? step_s[t.candidate] : 1.0;
    t.tokens_per_s = 1.0 / t.step_s;
    t.peak_bytes = 1 << 20;
    return t;
  }
};

struct Study {
  trainscope::workloads::Workload w = trainscope::workloads::load("small-cpu");
  tn::Cluster c = tn::loadCluster("cpu-local");
  tn::SpaceOptions space;
  tn::TuneOptions o;
  explicit Study(const std::string& name) {
    space.gbs = 8;
    o.study_path = tempPath(name + ".db");
    o.work_dir = o.study_path + ".trials";
    o.first_round = 4;
    o.base_steps = 3;
    o.final_rounds = 1;
  }
};

}  // namespace

TEST(TuneDriver, AFakeRunnerDrivesTheStudyAndThePickIsTheFastestMeasured) {
  Study s("driver");
  FakeRunner fake;
  s.o.runner = &fake;
  // Measured times that disagree with the models' ranking: the last-ranked valid candidate the
  // search will measure is made the fastest, the one ranked first the slowest.
  const auto all = tn::enumerateSpace(s.w, s.c, s.space);
  std::vector<int64_t> valid;
  for (const auto& cand : all)
    if (cand.rejected.empty()) valid.push_back(cand.id);
  ASSERT_GE(valid.size(), 4u);
  for (size_t i = 0; i < valid.size(); ++i) fake.step_s[valid[i]] = 1.0 + 0.01 * double(i);
  fake.step_s[valid[0]] = 5.0;
  fake.crash.insert(valid[1]);

  const tn::TuneResult r = tn::tune(s.w, s.c, s.space, s.o, nullptr);
  ASSERT_FALSE(fake.specs.empty());
  // Every spec says what its candidate trains, for the batch's steps, traced into the trials' folder.
  for (const tn::TrialSpec& spec : fake.specs) {
    const rt::TrainConfig& cfg = spec.run.config;
    EXPECT_GE(cfg.steps, s.o.base_steps);
    EXPECT_EQ(spec.run.output.trace.rfind(s.o.work_dir + "/", 0), 0u) << spec.run.output.trace;
    EXPECT_EQ(spec.run.output.trace_level, rt::TraceLevel::Ranges);  // a CPU cluster: the ranges
    EXPECT_TRUE(spec.run.quiet);
    EXPECT_EQ(spec.timeout_s, s.o.trial_timeout_s);
  }
  // The study holds every trial the runner ran, with how it ended; the crash is recorded, not picked.
  ASSERT_EQ(r.trials.size(), fake.specs.size());
  for (const auto& t : r.trials)
    EXPECT_EQ(t.status, fake.crash.count(t.candidate) ? tn::TrialStatus::Crash : tn::TrialStatus::Ok);
  ASSERT_GE(r.recommended, 0);
  EXPECT_NE(r.recommended, valid[1]);
  double best = 1e9;
  int64_t best_id = -1;
  for (const auto& t : r.trials)
    if (t.status == tn::TrialStatus::Ok && t.step_s < best) best = t.step_s, best_id = t.candidate;
  // The pick is the fastest by measurement among those that got furthest (the finalists).
  EXPECT_NEAR(r.estimate.at(r.recommended), fake.step_s[r.recommended], 1e-12);
  EXPECT_LE(r.estimate.at(r.recommended), fake.step_s[best_id] + 0.05);
  EXPECT_NE(r.recommended, valid[0]);  // predicted best, measured slowest
  // Resumed, the study repeats nothing: every trial is taken from it.
  FakeRunner again;
  again.step_s = fake.step_s;
  s.o.runner = &again;
  s.o.resume = true;
  const tn::TuneResult resumed = tn::tune(s.w, s.c, s.space, s.o, nullptr);
  EXPECT_TRUE(again.specs.empty());
  EXPECT_EQ(resumed.recommended, r.recommended);
}

// --max-trials counts the study's trials in all: a study stopped after K trials (as by kill -9) and
// resumed under --max-trials N runs N − K more and ends as the uninterrupted study of N does.
// (Before, a resume counted only its own processes: N more, N + K in all.)
TEST(TuneDriver, MaxTrialsCountsTheTrialsAResumedStudyKept) {
  auto trialsOf = [](const tn::TuneResult& r) {
    std::vector<std::pair<int64_t, int64_t>> v;  // (candidate, round), in the study's order
    for (const auto& t : r.trials) v.emplace_back(t.candidate, t.round);
    return v;
  };
  Study whole("max-trials-whole");
  FakeRunner a;
  whole.o.runner = &a;
  whole.o.max_trials = 6;
  const tn::TuneResult uninterrupted = tn::tune(whole.w, whole.c, whole.space, whole.o, nullptr);
  ASSERT_EQ(a.specs.size(), 6u);

  Study parts("max-trials-resumed");
  FakeRunner first;
  parts.o.runner = &first;
  parts.o.max_trials = 4;  // stopped after 4 trials
  tn::tune(parts.w, parts.c, parts.space, parts.o, nullptr);
  ASSERT_EQ(first.specs.size(), 4u);
  FakeRunner rest;
  parts.o.runner = &rest;
  parts.o.max_trials = 6;
  parts.o.resume = true;
  const tn::TuneResult resumed = tn::tune(parts.w, parts.c, parts.space, parts.o, nullptr);
  EXPECT_EQ(rest.specs.size(), 2u) << "a resumed study ran " << rest.specs.size() << " more trials past 4 of 6";
  EXPECT_EQ(resumed.trials_run, 2);  // processes started by this invocation
  EXPECT_EQ(trialsOf(resumed), trialsOf(uninterrupted));
  EXPECT_EQ(resumed.recommended, uninterrupted.recommended);
  // Resumed again under the same cap: nothing left to run.
  FakeRunner none;
  parts.o.runner = &none;
  tn::tune(parts.w, parts.c, parts.space, parts.o, nullptr);
  EXPECT_TRUE(none.specs.empty());
}

// The pick is the fastest of those that got furthest. When --max-trials cuts the search short, a
// candidate left at round 0 may have measured faster than the pick: said in a note (the tune said
// nothing and recommended the slower plan); a search that ran to its end says nothing of the kind.
TEST(TuneDriver, APickTheTrialCapLeftBehindAFasterCandidateIsNoted) {
  struct Slower : FakeRunner {  // every trial past round 0 measures twice as long
    tn::TrialRecord run(const tn::TrialSpec& spec, tn::TrialRecord t) override {
      t = FakeRunner::run(spec, t);
      if (t.round > 0) t.step_s *= 2, t.tokens_per_s /= 2;
      return t;
    }
  };
  const std::string note = "the trial cap ended the search before every promoted candidate ran";
  const auto noted = [&](const tn::TuneResult& r) {
    for (const std::string& n : r.notes)
      if (n.find(note) != std::string::npos) return true;
    return false;
  };
  Study capped("cut-short");
  Slower a;
  capped.o.runner = &a;
  capped.o.max_trials = 5;  // round 0's four, then one of round 1
  const tn::TuneResult r = tn::tune(capped.w, capped.c, capped.space, capped.o, nullptr);
  ASSERT_EQ(a.specs.size(), 5u);
  ASSERT_GE(r.recommended, 0);
  EXPECT_TRUE(r.cut_short);
  EXPECT_TRUE(noted(r)) << (r.notes.empty() ? "no notes" : r.notes.front());
  Study whole("cut-short-whole");
  Slower b;
  whole.o.runner = &b;
  const tn::TuneResult full = tn::tune(whole.w, whole.c, whole.space, whole.o, nullptr);
  EXPECT_FALSE(full.cut_short);
  EXPECT_FALSE(noted(full));
}

namespace {

// A stand-in for the front end: `SCRIPT run --config SPEC` runs `body` with $4 the spec's path.
std::string script(const std::string& name, const std::string& body) {
  const std::string path = tempPath(name + ".sh");
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  ::chmod(path.c_str(), 0755);
  return path;
}

tn::TrialSpec specAt(const std::string& name, double timeout_s = 0) {
  tn::TrialSpec spec;
  spec.run.config.steps = 7;
  spec.run.output.trace = tempPath(name + ".db");
  spec.run.output.trace_level = rt::TraceLevel::All;
  spec.run.quiet = true;
  spec.spec_path = tempPath(name + ".json");
  spec.log_path = tempPath(name + ".log");
  spec.timeout_s = timeout_s;
  return spec;
}

// Running (a zombie waiting for init to reap it has ended: it holds nothing and runs nothing).
bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

}  // namespace

TEST(TrialRunner, ScriptedChildrenAreClassifiedByExitStatusSignalAndClock) {
  struct Case {
    const char* name;
    std::string body;
    tn::TrialStatus status;
    int signal;
  };
  const Case cases[] = {
      {"ok", "test \"$1 $2\" = \"run --config\" && test -f \"$3\" && exit 0; exit 9", tn::TrialStatus::Ok, 0},
      {"crash", "kill -SEGV $$", tn::TrialStatus::Crash, SIGSEGV},
      {"oom", "exit 3", tn::TrialStatus::OutOfMemory, 0},
      {"invalid", "exit 2", tn::TrialStatus::Invalid, 0},
      {"rank-killed", "exit 137", tn::TrialStatus::Crash, SIGKILL},  // the launcher passes a rank's signal on
      {"failed", "exit 1", tn::TrialStatus::Failed, 0},
  };
  for (const Case& c : cases) {
    tn::ProcessTrialRunner runner(script(std::string("trial-") + c.name, c.body));
    const tn::TrialRecord t = runner.run(specAt(std::string("spec-") + c.name), tn::TrialRecord{});
    EXPECT_EQ(t.status, c.status) << c.name << ": " << t.message;
    EXPECT_EQ(t.signal, c.signal) << c.name;
    if (c.status != tn::TrialStatus::Ok) EXPECT_FALSE(t.message.empty()) << c.name;
  }
}

TEST(TrialRunner, AHangIsKilledWithEverythingItStartedAtItsTimeout) {
  const std::string pidfile = tempPath("hang-child.pid");
  // The trial starts a grandchild in its group and waits: both must be gone after the timeout.
  tn::ProcessTrialRunner runner(script("trial-hang", "sleep 600 & echo $! > " + pidfile + "; wait"));
  // The timeout leaves the shell ample time to start its grandchild and name it, even on a loaded
  // machine; what is asserted is only that both are gone after it.
  const tn::TrialRecord t = runner.run(specAt("spec-hang", 3.0), tn::TrialRecord{});
  EXPECT_EQ(t.status, tn::TrialStatus::Hang);
  EXPECT_NE(t.message.find("no result within"), std::string::npos) << t.message;
  pid_t grandchild = 0;
  std::ifstream(pidfile) >> grandchild;
  ASSERT_GT(grandchild, 0);
  // SIGKILL is delivered asynchronously: wait (for a condition, with a generous bound) for it to end.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (alive(grandchild) && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  EXPECT_FALSE(alive(grandchild)) << "the hung trial's child was left running";
}

TEST(TrialRunner, TheSpecIsWrittenOnceAndReadsBackAsTheRunItDescribes) {
  tn::ProcessTrialRunner runner(script("trial-true", "exit 0"));
  const tn::TrialSpec spec = specAt("spec-once");
  ASSERT_EQ(runner.run(spec, tn::TrialRecord{}).status, tn::TrialStatus::Ok);
  std::stringstream text;
  text << std::ifstream(spec.spec_path).rdbuf();
  const rt::RunSpec back = rt::runSpecFromJson(text.str(), spec.spec_path);
  EXPECT_EQ(back.config.steps, 7);
  EXPECT_EQ(back.output.trace, spec.run.output.trace);
  EXPECT_EQ(back.output.trace_level, rt::TraceLevel::All);
  EXPECT_TRUE(back.quiet);
  // A name something already holds is refused, not overwritten: nothing runs.
  try {
    runner.run(spec, tn::TrialRecord{});
    ADD_FAILURE() << "an existing spec file was overwritten";
  } catch (const trainscope::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--study"), std::string::npos) << e.what();
  }
}

TEST(PredictionCheck, SpearmanAndErrorAgainstAHandComputation) {
  // Ranks 1 2 3 4 against 1 3 2 4: d² = 0 + 1 + 1 + 0 = 2, ρ = 1 − 6·2 / (4·15) = 0.8.
  EXPECT_NEAR(tn::spearman({1, 2, 3, 4}, {10, 30, 20, 40}), 0.8, 1e-12);
  EXPECT_NEAR(tn::spearman({1, 2, 3}, {3, 2, 1}), -1.0, 1e-12);
  EXPECT_TRUE(std::isnan(tn::spearman({1, 2}, {1, 2})));      // too few
  EXPECT_TRUE(std::isnan(tn::spearman({1, 1, 1}, {1, 2, 3})));  // constant
  // Ties take their mean rank: {1, 1, 2} ranks 1.5 1.5 3.
  EXPECT_NEAR(tn::spearman({1, 1, 2}, {1, 2, 3}), 0.8660254037844386, 1e-12);

  // Per candidate, its FIRST trial's prediction against its pooled measured time.
  auto trial = [](int64_t cand, int64_t round, double predicted, double measured) {
    tn::TrialRecord t;
    t.candidate = cand, t.round = round, t.steps = 3, t.status = tn::TrialStatus::Ok;
    t.predicted_step_s = predicted, t.step_s = measured;
    return t;
  };
  const std::vector<tn::TrialRecord> trials = {trial(0, 0, 1.0, 2.0), trial(1, 0, 2.0, 1.0), trial(2, 0, 3.0, 3.0),
                                               trial(0, 1, 9.0, 2.0)};  // a later, refitted prediction: not used
  const tn::PredictionCheck c = tn::checkPredictions(trials);
  EXPECT_EQ(c.candidates, 3);
  EXPECT_NEAR(c.spearman, 0.5, 1e-12);  // ranks 1 2 3 vs 2 1 3: d² = 2, ρ = 1 − 12/24
  EXPECT_NEAR(c.mean_abs_error, (0.5 + 1.0 + 0.0) / 3.0, 1e-12);
}
