// gpt.cpp — the forward pass (weights: weights.cpp; norms, RoPE, GQA: attention.cpp). Backward is LibTorch autograd, except that checkpointed
// regions (checkpoint.cpp) save only their inputs and recompute in backward, and the LM head
// (fused_head.cpp) produces its gradients in forward.
#include "trainscope/runtime/gpt.h"

#include <ATen/ATen.h>

#include <cmath>
#include <tuple>

#include "model/attention.h"
#include "model/checkpoint.h"
#include "model/context_parallel.h"
#include "cpu/cpu_ops.h"
#include "cpu/decoder_ops.h"
#include "model/fused_head.h"
#include "model/linear.h"
#include "model/moe.h"
#include "model/tensor_parallel.h"
#include "trainscope/common/error.h"
#include "trainscope/tracer/range.h"

namespace trainscope::runtime {

// ---- forward ----------------------------------------------------------------------------------

namespace detail {

// Causal attention core: qkv (B, T, (h + 2·kv)·HS) -> y (B, T, C'), C' = h·HS = C/TP with n_head
// (h) local query heads and n_kv (kv; 0: h) K/V heads. The part selective checkpointing recomputes.
at::Tensor attentionCore(const at::Tensor& qkv, int64_t n_head, int64_t n_kv, const cpu_ops::ScoreBias& bias) {
  if (n_kv <= 0) n_kv = n_head;
  if (cpu_ops::attentionUsable(qkv)) return cpu_ops::causalAttention(qkv, n_head, n_kv, bias);  // (B, T, C')
  const int64_t B = qkv.size(0), T = qkv.size(1), HS = qkv.size(2) / (n_head + 2 * n_kv), C = n_head * HS;
  auto parts = qkv.split_with_sizes({C, n_kv * HS, n_kv * HS}, /*dim=*/2);
  at::Tensor q = parts[0].view({B, T, n_head, HS}).transpose(1, 2);       // (B, NH, T, HS)
  at::Tensor k = parts[1].view({B, T, n_kv, HS}).transpose(1, 2);         // (B, KV, T, HS)
  at::Tensor v = parts[2].view({B, T, n_kv, HS}).transpose(1, 2);         // (B, KV, T, HS)
  std::optional<at::Tensor> mask;  // a sliding window, ALiBi: the (1, NH, T, T) scores bias
  if ((bias.window > 0 && bias.window < T) || !bias.slopes.empty()) {
    const at::Tensor t = at::arange(T, qkv.options().dtype(at::kLong));
    mask = scoreBias(t, t, bias, qkv.scalar_type()).unsqueeze(0);
  }
  at::Tensor y = at::scaled_dot_product_attention(q, k, v, mask, /*dropout_p=*/0.0,
                                                  /*is_causal=*/!mask.has_value(), /*scale=*/std::nullopt,
                                                  /*enable_gqa=*/n_kv != n_head);  // (B, NH, T, HS)
  return y.transpose(1, 2).reshape({B, T, C});                            // (B, T, C')
}

// One pre-LN transformer block: x (B, T, C) -> (B, T, C); (B, T/TP, C) under sequence parallelism.
// Without TP the collectives are identities and the biases fuse into the GEMMs. What the block is
// (norm, biases, RoPE, GQA, SwiGLU) is p.arch; GPT-2's path is the one it always was.
at::Tensor blockForward(const BlockWeights& p, const at::Tensor& x, int64_t n_head, bool selective,
                        const BlockContext& tp) {
  const BlockArch& a = p.arch;
  const bool sp = tp.sequence_parallel, split = tp.active();
  auto leaveTp = [&](const at::Tensor& t) { return sp ? scatterSeq(t, tp) : reduceFromTp(t, tp); };
  auto addBias = [](const at::Tensor& t, const at::Tensor& b) { return b.defined() ? t + b : t; };

  // The column-parallel linears enter TP themselves: under SP they keep only the (B, T/TP, C) shard.
  at::Tensor h = normForward(x, p.ln1_w, p.ln1_b, a);                      // (B, T', C)
  // GQA with tp > KV: this rank's K/V rows are a replica; their gradient sums over its replicas.
  const int64_t kv_total = a.n_kv_head > 0 ? a.n_kv_head : n_head * tp.size();
  const int64_t replicas = tp.size() > kv_total ? tp.size() / kv_total : 1;
  at::Tensor qkv_w = p.qkv_w, qkv_b = p.qkv_b;
  if (replicas > 1) {
    const int64_t q_rows = n_head * a.head_dim;
    auto kvPart = [&](const at::Tensor& t) {
      return at::cat({t.narrow(0, 0, q_rows), sumOverReplicas(t.narrow(0, q_rows, t.size(0) - q_rows), replicas, tp)});
    };
    qkv_w = kvPart(qkv_w);
    if (qkv_b.defined()) qkv_b = kvPart(qkv_b);
  }
  at::Tensor qkv = columnParallelLinear(h, qkv_w, qkv_b, tp);              // (B, T, (h + 2kv)·D)
  // RoPE and GQA: the CPU attention kernel (fp32) and the context-parallel ring read the grouped K/V
  // heads as they are (B, T, (h + 2kv)·D), RoPE at the rank's positions (under CP its chunks' global
  // ones); SDPA takes multi-head (B, T, 3·h·D), each K/V head repeated for its query heads. GPT-2's
  // qkv already is both.
  const int64_t kv = kv_total >= tp.size() ? kv_total / tp.size() : 1;
  const bool grouped = tp.cp || cpu_ops::attentionUsable(qkv);
  if (a.rope || (!grouped && kv != n_head)) {
    const int64_t T = qkv.size(1);
    const at::Tensor positions =
        tp.cp ? tp.cp->positions : at::arange(T, at::TensorOptions().dtype(at::kLong).device(qkv.device()));
    qkv = grouped ? ropeQkv(qkv, n_head, kv, a.head_dim, positions, a) : mhaQkv(qkv, n_head, kv, a.head_dim, positions, a);
  }
  const int64_t core_kv = grouped ? kv : n_head;
  // Under context parallelism the ring keeps only q, k, v and the output (flash-style): selective
  // checkpointing has nothing left to drop there.
  // The window and ALiBi's slopes of this rank's query heads (heads tp.rank()·h … of the model's).
  const cpu_ops::ScoreBias bias{a.window, a.alibi ? alibiSlopes(a.n_head, tp.rank() * n_head, n_head) : std::vector<double>{}};
  at::Tensor y = tp.cp       ? contextParallelAttention(qkv, n_head, core_kv, *tp.cp, bias)  // (B, T/CP, h·D)
                 : selective ? checkpointAttention(qkv, n_head, core_kv, bias)  // (B, T, h·D)
                             : attentionCore(qkv, n_head, core_kv, bias);
  at::Tensor x1 = split ? addBias(x + leaveTp(linear(y, p.proj_w, at::Tensor())), p.proj_b)  // (B, T', C)
                        : linearAdd(y, p.proj_w, p.proj_b, x);                  // x + proj(y), one pass

  h = normForward(x1, p.ln2_w, p.ln2_b, a);                                // (B, T', C)
  // A MoE MLP runs whole on every TP rank (replicated input, replicated output: no TP collective).
  if (p.isMoe()) return x1 + moeForward(p.moe, h, moeContext(tp));         // (B, T, C)
  at::Tensor f = columnParallelLinear(h, p.fc_w, p.fc_b, tp);              // (B, T, F2/TP)
  if (a.swiglu) {
    f = cpu_ops::swiglu(f);                                                // silu(gate)·up (B, T, F/TP)
  } else {
    f = cpu_ops::usable(f) ? cpu_ops::geluTanh(f) : at::gelu(f, "tanh");
  }
  return split ? addBias(x1 + leaveTp(linear(f, p.fcproj_w, at::Tensor())), p.fcproj_b)      // (B, T', C)
               : linearAdd(f, p.fcproj_w, p.fcproj_b, x1);
}

}  // namespace detail

at::Tensor stageForward(const GptWeights& w, const StageSpec& st, const BlockContext& tp, int64_t n_head,
                        const at::Tensor& input, const at::Tensor& targets, Checkpointing ckpt,
                        LayerHooks* hooks) {
  at::Tensor x;
  if (hooks) hooks->beforeForward(-1);
  if (st.first) {
    const int64_t T = input.size(1);                                       // T/CP under CP
    at::Tensor e = vocabParallelEmbedding(w.wte, input, tp);              // (B, T, C), partial under TP
    // The positions this rank holds: 0..T-1, or its two context-parallel chunks.
    // Rotary (or no) positions: nothing is added here.
    if (!w.wpe.defined()) {
      x = tp.sequence_parallel ? scatterSeq(e, tp) : reduceFromTp(e, tp);  // (B, T', C)
    } else {
      at::Tensor wpe = tp.cp ? w.wpe.index_select(0, tp.cp->positions) : w.wpe.narrow(0, 0, T);  // (T, C)
      if (tp.sequence_parallel) {
        const int64_t Ts = T / tp.size();
        x = scatterSeq(e, tp) + wpe.narrow(0, tp.rank() * Ts, Ts);         // (B, T/TP, C)
      } else {
        x = reduceFromTp(e, tp) + wpe;                                     // (B, T, C)
      }
    }
  } else {
    x = input;
  }
  const int64_t heads = n_head / tp.size();
  for (size_t l = 0; l < w.blocks.size(); ++l) {
    const BlockWeights& b = w.blocks[l];
    TRAINSCOPE_RANGE(tracer::names::kLayer);
    if (hooks) hooks->beforeForward(int64_t(l));
    if (ckpt == Checkpointing::Full) x = checkpointBlock(b, x, heads, tp);  // saves x only
    else x = detail::blockForward(b, x, heads, ckpt == Checkpointing::Selective, tp);
    if (hooks) x = hooks->afterForward(int64_t(l), x);
  }
  if (!st.last) return x;
  const int64_t C = x.size(2);
  x = normForward(x, w.lnf_w, w.lnf_b, w.arch);
  x = tp.sequence_parallel ? gatherSeq(x, tp) : copyToTp(x, tp);          // (B, T, C)
  const int64_t B = x.size(0), T = x.size(1);
  // LM head (tied, or untied: lm_head) + cross-entropy, fused and chunked: the (B*T, V) logits never
  // exist at once — except for --dump-logits (no targets, no TP), which asks for them.
  const at::Tensor& head = w.lm_head.defined() ? w.lm_head : w.wte;
  if (!targets.defined()) return at::matmul(x, head.t());                 // (B, T, V)
  TRAINSCOPE_RANGE(tracer::names::kHead);
  return lmHeadCrossEntropy(x.reshape({B * T, C}), head, targets.reshape({B * T}), tp);  // fp32 scalar
}

at::Tensor gptLoss(const GptWeights& w, int64_t n_head, const at::Tensor& inputs, const at::Tensor& targets,
                   Checkpointing ckpt) {
  static const BlockContext kNoTp;
  StageSpec whole = StageSpec::whole(int64_t(w.blocks.size()));
  whole.arch = w.arch;
  whole.learned_positions = w.wpe.defined();
  whole.tied = !w.lm_head.defined();
  return stageForward(w, whole, kNoTp, n_head, inputs, targets, ckpt);
}

}  // namespace trainscope::runtime
