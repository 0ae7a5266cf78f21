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
#include <memory>
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
  bool complete = true;       // false: a snapshot of a pass still under way (StatisticsPass)
  double fraction = 1;        // of the pass done, when not complete
  int groups_done = kStatGroups;  // groups [0, groups_done) are counted in full (StatGroup order)
  // The share of the range one row's total is, per rank: total / (range × the ranks it covers).
  double shareOfRangePerRank(const StatRow& r) const;
};

// The statistics computed a piece at a time, so that a viewer shows them while they are computed and
// stops at once when the file is closed: run() counts about `budget` more events (whole lanes, one
// group — kernels, ops, … — at a time, so that the durations kept for the percentiles are one group's
// at most) and returns true when all is counted. snapshot() is what is known: the groups done in full,
// the group under way over the lanes walked so far (its percentiles of the durations seen), with
// complete = false and the fraction done. Once run() has returned true, snapshot() equals
// computeStatistics (one pass is the other with an unlimited budget).
class StatisticsPass {
 public:
  explicit StatisticsPass(const Trace& trace, bool clip = false, int64_t begin = 0, int64_t end = 0);
  ~StatisticsPass();
  StatisticsPass(const StatisticsPass&) = delete;
  StatisticsPass& operator=(const StatisticsPass&) = delete;
  // cancel: checked per lane; once true, throws Cancelled.
  bool run(int64_t budget, const std::atomic<bool>* cancel = nullptr);
  bool done() const { return g_ >= kStatGroups; }
  double fraction() const;  // lanes' events walked, over the groups' passes
  Statistics snapshot() const;

 private:
  struct Group;
  void countLane(const Track& t, size_t lane);
  const Trace& trace_;
  bool clip_;
  int64_t begin_, end_;
  Statistics done_;              // the groups finished
  std::unique_ptr<Group> group_;  // the group under way
  int g_ = 0;                    // its index
  size_t track_ = 0, lane_ = 0;  // the next lane to count
  int64_t visited_ = 0, total_ = 0;
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

// One name's durations (of group g; on `rank`, or all ranks with kAllRanks; clipped to the range of
// `scope` when it is a range's statistics) in `bins` log-spaced bins from the shortest to the longest:
// edges[k] = lo·(hi/lo)^(k/bins), bin k holds [edges[k], edges[k+1]) and the last also its upper edge.
// lo is at least 1 ns: a 0-ns duration counts in the first bin. All durations equal: one bin. Log-spaced because kernel and op
// durations span decades (Nsight's and Tracy's histograms are logarithmic too).
struct Histogram {
  std::vector<double> edges;    // bins + 1, ns
  std::vector<int64_t> counts;  // bins
  int64_t total() const;
};
Histogram durationHistogram(const Trace& trace, const Statistics& scope, StatGroup g, uint32_t name, int64_t rank,
                            int bins = 32);

enum class StatSort { Total, Self, Count, Mean, Max, Name, Min, Median, P99, Rank };
// Rows of one group for one rank, for all ranks (kAllRanks) or every rank's own (kEachRank), sorted.
std::vector<const StatRow*> statRows(const Statistics& s, const Trace& trace, StatGroup g, int64_t rank, StatSort by,
                                     bool descending);

// Rows of every group for one rank, kAllRanks or kEachRank, largest total first (a range's names).
std::vector<const StatRow*> rangeNameRows(const Statistics& s, int64_t rank);

}  // namespace trainscope::viewer
