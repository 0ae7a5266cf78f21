// summary_intervals.cpp — the interval arithmetic and statistics the run summary is made of (their
// declarations: summary.h, and interval_minus.h for the summary's own a − b).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/rundb/summary.h"
#include "interval_minus.h"
#include "saturating.h"

namespace trainscope::rundb {

std::vector<Interval> unionOf(std::vector<Interval> v) {
  auto byBegin = [](const Interval& a, const Interval& b) { return a.begin < b.begin; };
  if (!std::is_sorted(v.begin(), v.end(), byBegin)) std::sort(v.begin(), v.end(), byBegin);  // traces mostly are
  std::vector<Interval> out;
  for (const auto& i : v) {
    if (i.end <= i.begin) continue;
    if (!out.empty() && i.begin <= out.back().end) out.back().end = std::max(out.back().end, i.end);
    else out.push_back(i);
  }
  return out;
}

int64_t coveredWithin(const std::vector<Interval>& m, int64_t b, int64_t e) {
  int64_t total = 0;
  auto it = std::lower_bound(m.begin(), m.end(), b, [](const Interval& i, int64_t t) { return i.end <= t; });
  for (; it != m.end() && it->begin < e; ++it)
    total = satAdd(total, satSub(std::min(e, it->end), std::max(b, it->begin)));
  return total;
}

std::vector<Interval> intersect(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::vector<Interval> out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].begin, b[j].begin), hi = std::min(a[i].end, b[j].end);
    if (lo < hi) out.push_back({lo, hi});
    (a[i].end < b[j].end) ? ++i : ++j;
  }
  return out;
}

// a − b, both sorted and non-overlapping (unionOf's).
std::vector<Interval> intervalMinus(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::vector<Interval> out;
  size_t j = 0;
  for (Interval i : a) {
    while (j < b.size() && b[j].end <= i.begin) ++j;
    for (size_t k = j; k < b.size() && b[k].begin < i.end; ++k) {
      if (b[k].begin > i.begin) out.push_back({i.begin, b[k].begin});
      i.begin = std::max(i.begin, b[k].end);
    }
    if (i.begin < i.end) out.push_back(i);
  }
  return out;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double idx = p * double(v.size() - 1);
  const size_t lo = size_t(std::floor(idx)), hi = size_t(std::ceil(idx));
  return v[lo] + (v[hi] - v[lo]) * (idx - double(lo));
}

int64_t spanNs(int64_t begin, int64_t end) { return satSub(end, begin); }

bool isCommKernel(const std::string& name) {
  return name.rfind("nccl", 0) == 0 || name.find("ncclDevKernel") != std::string::npos ||
         name.find("ncclKernel") != std::string::npos;
}

}  // namespace trainscope::rundb
