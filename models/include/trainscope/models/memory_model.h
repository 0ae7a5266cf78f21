// trainscope/models/memory_model.h — predicted memory per rank, per pipeline stage (docs/tuner.md).
//
// Model state from the runtime's own formulas (workloads/memory.h) on each stage's shards: the
// tensors a (tp, pp) rank holds, ZeRO-1's partition simulated as the runtime makes it (whole tensors,
// largest first, onto the least-loaded rank; flat buffers of d·S elements). ZeRO-2 and ZeRO-3 as the
// runtime runs them (grad_sync.cpp's buckets, zero3.cpp's per-layer units; docs/memory-model.md):
// ⌈n/d⌉ of the optimizer state and the gradients (ZeRO-3: and the parameters) per rank, the reduce
// buckets alive at each layer's backward (a walk in backward order), and under ZeRO-3 the gathered
// parameters of the layer in use and those prefetched. MoE experts under ep > 1 are outside the shards. Activations twice, a
// layer's from the op list the time model prices (layer_ops.h, `LayerOps::saved`):
//   runtime   — what this runtime keeps (docs/memory-model.md, "What trainscope keeps"): fused
//               attention without the score term, no dropout, the fused head's fp32 dX and dW, the
//               micro-batches each stage holds under GPipe and 1F1B, pipeline send buffers, and a
//               calibrated allowance for transient backward buffers;
//   megatron  — Korthikanti et al. 2022 for Megatron-LM on the same plan: per layer
//               sbh(10 + 24/t + 5as/(ht)) without SP, sbh(34/t + 5as/(ht)) with SP, selective
//               drops the 5as/h term, full keeps 2sbh (÷t with SP); × layers × micro-batches in
//               flight (p on the first stage under 1F1B, × (1 + (p−1)/(pv)) interleaved, M under
//               GPipe); the last stage adds the fp32 logits 4sbV/t. 16-bit activations, as the paper.
// Context parallelism (Plan::cp): every token count is the rank's s/cp, and a layer's attention
// backward holds the ring's K/V and dK/dV blocks (StageMemory::ring, in place of the allowance at that
// moment; docs/memory-model.md, "Context parallelism").
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "trainscope/models/layer_ops.h"
#include "trainscope/models/plan.h"

namespace trainscope::models {

struct StageMemory {
  int64_t stage = 0, layers = 0;
  // Held the whole step: bytes per rank of this stage.
  int64_t params = 0, grads = 0, optimizer = 0;
  int64_t buffers = 0;                           // pipeline send buffers, ZeRO-1 flat-buffer padding
  int64_t fp8_weights = 0;                       // --precision fp8: the block linears' FP8 weights and
                                                 // their transposes (Transformer Engine's weight cache)
  // Held during a micro-batch's forward and backward.
  int64_t activations = 0;                       // this runtime, all micro-batches in flight
  int64_t head = 0;                              // fused LM head's saved fp32 dX and dW (last stage)
  // Transients, each at its own moment of the step:
  int64_t head_chunk = 0;                        // LM head forward: one chunk of fp32 logits
  int64_t recompute = 0;                         // a layer's backward: that layer recomputed (full)
  int64_t allowance = 0;                         // a layer's backward: gradients between ops, fresh
                                                 // parameter gradients (calibrated)
  int64_t lane_grads = 0;                        // CPU core lanes: each lane's own gradients, from its
                                                 // first backward until they are summed
  int64_t lane_fresh = 0;                        // and the embedding's fresh gradients when they finish
  int64_t sync = 0;                              // ZeRO-1's reduce-scatter and all-gather buffers
                                                 // (ZeRO-2: the all-gather's; ZeRO-3: none)
  int64_t grad_bucket = 0;                       // ZeRO-2/3, a layer's backward: one reduce bucket of
                                                 // full fp32 gradients before its reduce-scatter
  int64_t gathered = 0;                          // ZeRO-3, forward and backward: the parameters
                                                 // gathered for the module in use and those prefetched
  int64_t ring = 0;                              // CP, a layer's attention backward: the K/V (and
                                                 // dK/dV) blocks of the ring, current and arriving
  int64_t expert_grads = 0;                      // MoE, its layer's backward: the expert-weight
                                                 // gradient stacks autograd sums (docs/memory-model.md)
  int64_t moe_freed = 0;                         // what the layers after that MoE layer (the stage's
                                                 // last, or ZeRO-2's worst) have freed by then
  int64_t moe_bucket = 0;                        // the reduce buckets alive then (ZeRO-2's walk; else
                                                 // grad_bucket)
  int64_t moe_recompute = 0;                     // MoE under full recomputation, a MoE layer's combine
                                                 // backward: the rebuilt layer and its gradients there
  int64_t moe_dispatch = 0;                      // MoE, ep > 1 without full recomputation: the stage's
                                                 // last MoE layer's forward at its return all-to-all
  int64_t megatron_activations = 0;              // Korthikanti et al. for Megatron-LM (incl. logits)
  int64_t inflight = 1;                          // micro-batches whose activations are held at once
  int64_t micro_batches = 1;                     // per step (lane gradients outlive the first one)

