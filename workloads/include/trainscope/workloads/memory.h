// trainscope/workloads/memory.h — the analytic model-state bytes of docs/memory-model.md: what this
// runtime keeps per parameter for weights, gradients and optimizer state. LibTorch-free, so that the
// tuner and `predict` compute what a run would hold without building it; a runtime test checks the
// trainer's measured split (param_bytes, grad_bytes, optim_bytes) against these formulas.
//
//   weights    fp32: 4 per parameter (trained directly); bf16/fp16: 4 (fp32 master) + 2 (copy)
//   gradients  4: the fp32 main gradient (bf16/fp16: each 16-bit gradient is added into it and released)
//   optimizer  AdamW 8 (fp32 m, v); SGD 0, or 4 with momentum; Adafactor 4·(r + c) per r×c matrix and
//              4·n per vector; 8-bit Adam 2·⌈n/k⌉·k + 8·⌈n/k⌉ per tensor of n (block k)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/workloads/workload.h"

namespace trainscope::workloads {

// One parameter tensor of the whole model (one rank, no parallelism), in the runtime's flat order
// and names for every architecture (GPT-2's, and the Llama family's: RMSNorm without biases,
// c_attn [q; k; v] with GQA's smaller K/V, c_fc [gate; up] for SwiGLU, an untied lm_head last).
struct ParamTensor {
  std::string name;             // canonical name ("wte", "h.0.attn.c_attn.weight", …)
  std::vector<int64_t> shape;
  int64_t numel() const;
};
std::vector<ParamTensor> parameterTensors(const Workload& w);

enum class OptimizerState { AdamW, Adafactor, Adam8bit, SGD };

struct ModelStateBytes {
  int64_t params = 0, grads = 0, optimizer = 0;
  int64_t total() const { return params + grads + optimizer; }
};

// Bytes of optimizer state for one tensor.
int64_t optimizerStateBytes(const ParamTensor& t, OptimizerState o, bool momentum, int64_t adam8bit_block);

// The whole model in one process: weights, gradients and optimizer state by precision and optimizer.
ModelStateBytes modelStateBytes(const Workload& w, bool mixed_precision, OptimizerState o, bool momentum = false,
                                int64_t adam8bit_block = 256);

}  // namespace trainscope::workloads
