// memory.cpp — the counting CPU allocator and the CUDA allocator statistics behind MemoryMeter.
#include "trainscope/runtime/memory.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

namespace trainscope::runtime {
namespace {

std::atomic<int64_t> g_current{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_limit{0};
std::atomic<int64_t> g_refused_request{0}, g_refused_in_use{0};
constexpr int64_t kMaxCacheBytes = int64_t(2) << 30;
std::atomic<int64_t> g_cache_limit{kMaxCacheBytes};

// Allocates like LibTorch's default CPU allocator (c10::alloc_cpu, 64-byte aligned) with a 64-byte
// header in front that holds the size, so a free is counted without a lookup table. The DataPtr's
// context is its data pointer ("simple"), which LibTorch's raw_allocate/oneDNN paths require.
//
// It also caches freed blocks by exact size. A training step allocates the same sizes every step;
// without a cache each large block goes back to the kernel (glibc mmaps blocks above its threshold)
// and comes back as fresh pages, and the page faults and zeroing cost ~5% of a small model's step
// (perf, 2-core EPYC). The cache is bounded (g_cache_limit, setCpuCacheLimit) and its bytes are not "allocated": the
// meter counts what tensors hold, as LibTorch's CUDA allocator statistics do.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  static constexpr size_t kHeader = 64;                     // keeps the data 64-byte aligned

  c10::DataPtr allocate(size_t n) override {
    void* data = rawAllocate(n);
    return {data, data, &CountingCpuAllocator::release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &CountingCpuAllocator::release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  // The free blocks by size (setCpuCacheLimit trims it).
  struct Cache {
    std::mutex mu;
    std::unordered_map<size_t, std::vector<char*>> free;  // size -> blocks (base pointers)
    int64_t bytes = 0;
  };
  static Cache& cache() {
    static Cache* c = new Cache;  // never destroyed: tensors may be freed during static teardown
    return *c;
  }

 private:
  static void* rawAllocate(size_t n) {
    // The limit first: a refused allocation takes nothing, from the cache or the system.
    const int64_t limit = g_limit.load(std::memory_order_relaxed);
    if (limit > 0) {
      const int64_t held = g_current.load(std::memory_order_relaxed);
      if (held + int64_t(n) > limit) {
        g_refused_request = int64_t(n);
        g_refused_in_use = held;
        TORCH_CHECK_WITH(OutOfMemoryError, false, "CPU out of memory: tried to allocate ", n, " bytes with ", held,
                         " bytes in use; the per-rank limit (--mem-limit) is ", limit, " bytes");
      }
    }
    char* base = nullptr;
    {
      Cache& c = cache();
      std::lock_guard<std::mutex> lock(c.mu);
      auto it = c.free.find(n);
      if (it != c.free.end() && !it->second.empty()) {
        base = it->second.back();
        it->second.pop_back();
        c.bytes -= int64_t(n);
      }
    }
    if (!base) {
      base = static_cast<char*>(c10::alloc_cpu(n + kHeader));
      *reinterpret_cast<int64_t*>(base) = static_cast<int64_t>(n);
    }
    const int64_t now = g_current.fetch_add(int64_t(n), std::memory_order_relaxed) + int64_t(n);
    int64_t peak = g_peak.load(std::memory_order_relaxed);
    while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
    return base + kHeader;
  }

  static void release(void* data) {
    if (!data) return;
    char* base = static_cast<char*>(data) - kHeader;
    const int64_t n = *reinterpret_cast<int64_t*>(base);
    g_current.fetch_sub(n, std::memory_order_relaxed);
    {
      Cache& c = cache();
      std::lock_guard<std::mutex> lock(c.mu);
      if (c.bytes + n <= g_cache_limit.load(std::memory_order_relaxed)) {
        c.free[size_t(n)].push_back(base);
        c.bytes += n;
        return;
      }
    }
    c10::free_cpu(base);
  }
};

}  // namespace

void installCountingCpuAllocator() {
  static std::once_flag once;
  std::call_once(once, [] {
    static CountingCpuAllocator alloc;
    c10::SetCPUAllocator(&alloc, /*priority=*/100);
  });
}

int64_t cpuAllocatedBytes() { return g_current.load(); }
void setCpuMemoryLimit(int64_t bytes) { g_limit.store(bytes < 0 ? 0 : bytes); }
int64_t cpuMemoryLimit() { return g_limit.load(); }
CpuRefusal lastCpuRefusal() { return {g_refused_request.load(), g_refused_in_use.load()}; }
int64_t cpuPeakBytes() { return g_peak.load(); }
void resetCpuPeak() { g_peak.store(g_current.load()); }
int64_t cpuCacheLimit() { return g_cache_limit.load(); }

void setCpuCacheLimit(int64_t bytes) {
  bytes = std::clamp<int64_t>(bytes, 0, kMaxCacheBytes);
  g_cache_limit.store(bytes);
  // Blocks kept past the new limit go back now.
  std::vector<char*> give_back;
  {
    CountingCpuAllocator::Cache& c = CountingCpuAllocator::cache();
    std::lock_guard<std::mutex> lock(c.mu);
    for (auto it = c.free.begin(); it != c.free.end() && c.bytes > bytes; ++it)
      while (!it->second.empty() && c.bytes > bytes) {
        give_back.push_back(it->second.back());
        it->second.pop_back();
        c.bytes -= int64_t(it->first);
      }
  }
  for (char* base : give_back) c10::free_cpu(base);
}

MemoryMeter::MemoryMeter(const std::string& device) {
  if (device.rfind("cuda", 0) == 0) {
    cuda_ = true;
    auto colon = device.find(':');
    device_index_ = colon == std::string::npos ? 0 : std::stoi(device.substr(colon + 1));
  } else {
    installCountingCpuAllocator();
  }
}

int64_t MemoryMeter::currentBytes() const {
  if (!cuda_) return cpuAllocatedBytes();
  auto stats = c10::getDeviceAllocator(c10::DeviceType::CUDA)->getDeviceStats(device_index_);
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
}

int64_t MemoryMeter::peakBytes() const {
  if (!cuda_) return cpuPeakBytes();
  auto stats = c10::getDeviceAllocator(c10::DeviceType::CUDA)->getDeviceStats(device_index_);
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
}

void MemoryMeter::resetPeak() {
  if (!cuda_) return resetCpuPeak();
  c10::getDeviceAllocator(c10::DeviceType::CUDA)->resetPeakStats(device_index_);
}

}  // namespace trainscope::runtime
