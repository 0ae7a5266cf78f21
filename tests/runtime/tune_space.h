// tune_space.h — the small CPU space the Tune.* tests search, and its exhaustive study, made once per
// ctest run for the tests that only read it (Tune.PicksTheFastest…, Tune.CalibrateARefit…).
#pragma once

#include <gtest/gtest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "../common/cli.h"

namespace trainscope::testing {

// 16 valid candidates over 1–2 ranks (DP, TP, PP, one process), a memory limit that rules some out,
// on the default cluster (cpu-local).
inline const std::string kTuneSpace =
    " --workload small-cpu --seq 64 --gbs 8 --mbs 2,4,8 --ckpt none,full --no-zero --no-sequence-parallel "
    "--pp-schedules 1f1b --mem-limit 100M ";

// `tune` over kTuneSpace with `args`, its --json result (the last JSON object of its output).
inline nlohmann::json tuneSpaceJson(const std::string& args) {
  auto r = cli("tune" + kTuneSpace + args + " --json");
  EXPECT_EQ(r.status, 0) << r.output;
  const auto at = r.output.rfind("\n{");
  return nlohmann::json::parse(r.output.substr(at == std::string::npos ? 0 : at + 1));
}

// The exhaustive study of kTuneSpace: its --json result, and its path in *study.
// Under ctest it is $TRAINSCOPE_TEST_EXHAUSTIVE_STUDY, one study per ctest run (tests/CMakeLists.txt:
// the fixture tune_exhaustive removes it first): the first test to need it measures it, the next
// resumes the finished study — nothing runs again, the result is read back from every trial the
// study holds, and --resume refuses a study made with other inputs. A test run outside ctest (no
// variable) measures its own in its temporary folder. Each test that reads the shared study leaves a
// mark beside it (used-by-TEST): a test that finds its own mark is a repeat (`ctest --repeat
// until-fail:N`, which reruns the test and not the fixture) and measures a study of its own, as a
// repeat should, instead of reading back what its first run measured.
inline nlohmann::json exhaustiveStudy(std::string* study) {
  const char* shared = std::getenv("TRAINSCOPE_TEST_EXHAUSTIVE_STUDY");
  bool repeat = false;
  if (shared && *shared) {
    const std::filesystem::path dir = std::filesystem::path(shared).parent_path();
    std::filesystem::create_directories(dir);
    const ::testing::TestInfo* me = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string mark = (dir / (std::string("used-by-") + me->test_suite_name() + "." + me->name())).string();
    const int fd = ::open(mark.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    repeat = fd < 0;
    if (fd >= 0) ::close(fd);
  }
  if (!shared || !*shared || repeat) {
    *study = tempPath("exhaustive.db");  // this process's own folder: no study there yet
    if (repeat) std::printf("  a repeat of this test in one ctest run: its own exhaustive study, measured again\n");
    return tuneSpaceJson("--exhaustive --study " + *study);
  }
  *study = shared;
  const bool made = access(study->c_str(), F_OK) == 0;
  if (made) std::printf("  the exhaustive study of this ctest run, resumed (measured once): %s\n", shared);
  return tuneSpaceJson(std::string("--exhaustive ") + (made ? "--resume " : "") + "--study " + *study);
}

}  // namespace trainscope::testing
