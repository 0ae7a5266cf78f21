// gather.h — one pipeline stage's whole tensors, gathered from its tensor-parallel shards, for a
// checkpoint (internal to the runtime).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "trainscope/runconfig/config.h"
#include "trainscope/runtime/gpt.h"

namespace trainscope::runtime {

class Comm;

// This rank's stage (as the Trainer builds it from cfg and the layout).
StageSpec stageOf(const TrainConfig& cfg, int pp_rank);

// Collective over the TP group: the stage's tensors (flat names of GptWeights::info, the whole
// model's shapes except vocabulary padding) from this rank's master weights, TP shards put back
// together as shardGpt cut them — c_attn's rows [q; k; v] by heads (K/V heads replicated when
// tp > n_kv_head), SwiGLU's c_fc rows [gate; up] each by rows, c_proj by columns, the embedding and
// head by vocabulary rows. The tied embedding is the first stage's only. Under ep > 1 the expert
// tensors are first gathered over the ep group (experts by rank). `master`: whole tensors
// (Trainer::wholeMasterParams, ZeRO-3's pieces already gathered).
std::vector<std::pair<std::string, at::Tensor>> gatherStage(const TrainConfig& cfg, const std::vector<at::Tensor>& master,
                                                            Comm& comm);

}  // namespace trainscope::runtime
