// trainscope/tuner/prediction_check.h — how well the models predicted what a study then measured.
//
// Every trial records the prediction it was launched with (TrialRecord::predicted_step_s: the
// models as refitted to the trials before it). Per candidate measured ok, its first trial's
// prediction — made before anything of that candidate ran — is set against its pooled measured
// step time (study.h, pooledStepTime):
//   spearman          rank correlation over those candidates (ties take their mean rank): the
//                     question a tuner's model must answer is "which is faster", not "how fast"
//   mean_abs_error    mean |predicted − measured| / measured
// NaN when fewer than 3 candidates (spearman) or none (error) were measured. `tune` prints it at the
// end of every study and keeps it in the study ("prediction_check").
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "trainscope/tuner/study.h"

namespace trainscope::tuner {

struct PredictionCheck {
  int64_t candidates = 0;
  double spearman = std::numeric_limits<double>::quiet_NaN();
  double mean_abs_error = std::numeric_limits<double>::quiet_NaN();
};

PredictionCheck checkPredictions(const std::vector<TrialRecord>& trials);

// Spearman's rank correlation of two equally long series (mean ranks for ties); NaN for fewer than
// 3 pairs or a constant series.
double spearman(const std::vector<double>& a, const std::vector<double>& b);

// {"candidates": N, "spearman": x|null, "mean_abs_error": y|null}
std::string toJson(const PredictionCheck& c);

}  // namespace trainscope::tuner