  // The moments that can hold the peak, above what is held the whole step.
  int64_t headForward() const {
    return activations + head + head_chunk + gathered + (micro_batches > 1 ? lane_grads : 0);
  }
  // A layer's backward: the larger of its ops' transients — the calibrated allowance (the MLP's and
  // projections' gradients between ops, the fresh weight gradients) or, under CP, the ring's blocks,
  // which live during the attention core's backward only (docs/memory-model.md, "Context parallelism").
  int64_t layerBackward() const {
    return activations + head + recompute + std::max(allowance, ring) + grad_bucket + gathered +
           (micro_batches > 1 ? lane_grads : 0);
  }
  // The stage's last MoE layer's experts in backward: the LM head's saved dX/dW are consumed by then.
  int64_t moeBackward() const {
    return expert_grads > 0 ? layerBackward() - head - grad_bucket + moe_bucket - moe_freed + expert_grads : 0;
  }
  // Full recomputation: a rebuilt MoE layer's combine backward, the layer-backward moment with that
  // layer's recomputed tensors and gradients (moe_recompute) in place of `recompute` and `allowance`.
  int64_t moeRecomputeBackward() const {
    return moe_recompute > 0 ? layerBackward() - recompute - allowance + moe_recompute : 0;
  }
  // ep > 1: the micro-batch's activations all kept, the dispatch's rows and routing beside them.
  int64_t moeDispatchForward() const {
    return moe_dispatch > 0 ? activations + moe_dispatch + gathered + (micro_batches > 1 ? lane_grads : 0) : 0;
  }
  int64_t gradientsDone() const { return lane_grads + lane_fresh; }
  int64_t transient() const {
    return std::max({headForward(), layerBackward(), moeBackward(), moeRecomputeBackward(), moeDispatchForward(),
                     gradientsDone(), sync});
  }
  const char* peakPhase() const {
    const int64_t t = transient();
    return t == layerBackward() ? "backward" : t == headForward() ? "head fwd" : t == moeBackward() ? "moe bwd"
           : t == moeRecomputeBackward() ? "moe recomp" : t == moeDispatchForward() ? "moe fwd"
           : t == sync ? "zero sync" : "lane sum";
  }
  int64_t total() const { return params + grads + optimizer + buffers + fp8_weights + transient(); }
};

struct MemoryPrediction {
  std::vector<StageMemory> stages;
  int64_t worst_stage = 0;
  int64_t peak() const { return stages.empty() ? 0 : stages[size_t(worst_stage)].total(); }
};

// `megatron_attention`: the attention of Megatron-LM's column (StageMemory::megatron_activations):
// by default Transformer Engine's fused flash kernel, as Megatron-LM runs today (layer_ops.h), which
// keeps no s×s scores; Attention::Unfused keeps them (5as²b/t per layer without recomputation), as
// the 2021-2022 published runs did (`predict --attention unfused`). The runtime's columns do not
// depend on it (this runtime runs SDPA's flash kernel).
MemoryPrediction predictMemory(const workloads::Workload& w, const Plan& p,
                               Attention megatron_attention = Attention::Default);

// Megatron-LM's weights and optimizer state per parameter in mixed precision: 18 bytes (16-bit
// weights, fp32 main gradients, fp32 master weights and Adam's two moments), or 6 + 12/d with its
// distributed optimizer (Megatron-LM docs, dist_optimizer.md).
double megatronBytesPerParam(const Plan& p, bool distributed_optimizer);
// The same for a MoE layer's routed experts: the distributed optimizer shards their state over the
// expert-data-parallel group, dp·cp·tp/ep ranks under --expert-tensor-parallel-size 1.
double megatronBytesPerExpertParam(const Plan& p, bool distributed_optimizer);
// Those bytes for a stage's transformer layers (megatronLayerParams each, ÷ t; a MoE layer's attention
// and shared expert ÷ t, norms and router whole, experts ÷ ep at the expert bytes, as megatron-core's
// theoretical_memory_usage.py), and for the word embedding (V·h ÷ t) that the first and last stages hold.
int64_t megatronLayersParamsOpt(const workloads::Workload& w, const Plan& p, int64_t stage, bool distributed_optimizer);
int64_t megatronEmbeddingParamsOpt(const workloads::Workload& w, const Plan& p, double bytes_per_param);

// Korthikanti et al. 2022, activation bytes of one transformer layer for one micro-batch (16-bit):
// their closed form, which Megatron-LM's op list reproduces (MemoryModel.TheOpListKeeps…).
// `ffn_over_h`: the MLP's width over h (4 in the paper); theoretical_memory_usage.py's generalisation.
// `scores` false: a fused flash attention kernel, which keeps no 5as/h score term (softmax output,
// dropout mask and output) — only selective recomputation drops them otherwise.
double megatronLayerActivationBytes(double s, double b, double h, double a, double t, bool sp,
                                    runconfig::Checkpointing ckpt, double ffn_over_h = 4.0, bool scores = true);
// True for the GPT shape Table 2 describes (LayerNorm, learned positions, GELU MLP of 4h, MHA, tied,
// biases): its Megatron activations come from the op list; other decoders follow Megatron-LM's
// theoretical_memory_usage terms (memory_model.cpp, docs/memory-model.md).
bool korthikantiShape(const workloads::Workload& w);
// One transformer layer's parameters as Megatron-LM builds it from the architecture (norms, QKV with
// GQA's smaller K/V, projection, 2 or 3 MLP matrices, the biases it has): 12h² + 13h for GPT-2.
double megatronLayerParams(const workloads::Workload& w);
// Word-embedding-sized tables a stage holds: the embedding on the first, the output layer on the
// last (its own weight when untied, a copy of the tied one under PP); one when tied without PP.
int64_t megatronEmbeddingTables(const workloads::Workload& w, const Plan& p, int64_t stage);

// The models' figures are int64 bytes per rank. False when an upper bound of all of them — every
// term of predictMemory for `sequences` of `seq` tokens in flight (activations with the quadratic
// score term, the logits) plus the weights with their gradients and optimizer state on each of
// `devices`, with room to spare — reaches 2^60: such a batch would come out as a wrapped-around
// peak that "fits". `tune` (the global batch) and `predict` (a stage's micro-batches) refuse it.
bool figuresCountable(const workloads::Workload& w, long double sequences, int64_t seq, int64_t devices);

}  // namespace trainscope::models
