// trainscope/runtime/launch.h — starting and supervising rank processes.
//
// Local: `trainscope run --nproc N ...` forks N copies of this executable with torchrun's variables
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, a free MASTER_PORT) and
// supervises them: when one exits non-zero or is killed, the others get SIGTERM, then SIGKILL after
// a grace period, and the launcher exits non-zero naming the rank. Children also die with the
// launcher (PR_SET_PDEATHSIG), so nothing is orphaned.
// Slurm: `--launcher slurm` runs the same command under `srun --ntasks N --kill-on-bad-exit=1`; each
// task finds its rank in SLURM_PROCID (see parallel.h).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "trainscope/rundb/rank_failures.h"

namespace trainscope::runtime {

struct LaunchOptions {
  int nproc = 1;
  int grace_seconds = 5;        // after a rank failed: SIGTERM → SIGKILL
  int stop_grace_seconds = 120; // after SIGINT/SIGTERM: time for the ranks to finish a step and record
  std::vector<std::string> argv;  // the command line to repeat in every rank (argv[0] ignored)
};

// In a rank started by launchLocal: records this rank's fatal error (with the time) in the pipe the
// launcher passed as TRAINSCOPE_ERROR_FD, so that it can tell which rank failed first — the others
// usually fail moments later with "connection closed by peer". Only the first call in a process
// counts. No-op elsewhere.
void reportRankError(const std::string& message);
// In such a rank: hands the launcher the line that says how a stopped run ended (rank 0's "stopped by
// … after step N; …"), which the launcher prints once for the whole run. Returns false (and does
// nothing) outside a launched rank: the caller prints the line itself.
bool reportRankStop(const std::string& line);
// Whether this process is a rank of the local launcher, which prints its fatal error for it.
bool launchedByLocalLauncher();

// What killed a rank that died of `signal`: "the out-of-memory killer (cgroup limit 700.0 MiB:
// memory.max of cgroup /a)" for a SIGKILL while a memory limit is in force and the cgroup's oom_kill
// count rose from `oom_kills_before` to `oom_kills_after` (or cannot be read: -1), else the signal's
// name ("Segmentation fault", "Killed").
std::string killerOf(int signal, int64_t oom_kills_before, int64_t oom_kills_after, int64_t limit_bytes,
                     const std::string& limit_source);

// A message as a user should read it: a library's C++ backtrace (c10::Error's "Exception raised
// from … frame #0: …") is cut off, and "[/build/tree/src/train.cpp:377]" and LibTorch's
// "[/pytorch/third_party/gloo/…/pair.cc:547]" become "[train.cpp:377]" and "[pair.cc:547]".
std::string userFacing(const std::string& message);
// The message without a library's C++ backtrace (what userFacing cuts off first).
std::string withoutLibraryBacktrace(std::string message);

// A one-process local run under a cgroup memory limit forks here (supervise.cpp): returns nullopt
// in the process that goes on to train (and at once when no limit is in force), and in the parent
// the exit status, after waiting for the child, passing on stop signals and saying what killed it
// ("killed by the out-of-memory killer (cgroup limit …)" instead of silence).
std::optional<int> superviseUnderMemoryLimit(std::ostream& err);

// Both return the process exit status the launcher should exit with. After a failure, launchLocal
// also fills `failure` (when given): the rank it names as failing first, and each rank that failed
// or reported an error with its exit status and error, for the run database (rank_failures.h).
int launchLocal(const LaunchOptions& o, std::ostream& err, rundb::RunFailure* failure = nullptr);
int launchSlurm(const LaunchOptions& o, std::ostream& err);

}  // namespace trainscope::runtime
