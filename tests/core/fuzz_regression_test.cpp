// fuzz_regression_test.cpp — the fuzz targets' inputs replayed through the same one-input functions
// (tests/fuzz/one_input.h): every crasher kept under tests/fuzz/regressions/<target>/ must now be
// accepted or rejected with a UserError, and every seed under tests/fuzz/corpus/<target>/ must be
// accepted. Under scripts/test --sanitize these run with ASan and UBSan too.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../fuzz/one_input.h"

namespace fs = std::filesystem;
using trainscope::fuzz::Outcome;

namespace {

using OneInput = Outcome (*)(const uint8_t*, size_t);

std::vector<fs::path> filesIn(const std::string& dir) {
  std::vector<fs::path> files;
  const fs::path d = fs::path(TRAINSCOPE_FUZZ_DIR) / dir;
  if (!fs::is_directory(d)) return files;  // git keeps no empty folder: a target without crashers
  for (const auto& e : fs::directory_iterator(d))
    if (e.is_regular_file() && e.path().filename().string()[0] != '.') files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

Outcome replay(OneInput one, const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  return one(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

// A crasher is fixed when it no longer crashes: accepted or rejected are both fine.
void replayRegressions(OneInput one, const std::string& target) {
  for (const fs::path& p : filesIn("regressions/" + target)) EXPECT_NO_THROW(replay(one, p)) << p;
}

void replaySeeds(OneInput one, const std::string& target) {
  const auto seeds = filesIn("corpus/" + target);
  EXPECT_FALSE(seeds.empty());
  for (const fs::path& p : seeds) {
    Outcome o = Outcome::Rejected;
    EXPECT_NO_THROW(o = replay(one, p)) << p;
    EXPECT_EQ(o, Outcome::Accepted) << p;
  }
}

}  // namespace

TEST(FuzzRegression, ImportCrashersNoLongerCrash) { replayRegressions(trainscope::fuzz::importOneInput, "import"); }
TEST(FuzzRegression, ReaderCrashersNoLongerCrash) { replayRegressions(trainscope::fuzz::readOneInput, "reader"); }
TEST(FuzzRegression, ImportSeedsAreAccepted) { replaySeeds(trainscope::fuzz::importOneInput, "import"); }
TEST(FuzzRegression, ReaderSeedsAreAccepted) { replaySeeds(trainscope::fuzz::readOneInput, "reader"); }
