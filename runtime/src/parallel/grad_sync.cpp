// grad_sync.cpp — see grad_sync.h.
#include "parallel/grad_sync.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <numeric>
#include <utility>

#include "trainscope/models/dp_layout.h"
#include "trainscope/tracer/range.h"

namespace trainscope::runtime {
namespace {

// The layout's input (models/dp_layout.h): the tensors' shapes in flat() order, and which are managed.
std::vector<models::Slot> slotsOf(const std::vector<at::Tensor>& master, const std::vector<bool>& managed) {
  std::vector<models::Slot> slots(master.size());
  for (size_t i = 0; i < master.size(); ++i) {
    slots[i].shape = master[i].sizes().vec();
    slots[i].managed = managed[i];
  }
  return slots;
}

}  // namespace

struct GradSync::Bucket {
  at::Tensor buffer;                  // flat fp32 (Zero2: d·S elements, only while filling or in flight)
  std::vector<size_t> params;
  size_t ready = 0;
  std::shared_ptr<Pending> pending;
  // Zero2
  int64_t base = 0, shard = 0;        // where it starts in flat_params_; S, its elements per rank
  at::Tensor grad_shard;              // (S) fp32: this rank's summed gradients, kept all step
  at::Tensor out;                     // (S) the reduce-scatter's output while in flight
  bool launched = false;              // in this micro-batch
};

GradSync::GradSync(Group& dp, Mode mode, int64_t bucket_bytes, std::vector<at::Tensor>& compute,
                   std::vector<at::Tensor>& master, bool low_precision, const std::vector<bool>& managed)
    : dp_(dp), mode_(dp.size() == 1 && mode != Mode::Zero1 ? Mode::None : mode), low_precision_(low_precision),
      compute_(compute) {
  const size_t n = compute.size();
  main_grads_.resize(n);
  owned_.assign(n, true);
  bucket_of_.assign(n, -1);
  offset_in_bucket_.assign(n, 0);
  auto f32 = master[0].options().dtype(at::kFloat);
  for (size_t i = 0; i < n; ++i)
    if (!managed[i]) main_grads_[i] = at::zeros(master[i].sizes(), f32);

  if (mode_ == Mode::Zero1) layoutZero1(compute, master, managed);
  else if (mode_ == Mode::Buckets) layoutBuckets(master, managed, bucket_bytes);
  else if (mode_ == Mode::Zero2) layoutZero2(compute, master, managed, bucket_bytes);
  else
    for (size_t i = 0; i < n; ++i)
      if (managed[i]) main_grads_[i] = at::zeros(master[i].sizes(), f32);

  // What this rank updates: the owned whole tensors (ZeRO-2 listed its slices in its layout, and
  // the unmanaged tensors, whole on every rank, come here).
  for (size_t i = 0; i < n; ++i)
    if (owned_[i] && main_grads_[i].defined() && (mode_ != Mode::Zero2 || !managed[i]))
      shards_.push_back({i, main_grads_[i], master[i]});

  // fp32: autograd accumulates straight into the main gradients (in place, no copy). ZeRO-2 has no
  // full main gradient: autograd's own is added into the bucket and released, as in bf16.
  if (!low_precision_)
    for (size_t i = 0; i < n; ++i)
      if (mode_ != Mode::Zero2 || !managed[i]) compute_[i].mutable_grad() = main_grads_[i];
  // A post-hook on every leaf's AccumulateGrad runs once its gradient for this backward is in.
  for (size_t i = 0; i < n; ++i) {
    std::shared_ptr<torch::autograd::Node> acc = torch::autograd::impl::grad_accumulator(compute_[i]);
    acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          onGradReady(i);
          return outputs;
        }));
    hooks_.push_back(acc);
  }
}

GradSync::~GradSync() {
  for (auto& b : buckets_)
    if (b->pending) {
      try {
        b->pending->wait();
      } catch (...) {
      }
    }
}

