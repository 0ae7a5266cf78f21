// flat_cluster.h — the made-up GPU cluster the time-model tests price on: 8 devices in one node, round
// numbers (100 TFLOP/s bf16, 1 TB/s at 50%, 100 GB/s inside the node, 10 GB/s across), so that
// expected times are hand-computable.
#pragma once

#include <cmath>
#include <cstdint>

#include "trainscope/tuner/models.h"

namespace trainscope::testing {

inline tuner::Cluster flatGpu() {
  tuner::Cluster c;
  c.kind = tuner::ClusterKind::Gpu;
  c.nodes = 1;
  c.devices_per_node = 8;
  c.memory_bytes = int64_t(80) << 30;
  c.peak_flops = {{"bf16", 100e12}, {"fp16", 100e12}, {"fp32", 10e12}};
  c.memory_bandwidth = 1e12;
  c.memory_efficiency = 0.5;
  c.sm_count = 108;
  c.intra_node = {100e9, 1.0, 1e-6, 0};
  c.inter_node = {10e9, 1.0, 1e-6, 0};
  return c;
}

// A small GPT and a plan on flatGpu(): no kernel floor, no host dispatch, collectives α·(1 + log2 n)
// + bytes·factor/bandwidth (no half-bandwidth size), memory at 0.5 TB/s.
inline workloads::Workload toyGpt() {
  workloads::Workload w;
  w.name = "toy";
  w.n_layer = 2, w.n_head = 4, w.n_embd = 256, w.n_positions = 512, w.vocab_size = 1000;
  return w;
}

inline tuner::Plan toyPlan(int64_t tp, int64_t pp, int64_t dp) {
  tuner::Plan p;
  p.tp = tp, p.pp = pp, p.dp = dp, p.mbs = 1, p.gbs = 4 * dp, p.seq = 512;  // M = 4 micro-batches
  p.precision = runconfig::Precision::FP16;
  return p;
}

// Megatron-LM as the published runs ran it (Korthikanti, Narayanan, vTrain): unfused attention.
inline tuner::TimeOptions megatron() {
  tuner::TimeOptions o;
  o.framework = tuner::Framework::Megatron;
  o.attention = tuner::Attention::Unfused;
  return o;
}

// A collective on one of flatGpu()'s tiers (efficiency 1).
inline double seconds(const tuner::NetworkTier& t, double bytes, double n, double factor) {
  return t.latency * (1 + std::log2(n)) + bytes * factor / t.bandwidth;
}

}  // namespace trainscope::testing
