// trust_study_test.cpp — a study's figures and path are checked before they are trusted (issue
// "Trust, round 3"): a resumed study whose trials' REAL columns were altered (a negative, NaN, text
// or 1e308 step time) is refused naming the table, column and trial; `tune --predict-only` makes the
// same --study checks as a tune; `--pp-schedules interleaved` is the interleaved 1F1B schedule; and
// a path printed inside a command hint is quoted for the shell.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/rundb/sqlite.h"
#include "trainscope/tuner/tune.h"
#include "trainscope/workloads/workload.h"

namespace tn = trainscope::tuner;
namespace fs = std::filesystem;
using nlohmann::json;
using trainscope::files::shellQuote;
using trainscope::testing::cli;
using trainscope::testing::CliResult;
using trainscope::testing::tempPath;

namespace {

// Every trial "measured" at 1 s per step, without a process or a run database.
class OneSecond : public tn::TrialRunner {
 public:
  int runs = 0;
  tn::TrialRecord run(const tn::TrialSpec&, tn::TrialRecord t) override {
    ++runs;
    t.db_path.clear();
    t.status = tn::TrialStatus::Ok;
    t.step_s = 1.0 + 0.01 * double(t.candidate);
    t.tokens_per_s = 1.0 / t.step_s;
    t.seconds = 10.0;
    t.peak_bytes = 1 << 20;
    return t;
  }
};

struct Tuned {
  trainscope::workloads::Workload w = trainscope::workloads::load("small-cpu");
  tn::Cluster c = tn::loadCluster("cpu-local");
  tn::SpaceOptions space;
  tn::TuneOptions o;
  OneSecond runner;
  tn::TuneResult first;
  explicit Tuned(const std::string& path) {
    space.gbs = 8;
    o.study_path = path;
    o.work_dir = path + ".trials";
    o.first_round = 3;
    o.base_steps = 3;
    o.final_rounds = 1;
    o.runner = &runner;
    first = tn::tune(w, c, space, o, nullptr);
  }
  tn::TuneResult resume() {
    o.resume = true;
    return tn::tune(w, c, space, o, nullptr);
  }
};

void sql(const std::string& path, const std::string& statement) {
  trainscope::rundb::Database d(path, trainscope::rundb::Database::Mode::ReadWrite);
  d.exec(statement);
}

}  // namespace

// Each tampered value of trials.step_s (and of the other figures) is refused on --resume naming
// the table, column and trial; before, all were trusted and 1e308 moved the recommendation.
TEST(StudyFigures, AlteredRealColumnsAreRefusedOnResume) {
  struct Case {
    std::string column, value, says;
  };
  int k = 0;
  for (const Case& c : std::vector<Case>{{"step_s", "-1", "-1"},
                                         {"step_s", "'NaN'", "'NaN'"},  // text, as a hand edit writes it
                                         {"step_s", "0.0/0.0", "NULL"},  // SQLite keeps NaN as NULL
                                         {"step_s", "'abc'", "'abc'"},
                                         {"step_s", "1e308", "1e+308"},
                                         {"step_s", "11.0", "longer than the whole trial"},
                                         {"seconds", "-5", "-5"},
                                         {"tokens_per_s", "9e999", "inf"},
                                         {"predicted_step_s", "'x'", "'x'"},
                                         {"peak_bytes", "2.5", "2.5"}}) {
    Tuned t(tempPath("figures-" + std::to_string(k++) + ".db"));
    ASSERT_GE(t.first.recommended, 0);
    sql(t.o.study_path, "UPDATE trials SET " + c.column + " = " + c.value +
                            " WHERE id = (SELECT max(id) FROM trials WHERE status = 'ok')");
    try {
      t.resume();
      ADD_FAILURE() << c.column << " = " << c.value << " was trusted";
    } catch (const trainscope::UserError& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.field(), "--study") << what;
      EXPECT_NE(what.find("trials." + c.column + " of trial "), std::string::npos) << what;
      EXPECT_NE(what.find(c.says), std::string::npos) << c.value << ": " << what;
      EXPECT_NE(what.find("start a new study"), std::string::npos) << what;
    }
  }
  // Untouched, a resumed study repeats nothing and keeps its pick.
  Tuned t(tempPath("figures-clean.db"));
  const int ran = t.runner.runs;
  EXPECT_EQ(t.resume().recommended, t.first.recommended);
  EXPECT_EQ(t.runner.runs, ran);
}