// Parameter i's master weight becomes flat[at, at + numel) (its values copied there).
void GradSync::seat(size_t i, const at::Tensor& flat, int64_t at, std::vector<at::Tensor>& compute,
                    std::vector<at::Tensor>& master) {
  at::Tensor p = flat.narrow(0, at, master[i].numel()).view(master[i].sizes());
  {
    c10::NoGradGuard g;
    p.copy_(master[i]);
  }
  p.requires_grad_(master[i].requires_grad());
  if (&compute[i] != &master[i] && compute[i].is_same(master[i])) compute[i] = p;
  master[i] = p;
  compute_[i] = compute[i];
}

// ZeRO-1: whole tensors to owners (models/dp_layout.h); rank r's segment of the flat buffers is its shard.
void GradSync::layoutZero1(std::vector<at::Tensor>& compute, std::vector<at::Tensor>& master,
                           const std::vector<bool>& managed) {
  const int R = dp_.size();
  auto f32 = master[0].options().dtype(at::kFloat);
  const models::DpLayout layout = models::dpLayout(slotsOf(master, managed), ZeroStage::OptimizerStates, R, 0);
  const models::ShardGroup& g = layout.groups[0];
  segment_ = g.shard;
  flat_grads_ = at::zeros({g.padded}, f32);
  flat_params_ = at::zeros({g.padded}, f32);
  for (size_t k = 0; k < g.tensors.size(); ++k) {
    const size_t i = g.tensors[k];
    owned_[i] = !g.local(k, dp_.rank()).empty();
    main_grads_[i] = flat_grads_.narrow(0, g.ranges[k].begin, master[i].numel()).view(master[i].sizes());
    seat(i, flat_params_, g.ranges[k].begin, compute, master);
  }
}

void GradSync::layoutBuckets(std::vector<at::Tensor>& master, const std::vector<bool>& managed, int64_t bucket_bytes) {
  auto f32 = master[0].options().dtype(at::kFloat);
  for (const auto& g : models::dpLayout(slotsOf(master, managed), ZeroStage::None, dp_.size(), bucket_bytes).groups) {
    auto b = std::make_unique<Bucket>();
    b->buffer = at::zeros({g.padded}, f32);
    for (size_t k = 0; k < g.tensors.size(); ++k) {
      const size_t i = g.tensors[k];
      main_grads_[i] = b->buffer.narrow(0, g.ranges[k].begin, master[i].numel()).view(master[i].sizes());
      bucket_of_[i] = int(buckets_.size());
    }
    b->params = g.tensors;
    buckets_.push_back(std::move(b));
  }
}

// The buckets of models/dp_layout.h: each of n elements padded to d·S (S = ⌈n/d⌉); rank r owns its
// elements [r·S, (r+1)·S). A parameter that straddles shards is updated in slices by several ranks.
void GradSync::layoutZero2(std::vector<at::Tensor>& compute, std::vector<at::Tensor>& master,
                           const std::vector<bool>& managed, int64_t bucket_bytes) {
  const int64_t me = dp_.rank();
  auto f32 = master[0].options().dtype(at::kFloat);
  const models::DpLayout layout = models::dpLayout(slotsOf(master, managed), ZeroStage::Gradients, dp_.size(), bucket_bytes);
  flat_params_ = at::zeros({layout.padded()}, f32);
  int64_t base = 0;
  for (const auto& g : layout.groups) {
    auto b = std::make_unique<Bucket>();
    b->base = base;
    b->shard = g.shard;
    b->grad_shard = at::zeros({b->shard}, f32);
    b->params = g.tensors;
    const int64_t lo_mine = g.mine(me).begin;
    for (size_t k = 0; k < g.tensors.size(); ++k) {
      const size_t i = g.tensors[k];
      const int64_t off = g.ranges[k].begin;
      seat(i, flat_params_, base + off, compute, master);
      bucket_of_[i] = int(buckets_.size());
      offset_in_bucket_[i] = off;
      owned_[i] = false;  // no whole tensor: its slices below
      const models::Range piece = g.local(k, me);
      if (!piece.empty())
        shards_.push_back({i, b->grad_shard.narrow(0, off + piece.begin - lo_mine, piece.size()),
                           master[i].view({-1}).narrow(0, piece.begin, piece.size()), piece.begin});
    }
    base += g.padded;
    buckets_.push_back(std::move(b));
  }
}

