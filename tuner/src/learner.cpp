// learner.cpp — a study's trials read once, and the re-rank (learner.h).
#include "trainscope/tuner/learner.h"

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
        if ((x.group == "dp" || x.group == "tp") && x.op != "barrier") comm_.push_back(x);
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
  if (t.step_s > 0) analytic_ratio_.push_back(t.step_s / predictTime(w_, p, fitted_).step_s);
  return t;
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
  const double fallback = analytic_ratio_.empty() ? 1.0 : rundb::percentile(analytic_ratio_, 0.5);
  rankCandidates(all, ComposedCost(w_, fitted_, costs_), AnalyticCost(w_, fitted_, measuredOverlap(costs_)), fallback);
}

}  // namespace trainscope::tuner
