// attention.h — the pieces of a block that its description (BlockArch) switches on, apart from the
// GPT-2 path (internal to the runtime): the norm (LayerNorm, or RMSNorm computed in fp32), rotary
// positions (HF's rotate_half, Llama 3's frequency scaling) and grouped-query attention's K/V.
//
// Grouped-query attention reaches the fp32 CPU attention kernel (cpu_ops::causalAttention) and the
// context-parallel ring (contextParallelAttention) as it is: ropeQkv rotates q and k and keeps the
// (B, T, (h + 2·kv)·D) layout, and each reads a K/V head for its group of query heads, summing their
// dK/dV in the backward (the ring sends kv heads, not h). SDPA (16-bit, GPU) takes multi-head
// attention: mhaQkv also repeats each K/V head for the H/KV q heads that use it, giving the
// (B, T, 3·h·D) layout, and autograd sums the repeats' gradients onto their K/V head.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "cpu/cpu_ops.h"
#include "trainscope/runtime/gpt.h"

namespace trainscope::runtime {

// LayerNorm(x; w, b) or RMSNorm y = w · (x · rsqrt(mean(x²) + eps)) with the normalisation in fp32
// and cast back before the weight (HF LlamaRMSNorm), one fused op (cpu_ops::rmsNorm). x (…, C).
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
// The same angles as (T, D/2) fp32 tables (the two halves of a head share them).
RopeTable ropeHalfTable(const at::Tensor& positions, int64_t head_dim, const BlockArch& a);

// x (B, T, n, D) rotated by the table: x·cos + rotate_half(x)·sin.
at::Tensor applyRope(const at::Tensor& x, const RopeTable& rope);

// The projection's output qkv (B, T, (h + 2·kv)·D), rows [q; k; v] of this rank's heads, as the
// cores' (B, T, 3·h·D): RoPE on q and k at `positions` (when a.rope), K/V heads repeated h/kv times.
at::Tensor mhaQkv(const at::Tensor& qkv, int64_t h, int64_t kv, int64_t D, const at::Tensor& positions,
                  const BlockArch& a);

// RoPE on q and k of qkv (B, T, (h + 2·kv)·D) at `positions`, the grouped layout kept, for the
// attention core and the ring (each reads a K/V head for its group of query heads): one
// fused pass on fp32 CPU tensors (cpu_ops::ropeQkv), applyRope otherwise.
at::Tensor ropeQkv(const at::Tensor& qkv, int64_t h, int64_t kv, int64_t D, const at::Tensor& positions,
                   const BlockArch& a);

// ALiBi's slopes of heads first … first + count − 1 of a model with n_head heads (Press et al. 2022,
// "Train Short, Test Long", §3 and the authors' get_slopes; BLOOM's build_alibi_tensor is the same):
// for n_head a power of two, head k (1-based) has m_k = 2^(−8k/n_head); otherwise, with p the largest
// power of two below n_head, the first p heads take p's slopes and the other n_head − p take the
// odd-numbered ones of 2p's, 2^(−4·(2i + 1)/p) for i = 0 … n_head − p − 1. Under TP each rank asks
// for its own heads' slice of the model's slopes.
std::vector<double> alibiSlopes(int64_t n_head, int64_t first, int64_t count);

// The additive scores bias of queries at positions qpos (Tq) over keys at kpos (Tk), both int64
// global positions: −inf where key j is in the future of query t (j > t) or outside the window
// (t − j ≥ window), else ALiBi's −m·(t − j) (0 without slopes). (NH, Tq, Tk) with slopes, else
// (1, Tq, Tk); of `dtype`. SDPA's attn_mask (gpt.cpp) and the context-parallel ring's blocks.
at::Tensor scoreBias(const at::Tensor& qpos, const at::Tensor& kpos, const cpu_ops::ScoreBias& bias,
                     at::ScalarType dtype);

}  // namespace trainscope::runtime
