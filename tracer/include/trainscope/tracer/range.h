// trainscope/tracer/range.h — what instrumented code includes (as Tracy's Tracy.hpp is): the
// TRAINSCOPE_RANGE macro and the clock. Light: no buffers, no SQLite, no threads.
//
// TRAINSCOPE_RANGE(name) opens a range for the enclosing scope: recorded when a tracer is current
// at the ranges level or above, and mirrored to NVTX in CUDA builds (so Nsight Systems sees the same
// ranges). Names are the constants of rundb/range_names.h.
#pragma once

#include <cstdint>

#include "trainscope/common/clock.h"
#include "trainscope/rundb/range_names.h"

namespace trainscope::tracer {

using trainscope::nowNs;
namespace names = rundb::names;

class Tracer;

// Small per-process thread number (0 = the first thread that recorded anything).
uint32_t threadId();

// RAII range on the current tracer (and NVTX in CUDA builds).
class ScopedRange {
 public:
  explicit ScopedRange(const char* name);
  ~ScopedRange();
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;

 private:
  const char* name_;
  int64_t start_ = 0;
  Tracer* tracer_ = nullptr;
};

// NVTX push/pop (nvtx.cpp; no-ops without CUDA).
void nvtxPush(const char* name);
void nvtxPop();

}  // namespace trainscope::tracer

#define TRAINSCOPE_CONCAT_INNER(a, b) a##b
#define TRAINSCOPE_CONCAT(a, b) TRAINSCOPE_CONCAT_INNER(a, b)
#ifndef TRAINSCOPE_DISABLE_RANGES
#define TRAINSCOPE_RANGE(name) ::trainscope::tracer::ScopedRange TRAINSCOPE_CONCAT(trainscope_range_, __LINE__)(name)
#else
#define TRAINSCOPE_RANGE(name) ((void)0)
#endif
