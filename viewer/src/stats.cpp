// stats.cpp — see stats.h.
#include "trainscope/viewer/stats.h"

#include <algorithm>
#include <cmath>
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

// Rows of one group from its accumulators: per rank, then over all ranks (each name's rank rows
// merged, its durations pooled). The durations are used up.
void finishGroup(std::vector<Acc>& accs, StatGroup g, std::vector<StatRow>& out) {
  std::map<uint32_t, std::vector<size_t>> by_name;
  for (size_t i = 0; i < accs.size(); ++i) by_name[accs[i].row.name].push_back(i);
  for (auto& [name, idx] : by_name) {
    StatRow all;
    all.group = g;
    all.name = name;
    std::vector<int64_t> pooled;
    for (size_t i : idx) {
      StatRow r = accs[i].row;
      all.count += r.count, all.total_ns += r.total_ns, all.self_ns += r.self_ns;
      all.min_ns = std::min(all.min_ns, r.min_ns), all.max_ns = std::max(all.max_ns, r.max_ns);
      pooled.insert(pooled.end(), accs[i].durations.begin(), accs[i].durations.end());
      percentiles(accs[i].durations, r);
      std::vector<int64_t>().swap(accs[i].durations);
      out.push_back(r);
    }
    percentiles(pooled, all);
    out.push_back(all);
  }
}

}  // namespace

struct StatisticsPass::Group {
  std::unordered_map<uint64_t, size_t> slot;  // (rank, name) → accs
  std::vector<Acc> accs;
};

StatisticsPass::StatisticsPass(const Trace& trace, bool clip, int64_t begin, int64_t end)
    : trace_(trace), clip_(clip), begin_(begin), end_(end), group_(std::make_unique<Group>()) {
  done_.in_range = clip;
  done_.begin = begin;
  done_.end = end;
  done_.ranks = int64_t(trace.ranks.size());
  for (const Track& t : trace.tracks)
    for (const Lane& l : t.lanes) total_ += int64_t(l.events.size());
  total_ *= kStatGroups;
  if (clip && end <= begin) g_ = kStatGroups;  // an empty range: nothing to count
}

StatisticsPass::~StatisticsPass() = default;

double StatisticsPass::fraction() const {
  return done() || total_ == 0 ? 1.0 : std::min(1.0, double(visited_) / double(total_));
}

// One lane of the current group: each event of the group counted with its self time (its duration
// less that of the next lane's events it holds, found by walking both sorted lanes).
void StatisticsPass::countLane(const Track& t, size_t d) {
  const StatGroup g = StatGroup(g_);
  auto inside = [&](int64_t a, int64_t b) {
    return clip_ ? std::max<int64_t>(0, std::min(b, end_) - std::max(a, begin_)) : b - a;
  };
  const auto& ev = t.lanes[d].events;
  visited_ += int64_t(ev.size());
  const auto [i0, i1] = clip_ ? overlapping(t.lanes[d], begin_, end_) : std::pair<uint32_t, uint32_t>(0, uint32_t(ev.size()));
  if (i0 >= i1) return;
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
    auto [it, fresh] = group_->slot.emplace(key, group_->accs.size());
    if (fresh) {
      group_->accs.emplace_back();
      group_->accs.back().row.group = g;
      group_->accs.back().row.name = e.name;
      group_->accs.back().row.rank = t.rank;
    }
    Acc& a = group_->accs[it->second];
    add(a.row, dur, std::max<int64_t>(0, dur - held));
    a.durations.push_back(dur);
    ++done_.events[size_t(g)];
  }
}

bool StatisticsPass::run(int64_t budget, const std::atomic<bool>* cancel) {
  const int64_t stop = visited_ + budget;
  while (g_ < kStatGroups) {
    if (track_ >= trace_.tracks.size()) {  // the group is complete: its rows are final
      finishGroup(group_->accs, StatGroup(g_), done_.rows);
      group_ = std::make_unique<Group>();
      ++g_, track_ = 0, lane_ = 0;
      continue;
    }
    const Track& t = trace_.tracks[track_];
    if (lane_ >= t.lanes.size()) {
      ++track_, lane_ = 0;
      continue;
    }
    if (visited_ >= stop) return false;
    if (cancel && cancel->load(std::memory_order_relaxed)) throw Cancelled();
    countLane(t, lane_++);
  }
  return true;
}

Statistics StatisticsPass::snapshot() const {
  Statistics s = done_;
  if (!done()) {
    s.complete = false;
    s.fraction = fraction();
    s.groups_done = g_;
    std::vector<Acc> seen = group_->accs;  // the pass goes on with its own
    finishGroup(seen, StatGroup(g_), s.rows);
  }
  return s;
}

namespace {

Statistics compute(const Trace& trace, bool clip, int64_t begin, int64_t end, const std::atomic<bool>* cancel) {
  StatisticsPass pass(trace, clip, begin, end);
  pass.run(INT64_MAX / 2, cancel);
  return pass.snapshot();
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

int64_t Histogram::total() const {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  return n;
}

Histogram durationHistogram(const Trace& trace, const Statistics& scope, StatGroup g, uint32_t name, int64_t rank,
                            int bins) {
  const bool clip = scope.in_range;
  std::vector<int64_t> d;
  for (const Track& t : trace.tracks) {
    if (rank >= 0 && t.rank != rank) continue;
    for (const Lane& lane : t.lanes) {
      const auto [i0, i1] = clip ? overlapping(lane, scope.begin, scope.end)
                                 : std::pair<uint32_t, uint32_t>(0, uint32_t(lane.events.size()));
      for (uint32_t i = i0; i < i1; ++i) {
        const Event& e = lane.events[i];
        if (e.name != name || e.kind == EventKind::Step || groupOf(e.kind) != g) continue;
        d.push_back(clip ? std::max<int64_t>(0, std::min(e.end, scope.end) - std::max(e.start, scope.begin)) : e.duration());
      }
    }
  }
  Histogram h;
  if (d.empty() || bins < 1) return h;
  const auto [mn, mx] = std::minmax_element(d.begin(), d.end());
  const double lo = double(std::max<int64_t>(1, *mn)), hi = std::max(lo, double(*mx));
  if (hi == lo) bins = 1;  // all one duration: one bin [lo, lo]
  h.edges.resize(size_t(bins) + 1);
  for (int k = 0; k <= bins; ++k) h.edges[size_t(k)] = lo * std::pow(hi / lo, double(k) / bins);
  h.edges.back() = hi;  // exactly, whatever pow rounds to
  h.counts.assign(size_t(bins), 0);
  for (int64_t x : d) {
    const auto at = std::upper_bound(h.edges.begin(), h.edges.end(), double(x)) - h.edges.begin() - 1;
    ++h.counts[size_t(std::clamp<ptrdiff_t>(at, 0, bins - 1))];
  }
  return h;
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

std::vector<const StatRow*> rangeNameRows(const Statistics& s, int64_t rank) {
  std::vector<const StatRow*> rows;
  for (const auto& r : s.rows)
    if (rank == kEachRank ? r.rank >= 0 : r.rank == rank) rows.push_back(&r);
  std::stable_sort(rows.begin(), rows.end(), [](const StatRow* a, const StatRow* b) { return a->total_ns > b->total_ns; });
  return rows;
}

}  // namespace trainscope::viewer
