// tracks.cpp — track control, the row layout and run alignment (see tracks.h).
#include "trainscope/viewer/tracks.h"

#include <algorithm>
#include <cstdio>

#include "trainscope/viewer/lod.h"

namespace trainscope::viewer {

bool TrackControl::isPinned(const TrackKey& k) const {
  return std::find(pinned.begin(), pinned.end(), k) != pinned.end();
}

void TrackControl::setCollapsed(int64_t rank, bool on) {
  if (on) collapsed.insert(rank);
  else collapsed.erase(rank);
  ++version;
}

void TrackControl::setHidden(const TrackKey& k, bool on) {
  if (on) hidden.insert(k);
  else hidden.erase(k);
  ++version;
}

void TrackControl::setPinned(const TrackKey& k, bool on) {
  auto it = std::find(pinned.begin(), pinned.end(), k);
  if (on && it == pinned.end()) pinned.push_back(k);
  if (!on && it != pinned.end()) pinned.erase(it);
  ++version;
}

void TrackControl::showAll(int64_t rank) {
  for (auto it = hidden.begin(); it != hidden.end();) it = it->rank == rank ? hidden.erase(it) : std::next(it);
  ++version;
}

std::vector<size_t> TrackControl::ordered(const Trace& trace, const RankGroup& g) const {
  auto o = order.find(g.rank);
  if (o == order.end()) return g.tracks;
  // The user's order first (labels the trace has), then the tracks it does not name, as loaded.
  std::vector<size_t> out;
  std::vector<bool> taken(g.tracks.size(), false);
  for (const std::string& label : o->second)
    for (size_t i = 0; i < g.tracks.size(); ++i)
      if (!taken[i] && trace.tracks[g.tracks[i]].label == label) {
        out.push_back(g.tracks[i]);
        taken[i] = true;
        break;
      }
  for (size_t i = 0; i < g.tracks.size(); ++i)
    if (!taken[i]) out.push_back(g.tracks[i]);
  return out;
}

bool TrackControl::move(const Trace& trace, const TrackKey& k, int delta) {
  for (const RankGroup& g : trace.ranks) {
    if (g.rank != k.rank) continue;
    std::vector<size_t> cur = ordered(trace, g);
    auto it = std::find_if(cur.begin(), cur.end(), [&](size_t ti) { return trace.tracks[ti].label == k.label; });
    if (it == cur.end()) return false;
    const long from = long(it - cur.begin());
    const long to = std::clamp(from + long(delta), 0L, long(cur.size()) - 1);
    const size_t ti = cur[size_t(from)];
    cur.erase(cur.begin() + from);
    cur.insert(cur.begin() + to, ti);
    std::vector<std::string>& labels = order[k.rank];
    labels.clear();
    for (size_t t : cur) labels.push_back(trace.tracks[t].label);
    ++version;
    return true;
  }
  return false;
}

size_t TrackLayout::firstBelow(float y) const {
  return size_t(std::partition_point(rows.begin(), rows.end(), [y](const LayoutRow& r) { return r.y1() <= y; }) -
                rows.begin());
}

const LayoutRow* TrackLayout::rowAt(float y, bool in_pinned) const {
  const auto& v = in_pinned ? pinned : rows;
  auto it = std::partition_point(v.begin(), v.end(), [y](const LayoutRow& r) { return r.y1() <= y; });
  return it != v.end() && it->y0 <= y ? &*it : nullptr;
}

bool hasEventsIn(const Track& t, int64_t begin, int64_t end) {
  if (t.kind == TrackKind::Counter)  // a counter holds its value from its first sample on
    return !t.counter.ts.empty() && t.counter.ts.front() < end;
  return fittedLanes(t, begin, end) > 0;
}

uint32_t fittedLanes(const Track& t, int64_t begin, int64_t end) {
  // Deepest first: the first lane from the bottom with an event in the window is the depth.
  for (size_t li = t.lanes.size(); li-- > 0;) {
    const auto& ev = t.lanes[li].events;
    if (ev.empty() || ev.front().start >= end || ev.back().end <= begin) continue;  // O(1) for most
    const auto [a, b] = overlapping(t.lanes[li], begin, end);
    if (a < b) return uint32_t(li + 1);
  }
  return 0;
}

namespace {

// Rows of one rank group of one run, appended at y; returns the new y.
float layoutGroup(const LayoutRun& run, size_t doc, size_t gi, const TrackControl& c, const LayoutMetrics& m,
                  std::vector<LayoutRow>& out, float y) {
  const Trace& tr = *run.trace;
  const RankGroup& g = tr.ranks[gi];
  LayoutRow head{RowKind::Header, doc, gi, 0, 0, y, c.compact ? m.compact_h : m.header_h, c.isCollapsed(g.rank)};
  head.compact = c.compact;
  out.push_back(head);
  y += head.h;
  if (head.collapsed || head.compact) return y;
  // Most frames have nothing hidden, pinned or moved: then no key is built and no order copied (a
  // 20,000-rank trace lays out every frame it is zoomed in).
  const bool keyed = !c.hidden.empty() || !c.pinned.empty();
  std::vector<size_t> moved;
  if (c.order.count(g.rank)) moved = c.ordered(tr, g);
  for (size_t ti : c.order.count(g.rank) ? moved : g.tracks) {
    const Track& t = tr.tracks[ti];
    if (t.events() == 0) continue;
    if (keyed) {
      const TrackKey key{g.rank, t.label};
      if (c.hidden.count(key) || c.isPinned(key)) continue;
    }
    LayoutRow r{RowKind::Track, doc, gi, ti, 0, y, 0, false};
    if (t.kind == TrackKind::Counter) {
      if (c.hide_empty_in_window && !hasEventsIn(t, run.begin, run.end)) continue;
      r.h = m.counter_h;
    } else {
      r.lanes = fittedLanes(t, run.begin, run.end);
      if (r.lanes == 0 && c.hide_empty_in_window) continue;
      r.lanes = std::max(1u, r.lanes);
      r.h = m.lane_h * float(r.lanes);
      if (t.kind == TrackKind::Stream) r.h += r.util_h = m.util_h;
    }
    out.push_back(r);
    y += r.h;
  }
  return y;
}

// The pinned band: each pinned track of each run that has it, in pin order.
void layoutPinned(const std::vector<LayoutRun>& runs, const TrackControl& c, const LayoutMetrics& m, TrackLayout& l) {
  float y = 0;
  for (const TrackKey& k : c.pinned)
    for (size_t doc = 0; doc < runs.size(); ++doc) {
      const Trace& tr = *runs[doc].trace;
      for (size_t gi = 0; gi < tr.ranks.size(); ++gi) {
        if (tr.ranks[gi].rank != k.rank) continue;
        for (size_t ti : tr.ranks[gi].tracks) {
          const Track& t = tr.tracks[ti];
          if (t.label != k.label || t.events() == 0) continue;
          LayoutRow r{RowKind::Track, doc, gi, ti, 0, y, m.counter_h, false};
          if (t.kind != TrackKind::Counter) {
            r.lanes = std::max(1u, fittedLanes(t, runs[doc].begin, runs[doc].end));
            r.h = m.lane_h * float(r.lanes);
            if (t.kind == TrackKind::Stream) r.h += r.util_h = m.util_h;
          }
          l.pinned.push_back(r);
          y += r.h;
        }
      }
    }
  l.pinned_h = y;
}

}  // namespace

TrackLayout layoutTracks(const std::vector<LayoutRun>& runs, const TrackControl& c, const LayoutMetrics& m,
                         const TrackLayout* previous, LayoutBand band) {
  TrackLayout l;
  l.control_version = c.version;
  layoutPinned(runs, c, m, l);
  // Ranks in order over all runs; a rank's group of each run that has it, A's first.
  std::vector<std::vector<std::pair<int64_t, size_t>>> by_rank(runs.size());  // (rank, group) sorted
  size_t groups = 0;
  for (size_t doc = 0; doc < runs.size(); ++doc) {
    for (size_t gi = 0; gi < runs[doc].trace->ranks.size(); ++gi) by_rank[doc].push_back({runs[doc].trace->ranks[gi].rank, gi});
    std::sort(by_rank[doc].begin(), by_rank[doc].end());
    groups += by_rank[doc].size();
  }
  const bool reuse = previous && previous->control_version == c.version && previous->group_h.size() == groups;
  std::vector<size_t> next(runs.size(), 0);
  float y = 0;
  for (;;) {
    std::optional<int64_t> rank;  // the smallest rank not yet laid out in any run
    for (size_t doc = 0; doc < runs.size(); ++doc)
      if (next[doc] < by_rank[doc].size() && (!rank || by_rank[doc][next[doc]].first < *rank))
        rank = by_rank[doc][next[doc]].first;
    if (!rank) break;
    for (size_t doc = 0; doc < runs.size(); ++doc)
      while (next[doc] < by_rank[doc].size() && by_rank[doc][next[doc]].first == *rank) {
        const size_t gi = by_rank[doc][next[doc]++].second;
        const size_t k = l.group_h.size();
        l.group_of.push_back({doc, gi});
        if (reuse && (y + previous->group_h[k] < band.top || y >= band.bottom)) {
          l.group_h.push_back(previous->group_h[k]);  // off the band: as last laid out, no rows
        } else {
          l.group_h.push_back(layoutGroup(runs[doc], doc, gi, c, m, l.rows, y) - y);
        }
        y += l.group_h.back();
      }
  }
  l.total_h = y;
  return l;
}

std::optional<TrackPlace> placeOf(const TrackLayout& l, size_t doc, size_t track, int64_t rank, const Trace& trace) {
  for (const LayoutRow& r : l.pinned)
    if (r.doc == doc && r.track == track) return TrackPlace{r.y0, r.y1(), true, true};
  for (const LayoutRow& r : l.rows)
    if (r.kind == RowKind::Track && r.doc == doc && r.track == track) return TrackPlace{r.y0, r.y1(), true, false};
  float y = 0;
  for (size_t k = 0; k < l.group_of.size() && k < l.group_h.size(); ++k) {
    const auto [gdoc, gi] = l.group_of[k];
    if (gdoc == doc && gi < trace.ranks.size() && trace.ranks[gi].rank == rank) {
      // Laid out, yet the track has no row: it takes none (hidden, collapsed, empty).
      for (const LayoutRow& r : l.rows)
        if (r.doc == doc && r.group == gi) return std::nullopt;
      return TrackPlace{y, y + l.group_h[k], false, false};
    }
    y += l.group_h[k];
  }
  return std::nullopt;
}

float scrollToShow(float scroll, float view_h, float y0, float y1, float total_h) {
  if (y0 >= scroll && std::min(y1, y0 + view_h) <= scroll + view_h) return scroll;
  return std::max(0.f, std::min(y0 - view_h / 3, total_h - view_h));
}

Alignment alignAtStep(const Trace& a, const Trace& b, int64_t step) {
  Alignment al;
  al.step = step;
  al.offset = a.begin - b.begin;  // the starts, when the step cannot line them up
  const auto sa = a.stepStart(step), sb = b.stepStart(step);
  if (sa && sb) {
    al.ok = true;
    al.offset = *sa - *sb;
    return al;
  }
  auto lacks = [step](const char* run, const Trace& t) {
    if (t.steps.empty())
      return std::string("run ") + run + " has no steps (an imported profiler trace records none)";
    int64_t lo = t.steps.front().step, hi = lo;
    for (const auto& s : t.steps) lo = std::min(lo, s.step), hi = std::max(hi, s.step);
    char buf[160];
    if (lo == hi)
      std::snprintf(buf, sizeof buf, "run %s has no step %lld (its only step is %lld)", run, (long long)step, (long long)lo);
    else
      std::snprintf(buf, sizeof buf, "run %s has no step %lld (its steps are %lld-%lld)", run, (long long)step,
                    (long long)lo, (long long)hi);
    return std::string(buf);
  };
  std::string why = !sa ? lacks("A", a) : "";
  if (!sb) why += (why.empty() ? "" : "; ") + lacks("B", b);
  al.message = "Cannot align run B with run A at step " + std::to_string(step) + ": " + why +
               ". B is drawn from its start at A's start.";
  return al;
}

std::optional<int64_t> neighbourStep(const Trace& trace, int64_t t, int dir) {
  if (trace.steps.empty()) return std::nullopt;
  int64_t lo = trace.steps.front().step, hi = lo, cur = lo - 1;
  for (const auto& s : trace.steps) {
    lo = std::min(lo, s.step), hi = std::max(hi, s.step);
    if (s.start_ns <= t) cur = std::max(cur, s.step);
  }
  return std::clamp(cur + (dir > 0 ? 1 : -1), lo, hi);
}

}  // namespace trainscope::viewer
