// supervise.cpp — a one-process run under a memory limit, watched from outside.
//
// The local launcher names a rank the out-of-memory killer ends (launch.cpp). A one-process run has
// no launcher: killed with SIGKILL, it would stop printing mid-line and the shell would say only
// "Killed". So, while a cgroup memory limit is in force, the process forks before anything else:
// the child trains, the parent waits for it, passes on every stop signal it receives, and says
// what ended it. Exit statuses are the child's (128 + signal when it was killed).
#include "trainscope/runtime/launch.h"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <iostream>
#include <ostream>

#include "trainscope/runconfig/host.h"

namespace trainscope::runtime {
namespace {

volatile sig_atomic_t g_child = 0;

void forward(int sig) {
  if (g_child > 0) kill(pid_t(g_child), sig);
}

constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

}  // namespace

std::optional<int> superviseUnderMemoryLimit(std::ostream& err) {
  const HostLimit limit = cgroupMemoryLimit();
  if (limit.value <= 0) return std::nullopt;
  const int64_t oom_before = oomKillCount();
  std::cout.flush();
  std::cerr.flush();
  // Stop signals wait until the parent's forwarding is in place (the child restores the mask).
  sigset_t stops, before;
  sigemptyset(&stops);
  for (int s : kForwarded) sigaddset(&stops, s);
  sigprocmask(SIG_BLOCK, &stops, &before);
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) {  // cannot watch: train in this process, as without a limit
    sigprocmask(SIG_SETMASK, &before, nullptr);
    return std::nullopt;
  }
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the parent (kill -9 of it ends the run too)
    if (getppid() != parent) _exit(128 + SIGKILL);
    sigprocmask(SIG_SETMASK, &before, nullptr);
    return std::nullopt;
  }
  g_child = child;
  struct sigaction sa {};
  sa.sa_handler = forward;
  sa.sa_flags = SA_RESTART;
  for (int s : kForwarded) sigaction(s, &sa, nullptr);
  sigprocmask(SIG_SETMASK, &before, nullptr);

  int status = 0;
  while (waitpid(child, &status, 0) < 0)
    if (errno != EINTR) {
      err << "error: lost the training process " << child << ": " << std::strerror(errno) << "\n";
      return 1;
    }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  const int sig = WTERMSIG(status);
  const std::string killer = killerOf(sig, oom_before, oomKillCount(), limit.value, limit.source);
  for (int s : kForwarded)
    if (s == sig) return 128 + sig;  // stopped at once on a signal of its own: the shell's business
  if (killer != strsignal(sig))
    err << "error: the run was killed by " << killer << " (status " << 128 + sig
        << "); steps recorded before it are kept (fix: lower --mbs, add --ckpt full, or raise the limit)\n";
  else
    err << "error: the run was killed by " << killer << " (status " << 128 + sig << ")\n";
  return 128 + sig;
}

}  // namespace trainscope::runtime