int64_t GradSync::gradBytes() const {
  int64_t bytes = 0;
  for (const auto& g : main_grads_)
    if (g.defined()) bytes += g.nbytes();
  for (const auto& b : buckets_)
    if (b->grad_shard.defined()) bytes += b->grad_shard.nbytes();
  for (const auto& c : compute_)
    if (low_precision_ && c.grad().defined()) bytes += c.grad().nbytes();
  return bytes;
}

void GradSync::zeroGrads() {
  for (auto& b : buckets_) {
    b->ready = 0;
    b->launched = false;
    if (b->grad_shard.defined()) b->grad_shard.zero_();
  }
  for (auto& g : main_grads_)
    if (g.defined()) g.zero_();
  micro_has_grads_ = false;
  rs_total_ns_ = rs_hidden_ns_ = 0;
}

void GradSync::onGradReady(size_t i) {
  if (mode_ == Mode::Zero2 && bucket_of_[i] >= 0) return addToBucket(i);
  if (low_precision_) {
    // Megatron-LM's main_grad: the 16-bit gradient goes into fp32 at once and is not kept.
    c10::NoGradGuard g;
    main_grads_[i].add_(compute_[i].grad());
    compute_[i].mutable_grad() = at::Tensor();
  }
  if (mode_ != Mode::Buckets || !last_micro_ || bucket_of_[i] < 0) return;
  Bucket& b = *buckets_[bucket_of_[i]];
  if (++b.ready == b.params.size()) launch(b);
}

void GradSync::launch(Bucket& b) { b.pending = dp_.allReduceAsync(b.buffer, Reduce::Sum); }

void GradSync::beforeMicroBatch(bool last) {
  last_micro_ = last;
  if (mode_ == Mode::Zero2 && micro_has_grads_) flushMicroBatch();
}

// ZeRO-2: autograd's gradient of parameter i (fp32 or 16-bit) is added into its bucket's full buffer,
// allocated at the bucket's first gradient of the micro-batch, and released.
void GradSync::addToBucket(size_t i) {
  c10::NoGradGuard no_grad;
  Bucket& b = *buckets_[bucket_of_[i]];
  if (b.pending) retireShard(b, 0);  // still reducing the previous micro-batch's sum
  if (!b.buffer.defined()) b.buffer = at::zeros({b.shard * dp_.size()}, b.grad_shard.options());
  {
    at::Tensor g = std::exchange(compute_[i].mutable_grad(), at::Tensor());  // released at this scope's end
    b.buffer.narrow(0, offset_in_bucket_[i], g.numel()).view(g.sizes()).add_(g);
  }
  micro_has_grads_ = true;
  if (++b.ready == b.params.size()) launchShard(b);
}

// One reduce-scatter in flight at a time: the previous one is retired first, so at most two full
// buckets exist (this one, and the next filling) whatever the relative speed of compute and network.
void GradSync::launchShard(Bucket& b) {
  if (inflight_) retireShard(*inflight_, 0);
  if (!b.buffer.defined()) b.buffer = at::zeros({b.shard * dp_.size()}, b.grad_shard.options());
  b.out = at::empty({b.shard}, b.grad_shard.options());
  b.pending = dp_.reduceScatterAsync(b.out, b.buffer);
  b.launched = true;
  b.ready = 0;
  inflight_ = &b;
}

