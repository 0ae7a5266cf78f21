// trainscope/viewer/diff.h — two runs compared per name: for every op, kernel, range, collective
// (and copy, API call) name, its count and time in run A, in run B, and B − A, over one step aligned
// in both runs or over the whole runs — what a checkpointing or TP change needs, where the per-step
// table only says that a step got slower.
//
// Names are matched by their text (each run interns its own). Times are the events' durations
// summed over all ranks (a step's window: each event clipped to it, as range statistics count).
// What it is not: anything that draws; the Compare tab shows it (view_stats.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainscope/viewer/model.h"
#include "trainscope/viewer/stats.h"

namespace trainscope::viewer {

struct DiffRow {
  StatGroup group = StatGroup::Ops;
  std::string name;
  int64_t a_count = 0, b_count = 0;
  int64_t a_ns = 0, b_ns = 0;  // summed over ranks
  int64_t delta_ns() const { return b_ns - a_ns; }
  int64_t delta_count() const { return b_count - a_count; }
};

struct RunDiff {
  std::optional<int64_t> step;  // the step compared; none: the whole runs
  std::pair<int64_t, int64_t> a_window{}, b_window{};  // what was counted in each (absolute ns)
  std::string error;            // why nothing was compared (a step one run lacks); rows empty then
  std::vector<DiffRow> rows;    // sorted by |B − A| time, largest first, then group and name
};

// step: compare that step's window in each run (Trace::stepWindow over all ranks); nullopt: the
// whole runs. A step missing from either run gives `error` naming the run and the steps it has.
RunDiff diffRuns(const Trace& a, const Trace& b, std::optional<int64_t> step,
                 const std::atomic<bool>* cancel = nullptr);
// The rows from statistics already computed (the whole runs' from the viewer's statistics pass).
std::vector<DiffRow> diffStatistics(const Statistics& sa, const Trace& a, const Statistics& sb, const Trace& b);

}  // namespace trainscope::viewer
