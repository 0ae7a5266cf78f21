// cpu_ops.h — autograd ops with hand-fused CPU kernels (fp32, contiguous CPU tensors only; callers
// use LibTorch's ops otherwise: see usable()).
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace trainscope::runtime::cpu_ops {

// Whether t is an fp32 contiguous CPU tensor and the fused ops are not disabled
// (TRAINSCOPE_DISABLE_CPU_KERNELS=1 turns them off, for A/B comparisons).
bool usable(const at::Tensor& t);

// What a causal attention core adds to its scores beyond causality (every core applies it: this
// kernel, SDPA's mask in gpt.cpp, the context-parallel ring):
//   window > 0 (Mistral's sliding_window): query t attends to keys (t - window, t] only
//     (transformers' mask: kv > q - window); 0: all of [0, t];
//   slopes (ALiBi, Press et al. 2022): one per local query head, score(t, j) += -m·(t - j) after
//     the 1/√HS scaling (BLOOM adds m·j, the same softmax: the rows differ by a constant); empty: none.
struct ScoreBias {
  int64_t window = 0;
  std::vector<double> slopes;
  bool any() const { return window > 0 || !slopes.empty(); }
};

// Causal self-attention straight from the fused projection: qkv (B, T, 3C) with heads laid out as
// in GPT-2's c_attn ([q | k | v], each split into n_head slices of C/n_head) → y (B, T, C).
// Flash-style: forward keeps only y and the row log-sum-exp; backward recomputes the scores.
// Query rows go in blocks of 32, and each block only multiplies the keys at or before its last
// row, so the masked upper triangle is (almost) never computed. No transposes or copies of q, k,
// v: the per-head GEMMs read them in place with a row stride of 3C, and dq, dk, dv land in one
// (B, T, 3C) gradient.
// Grouped-query attention (n_kv_head < n_head, dividing it): qkv is (B, T, (h + 2·kv)·HS) = [h q
// heads; kv k heads; kv v heads], query head i reading K/V head i / (h/kv) in place (no repeated
// copy); the backward sums each group's dK and dV onto its K/V head. n_kv_head 0: = n_head.
// What bias adds (ScoreBias): a sliding window, where each query block multiplies only the keys its
// rows see; ALiBi's slopes, added to each score row before its softmax.
at::Tensor causalAttention(const at::Tensor& qkv, int64_t n_head, int64_t n_kv_head, const ScoreBias& bias);
at::Tensor causalAttention(const at::Tensor& qkv, int64_t n_head, int64_t n_kv_head = 0, int64_t window = 0);
bool attentionUsable(const at::Tensor& qkv);  // usable() and the BLAS is there

// GELU with the tanh approximation, as at::gelu(x, "tanh"), one fused pass each way.
at::Tensor geluTanh(const at::Tensor& x);

// Cross-entropy of each row of logits (R, V) against targets (R) int64, in one fused pass per row:
// returns Σ_rows (logsumexp - logit[target]) and leaves softmax - onehot in logits (the gradient
// of that sum with respect to the logits). Rows are summed in order, so the result is repeatable.
double softmaxCrossEntropyInPlace(const at::Tensor& logits, const at::Tensor& targets);

}  // namespace trainscope::runtime::cpu_ops
