// trainscope/tuner/fit.h — fitting a cluster file's constants (models/fit_params.h) to measured step
// times (`trainscope calibrate`; docs/time-model.md, "Calibration").
//
// The loss is the mean Huber loss (δ = 0.05) of log(predicted / measured) over the rows: robust to a
// few outliers, and a share either way weighs the same. A bounded, derivative-free, deterministic
// search: each constant in [0, 1] coordinates of its bounds (log-spaced where the lower bound is above
// 0, cubic from 0 otherwise), coarse scans per coordinate, then a compass search that halves its step.
// Rows that price the same configuration are priced once per evaluation.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trainscope/models/fit_params.h"
#include "trainscope/tuner/models.h"

namespace trainscope::tuner {

struct FitRow {
  std::shared_ptr<const workloads::Workload> w;
  Plan p;
  TimeOptions options;
  int64_t nodes = 1;          // the cluster's nodes for this row
  double measured_s = 0;      // measured step time
  std::string group;          // cross-validation group: model and cluster size ("gpt-1.3b @ 64 devices")
  std::string source;         // the file it came from
};

struct FitResult {
  Cluster fitted;
  std::map<std::string, double> values;  // fitted path → value
  std::vector<double> predicted_s;       // per row, on the fitted cluster
  double loss = 0;
  int64_t evaluations = 0;
};

// The priced step time of every row on `c` (rows' nodes applied).
std::vector<double> priceRows(const Cluster& c, const std::vector<FitRow>& rows);
// The same with the pipeline bubble apart (trace_fit.cpp fits a rank's own time, the bubble aside).
struct PricedRow {
  double step_s = 0, bubble_s = 0;
};
std::vector<PricedRow> priceRowsInFull(const Cluster& c, const std::vector<FitRow>& rows);

// The constants of `candidates` that change some row's prediction by more than 0.1% between their
// bounds: the ones the rows can say anything about.
std::vector<const FitParam*> identifiable(const Cluster& base, const std::vector<FitRow>& rows,
                                          const std::vector<const FitParam*>& candidates);

// Fits `params` to `rows` from `base`; `max_evaluations` bounds the search.
FitResult fitCluster(const Cluster& base, const std::vector<FitRow>& rows, const std::vector<const FitParam*>& params,
                     int64_t max_evaluations = 400);

// Summary of signed errors predicted/measured − 1.
struct ErrorSummary {
  int64_t rows = 0;
  double mape = 0, median_signed = 0, abs_p90 = 0, max_abs = 0;
  double spearman_median = 0;  // within groups of 3 or more rows (NaN-free: 0 when no group has 3)
  int64_t spearman_groups = 0;
};
ErrorSummary summarize(const std::vector<FitRow>& rows, const std::vector<double>& predicted_s);
// The summary as JSON text, under the keys of calibrate's record (rows, mape, median_signed_error,
// abs_error_p90, max_abs_error, spearman_within_group_median, spearman_groups).
std::string errorSummaryJson(const ErrorSummary& s);

// k-fold cross-validation by group (never by row): groups sorted by name and dealt round-robin into
// `folds` folds; each fold's rows are predicted by a fit on the others. Returns the held-out
// predictions per row. Throws UserError("--folds") when folds < 2 or more than the groups.
std::vector<double> crossValidate(const Cluster& base, const std::vector<FitRow>& rows,
                                  const std::vector<const FitParam*>& params, int64_t folds,
                                  int64_t max_evaluations = 400);

}  // namespace trainscope::tuner
