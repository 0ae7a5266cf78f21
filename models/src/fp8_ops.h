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
// (docs/memory-model.md, "FP8 on the CPU"). LibTorch's CPU _scaled_mm emulates the FP8 product: it
// allocates its output, then takes each operand to fp32 and multiplies it by its scale (the fp32
// copy and the scaled one, 8 bytes per element, both alive at the multiply), then multiplies in fp32.
// At a marked GEMM y = x·W (m×k · k×n)'s backward (runtime fp8.cpp, Fp8Linear::backward) the
// weight gradient's first operand is the worst moment: this rank holds dY (m·n·e), its E5M2 copy
// and that copy transposed (2·m·n), dX (m·k·e, made first), the FP8 input column-major (m·k), the
// product's output (n·k·e) and the fp32 dYᵀ and its scaled copy (8·n·m):
//   m·n·(e + 10) + m·k·(e + 1) + n·k·e;
// or, for a wide k, that product's own moment (dYᵀ scaled, X's two fp32 copies, its fp32 result):
//   m·n·(e + 6) + m·k·(e + 9) + n·k·(e + 4).
// The ops after it in the layer have run their backward, so what they kept is freed; the residual
// stream's gradient (`residual` bytes, b·s·h·e) is held beside the block's. 0 unless FP8 on the CPU.
double fp8CpuBackwardBytes(const LayerOps& L, const Plan& p, double residual);

}  // namespace trainscope::models
