// fit.cpp — fitting a cluster file's constants to measured step times (fit.h).
#include "trainscope/tuner/fit.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/json_text.h"

namespace trainscope::tuner {
namespace {

constexpr double kHuberDelta = 0.05;

// A user's DeepSpeed knobs, as text ("" without a config).
std::string deepspeedKey(const DeepSpeedZero& z) {
  if (!z.from_config) return "";
  return std::to_string(z.reduce_bucket_size) + "," + std::to_string(z.allgather_bucket_size) + "," +
         std::to_string(z.prefetch_bucket_size) + "," + std::to_string(z.max_live_parameters) + "," +
         std::to_string(z.param_persistence_threshold) + "," + std::to_string(z.contiguous_gradients) + "," +
         std::to_string(z.overlap_comm);
}

// Rows that price the same configuration on the same cluster size share one prediction.
std::string configKey(const FitRow& r) {
  const workloads::Workload& w = *r.w;
  return w.name + "|" + std::to_string(w.n_layer) + "|" + std::to_string(w.n_embd) + "|" + std::to_string(w.n_head) +
         "|" + std::to_string(w.vocab_size) + "|" + r.p.describe() + "|" + std::to_string(r.p.gbs) + "|" +
         std::to_string(r.p.seq) + "|" + std::to_string(r.p.mbs) + "|" + std::to_string(r.nodes) + "|" +
         std::to_string(int(r.options.framework)) + "|" + std::to_string(int(r.options.attention)) + "|" +
         std::to_string(r.options.dp_overlap) + "|" + std::to_string(r.options.reduce_bytes) + "|" + deepspeedKey(r.options.deepspeed);
}

// The rows as distinct configurations, and each row's index among them.
struct Distinct {
  std::vector<size_t> first;  // a row of each configuration
  std::vector<size_t> of;     // per row
  explicit Distinct(const std::vector<FitRow>& rows) {
    std::map<std::string, size_t> seen;
    for (size_t i = 0; i < rows.size(); ++i) {
      auto [it, fresh] = seen.emplace(configKey(rows[i]), first.size());
      if (fresh) first.push_back(i);
      of.push_back(it->second);
    }
  }
};

std::vector<PricedRow> priceDistinctInFull(const Cluster& c, const std::vector<FitRow>& rows, const Distinct& d) {
  std::map<int64_t, Cluster> sized;  // one copy per node count
  std::vector<PricedRow> out;
  out.reserve(d.first.size());
  for (size_t i : d.first) {
    const FitRow& r = rows[i];
    auto it = sized.find(r.nodes);
    if (it == sized.end()) {
      it = sized.emplace(r.nodes, c).first;
      it->second.nodes = r.nodes;
    }
    const TimePrediction t = predictTime(*r.w, r.p, it->second, r.options);
    out.push_back({t.step_s, t.bubble_s});
  }
  return out;
}

std::vector<double> priceDistinct(const Cluster& c, const std::vector<FitRow>& rows, const Distinct& d) {
  std::vector<double> out;
  for (const PricedRow& t : priceDistinctInFull(c, rows, d)) out.push_back(t.step_s);
  return out;
}

double huber(double r) {
  const double a = std::fabs(r);
  return a <= kHuberDelta ? 0.5 * r * r : kHuberDelta * (a - 0.5 * kHuberDelta);
}

// A constant's value at coordinate u in [0, 1] of its bounds, and back.
double valueAt(double u, double lo, double hi) {
  u = std::clamp(u, 0.0, 1.0);
  return lo > 0 ? lo * std::pow(hi / lo, u) : lo + (hi - lo) * u * u * u;
}
double coordinateOf(double v, double lo, double hi) {
  if (!(hi > lo)) return 0;
  v = std::clamp(v, lo, hi);
  return lo > 0 ? std::log(v / lo) / std::log(hi / lo) : std::cbrt((v - lo) / (hi - lo));
}

}  // namespace

std::vector<double> priceRows(const Cluster& c, const std::vector<FitRow>& rows) {
  const Distinct d(rows);
  const std::vector<double> priced = priceDistinct(c, rows, d);
  std::vector<double> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) out[i] = priced[d.of[i]];
  return out;
}

