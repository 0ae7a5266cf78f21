// moe_fixture.h — the small MoE workload and plan the MoE model tests compute by hand
// (moe_models_test.cpp, moe_routing_load_test.cpp).
#pragma once

#include <cstdint>

#include "trainscope/tuner/models.h"
#include "trainscope/workloads/workload.h"

namespace trainscope::testing {

// C 64, 4 heads, 2 layers, E 4 experts top-2 of width F 128 (GELU) in every layer, capacity factor 1.25.
inline workloads::Workload moeTestWorkload() {
  workloads::Workload w;
  w.name = "moe-test";
  w.n_layer = 2, w.n_head = 4, w.n_embd = 64, w.n_positions = 64, w.vocab_size = 256;
  w.n_experts = 4, w.top_k = 2, w.moe_every = 1, w.moe_ffn_hidden = 128, w.capacity_factor = 1.25;
  return w;
}

// dp 4, mbs 2 × seq 8: N = 16 tokens per rank, kN = 32 assignments, over `ep` ranks at routing load
// `load` (1: balanced).
inline tuner::Plan moeTestPlan(int64_t ep, double load) {
  tuner::Plan p;
  p.dp = 4, p.ep = ep, p.mbs = 2, p.gbs = 8, p.seq = 8;
  p.moe_load = load;
  return p;
}

}  // namespace trainscope::testing
