// model_counters.cpp — loadTrace's counters: the recorded ones (the counters table), and a MoE run's
// router load (expert_load) drawn as counters of its own (see model_internal.h).
#include <algorithm>
#include <cstdio>

#include "model_internal.h"
#include "trainscope/rundb/moe_load.h"
#include "trainscope/rundb/range_names.h"
#include "trainscope/viewer/lod.h"
#include "trainscope/viewer/view_state.h"

namespace trainscope::viewer::loader {

namespace {

// A counter's samples in time order (the table is read in storage order); ties keep that order.
void sortByTime(CounterSeries& c) {
  if (std::is_sorted(c.ts.begin(), c.ts.end())) return;
  std::vector<size_t> order(c.ts.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return c.ts[a] < c.ts[b]; });
  std::vector<int64_t> ts(order.size());
  std::vector<double> values(order.size());
  for (size_t i = 0; i < order.size(); ++i) ts[i] = c.ts[order[i]], values[i] = c.values[order[i]];
  c.ts = std::move(ts);
  c.values = std::move(values);
}

}  // namespace

// One pass over the table for every rank: a query per rank is O(ranks × rows).
CountersByRank readCounters(rundb::RunReader& reader, Names& names) {
  CountersByRank counters_of;
  reader.forEach<rundb::Counter>([&](const rundb::Counter& x) {
    CounterSeries& c = counters_of[x.rank][names.id(reader, x.name)];
    c.ts.push_back(x.ts_ns);
    c.values.push_back(x.value);
  });
  return counters_of;
}

// Two counters per rank, "moe: imbalance (max/mean)" and "moe: dropped %", one sample per step at
// the step's start (its `steps` row, on rank 0's clock in a traced run; else the earliest rank's):
// counters like the recorded ones, so that an untraced run shows them as well.
std::set<int64_t> addExpertLoad(rundb::RunReader& r, const std::vector<rundb::Step>& steps, Names& names,
                                CountersByRank& counters_of) {
  const std::vector<rundb::RankStepLoad> load = rundb::rankStepLoad(r.expertLoad());
  std::set<int64_t> ranks;
  if (load.empty()) return ranks;  // a dense run: no names, no tracks
  constexpr int64_t kEarliest = INT64_MIN;  // in place of a rank: the earliest rank's start of the step
  std::map<std::pair<int64_t, int64_t>, int64_t> start;  // (rank, step) → start_ns
  for (const rundb::Step& s : steps) {
    start[{s.rank, s.step}] = s.start_ns;
    auto [it, fresh] = start.emplace(std::make_pair(kEarliest, s.step), s.start_ns);
    if (!fresh) it->second = std::min(it->second, s.start_ns);
  }
  const uint32_t imbalance = names.text("moe: imbalance (max/mean)"), dropped = names.text("moe: dropped %");
  for (const rundb::RankStepLoad& l : load) {
    auto at = start.find({l.rank, l.step});
    if (at == start.end()) at = start.find({kEarliest, l.step});
    if (at == start.end()) continue;  // no step row to draw it at
    for (auto [name, value] : {std::pair{imbalance, l.imbalance}, std::pair{dropped, l.dropped_pct}}) {
      CounterSeries& c = counters_of[l.rank][name];
      c.ts.push_back(at->second);
      c.values.push_back(value);
    }
    ranks.insert(l.rank);
  }
  return ranks;
}

std::vector<Track> takeCounterTracks(int64_t rank, CountersByRank& counters_of, const Names& names) {
  std::vector<Track> counter_tracks;
  auto found = counters_of.find(rank);
  if (found == counters_of.end()) return counter_tracks;
  for (auto& [name, c] : found->second) {
    Track t;
    t.kind = TrackKind::Counter;
    t.rank = rank;
    t.label = names[name] == rundb::names::kMemoryCounter ? "memory" : names[name];
    t.counter = std::move(c);
    sortByTime(t.counter);
    buildPyramid(t.counter);
    if (t.label == "memory") counter_tracks.insert(counter_tracks.begin(), std::move(t));
    else counter_tracks.push_back(std::move(t));
  }
  counters_of.erase(found);
  return counter_tracks;
}

}  // namespace trainscope::viewer::loader

namespace trainscope::viewer {

std::string counterLabel(const Trace& t, const Track& counter) {
  char b[160];
  const double mx = counter.counter.max_value;
  if (counter.label != "memory") {
    std::snprintf(b, sizeof b, "max %.4g", mx);
    return b;
  }
  const auto source = t.meta.find("source");
  const int64_t skip = source != t.meta.end() && source->second == "import" ? 0 : 1;  // as rundb::summarize
  std::vector<rundb::Step> mine;
  for (const rundb::Step& s : t.steps)
    if (s.rank == counter.rank) mine.push_back(s);
  const rundb::RunSummary sum = rundb::summarizeSteps(mine, 1, "", std::nullopt, skip);
  if (sum.ranks.empty() || sum.ranks[0].peak_bytes <= 0) {
    std::snprintf(b, sizeof b, "sampled max %s", formatBytes(mx).c_str());
    return b;
  }
  std::snprintf(b, sizeof b, "peak %s (allocator, counted steps; sampled max %s)",
                formatBytes(double(sum.ranks[0].peak_bytes)).c_str(), formatBytes(mx).c_str());
  return b;
}

}  // namespace trainscope::viewer
