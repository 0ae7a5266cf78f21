// trainer_state.cpp — the Trainer's state and checkpoint accessors: parameters and gradients,
// optimizer state and its slots, resume (resumable(), restore()), the weight digest and the per-step
// rows (expert load, FP8 scales). The step itself is in trainer.cpp.
#include "train/trainer_impl.h"

namespace trainscope::runtime {

std::vector<at::Tensor> Trainer::masterParams() const { return impl_->master; }
std::vector<at::Tensor> Trainer::wholeMasterParams() const { return impl_->dp->wholeMaster(impl_->master); }
at::Tensor Trainer::logits(int64_t step) {
  Impl& s = *impl_;
  c10::NoGradGuard no_grad;
  const Batch b = s.data->samples(step * s.cfg.global_batch, s.cfg.mbs, s.device);
  return stageForward(s.compute_weights, s.stage, s.tp, s.cfg.model.n_head, b.inputs, at::Tensor(), Checkpointing::None)
      .to(at::kCPU, at::kFloat)
      .contiguous();
}
Trainer::Resumable Trainer::resumable() const {
  const Impl& s = *impl_;
  return {s.step, s.optimizer->steps(), s.scaler.clean_steps, s.scaler.scale};
}
std::vector<at::Tensor> Trainer::optimizerState() const { return impl_->optimizer->stateTensors(); }
void Trainer::restore(const Resumable& r, const std::vector<at::Tensor>& state) {
  Impl& s = *impl_;
  c10::NoGradGuard no_grad;
  const std::vector<at::Tensor> mine = s.optimizer->stateTensors();
  if (mine.size() != state.size())
    TRAINSCOPE_THROW("optimizer state of " + std::to_string(state.size()) + " tensors for an optimizer of " +
                     std::to_string(mine.size()));
  for (size_t i = 0; i < mine.size(); ++i) mine[i].copy_(state[i]);
  s.optimizer->setSteps(r.optimizer_steps);
  s.scaler.scale = r.loss_scale;
  s.scaler.clean_steps = r.clean_steps;
  s.step = r.step;
}
std::vector<Trainer::OptimizerSlot> Trainer::optimizerSlots() const {
  std::vector<OptimizerSlot> out;  // as optimizerTensors lists them
  for (const DataParallel::Shard& sh : impl_->shards()) {
    const int64_t n = impl_->info[sh.param].expert && sh.master.dim() >= 2 ? sh.master.size(0) : 0;
    if (n == 0) out.push_back({sh.param, -1, sh.offset});
    for (int64_t e = 0; e < n; ++e) out.push_back({sh.param, e, 0});
  }
  return out;
}
std::vector<std::vector<int64_t>> Trainer::stageShapes() const {
  std::vector<std::vector<int64_t>> out;
  for (const at::Tensor& t : impl_->dp->leaves()) out.push_back(t.sizes().vec());
  return out;
}
Group* Trainer::optimizerShardGroup() const { return impl_->dp->normGroup(); }
Optimizer& Trainer::optimizer() const { return *impl_->optimizer; }
std::vector<at::Tensor> Trainer::mainGrads() const { return impl_->dp->mainGrads(); }
int64_t Trainer::parameterCount() const {
  int64_t n = 0;
  for (const auto& p : impl_->master) n += p.numel();
  return n;
}
int64_t Trainer::stepsDone() const { return impl_->step; }
double Trainer::lossScale() const { return impl_->scaler.scale; }
const TrainConfig& Trainer::config() const { return impl_->cfg; }
const DeviceChoice& Trainer::device() const { return impl_->dev; }
void Trainer::injectOverflowOnce() { impl_->inject_overflow = true; }
std::vector<Trainer::Digest> Trainer::weightDigest() const {
  const Impl& s = *impl_;
  std::vector<Digest> out;
  // DP replica 0 hands in its tensors (MoE: experts on dp 0 … ep−1); sharded weights (ZeRO-3) the
  // ranks of the first shard group their pieces.
  for (size_t i = 0; i < s.master.size(); ++i) {
    if (!s.dp->handsInDigest(s.experts->digestOnThisRank(i, s.layout.dp_rank))) continue;
    if (!s.countedOnThisRank(i)) continue;
    at::Tensor p = s.countedPart(i, s.master[i].detach(), s.dp->pieceOffset(i)).to(at::kDouble);  // replicated K/V rows once
    if (s.info[i].wte) p = s.realRows(i, p);
    out.push_back({s.info[i].name, p.sum().item<double>(), p.square().sum().item<double>(), p.abs().sum().item<double>()});
  }
  return out;
}

std::vector<rundb::ExpertLoad> Trainer::takeExpertLoad() {
  return impl_->experts->takeLoad(impl_->layout.rank, impl_->step - 1);
}

std::vector<rundb::Fp8Scale> Trainer::takeFp8Scales() { return std::move(impl_->fp8_rows); }
fp8::Recipe& Trainer::fp8Recipe() const { return impl_->fp8; }

double Trainer::lastHiddenShare() const { return impl_->dp->hiddenShare(); }
double Trainer::lastCommSeconds() const { return impl_->dp->commSeconds(); }

}  // namespace trainscope::runtime
