// fused_head.h — the LM head (tied to the token embedding) and cross-entropy in one chunked pass
// (internal to the runtime; see fused_head.cpp for why and how).
#pragma once

#include <ATen/core/Tensor.h>

namespace trainscope::runtime {

struct BlockContext;

// x (N, C) final hidden states, w (V, C) token embedding, targets (N) int64 → mean loss (fp32).
// Under tensor parallelism w is this rank's vocabulary shard (V/TP, C): the softmax statistics are
// all-reduced across the group (vocabulary-parallel cross-entropy), dW stays local and dX is this
// rank's partial sum (the caller's copyToTp/gatherSeq sums it in backward).
at::Tensor lmHeadCrossEntropy(const at::Tensor& x, const at::Tensor& w, const at::Tensor& targets,
                              const BlockContext& tp);
// Without tensor parallelism.
at::Tensor lmHeadCrossEntropy(const at::Tensor& x, const at::Tensor& w, const at::Tensor& targets);
// The unfused reference (linear + cross_entropy), for tests.
at::Tensor lmHeadCrossEntropyReference(const at::Tensor& x, const at::Tensor& w, const at::Tensor& targets);

}  // namespace trainscope::runtime
