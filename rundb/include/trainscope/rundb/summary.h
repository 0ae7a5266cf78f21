// trainscope/rundb/summary.h — the run summary: the one set of numbers that `run --json`,
// `report`, the tuner and the viewer print for a run.
//
// Definitions (docs/trace-schema.md, "Run summary"):
//   counted steps   every step but the first `skip` (default 1: step 0 pays one-time costs), unless
//                   the run has no more than that many steps; imported traces skip none.
//   step time T_k   of step k: the slowest rank's step time (the job advances at its pace).
//   tokens/s        Σ tokens_k / Σ T_k over the counted steps.
//   median, p90     of T_k (linear interpolation between order statistics).
//   MFU (HFU)       Σ model (hardware) FLOPs of every rank / Σ T_k / (world × peak per device); null
//                   when the peak is unknown (meta.peak_flops, else derived from a step row's mfu).
//   peak memory     per rank, the largest peak_bytes of its counted steps.
//   breakdown       per rank, averaged per counted step (the sum over the rank's windows divided by its
//                   counted steps, whether or not each launched GPU work), over a window per step:
//                   - runs with GPU work (kernels, copies, sets): GPU windows. Each device event belongs
//                     to the step of the CPU call that launched it (same correlation id, the call inside
//                     the step's CPU window). The steps' first device events, sorted, are tiled: each
//                     window runs from one to the next; the last to the end of the last device event of
//                     any counted step, or of device work without a launch that starts before the
//                     counted steps' CPU span ends or as that work ends (repeated until the span stops
//                     growing); the first reaches back to device work without a launch that starts
//                     inside the first counted step's CPU window (an input copy). The windows never overlap and leave no gap, so the idle time between
//                     steps is counted, work that runs into the next step is split at its start, and
//                     summed over the steps no category exceeds what ran. Device events without their
//                     launch in the trace do not place a window (counted apart: unattributed) but count
//                     where they ran. Without launch records, or when no device event can be tied to a
//                     counted step, the CPU windows are used, and a note says so.
//                   - other runs: the rank's CPU step windows [start, start + step time).
//                   compute = time covered by compute: GPU kernels other than NCCL's; on runs without
//                   device events the ranges forward/backward/optimizer, else the CPU ops (a CPU job's
//                   profiler trace), else the annotations that are neither steps nor collectives, with a
//                   note. comm = time covered by NCCL kernels on GPU runs (the CPU's collective calls
//                   span launches, not transfers); on CPU runs by collectives, collective annotations
//                   (gloo:*, nccl:*, c10d::*, record_param_comms). overlap = covered by both, memory =
//                   covered by copies and sets and by neither of the others, idle = the rest:
//                   compute + comm − overlap + memory + idle = window. Absent when the file holds no
//                   events. wait and bubble (step_analysis.h) are the parts of comm − overlap spent
//                   waiting for a peer's collective and for a pipeline neighbour, from the linked calls.
//   GPU step time   per rank, the GPU windows' total length per counted step (beside the CPU's).
//   straggler       a rank whose compute per step exceeds the median rank's by more than 10%.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "trainscope/rundb/rows.h"