std::vector<PricedRow> priceRowsInFull(const Cluster& c, const std::vector<FitRow>& rows) {
  const Distinct d(rows);
  const std::vector<PricedRow> priced = priceDistinctInFull(c, rows, d);
  std::vector<PricedRow> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) out[i] = priced[d.of[i]];
  return out;
}

std::vector<const FitParam*> identifiable(const Cluster& base, const std::vector<FitRow>& rows,
                                          const std::vector<const FitParam*>& candidates) {
  const Distinct d(rows);
  const std::vector<double> at_base = priceDistinct(base, rows, d);
  std::vector<const FitParam*> out;
  for (const FitParam* p : candidates) {
    const auto [lo, hi] = boundsOf(*p, base);
    bool moves = false;
    for (double v : {lo, hi}) {
      Cluster c = base;
      setParam(c, *p, v);
      const std::vector<double> priced = priceDistinct(c, rows, d);
      for (size_t i = 0; i < priced.size() && !moves; ++i)
        moves = std::fabs(priced[i] / at_base[i] - 1) > 1e-3;
    }
    if (moves) out.push_back(p);
  }
  return out;
}

FitResult fitCluster(const Cluster& base, const std::vector<FitRow>& rows, const std::vector<const FitParam*>& params,
                     int64_t max_evaluations) {
  if (rows.empty()) throw UserError("--from", "no rows to fit", "pass measured configurations");
  const Distinct d(rows);
  const size_t n = params.size();
  std::vector<std::pair<double, double>> bounds;
  std::vector<double> u(n);
  for (size_t k = 0; k < n; ++k) {
    bounds.push_back(boundsOf(*params[k], base));
    u[k] = coordinateOf(getParam(base, *params[k]), bounds[k].first, bounds[k].second);
  }
  FitResult r;
  auto clusterAt = [&](const std::vector<double>& x) {
    Cluster c = base;
    for (size_t k = 0; k < n; ++k) setParam(c, *params[k], valueAt(x[k], bounds[k].first, bounds[k].second));
    return c;
  };
  auto loss = [&](const std::vector<double>& x) {
    ++r.evaluations;
    const std::vector<double> priced = priceDistinct(clusterAt(x), rows, d);
    double sum = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      const double p = priced[d.of[i]];
      sum += p > 0 && std::isfinite(p) ? huber(std::log(p / rows[i].measured_s)) : 1e3;
    }
    return sum / double(rows.size());
  };
  double best = loss(u);
  // Coarse scans, one coordinate at a time: out of a poor start's basin.
  for (int pass = 0; pass < 2 && n > 0; ++pass)
    for (size_t k = 0; k < n; ++k)
      for (int g = 0; g <= 8; ++g) {
        std::vector<double> x = u;
        x[k] = g / 8.0;
        if (x[k] == u[k] || r.evaluations >= max_evaluations) continue;
        if (const double l = loss(x); l < best - 1e-12) best = l, u = x;
      }
  // Compass search: a step each way per coordinate, halved when none improves; after a sweep that
  // moved, the same move again (a pattern move, Hooke and Jeeves): along a valley two constants
  // trade off in, single steps alone crawl. Restarted from the best point while a run improves it.
  for (int restart = 0; restart < 4 && r.evaluations < max_evaluations; ++restart) {
    const double start = best;
    for (double step = 1.0 / 16; step > 1.0 / 4096 && r.evaluations < max_evaluations;) {
      const std::vector<double> before = u;
      for (size_t k = 0; k < n && r.evaluations < max_evaluations; ++k)
        for (double s : {step, -step}) {
          std::vector<double> x = u;
          x[k] = std::clamp(x[k] + s, 0.0, 1.0);
          if (x[k] == u[k]) continue;
          if (const double l = loss(x); l < best - 1e-12) {
            best = l, u = x;
            break;
          }
        }
      if (u == before) {
        step /= 2;
        continue;
      }
      for (int move = 0; move < 8 && r.evaluations < max_evaluations; ++move) {
        std::vector<double> x = u;
        for (size_t k = 0; k < n; ++k) x[k] = std::clamp(u[k] + (u[k] - before[k]) * double(1 << move), 0.0, 1.0);
        const double l = loss(x);
        if (!(l < best - 1e-12)) break;
        best = l, u = x;
      }
    }
    if (!(best < start - 1e-12)) break;
  }
  r.fitted = clusterAt(u);
  for (size_t k = 0; k < n; ++k) r.values[params[k]->path] = getParam(r.fitted, *params[k]);
  r.loss = best;
  r.predicted_s = priceRows(r.fitted, rows);
  return r;
}

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<size_t> order(v.size());
  for (size_t i = 0; i < v.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    for (size_t k = i; k <= j; ++k) r[order[k]] = 0.5 * double(i + j);
    i = j + 1;
  }
  return r;
}

