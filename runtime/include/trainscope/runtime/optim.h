// trainscope/runtime/optim.h — optimizers over fp32 master weights.
//
//   AdamW      — torch.optim.AdamW's update (decoupled decay, bias correction), run through
//                LibTorch's fused multi-tensor kernel (_fused_adamw_); 8 bytes of state/param.
//   Adafactor  — Shazeer & Stern 2018 without first moment: factored second moments (row and
//                column sums) for matrices, 4(r+c) bytes per r x c matrix; update clipping at
//                RMS 1; beta2_t = 1 - t^-0.8; external learning rate (relative_step off).
//   Adam8bit   — Adam with both moments stored block-wise quantised to 8 bits (Dettmers et al.
//                2022 in spirit): m as int8 with a square-root companding map, sqrt(v) as uint8
//                with the same map, one fp32 absmax per block per moment. 2 bytes/param + 8/block.
//   SGD        — p -= lr (g + wd p), optional heavy-ball momentum.
// Weight decay applies only where the decay mask says (2-D matrices).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "trainscope/runconfig/config.h"

namespace trainscope::runtime {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // grads: fp32, one per parameter, already unscaled and clipped.
  virtual void step(const std::vector<at::Tensor>& grads, double lr) = 0;
  // The same with every gradient multiplied by `multiplier` first (gradient clipping). The default
  // scales the gradients in place; AdamW folds it into its fused kernel instead (one pass less).
  virtual void step(const std::vector<at::Tensor>& grads, double lr, double multiplier);
  virtual int64_t stateBytes() const = 0;  // bytes of optimizer state held now
  int64_t steps() const { return t_; }
  // The state tensors as they are now, in a fixed order (a checkpoint saves them; a resumed run
  // copies saved ones into them, then setSteps): their number, shapes and dtypes depend only on the
  // parameters the optimizer was made with.
  virtual std::vector<at::Tensor> stateTensors() const = 0;
  void setSteps(int64_t t) { t_ = t; }
  // The state in a form elementwise in the parameters: per kind, one tensor per parameter of that
  // parameter's shape, in parameter order; `counters` AdamW's per-tensor step counts (every one the
  // same). A checkpoint saves it per Hugging Face parameter name, whatever the layout
  // (docs/checkpoints.md). `live`: the tensors are the state itself (AdamW's exp_avg and exp_avg_sq,
  // SGD's momentum). Otherwise they are a copy in that form (8-bit Adam's moments dequantised to
  // fp32; Adafactor's row and column factors broadcast over the matrix) and, once written into,
  // `commit(saved)` makes the state from them (8-bit Adam quantises its blocks again; Adafactor takes
  // each factor back, the mean over the broadcast dimension where the pieces differ, and estimates a
  // shard's own factor where the state was saved for the whole matrix). `saved[i]`: the shape of the
  // tensor parameter i's state was saved for (its matrix before tensor parallelism cut it).
  struct Elementwise {
    bool elementwise = false;
    std::vector<std::string> kinds;
    std::vector<std::vector<at::Tensor>> state;  // [kind][parameter]
    std::vector<at::Tensor> counters;
    bool live = true;
    std::function<void(const std::vector<std::vector<int64_t>>& saved)> commit;  // set when !live
  };
  virtual Elementwise elementwise() const { return {}; }

 protected:
  int64_t t_ = 0;  // completed steps
};

// params: fp32 master weights (updated in place). decay[i]: whether params[i] gets weight decay.
std::unique_ptr<Optimizer> makeOptimizer(const TrainConfig& cfg, std::vector<at::Tensor> params,
                                         std::vector<bool> decay);

// The state bytes each keeps are the formulas of trainscope/workloads/memory.h (tested against
// stateBytes()).

// Learning rate at 0-based `step`: linear warm-up over `warmup` steps to lr, then cosine decay to
// lr * min_ratio at the last step (nanoGPT / llm.c schedule).
double learningRate(int64_t step, int64_t total, int64_t warmup, double lr, double min_ratio);

}  // namespace trainscope::runtime
