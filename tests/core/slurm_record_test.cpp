// slurm_record_test.cpp — what a trial's srun started is recorded in the study by id, and a resumed
// study cancels exactly those ids; a copy of the study takes a new id and cancels nothing of the
// original's (tuner/slurm.h). Slurm's commands are stand-ins on PATH that log their arguments.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "../common/cli.h"
#include "trainscope/rundb/sqlite.h"
#include "trainscope/tuner/job.h"
#include "trainscope/tuner/slurm.h"
#include "trainscope/tuner/tune.h"
#include "trainscope/workloads/workload.h"

namespace tn = trainscope::tuner;
namespace fs = std::filesystem;
using trainscope::testing::tempPath;

namespace {

// The first trial "starts" Slurm job 4242 and dies with the tuner (as after kill -9: its row stays
// "running", nothing after it is written); every other trial is measured at once.
class KilledInSlurm : public tn::TrialRunner {
 public:
  bool kill = true;
  std::string name_seen;
  tn::TrialRecord run(const tn::TrialSpec& spec, tn::TrialRecord t) override {
    name_seen = spec.slurm_name;
    if (kill) {
      if (spec.on_slurm_launch) spec.on_slurm_launch(tn::SlurmLaunch{"", spec.slurm_name, {"4242"}, {"77.3"}});
      throw std::runtime_error("killed");
    }
    t.db_path.clear();
    t.status = tn::TrialStatus::Ok;
    t.step_s = 1.0 + 0.01 * double(t.candidate);
    t.tokens_per_s = 1.0 / t.step_s;
    t.seconds = 10.0;  // the trial's wall time: longer than its steps (Study::checkTrials)
    t.peak_bytes = 1 << 20;
    return t;
  }
};

std::string value(const std::string& study, const std::string& key) {
  trainscope::rundb::Database d(study, trainscope::rundb::Database::Mode::ReadOnly);
  trainscope::rundb::Statement s(d, "SELECT value FROM study WHERE key = ?");
  s.bind(1, key);
  return s.step() ? s.columnText(0) : "";
}

// The launch records the study holds ("slurm_launch:CANDIDATE:ROUND" → JSON).
std::vector<std::string> launches(const std::string& study) {
  trainscope::rundb::Database d(study, trainscope::rundb::Database::Mode::ReadOnly);
  trainscope::rundb::Statement s(d, "SELECT value FROM study WHERE key LIKE 'slurm_launch:%'");
  std::vector<std::string> out;
  while (s.step()) out.push_back(s.columnText(0));
  return out;
}

std::string readAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct FakeSlurm {  // squeue lists nothing; scancel logs its arguments
  std::string dir, log, saved_path;
  FakeSlurm() : dir(tempPath("fake-slurm")), log(dir + "/scancel.log") {
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir + "/scancel") << "#!/bin/sh\necho \"$@\" >> '" << log << "'\n";
    std::ofstream(dir + "/squeue") << "#!/bin/sh\nexit 0\n";
    for (const char* f : {"/scancel", "/squeue"}) ::chmod((dir + f).c_str(), 0755);
    saved_path = std::getenv("PATH") ? std::getenv("PATH") : "";
    ::setenv("PATH", (dir + ":" + saved_path).c_str(), 1);
  }
  ~FakeSlurm() { ::setenv("PATH", saved_path.c_str(), 1); }
  std::string cancelled() const { return readAll(log); }
};

tn::TuneResult tuneAt(const std::string& path, tn::TrialRunner& runner, bool resume) {
  const trainscope::workloads::Workload w = trainscope::workloads::load("small-cpu");
  const tn::Cluster c = tn::loadCluster("cpu-local");
  tn::SpaceOptions space;
  space.gbs = 8;
  tn::TuneOptions o;
  o.study_path = path;
  o.work_dir = path + ".trials";
  o.first_round = 2;
  o.base_steps = 3;
  o.final_rounds = 0;
  o.launcher = trainscope::runconfig::Launcher::Slurm;
  o.runner = &runner;
  o.resume = resume;
  return tn::tune(w, c, space, o, nullptr);
}

void removeStudy(const std::string& p) {
  for (const char* s : {"", "-wal", "-shm", "-journal", ".lock"}) fs::remove(p + s);
  fs::remove_all(p + ".trials");
}

}  // namespace

