// train/test_slow_rank.h — a test-only knob: TRAINSCOPE_TEST_SLOW_RANK=R:MS makes rank R do MS ms
// of extra CPU work at the start of every step, in a range "test/slow_rank", so that the tests of the
// straggler analysis (rundb/step_analysis.h) have a real run with a known slow rank. Unset (always,
// outside tests): nothing happens.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "trainscope/tracer/range.h"

namespace trainscope::runtime {

inline void testSlowRank(int64_t rank) {
  static const std::pair<int64_t, int64_t> knob = [] {
    const char* e = std::getenv("TRAINSCOPE_TEST_SLOW_RANK");
    long long r = -1, ms = 0;
    if (!e || std::sscanf(e, "%lld:%lld", &r, &ms) != 2 || ms <= 0) return std::pair<int64_t, int64_t>(-1, 0);
    return std::pair<int64_t, int64_t>(r, std::min<long long>(ms, 60'000));
  }();
  if (knob.first != rank) return;
  TRAINSCOPE_RANGE("test/slow_rank");
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(knob.second);
  volatile uint64_t spin = 0;
  while (std::chrono::steady_clock::now() < until) spin = spin + 1;  // work, not a sleep: the CPU is busy
}

}  // namespace trainscope::runtime
