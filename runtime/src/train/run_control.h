// run_control.h — what stops or breaks a training run on purpose (internal): the stop signals
// (SIGINT/SIGTERM/SIGHUP) and the failures tests inject (--inject-failure).
#pragma once

#include <atomic>
#include <csignal>
#include <cstdint>
#include <string>
#include <thread>

namespace trainscope::runtime {

// The stop request this rank shares with the others at each step: the signal, plus kSentByLauncher
// when the launcher forwarded it (its parent sent it), so that a signal sent to one rank alone is
// blamed on that rank and not on the one that happened to read it first.
inline constexpr int kSentByLauncher = 1 << 8;

// SIGINT/SIGTERM/SIGHUP (a closed terminal, a dropped ssh) while training: the first asks every rank to stop at the end of its current step
// (the run is then recorded as usual); another one more than a second later ends the process at
// once. (Within a second it is the same request arriving twice: Ctrl-C reaches every rank from the
// terminal and again through the launcher.) The signals are blocked in every thread train() starts
// — c10d's store and Gloo's transport threads do not survive a handler interrupting them — and
// taken by one watcher thread with sigwait. One instance at a time, for the run's duration.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();

 private:
  void watch();
  sigset_t set_{}, old_{};
  std::atomic<bool> done_{false};
  std::thread watcher_;
};

// The first stop signal this process got during the run (with kSentByLauncher), 0: none.
int stopRequest();

// "RANK:STEP[:KIND]" → that rank fails at that step (tests of the launcher and the tuner): KIND
// "throw" (default) raises an error, "segv" dies of SIGSEGV, "hang" stops answering, "oom" lowers
// the CPU memory limit to what is held, so that the step's next allocation is refused for real.
// "merge" and "close" are taken elsewhere (the trace merge, the run database's close). Returns true
// when this rank should throw at this step.
bool injectedFailure(const std::string& spec, int rank, int64_t step);

}  // namespace trainscope::runtime
