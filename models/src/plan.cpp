// plan.cpp — see plan.h.
#include "trainscope/models/plan.h"

#include <algorithm>

#include "trainscope/models/dp_layout.h"

namespace trainscope::models {

std::string Plan::describe() const {
  std::string s = "dp" + std::to_string(dp) + (cp > 1 ? " cp" + std::to_string(cp) : "") + " tp" + std::to_string(tp) + " pp" + std::to_string(pp) + " mbs" +
                  std::to_string(mbs) + " ga" + std::to_string(ga()) + " " + toString(ckpt) + " " +
                  toString(precision) + " " + toString(optimizer);
  if (runconfig::shardsOptimizer(zero)) s += " zero" + std::to_string(runconfig::stageNumber(zero));
  if (zero_shard_size > 0 && zero_shard_size < dp) s += " hybrid" + std::to_string(zero_shard_size);
  if (sequence_parallel) s += " sp";
  if (ep > 1) s += " ep" + std::to_string(ep);
  if (pp > 1)
    s += std::string(" ") + (virtual_stages > 1 ? "interleaved v" + std::to_string(virtual_stages) : toString(pp_schedule));
  return s;
}

std::string whyInvalid(const workloads::Workload& w, const Plan& p) {
  if (p.dp < 1 || p.cp < 1 || p.tp < 1 || p.pp < 1 || p.mbs < 1 || p.gbs < 1 || p.seq < 1 || p.virtual_stages < 1)
    return "non-positive size";
  if (w.n_head % p.tp != 0) return "tp=" + std::to_string(p.tp) + " does not divide n_head=" + std::to_string(w.n_head);
  if (std::string why = whyInvalidArchitecture(w, p); !why.empty()) return why;
  if (p.pp > w.n_layer) return "pp=" + std::to_string(p.pp) + " exceeds n_layer=" + std::to_string(w.n_layer);
  if (p.gbs % (p.mbs * p.dp) != 0)
    return "gbs=" + std::to_string(p.gbs) + " is not divisible by mbs x dp=" + std::to_string(p.mbs * p.dp);
  if (p.seq > w.n_positions)
    return "seq=" + std::to_string(p.seq) + " exceeds the workload's n_positions=" + std::to_string(w.n_positions) +
           " (max_position_embeddings in a config.json): pass --seq of at most " + std::to_string(w.n_positions);
  if (p.sequence_parallel && p.tp == 1) return "sequence parallelism needs tp > 1";
  if (p.sequence_parallel && p.seq % p.tp != 0) return "sequence parallelism needs seq divisible by tp";
  if (runconfig::shardsOptimizer(p.zero) && p.dp == 1)
    return "ZeRO-" + std::to_string(runconfig::stageNumber(p.zero)) + " needs dp > 1";
  // Hybrid sharding as the runtime accepts it (runconfig's resolveZero3).
  if (p.zero_shard_size < 0) return "zero_shard=" + std::to_string(p.zero_shard_size) + " is negative";
  if (p.zero_shard_size > 0 && p.zero != runconfig::ZeroStage::Parameters) return "hybrid sharding (zero_shard) needs ZeRO-3";
  if (p.zero_shard_size > 0 && p.dp % p.zero_shard_size != 0)
    return "zero_shard=" + std::to_string(p.zero_shard_size) + " does not divide dp=" + std::to_string(p.dp);
  if (p.virtual_stages > 1 && p.pp == 1)
    return "interleaving (virtual_stages=" + std::to_string(p.virtual_stages) + ") needs pp > 1";
  if (p.virtual_stages > 1 && w.n_layer % (p.pp * p.virtual_stages) != 0)
    return "interleaving needs n_layer=" + std::to_string(w.n_layer) + " divisible by pp x virtual_stages=" +
           std::to_string(p.pp) + " x " + std::to_string(p.virtual_stages);
  // Megatron-LM's interleaved schedule runs the micro-batches in groups of pp (its schedules.py
  // refuses any other count).
  if (p.virtual_stages > 1 && p.ga() % p.pp != 0)
    return "interleaving needs the micro-batches per step (ga=" + std::to_string(p.ga()) + ") divisible by pp=" +
           std::to_string(p.pp);
  // Causal load balancing: each CP rank holds chunks i and 2·cp − 1 − i of the sequence in 2·cp.
  if (p.cp > 1 && p.seq % (2 * p.cp) != 0)
    return "context parallelism needs seq=" + std::to_string(p.seq) + " divisible by 2 x cp=" + std::to_string(2 * p.cp);
  return whyInvalidExperts(w, p);
}

// Grouped-query attention under TP: the K/V heads split over the TP ranks (tp divides n_kv_head) or,
// with more ranks than K/V heads, replicated (n_kv_head divides tp), as Megatron-LM does; any other
// tp would leave a rank's query heads without their K/V head. A sliding window shorter than the
// sequence is priced (layer_ops.cpp) without context parallelism, whose ring does not apply it.
std::string whyInvalidArchitecture(const workloads::Workload& w, const Plan& p) {
  const int64_t kv = w.kvHeads();
  if (kv % p.tp != 0 && p.tp % kv != 0)
    return "tp=" + std::to_string(p.tp) + " neither divides n_kv_head=" + std::to_string(kv) +
           " nor is a multiple of it (grouped-query attention splits or replicates the K/V heads)";
  return "";
}

int64_t kvHeadsPerRank(const workloads::Workload& w, int64_t tp) {
  const int64_t kv = w.kvHeads();
  return tp <= kv ? kv / tp : 1;
}

double ringBlockElements(const workloads::Workload& w, const Plan& p) {
  return 2.0 * double(p.mbs) * double(p.localSeq()) * double(kvHeadsPerRank(w, p.tp) * w.headSize());
}

// Expert parallelism (Megatron-LM's --expert-model-parallel-size): the ep ranks holding one set of
// experts are DP ranks, each with its own tokens, so ep divides dp and the experts divide evenly.
std::string whyInvalidExperts(const workloads::Workload& w, const Plan& p) {
  if (p.ep < 1) return "non-positive ep";
  if (p.ep > 1 && !w.isMoe()) return "ep=" + std::to_string(p.ep) + " needs a mixture-of-experts workload (n_experts > 0)";
  if (p.dp % p.ep != 0) return "ep=" + std::to_string(p.ep) + " does not divide dp=" + std::to_string(p.dp);
  if (w.isMoe() && w.n_experts % p.ep != 0)
    return "ep=" + std::to_string(p.ep) + " does not divide n_experts=" + std::to_string(w.n_experts);
  // Under TP the experts are whole on every TP rank, as the runtime holds them (no expert TP); under
  // ZeRO-1/2 with ep > 1 they stay outside the shards (memory_model.cpp). ZeRO-3 would shard over
  // dp what ep already splits: the runtime refuses it, and so does the model.
  if (p.ep > 1 && p.zero == runconfig::ZeroStage::Parameters)
    return "ZeRO-3 with ep=" + std::to_string(p.ep) + ": expert weights are split over ep ranks, not sharded over dp; use ZeRO-1/2 or ep=1";
  return "";
}

Plan planOf(const runconfig::TrainConfig& c) {
  Plan p;
  static_cast<runconfig::Parallelism&>(p) = c;  // the layout, whole
  p.mbs = c.mbs;
  p.gbs = c.global_batch;
  p.seq = c.seq;
  p.ckpt = c.ckpt;
  p.precision = c.precision;
  p.optimizer = c.optimizer;
  p.cpu_lanes = c.cpu_lanes > 0 ? c.cpu_lanes : 1;
  p.bucket_mb = c.bucket_mb;
  return p;
}

int64_t layersOfStage(int64_t n_layer, int64_t pp, int64_t stage) {
  int64_t n = 0;
  for (const Range& chunk : stageLayout(n_layer, pp, stage, 1)) n += chunk.size();
  return n;
}

std::vector<int64_t> layerIdsOfStage(int64_t n_layer, int64_t pp, int64_t stage, int64_t virtual_stages) {
  std::vector<int64_t> ids;
  for (const Range& chunk : stageLayout(n_layer, pp, stage, virtual_stages))
    for (int64_t l = chunk.begin; l < chunk.end; ++l) ids.push_back(l);
  return ids;
}

}  // namespace trainscope::models
