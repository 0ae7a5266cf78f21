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
#include <functional>
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

// The routing load expert parallelism feels, as `predict --moe-load` prices it (docs/memory-model.md,
// "Routing load"): with the E experts split over `ep` ranks in blocks of E/ep (shardMoe's: rank r
// holds experts r·E/ep …), for every (step, layer, EP group) — `group_of(rank)`: the routing ranks
// whose tokens one all-to-all exchanges — each block's routed tokens (before capacity) summed over
// the group's ranks, and the largest block over the mean block: the hottest EP rank's load.
struct EpRankLoad {
  int64_t experts = 0;              // E (the most distinct expert ids of a layer)
  int64_t samples = 0;              // (step, layer, group) with routed tokens
  double hot_max = 0, hot_mean = 0; // the hottest rank's load over the samples: largest and mean
  int64_t tokens = 0, dropped = 0;  // assignments routed and dropped at capacity, over every row
};
// Empty rows (a dense run, or none recorded) give samples 0. ep must divide E (else samples 0).
EpRankLoad epRankLoad(const std::vector<ExpertLoad>& rows, int64_t ep, const std::function<int64_t(int64_t)>& group_of);

}  // namespace trainscope::rundb
