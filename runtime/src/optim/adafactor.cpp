// adafactor.cpp — Adafactor (Shazeer & Stern 2018), the variant without first moment and with an
// external learning rate, i.e. Hugging Face's Adafactor(relative_step=False, scale_parameter=False,
// warmup_init=False, beta1=None). For a matrix G (r x c) it keeps R = EMA(mean_c(G^2)) (r) and
// C = EMA(mean_r(G^2)) (c); V ≈ R C^T / mean(R). Vectors keep a full EMA of G^2.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include "optim/optim_impl.h"

namespace trainscope::runtime {
namespace {

constexpr double kEps1 = 1e-30;        // added to G^2
constexpr double kClipThreshold = 1.0; // update RMS is clipped to this
constexpr double kDecayRate = -0.8;    // beta2_t = 1 - t^decay_rate

class Adafactor final : public Optimizer {
 public:
  using Optimizer::step;
  Adafactor(const TrainConfig& c, std::vector<at::Tensor> params, std::vector<bool> decay)
      : params_(std::move(params)), decay_(std::move(decay)), wd_(c.weight_decay) {
    for (const auto& p : params_) {
      State s;
      if (p.dim() >= 2) {
        auto sizes = p.sizes().vec();
        auto row_shape = sizes; row_shape.pop_back();                       // (..., r)
        auto col_shape = sizes; col_shape.erase(col_shape.end() - 2);       // (..., c)
        s.row = at::zeros(row_shape, p.options());
        s.col = at::zeros(col_shape, p.options());
      } else {
        s.full = at::zeros_like(p);
      }
      state_.push_back(std::move(s));
    }
  }

  void step(const std::vector<at::Tensor>& grads, double lr) override {
    c10::NoGradGuard no_grad;
    ++t_;
    const double beta2t = 1.0 - std::pow(double(t_), kDecayRate);
    for (size_t i = 0; i < params_.size(); ++i) {
      const at::Tensor& g = grads[i];
      State& s = state_[i];
      at::Tensor update = g.square().add_(kEps1);
      if (s.full.defined()) {
        s.full.mul_(beta2t).add_(update, 1.0 - beta2t);
        update = s.full.rsqrt().mul_(g);
      } else {
        s.row.mul_(beta2t).add_(update.mean(-1), 1.0 - beta2t);
        s.col.mul_(beta2t).add_(update.mean(-2), 1.0 - beta2t);
        at::Tensor r = (s.row / s.row.mean(-1, /*keepdim=*/true)).rsqrt_().unsqueeze(-1);  // (..., r, 1)
        at::Tensor c = s.col.unsqueeze(-2).rsqrt();                                        // (..., 1, c)
        update = r.mul(c).mul_(g);
      }
      const double rms = update.norm().item<double>() / std::sqrt(double(update.numel()));
      update.mul_(lr / std::max(1.0, rms / kClipThreshold));
      if (decay_[i] && wd_ > 0) params_[i].add_(params_[i], -wd_ * lr);
      params_[i].sub_(update);
    }
  }

  std::vector<at::Tensor> stateTensors() const override {
    std::vector<at::Tensor> out;
    for (const auto& s : state_)
      for (const at::Tensor* t : {&s.row, &s.col, &s.full})
        if (t->defined()) out.push_back(*t);
    return out;
  }

  int64_t stateBytes() const override {
    int64_t b = 0;
    for (const auto& s : state_)
      for (const at::Tensor* t : {&s.row, &s.col, &s.full})
        if (t->defined()) b += t->nbytes();
    return b;
  }

 private:
  struct State {
    at::Tensor row, col, full;
  };
  std::vector<at::Tensor> params_;
  std::vector<bool> decay_;
  std::vector<State> state_;
  double wd_;
};

}  // namespace

std::unique_ptr<Optimizer> makeAdafactor(const TrainConfig& cfg, std::vector<at::Tensor> params,
                                         std::vector<bool> decay) {
  return std::make_unique<Adafactor>(cfg, std::move(params), std::move(decay));
}

}  // namespace trainscope::runtime
