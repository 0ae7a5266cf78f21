// tune_json.cpp — see tune_json.h.
#include "trainscope/tuner/tune_json.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "trainscope/common/json_text.h"

namespace trainscope::tuner {

std::string tuneResultJson(const std::string& study, const workloads::Workload& w, const Cluster& c,
                           const TuneResult& r) {
  int64_t valid = 0;
  for (const auto& cand : r.candidates) valid += cand.rejected.empty();
  nlohmann::json j = {{"study", study}, {"workload", w.name}, {"cluster", c.name}, {"candidates", r.candidates.size()},
                      {"valid", valid}, {"trials_run", r.trials_run}, {"time_scale", r.time_scale},
                      {"recommended", r.recommended}, {"interrupted", r.interrupted}};
  if (r.recommended >= 0 && r.estimate.count(r.recommended)) j["recommended_step_s"] = r.estimate.at(r.recommended);
  for (const auto& t : r.trials)
    j["trials"].push_back({{"candidate", t.candidate}, {"round", t.round}, {"steps", t.steps},
                           {"status", toString(t.status)}, {"step_s", t.step_s}, {"tokens_per_s", t.tokens_per_s},
                           {"peak_bytes", t.peak_bytes}, {"predicted_step_s", t.predicted_step_s},
                           {"predicted_peak", t.predicted_peak}, {"db", t.db_path}, {"message", t.message},
                           {"profile", t.round == 0 && std::count(r.profiles.begin(), r.profiles.end(), t.candidate) > 0}});
  for (const auto& cand : r.candidates)
    j["ranked"].push_back({{"id", cand.id}, {"plan", cand.plan.describe()}, {"rejected", cand.rejected},
                           {"zero", runconfig::stageNumber(cand.plan.zero)}, {"virtual_stages", cand.plan.virtual_stages},
                           {"cp", cand.plan.cp}, {"ep", cand.plan.ep},
                           {"predicted_step_s", cand.predicted_step_s}, {"predicted_peak", cand.predicted_peak},
                           {"time_measured", cand.time_measured},
                           {"measured_step_s", r.estimate.count(cand.id) && r.estimate.at(cand.id) > 0
                                                   ? nlohmann::json(r.estimate.at(cand.id))
                                                   : nlohmann::json()},
                           {"predicted_step_s_analytic", cand.rejected.empty() ? cand.analytic_step_s : 0.0}});
  j["measured_costs"] = nlohmann::json::parse(costsJson(r.costs));
  if (!r.trials.empty()) j["prediction_check"] = nlohmann::json::parse(toJson(r.prediction_check));
  if (r.network_fit.samples > 0)
    j["network_fit"] = {{"latency_s", r.network_fit.tier.latency},
                        {"bandwidth_bytes_per_s", r.network_fit.tier.bandwidth},
                        {"samples", r.network_fit.samples}, {"r2", r.network_fit.r2}};
  if (!r.fitted_constants.empty()) {
    j["fitted_constants"] = r.fitted_constants;
    j["refit_cross_validation"] = nlohmann::json::parse(refitCrossValidationJson(r.refit_cv));
  }
  return jsonText(j);
}

}  // namespace trainscope::tuner
