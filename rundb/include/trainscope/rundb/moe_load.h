// trainscope/rundb/moe_load.h — what the `expert_load` rows of a MoE run say: per layer over the
// run (what `report` prints) and per rank and step (the viewer's counter tracks).
//
// Definitions (docs/trace-schema.md, "expert_load"):
//   experts E       of a layer: the distinct expert ids in its rows over the whole run.
//   load_e(s)       tokens routed to expert e in step s, summed over the ranks (before capacity).
//   imbalance(s)    max_e load_e(s) / mean_e load_e(s), the mean over all E experts (an expert without
//                   a row counts 0); 1 is perfect balance, E is every token on one expert. Steps whose
//                   layer routed no token are left out.
//   dropped share   Σ dropped / Σ tokens over every step and rank (0 drop-less).
//   aux / z loss    mean over the (rank, step) pairs of the layer (the rows repeat the layer's value).
//   hottest expert  the one with the most tokens over the run, and its share of the layer's tokens.
// A layer is flagged imbalanced when its mean imbalance exceeds kImbalanceFlag or its dropped share
// exceeds kDroppedShareFlag (why those numbers: moe_load.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "trainscope/rundb/rows.h"

namespace trainscope::rundb {

inline constexpr double kImbalanceFlag = 1.5;
inline constexpr double kDroppedShareFlag = 0.01;

struct ExpertLayerLoad {
  int64_t layer = 0;
  int64_t experts = 0;  // E
  int64_t steps = 0;    // steps with routed tokens
  double imbalance_mean = 0, imbalance_max = 0;
  int64_t tokens = 0, dropped = 0;  // summed over steps and ranks
  double dropped_share = 0;
  double aux_loss_mean = 0, z_loss_mean = 0;
  int64_t hottest_expert = -1;
  double hottest_share = 0;  // of the layer's tokens
  bool imbalanced = false;
};

// One layer per entry, by layer; empty for no rows (a dense run). Rows in any order.
std::vector<ExpertLayerLoad> summarizeExpertLoad(const std::vector<ExpertLoad>& rows);

// One rank's routing in one step, over its MoE layers (the viewer's "moe:" counters).
struct RankStepLoad {
  int64_t rank = 0, step = 0;
  double imbalance = 0;    // max over the layers of this rank's max/mean tokens per expert (E of the layer)
  double dropped_pct = 0;  // 100 × Σ dropped / Σ tokens over the layers (0 without tokens)
};
// By (rank, step); a (rank, step) whose layers routed no token has imbalance 0.
std::vector<RankStepLoad> rankStepLoad(const std::vector<ExpertLoad>& rows);

}  // namespace trainscope::rundb
