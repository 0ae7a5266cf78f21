// trainscope/viewer/stats.h — the statistics panel's numbers: per name and kind, count, total and
// self time, min and max; per rank and over all ranks.
//
// Self time is an event's duration less the time of the events its flame holds directly (the next
// lane's events it contains) — as Tracy and the PyTorch profiler count it. Kernels, copies and
// collectives do not nest: their self time is their total.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/viewer/model.h"

namespace trainscope::viewer {

// Which statistics table: kernels (NCCL's included), CPU ops, ranges, collectives, copies and sets, API.
enum class StatGroup { Kernels, Ops, Ranges, Collectives, Memory, Api };
inline constexpr int kStatGroups = 6;
const char* groupName(StatGroup g);
StatGroup groupOf(EventKind k);  // Step → Ranges (never counted)

struct StatRow {
  StatGroup group = StatGroup::Kernels;
  uint32_t name = 0;
  int64_t rank = -1;  // -1: all ranks
  int64_t count = 0, total_ns = 0, self_ns = 0, min_ns = INT64_MAX, max_ns = 0;
  double mean_ns() const { return count ? double(total_ns) / double(count) : 0; }
};

struct Statistics {
  std::vector<StatRow> rows;  // every (group, name, rank) and every (group, name) over all ranks
};

// cancel: checked per lane; once true, throws Cancelled (the app closing a file still summarising).
Statistics computeStatistics(const Trace& trace, const std::atomic<bool>* cancel = nullptr);

enum class StatSort { Total, Self, Count, Mean, Max, Name };
// Rows of one group for one rank (-1: all ranks), sorted.
std::vector<const StatRow*> statRows(const Statistics& s, const Trace& trace, StatGroup g, int64_t rank, StatSort by,
                                     bool descending);

}  // namespace trainscope::viewer
