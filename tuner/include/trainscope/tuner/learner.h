// trainscope/tuner/learner.h — what a study learns from its trials, and the re-rank it implies.
//
// add() takes a trial that ended. An ok trial's run database is opened once, here, for all that
// the tuner reads from it:
//   its summary      the step time (median, warm-up dropped), tokens/s and peak bytes into the record
//   its layer costs  the measured time model's input, per layer shape (profile.h)
//   its collectives  the DP and TP collectives of a trial within one node: the network's α–β
// A database that cannot be read turns the trial Failed, with the reason. A trial without a database
// path keeps the figures its runner gave it (a test's fake runner).
// rerank() refits the network from the collectives so far, then (from three ok trials of distinct
// plans) the cluster's other constants from the trials' step times with calibrate's fitter (fit.h:
// the constants of the cluster's kind that the trials move, within their physical bounds), and
// re-prices every candidate through the cost models (cost_model.h): composed from measured costs
// where its shape was measured, else the refitted analytic model scaled to the measured ones.
// The refit's error held out: k-fold by configuration (crossValidate, as calibrate's folds by group),
// from kLeastRefitConfigurations distinct configurations on.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trainscope/rundb/rows.h"
#include "trainscope/tuner/calibrate.h"
#include "trainscope/tuner/fit.h"
#include "trainscope/tuner/models.h"
#include "trainscope/tuner/profile.h"
#include "trainscope/tuner/space.h"
#include "trainscope/tuner/study.h"

namespace trainscope::tuner {

// The refit needs 3 distinct configurations (plan and micro-batch); holding configurations out needs
// each fold's fit to keep 3: 4 or more, one left out at a time up to 5 folds.
constexpr int64_t kLeastRefitConfigurations = 3;
constexpr int64_t kLeastRefitCvConfigurations = 4;
constexpr int64_t kRefitFolds = 5;

// How well the refit predicts a configuration it was not fitted on: each fold's trials priced on the
// constants refitted to the other folds' trials (folds of whole configurations, never of trials: a
// configuration run twice stays in one fold).
struct RefitCrossValidation {
  int64_t configurations = 0;  // distinct configurations measured ok
  int64_t folds = 0;           // 0: not cross-validated (see why)
  ErrorSummary held_out;       // over the trials' step times, when folds >= 2
  std::string why;             // when folds is 0
};

class Learner {
 public:
  // `framework`: whose job the trials run (SpaceOptions::framework): the profile the trials' rows
  // are priced and refitted under, and the candidates re-ranked with.
  Learner(const workloads::Workload& w, const Cluster& c, Framework framework = Framework::Trainscope)
      : w_(w), c_(c), fitted_(c), framework_(framework) {}

  // `t` ended; `p` is its candidate's plan. `fresh`: the trial ran in this process (its summary is
  // read into the record); a trial kept from a resumed study already holds its figures.
  TrialRecord add(TrialRecord t, const Plan& p, bool fresh = true);
  // Every valid candidate's prediction from all that was learned so far.
  void rerank(std::vector<Candidate>& all);

  const MeasuredCosts& costs() const { return costs_; }
  const CollectiveFit& networkFit() const { return network_fit_; }
  const Cluster& fitted() const { return fitted_; }  // the cluster with the refitted network and constants
  const std::map<std::string, double>& fittedConstants() const { return fitted_constants_; }
  const RefitCrossValidation& refitCrossValidation() const { return refit_cv_; }

 private:
  void refitConstants();

  const workloads::Workload& w_;
  const Cluster& c_;
  Cluster fitted_;
  Framework framework_;
  MeasuredCosts costs_;
  CollectiveFit network_fit_;
  std::vector<rundb::Collective> comm_;
  std::vector<double> analytic_ratio_;  // measured / analytic step time, every ok trial
  std::vector<FitRow> trial_rows_;      // every ok trial: its plan and measured step time
  std::map<std::string, double> fitted_constants_;
  RefitCrossValidation refit_cv_;
};

// The record of `cv` (the study's "refit_cross_validation", tune --json's): {"folds", "by",
// "configurations", and calibrate's error keys held out}, or {"folds": 0, "configurations", "why"}.
std::string refitCrossValidationJson(const RefitCrossValidation& cv);
// The sentence tune prints after its refit line: "held out by configuration, k=5: MAPE …" or why not.
std::string refitCrossValidationText(const RefitCrossValidation& cv);

}  // namespace trainscope::tuner
