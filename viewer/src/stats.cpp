// stats.cpp — see stats.h.
#include "trainscope/viewer/stats.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "trainscope/viewer/lod.h"

namespace trainscope::viewer {

namespace {

const char* kGroupNames[kStatGroups] = {"kernels", "ops", "ranges", "collectives", "memory", "api"};

struct Acc {
  StatRow row;
  std::vector<int64_t> durations;  // for the median and p99; freed once they are known
};

// The lower median and the nearest-rank p99 of `d` (reordered), into `r`.
void percentiles(std::vector<int64_t>& d, StatRow& r) {
  const size_t n = d.size();
  if (n == 0) return;
  const size_t med = (n - 1) / 2, p99 = (99 * n + 99) / 100 - 1;  // 0-based: (n+1)/2-th and ceil(.99n)-th
  std::nth_element(d.begin(), d.begin() + ptrdiff_t(med), d.end());
  r.median_ns = d[med];
  std::nth_element(d.begin() + ptrdiff_t(med), d.begin() + ptrdiff_t(p99), d.end());  // p99 >= med
  r.p99_ns = d[p99];
}

void add(StatRow& r, int64_t dur, int64_t self) {
  ++r.count;
  r.total_ns += dur;
  r.self_ns += self;
  r.min_ns = std::min(r.min_ns, dur);
  r.max_ns = std::max(r.max_ns, dur);
}

// One group at a time, so that the durations kept for the percentiles are one group's at most.
void computeGroup(const Trace& trace, StatGroup g, bool clip, int64_t begin, int64_t end,
                  const std::atomic<bool>* cancel, Statistics& s) {
  auto inside = [&](int64_t a, int64_t b) { return clip ? std::max<int64_t>(0, std::min(b, end) - std::max(a, begin)) : b - a; };
  std::unordered_map<uint64_t, size_t> slot;  // (rank, name) → accs
  std::vector<Acc> accs;
  for (const Track& t : trace.tracks) {
    for (size_t d = 0; d < t.lanes.size(); ++d) {
      if (cancel && cancel->load(std::memory_order_relaxed)) throw Cancelled();
      const auto& ev = t.lanes[d].events;
      const auto [i0, i1] = clip ? overlapping(t.lanes[d], begin, end) : std::pair<uint32_t, uint32_t>(0, uint32_t(ev.size()));
      if (i0 >= i1) continue;
      // Children: the next lane's events inside each event, found by walking both sorted lanes.
      const std::vector<Event>* kids = d + 1 < t.lanes.size() ? &t.lanes[d + 1].events : nullptr;
      size_t k = 0;
      if (kids)
        k = size_t(std::partition_point(kids->begin(), kids->end(), [&](const Event& c) { return c.start < ev[i0].start; }) -
                   kids->begin());
      for (uint32_t i = i0; i < i1; ++i) {
        const Event& e = ev[i];
        if (e.kind == EventKind::Step || groupOf(e.kind) != g) continue;
        int64_t held = 0;
        if (kids) {
          while (k < kids->size() && (*kids)[k].start < e.start) ++k;
          for (size_t j = k; j < kids->size() && (*kids)[j].start < e.end; ++j)
            if ((*kids)[j].end <= e.end) held += inside((*kids)[j].start, (*kids)[j].end);
        }
        const int64_t dur = inside(e.start, e.end);
        const uint64_t key = uint64_t(t.rank) << 32 ^ e.name;
        auto [it, fresh] = slot.emplace(key, accs.size());
        if (fresh) {
          accs.emplace_back();
          accs.back().row.group = g;
          accs.back().row.name = e.name;
          accs.back().row.rank = t.rank;
        }
        Acc& a = accs[it->second];
        add(a.row, dur, std::max<int64_t>(0, dur - held));
        a.durations.push_back(dur);
        ++s.events[size_t(g)];
      }
    }
  }
  // Per rank, then over all ranks: each name's rank rows merged, its durations pooled.
  std::map<uint32_t, std::vector<size_t>> by_name;
  for (size_t i = 0; i < accs.size(); ++i) by_name[accs[i].row.name].push_back(i);
  for (auto& [name, idx] : by_name) {
    StatRow all;
    all.group = g;
    all.name = name;
    std::vector<int64_t> pooled;
    for (size_t i : idx) {
      const StatRow& r = accs[i].row;
      all.count += r.count, all.total_ns += r.total_ns, all.self_ns += r.self_ns;
      all.min_ns = std::min(all.min_ns, r.min_ns), all.max_ns = std::max(all.max_ns, r.max_ns);
      pooled.insert(pooled.end(), accs[i].durations.begin(), accs[i].durations.end());
      percentiles(accs[i].durations, accs[i].row);
      std::vector<int64_t>().swap(accs[i].durations);
      s.rows.push_back(accs[i].row);
    }
    percentiles(pooled, all);
    s.rows.push_back(all);
  }
}

Statistics compute(const Trace& trace, bool clip, int64_t begin, int64_t end, const std::atomic<bool>* cancel) {
  Statistics s;
  s.in_range = clip;
  s.begin = begin;
  s.end = end;
  s.ranks = int64_t(trace.ranks.size());
  if (clip && end <= begin) return s;
  for (int g = 0; g < kStatGroups; ++g) computeGroup(trace, StatGroup(g), clip, begin, end, cancel, s);
  return s;
}

}  // namespace

const char* groupName(StatGroup g) { return kGroupNames[int(g)]; }

StatGroup groupOf(EventKind k) {
  switch (k) {
    case EventKind::Kernel:
    case EventKind::CommKernel: return StatGroup::Kernels;
    case EventKind::HostOp: return StatGroup::Ops;
    case EventKind::ApiCall: return StatGroup::Api;
    case EventKind::Memcpy:
    case EventKind::Memset: return StatGroup::Memory;
    case EventKind::Collective: return StatGroup::Collectives;
    default: return StatGroup::Ranges;
  }
}

double Statistics::shareOfRangePerRank(const StatRow& r) const {
  const double span = double(end - begin) * double(r.rank >= 0 ? 1 : std::max<int64_t>(1, ranks));
  return span > 0 ? double(r.total_ns) / span : 0;
}

Statistics computeStatistics(const Trace& trace, const std::atomic<bool>* cancel) {
  return compute(trace, false, 0, 0, cancel);
}

Statistics computeRangeStatistics(const Trace& trace, int64_t begin, int64_t end, const std::atomic<bool>* cancel) {
  return compute(trace, true, begin, end, cancel);
}

StatGroup defaultGroup(const Statistics& s) {
  for (StatGroup g : {StatGroup::Kernels, StatGroup::Ops, StatGroup::Ranges, StatGroup::Collectives, StatGroup::Memory,
                      StatGroup::Api})
    if (s.events[size_t(g)] > 0) return g;
  return StatGroup::Kernels;
}

std::string emptyHint(const Statistics& s, StatGroup g) {
  if (s.events[size_t(g)] > 0) return {};
  std::string why;
  switch (g) {
    case StatGroup::Kernels: why = "no kernels: a CPU run, or a GPU run traced below --trace-level all (CUPTI)"; break;
    case StatGroup::Ops: why = "no LibTorch ops: trace with --trace-level ops or all"; break;
    case StatGroup::Ranges: why = "no ranges"; break;
    case StatGroup::Collectives: why = "no collectives: a single-rank run, or one traced without --trace"; break;
    case StatGroup::Memory: why = "no memory copies or sets: a CPU run, or one traced below --trace-level all"; break;
    case StatGroup::Api: why = "no CUDA API calls: a CPU run, or one traced below --trace-level all"; break;
  }
  std::string out = (s.in_range ? "The selected range has " : "This run has ") + why + ".";
  std::string has;
  for (int h = 0; h < kStatGroups; ++h)
    if (s.events[size_t(h)] > 0) has += std::string(has.empty() ? "" : ", ") + groupName(StatGroup(h));
  out += has.empty() ? (s.in_range ? " Nothing else either: select a wider range." : "") : " See " + has + ".";
  return out;
}

std::vector<const StatRow*> statRows(const Statistics& s, const Trace& trace, StatGroup g, int64_t rank, StatSort by,
                                     bool descending) {
  std::vector<const StatRow*> out;
  for (const auto& r : s.rows)
    if (r.group == g && (rank == kEachRank ? r.rank >= 0 : r.rank == rank)) out.push_back(&r);
  auto key = [&](const StatRow* r) -> double {
    switch (by) {
      case StatSort::Total: return double(r->total_ns);
      case StatSort::Self: return double(r->self_ns);
      case StatSort::Count: return double(r->count);
      case StatSort::Mean: return r->mean_ns();
      case StatSort::Max: return double(r->max_ns);
      case StatSort::Min: return double(r->min_ns);
      case StatSort::Median: return double(r->median_ns);
      case StatSort::P99: return double(r->p99_ns);
      case StatSort::Rank: return double(r->rank);
      default: return 0;
    }
  };
  std::stable_sort(out.begin(), out.end(), [&](const StatRow* a, const StatRow* b) {
    if (by == StatSort::Name) {
      const auto& x = trace.names[a->name];
      const auto& y = trace.names[b->name];
      if (x != y) return descending ? y < x : x < y;
      return a->rank < b->rank;
    }
    const double x = key(a), y = key(b);
    if (x != y) return descending ? x > y : x < y;
    if (trace.names[a->name] != trace.names[b->name]) return trace.names[a->name] < trace.names[b->name];
    return a->rank < b->rank;
  });
  return out;
}

}  // namespace trainscope::viewer
