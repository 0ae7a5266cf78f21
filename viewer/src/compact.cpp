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

}  // namespace

CompactColumns compactColumns(const Trace& trace, const RankGroup& rank, int64_t begin, int64_t end, size_t columns) {
  CompactColumns c;
  c.compute.assign(columns, 0.f);
  c.comm.assign(columns, 0.f);
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
    }
  }
  return c;
}

}  // namespace trainscope::viewer
