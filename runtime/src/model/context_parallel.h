// context_parallel.h — Megatron-style context parallelism: causal attention over a sequence split
// across the ranks of the `cp` group, by ring exchange of K/V blocks (internal to the runtime).
//
// The split (data.h, contextShard): the sequence in 2·CP chunks of c = T/(2·CP) tokens; cp rank i
// holds chunks i and 2·CP−1−i, so every rank has the same share of causal work (Megatron-LM's load
// balancing). Everything outside attention is per token and runs on the local T/CP tokens alone.
//
// Attention (Liu et al. 2023, "Ring Attention"; Megatron-LM's AttnFuncWithCPAndKVP2P): CP steps; at
// step s this rank holds the K/V block of rank j = (i − s) mod CP, and sends it on to rank i+1 while
// it computes with it (the next block's exchange is launched before the current block's compute).
// Each step's partial attention is merged into the running one by log-sum-exp (online softmax).
// Which block pairs are computed, with global positions (chunk a of q sees chunk b of kv iff b ≤ a):
//   s = 0   (own block):  causal over the local 2c tokens (local order is global order)
//   j < i:                all 2c queries against the first kv chunk (j), no mask
//   j > i:                the second query chunk (2·CP−1−i) against both kv chunks, no mask
// and nothing else: every other pair is in the future. Backward is written by hand (exact): the K/V
// blocks go round the ring again, and each block's dK/dV accumulator travels with it, collecting
// every rank's contribution, and arrives back at its owner after CP sends.
//
// Grouped-query attention: the ring carries the K/V heads as they are (KV = n_kv_head/t heads on this
// TP rank, one replica when t > n_kv_head), not repeated for their query heads, as Megatron-LM's does
// (its SelfAttention hands Transformer Engine's AttnFuncWithCPAndKVP2P keys and values of
// num_query_groups_per_partition heads, and the ring sends them as they are). Each block's GEMMs take a
// K/V head's G = NH/KV query heads as the rows of one matrix, so dK/dV come out summed over the group.
//
// Exchanged per rank per layer per micro-batch (b mbs, s seq, kv K/V heads on this TP rank —
// n_kv_head/t, or 1 when t > n_kv_head —, D head size, t TP, c CP, e bytes of the compute dtype;
// GPT: kv·D = h/t): one K/V block is 2·b·(s/c)·kv·D·e bytes, a dK/dV accumulator 2·b·(s/c)·kv·D·4
// (fp32); forward sends c−1 K/V blocks, backward c−1 K/V blocks and c accumulators (full
// checkpointing repeats the forward's). docs/architecture.md, "Context parallelism".
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

#include "cpu/cpu_ops.h"
#include "trainscope/runtime/comm.h"

namespace trainscope::runtime {

struct CpContext {
  Group* group = nullptr;  // nullptr or size 1: no context parallelism
  at::Tensor positions;    // (T/CP) int64: the global positions this rank holds (contextPositions)
  int size() const { return group ? group->size() : 1; }
  int rank() const { return group ? group->rank() : 0; }
  bool active() const { return size() > 1; }
};

// q (B, NH, T/CP, HS), k and v (B, KV, T/CP, HS), this rank's two chunks, KV dividing NH (query head
// i reads K/V head i / (NH/KV); KV = NH: multi-head). Returns (B, NH, T/CP, HS): causal softmax
// attention of these queries over the keys/values of the whole sequence. Differentiable in q, k, v.
// bias (a sliding window, ALiBi's slopes of the NH heads) is applied at the global positions of each
// block's chunks (the load-balanced order above); a block pair the window leaves wholly out is skipped.
at::Tensor ringAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const CpContext& cp,
                         const cpu_ops::ScoreBias& bias = {});

// The attention core under context parallelism: qkv (B, T/CP, (h + 2·kv)·D), rows [q; k; v] of this
// rank's h query and kv K/V heads (RoPE already applied at the rank's global positions) -> y
// (B, T/CP, h·D). n_kv 0: n_head.
at::Tensor contextParallelAttention(const at::Tensor& qkv, int64_t n_head, int64_t n_kv, const CpContext& cp,
                                   const cpu_ops::ScoreBias& bias = {});

}  // namespace trainscope::runtime
