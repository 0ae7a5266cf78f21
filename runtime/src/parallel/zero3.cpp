// zero3.cpp — see zero3.h.
#include "parallel/zero3.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/core/StorageImpl.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>

#include "trainscope/common/error.h"
#include "trainscope/models/dp_layout.h"

namespace trainscope::runtime {
namespace {

// FSDP's way of freeing a gathered parameter while autograd still refers to it: the storage keeps
// its identity (every view and saved reference stays valid) but holds no bytes until re-filled.
void releaseStorage(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}

void allocateStorage(const at::Tensor& t, int64_t nbytes) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(s->allocator()->allocate(size_t(nbytes)));
  s->set_nbytes(size_t(nbytes));
}

}  // namespace

struct Zero3::Unit {
  std::vector<size_t> tensors;  // indices into flat() order
  std::vector<int64_t> offset;  // each tensor's start in the flat buffer
  int64_t numel = 0, padded = 0, shard = 0;
  at::Tensor full;                   // (padded) compute dtype; storage only while gathered
  at::Tensor master, compute, grad;  // (shard): fp32, compute dtype (master in fp32), fp32
  enum class State { Free, Gathering, Ready } state = State::Free;
  std::shared_ptr<Pending> gathering;
  size_t grads_in = 0;  // tensors of the unit whose gradient this backward has delivered
};

struct Zero3::InFlight {
  std::shared_ptr<Pending> pending;
  at::Tensor in, out;  // (padded) full fp32 gradients, (shard) their reduced share
  size_t unit = 0;
};

Zero3::Zero3(Group& shard, Group* replicas, int dp, const StageSpec& stage, const std::vector<at::Tensor>& full,
             at::ScalarType compute_dtype, const at::Device& device)
    : shard_(shard), replicas_(replicas), dp_(dp), dtype_(compute_dtype), device_(device) {
  // The units of models/dp_layout.h, from the tensors in flat() order: [wte][wpe] blocks… [ln_f w, b]
  // [lm_head]; unit 0 the non-block tensors, unit 1 + b block b's.
  const size_t n = full.size(),
               head = size_t(stage.first || (stage.last && stage.tied)) + size_t(stage.first && stage.learned_positions);
  const size_t tail = stage.last ? stage.arch.normTensors() + (stage.tied ? 0 : 1) : 0;
  const std::vector<int64_t> layers = stage.layerIds();
  std::vector<models::Slot> slots(n);
  size_t i0 = head;
  for (size_t b = 0; b < layers.size(); ++b) {
    const size_t count = stage.blockKind(layers[b]).count();  // a MoE block holds more tensors
    for (size_t i = i0; i < i0 + count && i < n; ++i) slots[i].layer = int64_t(b);
    i0 += count;
  }
  if (n != i0 + tail) TRAINSCOPE_THROW("ZeRO-3: unexpected tensor count");
  for (size_t i = 0; i < n; ++i) slots[i].shape = full[i].sizes().vec();
  const int s = shard_.size(), r = shard_.rank();
  const models::DpLayout layout = models::dpLayout(slots, ZeroStage::Parameters, s, 0);
  units_.resize(layout.groups.size());
  unit_of_.assign(n, 0);
  for (size_t g = 0; g < units_.size(); ++g) {
    units_[g] = std::make_unique<Unit>();
    Unit& u = *units_[g];
    const models::ShardGroup& group = layout.groups[g];
    u.tensors = group.tensors;
    for (size_t k = 0; k < group.tensors.size(); ++k) {
      u.offset.push_back(group.ranges[k].begin);
      unit_of_[group.tensors[k]] = g;
    }
    u.numel = group.numel;
    u.padded = group.padded;
    u.shard = group.shard;
  }

  auto f32 = at::TensorOptions().dtype(at::kFloat).device(device_);
  leaves_.resize(n);
  master_.resize(n);
  compute_.resize(n);
  grads_.resize(n);
  piece_offset_.assign(n, 0);
  owned_.assign(n, false);
  for (size_t g = 0; g < units_.size(); ++g) {
    Unit& u = *units_[g];
    {
      c10::NoGradGuard no_grad;
      at::Tensor flat = at::zeros({u.padded}, f32);
      for (size_t k = 0; k < u.tensors.size(); ++k)
        flat.narrow(0, u.offset[k], full[u.tensors[k]].numel()).copy_(full[u.tensors[k]].detach().reshape({-1}));
      u.master = flat.narrow(0, r * u.shard, u.shard).clone();
    }
    u.compute = dtype_ == at::kFloat ? u.master : u.master.to(dtype_);
    u.grad = at::zeros({u.shard}, f32);
    u.full = at::empty({u.padded}, f32.dtype(dtype_));
    for (size_t k = 0; k < u.tensors.size(); ++k) {
      const size_t i = u.tensors[k];
      const int64_t numel = full[i].numel();
      const models::Range piece = layout.groups[g].local(k, r);  // of tensor i's own elements
      // A leaf of its own over the flat buffer: its own version counter (see zero3.h).
      leaves_[i] = u.full.narrow(0, u.offset[k], numel).view(full[i].sizes()).variable_data().requires_grad_(true);
      const int64_t at = piece.empty() ? 0 : u.offset[k] + piece.begin - r * u.shard, len = piece.size();
      master_[i] = u.master.narrow(0, at, len);
      compute_[i] = u.compute.narrow(0, at, len);
      grads_[i] = u.grad.narrow(0, at, len);
      piece_offset_[i] = piece.begin;
      owned_[i] = len > 0;
    }
    releaseStorage(u.full);
  }
  weights_ = GptWeights::fromFlat(leaves_, stage);
  for (size_t i = 0; i < n; ++i)
    if (owned_[i]) shards_.push_back({i, grads_[i], master_[i], piece_offset_[i]});

  // A post-hook on every leaf's AccumulateGrad runs once its gradient for this backward is in.
  for (size_t i = 0; i < n; ++i) {
    std::shared_ptr<torch::autograd::Node> acc = torch::autograd::impl::grad_accumulator(leaves_[i]);
    acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          onGradReady(i);
          return outputs;
        }));
    hooks_.push_back(acc);
  }
}

