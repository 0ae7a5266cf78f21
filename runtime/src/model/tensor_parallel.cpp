// tensor_parallel.cpp — see tensor_parallel.h.
#include "model/tensor_parallel.h"

#include "model/fp8.h"
#include "model/linear.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstdlib>
#include <string>

namespace trainscope::runtime {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A BlockContext travels through autograd's saved_data as an integer: it outlives every step.
int64_t handle(const BlockContext& tp) { return reinterpret_cast<int64_t>(&tp); }
const BlockContext& fromHandle(AutogradContext* ctx) {
  return *reinterpret_cast<const BlockContext*>(ctx->saved_data["tp"].toInt());
}

at::Tensor allReduced(const at::Tensor& t, const BlockContext& tp) {
  at::Tensor out = t.contiguous().clone();
  tp.group->allReduce(out);
  return out;
}

// (B, T/TP, C) on each rank -> (B, T, C): all-gather along dim 0 of the (T, B, C) layout.
at::Tensor allGatherSeq(const at::Tensor& x, const BlockContext& tp) {
  at::Tensor local = x.transpose(0, 1).contiguous();                      // (T/TP, B, C)
  auto sizes = local.sizes().vec();
  sizes[0] *= tp.size();
  at::Tensor full = at::empty(sizes, local.options());                     // (T, B, C)
  tp.group->allGather(full, local);
  return full.transpose(0, 1).contiguous();                                // (B, T, C)
}

// (B, T, C) partial sums on each rank -> (B, T/TP, C) summed, this rank's slice of T.
at::Tensor reduceScatterSeq(const at::Tensor& x, const BlockContext& tp) {
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

// Forward identity on a tensor replicated over groups of `replicas` consecutive TP ranks; backward
// sums the gradient over the ranks of this rank's group: each puts its gradient into its group's slot
// of a zero buffer, one all-reduce over TP, each takes its slot back.
struct SumOverReplicas : torch::autograd::Function<SumOverReplicas> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t replicas, int64_t tp) {
    ctx->saved_data["tp"] = tp;
    ctx->saved_data["replicas"] = replicas;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const BlockContext& tp = fromHandle(ctx);
    const int64_t replicas = ctx->saved_data["replicas"].toInt(), groups = tp.size() / replicas;
    std::vector<int64_t> sizes = g[0].sizes().vec();
    sizes.insert(sizes.begin(), groups);
    at::Tensor all = at::zeros(sizes, g[0].options());
    all.select(0, tp.rank() / replicas).copy_(g[0]);
    tp.group->allReduce(all);
    return {all.select(0, tp.rank() / replicas).clone(), at::Tensor(), at::Tensor()};
  }
};

struct ReduceFromTp : torch::autograd::Function<ReduceFromTp> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t tp) {
    return allReduced(x, *reinterpret_cast<const BlockContext*>(tp));
  }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0], at::Tensor()}; }
};

struct GatherSeq : torch::autograd::Function<GatherSeq> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t tp) {
    ctx->saved_data["tp"] = tp;
    return allGatherSeq(x, *reinterpret_cast<const BlockContext*>(tp));
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {reduceScatterSeq(g[0], fromHandle(ctx)), at::Tensor()};
  }
};

struct ScatterSeq : torch::autograd::Function<ScatterSeq> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t tp) {
    ctx->saved_data["tp"] = tp;
    return reduceScatterSeq(x, *reinterpret_cast<const BlockContext*>(tp));
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {allGatherSeq(g[0], fromHandle(ctx)), at::Tensor()};
  }
};

