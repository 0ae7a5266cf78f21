// trainscope/rundb/report.h — what `trainscope report run.db` computes, on the reader.
//
// The run summary (summary.h: throughput, step times, MFU, memory, the per-rank breakdown and
// stragglers), then: top ops — kernels by total time when there are any, else host ops by self
// (exclusive) time, an op minus the ops nested inside it on its thread (ATen ops call ATen ops);
// collectives by op and group with nccl-tests bus bandwidth; dropped events; and warnings about what
// is missing (ranks whose shards were not merged).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/rundb/summary.h"

namespace trainscope::rundb {

struct OpStat {
  std::string name;
  int64_t count = 0;
  double total_s = 0, mean_s = 0;  // inclusive
  double self_s = 0;               // exclusive: minus the ops nested inside it on its thread
};

struct CollectiveStat {
  std::string op, group;
  int64_t count = 0, bytes = 0;
  double total_s = 0, busbw_mean = 0, busbw_max = 0;  // bytes/s
};

struct Report {
  std::string path;
  RunSummary summary;
  std::vector<OpStat> top_ops;
  std::string top_ops_source;  // "kernels", "host_ops" or "" (no op events)
  std::vector<CollectiveStat> collectives;
  std::vector<std::pair<std::string, int64_t>> drops;  // source → dropped events
  std::vector<std::string> warnings;
};

// Throws UserError with a clear message when `path` is not a run database, or is truncated or
// damaged. Steps with index < skip_steps are left out of the statistics (imports: none).
Report computeReport(const std::string& path, int top = 15, int skip_steps = 1);
std::string formatReport(const Report& r);
std::string reportJson(const Report& r);

}  // namespace trainscope::rundb
