// fused_head.cpp — LM head and cross-entropy fused, chunked over rows.
//
// Unfused, the head materialises logits (N, V) in forward, then log-softmax, NLL, their backward
// (a zero-filled (N, V) gradient and another (N, V) pass) — for GPT-2's V = 50257 and N = 8192
// tokens that is 1.6 GB per buffer, and on any size it is memory-bound work between two GEMMs.
// Because the loss is the end of the graph, its gradient with respect to the logits is known in
// forward: dlogits = (softmax(logits) - onehot(target)) / N. So forward walks the rows in chunks
// small enough to stay in cache and, per chunk, does
//     logits = x_c W^T                (R, V)   GEMM
//     loss  += Σ (logsumexp - logit[target])
//     p      = softmax(logits) - onehot         in place, entries in [-1, 1]
//     dX_c   = p W                    (R, C)   GEMM   (fp32 buffer)
//     dW    += p^T x_c                (V, C)   GEMM   (fp32 buffer)
// and backward scales dX and dW by the incoming gradient / N in fp32 (so fp16's loss scale arrives
// before anything is rounded to fp16). Same FLOPs as unfused, no (N, V)
// buffer ever, and the softmax passes run on cached data. (The idea of Liger-Kernel's fused
// linear cross-entropy, done here with LibTorch's own GEMMs.)
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>

#include "cpu/cpu_ops.h"
#include "model/fused_head.h"
#include "cpu/gemm_avx512.h"
#include "model/linear.h"
#include "model/tensor_parallel.h"

#include <algorithm>
#include <limits>