std::vector<at::Tensor> Zero3::wholeMaster(const std::vector<at::Tensor>& /*master*/) {
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> out(leaves_.size());
  for (const std::unique_ptr<Unit>& up : units_) {
    Unit& u = *up;
    at::Tensor in = u.master.contiguous();
    at::Tensor flat = at::empty({u.padded}, in.options());
    shard_.allGather(flat, in);
    for (size_t k = 0; k < u.tensors.size(); ++k) {
      const size_t i = u.tensors[k];
      out[i] = flat.narrow(0, u.offset[k], leaves_[i].numel()).view(leaves_[i].sizes()).clone();
    }
  }
  return out;
}

Zero3::~Zero3() {
  try {
    if (reducing_) reducing_->pending->wait();
    for (auto& u : units_)
      if (u->gathering) u->gathering->wait();
  } catch (...) {  // unwinding after a failed collective: it was reported already
  }
}

void Zero3::gather(size_t u) {
  Unit& x = *units_[u];
  if (x.state != Unit::State::Free) return;
  allocateStorage(x.full, x.padded * int64_t(x.full.element_size()));
  x.gathering = shard_.allGatherAsync(x.full, x.compute);  // (padded) <- s × (shard)
  x.state = Unit::State::Gathering;
}

void Zero3::ready(size_t u) {
  Unit& x = *units_[u];
  gather(u);
  if (x.state != Unit::State::Gathering) return;
  x.gathering->wait();
  comm_seconds_ += double(x.gathering->endNs() - x.gathering->startNs()) * 1e-9;
  x.gathering.reset();
  x.state = Unit::State::Ready;
}

void Zero3::release(size_t u) {
  Unit& x = *units_[u];
  if (x.state == Unit::State::Free) return;
  if (x.state == Unit::State::Gathering) ready(u);
  releaseStorage(x.full);
  x.state = Unit::State::Free;
}

void Zero3::beforeForward(int64_t layer) {
  const size_t u = size_t(layer + 1);
  gather(u);
  if (u + 1 < units_.size()) gather(u + 1);  // the prefetch: runs while this unit computes
  ready(u);
}

at::Tensor Zero3::afterForward(int64_t layer, const at::Tensor& out) {
  const size_t u = size_t(layer + 1);
  release(u);
  // Runs when the gradient of the block's output is complete, before the block's own backward
  // (and before a checkpointed block's recompute).
  if (out.requires_grad()) out.register_hook([this, u](const at::Tensor&) { preBackward(u); });
  return out;
}

void Zero3::preBackward(size_t u) {
  gather(u);
  if (u > 1) gather(u - 1);  // the prefetch: the block before, while this one runs backward
  ready(u);
}

void Zero3::onGradReady(size_t i) {
  Unit& x = *units_[unit_of_[i]];
  if (++x.grads_in < x.tensors.size()) return;
  x.grads_in = 0;
  reduceScatter(unit_of_[i]);
}

void Zero3::reduceScatter(size_t u) {
  c10::NoGradGuard no_grad;
  Unit& x = *units_[u];
  finishReduceScatter();  // one in flight: its full buffer is the transient the memory model counts
  auto f32 = x.grad.options();
  at::Tensor in = at::empty({x.padded}, f32);
  for (size_t k = 0; k < x.tensors.size(); ++k) {
    at::Tensor& g = leaves_[x.tensors[k]].mutable_grad();
    in.narrow(0, x.offset[k], g.numel()).copy_(g.reshape({-1}));  // fp32: the reduction is in fp32
    g.reset();
  }
  if (x.padded > x.numel) in.narrow(0, x.numel, x.padded - x.numel).zero_();
  release(u);  // every op that reads the unit's weights has run: its gradients are all in
  reducing_ = std::make_unique<InFlight>();
  reducing_->in = in;
  reducing_->out = at::empty({x.shard}, f32);
  reducing_->unit = u;
  reducing_->pending = shard_.reduceScatterAsync(reducing_->out, reducing_->in);
}

void Zero3::finishReduceScatter() {
  if (!reducing_) return;
  reducing_->pending->wait();
  comm_seconds_ += double(reducing_->pending->endNs() - reducing_->pending->startNs()) * 1e-9;
  c10::NoGradGuard no_grad;
  units_[reducing_->unit]->grad.add_(reducing_->out);  // micro-batches accumulate in the shard
  reducing_.reset();
}

int64_t Zero3::gradBytes() const {
  int64_t b = 0;
  for (const auto& u : units_) b += u->grad.nbytes();
  return b;
}

void Zero3::zeroGrads() {
  comm_seconds_ = 0;
  for (auto& u : units_) u->grad.zero_();
}

void Zero3::finishBackward() {
  finishReduceScatter();
  c10::NoGradGuard no_grad;
  for (auto& u : units_) {
    if (u->state != Unit::State::Free || u->grads_in != 0)
      TRAINSCOPE_THROW("ZeRO-3: a unit's parameters did not all get their gradient in backward");
    if (replicas_ && replicas_->size() > 1) replicas_->allReduce(u->grad);  // hybrid: sum over replicas
    u->grad.mul_(1.0 / double(dp_));
  }
}

}  // namespace trainscope::runtime
