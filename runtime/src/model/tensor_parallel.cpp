// tensor_parallel.cpp — see tensor_parallel.h.
#include "model/tensor_parallel.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

namespace trainscope::runtime {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A TpContext travels through autograd's saved_data as an integer: it outlives every step.
int64_t handle(const TpContext& tp) { return reinterpret_cast<int64_t>(&tp); }
const TpContext& fromHandle(AutogradContext* ctx) {
  return *reinterpret_cast<const TpContext*>(ctx->saved_data["tp"].toInt());
}

at::Tensor allReduced(const at::Tensor& t, const TpContext& tp) {
  at::Tensor out = t.contiguous().clone();
  tp.group->allReduce(out);
  return out;
}

// (B, T/TP, C) on each rank -> (B, T, C): all-gather along dim 0 of the (T, B, C) layout.
at::Tensor allGatherSeq(const at::Tensor& x, const TpContext& tp) {
  at::Tensor local = x.transpose(0, 1).contiguous();                      // (T/TP, B, C)
  auto sizes = local.sizes().vec();
  sizes[0] *= tp.size();
  at::Tensor full = at::empty(sizes, local.options());                     // (T, B, C)
  tp.group->allGather(full, local);
  return full.transpose(0, 1).contiguous();                                // (B, T, C)
}

// (B, T, C) partial sums on each rank -> (B, T/TP, C) summed, this rank's slice of T.
at::Tensor reduceScatterSeq(const at::Tensor& x, const TpContext& tp) {
  at::Tensor full = x.transpose(0, 1).contiguous();                        // (T, B, C)
  auto sizes = full.sizes().vec();
  sizes[0] /= tp.size();
  at::Tensor local = at::empty(sizes, full.options());                     // (T/TP, B, C)
  tp.group->reduceScatter(local, full);
  return local.transpose(0, 1).contiguous();                               // (B, T/TP, C)
}

struct CopyToTp : torch::autograd::Function<CopyToTp> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t tp) {
    ctx->saved_data["tp"] = tp;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {allReduced(g[0], fromHandle(ctx)), at::Tensor()};
  }
};

struct ReduceFromTp : torch::autograd::Function<ReduceFromTp> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t tp) {
    return allReduced(x, *reinterpret_cast<const TpContext*>(tp));
  }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0], at::Tensor()}; }
};

struct GatherSeq : torch::autograd::Function<GatherSeq> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t tp) {
    ctx->saved_data["tp"] = tp;
    return allGatherSeq(x, *reinterpret_cast<const TpContext*>(tp));
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {reduceScatterSeq(g[0], fromHandle(ctx)), at::Tensor()};
  }
};

struct ScatterSeq : torch::autograd::Function<ScatterSeq> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t tp) {
    ctx->saved_data["tp"] = tp;
    return reduceScatterSeq(x, *reinterpret_cast<const TpContext*>(tp));
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {allGatherSeq(g[0], fromHandle(ctx)), at::Tensor()};
  }
};

}  // namespace

at::Tensor copyToTp(const at::Tensor& x, const TpContext& tp) {
  return tp.active() ? CopyToTp::apply(x, handle(tp)) : x;
}
at::Tensor reduceFromTp(const at::Tensor& x, const TpContext& tp) {
  return tp.active() ? ReduceFromTp::apply(x, handle(tp)) : x;
}
at::Tensor gatherSeq(const at::Tensor& x, const TpContext& tp) {
  return tp.active() ? GatherSeq::apply(x, handle(tp)) : x;
}
at::Tensor scatterSeq(const at::Tensor& x, const TpContext& tp) {
  return tp.active() ? ScatterSeq::apply(x, handle(tp)) : x;
}

at::Tensor vocabParallelEmbedding(const at::Tensor& wte_local, const at::Tensor& tokens, const TpContext& tp) {
  if (!tp.active()) return at::embedding(wte_local, tokens);
  at::Tensor in_shard = (tokens >= tp.vocab_begin).logical_and_(tokens < tp.vocab_begin + tp.vocab_local);
  at::Tensor local = (tokens - tp.vocab_begin).mul_(in_shard);             // out-of-shard -> row 0
  at::Tensor e = at::embedding(wte_local, local);                          // (B, T, C)
  return e * in_shard.unsqueeze(-1).to(e.scalar_type());                   // zero rows we don't own
}

int64_t paddedVocab(int64_t vocab, int tp) { return (vocab + tp - 1) / tp * tp; }

}  // namespace trainscope::runtime
