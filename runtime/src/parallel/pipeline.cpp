// pipeline.cpp — GPipe and 1F1B over the pipeline group (see pipeline.h).
#include "parallel/pipeline.h"

#include <ATen/ATen.h>

#include "trainscope/tracer/range.h"
#include <torch/csrc/autograd/autograd.h>

#include <cassert>
#include <memory>

namespace trainscope::runtime {

at::Tensor runPipeline(const PipelineStep& p, const std::function<Batch(int64_t)>& batch,
                       const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& forward,
                       double loss_scale, const std::function<void(int64_t)>& before_backward) {
  const int me = p.pp.rank(), n = p.pp.size();
  const bool first = p.stage.first, last = p.stage.last;
  const int64_t M = p.micro_batches;
  auto act_opts = at::TensorOptions().dtype(p.dtype).device(p.device);
  std::vector<at::Tensor> inputs(M), outputs(M);
  // A send's tensor lives as long as its Pending: each is waited and dropped as soon as the schedule
  // allows (retireGradientSend, and bwd for activations), so no send outlives the next micro-batch's receive.
  std::vector<std::shared_ptr<Pending>> forward_sends(M);  // activation sends, by micro-batch
  std::shared_ptr<Pending> gradient_send;                  // the one input-gradient send in flight
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(p.device));
  const int kFwd = 0, kBwd = 1;
  auto tag = [](int64_t m, int dir) { return static_cast<int>(2 * m + dir); };

  // Waits for the previous micro-batch's gradient send and frees its buffer. Called once this
  // micro-batch's receive (if any) is done, before its compute, so the buffer never adds to a
  // forward's or a backward's peak and at most one gradient send is outstanding. Deadlock-free even
  // though a Gloo send completes only once its receiver has posted the recv: stage s − 1 posts the
  // recv of gradient m after its own forwards (which need only stage s − 2) and gradients < m (all
  // delivered), never after anything this stage does later. Checked for p ≤ 8, M ≤ 12, both
  // schedules, in a rendezvous model of the sends; that model deadlocks the naive rule "wait for
  // every outstanding send before each receive" under 1F1B: neighbours wait on each other's sends.
  auto retireGradientSend = [&] {
    if (!gradient_send) return;
    gradient_send->wait();
    gradient_send.reset();
  };

  auto fwd = [&](int64_t m) {
    TRAINSCOPE_RANGE(tracer::names::kMicroBatch);
    Batch b = batch(m);
    at::Tensor in;
    if (first) {
      in = b.inputs;                                                   // (mbs, T) tokens
    } else {
      in = at::empty(p.activation_shape, act_opts);                    // (mbs, T', C)
      TRAINSCOPE_RANGE(tracer::names::kPipelineRecv);
      p.pp.recv(in, me - 1, tag(m, kFwd));
      in.requires_grad_(true);
    }
    retireGradientSend();
    at::Tensor out = forward(in, b.targets);
    if (last) {
      loss_sum += out.detach();
    } else {
      at::Tensor o = out.detach().contiguous();
      forward_sends[m] = p.pp.send(o, me + 1, tag(m, kFwd));
    }
    inputs[m] = in;
    outputs[m] = out;
  };

  auto bwd = [&](int64_t m) {
    before_backward(m);
    if (last) {
      retireGradientSend();
      TRAINSCOPE_RANGE(tracer::names::kBackward);
      (outputs[m] * loss_scale).backward();
    } else {
      at::Tensor g = at::empty(p.activation_shape, act_opts);
      {
        TRAINSCOPE_RANGE(tracer::names::kPipelineRecv);
        p.pp.recv(g, me + 1, tag(m, kBwd));
      }
      // The next stage has sent m's gradient, so it received m's activation long ago: the send
      // is complete and its buffer can go now (under 1F1B that keeps memory at pp - s micro-batches).
      forward_sends[m]->wait();
      forward_sends[m].reset();
      retireGradientSend();
      TRAINSCOPE_RANGE(tracer::names::kBackward);
      torch::autograd::backward({outputs[m]}, {g});
    }
    if (!first) {
      at::Tensor g = inputs[m].grad().contiguous();
      assert(!gradient_send);  // retired before this backward
      gradient_send = p.pp.send(g, me - 1, tag(m, kBwd));
    }
    inputs[m] = at::Tensor();   // free this micro-batch's activations
    outputs[m] = at::Tensor();
  };

  if (p.schedule == PipelineSchedule::GPipe) {
    for (int64_t m = 0; m < M; ++m) fwd(m);
    for (int64_t m = 0; m < M; ++m) bwd(m);
  } else {
    const int64_t warmup = std::min<int64_t>(n - me - 1, M);
    int64_t next_fwd = 0, next_bwd = 0;
    for (; next_fwd < warmup; ++next_fwd) fwd(next_fwd);
    while (next_fwd < M) {  // steady state: one forward, one backward
      fwd(next_fwd++);
      bwd(next_bwd++);
    }
    while (next_bwd < M) bwd(next_bwd++);  // cool-down
  }
  retireGradientSend();  // the activation sends were all waited in their backward
  return loss_sum;
}

}  // namespace trainscope::runtime
