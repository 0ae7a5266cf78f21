// pipeline.cpp — GPipe, 1F1B and interleaved 1F1B over the pipeline group (see pipeline.h).
#include "parallel/pipeline.h"

#include <ATen/ATen.h>

#include "trainscope/tracer/range.h"
#include <torch/csrc/autograd/autograd.h>

#include <cassert>
#include <deque>
#include <memory>
#include <string>

namespace trainscope::runtime {

namespace {

at::Tensor runInterleaved(const PipelineStep& p, const std::function<Batch(int64_t)>& batch,
                          const ChunkForward& forward, double loss_scale,
                          const std::function<void(int64_t)>& before_backward);

// One step of GPipe or 1F1B on a stage that holds one model chunk: forwards and backwards of
// micro-batches, in the schedule's order (run).
class OneChunk {
 public:
  OneChunk(const PipelineStep& p, const std::function<Batch(int64_t)>& batch, const ChunkForward& forward,
           double loss_scale, const std::function<void(int64_t)>& before_backward)
      : p_(p), batch_(batch), forward_(forward), before_backward_(before_backward), loss_scale_(loss_scale),
        me_(p.pp.rank()), n_(p.pp.size()), first_(p.stage.first), last_(p.stage.last), M_(p.micro_batches),
        act_opts_(at::TensorOptions().dtype(p.dtype).device(p.device)), inputs_(size_t(M_)), outputs_(size_t(M_)),
        forward_sends_(size_t(M_)),
        loss_sum_(at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(p.device))) {}

  at::Tensor run() {
    if (p_.schedule == PipelineSchedule::GPipe) {
      for (int64_t m = 0; m < M_; ++m) forwardMicroBatch(m);
      for (int64_t m = 0; m < M_; ++m) backwardMicroBatch(m);
    } else {
      const int64_t warmup = std::min<int64_t>(n_ - me_ - 1, M_);
      int64_t next_fwd = 0, next_bwd = 0;
      for (; next_fwd < warmup; ++next_fwd) forwardMicroBatch(next_fwd);
      while (next_fwd < M_) {  // steady state: one forward, one backward
        forwardMicroBatch(next_fwd++);
        backwardMicroBatch(next_bwd++);
      }
      while (next_bwd < M_) backwardMicroBatch(next_bwd++);  // cool-down
    }
    retireGradientSend();  // the activation sends were all waited in their backward
    return loss_sum_;
  }

 private:
  static constexpr int kFwd = 0, kBwd = 1;
  static int tag(int64_t m, int dir) { return static_cast<int>(2 * m + dir); }

  // Waits for the previous micro-batch's gradient send and frees its buffer. Called once this
  // micro-batch's receive (if any) is done, before its compute, so the buffer never adds to a
  // forward's or a backward's peak and at most one gradient send is outstanding. Deadlock-free even
  // though a Gloo send completes only once its receiver has posted the recv: stage s − 1 posts the
  // recv of gradient m after its own forwards (which need only stage s − 2) and gradients < m (all
  // delivered), never after anything this stage does later. Checked for p ≤ 8, M ≤ 12, both
  // schedules, in a rendezvous model of the sends; that model deadlocks the naive rule "wait for
  // every outstanding send before each receive" under 1F1B: neighbours wait on each other's sends.
  void retireGradientSend() {
    if (!gradient_send_) return;
    gradient_send_->wait();
    gradient_send_.reset();
  }

  void forwardMicroBatch(int64_t m) {
    TRAINSCOPE_RANGE(tracer::names::kMicroBatch);
    Batch b = batch_(m);
    at::Tensor in;
    if (first_) {
      in = b.inputs;                                                   // (mbs, T) tokens
    } else {
      in = at::empty(p_.activation_shape, act_opts_);                  // (mbs, T', C)
      TRAINSCOPE_RANGE(tracer::names::kPipelineRecv);
      p_.pp.recv(in, me_ - 1, tag(m, kFwd));
      in.requires_grad_(true);
    }
    retireGradientSend();
    at::Tensor out = forward_(0, in, b.targets);
    if (last_) {
      loss_sum_ += out.detach();
    } else {
      at::Tensor o = out.detach().contiguous();
      forward_sends_[size_t(m)] = p_.pp.send(o, me_ + 1, tag(m, kFwd));
    }
    inputs_[size_t(m)] = in;
    outputs_[size_t(m)] = out;
  }

