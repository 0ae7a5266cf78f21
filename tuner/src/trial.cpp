// trial.cpp — a trial run as its own process tree (trial.h).
#include "trainscope/tuner/trial.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <optional>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/common/process.h"
#include "trainscope/tuner/job.h"

namespace trainscope::tuner {
namespace {

std::atomic<pid_t> g_trial_group{0};  // the running trial's process group (0: none)
static_assert(std::atomic<pid_t>::is_always_lock_free);

}  // namespace

void ProcessTrialRunner::stopRunning() {
  const pid_t g = g_trial_group.load();
  if (g > 0) kill(-g, SIGTERM);  // the trial stops at its next step and records what it did
}

void setRunningTrialGroup(pid_t group) { g_trial_group = group; }

void classifyExit(TrialRecord& t, int exit_code) {
  t.exit_code = exit_code;
  if (exit_code == 0) t.status = TrialStatus::Ok;
  else if (exit_code == kExitOutOfMemory) t.status = TrialStatus::OutOfMemory;
  else if (exit_code == 2) t.status = TrialStatus::Invalid;
  else if (exit_code > 128 && exit_code < 160) {  // the launcher passes a rank's signal on
    t.status = TrialStatus::Crash;
    t.signal = exit_code - 128;
    t.message = std::string("a rank was killed by ") + strsignal(t.signal);
  } else {
    t.status = TrialStatus::Failed;
  }
  if (t.message.empty() && t.status != TrialStatus::Ok) t.message = "exit status " + std::to_string(exit_code);
}

TrialRecord ProcessTrialRunner::run(const TrialSpec& spec, TrialRecord t) {
  const auto t0 = std::chrono::steady_clock::now();
  // Written and created here, not in the child: a failure is the tuner's (exit 2), not the candidate's.
  // In the study's own work folder, under names no trial has used (freshStem): an existing file is
  // refused for the spec; the log replaces only a regular file (a link or FIFO planted there is refused).
  files::OutputRule spec_rule;
  spec_rule.field = "--study";
  files::writeAtomically(spec.spec_path, runconfig::toJson(spec.run), spec_rule);
  files::OutputRule log_rule = spec_rule;
  log_rule.inputs = {spec.spec_path};
  log_rule.overwrite = true;
  const int log = files::createFile(spec.log_path, log_rule);
  process::SpawnOptions so;
  so.argv = {trainscope_, "run", "--config", spec.spec_path};
  so.own_group = true;          // the trial's own process group: killed as one
  so.death_signal = SIGKILL;    // and with the tuner, even by kill -9
  so.stdout_fd = so.stderr_fd = log;
  // --launcher slurm: `trainscope run` starts its ranks as one srun step, named the study's (job.h).
  const bool slurm = spec.run.config.launcher == runconfig::Launcher::Slurm && !spec.slurm_name.empty();
  if (slurm) so.env.push_back({"TRAINSCOPE_SLURM_STEP_NAME", spec.slurm_name});
  pid_t pid = -1;
  try {
    pid = process::spawn(so);
  } catch (const std::exception& e) {
    ::close(log);
    t.status = TrialStatus::Failed;
    t.message = e.what();
    return t;
  }
  ::close(log);
  g_trial_group = pid;
  std::optional<SlurmWatch> watch;  // what srun starts, recorded by id as squeue shows it (slurm.h)
  if (slurm) watch.emplace(SlurmLaunch{"", spec.slurm_name, {}, {}}, spec.on_slurm_launch);
  const process::Exit end = process::wait(pid, spec.timeout_s, /*group=*/true);
  g_trial_group = 0;
  const SlurmLaunch launched = watch ? watch->stop() : SlurmLaunch{};
  // srun killed with the trial's group: its step's tasks are not in it (slurm_step.cpp).
  std::string cancel;
  if (slurm && end.kind != process::Exit::Exited)
    if (cancel = cancelSlurmLaunch(launched); !cancel.empty()) cancel = "; " + cancel;
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (end.kind == process::Exit::TimedOut) {
    t.status = TrialStatus::Hang;
    t.message = "no result within " + std::to_string(int(spec.timeout_s)) + " s" + cancel;
  } else if (end.kind == process::Exit::Signaled) {
    t.status = TrialStatus::Crash;
    t.signal = end.signal;
    t.message = std::string("killed by ") + strsignal(t.signal) + cancel;
  } else {
    classifyExit(t, end.code);
  }
  return t;
}

}  // namespace trainscope::tuner
