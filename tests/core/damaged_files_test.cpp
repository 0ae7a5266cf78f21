// damaged_files_test.cpp — a file of ours cut short (an interrupted copy, a full disk: `truncate -s`)
// is said to be damaged or truncated, naming its path, by every reader: a study (report, export,
// tune --resume, the viewer's opening) and a run database (report, the viewer's loader); never "not
// a trainscope study" or "not a tuner study", which sent the user after another file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../common/cli.h"
#include "trainscope/common/error.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/sqlite.h"
#include "trainscope/tuner/study.h"
#include "viewer_support.h"

namespace fs = std::filesystem;
using trainscope::testing::cli;
using trainscope::testing::tempPath;

namespace {

// A copy of `from` cut to half its bytes (as `truncate -s 50%` leaves it).
std::string halfOf(const std::string& from, const std::string& name) {
  const std::string to = tempPath(name);
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
  fs::resize_file(to, fs::file_size(from) / 2);
  return to;
}

void expectDamaged(const std::string& output, const std::string& path, const std::string& what) {
  EXPECT_NE(output.find(path + " is damaged or truncated"), std::string::npos) << what << ":\n" << output;
  EXPECT_EQ(output.find("not a trainscope study"), std::string::npos) << what << ":\n" << output;
  EXPECT_EQ(output.find("not a tuner study"), std::string::npos) << what << ":\n" << output;
  EXPECT_EQ(output.find("not a trainscope run database"), std::string::npos) << what << ":\n" << output;
}

}  // namespace

TEST(DamagedFiles, ACutShortStudyIsSaidToBeDamagedByEveryReader) {
  const std::string study = tempPath("whole-study.db");
  const auto tuned = cli("tune --workload gpt2-124m --cluster h100-80gb-x8 --gbs 64 --seq 1024 --budget 0.001s --mbs 1,2 --study " + study);
  ASSERT_TRUE(tuned.status == 0 || tuned.status == 1) << tuned.output;
  ASSERT_TRUE(trainscope::tuner::isStudy(study));
  const std::string cut = halfOf(study, "cut-study.db");
  EXPECT_NE(trainscope::rundb::sqliteDamage(cut).find("the file was cut short"), std::string::npos)
      << trainscope::rundb::sqliteDamage(cut);
  EXPECT_EQ(trainscope::rundb::sqliteDamage(study), "");  // the whole file is not said to be damaged

  for (const std::string& args : {"report " + cut, "export " + cut + " --format megatron",
                                  "tune --workload gpt2-124m --cluster h100-80gb-x8 --gbs 64 --seq 1024 --budget 0.001s --mbs 1,2 --resume "
                                  "--study " + cut}) {
    const auto r = cli(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
    expectDamaged(r.output, cut, args);
  }
  try {  // the viewer's Study tab reads it so
    trainscope::tuner::readStudy(cut);
    ADD_FAILURE() << "readStudy read a cut-short study";
  } catch (const trainscope::UserError& e) {
    expectDamaged(e.what(), cut, "readStudy");
  }
  // A file cut inside SQLite's 100-byte header, too.
  const std::string stub = tempPath("stub-study.db");
  fs::copy_file(study, stub, fs::copy_options::overwrite_existing);
  fs::resize_file(stub, 40);
  const auto r = cli("report " + stub);
  EXPECT_EQ(r.status, 2) << r.output;
  expectDamaged(r.output, stub, "report of a 40-byte file");
  EXPECT_NE(r.output.find("shorter than SQLite's 100-byte header"), std::string::npos) << r.output;
}

TEST(DamagedFiles, ACutShortRunDatabaseIsSaidToBeDamaged) {
  const std::string whole = synthetic("damaged-whole.db");
  const std::string cut = halfOf(whole, "damaged-cut.db");
  const auto r = cli("report " + cut);
  EXPECT_EQ(r.status, 2) << r.output;
  expectDamaged(r.output, cut, "report");
  try {  // the viewer's loader (and every other reader) opens it through RunReader
    trainscope::rundb::RunReader reader(cut);
    ADD_FAILURE() << "RunReader opened a cut-short run database";
  } catch (const trainscope::UserError& e) {
    expectDamaged(e.what(), cut, "RunReader");
  }
  // --out over it (run's output check) names it damaged, not "not a run database".
  EXPECT_NE(trainscope::rundb::sqliteDamage(cut), "");
}

TEST(DamagedFiles, ACutShortJsonFileIsSaidToBeTruncated) {
  // The cluster file, a workload (config.json), a run's --config and a calibration file's last line,
  // each cut in half: "truncated", beside the parser's own words (it used to say only "not valid JSON").
  const auto cutCopy = [](const std::string& from, const std::string& name) {
    const std::string to = tempPath(name);
    fs::copy_file(from, to, fs::copy_options::overwrite_existing);
    fs::resize_file(to, fs::file_size(from) / 2);
    return to;
  };
  const std::string src = TRAINSCOPE_SOURCE_DIR;
  const std::string cluster = cutCopy(src + "/models/clusters/h100-80gb-x8.json", "cut-cluster.json");
  auto r = cli("predict --workload gpt2-124m --cluster " + cluster);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(cluster + " is not valid JSON"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the file is truncated (cut short) or unfinished"), std::string::npos) << r.output;
  const std::string workload = cutCopy(src + "/workloads/mistral-7b.json", "cut-workload.json");
  r = cli("predict --workload " + workload);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("the file is truncated (cut short) or unfinished"), std::string::npos) << r.output;
  // A whole file with a syntax error inside is not called truncated.
  const std::string bad = tempPath("bad-workload.json");
  { std::ofstream(bad) << R"({"model_type": "llama", "hidden_size": 64,, "x": 1})"; }
  r = cli("predict --workload " + bad);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_EQ(r.output.find("truncated"), std::string::npos) << r.output;
  // A calibration file whose last line was cut inside its object.
  const std::string rows = tempPath("cut-rows.jsonl");
  {
    std::ofstream(rows) << R"({"workload": "gpt2-124m", "gpus": 8, "mbs": 4, "seq": 1024, "gbs": 32, "measured_step_s": 0.5})"
                        << "\n" << R"({"workload": "gpt2-124m", "gpus": 8, "mb)";
  }
  r = cli("calibrate --cluster h100-80gb-x8 --from " + rows + " -o " + tempPath("never.json"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("line 2: ends inside its JSON object: the file is truncated"), std::string::npos) << r.output;
}
