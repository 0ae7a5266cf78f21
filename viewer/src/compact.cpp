// compact.cpp — a rank's compact summary row (see compact.h).
#include "trainscope/viewer/compact.h"

#include <algorithm>
#include <utility>
#include <vector>

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

// A stream's columns: its kernels, copies and sets maxed into `compute`, its NCCL kernels into `comm`
// (lanes summed, each capped at 1; the slices cut as busyColumns cuts them).
void streamColumns(const Track& t, int64_t begin, int64_t end, std::vector<float>& compute, std::vector<float>& comm) {
  const size_t n = compute.size();
  const double span = double(end - begin);
  for (size_t c = 0; c < n; ++c) {
    const int64_t a = begin + int64_t(span * double(c) / double(n)), b = begin + int64_t(span * double(c + 1) / double(n));
    if (b <= a) continue;
    int64_t busy = 0, nccl = 0;
    for (const Lane& lane : t.lanes) busy += busyIn(lane, a, b), nccl += commBusyIn(lane, a, b);
    compute[c] = std::max(compute[c], float(std::min(1.0, double(busy - nccl) / double(b - a))));
    comm[c] = std::max(comm[c], float(std::min(1.0, double(nccl) / double(b - a))));
  }
}

// Each column's share of the union of `spans` (overlapping spans once), added into `out`.
void addUnion(std::vector<std::pair<int64_t, int64_t>>& spans, int64_t begin, int64_t end, std::vector<float>& out) {
  std::sort(spans.begin(), spans.end());
  for (size_t i = 0; i < spans.size();) {
    auto [a, b] = spans[i];
    for (++i; i < spans.size() && spans[i].first <= b; ++i) b = std::max(b, spans[i].second);
    addSpan(a, b, begin, end, out);
  }
}

// The waits of the linked calls of collectives track `ti` in [begin, end): a collective's for its last
// member, a pipeline send's or receive's for its partner (the same rule, comm.h), all into `wait` and
// the pipeline's alone into `pipeline`. Calls that overlap (on the track's other lanes) count their
// waits once.
void waits(const Trace& trace, size_t ti, int64_t begin, int64_t end, std::vector<float>& wait, std::vector<float>& pipeline) {
  std::vector<std::pair<int64_t, int64_t>> spans, p2p;
  const Track& t = trace.tracks[ti];
  for (uint32_t li = 0; li < t.lanes.size(); ++li) {
    const auto [first, last] = overlapping(t.lanes[li], begin, end);
    for (uint32_t i = first; i < last; ++i) {
      const CommCall* call = trace.comm.callOf({uint32_t(ti), li, i});
      if (!call) continue;
      const Event& e = t.lanes[li].events[i];
      const int64_t until = std::min(e.end, call->link.last_start_ns);
      if (until <= e.start) continue;
      spans.push_back({e.start, until});
      if (call->link.p2p) p2p.push_back({e.start, until});
    }
  }
  addUnion(spans, begin, end, wait);
  addUnion(p2p, begin, end, pipeline);
}

}  // namespace

CompactColumns compactColumns(const Trace& trace, const RankGroup& rank, int64_t begin, int64_t end, size_t columns) {
  CompactColumns c;
  c.compute.assign(columns, 0.f);
  c.comm.assign(columns, 0.f);
  c.wait.assign(columns, 0.f);
  c.pipeline.assign(columns, 0.f);
  if (columns == 0 || end <= begin) return c;
  bool streams = false;
  for (size_t ti : rank.tracks) streams = streams || (trace.tracks[ti].kind == TrackKind::Stream && trace.tracks[ti].events());
  for (size_t ti : rank.tracks) {
    const Track& t = trace.tracks[ti];
    if (t.lanes.empty() || t.events() == 0) continue;
    if (t.kind == TrackKind::Stream) {
      streamColumns(t, begin, end, c.compute, c.comm);
    } else if (t.kind == TrackKind::Thread && !streams) {
      maxLane(t.lanes[0], begin, end, c.compute);
    } else if (t.kind == TrackKind::Collectives) {
      for (const Lane& lane : t.lanes) maxLane(lane, begin, end, c.comm);
      waits(trace, ti, begin, end, c.wait, c.pipeline);
    }
  }
  for (size_t i = 0; i < columns; ++i) {
    c.wait[i] = std::min(c.wait[i], c.comm[i]);  // a part of comm
    c.pipeline[i] = std::min(c.pipeline[i], c.wait[i]);  // a part of the wait
  }
  return c;
}

}  // namespace trainscope::viewer