  void backwardMicroBatch(int64_t m) {
    const size_t i = size_t(m);
    before_backward_(m);
    if (last_) {
      retireGradientSend();
      TRAINSCOPE_RANGE(tracer::names::kBackward);
      (outputs_[i] * loss_scale_).backward();
    } else {
      at::Tensor g = at::empty(p_.activation_shape, act_opts_);        // (mbs, T', C)
      {
        TRAINSCOPE_RANGE(tracer::names::kPipelineRecv);
        p_.pp.recv(g, me_ + 1, tag(m, kBwd));
      }
      // The next stage has sent m's gradient, so it received m's activation long ago: the send
      // is complete and its buffer can go now (under 1F1B that keeps memory at pp - s micro-batches).
      forward_sends_[i]->wait();
      forward_sends_[i].reset();
      retireGradientSend();
      TRAINSCOPE_RANGE(tracer::names::kBackward);
      torch::autograd::backward({outputs_[i]}, {g});
    }
    if (!first_) {
      at::Tensor g = inputs_[i].grad().contiguous();
      assert(!gradient_send_);  // retired before this backward
      gradient_send_ = p_.pp.send(g, me_ - 1, tag(m, kBwd));
    }
    inputs_[i] = at::Tensor();   // free this micro-batch's activations
    outputs_[i] = at::Tensor();
  }

  const PipelineStep& p_;
  const std::function<Batch(int64_t)>& batch_;
  const ChunkForward& forward_;
  const std::function<void(int64_t)>& before_backward_;
  const double loss_scale_;
  const int me_, n_;
  const bool first_, last_;
  const int64_t M_;
  at::TensorOptions act_opts_;
  // By micro-batch: its input and output (held for backward). A send's tensor lives as long as its
  // Pending: each is waited and dropped as soon as the schedule allows (retireGradientSend, and the
  // backward for activations), so no send outlives the next micro-batch's receive.
  std::vector<at::Tensor> inputs_, outputs_;
  std::vector<std::shared_ptr<Pending>> forward_sends_;  // activation sends, by micro-batch
  std::shared_ptr<Pending> gradient_send_;               // the one input-gradient send in flight
  at::Tensor loss_sum_;
};

}  // namespace

at::Tensor runPipeline(const PipelineStep& p, const std::function<Batch(int64_t)>& batch, const ChunkForward& forward,
                       double loss_scale, const std::function<void(int64_t)>& before_backward) {
  if (p.stage.chunks() > 1) return runInterleaved(p, batch, forward, loss_scale, before_backward);
  return OneChunk(p, batch, forward, loss_scale, before_backward).run();
}

namespace {

// The i-th forward (or backward) of a rank, as Megatron-LM orders them (get_model_chunk_id,
// get_microbatch_id_in_model_chunk): groups of p micro-batches go through chunk 0, 1, …, v − 1
// forward, and through v − 1, …, 0 backward.
PipelineUnit unitOf(int64_t i, int p, int v, bool forward) {
  const int64_t group = int64_t(p) * v;
  const int k = int((i % group) / p);
  return {forward, forward ? k : v - 1 - k, (i / group) * p + i % p};
}

// Forwards a stage runs before its first backward (Megatron-LM: two per later rank, to cover the
// round trip of the chunk boundary, plus one group of p for each further chunk), at most all v·M.
int64_t warmupOf(int p, int v, int rank, int64_t M) {
  return std::min<int64_t>(2 * int64_t(p - rank - 1) + int64_t(v - 1) * p, int64_t(v) * M);
}

// One step of the interleaved schedule on this rank: units in Megatron-LM's order, each a forward
// or a backward of one model chunk on one micro-batch.
class Interleaved {
 public:
  Interleaved(const PipelineStep& p, const std::function<Batch(int64_t)>& batch, const ChunkForward& forward,
              double loss_scale, const std::function<void(int64_t)>& before_backward)
      : p_(p), batch_(batch), forward_(forward), before_backward_(before_backward), loss_scale_(loss_scale),
        me_(p.pp.rank()), n_(p.pp.size()), v_(p.stage.chunks()), M_(p.micro_batches), chunks_(int64_t(n_) * v_),
        inputs_(size_t(v_), std::vector<at::Tensor>(size_t(M_))), outputs_(inputs_),
        forward_sends_(size_t(v_), std::vector<std::shared_ptr<Pending>>(size_t(M_))),
        act_opts_(at::TensorOptions().dtype(p.dtype).device(p.device)),
        loss_sum_(at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(p.device))) {}

  at::Tensor run() {
    for (const PipelineUnit& u : interleavedOrder(n_, v_, me_, M_)) {
      if (u.forward) forwardUnit(u);
      else backwardUnit(u);
    }
    retireGradientSends(0);
    return loss_sum_;
  }

 private:
  int next() const { return (me_ + 1) % n_; }       // the last rank feeds rank 0's next chunk
  int prev() const { return (me_ + n_ - 1) % n_; }
  int64_t globalChunk(int k) const { return me_ + int64_t(k) * n_; }
  // The boundary between global chunks c and c + 1 carries micro-batch m's activation (dir 0) and
  // its gradient (dir 1): one tag each, so no two messages between two ranks can be confused.
  int tag(int64_t m, int64_t c, int dir) const { return static_cast<int>(2 * (m * chunks_ + c) + dir); }

