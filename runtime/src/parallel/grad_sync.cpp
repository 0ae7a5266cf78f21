// grad_sync.cpp — see grad_sync.h.
#include "parallel/grad_sync.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <numeric>

#include "trainscope/tracer/range.h"

namespace trainscope::runtime {

struct GradSync::Bucket {
  at::Tensor buffer;                  // flat fp32
  std::vector<size_t> params;
  size_t ready = 0;
  std::shared_ptr<Pending> pending;
};

GradSync::GradSync(Group& dp, Mode mode, int64_t bucket_bytes, std::vector<at::Tensor>& compute,
                   std::vector<at::Tensor>& master, bool low_precision, const std::vector<bool>& managed)
    : dp_(dp), mode_(dp.size() == 1 && mode != Mode::Zero1 ? Mode::None : mode), low_precision_(low_precision),
      compute_(compute) {
  const size_t n = compute.size();
  main_grads_.resize(n);
  owned_.assign(n, true);
  bucket_of_.assign(n, -1);
  auto f32 = master[0].options().dtype(at::kFloat);
  for (size_t i = 0; i < n; ++i)
    if (!managed[i]) main_grads_[i] = at::zeros(master[i].sizes(), f32);

  if (mode_ == Mode::Zero1) {
    // Whole tensors to owners, largest first onto the least-loaded rank.
    const int R = dp_.size();
    std::vector<size_t> order;
    for (size_t i = 0; i < n; ++i)
      if (managed[i]) order.push_back(i);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return master[a].numel() > master[b].numel(); });
    std::vector<int64_t> load(R, 0);
    std::vector<int> owner(n, -1);
    for (size_t i : order) {
      int r = int(std::min_element(load.begin(), load.end()) - load.begin());
      owner[i] = r;
      load[r] += master[i].numel();
    }
    segment_ = *std::max_element(load.begin(), load.end());
    flat_grads_ = at::zeros({R * segment_}, f32);
    flat_params_ = at::zeros({R * segment_}, f32);
    std::vector<int64_t> offset(R, 0);
    for (size_t i = 0; i < n; ++i) {
      if (!managed[i]) continue;
      const int64_t at = owner[i] * segment_ + offset[owner[i]];
      offset[owner[i]] += master[i].numel();
      owned_[i] = owner[i] == dp_.rank();
      main_grads_[i] = flat_grads_.narrow(0, at, master[i].numel()).view(master[i].sizes());
      at::Tensor p = flat_params_.narrow(0, at, master[i].numel()).view(master[i].sizes());
      {
        c10::NoGradGuard g;
        p.copy_(master[i]);
      }
      p.requires_grad_(master[i].requires_grad());
      if (&compute[i] != &master[i] && compute[i].is_same(master[i])) compute[i] = p;
      master[i] = p;
    }
    compute_ = compute;
  } else if (mode_ == Mode::Buckets) {
    // Reverse order: the last layers' gradients are ready first.
    Bucket* cur = nullptr;
    int64_t cur_bytes = 0;
    std::vector<std::vector<size_t>> groups;
    for (size_t k = n; k-- > 0;) {
      if (!managed[k]) continue;
      const int64_t bytes = master[k].numel() * 4;
      if (groups.empty() || (cur_bytes > 0 && cur_bytes + bytes > bucket_bytes)) {
        groups.emplace_back();
        cur_bytes = 0;
      }
      groups.back().push_back(k);
      cur_bytes += bytes;
    }
    (void)cur;
    for (auto& g : groups) {
      auto b = std::make_unique<Bucket>();
      int64_t total = 0;
      for (size_t i : g) total += master[i].numel();
      b->buffer = at::zeros({total}, f32);
      int64_t off = 0;
      for (size_t i : g) {
        main_grads_[i] = b->buffer.narrow(0, off, master[i].numel()).view(master[i].sizes());
        off += master[i].numel();
        bucket_of_[i] = int(buckets_.size());
      }
      b->params = g;
      buckets_.push_back(std::move(b));
    }
  } else {
    for (size_t i = 0; i < n; ++i)
      if (managed[i]) main_grads_[i] = at::zeros(master[i].sizes(), f32);
  }

  if (!low_precision_) {
    // fp32: autograd accumulates straight into the main gradients (in place, no copy).
    for (size_t i = 0; i < n; ++i) compute_[i].mutable_grad() = main_grads_[i];
  } else {
    for (auto& c : compute_) c.mutable_grad() = at::zeros_like(c);
  }
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

void GradSync::zeroGrads() {
  for (auto& b : buckets_) b->ready = 0;
  for (auto& g : main_grads_) g.zero_();
}

void GradSync::onGradReady(size_t i) {
  if (low_precision_) {
    c10::NoGradGuard g;
    main_grads_[i].add_(compute_[i].grad());
    compute_[i].mutable_grad().zero_();
  }
  if (mode_ != Mode::Buckets || !last_micro_ || bucket_of_[i] < 0) return;
  Bucket& b = *buckets_[bucket_of_[i]];
  if (++b.ready == b.params.size()) launch(b);
}

void GradSync::launch(Bucket& b) { b.pending = dp_.allReduceAsync(b.buffer, Reduce::Sum); }

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

void GradSync::gatherParams() {
  if (mode_ != Mode::Zero1) return;
  c10::NoGradGuard g;
  at::Tensor mine = flat_params_.narrow(0, dp_.rank() * segment_, segment_).clone();
  dp_.allGather(flat_params_, mine);
}

}  // namespace trainscope::runtime
