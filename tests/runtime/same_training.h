// same_training.h — the comparison every equivalence test makes between a parallel run and its
// reference, read from the two run databases.
//   losses per step to `tol` relative (and, with same_skips, the same steps skipped);
//   each final weight tensor's sum, Σx² and Σ|x| to `wtol`: the attention key bias has an exactly-zero
//   true gradient (softmax ignores a shift shared by all keys), so its gradient is pure float
//   round-off, which differs with the summation order of each layout, and Adam normalises it into
//   lr-sized steps — hence weights to 1e-4 where losses hold to 1e-5.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "trainscope/rundb/reader.h"

namespace trainscope::testing {

inline void expectSameTraining(const std::string& ref_db, const std::string& db, double tol = 1e-5,
                               double wtol = 1e-4, bool same_skips = false) {
  auto a = rundb::readSteps(ref_db), b = rundb::readSteps(db);
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_LE(std::abs(b[k].loss - a[k].loss) / a[k].loss, tol) << "step " << k;
    if (same_skips) EXPECT_EQ(b[k].skipped, a[k].skipped) << "step " << k;
  }
  auto da = rundb::RunReader(ref_db).weightDigest(), dbg = rundb::RunReader(db).weightDigest();
  ASSERT_EQ(da.size(), dbg.size());
  for (size_t i = 0; i < da.size(); ++i) {
    const auto &va = da[i], &vb = dbg[i];
    ASSERT_EQ(va.name, vb.name);
    EXPECT_LE(std::abs(vb.sum - va.sum), wtol * va.abssum + 1e-7) << va.name << " sum";
    EXPECT_LE(std::abs(vb.sumsq - va.sumsq), wtol * va.sumsq) << va.name << " sum of squares";
    EXPECT_LE(std::abs(vb.abssum - va.abssum), wtol * va.abssum) << va.name << " sum of |x|";
  }
}

}  // namespace trainscope::testing
