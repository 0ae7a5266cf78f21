// trainscope/workloads/flops.h — FLOPs of one GPT training step (Narayanan et al. 2021, §5.1).
//
// Counting a multiply-add as 2 FLOPs and only the matrix multiplications, one training iteration
// over B sequences of length s (l layers, hidden h, vocabulary V) costs
//   model FLOPs  = 72 B s l h^2 (1 + s/(6h) + V/(12 l h))        (forward + backward = 3 forwards)
// With full activation recomputation each transformer layer's forward runs twice, giving the
// paper's 96 B s l h^2 (1 + s/(6h) + V/(16 l h)). Selective recomputation (Korthikanti et al. 2022)
// re-runs only the attention core: QK^T and AV, 4 B s^2 h per layer.
// MFU uses model FLOPs; HFU (hardware FLOPs) adds what recomputation costs.
#pragma once

#include <cstdint>

#include "trainscope/workloads/workload.h"

namespace trainscope::workloads {

enum class Recompute { None, Selective, Full };

struct StepFlops {
  double model = 0;     // no recomputation
  double hardware = 0;  // what was executed, recomputation included
};

inline StepFlops stepFlops(int64_t batch, int64_t seq, int64_t layers, int64_t hidden, int64_t vocab,
                           Recompute r) {
  const double B = double(batch), s = double(seq), l = double(layers), h = double(hidden), V = double(vocab);
  const double layer_fwd = 24.0 * B * s * l * h * h * (1.0 + s / (6.0 * h));  // all layers, one forward
  const double head_fwd = 2.0 * B * s * h * V;
  StepFlops f;
  f.model = 3.0 * (layer_fwd + head_fwd);
  f.hardware = f.model;
  if (r == Recompute::Full) f.hardware += layer_fwd;
  if (r == Recompute::Selective) f.hardware += 4.0 * B * s * s * h * l;
  return f;
}

// The same for any workload. Per token and layer, forward, a multiply-add being 2 FLOPs
// (Narayanan et al. 2021's counting, generalised as in Chinchilla's appendix F and torchtitan's
// get_num_flop_per_token, attention at full s x s as the paper counts it):
//   attention projections 2·C·(NH·HS) [Q] + 2·2·C·(KV·HS) [K, V: smaller under GQA] + 2·(NH·HS)·C [out]
//   attention core        2·2·s·(NH·HS)                      [QK^T and AV]
//   MLP                   m·2·C·F, m = 2 (GELU) or 3 (SwiGLU: gate, up, down)
// and the head 2·C·V per token. For GPT-2's shape (KV = NH, NH·HS = C, GELU with F = 4C) this is
// 24·C² + 4·s·C, the paper's formula; such a workload gives exactly stepFlops above.
// A mixture of experts counts its active FLOPs (what MFU counts, as Megatron-LM and DeepSpeed-MoE
// do): each MoE layer's MLP costs per token, forward, its router (2·C·E) and the k experts plus the
// shared one it passes through (m·2·C·F each), instead of the dense MLP. Capacity drops are not
// subtracted (the bound a balanced router reaches). Selective recomputation re-runs the attention
// core (4·B·s²·NH·HS per layer); full recomputation one more forward of every layer.
//
// A sliding window of W < s keys (Mistral's sliding_window; Qwen2's layers from max_window_layers on)
// counts only the keys inside it: the paper's s keys per query are twice the mean of a causal row
// (s/2), and a windowed causal row sees min(t + 1, W) keys, whose mean over t < s is W − W²/(2s) in
// the continuum limit; so a windowed layer's core costs 2·2·(2W − W²/s)·(NH·HS) per token instead
// of 2·2·s·(NH·HS) (windowKeys below; the op list's flash op sweeps the same keys, models/
// layer_ops.cpp window_keys). W ≥ s: s, no change.
inline double windowKeys(int64_t window, int64_t seq) {
  const double W = double(window), s = double(seq);
  return W > 0 && W < s ? 2.0 * W - W * W / s : s;
}

inline double mlpFlopsPerToken(const Workload& w, int64_t hidden) {
  return (w.mlp == Mlp::SwiGLU ? 3.0 : 2.0) * 2.0 * double(w.n_embd) * double(hidden);
}

inline StepFlops stepFlops(const Workload& w, int64_t batch, int64_t seq, Recompute r) {
  StepFlops f = stepFlops(batch, seq, w.n_layer, w.n_embd, w.vocab_size, r);
  const double tokens = double(batch) * double(seq), C = double(w.n_embd), s = double(seq), L = double(w.n_layer);
  const double q = double(w.n_head) * double(w.headSize()), kv = double(w.kvHeads()) * double(w.headSize());
  // Each dense layer's forward per token beyond GPT-2's 24·C² + 4·s·C (0 for GPT-2's shape).
  const double layer = 2.0 * C * q + 4.0 * C * kv + 2.0 * q * C + 4.0 * s * q + mlpFlopsPerToken(w, w.ffnHidden());
  const double gpt_layer = 24.0 * C * C + 4.0 * s * C;
  double fwd_delta = 0;
  if (layer != gpt_layer) fwd_delta += tokens * L * (layer - gpt_layer);
  if (w.isMoe()) {
    // the router, k experts, and the shared expert at its own width with its gate's 2C (Qwen2-MoE)
    const double shared = w.shared_expert ? mlpFlopsPerToken(w, w.sharedExpertHidden()) +
                                                (w.shared_expert_gate ? 2.0 * C : 0.0) : 0.0;
    const double mlp_delta = tokens * (2.0 * C * double(w.n_experts) + double(w.top_k) * mlpFlopsPerToken(w, w.expertHidden()) +
                                       shared - mlpFlopsPerToken(w, w.ffnHidden()));
    fwd_delta += double(w.moeLayers()) * mlp_delta;  // one forward over all MoE layers
  }
  // The windowed layers' cores sweep windowKeys keys per query, not s (once per forward).
  const double window_cut = 4.0 * tokens * q * (s - windowKeys(w.sliding_window, seq)) * double(w.windowedLayers());
  fwd_delta -= window_cut;
  f.model += 3.0 * fwd_delta;
  f.hardware += (r == Recompute::Full ? 4.0 : 3.0) * fwd_delta;
  if (r == Recompute::Selective && q != C) f.hardware += 4.0 * tokens * s * (q - C) * L;
  if (r == Recompute::Selective) f.hardware -= window_cut;  // the re-run cores are windowed too
  return f;
}

}  // namespace trainscope::workloads
