// trainscope/rundb/import.h — other profilers' traces into a run database, so report, export and
// the viewer work on them as on a native trace.
//   PyTorch profiler (Kineto) Chrome-trace JSON, plain or gzipped, one file per rank (the rank comes
//   from distributedInfo.rank when present, else the file's position on the command line), or several
//   per rank: the profiling cycles of one process (same pids and rank, spans that do not overlap).
//   Nsight Systems SQLite exports (`nsys export --type sqlite`).
// Files are recognised by content (SQLite header, gzip magic, JSON), not by name. The database is
// built under a temporary name and renamed at the end: a failed import leaves nothing behind.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace trainscope::rundb {

struct ImportStats {
  int files = 0;
  int64_t host_ops = 0, ranges = 0, kernels = 0, api_calls = 0, memcpy = 0, memset = 0, steps = 0;
  int64_t collectives = 0;  // from the profiler's communication records
  int64_t gpu_annotations = 0;  // ranges on a device stream (Kineto's gpu_user_annotation)
  int64_t threads = 0;          // named (or ordered) threads, streams and processes
  int64_t memory_samples = 0;   // profile_memory's allocations and frees → the ranks' memory counters
  // Events left out and counted (also in the database's drops table, source "import"): a time that
  // does not fit int64 nanoseconds, and a negative duration.
  int64_t dropped_out_of_range = 0, dropped_negative = 0;
  // Values of the wrong type, each left out (read as absent, never coerced: 1.5 is not 1, 2^70 is not
  // INT64_MAX, "7" is not a correlation), counted by field and kind ("args.correlation: a string");
  // and device events of categories the importer does not read, by category. Both are kept in the
  // database's meta table as JSON objects (import_refused_values, import_ignored_device_events).
  std::map<std::string, int64_t> refused_values, ignored_device_events;
  // The GPU models each rank's trace names (Kineto's deviceProperties[].name), by rank; in meta
  // import_files.
  std::map<int64_t, std::string> gpus;
  // Quotes inside a string that the profiler wrote unescaped (a record_function name holding '"'),
  // read as part of the string, by file; in meta import_repaired_quotes.
  std::map<std::string, int64_t> repaired_quotes;
  // The last ProfilerStep#N of a file that the profiler's stop cut as it began (no host event in it),
  // by file: kept as a range, not as a step.
  std::map<std::string, int64_t> stop_stubs;
  // Some rank's collectives came from NCCL kernels, timed on the device: their steps cannot be told
  // from the CPU's ProfilerStep windows (meta collectives_clock "device"; linkingSteps in report.h).
  bool device_clocked_collectives = false;
};

// The counts above as one line each for the import's output ("" when there are none).
std::string describeRefusals(const ImportStats& st);

// Throws UserError naming the file for unreadable, unrecognised or malformed input.
ImportStats importTraces(const std::vector<std::string>& inputs, const std::string& out_db, bool overwrite);

}  // namespace trainscope::rundb
