// gather.cpp — see gather.h.
#include "state/gather.h"

#include <ATen/ATen.h>

#include "trainscope/common/error.h"
#include "trainscope/runtime/comm.h"
#include "trainscope/runtime/parallel.h"

namespace trainscope::runtime {
namespace {

bool endsWith(const std::string& s, const std::string& e) {
  return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
}

// Every TP rank's piece of `t`, in TP rank order.
std::vector<at::Tensor> allPieces(const at::Tensor& t, Comm& comm) {
  const int tp = comm.layout().tp;
  at::Tensor in = t.detach().contiguous().view({-1});
  at::Tensor out = at::empty({int64_t(tp) * in.numel()}, in.options());
  comm.tp().allGather(out, in);
  std::vector<int64_t> shape = t.sizes().vec();
  shape.insert(shape.begin(), tp);
  return out.view(shape).unbind(0);
}

// Rows [begin, begin + n) of each piece, concatenated over `ranks`.
at::Tensor rowsOf(const std::vector<at::Tensor>& pieces, const std::vector<int>& ranks, int64_t begin, int64_t n) {
  std::vector<at::Tensor> parts;
  for (int r : ranks) parts.push_back(pieces[size_t(r)].narrow(0, begin, n));
  return at::cat(parts, 0);
}

// An expert tensor's experts (dim 0) from every rank of the ep group, in ep rank order: rank r holds
// experts [r·E/ep, (r+1)·E/ep) (shardGpt).
at::Tensor allExperts(const at::Tensor& t, Group& ep) {
  at::Tensor in = t.contiguous().view({-1});
  at::Tensor out = at::empty({int64_t(ep.size()) * in.numel()}, in.options());
  ep.allGather(out, in);
  std::vector<int64_t> shape = t.sizes().vec();
  shape[0] *= ep.size();
  return out.view(shape);
}

}  // namespace

StageSpec stageOf(const TrainConfig& cfg, int pp_rank) {
  return StageSpec::of(cfg.model.n_layer, int(cfg.pp), pp_rank, int(cfg.virtual_stages)).withModel(cfg.model);
}

std::vector<std::pair<std::string, at::Tensor>> gatherStage(const TrainConfig& cfg, const std::vector<at::Tensor>& master,
                                                            Comm& comm) {
  const Layout& l = comm.layout();
  const StageSpec stage = stageOf(cfg, l.pp_rank);
  const std::vector<ParamInfo> info = GptWeights::info(stage);
  if (info.size() != master.size())
    TRAINSCOPE_THROW("checkpoint: " + std::to_string(master.size()) + " weights for a stage of " +
                     std::to_string(info.size()));
  const workloads::Workload& w = cfg.model;
  const int tp = l.tp;
  std::vector<int> all(static_cast<size_t>(tp));
  for (int r = 0; r < tp; ++r) all[size_t(r)] = r;
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t i = 0; i < info.size(); ++i) {
    const ParamInfo& p = info[i];
    at::Tensor m = master[i].detach().to(at::kCPU);
    if (p.expert && cfg.ep > 1) m = allExperts(m, comm.subGroup("ep", l.epGroup(int(cfg.ep))));
    if (p.wte && !stage.first && p.name == "wte") continue;  // the tied head's copy: the first stage writes it
    if (tp == 1 || !p.tp_sharded) {
      out.emplace_back(p.name, m);
      continue;
    }
    const std::vector<at::Tensor> pieces = allPieces(m, comm);
    at::Tensor whole;
    if (endsWith(p.name, "attn.c_attn.weight") || endsWith(p.name, "attn.c_attn.bias")) {
      const int64_t D = w.headSize(), H = w.n_head, KV = w.kvHeads();
      const int64_t q = H * D / tp, kv = tp <= KV ? KV * D / tp : D;
      std::vector<int> kv_ranks = all;  // tp > KV: rank r holds kv head r / (tp / KV); one rank per head
      if (tp > KV) {
        kv_ranks.clear();
        for (int64_t j = 0; j < KV; ++j) kv_ranks.push_back(int(j * (tp / KV)));
      }
      whole = at::cat({rowsOf(pieces, all, 0, q), rowsOf(pieces, kv_ranks, q, kv), rowsOf(pieces, kv_ranks, q + kv, kv)}, 0);
    } else if (endsWith(p.name, "mlp.c_fc.weight") || endsWith(p.name, "mlp.c_fc.bias")) {
      if (w.mlp == workloads::Mlp::SwiGLU) {
        const int64_t half = pieces[0].size(0) / 2;
        whole = at::cat({rowsOf(pieces, all, 0, half), rowsOf(pieces, all, half, half)}, 0);
      } else {
        whole = at::cat(pieces, 0);
      }
    } else if (endsWith(p.name, "attn.c_proj.weight") || endsWith(p.name, "mlp.c_proj.weight")) {
      whole = at::cat(pieces, 1);
    } else if (p.name == "wte" || p.name == "lm_head.weight") {
      whole = at::cat(pieces, 0);  // vocabulary rows (padding cut when written)
    } else {
      TRAINSCOPE_THROW("checkpoint: no rule to gather the tensor-parallel shards of " + p.name);
    }
    out.emplace_back(p.name, whole);
  }
  return out;
}

}  // namespace trainscope::runtime
