// slurm_step.cpp — ending a trial's srun step when the tuner stops waiting for it (job.h).
//
// srun is only the step's client: the tasks are slurmstepd's children on the allocated nodes, outside
// the trial's process group, and killing srun (the tuner's timeout kills the trial's group with
// SIGKILL) leaves them running and holding their CPUs — under Slurm's default InactiveLimit of 0 even
// the job srun allocated stays. So the step is named after its trial (srun --job-name) and cancelled
// by that name through Slurm's own commands: its tasks first (scancel --signal=KILL, delivered by the
// slurmd at once, a job that ignores SIGTERM included), then the job (scancel, which ends the
// allocation srun made). Inside an allocation (the tuner itself a step of a job) srun's name is the
// step's: that step is found with squeue and cancelled by its id.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "trainscope/common/process.h"
#include "trainscope/tuner/job.h"

namespace trainscope::tuner {
namespace {

// Runs a Slurm command (argv, looked up in PATH), its output captured; "" for a command that could
// not run. Bounded: a controller that does not answer is given up on after `timeout_s`.
std::string slurmCommand(const std::vector<std::string>& argv, double timeout_s, bool* ok) {
  int fds[2];
  *ok = false;
  if (::pipe2(fds, O_CLOEXEC) != 0) return "";
  process::SpawnOptions so;
  so.argv = argv;
  so.search_path = true;
  so.own_group = true;
  so.stdout_fd = fds[1];
  const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  so.stderr_fd = null;
  pid_t pid = -1;
  try {
    pid = process::spawn(so);
  } catch (const std::exception&) {
  }
  ::close(fds[1]);
  if (null >= 0) ::close(null);
  std::string out;
  if (pid > 0) {
    // squeue's output is a line per step; a pipe's buffer holds it, so reading after the wait is safe
    // for the few lines asked for.
    const process::Exit e = process::wait(pid, timeout_s, /*group=*/true);
    char buf[4096];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) out.append(buf, size_t(n));
    *ok = e.kind == process::Exit::Exited && e.code == 0;
  }
  ::close(fds[0]);
  return out;
}

}  // namespace

std::string slurmStepName(const std::string& trial_dir) {
  // FNV-1a of the trial's folder: the same name for the same trial in every run of the tuner.
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char ch : trial_dir) h = (h ^ ch) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return std::string("trainscope-trial-") + hex;
}

std::string cancelSlurmStep(const std::string& name, double timeout_s) {
  const std::string user = "--user=" + std::to_string(::getuid());
  bool killed = false, cancelled = false, ok = false;
  slurmCommand({"scancel", "--signal=KILL", "--name=" + name, user}, timeout_s, &killed);
  slurmCommand({"scancel", "--name=" + name, user}, timeout_s, &cancelled);
  if (const char* job = std::getenv("SLURM_JOB_ID"); job && *job) {
    const std::string steps =
        slurmCommand({"squeue", "--noheader", "--steps", "--jobs=" + std::string(job), "--format=%i %j"}, timeout_s, &ok);
    std::istringstream in(steps);
    for (std::string id, step_name; in >> id >> step_name;)
      if (step_name == name) {
        bool done = false;
        slurmCommand({"scancel", "--signal=KILL", id}, timeout_s, &done);
        slurmCommand({"scancel", id}, timeout_s, &done);
        cancelled = cancelled || done;
      }
  }
  if (!killed && !cancelled) return "scancel could not cancel Slurm job/step " + name;
  return "";
}

}  // namespace trainscope::tuner
