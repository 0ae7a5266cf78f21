// saturating.h — int64 arithmetic that clamps instead of overflowing, for times and step numbers read
// from a file: a damaged or foreign one may hold any values, and a window wider than int64
// nanoseconds (292 years) is clamped, not overflowed. Internal to rundb (summary, step analysis).
#pragma once

#include <cstdint>

namespace trainscope::rundb {

inline int64_t satAdd(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? (b > 0 ? INT64_MAX : INT64_MIN) : r;
}
inline int64_t satSub(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_sub_overflow(a, b, &r) ? (b < 0 ? INT64_MAX : INT64_MIN) : r;
}

}  // namespace trainscope::rundb
