// checkpoint.h — activation checkpointing: regions that keep only their inputs in forward and
// recompute themselves in backward (internal to the runtime).
//
//   checkpointBlock      — `full`: a whole transformer block (x and the block's weights in, x out).
//   checkpointAttention  — `selective`: the attention core only (Korthikanti et al. 2022, §4.2);
//                          the T x T work is redone, the cheap-to-store linears are not.
// Recomputation is exact: the model has no dropout, so no RNG state needs replaying.
#pragma once

#include <ATen/core/Tensor.h>

#include "cpu/cpu_ops.h"
#include "model/tensor_parallel.h"
#include "trainscope/runtime/gpt.h"

namespace trainscope::runtime {

namespace detail {
// qkv (B, T, (h + 2·kv)·HS): n_kv K/V heads (0: n_head, multi-head attention); bias: a sliding
// window, ALiBi's slopes of the local heads (cpu_ops::ScoreBias).
at::Tensor attentionCore(const at::Tensor& qkv, int64_t n_head, int64_t n_kv = 0, const cpu_ops::ScoreBias& bias = {});
at::Tensor blockForward(const BlockWeights& p, const at::Tensor& x, int64_t n_head, bool selective,
                        const BlockContext& tp);
}  // namespace detail

// Under tensor (or expert) parallelism the recomputation re-issues the block's collectives (a MoE
// block's all-to-alls too); every rank of the group recomputes in the same order, so they match up
// as in forward.
at::Tensor checkpointBlock(const BlockWeights& p, const at::Tensor& x, int64_t n_head, const BlockContext& tp);
at::Tensor checkpointAttention(const at::Tensor& qkv, int64_t n_head, int64_t n_kv = 0,
                               const cpu_ops::ScoreBias& bias = {});

// True while this thread recomputes a checkpointed region in backward (what forward already
// counted, such as a MoE layer's expert load, is not counted again).
bool inRecompute();

}  // namespace trainscope::runtime
