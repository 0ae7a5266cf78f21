// pipeline.cpp — GPipe and 1F1B over the pipeline group (see pipeline.h).
#include "parallel/pipeline.h"

#include <ATen/ATen.h>

#include "trainscope/tracer/range.h"
#include <torch/csrc/autograd/autograd.h>

#include <deque>
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
  std::vector<std::shared_ptr<Pending>> sends;          // gradient sends: waited at the end
  std::vector<std::shared_ptr<Pending>> forward_sends(M);  // activation sends, by micro-batch
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(p.device));
  const int kFwd = 0, kBwd = 1;
  auto tag = [](int64_t m, int dir) { return static_cast<int>(2 * m + dir); };

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
      TRAINSCOPE_RANGE(tracer::names::kBackward);
      torch::autograd::backward({outputs[m]}, {g});
    }
    if (!first) {
      at::Tensor g = inputs[m].grad().contiguous();
      sends.push_back(p.pp.send(g, me - 1, tag(m, kBwd)));
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
  for (auto& s : sends) s->wait();
  for (auto& s : forward_sends)
    if (s) s->wait();
  return loss_sum;
}

}  // namespace trainscope::runtime
