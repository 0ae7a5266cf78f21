// gpu_time.h — the GPU branch of predictTime (internal to the tuner; see time_model.h).
#pragma once

#include <vector>

#include "trainscope/models/time_model.h"

namespace trainscope::models::gpu {

TimePrediction predict(const workloads::Workload& w, const Plan& p, const Cluster& c, const TimeOptions& o);

// The pieces, exposed for the unit tests that check each against a hand computation.
double gemmSeconds(const Op& g, const Cluster& c, double peak, double element_bytes);
double memorySeconds(const Op& m, const Cluster& c);
// A collective over `n` ranks of `bytes` (the buffer the bus-bandwidth rule is stated for), with
// nccl-tests' bus factor (all-reduce 2(n−1)/n, all-gather and reduce-scatter (n−1)/n, send 1).
double collectiveSeconds(const NetworkTier& tier, double bytes, double n, double factor);
// The network a collective crosses when its ranks sit on several nodes, `per_node` to a node: NCCL's
// rings leave each node through the NICs of all its member ranks (one port per GPU in the presets)
// and carry the rest over NVLink, so the bus bandwidth is min(per_node × the port's, NVLink's), at
// the inter-node latency and message-size curve. One rank per node: the port's rate.
NetworkTier spanningTier(const Cluster& c, double per_node);
// The parameter tensors (their element counts) one (tp, pp) rank of pipeline stage `s` holds: its
// layers' weights and biases (sharded by TP, LayerNorms whole), the first stage's word (V/t × h) and
// position embeddings, the last stage's final LayerNorm and, under PP, its copy of the tied word
// embedding; and their sum.
std::vector<double> stageTensors(const workloads::Workload& w, const Plan& p, int64_t s);
double stageParams(const workloads::Workload& w, const Plan& p, int64_t s);
// One transformer layer's parameters on a TP rank (12h²/t + 7h/t + 6h).
double layerParams(const workloads::Workload& w, const Plan& p);
// ZeRO-3's parameter all-gathers of one pass (forward or backward) over `layers` layers, each
// prefetched while the layer before it computes: the first gather (`first_s`) shows whole, every later
// one (`gather_s`) only where it outlasts the `compute_s` of the layer it hides behind.
double zeroGatherSeconds(double first_s, double gather_s, double compute_s, double layers);

}  // namespace trainscope::models::gpu
