// trainscope/models/moe.h — a mixture-of-experts layer's MLP as the models price it: the router,
// the experts at the batch routing realises, the shared expert, the all-to-all dispatch and combine
// under expert parallelism, and the expert weights a rank holds. docs/time-model.md and
// docs/memory-model.md ("Mixture of experts") derive every figure; the runtime's layer is
// docs/architecture.md's "Mixture of experts".
#pragma once

#include <cstdint>
#include <vector>

#include "trainscope/models/cluster.h"
#include "trainscope/models/layer_ops.h"
#include "trainscope/models/plan.h"
#include "trainscope/workloads/workload.h"

namespace trainscope::models {

// One MoE layer, one micro-batch, one rank: the hottest EP rank, at the plan's routing load
// (Plan::moe_load; docs/memory-model.md, "Routing load"). With ep 1 one rank computes every row.
struct MoeRouting {
  double tokens = 0;         // N = b·s/cp tokens this rank routes
  double assignments = 0;    // k·N
  double capacity = 0;       // per expert, per routing rank: ⌈cf·N·k/E⌉; 0 = drop-less
  double kept = 0;           // M = min(kN, E·capacity): rows this rank dispatches
  double local_experts = 0;  // E/ep experts on this rank
  double load = 1;           // ep > 1: the hottest rank's routed rows over balanced routing's (M); 1 at ep 1
  bool random_load = false;  // load is moeRandomRoutingLoad's expectation (Plan::moe_load 0), not given
  double per_expert = 0;     // rows each local expert computes: R·E/ep (from all ep ranks)
  double received = 0;       // R = min(load·M, E·capacity): the hottest rank's rows (= M when balanced)
};
MoeRouting moeRouting(const workloads::Workload& w, const Plan& p);

// E[max of n independent standard normal variables] = ∫ x·n·φ(x)·Φ(x)^(n−1) dx (0 for n = 1,
// 1/√π for 2).
double expectedMaxOfNormals(int64_t n);
// The expected hottest EP rank under uniformly random top-k routing (each token k distinct experts of
// E, every choice alike), over the mean rank's load: T tokens routed in one EP group and micro-batch
// (ep·N), E/ep experts per rank. A rank's load is a sum of T hypergeometric counts; with the ranks'
// loads summing to T·k, in the normal limit
//   load = 1 + e_ep · √(ep·(E − k) / (T·k·(E − 1))),   e_ep = expectedMaxOfNormals(ep),
// at most the hard bound ep·min(k, E/ep)/k (every token's k choices on one rank). 1 for ep ≤ 1.
double moeRandomRoutingLoad(double tokens, double top_k, double experts, double ep);

// MoE layers among stage s's layers (layerIdsOfStage: the runtime's split, interleaved chunks included;
// layer l MoE when Workload::moeLayer(l): l % moe_every == 0, or its moe_pattern entry).
int64_t moeLayersOfStage(const workloads::Workload& w, const Plan& p, int64_t stage);

// Appends the MoE MLP's forward kernels (router → dispatch → experts → combine → shared expert),
// each keeping what its backward needs, in place of the dense fc1 → GeLU → fc2.
void appendMoeMlp(std::vector<Op>& forward, const workloads::Workload& w, const Plan& p, double element_bytes);

// Bytes the hottest rank moves in each of the layer's all-to-alls per micro-batch: the larger of what
// it sends and receives, max(M, R)·C·b (4 per layer: dispatch and combine forward, their reverses
// backward; every rank waits for it). 0 without expert parallelism.
double moeAllToAllBytes(const workloads::Workload& w, const Plan& p);
// Seconds of one all-to-all of `bytes` over ep ranks on `tier` (nccl-tests' busbw rule: (ep−1)/ep
// of the bytes leave the rank).
double moeAllToAllSeconds(const NetworkTier& tier, double bytes, double ep);
// The tier the ep group spans: ranks are laid out TP fastest, then CP, then DP, so the ep ranks of
// one expert group are tp·cp apart; inside a node when tp·cp·ep fits one.
const NetworkTier& moeTier(const Plan& p, const Cluster& c);

// CPU clusters (time_model.cpp's aggregate model): one MoE layer's forward seconds per micro-batch
// beyond the dense layer's — router, E/ep batched experts and the shared expert in place of fc1 and
// fc2 — at `peak` FLOP/s and the cluster's GEMM efficiency curve.
double moeCpuExtraForwardSeconds(const workloads::Workload& w, const Plan& p, const Cluster& c, double peak);

// The routed experts' parameters of the whole model (every MoE layer's E experts of 2·C·F + F + C,
// not the router or the shared expert): the part a rank holds E/ep of, whole on every TP rank, and
// whose gradients the runtime sums over the expert-dp group (dp/ep ranks) rather than over dp.
double moeExpertParameters(const workloads::Workload& w);
// The routed-expert parameters one rank of stage s holds: its MoE layers' E/ep experts.
double moeStageExpertParameters(const workloads::Workload& w, const Plan& p, int64_t stage);
// The all-gather of every ep rank's per-expert counts before each dispatch (E int64 per rank; one
// per MoE layer and forward, so 2 under full recomputation): its seconds, latency-bound.
double moeCountsAllGatherSeconds(const NetworkTier& tier, const workloads::Workload& w, double ep);

// The memory model's MoE moments (docs/memory-model.md, "Mixture of experts"), bytes per rank and
// micro-batch of one MoE layer:
//   moeExpertGradientBuffers — the unbinds' backward: the E/ep experts' weight gradients waiting in
//     both unbinds' input buffers and the stack the first one (the down projection's) makes:
//     (E/ep)·C·e·max(F2 + 2F, 2·F2), F2 = F (GELU) or 2F (SwiGLU's [gate; up]): 3 stacks of (E/ep)·F·C
//     for GELU, 4 for SwiGLU;
//   moeExpertChainSaved — what the expert chains keep and free by then: fc1's input R·C·e, the
//     activation's saved tensors (GELU R·F·e; SwiGLU [gate; up] and silu(gate), 3·R·F·e), fc2's input
//     R·F·e, and the expert outputs kept for the gate M·C·e (appendMoeMlp's `saved`);
//   moeRecomputedCombineBytes — full recomputation: at the rebuilt layer's combine backward (the gate
//     multiply, runtime/src/model/moe.cpp: before any expert chain has freed what it keeps), the
//     block's incoming gradient and its rebuilt output (2·N·C·e; checkpoint.cpp holds `out` through
//     autograd::grad), the gathered-back rows dsrc = dout[token], the experts' output gradient
//     dsrc·gate and the gate gradient's product dsrc·ys before its row sum (3·M·C·e); under ep > 1
//     the larger of that and the rebuilt forward's return all-to-all: dY (N·C·e), the dispatched rows
//     (M·C·e), the received, computed and source-ordered rows still in scope (3·R·C·e) and the
//     routing's int64 tensors (8·kN·(E + 5), 8·kN·(2E + 5) with a capacity): dY + moeDispatchBytes;
//   moeDispatchBytes — ep > 1, a MoE layer's forward at its return all-to-all: what it holds beyond
//     the layer's kept tensors, M·C·e + 3·R·C·e + the routing's (0 with ep 1).
double moeExpertGradientBuffers(const workloads::Workload& w, const Plan& p);
double moeExpertChainSaved(const workloads::Workload& w, const Plan& p);
double moeRecomputedCombineBytes(const workloads::Workload& w, const Plan& p);
double moeDispatchBytes(const workloads::Workload& w, const Plan& p);

// One MoE layer's MLP tensors a rank holds (elements): the router E·C, its E/ep experts
// (C·F + F + F·C + C each with mlp_bias; SwiGLU's c_fc 2F rows; no bias tensors without mlp_bias,
// as Mixtral and Qwen-MoE) and the shared expert. Their shapes, in parameterTensors' order.
std::vector<std::vector<int64_t>> moeMlpShapes(const workloads::Workload& w, const Plan& p);

}  // namespace trainscope::models
