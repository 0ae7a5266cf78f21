// trainscope/viewer/lod.h — level of detail: what one lane shows in a window, folded so that a frame
// costs what is on screen, not what is in the trace.
//
// The rule (one rule, at every zoom): with a threshold T (the width of a few pixels, in ns), an event
// narrower than T is "small"; a maximal run of consecutive small events whose gaps are all below T
// is drawn as one block with a count. Events at least T wide are drawn as themselves.
//
// The rule is applied to the events that overlap the window, so the result for a window is exactly
// what a brute-force pass over those events gives (tests check this). To make that cheap, each lane
// keeps levels built with thresholds 1 µs, 4 µs, 16 µs, …: a level's blocks are runs at its own
// threshold, and since a run at T' ≤ T lies inside one run at T, a query at T walks the coarsest level
// with T' ≤ T, trims the blocks cut by the window's edges (binary search inside the block) and folds
// on. The work is the number of level items in the window, bounded by about width / T' per lane.
//
// Every item also carries the time its events keep busy, so that a folded block can be drawn by how
// full it is (a stream 17% busy must not look solid when zoomed out).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "trainscope/viewer/model.h"

namespace trainscope::viewer {

struct DrawItem {
  int64_t start = 0, end = 0;
  uint32_t count = 0;  // events folded into this item
  uint32_t index = 0;  // its first event (the event, when count == 1)
  int64_t busy = 0;    // the time its events cover (their summed durations: a lane's events never overlap)
  // The fraction of its span that its events keep busy: what a folded block is shaded by.
  double coverage() const { return end > start ? double(busy) / double(end - start) : 1.0; }
};

inline constexpr int64_t kLodBaseThreshold = 1000;  // ns, level 0
inline constexpr int kLodMaxLevels = 16;

// Builds lane.levels and lane.busy_prefix from lane.events (sorted, non-overlapping).
void buildLevels(Lane& lane);

// The summed durations of events [first, last) of a lane: from a prefix sum kept every 16 events
// (half a byte per event), so O(16) whatever the range.
int64_t busyBetween(const Lane& lane, uint32_t first, uint32_t last);
inline constexpr uint32_t kBusyStride = 16;

// Events of `lane` overlapping [begin, end), folded at `threshold` ns. Appends to `out`.
void visibleItems(const Lane& lane, int64_t begin, int64_t end, int64_t threshold, std::vector<DrawItem>& out);

// Hit testing as drawn: the item of `items` (what visibleItems gave for `lane`, sorted) under time t —
// the event under t by hitLane (query.h; the nearest within `tolerance` ns), then the item that holds
// it, a folded block or the event itself. Pass a tolerance of at least the fold threshold, so that a
// gap inside a folded block (narrower than the threshold) still hits the block. nullopt: nothing there.
std::optional<size_t> hitItem(const Lane& lane, const std::vector<DrawItem>& items, int64_t t, int64_t tolerance);

// The index range [first, last) of lane events overlapping [begin, end).
std::pair<uint32_t, uint32_t> overlapping(const Lane& lane, int64_t begin, int64_t end);

// The time events of `lane` keep busy inside [begin, end): each event clipped to it. O(log n + 16).
int64_t busyIn(const Lane& lane, int64_t begin, int64_t end);

// The same of the lane's NCCL kernels (EventKind::CommKernel) alone, through lane.comm_prefix: 0 for
// a lane without any. A stream's communication, which compact.h counts apart from its compute.
int64_t commBusyIn(const Lane& lane, int64_t begin, int64_t end);

// The per-stream utilisation row: [begin, end) cut into `columns` equal slices (a pixel column each),
// and for each the fraction of it that `track`'s events keep busy, in [0, 1]. A stream's lanes hold
// kernels that overlap each other (lanes of a stream never nest), so their busy times are summed and
// capped at 1. O(columns × lanes × (log n + 16)), whatever the number of events in the window.
std::vector<float> busyColumns(const Track& track, int64_t begin, int64_t end, size_t columns);

// Builds c.pyramid (and c.max_value) from c.values.
void buildPyramid(CounterSeries& c);
// The largest of values[first, last) of a counter (0 when empty), through its min/max pyramid:
// O(16 × levels) whatever the range.
double counterMax(const CounterSeries& c, size_t first, size_t last);

}  // namespace trainscope::viewer
