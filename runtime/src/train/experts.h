// experts.h — what the trainer does for a mixture-of-experts model beyond a dense one (internal).
//
// Expert parallelism (--ep N) splits each MoE layer's experts over N consecutive data-parallel ranks
// (Layout::epGroup). A rank's expert gradients then already hold the contributions of every token
// its ep group routed to them (the all-to-all's backward brought them back), so they are summed
// only over the ranks holding the same experts (Layout::expertDpGroup, dp/ep of them) and divided by
// the whole dp x cp, as Megatron-LM scales expert gradients; the dense tensors (router, shared expert,
// attention) go through GradSync over dp like any other. Each expert tensor is held whole by every
// rank of its expert-dp group and updated there (ZeRO-1/2 shard the dense tensors only).
//
// Per step it also collects the router's load (MoeContext::load) into expert_load rows.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "model/moe.h"
#include "trainscope/runconfig/config.h"
#include "trainscope/rundb/rows.h"
#include "trainscope/runtime/comm.h"
#include "trainscope/runtime/gpt.h"

namespace trainscope::runtime {

class Experts {
 public:
  // info: what each of this rank's flat parameters is. Creates the ep and expert-dp groups (every
  // rank of them calls this at the same point).
  Experts(const TrainConfig& cfg, Comm& comm, const std::vector<ParamInfo>& info);

  bool active() const { return moe_; }
  MoeContext* context() { return moe_ ? &ctx_ : nullptr; }
  // Whether parameter i is reduced here rather than by GradSync (an expert tensor under --ep > 1).
  bool ownsGradient(size_t i) const { return i < own_.size() && own_[i]; }

  // Before a step's first micro-batch: the aux/z losses enter backward scaled as the main loss is.
  void beginStep(double loss_grad_scale);
  // After backward: expert gradients summed over the expert-dp group and divided by dp x cp.
  void reduce(std::vector<at::Tensor>& main_grads);
  // Σ g² of the expert gradients in `grads` (those this rank counts), summed over the ep group: every
  // expert once. Under a sharded optimizer the caller all-reduces over dp x cp afterwards, so only the
  // first expert-dp replica contributes then.
  at::Tensor sumSquares(const std::vector<at::Tensor>& grads, bool dp_reduced_after) const;
  // Weight digest: whether this rank hands in parameter i (expert tensors: the first expert-dp
  // replica, i.e. dp ranks 0 … ep−1; others: DP rank 0).
  bool digestOnThisRank(size_t i, int dp_rank) const;
  // This step's load as expert_load rows (global expert ids), then cleared. TP ranks route the same
  // tokens (the MoE MLP is TP-replicated): only TP rank 0 reports, so totals count each token once.
  std::vector<rundb::ExpertLoad> takeLoad(int64_t rank, int64_t step);

 private:
  bool moe_ = false;
  int ep_ = 1, ep_rank_ = 0, dp_cp_ = 1, tp_rank_ = 0;
  int64_t experts_ = 0;
  MoeContext ctx_;
  Group* expert_dp_ = nullptr;
  std::vector<bool> own_;
};

}  // namespace trainscope::runtime
