// trainscope/tuner/profile.h — the time model from measurement: per-layer costs read from a traced
// run's ranges, and a candidate's step time composed from them (docs/tuner.md, "Measured costs").
//
// A layer's cost depends on its shape on one rank — micro-batch, sequence, TP (and SP), precision,
// and on a CPU how many ranks share the node's cores — not on DP, PP, ZeRO or the number of
// micro-batches. So one short traced run per distinct shape measures, per micro-batch:
//
//   layer forward    the `layer` ranges (not those inside a recompute)
//   layer backward   (Σ backward − Σ recompute) / (layers × micro-batches)
//   recompute        the `recompute` ranges, per layer (full: the layer; selective: attention)
//   LM head          the `lm_head` range (the fused head does its backward GEMMs in forward)
//   embedding        forward − layers − head on the first stage
//   optimizer        the `optimizer` range, per parameter it updated
//   DP sync          the `grad_sync` range of a pp = 1 run: the gradient reduction not hidden behind
//                    backward, with its bytes (scaled by bytes for another DP or shard size)
//   other            step − micro-batches − grad sync − optimizer (clipping, data, zeroing)
// The last three are kept per ZeRO stage: ZeRO-1's optimizer range holds its all-gather, and its
// DP sync is a reduce-scatter.
//
// TP collectives happen inside the layer ranges, so a TP shape's costs include them as measured.
// A candidate of that shape is then composed as a pipeline over its stages (1F1B and GPipe alike):
//   t_s = L_s·(fwd + bwd + recompute) + [s = 0]·embedding + [s = p−1]·head + p2p (α–β)
//   step = Σ_s t_s + (M − 1)·max_s t_s + DP sync + optimizer + other
// Shapes no run has measured fall back to the analytic model (time_model.h) scaled by the median
// measured/analytic ratio of the shapes that were measured. On a GPU the ranges are timed by the
// device work they launched (the run must be traced at the `all` level, CUPTI).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trainscope/tuner/models.h"
#include "trainscope/tuner/space.h"

namespace trainscope::rundb {
class RunReader;
}

namespace trainscope::tuner {

// What a layer's cost depends on. ranks_per_node: CPU ranks sharing one node's cores (1 on GPUs);
// lanes: a one-process CPU run's core lanes; cp and ep (a MoE's all-to-alls are in its layers) when > 1.
std::string shapeKey(const Plan& p, const Cluster& c);

// One run's measurements, seconds per micro-batch on one rank unless said otherwise (0: not measured).
struct LayerCosts {
  double layer_fwd_s = 0, layer_bwd_s = 0;
  double recompute_full_s = 0, recompute_selective_s = 0;  // per layer
  double head_s = 0, embed_s = 0;
  double optimizer_s_per_param = 0;
  double dp_sync_s = 0, dp_sync_bytes = 0;  // per step, a pp = 1, dp > 1 run: exposed, and its all-reduce bytes
  double dp_hidden_share = -1;              // share of the gradient collectives' time overlapped by compute (-1: none)
  double other_s = -1;                      // per step, pp = 1 runs (-1: not measured)
  int64_t runs = 1;
  int64_t zero = 0;  // the run's ZeRO stage: ZeRO-1's all-gather is in its optimizer range, its
                     // reduce-scatter is its DP sync, so those step-level costs are per stage
};

// "mbs=… tp=…" and, for ZeRO-1's step-level costs, " zero1": a row of the costs tables.
std::string costsLabel(const std::string& key, const LayerCosts& k);

// Reads a traced run of plan `p`: CPU runs at the ranges level; GPU runs at the `all` level, where
// each range is timed by the device work it launched (its kernels, copies and sets, joined to their
// launches by correlation id: first start to last end), since the host only launches. Throws
// UserError when the run has no ranges, too few counted steps, or is a GPU run without kernels.
LayerCosts costsFromRun(rundb::RunReader& reader, const workloads::Workload& w, const Plan& p, int64_t skip = 1);

// The core lanes a CPU run used (the threads that ran its forward ranges on rank 0; 1 without lanes):
// what `cpu_lanes = 0` (auto) resolved to.
int64_t lanesOfRun(rundb::RunReader& reader);

// Costs measured so far, per shape: each field is the median over the runs that measured it.
class MeasuredCosts {
 public:
  void add(const std::string& key, const LayerCosts& c);
  // The layer costs from every run of the shape; the step-level ones (optimizer, DP sync and its
  // hidden share, other) from its runs with ZeRO stage `zero` where there are any, else from all.
  std::optional<LayerCosts> find(const std::string& key, int64_t zero = 0) const;
  bool empty() const { return runs_.empty(); }
  const std::map<std::string, std::vector<LayerCosts>>& runs() const { return runs_; }
  std::vector<int64_t> zeroStages(const std::string& key) const;  // those its runs used, ascending
  // Any measured DP sync (bytes, seconds), and "other", for shapes that have none of their own:
  // from runs of ZeRO stage `zero` where there are any.
  std::optional<std::pair<double, double>> anyDpSync(int64_t zero = 0) const;
  double anyOther(int64_t zero = 0) const;  // 0 when no run measured it

 private:
  std::vector<LayerCosts> allRuns() const;  // every shape's
  std::map<std::string, std::vector<LayerCosts>> runs_;
};

// The costs per shape and ZeRO stage (each the median over its runs) as a JSON array, and back (a
// study keeps them for the viewer). fromJson throws on malformed text.
std::string costsJson(const MeasuredCosts& m);
std::vector<std::pair<std::string, LayerCosts>> costsFromJson(const std::string& json_text);

}  // namespace trainscope::tuner
