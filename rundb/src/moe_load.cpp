// moe_load.cpp — the expert_load rows summarised (see moe_load.h).
//
// Why the flags sit where they do. A router with capacity factor c keeps at most c × (the mean
// load) tokens per expert and micro-batch. Switch Transformer (Fedus et al. 2021, §2.2) trains well
// at low factors, 1.0–1.25, and reports the tokens dropped there as typically under 1%; GShard
// (Lepikhin et al. 2020, §2.2) bounds an expert at 2N/E for its top-2 gate, a factor of 1 per
// assignment. A busiest expert above 1.5× the mean is therefore past any capacity in common use:
// with capacity it drops tokens, drop-less it makes its GEMM, which every rank of the all-to-all
// waits for, 1.5× a balanced one. Dropping more than 1% of the assignments (more than Switch's
// typical) is flagged on its own, since a skew that moves between micro-batches drops tokens under a
// modest step-level max/mean; a dropped token skips its expert MLP.
#include "trainscope/rundb/moe_load.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

namespace trainscope::rundb {
namespace {

// max/mean over E experts of one load vector; 0 when nothing was routed.
double maxOverMean(int64_t max_tokens, int64_t sum_tokens, int64_t experts) {
  if (sum_tokens <= 0 || experts <= 0) return 0;
  return double(max_tokens) / (double(sum_tokens) / double(experts));
}

// E per layer: the distinct expert ids of its rows over the whole run.
std::map<int64_t, int64_t> expertsPerLayer(const std::vector<ExpertLoad>& rows) {
  std::map<int64_t, std::set<int64_t>> ids;
  for (const ExpertLoad& r : rows) ids[r.layer].insert(r.expert);
  std::map<int64_t, int64_t> out;
  for (const auto& [layer, set] : ids) out[layer] = int64_t(set.size());
  return out;
}

struct LayerAcc {
  std::map<int64_t, std::map<int64_t, int64_t>> by_step;  // step → expert → tokens over the ranks
  std::map<int64_t, int64_t> by_expert;                   // expert → tokens over the run
  int64_t tokens = 0, dropped = 0;
  std::map<std::pair<int64_t, int64_t>, std::pair<double, double>> losses;  // (rank, step) → (aux, z)
};

ExpertLayerLoad finish(int64_t layer, int64_t experts, const LayerAcc& a) {
  ExpertLayerLoad l;
  l.layer = layer;
  l.experts = experts;
  double imbalance_sum = 0;
  for (const auto& [step, load] : a.by_step) {
    int64_t max_tokens = 0, sum = 0;
    for (const auto& [expert, n] : load) max_tokens = std::max(max_tokens, n), sum += n;
    if (sum <= 0) continue;  // nothing routed: no balance to speak of
    const double imb = maxOverMean(max_tokens, sum, experts);
    ++l.steps;
    imbalance_sum += imb;
    l.imbalance_max = std::max(l.imbalance_max, imb);
  }
  l.imbalance_mean = l.steps ? imbalance_sum / double(l.steps) : 0;
  l.tokens = a.tokens;
  l.dropped = a.dropped;
  l.dropped_share = a.tokens > 0 ? double(a.dropped) / double(a.tokens) : 0;
  for (const auto& [key, loss] : a.losses) l.aux_loss_mean += loss.first, l.z_loss_mean += loss.second;
  if (!a.losses.empty()) l.aux_loss_mean /= double(a.losses.size()), l.z_loss_mean /= double(a.losses.size());
  int64_t hottest_tokens = -1;
  for (const auto& [expert, n] : a.by_expert)  // ties: the lowest id
    if (n > hottest_tokens) l.hottest_expert = expert, hottest_tokens = n;
  l.hottest_share = a.tokens > 0 ? double(hottest_tokens) / double(a.tokens) : 0;
  l.imbalanced = l.imbalance_mean > kImbalanceFlag || l.dropped_share > kDroppedShareFlag;
  return l;
}

}  // namespace

std::vector<ExpertLayerLoad> summarizeExpertLoad(const std::vector<ExpertLoad>& rows) {
  std::map<int64_t, LayerAcc> layers;
  for (const ExpertLoad& r : rows) {
    LayerAcc& a = layers[r.layer];
    a.by_step[r.step][r.expert] += r.tokens;
    a.by_expert[r.expert] += r.tokens;
    a.tokens += r.tokens;
    a.dropped += r.dropped;
    a.losses.emplace(std::make_pair(r.rank, r.step), std::make_pair(r.aux_loss, r.z_loss));  // every expert's row repeats them
  }
  const std::map<int64_t, int64_t> experts = expertsPerLayer(rows);
  std::vector<ExpertLayerLoad> out;
  for (const auto& [layer, a] : layers) out.push_back(finish(layer, experts.at(layer), a));
  return out;
}

std::vector<RankStepLoad> rankStepLoad(const std::vector<ExpertLoad>& rows) {
  struct Acc {
    int64_t max_tokens = 0, sum = 0, dropped = 0;
  };
  std::map<std::tuple<int64_t, int64_t, int64_t>, Acc> by;  // (rank, step, layer)
  for (const ExpertLoad& r : rows) {
    Acc& a = by[{r.rank, r.step, r.layer}];
    a.max_tokens = std::max(a.max_tokens, r.tokens);
    a.sum += r.tokens;
    a.dropped += r.dropped;
  }
  const std::map<int64_t, int64_t> experts = expertsPerLayer(rows);
  std::vector<RankStepLoad> out;
  int64_t tokens = 0, dropped = 0;
  for (auto it = by.begin(); it != by.end(); ++it) {
    const auto [rank, step, layer] = it->first;
    if (out.empty() || out.back().rank != rank || out.back().step != step) {
      out.push_back({rank, step, 0, 0});
      tokens = dropped = 0;
    }
    RankStepLoad& o = out.back();
    o.imbalance = std::max(o.imbalance, maxOverMean(it->second.max_tokens, it->second.sum, experts.at(layer)));
    tokens += it->second.sum;
    dropped += it->second.dropped;
    o.dropped_pct = tokens > 0 ? 100.0 * double(dropped) / double(tokens) : 0;
  }
  return out;
}

EpRankLoad epRankLoad(const std::vector<ExpertLoad>& rows, int64_t ep, const std::function<int64_t(int64_t)>& group_of) {
  EpRankLoad out;
  for (const auto& [layer, n] : expertsPerLayer(rows)) out.experts = std::max(out.experts, n);
  for (const ExpertLoad& r : rows) out.tokens += r.tokens, out.dropped += r.dropped;
  if (ep < 1 || out.experts == 0 || out.experts % ep != 0) return out;
  const int64_t per_rank = out.experts / ep;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<int64_t>> blocks;  // (step, layer, group) → ep loads
  for (const ExpertLoad& r : rows) {
    if (r.expert < 0 || r.expert >= out.experts) continue;
    std::vector<int64_t>& b = blocks[{r.step, r.layer, group_of(r.rank)}];
    b.resize(size_t(ep));
    b[size_t(r.expert / per_rank)] += r.tokens;
  }
  double sum = 0;
  for (const auto& [key, b] : blocks) {
    int64_t most = 0, total = 0;
    for (int64_t n : b) most = std::max(most, n), total += n;
    if (total <= 0) continue;
    const double hot = maxOverMean(most, total, ep);
    ++out.samples;
    sum += hot;
    out.hot_max = std::max(out.hot_max, hot);
  }
  out.hot_mean = out.samples ? sum / double(out.samples) : 0;
  return out;
}

}  // namespace trainscope::rundb
