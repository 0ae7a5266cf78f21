// ruler.cpp — ruler ticks and exact time labels (see ruler.h).
#include "trainscope/viewer/ruler.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "trainscope/viewer/view_state.h"

namespace trainscope::viewer {

namespace {

constexpr int64_t kPow10[] = {1, 10, 100, 1'000, 10'000, 100'000, 1'000'000, 10'000'000, 100'000'000, 1'000'000'000};
const char* unitName(int e) { return e == 0 ? "ns" : e == 3 ? "us" : e == 6 ? "ms" : "s"; }

uint64_t magnitude(int64_t v) { return v < 0 ? uint64_t(0) - uint64_t(v) : uint64_t(v); }

int digits(uint64_t v) {
  int n = 1;
  while (v >= 10) v /= 10, ++n;
  return n;
}

// Digits after the point that unit 10^e needs to show multiples of `step` exactly.
int decimalsFor(int64_t step, int e) {
  int k = 0;  // the largest k with 10^k dividing step (k <= 9 suffices here)
  while (k < 9 && step % kPow10[k + 1] == 0) ++k;
  return std::max(0, e - k);
}

int64_t floorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

}  // namespace

int unitExponent(int64_t ns) {
  const uint64_t a = magnitude(ns);
  return a < 1'000 ? 0 : a < 1'000'000 ? 3 : a < 1'000'000'000 ? 6 : 9;
}

std::string formatFixed(int64_t ns, int unit_exp, int decimals, bool group) {
  unit_exp = std::clamp(unit_exp / 3 * 3, 0, 9);
  decimals = std::clamp(decimals, 0, unit_exp);
  const uint64_t a = magnitude(ns), unit = uint64_t(kPow10[unit_exp]);
  std::string s = ns < 0 ? "-" : "";
  s += std::to_string(a / unit);
  if (decimals > 0) {
    const uint64_t frac = (a % unit) / uint64_t(kPow10[unit_exp - decimals]);
    std::string f = std::to_string(frac);
    f.insert(0, size_t(decimals) - f.size(), '0');
    s += '.';
    for (size_t i = 0; i < f.size(); ++i) {
      if (group && i > 0 && i % 3 == 0) s += ' ';
      s += f[i];
    }
  }
  s += ' ';
  s += unitName(unit_exp);
  return s;
}

std::string formatExact(int64_t ns) {
  const int e = unitExponent(ns);
  const uint64_t frac = magnitude(ns) % uint64_t(kPow10[e]);
  int decimals = 0;
  if (frac) {
    int zeros = 0;
    for (uint64_t f = frac; f % 10 == 0; f /= 10) ++zeros;
    decimals = e - zeros;
    // Past three digits, whole groups of three: "1.254 321 ms", not "1.254 32 ms" (ambiguous).
    if (decimals > 3) decimals = (decimals + 2) / 3 * 3;
  }
  return formatFixed(ns, e, decimals, true);
}

Ruler makeRuler(const TimeView& v, float min_px) {
  Ruler r;
  const double min_ns = v.nsPerPx() * double(min_px);
  if (!(min_ns > 0) || !std::isfinite(min_ns) || !(v.t1 > v.t0) || std::fabs(v.t0) > 9e18 || std::fabs(v.t1) > 9e18)
    return r;
  // The smallest 1/2/5 x 10^k ns step at least min_ns apart, and at least 10 ns (so that a fifth of
  // it, the minor step, is a whole number of ns).
  for (int64_t p = 10; !r.step && p <= 100'000'000'000'000'000; p *= 10)
    for (int64_t m : {1, 2, 5})
      if (double(m * p) >= min_ns) {
        r.step = m * p;
        break;
      }
  if (!r.step) return r;
  const int64_t minor = r.step / 5;
  const int64_t lo = int64_t(std::ceil(v.t0)), hi = int64_t(std::floor(v.t1));
  for (int64_t t = -floorDiv(-lo, minor) * minor; t <= hi && r.ticks.size() < 4096; t += minor)
    r.ticks.push_back({t, double(t), "", t % r.step == 0});
  std::vector<Tick*> majors;
  for (auto& tk : r.ticks)
    if (tk.major) majors.push_back(&tk);
  if (majors.empty()) return r;
  // Absolute labels: one unit (that of the largest time shown) and the decimals the step needs.
  uint64_t largest = 0;
  for (const Tick* tk : majors) largest = std::max(largest, magnitude(tk->ns));
  const int e = unitExponent(int64_t(largest));
  const int d = decimalsFor(r.step, e);
  if (digits(largest / uint64_t(kPow10[e])) + d <= kRulerDigits) {
    for (Tick* tk : majors) tk->label = formatFixed(tk->ns, e, d);
    return r;
  }
  // Offsets from the first labelled tick in view, which is shown once in full.
  r.relative = true;
  r.base = majors.front()->ns;
  r.base_label = formatFixed(r.base, unitExponent(r.base), 9, true);
  const int64_t last = majors.back()->ns - r.base;
  const int oe = unitExponent(std::max(last, r.step));
  const int od = decimalsFor(r.step, oe);
  for (Tick* tk : majors) tk->label = "+" + formatFixed(tk->ns - r.base, oe, od);
  return r;
}

}  // namespace trainscope::viewer
