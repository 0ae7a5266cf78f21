// adam8bit.cpp — Adam with 8-bit block-wise quantised moments.
//
// Each parameter's moments are split into blocks of `block` elements. Per block we keep the
// absolute maximum (fp32) and one byte per element:
//   m: q = round(127 * sign(r) * sqrt(|r|)), r = m / absmax(m)          (int8)
//   v: q = round(255 * sqrt(r)),             r = sqrt(v) / absmax(sqrt v) (uint8)
// The square-root companding spends more codes near zero, where most moments are (the role of
// bitsandbytes' dynamic map). A step dequantises to fp32 temporaries, applies AdamW's update and
// quantises again. State: 2 bytes per parameter plus 8 bytes per block.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include "optim/optim_impl.h"

namespace trainscope::runtime {
namespace {

class Adam8bit final : public Optimizer {
 public:
  using Optimizer::step;
  Adam8bit(const TrainConfig& c, std::vector<at::Tensor> params, std::vector<bool> decay)
      : params_(std::move(params)), decay_(std::move(decay)), block_(c.adam8bit_block), beta1_(c.beta1),
        beta2_(c.beta2), eps_(c.eps), wd_(c.weight_decay) {
    for (const auto& p : params_) {
      const int64_t n = p.numel(), nb = (n + block_ - 1) / block_;
      State s;
      s.m = at::zeros({nb, block_}, p.options().dtype(at::kChar));
      s.v = at::zeros({nb, block_}, p.options().dtype(at::kByte));
      s.m_absmax = at::zeros({nb, 1}, p.options().dtype(at::kFloat));
      s.v_absmax = at::zeros({nb, 1}, p.options().dtype(at::kFloat));
      state_.push_back(std::move(s));
    }
  }

  void step(const std::vector<at::Tensor>& grads, double lr) override {
    c10::NoGradGuard no_grad;
    ++t_;
    const double bc1 = 1.0 - std::pow(beta1_, double(t_)), bc2 = 1.0 - std::pow(beta2_, double(t_));
    for (size_t i = 0; i < params_.size(); ++i) {
      State& s = state_[i];
      const int64_t n = params_[i].numel();
      at::Tensor g = blocked(grads[i]);                                     // (nb, block) fp32
      at::Tensor m, v;
      dequantise(s, &m, &v);
      // Adam moments
      m.mul_(beta1_).add_(g, 1.0 - beta1_);
      v.mul_(beta2_).addcmul_(g, g, 1.0 - beta2_);
      // update (decoupled weight decay, as AdamW)
      at::Tensor denom = v.sqrt().div_(std::sqrt(bc2)).add_(eps_);
      at::Tensor upd = m.div(denom).mul_(lr / bc1);
      at::Tensor p = params_[i].view({-1});
      if (decay_[i] && wd_ > 0) p.mul_(1.0 - lr * wd_);
      p.sub_(upd.view({-1}).narrow(0, 0, n));
      quantise(m, v, &s);
    }
  }

  // The moments dequantised to fp32 (exp_avg, exp_avg_sq: what a step computes with), so a
  // checkpoint cuts and gathers them as the weights (docs/checkpoints.md); commit() quantises them
  // again in this optimizer's blocks. Where the blocks are the ones they came from this gives the
  // same bytes back (each block's largest element is its absmax again, and every other element
  // rounds to its code); other blocks are new quantisations of the same moments.
  Elementwise elementwise() const override {
    Elementwise e{true, {"exp_avg", "exp_avg_sq"}, {{}, {}}, {}};
    e.live = false;
    for (size_t i = 0; i < params_.size(); ++i) {
      at::Tensor m, v;
      dequantise(state_[i], &m, &v);
      const int64_t n = params_[i].numel();
      e.state[0].push_back(m.view({-1}).narrow(0, 0, n).view(params_[i].sizes()).contiguous());
      e.state[1].push_back(v.view({-1}).narrow(0, 0, n).view(params_[i].sizes()).contiguous());
    }
    std::vector<std::vector<at::Tensor>> st = e.state;
    Adam8bit* self = const_cast<Adam8bit*>(this);
    e.commit = [self, st](const std::vector<std::vector<int64_t>>&) {  // its blocks are its own
      c10::NoGradGuard no_grad;
      for (size_t i = 0; i < self->state_.size(); ++i)
        self->quantise(self->blocked(st[0][i]), self->blocked(st[1][i]), &self->state_[i]);
    };
    return e;
  }

  std::vector<at::Tensor> stateTensors() const override {
    std::vector<at::Tensor> out;
    for (const auto& s : state_) out.insert(out.end(), {s.m, s.v, s.m_absmax, s.v_absmax});
    return out;
  }

  int64_t stateBytes() const override {
    int64_t b = 0;
    for (const auto& s : state_) b += s.m.nbytes() + s.v.nbytes() + s.m_absmax.nbytes() + s.v_absmax.nbytes();
    return b;
  }

 private:
  struct State {
    at::Tensor m, v;                 // (nb, block) int8 / uint8
    at::Tensor m_absmax, v_absmax;   // (nb, 1) fp32
  };
  // m and v (nb, block) fp32 from the state's codes.
  static void dequantise(const State& s, at::Tensor* m, at::Tensor* v) {
    at::Tensor qm = s.m.to(at::kFloat).div_(127.0);                      // companded, in [-1, 1]
    *m = qm.mul(qm.abs()).mul_(s.m_absmax);                               // (nb, block)
    at::Tensor qv = s.v.to(at::kFloat).div_(255.0);
    at::Tensor sv = qv.square().mul_(s.v_absmax);                         // sqrt(v)
    *v = sv.square_();
  }
  // The state's codes and absmaxes from m and v (nb, block) fp32 (v is overwritten).
  static void quantise(const at::Tensor& m, at::Tensor v, State* s) {
    s->m_absmax = m.abs().amax(1, /*keepdim=*/true).clamp_min_(1e-30);
    at::Tensor rm = m.div(s->m_absmax);
    s->m = rm.sign().mul_(rm.abs().sqrt_()).mul_(127.0).round_().to(at::kChar);
    at::Tensor sq = v.sqrt_();
    s->v_absmax = sq.amax(1, /*keepdim=*/true).clamp_min_(1e-30);
    s->v = sq.div_(s->v_absmax).sqrt_().mul_(255.0).round_().to(at::kByte);
  }
  // A flat view of t padded with zeros to whole blocks: (nb, block).
  at::Tensor blocked(const at::Tensor& t) const {
    const int64_t n = t.numel(), nb = (n + block_ - 1) / block_;
    at::Tensor flat = t.reshape({-1});
    if (nb * block_ != n) flat = at::constant_pad_nd(flat, {0, nb * block_ - n});
    return flat.view({nb, block_});
  }
  std::vector<at::Tensor> params_;
  std::vector<bool> decay_;
  std::vector<State> state_;
  int64_t block_;
  double beta1_, beta2_, eps_, wd_;
};

}  // namespace

std::unique_ptr<Optimizer> makeAdam8bit(const TrainConfig& cfg, std::vector<at::Tensor> params,
                                        std::vector<bool> decay) {
  return std::make_unique<Adam8bit>(cfg, std::move(params), std::move(decay));
}

}  // namespace trainscope::runtime
