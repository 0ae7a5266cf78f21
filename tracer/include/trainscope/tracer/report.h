// trainscope/tracer/report.h — what `trainscope report run.db` computes.
//
// Step breakdown per rank, over each step's window [start, start + step time] (HolisticTrace-
// Analysis's temporal breakdown, written down in docs/trace-schema.md):
//   compute  = time covered by compute: GPU kernels other than communication kernels when the rank
//              has kernels, else the CPU ranges forward/backward/optimizer
//   comm     = time covered by collectives (and NCCL kernels)
//   overlap  = time covered by both
//   idle     = window − time covered by either
// Top ops: kernels by total time when there are any, else host ops by self (exclusive) time — an
// op minus the ops nested inside it on its thread (ATen ops call ATen ops). Stragglers: ranks whose compute
// per step exceeds the median rank's by more than 10%.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainscope::tracer {

struct RankReport {
  int rank = 0;
  int64_t steps = 0;
  double step_ms_mean = 0, step_ms_median = 0, step_ms_p90 = 0, step_ms_min = 0, step_ms_max = 0;
  double compute_ms = 0, comm_ms = 0, overlap_ms = 0, idle_ms = 0;  // per step, averaged
  int64_t peak_bytes = 0;
  bool straggler = false;
};

struct OpStat {
  std::string name;
  int64_t count = 0;
  double total_ms = 0, mean_us = 0;  // inclusive
  double self_ms = 0;                // exclusive: minus the ops nested inside it on its thread
};

struct CollectiveStat {
  std::string op, group;
  int64_t count = 0, bytes = 0;
  double total_ms = 0, busbw_gbps_mean = 0, busbw_gbps_max = 0;
};

struct Report {
  std::string path, workload;
  int world = 1;
  std::vector<RankReport> ranks;
  std::vector<OpStat> top_ops;  // by total time
  std::string top_ops_source;   // "kernels", "host_ops" or "" (no op events)
  std::vector<CollectiveStat> collectives;
  double tokens_per_s = 0;
  double mfu = -1, hfu = -1;    // -1: unknown peak
  int64_t peak_bytes = 0;
  std::vector<std::pair<std::string, int64_t>> drops;  // source → dropped events
};

// Reads a run database (throws std::runtime_error / SqliteError with a clear message when it is not
// one, or is truncated/corrupted). Steps with index < skip_steps are left out of the statistics.
Report computeReport(const std::string& path, int top = 15, int skip_steps = 1);
std::string formatReport(const Report& r);
std::string reportJson(const Report& r);

// Interval arithmetic the report is built on (exposed for tests).
struct Interval {
  int64_t begin, end;
};
// Sorted, non-overlapping union.
std::vector<Interval> unionOf(std::vector<Interval> v);
int64_t coveredWithin(const std::vector<Interval>& merged, int64_t begin, int64_t end);
std::vector<Interval> intersect(const std::vector<Interval>& a, const std::vector<Interval>& b);

}  // namespace trainscope::tracer
