// run_control.cpp — see run_control.h.
#include "train/run_control.h"

#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "trainscope/common/error.h"
#include "trainscope/runtime/launch.h"
#include "trainscope/runtime/memory.h"

namespace trainscope::runtime {
namespace {

std::atomic<int> g_stop_signal{0};

}  // namespace

int stopRequest() { return g_stop_signal.load(); }

StopSignals::StopSignals() {
  g_stop_signal = 0;
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  sigaddset(&set_, SIGHUP);  // a closed terminal, a dropped ssh: a stop like the others
  pthread_sigmask(SIG_BLOCK, &set_, &old_);
  watcher_ = std::thread([this] { watch(); });
}

StopSignals::~StopSignals() {
  done_ = true;
  pthread_kill(watcher_.native_handle(), SIGTERM);  // wakes sigwait; ignored once done_
  watcher_.join();
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

void StopSignals::watch() {
  auto first = std::chrono::steady_clock::time_point{};
  const bool launched = std::getenv("TRAINSCOPE_ERROR_FD") != nullptr;  // a child of the local launcher
  for (;;) {
    siginfo_t si{};
    const int sig = sigwaitinfo(&set_, &si);
    if (sig <= 0) continue;
    if (done_) return;
    const auto now = std::chrono::steady_clock::now();
    // The terminal is gone: what is printed from here on may go nowhere, and must not end the process.
    if (sig == SIGHUP) std::signal(SIGPIPE, SIG_IGN);
    const bool forwarded = launched && si.si_code == SI_USER && si.si_pid == getppid();
    int expected = 0;
    if (g_stop_signal.compare_exchange_strong(expected, sig | (forwarded ? kSentByLauncher : 0))) {
      first = now;
    } else if (now - first > std::chrono::seconds(1)) {
      std::signal(sig, SIG_DFL);
      pthread_sigmask(SIG_UNBLOCK, &set_, nullptr);
      raise(sig);  // the default action: the process ends
    }
  }
}

bool injectedFailure(const std::string& spec, int rank, int64_t step) {
  // "merge": the trace merge fails (finishTrace); "close": the run database's close fails as on a
  // full disk (closeAsOnAFullDisk).
  // "save": rank 0 dies of SIGKILL halfway through writing a --save checkpoint (saveCheckpoint).
  if (spec.empty() || spec == "merge" || spec == "close" || spec == "save") return false;
  int r = -1;
  long long k = -1;
  char kind[16] = {};
  const int n = std::sscanf(spec.c_str(), "%d:%lld:%15s", &r, &k, kind);
  const std::string what = n == 3 ? kind : "throw";
  if (n < 2 || r < 0 || k < 0 || (what != "throw" && what != "segv" && what != "hang" && what != "oom" && what != "linger"))
    throw UserError("--inject-failure",
                    "expects RANK:STEP[:throw|segv|hang|oom|linger], merge, close or save, got \"" + spec + "\"",
                    "e.g. --inject-failure 1:2");
  if (r != rank || k != step) return false;
  if (what == "segv") {
    std::signal(SIGSEGV, SIG_DFL);  // die of the signal even where a handler is installed (a sanitizer's)
    std::raise(SIGSEGV);
  }
  if (what == "oom") {
    installCountingCpuAllocator();
    setCpuMemoryLimit(cpuAllocatedBytes() + 1);
    return false;
  }
  if (what == "linger") {  // reports its error as a failing rank does, then never exits (a stuck teardown)
    reportRankError("injected failure on rank " + std::to_string(rank) + " at step " + std::to_string(step) +
                    " (the rank then lingers)");
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  if (what == "hang")
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  return true;
}

}  // namespace trainscope::runtime
