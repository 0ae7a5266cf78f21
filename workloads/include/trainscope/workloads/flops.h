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

// The same for any workload, counting a mixture of experts' active FLOPs (what MFU counts, as
// Megatron-LM and DeepSpeed-MoE do): each MoE layer's MLP costs per token, forward, its router
// (2·C·E) and the k experts plus the shared one it passes through (2 GEMMs of 2·C·F each), instead
// of the dense MLP's 16·C². Capacity drops are not subtracted (the bound a balanced router reaches).
// A dense workload gives exactly stepFlops above.
inline StepFlops stepFlops(const Workload& w, int64_t batch, int64_t seq, Recompute r) {
  StepFlops f = stepFlops(batch, seq, w.n_layer, w.n_embd, w.vocab_size, r);
  if (!w.isMoe()) return f;
  const double tokens = double(batch) * double(seq), C = double(w.n_embd), F = double(w.expertHidden());
  const double experts = double(w.top_k) + (w.shared_expert ? 1.0 : 0.0);
  const double mlp_delta = tokens * (2.0 * C * double(w.n_experts) + experts * 4.0 * C * F - 16.0 * C * C);
  const double fwd_delta = double(w.moeLayers()) * mlp_delta;  // one forward over all MoE layers
  f.model += 3.0 * fwd_delta;
  f.hardware += (r == Recompute::Full ? 4.0 : 3.0) * fwd_delta;
  return f;
}

}  // namespace trainscope::workloads
