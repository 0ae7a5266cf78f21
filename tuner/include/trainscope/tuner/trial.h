// trainscope/tuner/trial.h — one trial: the typed hand-off (TrialSpec) and who runs it (TrialRunner).
//
// A TrialSpec is what the trial trains (a TrainConfig with its steps), where it records (its run
// database, traced at a level) and its limits. ProcessTrialRunner writes it once, as a run spec file
// (runconfig/config.h, RunSpec) that `trainscope run --config FILE` reads straight into its
// TrainConfig, and runs that as its own process tree: in its own process group, killed with it when
// the tuner dies (PR_SET_PDEATHSIG), under a timeout (common/process.h, shared with the local
// launcher). How it ended comes from its exit status, its signal and the clock:
//   0 ok · 3 out of memory · 2 invalid · a signal (or 128 + signal from the launcher, a rank's) a
//   crash · the timeout a hang · anything else failed.
// Another runner (concurrent trials on a multi-GPU node, a remote queue, a test's fake) implements
// run(); docs/architecture.md, "Where things plug in".
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>

#include "trainscope/runconfig/config.h"
#include "trainscope/tuner/slurm.h"
#include "trainscope/tuner/study.h"

namespace trainscope::tuner {

struct TrialSpec {
  runconfig::RunSpec run;   // what to train and where to record it (run.output.trace: the trial's database)
  std::string spec_path;  // where the spec is written (a name anything already holds is refused)
  std::string log_path;   // the trial's standard output and error
  double timeout_s = 0;   // 0: none
  bool profile = false;   // a profile trial (search.h): an external job traces its first steps (job.h)
  std::string fault;      // testing (--inject): crash | hang | oom | badpath for this trial, "" none
  std::string slurm_name; // --launcher slurm: the name of its srun step, the study's (job.h slurmStepName)
  // --launcher slurm: called (from a SlurmWatch's thread, while run() waits) with the ids its srun
  // started, for the study to record at once (slurm.h); a hang cancels those ids.
  std::function<void(const SlurmLaunch&)> on_slurm_launch;
};

class TrialRunner {
 public:
  virtual ~TrialRunner() = default;
  // Runs the trial and returns `t` with how it ended: status, exit code or signal, message, seconds.
  // The measured figures are read from its run database later, once (learner.h).
  virtual TrialRecord run(const TrialSpec& spec, TrialRecord t) = 0;
};

class ProcessTrialRunner : public TrialRunner {
 public:
  explicit ProcessTrialRunner(std::string trainscope) : trainscope_(std::move(trainscope)) {}
  TrialRecord run(const TrialSpec& spec, TrialRecord t) override;
  // Asks the running trial, if any, to stop (SIGTERM to its group: it records what it did and exits).
  // Async-signal-safe: the tuner's SIGINT handler calls it.
  static void stopRunning();

 private:
  std::string trainscope_;  // the front end that runs trials
};

// The process group of the trial running now (0: none), for stopRunning; a runner other than
// ProcessTrialRunner that starts a group (job.h) sets it while its trial runs.
void setRunningTrialGroup(pid_t group);

// How an exit status reads as a trial's end (exposed for tests).
void classifyExit(TrialRecord& t, int exit_code);

}  // namespace trainscope::tuner