namespace trainscope::runtime {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t chunkRows(int64_t n, int64_t vocab) {
  // About 8 MiB of fp32 logits per chunk, but never fewer than 128 rows, so GEMMs stay efficient
  // (for V = 50257 that floor makes a chunk ~25 MiB — still far from the (N, V) buffer). On the small
  // CPU model 8 MiB (512 rows) spent 20% less in the dW += p^T x GEMM than 2 MiB (128 rows): its
  // reduction dimension is the chunk's row count.
  const int64_t budget = (int64_t(8) << 20) / 4;
  return std::min(n, std::max<int64_t>(128, budget / vocab));
}

struct FusedHead : public torch::autograd::Function<FusedHead> {
  // x (N, C), w (V, C), targets (N) int64 → mean loss (fp32 scalar)
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& targets, int64_t tp_handle) {
    const BlockContext& tp = *reinterpret_cast<const BlockContext*>(tp_handle);
    const int64_t N = x.size(0), V = w.size(0);
    // Vocabulary rows this rank holds: [v0, v0 + V); rows >= vocab are padding and never win.
    const int64_t v0 = tp.active() ? tp.vocab_begin : 0;
    const int64_t real = tp.active() ? std::clamp<int64_t>(tp.vocab - v0, 0, V) : V;
    const bool need_grad = x.requires_grad() || w.requires_grad();
    const bool lowp = w.scalar_type() != at::kFloat;
    // Saved gradients stay fp32 and *unnormalised* (softmax - onehot, entries in [-1, 1]) until
    // backward, where 1/N and the incoming gradient (fp16's loss scale among it) are applied: in
    // fp16, (softmax - onehot)/N for a 50k vocabulary would flush to zero before the scale arrives.
    at::Tensor dx = need_grad ? at::empty(x.sizes(), x.options().dtype(at::kFloat)) : at::Tensor();
    // dw: the CPU fp32 path below writes it on the first chunk; the others accumulate from zero.
    const bool fused_rows = !tp.active() && real == V && cpu_ops::usable(x) && w.scalar_type() == at::kFloat;
    at::Tensor dw = !need_grad ? at::Tensor()
                    : fused_rows ? at::empty(w.sizes(), w.options().dtype(at::kFloat))
                                 : at::zeros(w.sizes(), w.options().dtype(at::kFloat));
    at::Tensor loss = at::zeros({}, x.options().dtype(at::kFloat));
    const int64_t R = chunkRows(N, V);
    for (int64_t r0 = 0; r0 < N; r0 += R) {
      const int64_t rows = std::min(R, N - r0);
      at::Tensor xc = x.narrow(0, r0, rows);                        // (R, C)
      at::Tensor tc = targets.narrow(0, r0, rows).unsqueeze(1);     // (R, 1)
      at::Tensor logits = mmNT(xc, w);                               // (R, V)
      if (fused_rows) {
        // CPU fp32: one fused pass per row (max, exp and sum, normalise, - onehot).
        loss.add_(cpu_ops::softmaxCrossEntropyInPlace(logits, tc.squeeze(1)));
        if (!need_grad) continue;
        dx.narrow(0, r0, rows).copy_(mmNT(logits, w.t()));           // (R, C) = p W
        if (gemmTNUsable(logits, xc)) gemmTN(logits, xc, dw, /*accumulate=*/r0 > 0);  // (V, C) [+]= p^T x
        else if (r0 == 0) at::mm_out(dw, logits.t(), xc);
        else dw.addmm_(logits.t(), xc);
        continue;
      }
      if (lowp) logits = logits.to(at::kFloat);
      if (real < V) logits.narrow(1, real, V - real).fill_(-std::numeric_limits<float>::infinity());
      at::Tensor lse, target_logit, local_t, in_shard;
      if (!tp.active()) {
        lse = at::logsumexp(logits, 1, /*keepdim=*/true);            // (R, 1)
        target_logit = logits.gather(1, tc);                         // (R, 1)
      } else {
        // Vocabulary-parallel: global max, then global sum of exp and the target's logit (which
        // lives on one rank) in one all-reduce.
        at::Tensor mx = std::get<0>(logits.max(1, /*keepdim=*/true)); // (R, 1)
        tp.group->allReduce(mx, Reduce::Max);
        in_shard = (tc >= v0).logical_and_(tc < v0 + V);             // (R, 1)
        local_t = (tc - v0).mul_(in_shard);
        at::Tensor stats = at::cat({(logits - mx).exp_().sum(1, true),
                                    logits.gather(1, local_t).mul_(in_shard)}, 1);  // (R, 2)
        tp.group->allReduce(stats, Reduce::Sum);
        lse = stats.narrow(1, 0, 1).log() + mx;
        target_logit = stats.narrow(1, 1, 1);
      }
      loss.add_((lse - target_logit).sum());
      if (!need_grad) continue;
      at::Tensor p = logits.sub_(lse).exp_();                        // softmax, in place
      if (!tp.active()) p.scatter_add_(1, tc, at::full({rows, 1}, -1.0f, p.options()));  // - onehot
      else p.scatter_add_(1, local_t, in_shard.to(at::kFloat).neg());
      at::Tensor dxc = dx.narrow(0, r0, rows);
      if (lowp) {
        dxc.copy_(at::mm(p.to(w.scalar_type()), w));                 // (R, C)
        dw.addmm_(p.t(), xc.to(at::kFloat));                          // (V, C)
      } else {
        dxc.copy_(mmNT(p, w.t()));                                    // (R, C) = p W, oneDNN on CPU
        dw.addmm_(p.t(), xc);                                         // (V, C)
      }
    }
    if (need_grad) {
      ctx->saved_data["dx"] = dx;
      ctx->saved_data["dw"] = dw;
      ctx->saved_data["n"] = N;
    }
    return loss.div_(double(N));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    at::Tensor scale = grad_out[0].to(at::kFloat) / double(ctx->saved_data["n"].toInt());  // scalar
    at::Tensor dx = ctx->saved_data["dx"].toTensor(), dw = ctx->saved_data["dw"].toTensor();
    // fp32 here; autograd casts each to its input's dtype (bf16/fp16 copies) on the way out.
    return {dx.mul_(scale), dw.mul_(scale), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor lmHeadCrossEntropy(const at::Tensor& x, const at::Tensor& w, const at::Tensor& targets,
                              const BlockContext& tp) {
  return FusedHead::apply(x, w, targets, reinterpret_cast<int64_t>(&tp));
}

at::Tensor lmHeadCrossEntropy(const at::Tensor& x, const at::Tensor& w, const at::Tensor& targets) {
  static const BlockContext kNoTp;
  return lmHeadCrossEntropy(x, w, targets, kNoTp);
}

at::Tensor lmHeadCrossEntropyReference(const at::Tensor& x, const at::Tensor& w, const at::Tensor& targets) {
  at::Tensor logits = at::linear(x, w);                              // (N, V)
  if (logits.scalar_type() != at::kFloat) logits = logits.to(at::kFloat);
  return at::cross_entropy_loss(logits, targets);
}

}  // namespace trainscope::runtime
