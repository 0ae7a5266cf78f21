// trainscope/runtime/train.h — the runtime as a function: train a config, get its result.
//
//   RunResult r = train(cfg, output, &observer);
//
// One process is one rank: a single-process run, or one rank of a job started by the launcher,
// torchrun or Slurm (RANK/WORLD_SIZE/… or SLURM_PROCID in the environment). train() connects the
// ranks, records what `output` asks (the run database, a trace), trains cfg.steps steps and returns
// how it ended with the run summary (rundb/summary.h) — computed from the run database when one was
// written, so `run --json` and `report --json` print the same numbers. It prints nothing: the
// observer sees the run start, every step and one-line notices, and the command line prints them.
// Bad input throws UserError before anything is written; a failure while running throws.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/rundb/rows.h"
#include "trainscope/rundb/summary.h"
#include "trainscope/runconfig/config.h"

namespace trainscope::runtime {

struct RunInfo {
  const TrainConfig* config = nullptr;  // resolved; valid while the run goes on
  int64_t rank = 0;
  bool leader = true;                   // rank 0: prints and writes the run database
  std::string rank_source;              // "single process", "local launcher", "torchrun", "slurm"
  std::string device, device_name;
  int64_t parameters = 0;               // the whole model's
};

class RunObserver {
 public:
  virtual ~RunObserver() = default;
  virtual void started(const RunInfo&) {}
  virtual void stepDone(const RunInfo&, const rundb::Step&) {}  // this rank's view of the step
  virtual void notice(const std::string& /*line*/) {}           // "no usable GPU …", "GPU activity not traced …"
};

// Stopped: SIGINT, SIGTERM or SIGHUP reached a rank; every rank finished the step it was in, then the run
// was recorded as usual (steps, collectives, the merged trace). A second signal ends it at once.
enum class RunEnd { Completed, Diverged, Stopped };

// One checkpoint `run --save` wrote (docs/checkpoints.md).
struct CheckpointWritten {
  int64_t step = 0;      // steps done when it was saved
  double seconds = 0;    // writing it, from the first byte to the swap into place
  int64_t bytes = 0;     // every file, all ranks
  std::string dir;
};

struct RunResult {
  RunEnd end = RunEnd::Completed;
  std::string message;                  // why it ended early ("" when completed)
  RunInfo info;                         // info.config is null here: see `config`
  TrainConfig config;                   // as resolved
  int64_t steps_done = 0;               // steps done, counted from the run's start (--resume's included)
  int64_t first_step = 0;               // the first step this invocation ran (the checkpoint's, after --resume)
  double first_loss = 0, final_loss = 0;
  int64_t skipped_steps = 0;            // steps whose update was skipped (non-finite gradient)
  double loss_scale = 1;
  rundb::Step last;                     // this rank's last step
  rundb::RunSummary summary;            // leader: every rank's steps
  double allreduce_hidden_share = 0;    // data-parallel all-reduce hidden behind backward (mean)
  double grad_comm_s_per_step = 0;
  std::string database;                 // the run database written ("" when none)
  int stop_signal = 0;                  // RunEnd::Stopped: the signal
  std::vector<int> stop_ranks;          // RunEnd::Stopped: the ranks it was sent to, when not all of them
  std::vector<std::string> warnings;    // what went wrong without stopping the run (the trace)
  std::vector<CheckpointWritten> checkpoints;  // --save
  // This rank's process memory (docs/memory-model.md, "The process"): resident at the start and at
  // its peak (VmRSS, VmHWM), the tensors' peak, and the peak resident less the tensors' (0: unknown).
  int64_t resident_start_bytes = 0, resident_peak_bytes = 0, tensor_peak_bytes = 0, non_tensor_bytes = 0;
};

RunResult train(TrainConfig cfg, RunOutput output, RunObserver* observer = nullptr);

// Whether this process is one rank of a launched job (torchrun's or Slurm's variables are set).
bool isRankProcess();
// Checks everything a rank would check first (flags, workload, data file, the output path), so that
// bad input is reported once by the launcher rather than by every rank. Throws UserError.
void validateBeforeLaunch(TrainConfig cfg, RunOutput output);

}  // namespace trainscope::runtime
