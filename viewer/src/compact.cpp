// compact.cpp — a rank's compact summary row (see compact.h).
#include "trainscope/viewer/compact.h"

#include <algorithm>

#include "trainscope/viewer/lod.h"

namespace trainscope::viewer {

namespace {

// Each column's busy share of one lane, maxed into `out`.
void maxLane(const Lane& lane, int64_t begin, int64_t end, std::vector<float>& out) {
  const size_t n = out.size();
  const double w = double(end - begin) / double(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t c0 = begin + int64_t(w * double(i)), c1 = i + 1 == n ? end : begin + int64_t(w * double(i + 1));
    if (c1 <= c0) continue;
    out[i] = std::max(out[i], float(double(busyIn(lane, c0, c1)) / double(c1 - c0)));
  }
}

// Each column's share of [a, b), added into `out` (capped at 1).
void addSpan(int64_t a, int64_t b, int64_t begin, int64_t end, std::vector<float>& out) {
  a = std::max(a, begin), b = std::min(b, end);
  if (b <= a || out.empty()) return;
  const double w = double(end - begin) / double(out.size());
  const size_t i0 = size_t(double(a - begin) / w), i1 = std::min(out.size() - 1, size_t(double(b - 1 - begin) / w));
  for (size_t i = i0; i <= i1 && i < out.size(); ++i) {
    const double c0 = double(begin) + w * double(i), c1 = c0 + w;
    const double part = std::min(double(b), c1) - std::max(double(a), c0);
    if (part > 0) out[i] = float(std::min(1.0, double(out[i]) + part / w));
  }
}

// The waits of the linked collectives of lane 0 of collectives track `ti` in [begin, end).
void waits(const Trace& trace, size_t ti, int64_t begin, int64_t end, std::vector<float>& out) {
  const Lane& lane = trace.tracks[ti].lanes[0];
  const auto [first, last] = overlapping(lane, begin, end);
  for (uint32_t i = first; i < last; ++i) {
    const CommCall* call = trace.comm.callOf({uint32_t(ti), 0, i});
    if (!call || call->link.p2p) continue;
    const Event& e = lane.events[i];
    addSpan(e.start, std::min(e.end, call->link.last_start_ns), begin, end, out);
  }
}

}  // namespace

CompactColumns compactColumns(const Trace& trace, const RankGroup& rank, int64_t begin, int64_t end, size_t columns) {
  CompactColumns c;
  c.compute.assign(columns, 0.f);
  c.comm.assign(columns, 0.f);
  c.wait.assign(columns, 0.f);
  if (columns == 0 || end <= begin) return c;
  bool streams = false;
  for (size_t ti : rank.tracks) streams = streams || (trace.tracks[ti].kind == TrackKind::Stream && trace.tracks[ti].events());
  for (size_t ti : rank.tracks) {
    const Track& t = trace.tracks[ti];
    if (t.lanes.empty() || t.events() == 0) continue;
    if (t.kind == TrackKind::Stream) {
      const std::vector<float> b = busyColumns(t, begin, end, columns);
      for (size_t i = 0; i < columns && i < b.size(); ++i) c.compute[i] = std::max(c.compute[i], b[i]);
    } else if (t.kind == TrackKind::Thread && !streams) {
      maxLane(t.lanes[0], begin, end, c.compute);
    } else if (t.kind == TrackKind::Collectives) {
      maxLane(t.lanes[0], begin, end, c.comm);
      waits(trace, ti, begin, end, c.wait);
    }
  }
  for (size_t i = 0; i < columns; ++i) c.wait[i] = std::min(c.wait[i], c.comm[i]);  // a part of comm
  return c;
}

}  // namespace trainscope::viewer
