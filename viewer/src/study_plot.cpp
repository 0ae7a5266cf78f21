// study_plot.cpp — see study_plot.h.
#include "trainscope/viewer/study_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

namespace trainscope::viewer {

double niceStep(double span, int target) {
  if (!(span > 0) || !std::isfinite(span)) return 1;
  const double raw = span / std::max(1, target);
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * p >= raw * 0.999) return m * p;  // 0.999: 1.0 must not round up to 2 through log10's error
  return 10 * p;
}

std::vector<AxisTick> axisTicks(double lo, double hi, int target, const std::function<std::string(double)>& format) {
  std::vector<AxisTick> out;
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return out;
  const double step = niceStep(hi - lo, target);
  // Integer multiples of the step, so that 0 is a tick exactly and labels do not accumulate error.
  const auto first = int64_t(std::ceil(lo / step - 1e-9)), last = int64_t(std::floor(hi / step + 1e-9));
  for (int64_t k = first; k <= last && out.size() < 1000; ++k) {
    const double v = double(k) * step;
    out.push_back({v, format(v)});
  }
  return out;
}

namespace {

// axisTicks in `unit` (the largest of `units` not above `top`), labelled "<value> <name>".
std::vector<AxisTick> unitTicks(double lo, double hi, int target, const std::vector<std::pair<double, const char*>>& units) {
  const double top = std::max(std::fabs(lo), std::fabs(hi));
  auto u = units.front();
  for (const auto& x : units)
    if (top >= x.first) u = x;
  auto ticks = axisTicks(lo / u.first, hi / u.first, target, [&](double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6g %s", std::fabs(v) < 1e-9 ? 0.0 : v, u.second);
    return std::string(buf);
  });
  for (auto& t : ticks) t.value *= u.first;
  return ticks;
}

}  // namespace

std::vector<AxisTick> durationTicks(double lo_s, double hi_s, int target) {
  return unitTicks(lo_s, hi_s, target, {{1e-9, "ns"}, {1e-6, "us"}, {1e-3, "ms"}, {1, "s"}});
}

std::vector<AxisTick> byteTicks(double lo, double hi, int target) {
  return unitTicks(lo, hi, target, {{1, "B"}, {1024, "KiB"}, {1048576, "MiB"}, {1073741824.0, "GiB"}, {1099511627776.0, "TiB"}});
}

namespace {
double weight(const MeasuredTrial& t) { return t.ok && t.step_s > 0 ? double(std::max<int64_t>(1, t.steps - 1)) : 0; }
}  // namespace

PooledTime pooledTime(const std::vector<MeasuredTrial>& trials, int64_t candidate) {
  PooledTime p{candidate, 0, 0};
  double sum = 0, w = 0;
  for (const auto& t : trials)
    if (t.candidate == candidate && weight(t) > 0) {
      sum += weight(t) * t.step_s;
      w += weight(t);
      ++p.trials;
    }
  p.step_s = w > 0 ? sum / w : 0;
  return p;
}

namespace {

// The noise fields of `a`: the relative variance of single trials around the mean of their group —
// the same candidate at the same trial length. Only such repeats differ by noise alone: a 3-step
// trial's median still holds warm-up that a 12-step one has left behind.
void measureNoise(const std::vector<MeasuredTrial>& trials, StudyArgument& a) {
  std::map<std::pair<int64_t, int64_t>, std::vector<double>> groups;
  for (const auto& t : trials)
    if (weight(t) > 0) groups[{t.candidate, t.steps}].push_back(t.step_s);
  double ss = 0;
  std::set<int64_t> candidates;
  for (const auto& [key, times] : groups) {
    if (times.size() < 2) continue;
    double mean = 0;
    for (double x : times) mean += x / double(times.size());
    for (double x : times) ss += ((x - mean) / mean) * ((x - mean) / mean);
    a.noise_trials += int64_t(times.size());
    ++a.noise_groups;
    candidates.insert(key.first);
  }
  a.noise_candidates = int64_t(candidates.size());
  if (a.noise_trials > a.noise_groups) {
    a.noise = std::sqrt(ss / double(a.noise_trials - a.noise_groups));
    a.noise_known = true;
  }
}

}  // namespace

StudyArgument studyArgument(const std::vector<MeasuredTrial>& trials, int64_t recommended) {
  StudyArgument a;
  measureNoise(trials, a);
  if (recommended < 0) return a;
  a.winner = pooledTime(trials, recommended);
  // Each candidate's latest trial and whether any trial rules it out, as the tuner's pick reads them.
  std::map<int64_t, const MeasuredTrial*> latest;
  std::map<int64_t, bool> unfit;
  for (const auto& t : trials) {
    if (!latest.count(t.candidate) || latest[t.candidate]->round < t.round) latest[t.candidate] = &t;
    unfit[t.candidate] = unfit[t.candidate] || t.unfit;
  }
  const MeasuredTrial* best = nullptr;
  double best_s = 0;
  for (const auto& [cand, t] : latest) {
    if (cand == recommended || !t->ok || unfit[cand]) continue;
    const double s = pooledTime(trials, cand).step_s;
    if (s <= 0) continue;
    if (!best || t->round > best->round || (t->round == best->round && s < best_s)) best = t, best_s = s;
  }
  if (!best || a.winner.step_s <= 0) return a;
  a.runner_up = pooledTime(trials, best->candidate);
  a.runner_up_round = best->round;
  if (latest.count(recommended)) a.winner_round = latest[recommended]->round;
  a.margin = (a.runner_up.step_s - a.winner.step_s) / a.winner.step_s;
  if (a.noise_known) {
    a.threshold = 2 * a.noise * std::sqrt(1.0 / double(a.winner.trials) + 1.0 / double(a.runner_up.trials));
    a.within_noise = std::fabs(a.margin) <= a.threshold;
  }
  return a;
}

std::string argumentText(const StudyArgument& a, const std::function<std::string(int64_t)>& plan,
                         const std::function<std::string(double)>& duration) {
  char buf[512];
  if (a.runner_up.candidate < 0) return "no runner-up: no other candidate ran as far without failing";
  std::snprintf(buf, sizeof buf, "runner-up #%lld %s: %s/step over %lld trials, %+.1f%% against the winner",
                (long long)a.runner_up.candidate, plan(a.runner_up.candidate).c_str(),
                duration(a.runner_up.step_s).c_str(), (long long)a.runner_up.trials, 100 * a.margin);
  std::string s = buf;
  if (a.margin < 0 && a.runner_up_round >= 0 && a.runner_up_round < a.winner_round) {
    std::snprintf(buf, sizeof buf,
                  " (faster, but measured up to round %lld only; the winner reached round %lld, and the tuner "
                  "picks among the furthest round)",
                  (long long)a.runner_up_round, (long long)a.winner_round);
    s += buf;
  }
  s += "; ";
  if (!a.noise_known) return s + "noise not measured (no candidate ran twice at one length)";
  std::snprintf(buf, sizeof buf, "noise %.1f%% per trial (%lld repeated trials of %lld candidates): ", 100 * a.noise,
                (long long)a.noise_trials, (long long)a.noise_candidates);
  s += buf;
  std::snprintf(buf, sizeof buf, a.within_noise ? "within noise (the noise alone makes up to %.1f%%)"
                                                : "beyond noise (the noise alone makes up to %.1f%%)",
                100 * a.threshold);
  return s + buf;
}

}  // namespace trainscope::viewer
