// optim_state.cpp — see optim_state.h.
#include "state/optim_state.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cstdio>
#include <map>

#include "state/gather.h"
#include "state/hf_weights.h"
#include "trainscope/common/error.h"
#include "trainscope/common/safetensors.h"
#include "trainscope/runtime/comm.h"
#include "trainscope/runtime/gpt.h"
#include "trainscope/runtime/optim.h"
#include "trainscope/runtime/parallel.h"

namespace trainscope::runtime {
namespace {

std::string fileName(int stage, int pp) {
  if (pp == 1) return "optimizer-hf.safetensors";
  char b[64];
  std::snprintf(b, sizeof(b), "optimizer-hf-%05d-of-%05d.safetensors", stage + 1, pp);
  return b;
}

// Elements of the TP-local tensor `param` (of `numel`) that slot covers: [begin, begin + n).
int64_t slotBegin(const Trainer::OptimizerSlot& s, const std::vector<int64_t>& shape, int64_t numel) {
  return s.expert < 0 ? s.offset : s.expert * (numel / shape[0]);
}

int64_t numelOf(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

nlohmann::json saveLayoutFree(const std::string& tmp, const TrainConfig& cfg, const Trainer& trainer, Comm& comm) {
  c10::NoGradGuard no_grad;
  const Optimizer::Elementwise e = trainer.optimizer().elementwise();
  if (!e.elementwise) return nullptr;
  const std::vector<Trainer::OptimizerSlot> slots = trainer.optimizerSlots();
  const std::vector<std::vector<int64_t>> shapes = trainer.stageShapes();
  const std::vector<ParamInfo> info = GptWeights::info(stageOf(cfg, comm.layout().pp_rank));
  Group* split = trainer.optimizerShardGroup();
  const Layout& l = comm.layout();
  std::vector<safetensors::TensorView> views;
  std::vector<at::Tensor> keep;
  for (size_t k = 0; k < e.kinds.size(); ++k) {
    // This rank's pieces into whole (TP-local) tensors, with a mask of what it covers.
    std::vector<at::Tensor> whole(shapes.size()), mask(shapes.size());
    for (size_t i = 0; i < shapes.size(); ++i) {
      whole[i] = at::zeros({numelOf(shapes[i])}, at::kFloat);
      mask[i] = at::zeros({numelOf(shapes[i])}, at::kFloat);
    }
    for (size_t j = 0; j < slots.size(); ++j) {
      const Trainer::OptimizerSlot& s = slots[j];
      const at::Tensor st = e.state[k][j].detach().to(at::kCPU, at::kFloat).reshape({-1});
      const int64_t b = slotBegin(s, shapes[s.param], whole[s.param].numel());
      whole[s.param].narrow(0, b, st.numel()).copy_(st);
      mask[s.param].narrow(0, b, st.numel()).fill_(1);
    }
    for (size_t i = 0; i < shapes.size(); ++i) {
      // Over the ranks that split the state: each element from the first rank holding it. Expert
      // tensors under ep > 1 stay outside the split (each rank holds its experts whole).
      if (split && split->size() > 1 && !(info[i].expert && cfg.ep > 1)) {
        const int64_t n = whole[i].numel(), s = split->size();
        at::Tensor all = at::empty({s * n}, at::kFloat), cover = at::empty({s * n}, at::kFloat);
        split->allGather(all, whole[i]);
        split->allGather(cover, mask[i]);
        at::Tensor out = whole[i].clone();
        for (int64_t r = s - 1; r >= 0; --r)
          out = at::where(cover.narrow(0, r * n, n) > 0, all.narrow(0, r * n, n), out);
        whole[i] = out;
      }
      whole[i] = whole[i].view(shapes[i]);
    }
    const std::vector<std::pair<std::string, at::Tensor>> stage = gatherStage(cfg, whole, comm);
    if (l.tp_rank == 0 && l.dp_rank == 0 && l.cp_rank == 0)
      for (auto& [name, t] : toHf(cfg.model, stage)) {
        keep.push_back(t.contiguous());
        views.push_back({e.kinds[k] + "/" + name, "F32", t.sizes().vec(), keep.back().data_ptr(),
                         int64_t(keep.back().nbytes())});
      }
  }
  if (l.tp_rank == 0 && l.dp_rank == 0 && l.cp_rank == 0 && !views.empty())
    safetensors::writeFile(tmp + "/trainscope/" + fileName(l.pp_rank, l.pp), views, {{"format", "pt"}}, "--save");
  nlohmann::json files = nlohmann::json::array();
  for (int s = 0; s < l.pp && !e.kinds.empty(); ++s) files.push_back(fileName(s, l.pp));
  const double counter = e.counters.empty() ? 0.0 : e.counters[0].item<double>();
  return {{"kinds", e.kinds}, {"files", files}, {"counter", counter}};
}

void loadLayoutFree(const std::string& dir, const nlohmann::json& rec, const TrainConfig& cfg, Trainer& trainer,
                    const Layout& l, const std::string& field) {
  c10::NoGradGuard no_grad;
  const Optimizer::Elementwise e = trainer.optimizer().elementwise();
  const std::vector<std::string> kinds = rec.at("kinds").get<std::vector<std::string>>();
  if (!e.elementwise || kinds != e.kinds)
    throw UserError(field, dir + "'s optimizer state per parameter holds " + nlohmann::json(kinds).dump() +
                               ", which this run's optimizer does not keep",
                    "resume with the saved run's optimizer settings, or --init-from " + dir + " for a fresh optimizer");
  std::map<std::string, safetensors::Tensor> all;
  for (const auto& f : rec.at("files")) {
    std::map<std::string, safetensors::Tensor> m = safetensors::readFile(dir + "/trainscope/" + f.get<std::string>(), field);
    all.insert(std::make_move_iterator(m.begin()), std::make_move_iterator(m.end()));
  }
  const StageSpec stage = stageOf(cfg, l.pp_rank);
  const std::vector<Trainer::OptimizerSlot> slots = trainer.optimizerSlots();
  const std::vector<std::vector<int64_t>> shapes = trainer.stageShapes();
  std::vector<std::vector<int64_t>> saved(slots.size());  // each slot's matrix before TP cut it
  for (size_t k = 0; k < kinds.size(); ++k) {
    std::map<std::string, safetensors::Tensor> hf;
    const std::string prefix = kinds[k] + "/";
    for (auto& [name, t] : all)
      if (name.compare(0, prefix.size(), prefix) == 0) hf.emplace(name.substr(prefix.size()), t);
    // The whole model's state of this kind, cut as this rank's weights are cut.
    const GptWeights whole = fromHf(cfg.model, hf, dir, field);
    const std::vector<at::Tensor> local =
        shardGpt(whole, stage, l.tp, l.tp_rank, at::kCPU, int(cfg.ep), l.dp_rank % int(cfg.ep)).flat();
    if (local.size() != shapes.size()) TRAINSCOPE_THROW("checkpoint: optimizer state for another stage");
    if (k == 0) {  // the stage's tensors uncut (shapes only: on the meta device)
      const std::vector<at::Tensor> uncut = shardGpt(whole, stage, 1, 0, at::kMeta, 1, 0).flat();
      for (size_t j = 0; j < slots.size(); ++j) saved[j] = uncut.at(slots[j].param).sizes().vec();
    }
    for (size_t j = 0; j < slots.size(); ++j) {
      const Trainer::OptimizerSlot& s = slots[j];
      at::Tensor& dst = const_cast<at::Tensor&>(e.state[k][j]);
      const at::Tensor src = local[s.param].detach().reshape({-1});
      const int64_t b = slotBegin(s, shapes[s.param], src.numel());
      dst.copy_(src.narrow(0, b, dst.numel()).view(dst.sizes()));
    }
  }
  if (e.commit) e.commit(saved);  // 8-bit Adam's blocks, Adafactor's factors from what was read (optim.h)
  const double counter = rec.value("counter", 0.0);
  for (const at::Tensor& c : e.counters) const_cast<at::Tensor&>(c).fill_(counter);
}

}  // namespace trainscope::runtime