  // See pipeline.h: at most `keep` gradient sends outstanding (1 into a forward, 0 into a backward).
  void retireGradientSends(size_t keep) {
    while (gradient_sends_.size() > keep) {
      gradient_sends_.front()->wait();
      gradient_sends_.pop_front();
    }
  }

  void forwardUnit(const PipelineUnit& u) {
    const int64_t c = globalChunk(u.chunk);
    const size_t k = size_t(u.chunk), m = size_t(u.m);
    TRAINSCOPE_RANGE(tracer::names::kMicroBatch);
    const std::string label = "chunk/" + std::to_string(u.chunk);  // which model chunk, for the viewer
    TRAINSCOPE_RANGE(label.c_str());
    Batch b;
    if (c == 0 || c == chunks_ - 1) b = batch_(u.m);                  // tokens, or targets for the loss
    at::Tensor in;
    if (c == 0) {
      in = b.inputs;                                                   // (mbs, T) tokens
    } else {
      in = at::empty(p_.activation_shape, act_opts_);                  // (mbs, T', C)
      TRAINSCOPE_RANGE(tracer::names::kPipelineRecv);
      p_.pp.recv(in, prev(), tag(u.m, c - 1, 0));
      in.requires_grad_(true);
    }
    retireGradientSends(1);
    at::Tensor out = forward_(u.chunk, in, b.targets);
    if (c == chunks_ - 1) {
      loss_sum_ += out.detach();
    } else {
      at::Tensor o = out.detach().contiguous();
      forward_sends_[k][m] = p_.pp.send(o, next(), tag(u.m, c, 0));
    }
    inputs_[k][m] = in;
    outputs_[k][m] = out;
  }

  void backwardUnit(const PipelineUnit& u) {
    const int64_t c = globalChunk(u.chunk);
    const size_t k = size_t(u.chunk), m = size_t(u.m);
    const std::string label = "chunk/" + std::to_string(u.chunk);
    TRAINSCOPE_RANGE(label.c_str());
    before_backward_(u.m);
    if (c == chunks_ - 1) {
      retireGradientSends(0);
      TRAINSCOPE_RANGE(tracer::names::kBackward);
      (outputs_[k][m] * loss_scale_).backward();
    } else {
      at::Tensor g = at::empty(p_.activation_shape, act_opts_);       // (mbs, T', C)
      {
        TRAINSCOPE_RANGE(tracer::names::kPipelineRecv);
        p_.pp.recv(g, next(), tag(u.m, c, 1));
      }
      forward_sends_[k][m]->wait();  // its receiver has already sent the gradient back: complete
      forward_sends_[k][m].reset();
      retireGradientSends(0);
      TRAINSCOPE_RANGE(tracer::names::kBackward);
      torch::autograd::backward({outputs_[k][m]}, {g});
    }
    if (c > 0) {
      at::Tensor g = inputs_[k][m].grad().contiguous();
      gradient_sends_.push_back(p_.pp.send(g, prev(), tag(u.m, c - 1, 1)));
    }
    inputs_[k][m] = at::Tensor();  // free this unit's activations
    outputs_[k][m] = at::Tensor();
  }

  const PipelineStep& p_;
  const std::function<Batch(int64_t)>& batch_;
  const ChunkForward& forward_;
  const std::function<void(int64_t)>& before_backward_;
  const double loss_scale_;
  const int me_, n_, v_;
  const int64_t M_, chunks_;
  // By chunk and micro-batch: the unit's input and output (held for backward), its activation send.
  std::vector<std::vector<at::Tensor>> inputs_, outputs_;
  std::vector<std::vector<std::shared_ptr<Pending>>> forward_sends_;
  std::deque<std::shared_ptr<Pending>> gradient_sends_;  // oldest first
  at::TensorOptions act_opts_;
  at::Tensor loss_sum_;
};

at::Tensor runInterleaved(const PipelineStep& p, const std::function<Batch(int64_t)>& batch,
                          const ChunkForward& forward, double loss_scale,
                          const std::function<void(int64_t)>& before_backward) {
  return Interleaved(p, batch, forward, loss_scale, before_backward).run();
}

}  // namespace

std::vector<PipelineUnit> interleavedOrder(int pp, int v, int rank, int64_t M) {
  const int64_t total = int64_t(v) * M, warmup = warmupOf(pp, v, rank, M);
  std::vector<PipelineUnit> order;
  for (int64_t i = 0; i < warmup; ++i) order.push_back(unitOf(i, pp, v, true));
  for (int64_t i = 0; i + warmup < total; ++i) {  // steady state: one forward, one backward
    order.push_back(unitOf(i + warmup, pp, v, true));
    order.push_back(unitOf(i, pp, v, false));
  }
  for (int64_t i = total - warmup; i < total; ++i) order.push_back(unitOf(i, pp, v, false));  // cool-down
  return order;
}

}  // namespace trainscope::runtime