double spearman(const std::vector<double>& x, const std::vector<double>& y) {
  const std::vector<double> rx = ranks(x), ry = ranks(y);
  const double n = double(x.size());
  double mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) mx += rx[i] / n, my += ry[i] / n;
  double cov = 0, vx = 0, vy = 0;
  for (size_t i = 0; i < x.size(); ++i)
    cov += (rx[i] - mx) * (ry[i] - my), vx += (rx[i] - mx) * (rx[i] - mx), vy += (ry[i] - my) * (ry[i] - my);
  return vx > 0 && vy > 0 ? cov / std::sqrt(vx * vy) : std::nan("");
}

}  // namespace

ErrorSummary summarize(const std::vector<FitRow>& rows, const std::vector<double>& predicted_s) {
  ErrorSummary s;
  std::vector<double> signed_err, abs_err;
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> groups;
  for (size_t i = 0; i < rows.size(); ++i) {
    const double e = predicted_s[i] / rows[i].measured_s - 1;
    signed_err.push_back(e);
    abs_err.push_back(std::fabs(e));
    groups[rows[i].group].first.push_back(rows[i].measured_s);
    groups[rows[i].group].second.push_back(predicted_s[i]);
  }
  s.rows = int64_t(rows.size());
  if (rows.empty()) return s;
  for (double a : abs_err) s.mape += a / double(rows.size());
  s.median_signed = median(signed_err);
  std::sort(abs_err.begin(), abs_err.end());
  s.abs_p90 = abs_err[std::min(abs_err.size() - 1, size_t(std::ceil(0.9 * double(abs_err.size()))) - 1)];
  s.max_abs = abs_err.back();
  std::vector<double> rhos;
  for (const auto& [name, g] : groups)
    if (g.first.size() >= 3)
      if (const double rho = spearman(g.first, g.second); std::isfinite(rho)) rhos.push_back(rho);
  s.spearman_groups = int64_t(rhos.size());
  s.spearman_median = median(rhos);
  return s;
}

std::string errorSummaryJson(const ErrorSummary& s) {
  return jsonText(nlohmann::json{{"rows", s.rows}, {"mape", s.mape}, {"median_signed_error", s.median_signed},
                                 {"abs_error_p90", s.abs_p90}, {"max_abs_error", s.max_abs},
                                 {"spearman_within_group_median", s.spearman_median},
                                 {"spearman_groups", s.spearman_groups}});
}

std::vector<double> crossValidate(const Cluster& base, const std::vector<FitRow>& rows,
                                  const std::vector<const FitParam*>& params, int64_t folds, int64_t max_evaluations) {
  std::set<std::string> names;
  for (const FitRow& r : rows) names.insert(r.group);
  if (folds < 2 || folds > int64_t(names.size()))
    throw UserError("--folds", std::to_string(folds) + " folds of " + std::to_string(names.size()) +
                                   " group(s) (model and cluster size)",
                    names.size() >= 2 ? "pass --folds from 2 to " + std::to_string(names.size()) + ", or --folds 0 to skip "
                                        "cross-validation"
                                      : "pass --folds 0: one group cannot be cross-validated (add rows of other models "
                                        "or cluster sizes)");
  std::map<std::string, int64_t> fold_of;
  int64_t i = 0;
  for (const std::string& g : names) fold_of[g] = i++ % folds;
  std::vector<double> held(rows.size(), 0);
  for (int64_t f = 0; f < folds; ++f) {
    std::vector<FitRow> train, test;
    std::vector<size_t> test_index;
    for (size_t k = 0; k < rows.size(); ++k)
      if (fold_of[rows[k].group] == f) test.push_back(rows[k]), test_index.push_back(k);
      else train.push_back(rows[k]);
    const FitResult fit = fitCluster(base, train, params, max_evaluations);
    const std::vector<double> priced = priceRows(fit.fitted, test);
    for (size_t k = 0; k < test.size(); ++k) held[test_index[k]] = priced[k];
  }
  return held;
}

}  // namespace trainscope::tuner