// Before: every step of a study was cancelled by the study's name, and a copy kept the name, so a
// resumed copy cancelled the original's steps. Now the launch is recorded by id, cancelled by id, and
// a copy (another file) takes a new id and leaves the original's launch alone, saying so.
TEST(SlurmRecord, ACopiedStudyLeavesTheOriginalsStepsAndTheOriginalCancelsItsOwnIds) {
  FakeSlurm slurm;
  const std::string study = tempPath("slurm-record.db"), copy = tempPath("slurm-record-copy.db");
  removeStudy(study);
  removeStudy(copy);
  KilledInSlurm runner;
  EXPECT_THROW(tuneAt(study, runner, false), std::runtime_error);
  const std::string id = value(study, "study_id");
  ASSERT_TRUE(tn::validStudyId(id)) << id;
  EXPECT_EQ(runner.name_seen, tn::slurmStepName(id));
  // The ids are in the study (kill -9 keeps them), under the trial's candidate and round.
  const std::vector<std::string> recs = launches(study);
  ASSERT_EQ(recs.size(), 1u);
  const tn::SlurmLaunch rec = tn::parseSlurmLaunch(recs[0]);
  EXPECT_EQ(rec.study_id, id);
  EXPECT_EQ(rec.jobs, std::vector<std::string>{"4242"});
  EXPECT_EQ(rec.steps, std::vector<std::string>{"77.3"});

  // `cp` of the study (with its -wal, as cp -r of its folder): resumed, it takes a new id, cancels nothing.
  for (const char* s : {"", "-wal"})
    if (fs::exists(study + s)) fs::copy_file(study + s, copy + s);
  runner.kill = false;
  const tn::TuneResult c = tuneAt(copy, runner, true);
  EXPECT_EQ(slurm.cancelled(), "");
  const std::string copy_id = value(copy, "study_id");
  EXPECT_TRUE(tn::validStudyId(copy_id));
  EXPECT_NE(copy_id, id);
  EXPECT_EQ(runner.name_seen, tn::slurmStepName(copy_id));
  std::string notes;
  for (const std::string& n : c.notes) notes += n + "\n";
  EXPECT_NE(notes.find("is a copy of the study file " + fs::canonical(study).string()), std::string::npos) << notes;
  EXPECT_NE(notes.find("left alone"), std::string::npos) << notes;
  EXPECT_NE(notes.find("4242 77.3"), std::string::npos) << notes;
  // Resumed again, the copy is the file it was recorded in: its id stays.
  tuneAt(copy, runner, true);
  EXPECT_EQ(value(copy, "study_id"), copy_id);

  // The original, resumed: exactly its recorded ids are killed and cancelled, its id kept.
  const tn::TuneResult o = tuneAt(study, runner, true);
  EXPECT_EQ(slurm.cancelled(), "--signal=KILL 77.3\n77.3\n--signal=KILL 4242\n4242\n");
  EXPECT_EQ(value(study, "study_id"), id);
  EXPECT_TRUE(o.notes.empty());
  // A move on the same file system is the same file: the id is kept.
  const std::string moved = tempPath("slurm-record-moved.db");
  removeStudy(moved);
  for (const char* s : {"", "-wal", "-shm"})
    if (fs::exists(study + s)) fs::rename(study + s, moved + s);
  tuneAt(moved, runner, true);
  EXPECT_EQ(value(moved, "study_id"), id);
  removeStudy(moved);
  removeStudy(study);
  removeStudy(copy);
}

// A record that is not ours (damaged, hand-edited, another study's name) is not read as ids: scancel
// is never handed anything but a Slurm id.
TEST(SlurmRecord, OnlySlurmIdsOfTheStudysNameAreRead) {
  const std::string name = tn::slurmStepName("0123456789abcdef");
  const tn::SlurmLaunch ok = tn::parseSlurmLaunch(
      tn::slurmLaunchJson(tn::SlurmLaunch{"0123456789abcdef", name, {"12", "13_4"}, {"12.0", "77.batch"}}));
  EXPECT_EQ(ok.jobs, (std::vector<std::string>{"12", "13_4"}));
  EXPECT_EQ(ok.steps, std::vector<std::string>{"12.0"});
  EXPECT_TRUE(tn::parseSlurmLaunch("not json").name.empty());
  EXPECT_TRUE(tn::parseSlurmLaunch(R"({"study_id":"0123456789abcdef","name":"x","jobs":["1"]})").name.empty());
  EXPECT_TRUE(
      tn::parseSlurmLaunch(R"({"study_id":"0123456789abcdef","name":")" + name + R"(","jobs":["--user=0","-1"]})")
          .jobs.empty());
}
