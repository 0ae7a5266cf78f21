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

}  // namespace trainscope::workloads
