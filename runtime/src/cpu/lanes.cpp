// lanes.cpp — see lanes.h.
#include "cpu/lanes.h"

#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>

#include <string>

#include "trainscope/tracer/thread_names.h"

namespace trainscope::runtime {

CoreLanes::CoreLanes(int lanes) : errors_(size_t(lanes)) {
  const int caller_threads = at::get_num_threads();
  int ready = 0;
  for (int i = 0; i < lanes; ++i)
    threads_.emplace_back([this, i, &ready] {
      // One intra-op thread on this thread only: OpenMP's nthreads and MKL's setting are per
      // thread; oneDNN asks OpenMP. (It also stores 1 as the default for threads started later,
      // which the constructor restores below.) LibTorch initialises a thread's count lazily, on its
      // first parallel op, from that stored default: get_num_threads() runs that initialisation
      // now, or it would run later and give this lane the caller's count again (lanes then forked
      // their own OpenMP teams: 2 lanes × 2 threads on 2 cores).
      (void)at::get_num_threads();
      at::set_num_threads(1);
      tracer::nameThread("cpu lane " + std::to_string(i));  // its ops' rows: `thread N (cpu lane i)`
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++ready;
      }
      done_cv_.notify_all();
      loop(i);
    });
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return ready == lanes; });
  at::set_num_threads(caller_threads);
}

CoreLanes::~CoreLanes() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void CoreLanes::run(const std::function<void(int)>& fn) {
  at::ThreadLocalState state;  // grad mode, dispatch keys, RecordFunction settings of the caller
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    state_ = &state;
    pending_ = size();
    ++generation_;
  }
  start_cv_.notify_all();
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
    state_ = nullptr;
  }
  for (auto& e : errors_)
    if (e) {
      std::exception_ptr first = e;
      for (auto& x : errors_) x = nullptr;
      std::rethrow_exception(first);
    }
}

void CoreLanes::loop(int lane) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job;
    const at::ThreadLocalState* state;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      state = state_;
    }
    try {
      at::ThreadLocalStateGuard guard(*state);
      (*job)(lane);
    } catch (...) {
      errors_[size_t(lane)] = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      --pending_;
    }
    done_cv_.notify_all();
  }
}

}  // namespace trainscope::runtime