// --predict-only makes the checks a tune makes of --study; before, it made none.
TEST(StudyPath, PredictOnlyChecksTheStudyAsATuneDoes) {
  const std::string space = "tune --workload small-cpu --cluster cpu-local --gbs 8 --predict-only --study ";
  const std::string text = tempPath("not-a-study.txt");
  std::ofstream(text) << "my notes\n";
  CliResult r = cli(space + text);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("error: --study: " + text + " exists and is not a trainscope study"), std::string::npos)
      << r.output;
  r = cli(space + tempPath("no-such-folder") + "/s.db");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("error: --study:"), std::string::npos) << r.output;
  fs::create_directories(tempPath("a-folder"));
  r = cli(space + tempPath("a-folder"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("is a directory"), std::string::npos) << r.output;
  // A study: refused without --resume, as a tune refuses it; ranked with it, and left as it was.
  Tuned t(tempPath("predict-only.db"));
  r = cli(space + t.o.study_path);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("already holds a study"), std::string::npos) << r.output;
  r = cli(space + t.o.study_path + " --resume");
  EXPECT_EQ(r.status, 0) << r.output;
  // A new path: ranked, and nothing made there.
  r = cli(space + tempPath("fresh.db"));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_FALSE(fs::exists(tempPath("fresh.db")));
}

// --pp-schedules interleaved is 1F1B with more than one model chunk per stage, as predict takes it.
TEST(StudySpace, InterleavedIsAcceptedAsInterleavedOneFOneB) {
  const std::string study = tempPath("interleaved.db");
  CliResult r = cli("tune --workload small-cpu --cluster cpu-local --nodes 1 --gbs 8 --predict-only --json "
                    "--pp-schedules interleaved --study " + study);
  ASSERT_EQ(r.status, 0) << r.output;
  const json j = json::parse(r.output.substr(r.output.find('{')));
  ASSERT_FALSE(j["ranked"].empty());
  int valid = 0;
  for (const auto& c : j["ranked"]) {
    EXPECT_GT(c["virtual_stages"].get<int64_t>(), 1) << c;
    valid += c["rejected"].get<std::string>().empty();
  }
  EXPECT_GT(valid, 0) << r.output;
  // Beside the other schedules: plain 1F1B (one chunk) and GPipe stay.
  r = cli("tune --workload small-cpu --cluster cpu-local --gbs 8 --predict-only --json "
          "--pp-schedules 1f1b,interleaved,gpipe --study " + study);
  ASSERT_EQ(r.status, 0) << r.output;
  const json all = json::parse(r.output.substr(r.output.find('{')));
  bool plain = false, interleaved = false;
  for (const auto& c : all["ranked"]) (c["virtual_stages"].get<int64_t>() > 1 ? interleaved : plain) = true;
  EXPECT_TRUE(plain && interleaved) << r.output;
  // Interleaving without a chunk count above 1 is refused naming the flag.
  r = cli("tune --workload small-cpu --cluster cpu-local --gbs 8 --predict-only --pp-schedules interleaved "
          "--virtual-stages 1 --study " + study);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("error: --pp-schedules:"), std::string::npos) << r.output;
}

// tune's counts and durations past what can be doubled, summed or put on the clock are refused by name.
TEST(StudySpace, HugeCountsAndDurationsAreRefusedByName) {
  const std::string space = "tune --workload small-cpu --cluster cpu-local --gbs 8 --study " + tempPath("huge.db") + " ";
  for (const auto& [flags, field] : std::vector<std::pair<std::string, std::string>>{
           {"--trial-steps 4611686018427387904", "--trial-steps"},
           {"--final-rounds 9223372036854775807", "--final-rounds"},
           {"--first-round 9223372036854775807", "--first-round"},
           {"--trial-timeout 1e300", "--trial-timeout"},
           {"--budget 1e300h", "--budget"}}) {
    const CliResult r = cli(space + flags);
    EXPECT_EQ(r.status, 2) << flags << "\n" << r.output;
    EXPECT_NE(r.output.find("error: " + field + ":"), std::string::npos) << flags << "\n" << r.output;
  }
  EXPECT_FALSE(fs::exists(tempPath("huge.db")));
}

// A path printed inside a command hint is one shell word: a study named `a b;touch $HOME;'x.db`
// pasted back runs nothing else.
TEST(StudyHints, PathsInCommandHintsAreQuoted) {
  const std::string weird = tempPath("a b;touch $HOME;'x.db");
  Tuned t(weird);
  int64_t rejected = -1;
  for (const auto& c : t.first.candidates)
    if (!c.rejected.empty()) rejected = c.id;
  ASSERT_GE(rejected, 0);
  const CliResult r = cli("export " + shellQuote(weird) + " --format run --trial " + std::to_string(rejected));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("`trainscope view " + shellQuote(weird) + "`"), std::string::npos) << r.output;
}
