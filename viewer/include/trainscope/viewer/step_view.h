// trainscope/viewer/step_view.h — the Steps tab's and Details' words for why a step took its time
// (rundb/step_analysis.h computes the numbers; the same that `trainscope report` prints). No drawing.
#pragma once

#include <string>
#include <vector>

#include "trainscope/rundb/summary.h"
#include "trainscope/viewer/details.h"
#include "trainscope/viewer/model.h"

namespace trainscope::viewer {

// One line per counted step: its straggler — the rank that arrived last at the step's linked
// collectives, by how much, what it was doing instead — or why there is none.
std::vector<std::string> stragglerLines(const rundb::RunSummary& s);

// One line per counted step: its critical path across ranks, each segment with its share of the
// path ("rank 1 work 302 ms 99.5% (test/slow_rank)"), at most 8 segments (report --json has all).
std::vector<std::string> criticalPathLines(const rundb::RunSummary& s);

// Details of a step (an event of a rank's steps row): the rank's breakdown of that step, the step's
// straggler and its critical path with each segment's share ("path 1" … in time order). Empty for
// any other event or a step the summary did not count.
Fields stepAnalysisFields(const Trace& t, const rundb::RunSummary& s, const EventRef& ref);

// A selected time range, per rank: compute, communication, overlap, memory and idle, and of the
// communication the wait for a peer and the pipeline bubble (rundb::breakdownOver, the summary's
// rule), in seconds within [begin, end) — not per step. On a rank with kernels in the range, compute
// is its kernels other than NCCL's and communication NCCL's; else compute is its forward, backward
// and optimizer ranges (its CPU ops when it has none) and communication its collectives. Wait and
// bubble come from the linked collectives (trace.comm).
struct RankRangeBreakdown {
  int64_t rank = 0;
  rundb::Breakdown b;
};
std::vector<RankRangeBreakdown> rangeBreakdown(const Trace& t, int64_t begin, int64_t end);

}  // namespace trainscope::viewer
