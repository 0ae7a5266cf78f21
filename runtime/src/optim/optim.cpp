// optim.cpp — AdamW, SGD, the factory and the learning-rate schedule. Adafactor and 8-bit Adam
// live in their own files.
#include "trainscope/runtime/optim.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>

#include "optim/optim_impl.h"
#include "optim/partitioned.h"
#include "trainscope/common/error.h"

namespace trainscope::runtime {

void Optimizer::step(const std::vector<at::Tensor>& grads, double lr, double multiplier) {
  if (multiplier != 1.0) {
    c10::NoGradGuard no_grad;
    at::_foreach_mul_(grads, multiplier);
  }
  step(grads, lr);
}

void forEachSliceOfPart(const std::vector<at::Tensor>& tensors, int part, int parts,
                        const std::function<void(size_t i, int64_t start, int64_t count)>& fn) {
  int64_t total = 0;
  for (const at::Tensor& t : tensors) total += t.numel();
  const int64_t begin = total * part / parts, end = total * (part + 1) / parts;
  int64_t offset = 0;
  for (size_t i = 0; i < tensors.size() && offset < end; offset += tensors[i].numel(), ++i) {
    const int64_t lo = std::max(begin, offset), hi = std::min(end, offset + tensors[i].numel());
    if (lo < hi) fn(i, lo - offset, hi - lo);
  }
}

PartitionedStep* partitioned(Optimizer& o) {
  auto* p = dynamic_cast<PartitionedStep*>(&o);
  return p && p->partitionable() ? p : nullptr;
}

namespace {

class AdamW final : public Optimizer, public PartitionedStep {
 public:
  using Optimizer::step;
  AdamW(const TrainConfig& c, std::vector<at::Tensor> params, std::vector<bool> decay)
      : beta1_(c.beta1), beta2_(c.beta2), eps_(c.eps), wd_(c.weight_decay) {
    // Two groups (decay / no decay) so each can go through one fused call.
    for (size_t i = 0; i < params.size(); ++i) {
      Group& g = decay[i] ? decay_ : no_decay_;
      g.index.push_back(i);
      g.params.push_back(params[i]);
      g.m.push_back(at::zeros_like(params[i], at::MemoryFormat::Contiguous));
      g.v.push_back(at::zeros_like(params[i], at::MemoryFormat::Contiguous));
      g.step.push_back(at::zeros({}, params[i].options().dtype(at::kFloat)));
    }
  }

  void step(const std::vector<at::Tensor>& grads, double lr) override { step(grads, lr, 1.0); }

  void step(const std::vector<at::Tensor>& grads, double lr, double multiplier) override {
    c10::NoGradGuard no_grad;
    ++t_;
    // The fused kernel divides each gradient by grad_scale before using it.
    std::optional<at::Tensor> grad_scale;
    if (multiplier != 1.0) grad_scale = at::full({}, 1.0 / multiplier, grads[0].options().dtype(at::kFloat));
    for (Group* g : {&decay_, &no_decay_}) {
      if (g->params.empty()) continue;
      std::vector<at::Tensor> gs;
      gs.reserve(g->index.size());
      for (size_t i : g->index) gs.push_back(grads[i]);
      // The kernel reads the step count for bias correction; torch.optim.AdamW(fused=True) bumps it
      // before the call, and so do we.
      at::_foreach_add_(g->step, 1);
      at::_fused_adamw_(g->params, gs, g->m, g->v, /*max_exp_avg_sqs=*/{}, g->step, lr, beta1_, beta2_,
                        g == &decay_ ? wd_ : 0.0, eps_, /*amsgrad=*/false, /*maximize=*/false,
                        grad_scale, /*found_inf=*/std::nullopt);
    }
  }

  // Every tensor is contiguous (m and v are made so; the trainer's parameters and gradients are
  // its own flat buffers), so a slice is a narrow of the flattened views.
  bool partitionable() const override {
    for (const Group* g : {&decay_, &no_decay_})
      for (const at::Tensor& p : g->params)
        if (!p.is_contiguous() || !p.device().is_cpu()) return false;
    return true;
  }

  void beginPartitionedStep() override {
    ++t_;
    for (Group* g : {&decay_, &no_decay_})
      if (!g->params.empty()) at::_foreach_add_(g->step, 1);
  }

