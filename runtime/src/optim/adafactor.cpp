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

  // The factors broadcast over each matrix (kinds exp_avg_sq_row, exp_avg_sq_col; a vector's full
  // moment under both), so a checkpoint cuts and gathers them as the weights (docs/checkpoints.md).
  // Read back, each factor is the piece's value along the broadcast dimension where its elements
  // agree (the same split of the matrix: exact), else their mean: a tensor-parallel shard's factor
  // is the mean over its own rows (or columns), and the EMA of a mean is the mean of the shards'
  // EMAs, so shards gathered give the whole matrix's factor exactly.
  // A whole matrix's factors cut for a shard (one process into TP 2): the factor along the shard's
  // whole dimension is its own exactly (a column-parallel shard's row factor: the mean over all its
  // columns); the other one is not kept by a whole matrix (the shard's column factor is the EMA of a
  // mean over its rows only). Its mean is known exactly — the mean of the shard's rows' factors (the
  // EMA of the shard's mean of G²) — and its shape is estimated as the whole matrix's: C_S = C ·
  // mean(R_S) / mean(C), what R Cᵀ / mean(R) (the second moment Adafactor steps with) averages to
  // over the shard's rows, so the shard's first step after the resume divides by the whole matrix's
  // estimate (transposed for a row-parallel shard). An element with no saved state (the vocabulary
  // padding of tp > 1) counts 0 in that mean, as its zero gradient does in the shard's own, and
  // restarts at eps1, the value a factor of zero gradients has after any step (never 0: rsqrt(0) · 0
  // would be NaN).
  Elementwise elementwise() const override {
    Elementwise e{true, {"exp_avg_sq_row", "exp_avg_sq_col"}, {{}, {}}, {}};
    e.live = false;
    for (size_t i = 0; i < params_.size(); ++i) {
      const State& s = state_[i];
      const auto shape = params_[i].sizes();
      if (s.full.defined()) {
        e.state[0].push_back(s.full.detach().clone());
        e.state[1].push_back(s.full.detach().clone());
      } else {
        e.state[0].push_back(s.row.detach().unsqueeze(-1).expand(shape).contiguous());
        e.state[1].push_back(s.col.detach().unsqueeze(-2).expand(shape).contiguous());
      }
    }
    std::vector<std::vector<at::Tensor>> st = e.state;
    Adafactor* self = const_cast<Adafactor*>(this);
    e.commit = [self, st](const std::vector<std::vector<int64_t>>& saved) {
      c10::NoGradGuard no_grad;
      // Along `dim`, over the elements that hold saved state (> 0): their value where they agree,
      // else their mean.
      auto factor = [](const at::Tensor& t, int64_t dim) {
        const at::Tensor held = t > 0;
        const at::Tensor hi = t.amax(dim), lo = at::where(held, t, at::full({}, INFINITY, t.options())).amin(dim);
        const at::Tensor mean = t.sum(dim).div_(held.sum(dim).clamp_min(1).to(t.scalar_type()));
        return at::where(hi == lo, hi, mean);
      };
      auto nonzero = [](at::Tensor t) { return at::where(t == 0, at::full({}, kEps1, t.options()), t); };
      for (size_t i = 0; i < self->state_.size(); ++i) {
        State& s = self->state_[i];
        if (s.full.defined()) {
          s.full.copy_(nonzero(st[0][i]));
        } else {
          at::Tensor row = factor(st[0][i], -1), col = factor(st[1][i], -2);
          const auto here = self->params_[i].sizes();
          const std::vector<int64_t> whole = i < saved.size() ? saved[i] : here.vec();
          const size_t n = here.size();
          const bool rows_cut = whole.size() >= 2 && here[n - 2] < whole[whole.size() - 2];
          const bool cols_cut = whole.size() >= 2 && here[n - 1] < whole[whole.size() - 1];
          auto meanOf = [](const at::Tensor& f) { return f.mean(-1, /*keepdim=*/true); };
          if (rows_cut && !cols_cut) col = col * (meanOf(row) / meanOf(col).clamp_min(kEps1));
          if (cols_cut && !rows_cut) row = row * (meanOf(col) / meanOf(row).clamp_min(kEps1));
          s.row.copy_(nonzero(row));
          s.col.copy_(nonzero(col));
        }
      }
    };
    return e;
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
