// stage_params.h — parameter counts per pipeline stage, shared by the measured-cost reader
// (profile.cpp) and the composed time (cost_model.cpp). Private to the tuner.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "trainscope/models/moe.h"
#include "trainscope/tuner/models.h"

namespace trainscope::tuner {

// Parameters a rank of each stage holds (its shards), from the memory model's weight bytes: one
// prediction per plan, shared by the optimizer and the DP all-reduce terms below.
inline std::vector<double> stageParams(const workloads::Workload& w, const Plan& p) {
  std::vector<double> n;
  for (const auto& sm : predictMemory(w, p).stages) n.push_back(double(sm.params) / (p.mixed() ? 6.0 : 4.0));
  return n;
}

// Of each stage's, the routed experts a rank keeps outside GradSync: with ep > 1 a MoE's E/ep experts
// per MoE layer, summed over dp/ep ranks and never ZeRO-sharded (runtime/src/train/experts.h); else 0.
inline std::vector<double> unmanagedParams(const workloads::Workload& w, const Plan& p) {
  std::vector<double> n;
  for (int64_t s = 0; s < p.pp; ++s) n.push_back(p.ep > 1 ? moeStageExpertParameters(w, p, s) : 0.0);
  return n;
}

// Of `n`, the parameters the rank updates (ZeRO-1: its partition of the managed ones, about 1/dp,
// and all of its `experts`).
inline double paramsUpdated(const Plan& p, double n, double experts = 0) {
  return runconfig::shardsOptimizer(p.zero) && p.dp > 1 ? (n - experts) / double(p.dp) + experts : n;
}

// Bytes a rank of stage 0 moves in the gradient all-reduces (fp32, bus factor 2(g−1)/g): the managed
// tensors over dp·cp ranks, the unmanaged experts over their dp/ep expert-data-parallel ranks.
inline double allReduceBytes(const Plan& p, const std::vector<double>& n, const std::vector<double>& experts) {
  const double g = double(std::max<int64_t>(1, p.gradientGroup()));  // dp·cp ranks sum each gradient
  const double e = experts.empty() ? 0.0 : experts.front(), x = double(std::max<int64_t>(1, p.dp / p.ep));
  return (n.front() - e) * 4.0 * 2.0 * (g - 1.0) / g + e * 4.0 * 2.0 * (x - 1.0) / x;
}

}  // namespace trainscope::tuner
