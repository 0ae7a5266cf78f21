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
//   Interleaved 1F1B (Narayanan et al. 2021, §2.2; Megatron-LM's
//         forward_backward_pipelining_with_interleaving), when the stage holds v > 1 model chunks
//         (StageSpec::chunks): the units are (chunk, micro-batch) pairs, taken p micro-batches at a
//         time through chunk 0, then chunk 1, …; stage s runs min(2(p−s−1) + (v−1)p, v·M) warm-up
//         forwards, then one forward and one backward, then drains. Bubble (p−1)/(v·M) of the ideal
//         step instead of (p−1)/M. Activation sends go from chunk c to c + 1 (rank s to s + 1, and
//         the last rank back to rank 0 one chunk on); each tag names the micro-batch and the chunk
//         boundary. Gradient sends: at most one outstanding into a forward, none into a backward
//         (a rendezvous model of Gloo's sends, p ≤ 6, v ≤ 4, M ≤ 4p: waiting for every one before a
//         forward deadlocks already at p 2, v 2, M 4). The trace wraps each unit in a range named
//         "chunk/k" (k: the rank's model chunk; global virtual stage s + k·p).
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
  StageSpec stage;  // this rank's layers: one model chunk, or v under interleaving
  PipelineSchedule schedule;
  int64_t micro_batches;
  std::vector<int64_t> activation_shape;  // (mbs, T or T/TP, C)
  at::ScalarType dtype;
  at::Device device;
};

// forward(k, input, targets) runs the stage's model chunk k (0 when not interleaved; the loss on the
// model's last chunk). Targets are defined only where the chunk computes the loss.
using ChunkForward = std::function<at::Tensor(int chunk, const at::Tensor& input, const at::Tensor& targets)>;

// One unit of the interleaved schedule: the forward or the backward of this stage's model chunk
// `chunk` on micro-batch m.
struct PipelineUnit {
  bool forward;
  int chunk;
  int64_t m;
};
// Stage `rank`'s units in Megatron-LM's interleaved order (pp stages of v chunks, M micro-batches).
std::vector<PipelineUnit> interleavedOrder(int pp, int v, int rank, int64_t M);

// batch(m) gives micro-batch m; before_backward(m) runs before each backward of micro-batch m (so
// m == M − 1 is each chunk's last). Returns the sum of the micro-batch losses on the stage that holds
// the model's last chunk (0 elsewhere).
at::Tensor runPipeline(const PipelineStep& p, const std::function<Batch(int64_t)>& batch, const ChunkForward& forward,
                       double loss_scale, const std::function<void(int64_t)>& before_backward);

}  // namespace trainscope::runtime
