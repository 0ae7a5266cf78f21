// interval_minus.h — a − b of two interval lists (internal to the run summary).
#pragma once

#include <vector>

#include "trainscope/rundb/summary.h"

namespace trainscope::rundb {

// a − b, both sorted and non-overlapping (unionOf's).
std::vector<Interval> intervalMinus(const std::vector<Interval>& a, const std::vector<Interval>& b);

}  // namespace trainscope::rundb
