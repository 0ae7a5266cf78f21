// gpu_time.h — the GPU branch of predictTime (internal to the tuner; see time_model.h).
#pragma once

#include "trainscope/models/time_model.h"

namespace trainscope::models::gpu {

TimePrediction predict(const workloads::Workload& w, const Plan& p, const Cluster& c, const TimeOptions& o);

// The pieces, exposed for the unit tests that check each against a hand computation.
double gemmSeconds(const Op& g, const Cluster& c, double peak, double element_bytes);
double memorySeconds(const Op& m, const Cluster& c);
// A collective over `n` ranks of `bytes` (the buffer the bus-bandwidth rule is stated for), with
// nccl-tests' bus factor (all-reduce 2(n−1)/n, all-gather and reduce-scatter (n−1)/n, send 1).
double collectiveSeconds(const NetworkTier& tier, double bytes, double n, double factor);

}  // namespace trainscope::models::gpu
