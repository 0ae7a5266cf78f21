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
//                   events.
//   GPU step time   per rank, the GPU windows' total length per counted step (beside the CPU's).
//   straggler       a rank whose compute per step exceeds the median rank's by more than 10%.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainscope/rundb/rows.h"

namespace trainscope::rundb {

class RunReader;

struct Breakdown {
  double compute_s = 0, comm_s = 0, overlap_s = 0, memory_s = 0, idle_s = 0;  // per counted step
};

struct RankSummary {
  int64_t rank = 0;
  int64_t steps = 0;  // counted
  double step_s_mean = 0, step_s_median = 0, step_s_p90 = 0, step_s_min = 0, step_s_max = 0;
  int64_t peak_bytes = 0;
  std::optional<Breakdown> breakdown;
  std::optional<double> gpu_step_s;      // mean GPU window of the counted steps (GPU runs)
  int64_t unattributed_events = 0;       // device events without their launch in the trace
  double unattributed_s = 0;             // and their total time
  bool straggler = false;
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
};

// From a run database. skip: leading steps to leave out (see above; imports use 0).
RunSummary summarize(RunReader& reader, int64_t skip = 1);
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