// SP's gather + column-parallel linear in one function so that autograd keeps x (B, T/TP, C), not
// the gathered (B, T, C) (Korthikanti et al. 2022, §4.2.2; Megatron-LM's
// LinearWithGradAccumulationAndAsyncCommunication): two fewer (B, T, C) tensors per layer, for one
// more all-gather per column-parallel linear in backward. Backward works in the (T, B, ·) layout
// the collectives slice along dim 0; dW and db do not depend on the row order.
struct GatherSeqLinear : torch::autograd::Function<GatherSeqLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const std::optional<at::Tensor>& b, int64_t tp) {
    ctx->saved_data["tp"] = tp;
    ctx->saved_data["has_bias"] = b.has_value();
    ctx->save_for_backward({x, w});                                        // the shard only
    at::Tensor full = allGatherSeq(x, *reinterpret_cast<const BlockContext*>(tp));  // (B, T, C), freed here
    return linear(full, w, b.value_or(at::Tensor()));                      // (B, T, N)
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const BlockContext& tp = fromHandle(ctx);
    auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1];
    const int64_t B = x.size(0), Ts = x.size(1), C = x.size(2), T = Ts * tp.size(), N = w.size(0);
    at::Tensor local = x.transpose(0, 1).contiguous();                     // (T/TP, B, C)
    at::Tensor full = at::empty({T, B, C}, local.options());               // (T, B, C)
    auto gathered = tp.group->allGatherAsync(full, local);                 // re-gather, overlapped with dX
    at::Tensor dy = g[0].transpose(0, 1).contiguous().view({T * B, N});    // (T·B, N)
    at::Tensor dx = mmNT(dy, w.t());                                       // (T·B, C) = dY W, partial sums
    gathered->wait();
    at::Tensor dx_local = at::empty({Ts * B, C}, dx.options());            // (T/TP·B, C)
    auto scattered = tp.group->reduceScatterAsync(dx_local, dx);           // overlapped with dW
    at::Tensor xf = full.view({T * B, C});                                 // (T·B, C)
    at::Tensor dw, db;
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    if (gemmTNUsable(dy, xf)) {                                            // (N, C) = dYᵀ X, db = Σ dY, one pass
      dw = at::empty({N, C}, xf.options());
      if (has_bias) db = at::empty({N}, xf.options());
      gemmTN(dy, xf, dw, /*accumulate=*/false, db);
    } else {
      dw = at::mm(dy.t(), xf);                                             // (N, C)
      if (has_bias) db = dy.sum(0);                                        // (N)
    }
    scattered->wait();
    return {dx_local.view({Ts, B, C}).transpose(0, 1).contiguous(), dw, db, at::Tensor()};  // dx (B, T/TP, C)
  }
};

}  // namespace

at::Tensor columnParallelLinear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const BlockContext& tp) {
  if (!tp.active() || !tp.sequence_parallel) return linear(copyToTp(x, tp), w, b);
  // TRAINSCOPE_SP_KEEP_GATHERED=1: the previous layout (keep the gathered input), so that a test can
  // measure what the shard saves on the same run.
  static const bool keep_gathered = [] {
    const char* v = std::getenv("TRAINSCOPE_SP_KEEP_GATHERED");
    return v && std::string(v) == "1";
  }();
  // FP8 (model/fp8.h) saves its own FP8 copy of the gathered input instead of the shard.
  if (keep_gathered || fp8::metaFor(w)) return linear(gatherSeq(x, tp), w, b);
  return GatherSeqLinear::apply(x, w, b.defined() ? std::optional<at::Tensor>(b) : std::nullopt, handle(tp));
}

at::Tensor sumOverReplicas(const at::Tensor& x, int64_t replicas, const BlockContext& tp) {
  if (!tp.active() || replicas <= 1) return x;
  return SumOverReplicas::apply(x, replicas, handle(tp));
}

at::Tensor copyToTp(const at::Tensor& x, const BlockContext& tp) {
  return tp.active() ? CopyToTp::apply(x, handle(tp)) : x;
}
at::Tensor reduceFromTp(const at::Tensor& x, const BlockContext& tp) {
  return tp.active() ? ReduceFromTp::apply(x, handle(tp)) : x;
}
at::Tensor gatherSeq(const at::Tensor& x, const BlockContext& tp) {
  return tp.active() ? GatherSeq::apply(x, handle(tp)) : x;
}
at::Tensor scatterSeq(const at::Tensor& x, const BlockContext& tp) {
  return tp.active() ? ScatterSeq::apply(x, handle(tp)) : x;
}

at::Tensor vocabParallelEmbedding(const at::Tensor& wte_local, const at::Tensor& tokens, const BlockContext& tp) {
  if (!tp.active()) return at::embedding(wte_local, tokens);
  at::Tensor in_shard = (tokens >= tp.vocab_begin).logical_and_(tokens < tp.vocab_begin + tp.vocab_local);
  at::Tensor local = (tokens - tp.vocab_begin).mul_(in_shard);             // out-of-shard -> row 0
  at::Tensor e = at::embedding(wte_local, local);                          // (B, T, C)
  return e * in_shard.unsqueeze(-1).to(e.scalar_type());                   // zero rows we don't own
}

int64_t paddedVocab(int64_t vocab, int tp) { return (vocab + tp - 1) / tp * tp; }

}  // namespace trainscope::runtime
