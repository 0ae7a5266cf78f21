// flat_cluster.h — the made-up GPU cluster the time-model tests price on: 8 devices in one node, round
// numbers (100 TFLOP/s bf16, 1 TB/s at 50%, 100 GB/s inside the node, 10 GB/s across), so that
// expected times are hand-computable.
#pragma once

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

}  // namespace trainscope::testing
