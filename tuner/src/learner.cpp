// learner.cpp — a study's trials read once, and the re-rank (learner.h).
#include "trainscope/tuner/learner.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include <nlohmann/json.hpp>

#include "trainscope/common/json_text.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/summary.h"
#include "trainscope/tuner/cost_model.h"

namespace trainscope::tuner {

TrialRecord Learner::add(TrialRecord t, const Plan& p, bool fresh) {
  if (t.status != TrialStatus::Ok || t.db_path.empty()) return t;
  try {
    rundb::RunReader reader(t.db_path);
    if (fresh) {
      const rundb::RunSummary s = rundb::summarize(reader);
      t.step_s = s.step_s_median;
      t.tokens_per_s = s.tokens_per_s;
      t.peak_bytes = s.peak_bytes;
    }
    if (p.world() <= c_.devices_per_node)
      for (const rundb::Collective& x : reader.collectives())
        // Blocking sends wait for their peer, and the embedding's sync for the other stage: only the
        // collectives every member reaches together (gradient buckets, TP) measure the network.
        // A call the trace's end cut has no known end (rows.h Collective::cut): not timed.
        if ((x.group == "dp" || x.group == "tp") && x.op != "barrier" && !x.cut) comm_.push_back(x);
    try {
      costs_.add(shapeKey(p, c_), costsFromRun(reader, w_, p));
    } catch (const std::exception&) {
      // A GPU trial without its kernels, or one without ranges (an older study's): it still counts
      // by its step time, and the analytic model is scaled to it.
    }
  } catch (const std::exception& e) {
    if (!fresh) return t;  // a resumed study's trial whose database has gone: its figures stay
    t.status = TrialStatus::Failed;
    t.message = std::string("its run database cannot be read: ") + e.what();
    return t;
  }
  if (t.step_s > 0) {
    analytic_ratio_.push_back(t.step_s / predictTime(w_, p, fitted_, exportedJobOptions(framework_, p)).step_s);
    FitRow row;
    row.w = std::shared_ptr<const workloads::Workload>(&w_, [](const workloads::Workload*) {});  // outlives the learner's use
    row.p = p;
    row.options.framework = framework_;  // an external job's rows refit its framework's host costs
    row.nodes = (p.world() + c_.devices_per_node - 1) / c_.devices_per_node;
    row.measured_s = t.step_s;
    row.group = std::to_string(p.world());
    trial_rows_.push_back(row);
  }
  return t;
}

namespace {

std::string configurationOf(const FitRow& r) { return r.p.describe() + "/" + std::to_string(r.p.mbs); }

// The refit's held-out error: calibrate's crossValidate over the trials grouped by configuration (a
// trial's group is its cluster size, one for every trial of a study; here a configuration's trials
// are one group, so that a repeat never predicts itself).
RefitCrossValidation crossValidateRefit(const Cluster& base, std::vector<FitRow> rows,
                                        const std::vector<const FitParam*>& params, int64_t configurations) {
  RefitCrossValidation cv;
  cv.configurations = configurations;
  if (configurations < kLeastRefitCvConfigurations) {
    cv.why = std::to_string(configurations) + " configurations measured; holding one out takes " +
             std::to_string(kLeastRefitCvConfigurations) + " or more (each fold's refit keeps " +
             std::to_string(kLeastRefitConfigurations) + ")";
    return cv;
  }
  for (FitRow& r : rows) r.group = configurationOf(r);
  cv.folds = std::min(kRefitFolds, configurations);
  try {
    cv.held_out = summarize(rows, crossValidate(base, rows, params, cv.folds, 150));
  } catch (const std::exception& e) {
    cv.folds = 0;
    cv.why = std::string("a fold could not be refitted: ") + e.what();
  }
  return cv;
}

}  // namespace

std::string refitCrossValidationJson(const RefitCrossValidation& cv) {
  nlohmann::json j = {{"folds", cv.folds}, {"configurations", cv.configurations},
                      {"least_configurations", kLeastRefitCvConfigurations}};
  if (cv.folds >= 2) {
    j.update(nlohmann::json::parse(errorSummaryJson(cv.held_out)));
    j["by"] = "configuration (plan and micro-batch; never by trial)";
  } else {
    j["why"] = cv.why;
  }
  return jsonText(j);
}

std::string refitCrossValidationText(const RefitCrossValidation& cv) {
  if (cv.folds < 2) return "not cross-validated: " + cv.why;
  char b[200];
  std::snprintf(b, sizeof(b), "held out by configuration, k=%lld over %lld trials: MAPE %.1f%%, p90 |error| %.1f%%",
                static_cast<long long>(cv.folds), static_cast<long long>(cv.held_out.rows), cv.held_out.mape * 100,
                cv.held_out.abs_p90 * 100);
  return b;
}

void Learner::refitConstants() {
  std::set<std::string> plans;
  for (const FitRow& r : trial_rows_) plans.insert(configurationOf(r));
  // Fewer distinct plans than constants to say anything about them.
  if (int64_t(plans.size()) < kLeastRefitConfigurations) return;
  // The cluster kind's constants, less the network's tier (the collectives fit that, above).
  std::vector<const FitParam*> candidates;
  for (const FitParam& f : fitParams())
    if ((f.kind.empty() || f.kind == toString(c_.kind)) && f.path.rfind("intra_node.", 0) != 0 && f.by_default)
      candidates.push_back(&f);
  try {
    // From the cluster file's figures each time (bounds relative to them), with the refitted network.
    Cluster base = c_;
    base.intra_node = fitted_.intra_node;
    const std::vector<const FitParam*> params = identifiable(base, trial_rows_, candidates);
    if (params.empty()) return;
    const FitResult fit = fitCluster(base, trial_rows_, params, 150);
    fitted_ = fit.fitted;
    fitted_constants_ = fit.values;
    refit_cv_ = crossValidateRefit(base, trial_rows_, params, int64_t(plans.size()));
  } catch (const std::exception&) {
    // A trial the models cannot price: the constants stay.
  }
}

void Learner::rerank(std::vector<Candidate>& all) {
  try {
    // The collectives the trials recorded refit the network's α–β (the intra-node tier, from trials
    // within one node): what composes pipeline sends and the unmeasured shapes' TP and DP terms.
    network_fit_ = fitCollectives(comm_);
    fitted_.intra_node = network_fit_.tier;
  } catch (const std::exception&) {
    // Fewer than two message sizes so far: the cluster file's figures stay.
  }
  refitConstants();
  std::vector<double> ratio = analytic_ratio_;
  if (!fitted_constants_.empty()) {  // the ratios against the refitted model
    ratio.clear();
    const std::vector<double> priced = priceRows(fitted_, trial_rows_);
    for (size_t i = 0; i < priced.size(); ++i)
      if (priced[i] > 0) ratio.push_back(trial_rows_[i].measured_s / priced[i]);
  }
  const double fallback = ratio.empty() ? 1.0 : rundb::percentile(ratio, 0.5);
  TimeOptions analytic = measuredOverlap(costs_);
  analytic.framework = framework_;
  rankCandidates(all, ComposedCost(w_, fitted_, costs_), AnalyticCost(w_, fitted_, analytic), fallback);
}

}  // namespace trainscope::tuner
