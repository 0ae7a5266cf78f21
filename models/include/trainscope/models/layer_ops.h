// trainscope/models/layer_ops.h — a transformer layer, and the LM head, as the list of kernels a
// framework launches for one micro-batch: every GEMM with its shape, every memory-bound kernel with
// the bytes it reads and writes, and what each keeps for the backward. The models read it: the GPU
// time model (gpu_time.cpp) prices each op, the memory model (memory_model.cpp) sums what the layer
// keeps, and the CPU time model (time_model.cpp) takes the layer's and the head's GEMMs from it.
// docs/time-model.md derives the list. Shapes use the project's vocabulary: b micro-batch, s
// sequence, h hidden, a heads, d = h/a, t tensor-parallel ranks, V vocabulary.
//
// What this is not: the model state (weights, gradients, optimizer) or the pipeline's accounting of
// micro-batches in flight — memory_model.cpp keeps those.
#pragma once

#include <string>
#include <vector>

#include "trainscope/models/framework_profile.h"
#include "trainscope/models/plan.h"
#include "trainscope/workloads/workload.h"

namespace trainscope::models {

// Whose kernels (the enum is in framework_profile.h): trainscope's runtime (fused flash attention,
// no dropout, fp32 gradients reduced overlapped with backward), Megatron-LM (fused bias-GeLU and
// bias-dropout-add; gradients reduced after the backward; its attention as `Attention` below says),
// PyTorch FSDP or DeepSpeed ZeRO (an eager Hugging Face-style model: this runtime's kernel list,
// flash attention; their host costs and collectives in their profiles).
// "trainscope" | "megatron" | "fsdp" | "deepspeed"; UserError naming --framework
Framework parseFramework(const std::string& s);
const char* frameworkName(Framework f);

// How attention runs: as the framework does by default, or forced — unfused (the s×s scores
// materialised, scale-mask-softmax and dropout memory-bound: Megatron-LM's own DotProductAttention,
// as the 2021-2022 published runs ran it — Korthikanti, Narayanan, vTrain's Megatron-DeepSpeed) or
// flash (one fused kernel, scores never stored). Every framework's default is a fused flash kernel:
// this runtime's SDPA, FSDP's and DeepSpeed's Hugging Face-style models, and Megatron-LM today —
// megatron-core 0.19.2's parse_args gives --transformer-impl transformer_engine and
// --attention-backend auto (TransformerConfig.attention_backend = AttnBackend.auto), which sets
// NVTE_FLASH_ATTN = NVTE_FUSED_ATTN = NVTE_UNFUSED_ATTN = 1 and lets Transformer Engine's
// DotProductAttention pick FlashAttention or cuDNN's fused attention (its unfused path only for
// shapes neither takes). A measured row of the old kernels says --attention unfused (bench/).
enum class Attention { Default, Unfused, Flash };
// Whether `a` materialises the s×s scores: only when asked (Attention::Unfused).
inline bool keepsScores(Attention a) { return a == Attention::Unfused; }
Attention parseAttention(const std::string& s);  // "default" | "unfused" | "flash"; UserError naming --attention
const char* attentionName(Attention a);

struct Op {
  enum class Kind { Gemm, Memory };
  std::string name;
  Kind kind = Kind::Memory;
  double m = 0, n = 0, k = 0, batch = 1;  // Gemm: batch × (m×k)·(k×n), 2·m·n·k·batch FLOPs
  double bytes = 0;                       // Memory: bytes read + written; Gemm: 0 = its operands
  double backward_bytes = -1;             // Memory: its backward's bytes (< 0: 1.5× the forward's)
  double efficiency_cap = 0;              // Gemm: an upper bound on its share of peak (0: none)
  double saved = 0;                       // bytes of activations it keeps for its backward
  bool fp8 = false;                       // Gemm: FP8 operands under --precision fp8 (src/fp8_ops.h)
  int flash = 0;                          // Gemm: flash attention, 1 forward, 2 backward (rate: efficiency_cap
                                          // = flashEfficiency × the profile's scale, no GEMM curve or waves)
  double flops() const { return kind == Kind::Gemm ? 2.0 * m * n * k * batch : 0.0; }
};

// The attention core's products (flash attention's one kernel, or the unfused scores q·kᵀ and
// context p·v), forward: the GEMMs of a layer that multiply no weight.
bool attentionCore(const Op& o);

// FlashAttention-2's achieved share of the dense peak on A100 (Dao 2023, "FlashAttention-2",
// Figures 4-7, read off the bars: forward up to 73% of peak, backward up to 63%, lower at short
// sequences and head dim 64), for queries sweeping `keys` keys at head dim `head_dim`, causal or not,
// forward or backward: top(d, pass) · keys / (keys + k½), k½ = 800 causal (the diagonal blocks'
// waste and fewer blocks of work per query tile), 300 not.
double flashEfficiency(double keys, double head_dim, bool causal, bool backward);
inline constexpr double kFlashTopForward = 0.73, kFlashTopBackward = 0.63;  // A100, head dim ≥ 128

struct LayerOps {
  std::vector<Op> forward, backward;  // one layer, one micro-batch, on one TP rank
  std::vector<Op> recompute;          // what activation checkpointing runs again before backward
  // Bytes the layer keeps from its forward to its backward under the plan's checkpointing: every
  // forward op's `saved` (none: all of them; selective: all but the recomputed attention core, which
  // keeps its input, Q, K and V, instead; full: the layer's input only).
  double saved = 0;
  double saved_fp32 = 0;  // of `saved`, the fp32 row statistics (flash attention's log-sum-exp)
  // Host ops the layer issues beyond its framework profile's ops_forward / ops_backward (Megatron-LM's
  // softmax on PyTorch's path where its fused kernel does not take the shape).
  double extra_host_ops_forward = 0, extra_host_ops_backward = 0;
};

// Whether Megatron-LM's fused scale-mask-softmax kernel takes a shape: `attn_batches` = micro-batch
// x attention heads on the TP rank, `queries`, `keys` per row (else PyTorch's fp32 path, 36 bytes
// per score forward and 40 backward, and 4 more host ops each way).
bool megatronFusedSoftmax(double attn_batches, double queries, double keys);

// One transformer layer of `w` under plan `p`; `moe`: one whose MLP is the mixture of experts (moe.h).
// `layer`: its index, which says whether its attention is windowed (Qwen2 windows only the layers
// from max_window_layers on, Workload::windowedLayer; every other op is the same on every layer).
// A stage's time adds its windowed layers' difference (gpu_time.cpp, windowedLayersOfStage).
LayerOps layerOps(const workloads::Workload& w, const Plan& p, Framework f, Attention a = Attention::Default,
                  bool moe = false, int64_t layer = 0);
// Of stage `stage`'s layers (layerIdsOfStage: interleaved chunks included), those whose attention is
// windowed while layer 0's is not: what a stage adds of the windowed layer's cost over layerOps(…, 0).
int64_t windowedLayersOfStage(const workloads::Workload& w, const Plan& p, int64_t stage);
// The LM head and the loss (last stage), and the embedding (first stage), forward and backward.
LayerOps headOps(const workloads::Workload& w, const Plan& p, Framework f);
LayerOps embeddingOps(const workloads::Workload& w, const Plan& p);

}  // namespace trainscope::models
