// trainscope/common/clock.h — the one clock every module stamps events with.
//
// CLOCK_REALTIME in integer nanoseconds: comparable across processes on one host, and across hosts
// once the tracer's measured clock offsets are applied (rundb/merge.h).
#pragma once

#include <chrono>
#include <cstdint>

namespace trainscope {

inline int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace trainscope