// Waits for b's reduce-scatter, adds the result into the shard and frees the full bucket.
// backward_end 0: retired during backward (all of it hidden behind compute).
void GradSync::retireShard(Bucket& b, int64_t backward_end) {
  b.pending->wait();
  const double dur = double(b.pending->endNs() - b.pending->startNs());
  rs_total_ns_ += dur;
  rs_hidden_ns_ += backward_end == 0
                       ? dur
                       : double(std::max<int64_t>(0, std::min(b.pending->endNs(), backward_end) - b.pending->startNs()));
  b.pending.reset();
  b.grad_shard.add_(b.out);
  b.out = at::Tensor();
  b.buffer = at::Tensor();
  if (inflight_ == &b) inflight_ = nullptr;
}

// The end of a micro-batch's backward: buckets that did not fill (a parameter without a gradient)
// are reduced as they are, in bucket order on every rank, so that the collectives match. The last
// reduce-scatter is waited for here, not during the next micro-batch: its full bucket (and Gloo's
// copy of it) would otherwise sit under that micro-batch's activations.
void GradSync::flushMicroBatch() {
  const int64_t backward_end = tracer::nowNs();
  for (auto& b : buckets_)
    if (!b->launched) launchShard(*b);
  if (inflight_) retireShard(*inflight_, backward_end);
  for (auto& b : buckets_) b->launched = false;
  micro_has_grads_ = false;
}

void GradSync::finishBackward() {
  hidden_share_ = 0;
  comm_seconds_ = 0;
  if (mode_ == Mode::None) return;
  const double inv = 1.0 / double(dp_.size());
  if (mode_ == Mode::Zero1) {
    const int64_t t0 = tracer::nowNs();
    at::Tensor mine = at::empty({segment_}, flat_grads_.options());
    dp_.reduceScatter(mine, flat_grads_);
    flat_grads_.narrow(0, dp_.rank() * segment_, segment_).copy_(mine.mul_(inv));
    comm_seconds_ = double(tracer::nowNs() - t0) * 1e-9;
    return;
  }
  const int64_t backward_end = tracer::nowNs();
  if (mode_ == Mode::Zero2) {
    if (micro_has_grads_) flushMicroBatch();
    for (auto& b : buckets_) b->grad_shard.mul_(inv);
    comm_seconds_ = rs_total_ns_ * 1e-9;
    hidden_share_ = rs_total_ns_ > 0 ? rs_hidden_ns_ / rs_total_ns_ : 0;
    return;
  }
  double total = 0, hidden = 0;
  for (auto& b : buckets_) {
    if (!b->pending) launch(*b);  // parameters that got no gradient this step
    b->pending->wait();
    const double dur = double(b->pending->endNs() - b->pending->startNs());
    total += dur;
    hidden += double(std::max<int64_t>(0, std::min(b->pending->endNs(), backward_end) - b->pending->startNs()));
    b->pending.reset();
    b->buffer.mul_(inv);
    b->ready = 0;
  }
  comm_seconds_ = total * 1e-9;
  hidden_share_ = total > 0 ? hidden / total : 0;
}

Group* GradSync::normGroup() {
  return (mode_ == Mode::Zero1 || mode_ == Mode::Zero2) && dp_.size() > 1 ? &dp_ : nullptr;
}

void GradSync::afterUpdate() {
  c10::NoGradGuard g;
  if (mode_ == Mode::Zero1) {
    at::Tensor mine = flat_params_.narrow(0, dp_.rank() * segment_, segment_).clone();
    dp_.allGather(flat_params_, mine);
  } else if (mode_ == Mode::Zero2) {
    // Bucket by bucket, so that the copy of this rank's shard is one bucket's S elements at a time.
    for (auto& b : buckets_) {
      at::Tensor all = flat_params_.narrow(0, b->base, b->shard * dp_.size());
      at::Tensor mine = all.narrow(0, dp_.rank() * b->shard, b->shard).clone();
      dp_.allGather(all, mine);
    }
  }
}

}  // namespace trainscope::runtime
