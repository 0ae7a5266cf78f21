// import_impl.h — the readers of other profilers' formats behind importTraces (internal to rundb).
// Each appends one rank's rows through the RunStore, inside the caller's transaction.
#pragma once

#include <cstdint>
#include <functional>
#include <istream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "trainscope/rundb/import.h"
#include "trainscope/rundb/rows.h"

namespace trainscope::rundb {
class RunStore;
}

namespace trainscope::rundb::importers {

// What a Kineto file says of who recorded it, for importTraces' rank rule: several files of one rank
// are the profiling cycles of one process (schedule(repeat=N) writes a file per cycle).
struct TraceOrigin {
  std::optional<int64_t> rank;  // distributedInfo.rank
  std::set<int64_t> pids;       // the processes its CPU events ran in
  std::set<int64_t> steps;      // its ProfilerStep#N numbers (a schedule's cycles continue them)
  int64_t begin_ns = INT64_MAX, end_ns = INT64_MIN;  // its events' span on the run's clock (none: begin > end)
};
// The rank a file is imported as, from its origin (UserError when it cannot be told).
using RankOf = std::function<int64_t(const TraceOrigin&)>;

class StepRows;
// What the Kineto files of one import share, for a rank whose cycles are several files: its steps
// (each number once), its collectives (numbered per group in the order they started, over all its
// files), its drops and its named threads. finishKineto writes what is kept to the end.
struct KinetoShared {
  std::map<int64_t, std::vector<Collective>> collectives;  // by rank
  std::map<int64_t, Drop> drops;                           // by rank
  std::set<std::tuple<int64_t, int32_t, int64_t, int64_t>> threads;  // (rank, kind, device, tid) named
};

// PyTorch profiler (Kineto) Chrome-trace JSON, streamed. Returns the rank it was imported as.
int64_t importKineto(RunStore& store, ImportStats& st, std::istream& in, const std::string& path, const RankOf& rank_of,
                     StepRows& steps, KinetoShared& shared);
// The collectives and drops the Kineto files left in `shared`, once every file is read.
void finishKineto(RunStore& store, ImportStats& st, KinetoShared& shared);
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

// The steps of an import, each (rank, step) kept once: a step met again with the same window (PyTorch
// 1.x wrote ProfilerStep#N as an op and an annotation) is skipped; with another window it is refused
// (UserError naming the file being read and both windows) — one would silently replace the other.
// One StepRows serves every file of a rank, whose cycles may be several files.
class StepRows {
 public:
  StepRows(RunStore& store, const std::string& path) : store_(store), path_(path) {}
  void file(const std::string& path) { path_ = path; }  // the file read now, for the messages
  // True when the step was stored (false: a repeat of one already stored).
  bool add(int64_t rank, int64_t step, int64_t start_ns, int64_t end_ns, int64_t peak_bytes = 0);
  int64_t count() const { return int64_t(seen_.size()); }

 private:
  RunStore& store_;
  std::string path_;
  std::map<std::pair<int64_t, int64_t>, std::pair<int64_t, int64_t>> seen_;  // (rank, step) → window
};

}  // namespace trainscope::rundb::importers
