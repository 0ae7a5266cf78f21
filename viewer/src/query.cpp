// query.cpp — hit testing, flame parents, correlation, search, range totals, run comparison.
#include "trainscope/viewer/query.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "sort_runs.h"
#include "trainscope/rundb/summary.h"
#include "trainscope/viewer/lod.h"
#include "trainscope/viewer/names.h"

namespace trainscope::viewer {

std::optional<uint32_t> hitLane(const Lane& lane, int64_t t, int64_t tolerance) {
  const auto& ev = lane.events;
  if (ev.empty()) return std::nullopt;
  // First event ending after t - tolerance; candidates are it and the next one.
  auto it = std::partition_point(ev.begin(), ev.end(), [&](const Event& e) { return e.end < t - tolerance; });
  std::optional<uint32_t> best;
  int64_t best_d = INT64_MAX;
  for (auto c = it; c != ev.end() && c->start <= t + tolerance; ++c) {
    const int64_t d = t < c->start ? c->start - t : t > c->end ? t - c->end : 0;
    if (d < best_d) best_d = d, best = uint32_t(c - ev.begin());
    if (d == 0 || c->start >= t) break;  // later events only get farther
  }
  return best;
}

std::vector<EventRef> enclosing(const Trace& trace, const EventRef& r) {
  std::vector<EventRef> out;
  const Track& tr = trace.tracks[r.track];
  const Event& e = trace.event(r);
  for (uint32_t d = 0; d < r.lane; ++d) {
    const auto& ev = tr.lanes[d].events;
    auto it = std::partition_point(ev.begin(), ev.end(), [&](const Event& p) { return p.start <= e.start; });
    if (it == ev.begin()) continue;
    --it;
    if (it->start <= e.start && it->end >= e.end) out.push_back({r.track, d, uint32_t(it - ev.begin())});
  }
  return out;
}

namespace {
uint64_t corrKey(int64_t rank, int64_t corr) { return (uint64_t(rank) << 40) ^ uint64_t(corr); }
bool byKey(const CorrelationIndex::Entry& a, const CorrelationIndex::Entry& b) { return a.key < b.key; }
// The entries of `key`, in track order.
std::pair<std::vector<CorrelationIndex::Entry>::const_iterator, std::vector<CorrelationIndex::Entry>::const_iterator>
entriesOf(const std::vector<CorrelationIndex::Entry>& v, uint64_t key) {
  return std::equal_range(v.begin(), v.end(), CorrelationIndex::Entry{key, {}}, byKey);
}
}  // namespace

CorrelationIndex::CorrelationIndex(const Trace& trace) : trace_(trace) {
  size_t api = 0, device = 0;  // exact sizes: no doubling's slack in arrays of tens of millions
  for (const Track& t : trace.tracks)
    for (const Lane& l : t.lanes)
      for (size_t i = 0; i < l.correlation.size(); ++i)
        if (l.correlation[i] >= 0) (l.events[i].kind == EventKind::ApiCall ? api : device) += 1;
  api_.reserve(api);
  device_.reserve(device);
  for (uint32_t ti = 0; ti < trace.tracks.size(); ++ti) {
    const Track& t = trace.tracks[ti];
    for (uint32_t li = 0; li < t.lanes.size(); ++li) {
      const Lane& l = t.lanes[li];
      if (l.correlation.empty()) continue;
      for (uint32_t i = 0; i < l.events.size(); ++i) {
        const int64_t c = l.correlation[i];
        if (c < 0) continue;  // no id: never joined (a cross join of unknowns is not a launch)
        (l.events[i].kind == EventKind::ApiCall ? api_ : device_).push_back({corrKey(t.rank, c), EventRef{ti, li, i}});
      }
    }
  }
  // Each lane's ids mostly rise with time: a few runs to merge. Stable: ties keep track order.
  sortRuns(api_, byKey);
  sortRuns(device_, byKey);
}

std::optional<EventRef> CorrelationIndex::launchOf(const EventRef& r) const {
  const int64_t c = trace_.correlation(r);
  if (c < 0) return std::nullopt;
  auto [b, e] = entriesOf(api_, corrKey(trace_.tracks[r.track].rank, c));
  if (b == e) return std::nullopt;
  return b->ref;
}

std::vector<EventRef> CorrelationIndex::launchedBy(const EventRef& r) const {
  const int64_t c = trace_.correlation(r);
  if (c < 0) return {};
  std::vector<EventRef> out;
  for (auto [b, e] = entriesOf(device_, corrKey(trace_.tracks[r.track].rank, c)); b != e; ++b) out.push_back(b->ref);
  return out;
}

namespace {
std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
}  // namespace

SearchResult search(const Trace& trace, const std::string& needle, size_t limit) {
  SearchResult res;
  res.needle = needle;
  if (needle.empty()) return res;
  const std::string n = lower(needle);
  std::vector<char> hit(trace.names.size());
  bool any = false;
  // Names as recorded, and mangled C++ names also as the viewer shows them (names.h).
  for (size_t i = 0; i < trace.names.size(); ++i) {
    const std::string& name = trace.names[i];
    hit[i] = lower(name).find(n) != std::string::npos ||
             (name.compare(0, 2, "_Z") == 0 && lower(demangle(name)).find(n) != std::string::npos);
    any |= bool(hit[i]);
  }
  if (!any) return res;
  for (uint32_t ti = 0; ti < trace.tracks.size(); ++ti) {
    const Track& t = trace.tracks[ti];
    for (uint32_t li = 0; li < t.lanes.size(); ++li) {
      const auto& ev = t.lanes[li].events;
      for (uint32_t i = 0; i < ev.size(); ++i) {
        if (!hit[ev[i].name]) continue;
        if (res.matches.size() >= limit) {
          res.truncated = true;
          break;
        }
        res.matches.push_back({ti, li, i});
      }
    }
  }
  std::sort(res.matches.begin(), res.matches.end(), [&](const EventRef& a, const EventRef& b) {
    const Event& x = trace.event(a);
    const Event& y = trace.event(b);
    if (x.start != y.start) return x.start < y.start;
    return a.track != b.track ? a.track < b.track : a.lane < b.lane;
  });
  return res;
}

int64_t nextMatch(const Trace& trace, const SearchResult& s, int64_t t, int dir) {
  const auto& m = s.matches;
  if (m.empty()) return -1;
  auto after = std::partition_point(m.begin(), m.end(), [&](const EventRef& r) { return trace.event(r).start <= t; });
  if (dir > 0) return after == m.end() ? 0 : int64_t(after - m.begin());
  auto before = std::partition_point(m.begin(), m.end(), [&](const EventRef& r) { return trace.event(r).start < t; });
  return before == m.begin() ? int64_t(m.size()) - 1 : int64_t(before - m.begin()) - 1;
}

std::array<KindTotal, kEventKinds> rangeTotals(const Trace& trace, int64_t begin, int64_t end, int64_t rank) {
  std::array<KindTotal, kEventKinds> out{};
  if (end <= begin) return out;
  for (const RankGroup& g : trace.ranks) {
    if (rank >= 0 && g.rank != rank) continue;
    std::array<std::vector<rundb::Interval>, kEventKinds> busy;  // this rank's, over all its tracks
    for (size_t ti : g.tracks)
      for (const Lane& l : trace.tracks[ti].lanes) {
        const auto [i0, i1] = overlapping(l, begin, end);
        for (uint32_t i = i0; i < i1; ++i) {
          const Event& e = l.events[i];
          ++out[int(e.kind)].count;
          busy[int(e.kind)].push_back({std::max(e.start, begin), std::min(e.end, end)});
        }
      }
    for (int k = 0; k < kEventKinds; ++k) {
      if (busy[k].empty()) continue;
      const int64_t b = rundb::coveredWithin(rundb::unionOf(std::move(busy[k])), begin, end);
      KindTotal& t = out[k];
      t.busy_ns += b;
      ++t.ranks;
      if (b > t.max_rank_busy_ns || t.max_rank < 0) t.max_rank_busy_ns = b, t.max_rank = g.rank;
    }
  }
  return out;
}

namespace {
std::map<int64_t, double> stepTimes(const Trace& t) {
  std::map<int64_t, double> out;  // the slowest rank's
  for (const auto& s : t.steps) out[s.step] = std::max(out[s.step], double(s.step_time_ns) * 1e-9);
  return out;
}
}  // namespace

std::vector<StepDiff> compareSteps(const Trace& a, const Trace& b) {
  const auto ta = stepTimes(a), tb = stepTimes(b);
  std::map<int64_t, StepDiff> all;
  for (auto [k, v] : ta) all[k].a_s = v, all[k].step = k;
  for (auto [k, v] : tb) all[k].b_s = v, all[k].step = k;
  std::vector<StepDiff> out;
  for (auto& [k, d] : all) out.push_back(d);
  return out;
}

int64_t alignmentOffset(const Trace& a, const Trace& b, int64_t step) {
  const auto sa = a.stepStart(step), sb = b.stepStart(step);
  if (sa && sb) return *sa - *sb;
  return a.begin - b.begin;
}

}  // namespace trainscope::viewer
