// diff.cpp — see diff.h.
#include "trainscope/viewer/diff.h"

#include <algorithm>
#include <map>
#include <set>

namespace trainscope::viewer {

namespace {

// "steps 1–20" or "no steps": what a run has, for the message when a step is missing.
std::string stepsOf(const Trace& t) {
  std::set<int64_t> s;
  for (const auto& st : t.steps) s.insert(st.step);
  if (s.empty()) return "no steps";
  return "steps " + std::to_string(*s.begin()) + "-" + std::to_string(*s.rbegin());
}

}  // namespace

RunDiff diffRuns(const Trace& a, const Trace& b, std::optional<int64_t> step, const std::atomic<bool>* cancel) {
  RunDiff out;
  out.step = step;
  Statistics sa, sb;
  if (step) {
    const auto wa = a.stepWindow(*step), wb = b.stepWindow(*step);
    if (!wa || !wb) {
      out.error = "step " + std::to_string(*step) + " is not in run " + (!wa ? "A" : "B") + " (it has " +
                  stepsOf(!wa ? a : b) + "): pick a step both runs have, or compare the whole runs";
      return out;
    }
    out.a_window = *wa, out.b_window = *wb;
    sa = computeRangeStatistics(a, wa->first, wa->second, cancel);
    sb = computeRangeStatistics(b, wb->first, wb->second, cancel);
  } else {
    out.a_window = {a.begin, a.end}, out.b_window = {b.begin, b.end};
    sa = computeStatistics(a, cancel);
    sb = computeStatistics(b, cancel);
  }
  out.rows = diffStatistics(sa, a, sb, b);
  return out;
}

std::vector<DiffRow> diffStatistics(const Statistics& sa, const Trace& a, const Statistics& sb, const Trace& b) {
  std::map<std::pair<int, std::string>, DiffRow> rows;
  auto take = [&](const Statistics& s, const Trace& t, bool is_b) {
    for (const StatRow& r : s.rows) {
      if (r.rank != kAllRanks) continue;
      DiffRow& d = rows[{int(r.group), t.names[r.name]}];
      d.group = r.group;
      d.name = t.names[r.name];
      (is_b ? d.b_count : d.a_count) += r.count;
      (is_b ? d.b_ns : d.a_ns) += r.total_ns;
    }
  };
  take(sa, a, false);
  take(sb, b, true);
  std::vector<DiffRow> out;
  out.reserve(rows.size());
  for (auto& [k, d] : rows) out.push_back(std::move(d));
  std::stable_sort(out.begin(), out.end(), [](const DiffRow& x, const DiffRow& y) {
    const int64_t dx = std::abs(x.delta_ns()), dy = std::abs(y.delta_ns());
    if (dx != dy) return dx > dy;
    return std::abs(x.delta_count()) > std::abs(y.delta_count());  // then by the map's (group, name) order
  });
  return out;
}

}  // namespace trainscope::viewer
