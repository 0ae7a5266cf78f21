// table.cpp — see table.h.
#include "trainscope/viewer/table.h"

#include <cmath>
#include <cstdio>

namespace trainscope::viewer {

std::string csvField(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string toCsv(const Table& t) {
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) out += (i ? "," : "") + csvField(cells[i]);
    out += "\n";
  };
  line(t.columns);
  for (const auto& r : t.rows) line(r);
  return out;
}

Table statsTable(const Statistics& s, const Trace& trace, StatGroup g, int64_t rank, StatSort by, bool descending) {
  Table t;
  t.columns = {"name", "rank", "count", "total_ns", "self_ns", "min_ns", "median_ns", "p99_ns", "max_ns", "mean_ns"};
  if (s.in_range) t.columns.push_back("share_of_range_per_rank");
  for (const StatRow* r : statRows(s, trace, g, rank, by, descending)) {
    char mean[32], share[32];
    std::snprintf(mean, sizeof mean, "%.1f", r->mean_ns());
    t.rows.push_back({trace.names[r->name], r->rank >= 0 ? std::to_string(r->rank) : "all", std::to_string(r->count),
                      std::to_string(r->total_ns), std::to_string(r->self_ns), std::to_string(r->min_ns),
                      std::to_string(r->median_ns), std::to_string(r->p99_ns), std::to_string(r->max_ns), mean});
    if (s.in_range) {
      std::snprintf(share, sizeof share, "%.6f", s.shareOfRangePerRank(*r));
      t.rows.back().push_back(share);
    }
  }
  return t;
}

Table rangeNamesTable(const Statistics& s, const Trace& trace, int64_t rank) {
  Table t;
  t.columns = {"table", "name", "rank", "count", "total_ns", "share_of_range_per_rank"};
  for (const StatRow* r : rangeNameRows(s, rank)) {
    char share[32];
    std::snprintf(share, sizeof share, "%.6f", s.shareOfRangePerRank(*r));
    t.rows.push_back({groupName(r->group), trace.names[r->name], r->rank >= 0 ? std::to_string(r->rank) : "all",
                      std::to_string(r->count), std::to_string(r->total_ns), share});
  }
  return t;
}

Table diffTable(const RunDiff& d) {
  Table t;
  t.columns = {"group", "name", "a_count", "b_count", "a_ns", "b_ns", "delta_ns"};
  for (const DiffRow& r : d.rows)
    t.rows.push_back({groupName(r.group), r.name, std::to_string(r.a_count), std::to_string(r.b_count),
                      std::to_string(r.a_ns), std::to_string(r.b_ns), std::to_string(r.delta_ns())});
  return t;
}

Table stepsTable(const std::vector<StepDiff>& steps) {
  Table t;
  t.columns = {"step", "a_ns", "b_ns", "delta_ns"};
  auto ns = [](double s) { return s > 0 ? std::to_string(std::llround(s * 1e9)) : std::string(); };
  for (const StepDiff& s : steps)
    t.rows.push_back({std::to_string(s.step), ns(s.a_s), ns(s.b_s),
                      s.a_s > 0 && s.b_s > 0 ? std::to_string(std::llround(s.b_s * 1e9) - std::llround(s.a_s * 1e9)) : ""});
  return t;
}

}  // namespace trainscope::viewer
