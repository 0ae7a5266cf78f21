// trainscope/runtime/memory.h — measured memory: current and peak bytes allocated by LibTorch.
//
// CPU: a counting allocator is installed in front of LibTorch's default CPU allocator
// (c10::SetCPUAllocator), so every tensor allocation is counted exactly. CUDA: the caching
// allocator's own statistics (allocated_bytes, aggregate pool). Buffers that oneDNN or BLAS
// allocate outside LibTorch are not seen by either; docs/memory-model.md says what that means.
#pragma once

#include <cstdint>
#include <string>

namespace trainscope::runtime {

class MemoryMeter {
 public:
  // device: "cpu" or "cuda:N". Installs the counting CPU allocator once per process.
  explicit MemoryMeter(const std::string& device);
  int64_t currentBytes() const;
  int64_t peakBytes() const;  // since the last resetPeak()
  void resetPeak();           // peak := current

 private:
  bool cuda_ = false;
  int device_index_ = 0;
};

// Installs the counting allocator (idempotent). Called by MemoryMeter; exposed for tests.
void installCountingCpuAllocator();
int64_t cpuAllocatedBytes();
// A per-process limit on the bytes tensors may hold on the CPU (0: none). An allocation that would
// pass it throws c10::OutOfMemoryError, as a CUDA out-of-memory does; lastCpuRefusal() tells the
// bytes asked for and held then.
void setCpuMemoryLimit(int64_t bytes);
int64_t cpuMemoryLimit();
struct CpuRefusal {
  int64_t requested = 0, in_use = 0;
};
CpuRefusal lastCpuRefusal();
int64_t cpuPeakBytes();
void resetCpuPeak();
// The bytes of freed blocks the counting allocator keeps for reuse (default and at most 2 GiB): they
// are resident but hold no tensor, so under a memory limit train() lowers it to the room the memory
// model leaves (docs/memory-model.md). Blocks past a lowered limit go back to the system.
void setCpuCacheLimit(int64_t bytes);
int64_t cpuCacheLimit();

}  // namespace trainscope::runtime
