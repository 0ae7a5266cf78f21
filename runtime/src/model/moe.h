// moe.h — the mixture-of-experts MLP and expert parallelism (internal to the runtime).
//
// What it is: the layer that replaces a block's GELU MLP in a MoE workload (workloads/workload.h,
// n_experts > 0): a router (linear C -> E, softmax, top-k; the k = 2 gates renormalised to sum to
// 1, as GShard and Mixtral do), a capacity of ceil(capacity_factor · N · k / E) assignments per
// expert with the overflow dropped in priority order (all first choices in token order, then the
// second choices: GShard's rule) or no limit (drop-less, capacity_factor 0), E GELU experts
// C -> F -> C run as one GEMM pair per expert over its rows, and an optional shared expert every
// token passes through. A dropped assignment contributes nothing: a token dropped by all its
// choices leaves the block through the residual only.
//
// Losses: the Switch/GShard load-balancing loss aux = coeff · E · Σ_e f_e · P_e (f_e: the share of
// the N·k assignments routed to e before capacity, not differentiated; P_e: the mean router
// probability of e) and the ST-MoE router z-loss coeff · mean_n logsumexp(logits_n)². They are not
// returned: their gradient (loss_grad_scale, what the main loss's backward is scaled by) enters
// autograd through the layer's output, as Megatron-LM's MoEAuxLossAutoScaler does, so that any
// pipeline stage's MoE layers join the step's backward without carrying a second loss around.
//
// Expert parallelism (ep > 1): the E experts split into ep contiguous groups of E/ep, rank r of the
// ep group holding experts [r·E/ep, (r+1)·E/ep). Each rank routes its own tokens with the
// replicated router, sorts its kept assignments by expert, exchanges the per-expert counts
// (all-gather of E int64) and sends each assignment's row to the rank of its expert (all-to-all
// with variable splits); the experts run on what arrived; a second all-to-all with the splits
// swapped brings the outputs back, and the gates combine them. Backward runs the same two
// all-to-alls in reverse. Capacity applies to each rank's own N tokens (as in Megatron-LM).
//
// What it is not: expert tensor parallelism (experts whole on one rank), a grouped-GEMM kernel.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include <ATen/core/Tensor.h>

#include "trainscope/runtime/comm.h"
#include "trainscope/runtime/gpt.h"
#include "trainscope/workloads/workload.h"

namespace at {
class Generator;
}

namespace trainscope::runtime {

struct MoeSpec {
  int64_t n_experts = 0;        // E
  int64_t top_k = 1;            // k
  bool renormalise = false;     // the k gates divided by their sum (Workload::renormalisesGates)
  double capacity_factor = 0;   // 0: drop-less
  double aux_loss_coeff = 0;
  double z_loss_coeff = 0;
  double loss_grad_scale = 1;   // the gradient the aux/z losses enter backward with (loss scale / GA)
  // Test seam (TRAINSCOPE_TEST_ROUTE_ALL_TO=e in the environment): the router's logit of expert e is
  // raised by 30, so every token's first choice is e — the skewed load a routing test needs. -1: off.
  int64_t force_expert = -1;
  static MoeSpec of(const workloads::Workload& w);
  // Assignments per expert for N tokens: ceil(capacity_factor · N · k / E); 0 when drop-less.
  int64_t capacity(int64_t tokens) const;
};

// What the router did in one call on this rank's tokens: the expert_load rows of the run database.
struct ExpertLoad {
  std::vector<int64_t> tokens;  // (E) assignments routed to each expert, before capacity
  std::vector<int64_t> kept;    // (E) of those, kept within capacity
  int64_t assignments = 0;      // N · k
  int64_t dropped = 0;          // assignments over capacity
  int64_t capacity = 0;         // per expert; 0: drop-less
  double aux_loss = 0;          // coefficient applied
  double z_loss = 0;            // coefficient applied
  int64_t calls = 0;            // router calls summed in (micro-batches); aux/z are sums over them
  double imbalance() const;     // max / mean of tokens (1: perfectly balanced)
  void add(const ExpertLoad& o);  // sums a call into this step's total
};

struct BlockContext;

// What the GPT's MoE blocks share during a step: the layer's settings, the expert-parallel group,
// and the step's expert load by global layer, summed over the micro-batches (recomputation in
// backward is not counted twice). The trainer sets loss_grad_scale before each step and takes the
// load after it.
struct MoeContext {
  MoeSpec spec;
  Group* ep = nullptr;
  std::map<int64_t, ExpertLoad> load;
};
// The MoE context a block runs with (tp.moe); throws when a MoE block runs without one.
MoeContext& moeContext(const BlockContext& tp);

// The whole layer's fp32 weights on the CPU, GPT-2 style: N(0, 0.02), the c_proj ones scaled by
// 1/sqrt(2L), zero biases; drawn in flat() order from `gen`, so one seed gives one model.
MoeWeights initMoe(const workloads::Workload& w, at::Generator& gen);
// Experts [r·E/ep, (r+1)·E/ep) and the router/shared expert, copied to `device` as autograd leaves.
MoeWeights shardMoe(const MoeWeights& full, int ep_size, int ep_rank, const at::Device& device);

// x (B, T, C) -> the MoE MLP's output (B, T, C), residual not added. ep: the expert-parallel group
// (nullptr or one member: every expert local). load: filled when given.
at::Tensor moeForward(const MoeWeights& w, const at::Tensor& x, const MoeSpec& s, Group* ep = nullptr,
                      ExpertLoad* load = nullptr);
// The same inside a GPT block: settings and group from ctx, the load added to ctx.load[w.layer].
at::Tensor moeForward(const MoeWeights& w, const at::Tensor& x, MoeContext& ctx);

}  // namespace trainscope::runtime
