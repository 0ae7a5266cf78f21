// counter_plot.cpp — a counter row's axis, colour and value at a time (see counter_plot.h).
#include "trainscope/viewer/counter_plot.h"

#include <algorithm>
#include <cstdio>

#include "trainscope/viewer/image.h"
#include "trainscope/viewer/view_state.h"

namespace trainscope::viewer {

CounterAxis counterAxis(const CounterSeries& c, const std::string& label) {
  CounterAxis a;
  if (c.values.empty()) {
    a.empty = true;
    return a;
  }
  a.max = c.max_value;
  a.min = c.min_value;
  a.bytes = label == "memory";
  a.all_zero = a.min == 0 && a.max == 0;
  a.hi = std::max(a.max, 0.0);
  a.lo = std::min(a.min, 0.0);
  if (!a.bytes && a.min > 0 && a.min > a.max / 2 && a.max > a.min) {
    a.lo = std::max(0.0, a.min - 0.1 * (a.max - a.min));
    a.hi = a.max;
  }
  return a;
}

std::string counterText(const CounterAxis& a, double v) {
  if (a.bytes) return formatBytes(v);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

uint32_t counterColor(const std::string& label) {
  if (label == "memory") return palette::kMemoryCounter;
  if (label.rfind("moe: imbalance", 0) == 0) return rgb(240, 170, 60);
  if (label.rfind("moe: dropped", 0) == 0) return rgb(235, 90, 90);
  static const uint32_t kOthers[] = {rgb(150, 200, 90), rgb(170, 140, 240), rgb(240, 220, 110), rgb(120, 170, 250)};
  uint32_t h = 2166136261u;  // FNV-1a: the same name, the same colour
  for (unsigned char ch : label) h = (h ^ ch) * 16777619u;
  return kOthers[h % 4];
}

std::optional<double> counterValueAt(const CounterSeries& c, int64_t t) {
  const auto it = std::upper_bound(c.ts.begin(), c.ts.end(), t);
  if (it == c.ts.begin()) return std::nullopt;
  return c.values[size_t(it - c.ts.begin()) - 1];
}

}  // namespace trainscope::viewer
