// lod.cpp — folding of small events (see lod.h for the rule and why the levels give the same answer
// as a brute-force pass).
#include "trainscope/viewer/lod.h"

#include <algorithm>

#include "trainscope/viewer/query.h"

namespace trainscope::viewer {

namespace {

// Folds `items` (sorted, non-overlapping) at threshold `t`. An item is foldable when it already is
// a block (every event in it is small at a lower threshold) or a single event narrower than t.
template <class Emit>
void fold(const LodItem* items, size_t n, int64_t t, Emit&& emit) {
  if (n == 0) return;
  LodItem cur = items[0];
  auto foldable = [t](const LodItem& it) { return it.last - it.first > 1 || it.end - it.start < t; };
  bool cur_foldable = foldable(cur);
  for (size_t i = 1; i < n; ++i) {
    const LodItem& it = items[i];
    const bool f = foldable(it);
    if (cur_foldable && f && it.start - cur.end < t) {
      cur.end = std::max(cur.end, it.end);
      cur.last = it.last;
    } else {
      emit(cur);
      cur = it;
      cur_foldable = f;
    }
  }
  emit(cur);
}

}  // namespace

void buildLevels(Lane& lane) {
  lane.levels.clear();
  const auto& ev = lane.events;
  lane.busy_prefix.assign(1, 0);
  lane.busy_prefix.reserve(ev.size() / kBusyStride + 1);
  int64_t sum = 0;
  for (size_t i = 0; i < ev.size(); ++i) {
    sum += ev[i].duration();
    if ((i + 1) % kBusyStride == 0) lane.busy_prefix.push_back(sum);
  }
  // NCCL kernels' own prefix, only for a lane that holds any (most lanes hold none).
  lane.comm_prefix.clear();
  if (std::any_of(ev.begin(), ev.end(), [](const Event& e) { return e.kind == EventKind::CommKernel; })) {
    lane.comm_prefix.assign(1, 0);
    lane.comm_prefix.reserve(ev.size() / kBusyStride + 1);
    int64_t comm = 0;
    for (size_t i = 0; i < ev.size(); ++i) {
      if (ev[i].kind == EventKind::CommKernel) comm += ev[i].duration();
      if ((i + 1) % kBusyStride == 0) lane.comm_prefix.push_back(comm);
    }
  }
  if (ev.size() < 2) return;
  std::vector<LodItem> prev(ev.size());
  for (size_t i = 0; i < ev.size(); ++i) prev[i] = {ev[i].start, ev[i].end, uint32_t(i), uint32_t(i + 1)};
  size_t stored_size = ev.size();
  int64_t t = kLodBaseThreshold;
  for (int k = 0; k < kLodMaxLevels && prev.size() > 1; ++k, t *= 4) {
    std::vector<LodItem> next;
    next.reserve(prev.size() / 2 + 1);
    fold(prev.data(), prev.size(), t, [&](const LodItem& it) { next.push_back(it); });
    // Keep a level only when it folds at least 2:1 against the last kept one: a query at a
    // threshold between kept levels walks the finer one, at most twice the items.
    if (next.size() * 2 <= stored_size) {
      stored_size = next.size();
      next.shrink_to_fit();
      lane.levels.push_back({t, next});
    }
    prev.swap(next);
  }
}

int64_t busyBetween(const Lane& lane, uint32_t first, uint32_t last) {
  const auto& ev = lane.events;
  auto prefix = [&](uint32_t i) {  // summed durations of events [0, i)
    const uint32_t k = i / kBusyStride;
    int64_t s = k < lane.busy_prefix.size() ? lane.busy_prefix[k] : 0;
    uint32_t j = k < lane.busy_prefix.size() ? k * kBusyStride : 0;
    for (; j < i; ++j) s += ev[j].duration();
    return s;
  };
  return last > first ? prefix(last) - prefix(first) : 0;
}

int64_t commBusyIn(const Lane& lane, int64_t begin, int64_t end) {
  if (lane.comm_prefix.empty()) return 0;
  const auto [first, last] = overlapping(lane, begin, end);
  if (first >= last) return 0;
  const auto& ev = lane.events;
  auto prefix = [&](uint32_t i) {  // the NCCL kernels' summed durations among events [0, i)
    const uint32_t k = std::min<uint32_t>(i / kBusyStride, uint32_t(lane.comm_prefix.size() - 1));
    int64_t s = lane.comm_prefix[k];
    for (uint32_t j = k * kBusyStride; j < i; ++j)
      if (ev[j].kind == EventKind::CommKernel) s += ev[j].duration();
    return s;
  };
  auto comm = [&](uint32_t i) { return ev[i].kind == EventKind::CommKernel; };
  return prefix(last) - prefix(first) - (comm(first) ? std::max<int64_t>(0, begin - ev[first].start) : 0) -
         (comm(last - 1) ? std::max<int64_t>(0, ev[last - 1].end - end) : 0);
}

std::pair<uint32_t, uint32_t> overlapping(const Lane& lane, int64_t begin, int64_t end) {
  const auto& ev = lane.events;
  // Lanes never overlap, so ends are sorted as starts are.
  auto lo = std::partition_point(ev.begin(), ev.end(), [begin](const Event& e) { return e.end <= begin; });
  auto hi = std::partition_point(lo, ev.end(), [end](const Event& e) { return e.start < end; });
  return {uint32_t(lo - ev.begin()), uint32_t(hi - ev.begin())};
}

int64_t busyIn(const Lane& lane, int64_t begin, int64_t end) {
  const auto [first, last] = overlapping(lane, begin, end);
  if (first >= last) return 0;
  // Whole events from the prefix sum, less the parts of the two edge events outside the slice.
  const auto& ev = lane.events;
  return busyBetween(lane, first, last) - std::max<int64_t>(0, begin - ev[first].start) -
         std::max<int64_t>(0, ev[last - 1].end - end);
}

std::vector<float> busyColumns(const Track& track, int64_t begin, int64_t end, size_t columns) {
  std::vector<float> out(columns, 0.f);
  if (end <= begin || columns == 0) return out;
  const double span = double(end - begin);
  for (size_t c = 0; c < columns; ++c) {
    // Slice edges rounded from one formula, so that neighbouring slices share their edge exactly.
    const int64_t a = begin + int64_t(span * double(c) / double(columns));
    const int64_t b = begin + int64_t(span * double(c + 1) / double(columns));
    if (b <= a) continue;
    int64_t busy = 0;
    for (const Lane& lane : track.lanes) busy += busyIn(lane, a, b);
    out[c] = float(std::min(1.0, double(busy) / double(b - a)));
  }
  return out;
}

void visibleItems(const Lane& lane, int64_t begin, int64_t end, int64_t threshold, std::vector<DrawItem>& out) {
  const auto [i0, i1] = overlapping(lane, begin, end);
  if (i0 >= i1) return;
  const auto& ev = lane.events;
  auto emit = [&](const LodItem& it) {
    const int64_t busy = it.last - it.first == 1 ? ev[it.first].duration() : busyBetween(lane, it.first, it.last);
    out.push_back({it.start, it.end, it.last - it.first, it.first, busy});
  };

  const LodLevel* level = nullptr;
  for (const auto& l : lane.levels)
    if (l.threshold <= threshold) level = &l;

  // Items of the chosen level overlapping the window, trimmed to the events [i0, i1).
  thread_local std::vector<LodItem> items;
  items.clear();
  if (!level) {
    for (uint32_t i = i0; i < i1; ++i) items.push_back({ev[i].start, ev[i].end, i, i + 1});
  } else {
    const auto& li = level->items;
    auto lo = std::partition_point(li.begin(), li.end(), [&](const LodItem& it) { return it.last <= i0; });
    for (auto it = lo; it != li.end() && it->first < i1; ++it) {
      LodItem x = *it;
      if (x.first < i0 || x.last > i1) {
        // A trimmed block is still made of small events; a lone survivor is small at T' <= T.
        x.first = std::max(x.first, i0);
        x.last = std::min(x.last, i1);
        x.start = ev[x.first].start;
        x.end = ev[x.last - 1].end;
      }
      items.push_back(x);
    }
  }
  fold(items.data(), items.size(), threshold, emit);
}

std::optional<size_t> hitItem(const Lane& lane, const std::vector<DrawItem>& items, int64_t t, int64_t tolerance) {
  const auto e = hitLane(lane, t, tolerance);
  if (!e) return std::nullopt;
  // Items are sorted by their first event; the one holding *e is the last starting at or before it.
  auto it = std::partition_point(items.begin(), items.end(), [&](const DrawItem& d) { return d.index <= *e; });
  if (it == items.begin()) return std::nullopt;
  --it;
  if (*e >= it->index + it->count) return std::nullopt;  // outside what was drawn
  return size_t(it - items.begin());
}

void buildPyramid(CounterSeries& c) {
  c.pyramid.clear();
  c.max_value = c.values.empty() ? 0 : *std::max_element(c.values.begin(), c.values.end());
  c.min_value = c.values.empty() ? 0 : *std::min_element(c.values.begin(), c.values.end());
  std::vector<std::pair<double, double>> prev;
  for (double v : c.values) prev.emplace_back(v, v);
  while (prev.size() > 16) {
    std::vector<std::pair<double, double>> next;
    for (size_t i = 0; i < prev.size(); i += 16) {
      std::pair<double, double> m = prev[i];
      for (size_t j = i + 1; j < std::min(prev.size(), i + 16); ++j)
        m = {std::min(m.first, prev[j].first), std::max(m.second, prev[j].second)};
      next.push_back(m);
    }
    c.pyramid.push_back(next);
    prev.swap(next);
  }
}

double counterMax(const CounterSeries& c, size_t first, size_t last) {
  last = std::min(last, c.values.size());
  double m = 0;
  bool any = false;
  auto take = [&](double v) { m = any ? std::max(m, v) : v, any = true; };
  // Level -1 is the values themselves; level k covers blocks of 16^(k+1).
  size_t a = first, b = last;
  for (int level = -1; a < b; ++level) {
    const bool has_up = level + 1 < int(c.pyramid.size());
    auto at = [&](size_t i) { return level < 0 ? c.values[i] : c.pyramid[size_t(level)][i].second; };
    if (!has_up) {
      for (size_t i = a; i < b; ++i) take(at(i));
      break;
    }
    // Walk this level up to the next block boundary on each side, then go up.
    const size_t na = (a + 15) / 16, nb = b / 16;
    if (na >= nb) {
      for (size_t i = a; i < b; ++i) take(at(i));
      break;
    }
    for (size_t i = a; i < na * 16; ++i) take(at(i));
    for (size_t i = nb * 16; i < b; ++i) take(at(i));
    a = na, b = nb;
  }
  return m;
}

}  // namespace trainscope::viewer
