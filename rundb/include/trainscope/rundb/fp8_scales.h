// trainscope/rundb/fp8_scales.h — what the `fp8_scales` rows of a --precision fp8 run say, per role
// (input, weight, grad_output), over every FP8 linear, rank and step (what `report` prints):
//   linears      distinct tensors with rows of the role.
//   amax         the last step's smallest and largest amax over the linears.
//   scale        the smallest and largest scale used over the run.
//   saturated    (rank, step, tensor) rows whose amax × scale exceeded the format's largest value:
//                values that were clipped to ±fp8_max because the delayed scale was stale.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/rundb/rows.h"

namespace trainscope::rundb {

struct Fp8RoleSummary {
  std::string role;
  int64_t linears = 0, steps = 0, rows = 0;
  int64_t last_step = 0;
  double last_amax_min = 0, last_amax_max = 0;
  double scale_min = 0, scale_max = 0;
  int64_t saturated = 0;
};

// Largest finite value of the role's format: E4M3 (448) for input and weight, E5M2 (57344) for
// grad_output.
double fp8RoleMax(const std::string& role);

// One entry per role, in the order input, weight, grad_output; empty for no rows.
std::vector<Fp8RoleSummary> summarizeFp8Scales(const std::vector<Fp8Scale>& rows);

}  // namespace trainscope::rundb
