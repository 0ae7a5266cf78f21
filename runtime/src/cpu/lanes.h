// lanes.h — core lanes: a CPU micro-batch split over persistent worker threads, one core each.
//
// On a CPU, LibTorch parallelises every op over all cores (OpenMP fork/join per op, one team). At
// the sizes of a small model most ops are short, so the team spends a good share of the step in
// barriers and in ops too small to split. Core lanes invert that: W worker threads, each with
// intra-op parallelism 1, run forward and backward over their own rows of the micro-batch at the
// same time — data parallelism inside one process, with no collective: gradients are summed in a
// fixed order afterwards, so a run is bit-for-bit repeatable.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace at {
class ThreadLocalState;
}

namespace trainscope::runtime {

class CoreLanes {
 public:
  // Starts `lanes` threads, each pinned to one intra-op thread (LibTorch, OpenMP, MKL, oneDNN).
  explicit CoreLanes(int lanes);
  ~CoreLanes();
  CoreLanes(const CoreLanes&) = delete;
  CoreLanes& operator=(const CoreLanes&) = delete;

  int size() const { return int(threads_.size()); }

  // Runs fn(lane) on every lane at once and returns when all are done. The caller's thread-local
  // LibTorch state (grad mode, profiler callbacks) is carried into the lanes. If lanes throw, the
  // first exception (lowest lane) is rethrown here after all have finished.
  void run(const std::function<void(int)>& fn);

 private:
  void loop(int lane);

  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int)>* job_ = nullptr;
  const at::ThreadLocalState* state_ = nullptr;  // the caller's, carried into the lanes
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::vector<std::exception_ptr> errors_;
};

}  // namespace trainscope::runtime
