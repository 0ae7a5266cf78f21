// cost_model.cpp — the step time composed from measured costs, and the re-rank (cost_model.h).
#include "trainscope/tuner/cost_model.h"

#include <algorithm>
#include <cstdint>

#include "stage_params.h"
#include "trainscope/rundb/summary.h"

namespace trainscope::tuner {
namespace {

double median(std::vector<double> v) { return rundb::percentile(std::move(v), 0.5); }

// Recomputation per layer and micro-batch: as measured, else (selective, unmeasured) the analytic
// model's share of a layer's forward.
double recomputePerLayer(const workloads::Workload& w, const Plan& p, const Cluster& c, const LayerCosts& k) {
  if (p.ckpt == runconfig::Checkpointing::Full) return k.recompute_full_s > 0 ? k.recompute_full_s : k.layer_fwd_s;
  if (p.ckpt != runconfig::Checkpointing::Selective) return 0;
  if (k.recompute_selective_s > 0) return k.recompute_selective_s;
  Plan none = p;
  none.ckpt = runconfig::Checkpointing::None;
  const double a_none = predictTime(w, none, c).compute_s;
  const double a_sel = predictTime(w, p, c).recompute_s;
  return a_none > 0 ? k.layer_fwd_s * 3.0 * a_sel / a_none : 0;  // compute_s is 3 × forward
}

}  // namespace

int64_t CostModel::peakBytes(const Plan& p) const { return predictMemory(w_, p).peak(); }

std::optional<TimePrediction> composeTime(const workloads::Workload& w, const Plan& p, const Cluster& c,
                                          const MeasuredCosts& m) {
  const auto found = m.find(shapeKey(p, c), runconfig::stageNumber(p.zero));
  if (!found || found->layer_fwd_s <= 0) return std::nullopt;
  const LayerCosts& k = *found;
  // The analytic model supplies what this shape's runs did not measure: the selective recompute's
  // share of a layer's forward, the pipeline's point-to-point sends, the DP all-reduce.
  const TimePrediction analytic = predictTime(w, p, c);
  const std::vector<double> params = stageParams(w, p), experts = unmanagedParams(w, p);
  const double recompute = recomputePerLayer(w, p, c, k);
  const double M = double(std::max<int64_t>(1, p.ga()));
  double sum = 0, worst = 0, worst_compute = 0, worst_recompute = 0;
  const double p2p = p.pp > 1 ? analytic.pp_comm_s / M : 0;  // per micro-batch
  for (int64_t st = 0; st < p.pp; ++st) {
    const double L = double(layersOfStage(w.n_layer, p.pp, st));
    const double compute = L * (k.layer_fwd_s + k.layer_bwd_s) + (st == 0 ? k.embed_s : 0) + (st == p.pp - 1 ? k.head_s : 0);
    const double t = compute + L * recompute + p2p;
    sum += t;
    if (t > worst) worst = t, worst_compute = compute, worst_recompute = L * recompute;
  }
  TimePrediction r;
  r.compute_s = M * worst_compute;
  r.recompute_s = M * worst_recompute;
  r.pp_comm_s = M * p2p;
  const double v = double(std::max<int64_t>(1, p.virtual_stages));
  r.bubble_s = p.pp > 1 ? (v > 1 ? (double(p.pp) - 1.0) / v * worst : sum - worst) : 0;
  if (p.gradientGroup() > 1) {
    auto sync = k.dp_sync_bytes > 0 ? std::make_optional(std::make_pair(k.dp_sync_bytes, k.dp_sync_s)) : m.anyDpSync(runconfig::stageNumber(p.zero));
    const double bytes = allReduceBytes(p, params, experts);
    r.dp_comm_s = sync ? sync->second * bytes / std::max(1.0, sync->first) : analytic.dp_comm_s;
  }
  double n_max = 0;
  for (size_t st = 0; st < params.size(); ++st) n_max = std::max(n_max, paramsUpdated(p, params[st], experts[st]));
  r.optimizer_s = k.optimizer_s_per_param > 0 ? k.optimizer_s_per_param * n_max : analytic.optimizer_s;
  r.other_s = k.other_s >= 0 ? k.other_s : m.anyOther(runconfig::stageNumber(p.zero));
  r.tp_comm_s = 0;  // inside the measured layer times
  r.step_s = r.compute_s + r.recompute_s + r.pp_comm_s + r.bubble_s + r.dp_comm_s + r.optimizer_s + r.other_s;
  r.tokens_per_s = double(p.gbs) * double(p.seq) / r.step_s;
  r.model_flops = analytic.model_flops;
  r.mfu = analytic.mfu * analytic.step_s / r.step_s;
  r.measured = true;
  return r;
}

void rankCandidates(std::vector<Candidate>& all, const CostModel& measured, const CostModel& analytic,
                    double fallback_scale) {
  std::vector<std::optional<TimePrediction>> composed(all.size()), modelled(all.size());
  std::vector<double> ratio;
  for (size_t i = 0; i < all.size(); ++i) {
    if (!all[i].rejected.empty()) continue;
    composed[i] = measured.time(all[i].plan);
    modelled[i] = analytic.time(all[i].plan);
    if (composed[i] && modelled[i] && modelled[i]->step_s > 0) ratio.push_back(composed[i]->step_s / modelled[i]->step_s);
  }
  const double scale = ratio.empty() ? fallback_scale : median(ratio);
  for (size_t i = 0; i < all.size(); ++i) {
    if (!all[i].rejected.empty() || !(composed[i] || modelled[i])) continue;
    all[i].predicted_step_s = composed[i] ? composed[i]->step_s : modelled[i]->step_s * scale;
    all[i].predicted_tokens_per_s = double(all[i].plan.gbs) * double(all[i].plan.seq) / all[i].predicted_step_s;
    all[i].time_measured = composed[i].has_value();
  }
}

void rerank(const workloads::Workload& w, const Cluster& c, const MeasuredCosts& m, std::vector<Candidate>& all,
            double fallback_scale) {
  rankCandidates(all, ComposedCost(w, c, m), AnalyticCost(w, c, measuredOverlap(m)), fallback_scale);
}

TimeOptions measuredOverlap(const MeasuredCosts& m) {
  TimeOptions o;
  for (const auto& [key, runs] : m.runs())
    if (auto k = m.find(key); k && k->dp_hidden_share >= 0) o.dp_overlap = k->dp_hidden_share;
  return o;
}

}  // namespace trainscope::tuner