namespace trainscope::rundb {

class RunReader;

struct Breakdown {
  double compute_s = 0, comm_s = 0, overlap_s = 0, memory_s = 0, idle_s = 0;  // per counted step
  // Parts of comm − overlap (step_analysis.h): waiting for a peer at a linked collective, and the
  // pipeline bubble (waiting at a linked send or receive). The rest is the exposed transfer.
  double wait_s = 0, bubble_s = 0;
  double exposedCommS() const { return std::max(0.0, comm_s - overlap_s - wait_s - bubble_s); }
};
// One counted step's breakdown on one rank (not divided: the step's own seconds).
struct StepBreakdown {
  int64_t step = 0;
  int64_t start_ns = 0, end_ns = 0;  // the window it is taken over
  Breakdown b;
};

// The straggler of a counted step, from the collectives linked across ranks (step_analysis.h has the
// definitions).
struct StepStraggler {
  int64_t step = 0;
  int64_t rank = -1;          // -1: none (why_none says why)
  int64_t calls = 0;          // the step's linked collectives
  int64_t calls_last = 0;     // of them, those it arrived last at
  double late_s = 0;          // Σ (its arrival − the second-last arrival) over those
  double others_wait_s = 0;   // Σ over the others of their wait for it at those calls
  struct Doing {
    std::string name;
    double straggler_s = 0, others_s = 0;  // the others': their mean
  };
  std::vector<Doing> doing;   // at most 5, by straggler_s − others_s, largest first (> 0 only)
  std::string why_none;
};
// The chain of work and waits that set a counted step's length, across ranks over the linked
// collectives and pipeline sends (step_analysis.h has the walk). Segments are contiguous in time, from
// the step's start on the rank the chain begins on to the latest step end.
struct PathSegment {
  int64_t rank = 0;
  std::string kind;   // "work" (the rank's own time: compute, or what it ran), or "transfer" (a linked call
                      // from its last arrival to its end, or the whole call where this rank arrived last)
  std::string name;   // work: the range that covers most of it ("" none); transfer: "all_reduce (dp)"
  int64_t start_ns = 0, end_ns = 0;
  int64_t peer = -1;  // transfer: the rank the chain came from (its last arrival); -1 when none
};
struct StepCriticalPath {
  int64_t step = 0;
  int64_t start_ns = 0, end_ns = 0;
  std::vector<PathSegment> segments;  // in time order
};

struct RankSummary {
  int64_t rank = 0;
  int64_t steps = 0;  // counted
  double step_s_mean = 0, step_s_median = 0, step_s_p90 = 0, step_s_min = 0, step_s_max = 0;
  int64_t peak_bytes = 0;
  std::optional<Breakdown> breakdown;
  std::vector<StepBreakdown> per_step;   // each counted step's, when its windows are one per step
  std::optional<double> gpu_step_s;      // mean GPU window of the counted steps (GPU runs)
  int64_t unattributed_events = 0;       // device events without their launch in the trace
  double unattributed_s = 0;             // and their total time
  // Compute per counted step over 1.1 × the median rank's (more than one rank): a load imbalance. Not
  // the straggler of a step (step_analysis.h: the rank last at its collectives), which may be another.
  bool compute_heavy = false;
};

struct RunSummary {
  std::string workload;
  int64_t world = 1;
  int64_t steps = 0;            // counted steps
  int64_t excluded_steps = 0;   // leading steps left out (warm-up)
  double tokens_per_s = 0;
  double step_s_mean = 0, step_s_median = 0, step_s_p90 = 0;
  std::optional<double> mfu, hfu;
  std::optional<double> peak_flops;  // per device, FLOP/s
  int64_t peak_bytes = 0;            // max over ranks
  std::string breakdown_source;      // "kernels", "ranges", "host_ops" or "" (no events)
  std::string breakdown_window;      // "gpu" or "cpu": the windows the breakdown is taken over
  std::vector<std::string> notes;    // what the trace cannot tell (one line each)
  std::vector<RankSummary> ranks;
  std::vector<StepStraggler> step_stragglers;  // per counted step (step_analysis.h); in report --json's steps
  std::vector<StepCriticalPath> critical_paths;  // per counted step (step_analysis.h); in report --json's steps
};

// One rank's device work as the breakdown reads it: each kernel's, copy's and set's [start, end)
// and correlation id (-1: none), a kernel's NCCL flag, and the (correlation, start) of every API call
// with an id — for a caller that holds them already (the viewer's lanes), so that the summary needs
// no second pass over the file's largest tables.
struct DeviceWork {
  struct Item {
    int64_t start, end, correlation;
  };
  struct Kernel {
    Item d;
    bool comm;  // an NCCL kernel (isCommKernel of its name)
  };
  std::vector<Kernel> kernels;
  std::vector<Item> memcpy, memset;
  std::vector<std::pair<int64_t, int64_t>> launches;
};

// From a run database. skip: leading steps to leave out (see above; imports use 0).
RunSummary summarize(RunReader& reader, int64_t skip = 1);
// The same with each rank's device work given (in any order; rows of ranks without steps are left
// out) instead of read from the file; the rest is read from it. Equal starts are summed in the given
// order where the file's is storage order: the unattributed time may differ in its last bits.
// cancel: once true, the pass stops between its phases and ranks (not only at its file queries, which
// the reader's interruptWhen stops) and throws SummaryCancelled; the viewer's, when a file is closed.
struct SummaryCancelled : std::runtime_error {
  SummaryCancelled() : std::runtime_error("the run summary was cancelled") {}
};
RunSummary summarize(RunReader& reader, int64_t skip, std::map<int64_t, DeviceWork> device_work,
                     const std::atomic<bool>* cancel = nullptr);
// From step rows alone (a run without a database): no breakdown.
RunSummary summarizeSteps(const std::vector<Step>& steps, int64_t world, const std::string& workload,
                          std::optional<double> peak_flops, int64_t skip = 1);
// One JSON object, every time in seconds and every size in bytes.
std::string summaryJson(const RunSummary& s);

// Interval arithmetic the breakdown is built on (exposed for tests and the viewer).
struct Interval {
  int64_t begin, end;
};
std::vector<Interval> unionOf(std::vector<Interval> v);  // sorted, non-overlapping
int64_t coveredWithin(const std::vector<Interval>& merged, int64_t begin, int64_t end);
std::vector<Interval> intersect(const std::vector<Interval>& a, const std::vector<Interval>& b);
double percentile(std::vector<double> v, double p);
int64_t spanNs(int64_t begin, int64_t end);  // end − begin in int64, saturated (any file's times)
bool isCommKernel(const std::string& name);

}  // namespace trainscope::rundb
