// import_impl.h — the readers of other profilers' formats behind importTraces (internal to rundb).
// Each appends one rank's rows through the RunStore, inside the caller's transaction.
#pragma once

#include <cstdint>
#include <istream>
#include <map>
#include <utility>
#include <string>
#include <vector>

#include "trainscope/rundb/import.h"
#include "trainscope/rundb/rows.h"

namespace trainscope::rundb {
class RunStore;
}

namespace trainscope::rundb::importers {

// PyTorch profiler (Kineto) Chrome-trace JSON, streamed. Returns the rank it was imported as.
int64_t importKineto(RunStore& store, ImportStats& st, std::istream& in, const std::string& path,
                     int64_t default_rank);
// Nsight Systems SQLite export (`nsys export --type sqlite`).
void importNsys(RunStore& store, ImportStats& st, const std::string& path, int64_t rank);

// Shared by both: "ProfilerStep#N" → N (-1 otherwise; UserError naming `path` when N overflows).
int64_t stepNumber(const std::string& name, const std::string& path);
// One step row of an imported trace (no loss, no FLOPs: only its window); UserError naming `path` when
// the window is wider than int64 nanoseconds.
// `peak_bytes`: the most memory the trace's allocation events say was allocated in the window (0: none).
Step importedStep(int64_t rank, int64_t step, int64_t start_ns, int64_t end_ns, const std::string& path,
                  int64_t peak_bytes = 0);
// The GPU models a trace names, one entry per device, as the import header says them: each model once,
// in first-seen order, counted when more than one device has it ("2 x NVIDIA H100 80GB HBM3, NVIDIA
// A10"); "" for none (empty names skipped).
std::string gpuModels(const std::vector<std::string>& per_device);

// The steps of one rank's file, each kept once: a step met again with the same window (PyTorch 1.x
// wrote ProfilerStep#N as an op and an annotation) is skipped; with another window it is refused
// (UserError naming `path` and both windows) — one would silently replace the other.
class StepRows {
 public:
  StepRows(RunStore& store, const std::string& path) : store_(store), path_(path) {}
  // True when the step was stored (false: a repeat of one already stored).
  bool add(int64_t rank, int64_t step, int64_t start_ns, int64_t end_ns, int64_t peak_bytes = 0);
  int64_t count() const { return int64_t(seen_.size()); }

 private:
  RunStore& store_;
  const std::string& path_;
  std::map<std::pair<int64_t, int64_t>, std::pair<int64_t, int64_t>> seen_;  // (rank, step) → window
};

}  // namespace trainscope::rundb::importers
