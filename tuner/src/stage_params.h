// stage_params.h — parameter counts per pipeline stage, shared by the measured-cost reader
// (profile.cpp) and the composed time (cost_model.cpp). Private to the tuner.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "trainscope/tuner/models.h"

namespace trainscope::tuner {

// Parameters a rank of each stage holds (its shards), from the memory model's weight bytes: one
// prediction per plan, shared by the optimizer and the DP all-reduce terms below.
inline std::vector<double> stageParams(const workloads::Workload& w, const Plan& p) {
  std::vector<double> n;
  for (const auto& sm : predictMemory(w, p).stages) n.push_back(double(sm.params) / (p.mixed() ? 6.0 : 4.0));
  return n;
}

// Of those, the parameters the rank updates (ZeRO-1: its partition, about 1/dp).
inline double paramsUpdated(const Plan& p, double n) { return runtime::shardsOptimizer(p.zero) && p.dp > 1 ? n / double(p.dp) : n; }

// Bytes a rank of stage 0 moves in the gradient all-reduce over dp·cp ranks (fp32, bus factor 2(g−1)/g).
inline double allReduceBytes(const Plan& p, const std::vector<double>& n) {
  const double g = double(std::max<int64_t>(1, p.gradientGroup()));  // dp·cp ranks sum each gradient
  return n.front() * 4.0 * 2.0 * (g - 1.0) / g;
}

}  // namespace trainscope::tuner
