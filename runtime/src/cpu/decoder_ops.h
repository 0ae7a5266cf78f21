// decoder_ops.h — autograd ops for the Llama-family block's memory-bound pieces, one pass each way:
// RMSNorm, RoPE on a fused q/k/v projection, and SwiGLU's SiLU-multiply, for fp32 contiguous CPU
// tensors (cpu_ops::usable). rmsNorm and swiglu run the eager ATen ops on anything else (16-bit,
// GPU), keeping what those keep (models/layer_ops.cpp prices both); ropeQkv is CPU fp32 only.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace trainscope::runtime::cpu_ops {

// y = w · (x · r), r = 1/√(mean(x²) + eps) computed in fp32 (transformers' LlamaRMSNorm); x (…, C),
// w (C). Fused: keeps x and r (fp32, one per row) for the backward, which makes dx and dw in one pass.
at::Tensor rmsNorm(const at::Tensor& x, const at::Tensor& w, double eps);

// The eager reference rmsNorm is checked against (the five ATen ops transformers runs).
at::Tensor rmsNormReference(const at::Tensor& x, const at::Tensor& w, double eps);

// RoPE on the q and k heads of a fused projection qkv (B, T, (h + 2·kv)·D) = [q heads; k heads;
// v heads], in one pass: q and k rotated by the (T, D/2) fp32 cos and sin tables (row t for token
// t), v copied; the layout kept (the grouped-query attention core reads it as it is). Keeps nothing
// but the tables: its backward is the inverse rotation. CPU fp32 contiguous only (usable()).
at::Tensor ropeQkv(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, int64_t n_head,
                   int64_t n_kv_head);

// SwiGLU's activation: f (…, 2F) = [gate; up] → silu(gate) · up (…, F). Fused: keeps f only and
// recomputes silu in the backward (as Megatron-LM's bias_swiglu does).
at::Tensor swiglu(const at::Tensor& f);

}  // namespace trainscope::runtime::cpu_ops
