// learner.cpp — a study's trials read once, and the re-rank (learner.h).
#include "trainscope/tuner/learner.h"

#include <set>

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

void Learner::refitConstants() {
  std::set<std::string> plans;
  for (const FitRow& r : trial_rows_) plans.insert(r.p.describe() + "/" + std::to_string(r.p.mbs));
  if (plans.size() < 3) return;  // fewer distinct plans than constants to say anything about them
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
