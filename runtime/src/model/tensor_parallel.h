// tensor_parallel.h — Megatron-style tensor and sequence parallelism (internal to the runtime).
//
// Autograd-aware collectives over the tensor-parallel group (Shoeybi et al. 2019, Korthikanti et
// al. 2022). Activations are (B, T, C); sequence-parallel ones are (B, T/TP, C).
//   copyToTp       f: forward identity, backward all-reduce      (before a column-parallel linear)
//   reduceFromTp   g: forward all-reduce, backward identity      (after a row-parallel linear)
//   gatherSeq      forward all-gather along T, backward reduce-scatter along T   (SP's f)
//   scatterSeq     forward reduce-scatter along T, backward all-gather along T   (SP's g)
//   columnParallelLinear  f + a column-parallel linear; under SP it keeps only the (B, T/TP, C)
//                  shard for the weight gradient and all-gathers it again in backward (Megatron-LM)
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

#include "trainscope/runtime/comm.h"

namespace trainscope::runtime {

struct CpContext;
struct MoeContext;

// What every block (and the embedding and head) receives besides its weights: the tensor-parallel
// group and sequence parallelism, the context-parallel context, the MoE context, and the vocabulary
// split. One struct so that a block's signature does not change when a parallel mode is added.
struct BlockContext {
  Group* group = nullptr;  // the TP group; nullptr or size 1: no tensor parallelism
  bool sequence_parallel = false;
  // Context parallelism (context_parallel.h): set only when cp > 1; attention and the position
  // embedding read it.
  const CpContext* cp = nullptr;
  // Mixture of experts (moe.h): set when the model has MoE layers; the MoE MLP reads it.
  MoeContext* moe = nullptr;
  int64_t vocab = 0;         // true vocabulary size
  int64_t vocab_begin = 0;   // this rank's first vocabulary row
  int64_t vocab_local = 0;   // rows of the local wte shard (padded vocabulary / TP)
  int size() const { return group ? group->size() : 1; }
  int rank() const { return group ? group->rank() : 0; }
  bool active() const { return size() > 1; }
};

at::Tensor copyToTp(const at::Tensor& x, const BlockContext& tp);
at::Tensor reduceFromTp(const at::Tensor& x, const BlockContext& tp);
at::Tensor gatherSeq(const at::Tensor& x, const BlockContext& tp);
// Identity forward; backward sums the gradient over each group of `replicas` consecutive TP ranks
// that hold the same copy (GQA's K/V heads when tp > n_kv_head, as Megatron-LM replicates them).
at::Tensor sumOverReplicas(const at::Tensor& x, int64_t replicas, const BlockContext& tp);
at::Tensor scatterSeq(const at::Tensor& x, const BlockContext& tp);

// linear(f(x), w, b) for a column-parallel w (N/TP, C): x (B, T, C), or (B, T/TP, C) under sequence
// parallelism, -> (B, T, N/TP). Under SP this is Megatron-LM's LinearWithGradAccumulationAndAsync-
// Communication: autograd saves the shard, not the gathered (B, T, C) input; backward all-gathers it
// again (overlapped with dX = dY W), then reduce-scatters dX (overlapped with dW = dYᵀ X).
at::Tensor columnParallelLinear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const BlockContext& tp);

// Vocabulary-parallel embedding lookup: rows outside this rank's shard read as zero; the partial
// sums are then combined by reduceFromTp (or scatterSeq under sequence parallelism).
at::Tensor vocabParallelEmbedding(const at::Tensor& wte_local, const at::Tensor& tokens, const BlockContext& tp);

// Padded vocabulary: the smallest multiple of tp that is >= vocab.
int64_t paddedVocab(int64_t vocab, int tp);

}  // namespace trainscope::runtime
