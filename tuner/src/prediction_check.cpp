// prediction_check.cpp — predicted against measured over a study (prediction_check.h).
#include "trainscope/tuner/prediction_check.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include <nlohmann/json.hpp>

#include "trainscope/common/json_text.h"

namespace trainscope::tuner {
namespace {

// 1-based ranks, ties sharing their mean rank.
std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<size_t> order(v.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    for (size_t k = i; k <= j; ++k) r[order[k]] = (double(i) + double(j)) / 2.0 + 1.0;
    i = j + 1;
  }
  return r;
}

double pearson(const std::vector<double>& a, const std::vector<double>& b) {
  const double n = double(a.size());
  const double ma = std::accumulate(a.begin(), a.end(), 0.0) / n, mb = std::accumulate(b.begin(), b.end(), 0.0) / n;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size() || a.size() < 3) return std::numeric_limits<double>::quiet_NaN();
  return pearson(ranks(a), ranks(b));
}

PredictionCheck checkPredictions(const std::vector<TrialRecord>& trials) {
  std::map<int64_t, double> first_prediction;  // candidate → the prediction its first trial ran with
  for (const TrialRecord& t : trials)
    if (t.predicted_step_s > 0 && !first_prediction.count(t.candidate)) first_prediction[t.candidate] = t.predicted_step_s;
  std::vector<double> predicted, measured;
  for (const auto& [candidate, p] : first_prediction)
    if (const double m = pooledStepTime(trials, candidate); m > 0) {
      predicted.push_back(p);
      measured.push_back(m);
    }
  PredictionCheck c;
  c.candidates = int64_t(measured.size());
  c.spearman = spearman(predicted, measured);
  if (!measured.empty()) {
    double sum = 0;
    for (size_t i = 0; i < measured.size(); ++i) sum += std::abs(predicted[i] - measured[i]) / measured[i];
    c.mean_abs_error = sum / double(measured.size());
  }
  return c;
}

std::string toJson(const PredictionCheck& c) {
  auto num = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); };
  return jsonText(nlohmann::json({{"candidates", c.candidates}, {"spearman", num(c.spearman)},
                                  {"mean_abs_error", num(c.mean_abs_error)}}));
}

}  // namespace trainscope::tuner
