// attention.h — the pieces of a block that its description (BlockArch) switches on, apart from the
// GPT-2 path (internal to the runtime): the norm (LayerNorm, or RMSNorm computed in fp32), rotary
// positions (HF's rotate_half, Llama 3's frequency scaling) and grouped-query attention's K/V.
//
// Grouped-query attention reaches the attention cores (cpu_ops::causalAttention, SDPA, the context-
// parallel ring) as multi-head attention: mhaQkv applies RoPE to q and k and repeats each K/V head for
// the H/KV q heads that use it, giving the fused (B, T, 3·h·D) layout the cores take. Autograd sums the
// repeated heads' gradients back onto their K/V head.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

#include "trainscope/runtime/gpt.h"

namespace trainscope::runtime {

// LayerNorm(x; w, b) or RMSNorm y = w · (x · rsqrt(mean(x²) + eps)) with the normalisation in fp32
// and cast back before the weight (HF LlamaRMSNorm). x (…, C).
at::Tensor normForward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const BlockArch& a);

// RoPE's inverse frequencies (D/2) fp32: theta^(-2i/D), rescaled as transformers' rope_type "llama3"
// when a.rope_scaling.factor > 0.
at::Tensor ropeInverseFrequencies(const BlockArch& a, int64_t head_dim);

// RoPE's cos and sin at `positions` (T) int64 (the rank's token positions), each (1, T, 1, D) of
// `dtype`: built once per layer call and applied to q and k alike.
struct RopeTable {
  at::Tensor cos, sin;
};
RopeTable ropeTable(const at::Tensor& positions, int64_t head_dim, const BlockArch& a, at::ScalarType dtype);

// x (B, T, n, D) rotated by the table: x·cos + rotate_half(x)·sin.
at::Tensor applyRope(const at::Tensor& x, const RopeTable& rope);

// The projection's output qkv (B, T, (h + 2·kv)·D), rows [q; k; v] of this rank's heads, as the
// cores' (B, T, 3·h·D): RoPE on q and k at `positions` (when a.rope), K/V heads repeated h/kv times.
at::Tensor mhaQkv(const at::Tensor& qkv, int64_t h, int64_t kv, int64_t D, const at::Tensor& positions,
                  const BlockArch& a);

}  // namespace trainscope::runtime
