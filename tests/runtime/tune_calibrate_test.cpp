// tune_calibrate_test.cpp — `trainscope calibrate` on a real CPU tune's trials: a file refitted from
// half of the candidates' trials predicts the other half better than the preset it started from.
// (Named Tune.* so that it runs alone, as the tuner's measured trials must: tests/CMakeLists.txt.)
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "tune_space.h"
#include "trainscope/tuner/study.h"

using trainscope::testing::cli;
using trainscope::testing::tempPath;

namespace {

double heldOutMape(const std::string& cluster, const std::string& dbs) {
  const auto r = cli("calibrate --evaluate --json --cluster " + cluster + " --from" + dbs);
  EXPECT_EQ(r.status, 0) << r.output;
  const auto at = r.output.rfind("\n{");
  return nlohmann::json::parse(r.output.substr(at == std::string::npos ? 0 : at + 1))["mape"].get<double>();
}

}  // namespace

TEST(Tune, CalibrateARefitFromHalfTheTrialsPredictsTheOtherHalfBetterThanThePreset) {
  const std::string fitted = tempPath("calibrated-cpu.json");
  // The exhaustive study of the Tune.* space on cpu-local (the default cluster), measured once per
  // ctest run and shared with Tune.PicksTheFastest… (tune_space.h); this test only reads it.
  std::string study;
  const auto t = trainscope::testing::exhaustiveStudy(&study);
  ASSERT_FALSE(HasFailure()) << t.dump();
  // Candidates split by id: even ones fit, odd ones are held out (every trial of a candidate on one side).
  std::string train, test;
  int n_train = 0, n_test = 0;
  for (const auto& trial : trainscope::tuner::readStudy(study).trials) {
    if (trial.status != trainscope::tuner::TrialStatus::Ok || trial.db_path.empty()) continue;
    (trial.candidate % 2 == 0 ? train : test) += " " + trial.db_path;
    ++(trial.candidate % 2 == 0 ? n_train : n_test);
  }
  ASSERT_GE(n_train, 4);
  ASSERT_GE(n_test, 4);
  const auto c = cli("calibrate --cluster cpu-local --folds 0 -o " + fitted + " --from" + train);
  ASSERT_EQ(c.status, 0) << c.output;
  const double preset = heldOutMape("cpu-local", test), refit = heldOutMape(fitted, test);
  std::printf("  held-out MAPE over %d trials: preset %.1f%%, refitted from %d others %.1f%%\n%s", n_test,
              preset * 100, n_train, refit * 100, c.output.c_str());
  EXPECT_LT(refit, preset);
}
