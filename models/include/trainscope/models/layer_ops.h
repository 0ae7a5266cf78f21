// trainscope/models/layer_ops.h — a transformer layer, and the LM head, as the list of kernels a
// framework launches for one micro-batch: every GEMM with its shape, every memory-bound kernel with
// the bytes it reads and writes. The GPU time model (time_model.cpp) prices each op; docs/tuner.md
// ("GPU time model") derives the list. Shapes use the project's vocabulary: b micro-batch, s
// sequence, h hidden, a heads, d = h/a, t tensor-parallel ranks, V vocabulary.
//
// What this is not: the memory model (memory_model.cpp keeps its own accounting of what is held).
#pragma once

#include <string>
#include <vector>

#include "trainscope/models/plan.h"
#include "trainscope/workloads/workload.h"

namespace trainscope::models {

// Whose kernels: trainscope's runtime (fused flash attention, no dropout, fp32 gradients reduced
// overlapped with backward) or Megatron-LM as the published runs used it (unfused attention: the
// s×s scores materialised, scale-mask-softmax and dropout as memory-bound kernels; fused bias-GeLU
// and bias-dropout-add; gradients reduced after the backward).
enum class Framework { Trainscope, Megatron };
Framework parseFramework(const std::string& s);  // "trainscope" | "megatron"; UserError naming --framework
const char* frameworkName(Framework f);

struct Op {
  enum class Kind { Gemm, Memory };
  std::string name;
  Kind kind = Kind::Memory;
  double m = 0, n = 0, k = 0, batch = 1;  // Gemm: batch × (m×k)·(k×n), 2·m·n·k·batch FLOPs
  double bytes = 0;                       // Memory: bytes read + written; Gemm: 0 = its operands
  double efficiency_cap = 0;              // Gemm: an upper bound on its share of peak (0: none)
  double flops() const { return kind == Kind::Gemm ? 2.0 * m * n * k * batch : 0.0; }
};

struct LayerOps {
  std::vector<Op> forward, backward;  // one layer, one micro-batch, on one TP rank
  std::vector<Op> recompute;          // what activation checkpointing runs again before backward
};

// One transformer layer of `w` under plan `p`.
LayerOps layerOps(const workloads::Workload& w, const Plan& p, Framework f);
// The LM head and the loss (last stage), and the embedding (first stage), forward and backward.
LayerOps headOps(const workloads::Workload& w, const Plan& p, Framework f);
LayerOps embeddingOps(const workloads::Workload& w, const Plan& p);

}  // namespace trainscope::models
