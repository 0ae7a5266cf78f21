// trainscope/viewer/stats.h — the statistics panel's numbers: per name and kind, count, total and
// self time, min, median, p99 and max; per rank and over all ranks; for the whole run or limited to
// a selected time range.
//
// Self time is an event's duration less the time of the events its flame holds directly (the next
// lane's events it contains) — as Tracy and the PyTorch profiler count it. Kernels, copies and
// collectives do not nest: their self time is their total.
//
// Limited to a range [begin, end): the events that overlap it (end > begin and start < end), each
// counted with the part of it inside the range — as Perfetto's area selection counts. Median and p99
// are of those (clipped) durations: the lower median, the (n+1)/2-th smallest, and p99 by nearest
// rank, the ceil(0.99 n)-th smallest — exact, not estimated.
#pragma once

#include <array>
#include <atomic>
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

inline constexpr int64_t kAllRanks = -1;   // StatRow::rank of the rows over all ranks
inline constexpr int64_t kEachRank = -2;   // statRows: every rank's own rows

struct StatRow {
  StatGroup group = StatGroup::Kernels;
  uint32_t name = 0;
  int64_t rank = kAllRanks;
  int64_t count = 0, total_ns = 0, self_ns = 0, min_ns = INT64_MAX, max_ns = 0;
  int64_t median_ns = 0, p99_ns = 0;
  double mean_ns() const { return count ? double(total_ns) / double(count) : 0; }
};

struct Statistics {
  std::vector<StatRow> rows;  // every (group, name, rank) and every (group, name) over all ranks
  bool in_range = false;      // limited to [begin, end)
  int64_t begin = 0, end = 0;
  int64_t ranks = 0;          // ranks in the trace (what a per-rank share of the range divides by)
  std::array<int64_t, kStatGroups> events{};  // events counted per group, all ranks
  // The share of the range one row's total is, per rank: total / (range × the ranks it covers).
  double shareOfRangePerRank(const StatRow& r) const;
};

// cancel: checked per lane; once true, throws Cancelled (the app closing a file still summarising).
Statistics computeStatistics(const Trace& trace, const std::atomic<bool>* cancel = nullptr);
// The same, limited to [begin, end) (see above).
Statistics computeRangeStatistics(const Trace& trace, int64_t begin, int64_t end,
                                  const std::atomic<bool>* cancel = nullptr);

// The table to open on: kernels where the run has them, else CPU ops, ranges, collectives, memory, API.
StatGroup defaultGroup(const Statistics& s);
// Why a table is empty and what to look at instead ("" when it is not).
std::string emptyHint(const Statistics& s, StatGroup g);

enum class StatSort { Total, Self, Count, Mean, Max, Name, Min, Median, P99, Rank };
// Rows of one group for one rank, for all ranks (kAllRanks) or every rank's own (kEachRank), sorted.
std::vector<const StatRow*> statRows(const Statistics& s, const Trace& trace, StatGroup g, int64_t rank, StatSort by,
                                     bool descending);

}  // namespace trainscope::viewer
