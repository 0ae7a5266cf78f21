// trainscope/rundb/step_analysis.h — why a step took as long as it did, from the collectives linked
// across ranks (report.h, linkCollectives): where each rank waited for a peer, the pipeline bubble,
// and the time-by-category breakdown the summary (summary.h) and the viewer's Steps tab show.
//
// Definitions (docs/trace-schema.md, "Run summary"):
//   wait     a rank's part of a linked collective before the last member arrived (start → the last
//            arrival, within the row): it waited for a peer.
//   bubble   the same for a linked pipeline send or receive (group pp): the stage waited for its
//            neighbour — the pipeline's bubble.
//   In a window, wait and bubble count only where the rank's communication runs and compute does not
//   (bubble where wait does not either): wait + bubble ≤ comm − overlap, and the rest of that is the
//   exposed transfer. Rows that are not linked have no known wait: all of them stays transfer.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trainscope/rundb/report.h"
#include "trainscope/rundb/summary.h"

namespace trainscope::rundb {

class RunReader;

struct PeerWaits {
  std::vector<Interval> wait, bubble;  // as found (not merged)
};
// By rank, from the rows of a `collectives` table and their links.
std::map<int64_t, PeerWaits> peerWaits(const std::vector<Collective>& rows, const CollectiveLinks& links);

// What a rank's trace says it did, as intervals by category (any order, may overlap).
struct CategoryIntervals {
  std::vector<Interval> compute, comm, memory, wait, bubble;
};
// Time by category over `windows`, divided by `steps` (summary.h: compute + comm − overlap + memory +
// idle = the windows; wait and bubble are parts of comm − overlap).
Breakdown breakdownOver(const CategoryIntervals& ev, const std::vector<Interval>& windows, int64_t steps);
// The same for each window on its own (steps 1 each), the intervals merged once.
std::vector<Breakdown> breakdownEach(const CategoryIntervals& ev, const std::vector<Interval>& windows);
// Both at once, the intervals merged once (each: null for breakdownOver's alone).
Breakdown breakdownOverAndEach(const CategoryIntervals& ev, const std::vector<Interval>& windows, int64_t steps,
                               std::vector<Breakdown>* each);

// The straggler of a counted step: the rank that arrives last at the step's linked collectives (not
// pipeline sends), so that the others wait for it — found even where the collectives make every
// rank's step equally long (DP), where step times cannot tell. For each linked collective of the step
// (a call belongs to the step whose window on its first member's rank holds that member's start) the
// last arrival is `late` by last − the second-last arrival (the time it alone held the call up); the
// straggler is the rank with the largest sum of that over the step. What it was doing instead: at the
// call it was latest at, each range name's time from the step's start to the rank's arrival, the
// straggler's against the mean of the others' (up to their own arrivals), largest excess first.
std::vector<StepStraggler> stepStragglers(RunReader& reader, const std::vector<Collective>& rows,
                                          const CollectiveLinks& links, int64_t excluded_steps);

// The critical path of each counted step: walked back from the latest step end. On rank r at time t,
// the latest linked call of r that ends by t (within r's step) is found; the time from its end to t is
// r's work. If r waited at it (a peer arrived after r), the call's transfer (last arrival → end) is on
// the path and the walk goes on at the last arrival on the rank that arrived last (for a send and its
// receive, the other end); else the whole call is, and the walk stays on r at the call's start. It ends
// at r's step start. Work segments are named by the range covering most of them.
std::vector<StepCriticalPath> criticalPaths(RunReader& reader, const std::vector<Collective>& rows,
                                            const CollectiveLinks& links, int64_t excluded_steps);

}  // namespace trainscope::rundb
