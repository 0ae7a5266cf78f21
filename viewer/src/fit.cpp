// fit.cpp — text and labels that fit (see fit.h).
#include "trainscope/viewer/fit.h"

#include <algorithm>

namespace trainscope::viewer {

std::string ellipsize(const std::string& s, float max_w, const TextWidth& width, bool* cut) {
  if (cut) *cut = false;
  if (width(s) <= max_w) return s;
  if (cut) *cut = true;
  if (width("...") > max_w) return {};
  // The longest prefix that fits, by bisection over byte lengths, then back to a character boundary.
  size_t lo = 0, hi = s.size();
  while (lo < hi) {
    const size_t mid = (lo + hi + 1) / 2;
    if (width(s.substr(0, mid) + "...") <= max_w) lo = mid;
    else hi = mid - 1;
  }
  while (lo > 0 && lo < s.size() && (static_cast<unsigned char>(s[lo]) & 0xC0) == 0x80) --lo;
  return s.substr(0, lo) + "...";
}

float tickLabelX(float tick_x, float label_w, float x0, float x1, float pad) {
  float x = tick_x + pad;
  if (x + label_w > x1) x = tick_x - pad - label_w;
  return std::max(x, x0);
}

std::vector<float> placeTickLabels(const std::vector<float>& xs, const std::vector<float>& widths, float x0, float x1,
                                   float pad) {
  std::vector<std::vector<LabelBox>> places(xs.size());
  for (size_t i = 0; i < xs.size() && i < widths.size(); ++i) {
    const float right = xs[i] + pad, left = xs[i] - pad - widths[i];
    if (right + widths[i] <= x1) places[i].push_back({right, 0, right + widths[i], 1});
    if (left >= x0) places[i].push_back({left, 0, left + widths[i], 1});
  }
  const std::vector<int> used = placeLabels(places);
  std::vector<float> out(xs.size(), -1);
  for (size_t i = 0; i < used.size(); ++i)
    if (used[i] >= 0) out[i] = places[i][size_t(used[i])].x0;
  return out;
}

float columnWidth(const std::string& header, const std::vector<std::string>& cells, const TextWidth& width, float pad) {
  float w = width(header);
  for (const std::string& c : cells) w = std::max(w, width(c));
  return w + pad;
}

std::vector<int> placeLabels(const std::vector<std::vector<LabelBox>>& placements) {
  std::vector<int> used(placements.size(), -1);
  std::vector<LabelBox> kept;
  for (size_t i = 0; i < placements.size(); ++i)
    for (size_t k = 0; k < placements[i].size(); ++k) {
      const LabelBox& b = placements[i][k];
      if (std::none_of(kept.begin(), kept.end(), [&](const LabelBox& o) { return b.meets(o); })) {
        kept.push_back(b);
        used[i] = int(k);
        break;
      }
    }
  return used;
}

std::vector<AxisLabel> histogramAxis(const std::vector<double>& edges, float w, const TextWidth& width,
                                     const std::function<std::string(double)>& format, size_t every) {
  std::vector<AxisLabel> out;
  if (edges.size() < 2 || !(w > 0)) return out;
  const size_t bins = edges.size() - 1;
  std::vector<size_t> order = {0, bins};  // the ends first: they bound the axis
  for (size_t k = every; k < bins; k += std::max<size_t>(1, every)) order.push_back(k);
  std::vector<AxisLabel> cand;
  std::vector<std::vector<LabelBox>> places;
  for (size_t k : order) {
    AxisLabel a;
    a.x = w * float(k) / float(bins);
    a.text = format(edges[k]);
    a.label_w = width(a.text);
    a.label_x0 = std::clamp(a.x - a.label_w / 2, 0.f, std::max(0.f, w - a.label_w));
    cand.push_back(a);
    places.push_back({{a.label_x0 - 4, 0, a.label_x0 + a.label_w + 4, 1}});  // 4 px apart at least
  }
  const std::vector<int> used = placeLabels(places);
  for (size_t i = 0; i < cand.size(); ++i)
    if (used[i] >= 0) out.push_back(cand[i]);
  std::sort(out.begin(), out.end(), [](const AxisLabel& a, const AxisLabel& b) { return a.x < b.x; });
  return out;
}

MemoryAxis memoryAxis(double data_max, double limit, double near) {
  MemoryAxis a;
  const double top = std::max(0.0, data_max);
  a.limit_shown = limit > 0 && (top <= 0 || limit <= near * top);
  a.hi = std::max(top, a.limit_shown ? limit : 0.0) * 1.1;
  if (!(a.hi > 0)) a.hi = 1;
  return a;
}

}  // namespace trainscope::viewer
