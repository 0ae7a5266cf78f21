// pipeline.h — pipeline-parallel schedules (internal to the runtime).
//
// A stage runs forward and backward of its layers for M micro-batches, receiving activations
// from the previous stage and gradients from the next, point to point (sends asynchronous, receives
// blocking; tags keep micro-batches apart). A send's buffer is freed as soon as the schedule may wait
// for it without deadlock: an activation send when that micro-batch's gradient comes back (its
// output is held for backward until then anyway), a gradient send once the next micro-batch's
// receive (if any) is done, before it computes. So a stage holds at most one gradient send beyond its micro-batches in flight.
//   GPipe (Huang et al. 2019): all M forwards, then all M backwards. Peak activations: M.
//   1F1B  (Narayanan et al. 2019/2021): stage s runs pp-s-1 warm-up forwards, then alternates one
//         forward and one backward, then drains. Peak activations: at most pp-s micro-batches.
#pragma once

#include <functional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "trainscope/runtime/comm.h"
#include "trainscope/runconfig/config.h"
#include "trainscope/runtime/data.h"
#include "trainscope/runtime/gpt.h"

namespace trainscope::runtime {

struct PipelineStep {
  Group& pp;
  StageSpec stage;
  PipelineSchedule schedule;
  int64_t micro_batches;
  std::vector<int64_t> activation_shape;  // (mbs, T or T/TP, C)
  at::ScalarType dtype;
  at::Device device;
};

// batch(m) gives micro-batch m; forward(input, targets) runs this stage (loss on the last stage);
// before_backward(m) runs before micro-batch m's backward. Returns the sum of the micro-batch
// losses on the last stage (0 elsewhere).
at::Tensor runPipeline(const PipelineStep& p, const std::function<Batch(int64_t)>& batch,
                       const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& forward,
                       double loss_scale, const std::function<void(int64_t)>& before_backward);

}  // namespace trainscope::runtime
