// trainscope/viewer/query.h — questions the view asks of a loaded trace: what is under the cursor,
// what encloses it, what launched it, where a name occurs, what a time range holds, and how two runs
// line up. Everything here is plain data in, plain data out; no drawing.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "trainscope/viewer/model.h"

namespace trainscope::viewer {

// The event of `lane` under time t: the one containing t, else the nearest within `tolerance` ns.
std::optional<uint32_t> hitLane(const Lane& lane, int64_t t, int64_t tolerance);

// The events of the same track that contain `r` (its flame parents), outermost first.
std::vector<EventRef> enclosing(const Trace& trace, const EventRef& r);

// Correlation ids → events, per rank: the API call that launched a kernel, copy or set, and the
// device work an API call launched (one-to-many for a CUDA-graph launch). Built once per trace (the
// app: on its loader thread, after the timeline is up). Two sorted arrays, 24 bytes an entry (hash
// maps of 100 M events took 8 s and gigabytes); a correlation launched twice: the first in track order.
class CorrelationIndex {
 public:
  explicit CorrelationIndex(const Trace& trace);
  std::optional<EventRef> launchOf(const EventRef& device_event) const;
  std::vector<EventRef> launchedBy(const EventRef& api_call) const;

  struct Entry {
    uint64_t key;  // (rank, correlation)
    EventRef ref;
  };

 private:
  const Trace& trace_;
  std::vector<Entry> api_;     // API calls, by key (ties: track order)
  std::vector<Entry> device_;  // device work, by key (ties: track order)
};

// Case-insensitive substring search over event names; matches sorted by start time.
struct SearchResult {
  std::string needle;
  std::vector<EventRef> matches;
  bool truncated = false;  // more than `limit` matches
};
SearchResult search(const Trace& trace, const std::string& needle, size_t limit = 5'000'000);
// The match after (dir > 0) or before (dir < 0) time t; wraps around. -1 when there is none.
int64_t nextMatch(const Trace& trace, const SearchResult& s, int64_t t, int dir);

// What a time range holds, per kind: events overlapping it and the time the kind keeps busy within it,
// per rank — on each rank the union of that kind's events over its tracks, clipped to the range, so a
// rank's share is at most 100% — summed over ranks (busy_ns), and the busiest rank's. A share of the
// range is per rank: busy_ns / (ranks × range), never summed over ranks ("200%").
struct KindTotal {
  int64_t count = 0;
  int64_t busy_ns = 0;           // summed over ranks
  int64_t ranks = 0;             // ranks with events of the kind in the range
  int64_t max_rank_busy_ns = 0;  // the busiest rank's
  int64_t max_rank = -1;
};
std::array<KindTotal, kEventKinds> rangeTotals(const Trace& trace, int64_t begin, int64_t end, int64_t rank = -1);

// Two runs: the per-step time of each (the slowest rank's, as the run summary counts it) and the
// offset that lines run b's step up with run a's.
struct StepDiff {
  int64_t step = 0;
  double a_s = 0, b_s = 0;  // 0 when the run lacks the step
};
std::vector<StepDiff> compareSteps(const Trace& a, const Trace& b);
int64_t alignmentOffset(const Trace& a, const Trace& b, int64_t step);  // add to b's times

}  // namespace trainscope::viewer
