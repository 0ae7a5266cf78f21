// experts.cpp — see experts.h.
#include "train/experts.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

namespace trainscope::runtime {

Experts::Experts(const TrainConfig& cfg, Comm& comm, const std::vector<ParamInfo>& info)
    : moe_(cfg.model.isMoe()), ep_(cfg.ep), experts_(cfg.model.n_experts) {
  if (!moe_) return;
  const Layout& l = comm.layout();
  dp_cp_ = l.dp * l.cp;
  tp_rank_ = l.tp_rank;
  ep_rank_ = l.dp_rank % ep_;
  ctx_.spec = MoeSpec::of(cfg.model);
  if (ep_ <= 1) return;  // every expert on every rank: all dense as far as reduction goes
  ctx_.ep = &comm.subGroup("ep", l.epGroup(ep_));
  expert_dp_ = &comm.subGroup("expert_dp", l.expertDpGroup(ep_));
  own_.resize(info.size());
  for (size_t i = 0; i < info.size(); ++i) own_[i] = info[i].expert;
}

void Experts::beginStep(double loss_grad_scale) {
  ctx_.spec.loss_grad_scale = loss_grad_scale;
  ctx_.load.clear();
}

void Experts::reduce(std::vector<at::Tensor>& grads) {
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < own_.size(); ++i) {
    if (!own_[i]) continue;
    at::Tensor& g = grads[i];
    if (expert_dp_->size() > 1) expert_dp_->allReduce(g);
    g.div_(double(dp_cp_));
  }
}

at::Tensor Experts::sumSquares(const std::vector<at::Tensor>& grads, bool dp_reduced_after) const {
  at::Tensor sq = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(grads.empty() ? at::kCPU : grads[0].device()));
  if (!grads.empty()) sq = at::stack(at::_foreach_norm(grads, 2)).to(at::kDouble).square().sum();
  if (dp_reduced_after) {
    if (expert_dp_->rank() != 0) sq.zero_();  // the dp x cp all-reduce that follows sums over ep
  } else {
    ctx_.ep->allReduce(sq);
  }
  return sq;
}

bool Experts::digestOnThisRank(size_t i, int dp_rank) const {
  return ownsGradient(i) ? dp_rank < ep_ : dp_rank == 0;
}

std::vector<rundb::ExpertLoad> Experts::takeLoad(int64_t rank, int64_t step) {
  std::vector<rundb::ExpertLoad> rows;
  for (const auto& [layer, load] : ctx_.load) {
    if (tp_rank_ != 0) break;
    const double calls = double(std::max<int64_t>(1, load.calls));
    for (size_t e = 0; e < load.tokens.size(); ++e)
      rows.push_back({rank, step, layer, int64_t(e), load.tokens[e], load.tokens[e] - load.kept[e], load.capacity,
                      load.aux_loss / calls, load.z_loss / calls});
  }
  ctx_.load.clear();
  return rows;
}

}  // namespace trainscope::runtime
