// watch.h — who a stuck collective waits for (internal to comm.cpp), and store accesses with a
// deadline.
//
// Every rank publishes, twice a second, a heartbeat through the rendezvous store: a counter, how many
// collectives it has entered in each of its groups, and the last one. When a collective (or a store
// read) fails on this rank, it reads the others' heartbeats twice, a few beats apart: a rank whose
// counter stood still is stopped or hung as a process (SIGSTOP, a debugger, swapped out); one that
// beats but has entered fewer collectives of the group is alive and stuck elsewhere (in compute, or
// waiting on yet another rank). Either way the error names it, instead of only the rank that waited.
//
// Rank 0 hosts the store. When it is stopped, LibTorch's store client waits for its answer without a
// deadline (TCPStore::check and get block in recv), so no store access on the failure path is made
// on the thread that reports: each runs on a thread of its own that holds what it uses (shared_ptr),
// is waited for up to a deadline, and is left behind, blocked, when rank 0 does not answer — the
// error then says so, and the process exits without joining it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "trainscope/runtime/comm.h"

namespace c10d {
class TCPStore;
}

namespace trainscope::runtime {

// Runs f() on a thread of its own and waits at most `deadline` for it: its value (or its exception,
// rethrown), or nullopt when the time is up. f must own (capture by value) everything it touches:
// on a deadline the thread is detached and ends, or not, with the process.
template <class T, class F>
std::optional<T> withDeadline(F f, std::chrono::milliseconds deadline) {
  auto promise = std::make_shared<std::promise<T>>();
  std::future<T> result = promise->get_future();
  std::thread([promise, f = std::move(f)]() mutable {
    try {
      promise->set_value(f());
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  }).detach();
  if (result.wait_for(deadline) != std::future_status::ready) return std::nullopt;
  return result.get();
}

std::string joinRanks(const std::vector<int>& r);

class Watch {
 public:
  static constexpr auto kBeat = std::chrono::milliseconds(500);
  static constexpr auto kStoreTimeout = std::chrono::seconds(3);
  // The longest a diagnosis waits for the store: two reads a few beats apart, each up to the timeout.
  static constexpr auto kDiagnosis = 4 * kBeat + 2 * std::chrono::milliseconds(kStoreTimeout);

  Watch(const RankEnv& env, int rank);
  ~Watch();  // never waits for a heartbeat blocked on a silent store
  void stop();

  // This rank enters collective #seq of `group` (called before it is issued).
  void entered(const std::string& group, const char* op, int64_t seq);

  // Which of `members` have not arrived at collective #seq of `group` (seq < 0: a store read, where
  // only stopped or hung processes are looked for), as a clause for the error message; "" when
  // every one of them looks on its way. Returns within kDiagnosis (plus a moment) whatever the store
  // does: when rank 0 does not answer, that is the clause.
  std::string whoIsMissing(const std::string& group, const std::vector<int>& members, int64_t seq);

  // Rank 0 (the store's host) did not answer a diagnosis: later store accesses need not wait again.
  bool storeSilent() const;

  // A collective or store access of this rank failed: nothing more is waited for on the way out (the
  // process groups are not torn down, pending work is not waited on).
  void markBroken();
  bool broken() const;

  // "rank 0 (which hosts the store) did not answer within N s: stopped or hung"
  static std::string silentStoreClause(std::chrono::milliseconds waited);

  struct State;

 private:
  std::shared_ptr<State> s_;
  std::thread thread_;
};

}  // namespace trainscope::runtime