  // Part k of each group: elements [k·n/parts, (k+1)·n/parts) of the group's parameters laid end to end.
  void stepPart(const std::vector<at::Tensor>& grads, double lr, double multiplier, int part, int parts) override {
    c10::NoGradGuard no_grad;
    std::optional<at::Tensor> grad_scale;
    if (multiplier != 1.0) grad_scale = at::full({}, 1.0 / multiplier, grads[0].options().dtype(at::kFloat));
    for (Group* g : {&decay_, &no_decay_}) {
      std::vector<at::Tensor> ps, gs, ms, vs, steps;
      forEachSliceOfPart(g->params, part, parts, [&](size_t j, int64_t start, int64_t count) {
        auto slice = [&](const at::Tensor& t) { return t.view({-1}).narrow(0, start, count); };
        ps.push_back(slice(g->params[j]));
        gs.push_back(slice(grads[g->index[j]].contiguous()));
        ms.push_back(slice(g->m[j]));
        vs.push_back(slice(g->v[j]));
        steps.push_back(g->step[j]);  // read, not written, by the kernel
      });
      if (ps.empty()) continue;
      at::_fused_adamw_(ps, gs, ms, vs, /*max_exp_avg_sqs=*/{}, steps, lr, beta1_, beta2_, g == &decay_ ? wd_ : 0.0,
                        eps_, /*amsgrad=*/false, /*maximize=*/false, grad_scale, /*found_inf=*/std::nullopt);
    }
  }

  std::vector<at::Tensor> stateTensors() const override {
    std::vector<at::Tensor> out;
    for (const Group* g : {&decay_, &no_decay_})
      for (size_t i = 0; i < g->params.size(); ++i) out.insert(out.end(), {g->m[i], g->v[i], g->step[i]});
    return out;
  }

  Elementwise elementwise() const override {
    Elementwise e{true, {"exp_avg", "exp_avg_sq"}, {{}, {}}, {}};
    const size_t n = decay_.index.size() + no_decay_.index.size();
    e.state[0].resize(n);
    e.state[1].resize(n);
    for (const Group* g : {&decay_, &no_decay_})
      for (size_t i = 0; i < g->params.size(); ++i) {
        e.state[0][g->index[i]] = g->m[i];
        e.state[1][g->index[i]] = g->v[i];
        e.counters.push_back(g->step[i]);
      }
    return e;
  }

  int64_t stateBytes() const override {
    int64_t b = 0;
    for (const Group* g : {&decay_, &no_decay_})
      for (size_t i = 0; i < g->params.size(); ++i) b += g->m[i].nbytes() + g->v[i].nbytes();
    return b;
  }

 private:
  struct Group {
    std::vector<size_t> index;
    std::vector<at::Tensor> params, m, v, step;
  };
  Group decay_, no_decay_;
  double beta1_, beta2_, eps_, wd_;
};

class Sgd final : public Optimizer {
 public:
  using Optimizer::step;
  Sgd(const TrainConfig& c, std::vector<at::Tensor> params, std::vector<bool> decay)
      : params_(std::move(params)), decay_(std::move(decay)), momentum_(c.momentum), wd_(c.weight_decay) {
    if (momentum_ > 0)
      for (const auto& p : params_) buf_.push_back(at::zeros_like(p));
  }
  void step(const std::vector<at::Tensor>& grads, double lr) override {
    c10::NoGradGuard no_grad;
    ++t_;
    for (size_t i = 0; i < params_.size(); ++i) {
      at::Tensor d = grads[i];
      if (decay_[i] && wd_ > 0) d = d.add(params_[i], wd_);
      if (momentum_ > 0) d = buf_[i].mul_(momentum_).add_(d);
      params_[i].add_(d, -lr);
    }
  }
  std::vector<at::Tensor> stateTensors() const override { return buf_; }
  Elementwise elementwise() const override {
    Elementwise e{true, {}, {}, {}};
    if (momentum_ > 0) {
      e.kinds = {"momentum_buffer"};
      e.state = {buf_};
    }
    return e;
  }
  int64_t stateBytes() const override {
    int64_t b = 0;
    for (const auto& t : buf_) b += t.nbytes();
    return b;
  }

 private:
  std::vector<at::Tensor> params_, buf_;
  std::vector<bool> decay_;
  double momentum_, wd_;
};

}  // namespace

std::unique_ptr<Optimizer> makeOptimizer(const TrainConfig& cfg, std::vector<at::Tensor> params,
                                         std::vector<bool> decay) {
  switch (cfg.optimizer) {
    case OptimizerKind::AdamW: return std::make_unique<AdamW>(cfg, std::move(params), std::move(decay));
    case OptimizerKind::Adafactor: return makeAdafactor(cfg, std::move(params), std::move(decay));
    case OptimizerKind::Adam8bit: return makeAdam8bit(cfg, std::move(params), std::move(decay));
    case OptimizerKind::SGD: return std::make_unique<Sgd>(cfg, std::move(params), std::move(decay));
  }
  return nullptr;
}

double learningRate(int64_t step, int64_t total, int64_t warmup, double lr, double min_ratio) {
  if (step < warmup) return lr * double(step + 1) / double(warmup);
  const double min_lr = lr * min_ratio;
  const int64_t decay_steps = total - warmup;
  if (decay_steps <= 1) return lr;
  const double progress = double(step - warmup) / double(decay_steps - 1);  // 0 .. 1
  return min_lr + 0.5 * (1.0 + std::cos(M_PI * progress)) * (lr - min_lr);
}

}  // namespace trainscope::runtime
