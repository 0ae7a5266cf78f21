// trainscope/common/process.h — the one way trainscope starts, waits for and reads the end of a child.
//
// The local launcher starts its ranks, the Slurm launcher srun, and the tuner its trials through here:
//   - spawn() prepares everything (argv, the environment, the program's path) before fork, so that the
//     child calls only async-signal-safe functions (setpgid, prctl, dup2, fcntl, execve, _exit): the
//     caller may have threads, and a lock one of them held at fork would never be released in the child;
//   - the child inherits only what is asked for: descriptors opened with O_CLOEXEC stay closed in it
//     unless listed in keep_fds, and by default it dies with its parent (PR_SET_PDEATHSIG);
//   - a child in its own group is waited for and killed as one, grandchildren included;
//   - decode() turns a wait status into the three endings callers tell apart.
// What this is not: a supervisor of many children. The launcher reaps its ranks itself (it must see
// them stop and continue), and uses spawn and decode only.
#pragma once

#include <sys/types.h>

#include <csignal>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace trainscope::process {

struct SpawnOptions {
  // argv[0] is the program's path, or with search_path its name, looked up in PATH (the child's, when
  // env sets one) by the parent like execvp when it holds no '/'.
  std::vector<std::string> argv;
  bool search_path = false;
  std::vector<std::pair<std::string, std::string>> env;  // set or replaced in the child's environment
  bool own_group = false;      // the child leads a new process group: wait(…, group=true) kills it whole
  int death_signal = SIGKILL;  // sent to the child when the thread that spawned it ends (0: none)
  int stdout_fd = -1;          // becomes the child's 1 when >= 0 (else it shares ours)
  int stderr_fd = -1;          // becomes the child's 2 when >= 0
  std::vector<int> keep_fds;   // descriptors the child keeps although opened with O_CLOEXEC
};

// Starts the child and returns its pid. A failed fork throws std::system_error (errno), whose what()
// reads "fork failed: <strerror>". A program that cannot be executed (missing, not executable) is a
// child that exits with status 127, as in a shell.
pid_t spawn(const SpawnOptions& options);

// How a child ended.
struct Exit {
  enum Kind { Exited, Signaled, TimedOut };
  Kind kind = Exited;
  int code = 0;          // the exit status, when it exited
  int signal = 0;        // the signal that ended it, if one did (TimedOut: usually wait()'s SIGKILL)
  double timeout_s = 0;  // TimedOut: the limit it ran past

  // "exit status 3", "killed by Segmentation fault", "no result within 5 s".
  std::string describe() const;
  // The status a shell would report: the exit status, or 128 + the signal.
  int shellStatus() const;
};

// A status from waitpid for a child that ended (not one that stopped or continued).
Exit decode(int wait_status);

// Waits for the child `pid` to end and reaps it. timeout_s > 0: past it, the child is killed (SIGKILL)
// and the result is TimedOut. group (the child was spawned with own_group): the kill reaches its whole
// group, and once the child has ended whatever it left in its group is killed too, before it is
// reaped (the group's id cannot be reused until then). To stop a child early, signal it (the tuner's
// SIGINT handler sends its group SIGTERM); wait returns when it ends.
Exit wait(pid_t pid, double timeout_s, bool group);

// A TCP port on 127.0.0.1 nobody listens on now (the kernel's choice), for a rendezvous the child
// binds moments later (the local launcher's rank 0 store, an external trial's torchrun). Throws
// std::runtime_error when none can be had.
int freePort();

}  // namespace trainscope::process
