// fp8_ops.h — --precision fp8 in the op list (internal to models/; docs/time-model.md, "FP8").
//
// Under the plan's FP8 (Transformer Engine's recipe, as runtime/src/model/fp8.h runs it) the
// layer's weight GEMMs (every GEMM but the attention core and a MoE's router and experts) run on
// FP8 operands: marked Op::fp8, priced at the cluster's fp8 peak and fp8 ceiling (gpu_time.cpp),
// their operands 1 byte. Each adds memory-bound kernels (bytes read + written, bf16 in, fp8 out):
//   forward   input cast + amax + transpose: m·k·(2 + 1 + 1)  (TE's fused cast_transpose)
//             weight cast + transpose: n·k·(2 + 1 + 1) / M    (once per step: the FP8 weight cache)
//   backward  output-gradient cast + amax + transpose: m·n·(2 + 1 + 1)
//   per layer one amax-history update (3 roles × GEMMs × history, fp32): a kernel floor
// and keeps its input for the weight gradient in FP8 (1 byte, not 2).
#pragma once

#include "trainscope/models/layer_ops.h"

namespace trainscope::models {

// Marks and adds the above on a layer's lists when p.precision is FP8; otherwise leaves L alone.
void applyFp8(LayerOps& L, const Plan& p);

// Elements of the FP8 linears' weights in one layer on one TP rank (Σ n·k of the marked forward
// GEMMs): the memory model holds an FP8 copy and its transpose of each (2 bytes per element).
double fp8WeightElements(const LayerOps& L);

// The CPU's FP8 GEMM backward at its worst moment in one layer, above what the layer keeps
// (docs/memory-model.md, "FP8 on the CPU"). LibTorch's CPU _scaled_mm emulates the FP8 product:
// it dequantises both operands to fp32 (4 bytes each), multiplies in fp32 and casts the product to
// the output dtype. At a marked GEMM y = x·W (m×k · k×n)'s backward this rank holds dY (m·n·e), its
// E5M2 copy and that copy transposed (2·m·n), dX (m·k·e), the FP8 input copied column-major and
// made contiguous (2·m·k), and inside the weight-gradient product dYᵀ·X: 4·(n·m + m·k + n·k) of
// fp32 and the n·k result twice more in the output dtype (2·e·n·k); the ops after it in the layer
// have run their backward, so what they kept is freed. 0 unless p is FP8 on the CPU.
double fp8CpuBackwardBytes(const LayerOps& L, const Plan& p);

}  // namespace trainscope::models
