// framework_memory.cpp — FSDP's and DeepSpeed ZeRO's model state and buffers per rank
// (framework_memory.h; docs/memory-model.md, "FSDP and DeepSpeed", gives each formula's source).
#include "trainscope/models/framework_memory.h"

#include <algorithm>
#include <map>

#include "trainscope/workloads/memory.h"

namespace trainscope::models {
namespace {

int64_t bytes(double b) { return int64_t(std::max(0.0, b)); }

void add(FrameworkMemory& m, const std::string& name, double b, const std::string& when, const std::string& source) {
  m.items.push_back({name, bytes(b), when, source});
}

double optimizerBytesPerParam(const Plan& p) {
  return p.optimizer == runconfig::OptimizerKind::AdamW ? 8 : 0;  // Adam's fp32 m and v
}

// Ranks a framework shards the model state over: the gradient group, or HYBRID's shard group.
double shardRanks(const Plan& p) {
  const int64_t g = p.gradientGroup();
  return double(p.zero_shard_size > 0 ? std::min(p.zero_shard_size, g) : g);
}

}  // namespace

ParamCounts paramCounts(const workloads::Workload& w, const Plan& p, double persistence_threshold) {
  ParamCounts c;
  std::map<std::string, double> modules, blocks;
  for (const workloads::ParamTensor& t : workloads::parameterTensors(w)) {
    const double n = double(t.numel());
    c.total += n;
    std::string module = t.name;
    for (const char* suffix : {".weight", ".bias"})
      if (module.size() > std::string(suffix).size() &&
          module.compare(module.size() - std::string(suffix).size(), std::string::npos, suffix) == 0)
        module.resize(module.size() - std::string(suffix).size());
    modules[module] += n;
    if (t.name.rfind("h.", 0) == 0) blocks[t.name.substr(0, t.name.find('.', 2))] += n;
    else c.root += n;
    if (n < persistence_threshold) c.persistent += n;
  }
  for (const auto& [name, n] : modules) c.largest_module = std::max(c.largest_module, n);
  for (const auto& [name, n] : blocks) c.block = std::max(c.block, n);
  // A (tp, pp) rank's share: tensor parallelism splits every matrix, the pipeline the blocks.
  const double tp = double(p.tp), share = double(p.tp * p.pp);
  c.total /= share;
  c.root /= tp;
  c.block /= tp;
  c.largest_module /= tp;
  c.persistent /= share;
  return c;
}

FrameworkMemory deepspeedMemory(const workloads::Workload& w, const Plan& p, const DeepSpeedZero& z) {
  FrameworkMemory m;
  m.framework = "deepspeed";
  const ParamCounts c = paramCounts(w, p, z.param_persistence_threshold);
  const double P = c.total, N = shardRanks(p), adam = optimizerBytesPerParam(p);
  const bool mixed = p.mixed();
  const double low = mixed ? 2 : 4;     // the model's (16-bit) weights and gradients
  const double master = mixed ? 4 : 0;  // fp32 master weights (mixed precision only)
  const int stage = int(p.zero);
  const std::string ds = "deepspeed 0.19.8 ";
  if (stage <= 2) {
    m.params = bytes(low * P + master * P / (stage >= 1 ? N : 1));
    const double fp32_grads = mixed ? 4 * P / (stage >= 1 ? N : 1) : 0;  // the fp32 gradient (partition)
    m.grads = bytes((stage == 2 ? low * P / N : low * P) + fp32_grads);
    m.optimizer = bytes(adam * P / (stage >= 1 ? N : 1));
    add(m, "16-bit weights", low * P, "step", ds + "bit16_groups: 2 bytes per parameter");
    add(m, "fp32 master + gradient partition", (master + (mixed ? 4 : 0)) * P / (stage >= 1 ? N : 1), "step",
        ds + "single_partition_of_fp32_groups and its fp32 gradient: 8P/N");
    add(m, "Adam state", adam * P / (stage >= 1 ? N : 1), "step", "exp_avg, exp_avg_sq: 8P/N");
    add(m, stage == 2 ? "16-bit gradient partition" : "16-bit gradients", stage == 2 ? low * P / N : low * P, "step",
        stage == 2 ? ds + "averaged_gradients partitions: 2P/N" : "the model's .grad: 2P");
    if (z.contiguous_gradients && stage >= 1) {
      const bool overlap = z.overlap_comm < 0 ? false : z.overlap_comm > 0;
      m.buffers = bytes(z.reduce_bucket_size * low * (overlap ? 2 : 1));
      add(m, "IPG reduce buckets", double(m.buffers), "step",
          ds + "stage_1_and_2.py setup_buckets: reduce_bucket_size elements, twice with overlap_comm");
    }
    return m;
  }
  // ZeRO-3: every state partitioned; the largest module gathered (weight and gradient, 16-bit).
  m.params = bytes(low * P / N + master * P / N + low * c.largest_module);
  m.grads = bytes(low * P / N + (mixed ? 4 : 0) * P / N + low * c.largest_module);
  m.optimizer = bytes(adam * P / N);
  add(m, "partitioned states", (low * 2 + master + (mixed ? 4 : 0) + adam) * P / N, "step",
      ds + "stage3.py: 16-bit weight and gradient partitions (grad_partitions_flat_buffer), fp32 master and "
           "gradient, Adam: 20P/N (estimate_zero3_model_states_mem_needs counts 18P/N, leaving out the 16-bit "
           "gradient partition)");
  add(m, "largest module gathered", 2 * low * c.largest_module, "step",
      ds + "estimate_zero3_model_states_mem_needs: 4 * largest_layer_params");
  const double persistent = low * c.persistent * (1 - 1 / N);
  const double ipg = z.contiguous_gradients ? z.reduce_bucket_size * low : 0;
  m.buffers = bytes(persistent + ipg);
  add(m, "persistent parameters", persistent, "step",
      ds + "stage3_param_persistence_threshold: tensors under it stay whole");
  add(m, "IPG reduce bucket", ipg, "step", ds + "stage3.py: one reduce_bucket_size buffer of the gradient dtype");
  const double prefetch = std::min({z.prefetch_bucket_size, std::max(0.0, z.max_live_parameters - c.largest_module), P});
  m.transient = bytes(low * prefetch);
  add(m, "prefetched parameters", low * prefetch, "forward/backward",
      ds + "stage3_prefetch_bucket_size ahead of the module in use, within stage3_max_live_parameters");
  return m;
}

FrameworkMemory fsdpMemory(const workloads::Workload& w, const Plan& p, const FrameworkProfile& profile) {
  FrameworkMemory m;
  m.framework = "fsdp";
  const ParamCounts c = paramCounts(w, p, 0);
  const double P = c.total, adam = optimizerBytesPerParam(p);
  const int stage = int(p.zero);
  const double N = stage >= 2 ? shardRanks(p) : 1;
  const double low = p.mixed() ? 2 : 4;
  const double reduce = profile.reduce_bytes > 0 ? profile.reduce_bytes : 4;
  const std::string fs = "PyTorch FSDP ";
  m.params = bytes(4 * P / N);  // the sharded fp32 flat parameters (the optimizer's)
  m.grads = bytes(4 * P / N);
  m.optimizer = bytes(adam * P / N);
  add(m, "fp32 flat parameter shards", 4 * P / N, "step", fs + "FlatParameter, sharded: 4P/N");
  add(m, "fp32 gradient shards", 4 * P / N, "step", fs + "sharded .grad of the flat parameter: 4P/N");
  add(m, "Adam state", adam * P / N, "step", "exp_avg, exp_avg_sq on the shards: 8P/N");
  if (stage < 2) {  // NO_SHARD: the whole flat parameter, and its low-precision copy
    if (p.mixed()) m.buffers = bytes(low * P), add(m, "low-precision parameters", low * P, "step", fs + "mixed precision copy");
    m.transient = bytes(reduce * c.block);
    add(m, "reduce buffer", reduce * c.block, "backward", fs + "the gradient in the reduce dtype before the all-reduce");
    return m;
  }
  // Forward/backward: the root unit stays unsharded (FSDP does not reshard the root after forward),
  // the unit in use and the one prefetched are unsharded, each with its low-precision shard copy.
  const double gathered = stage == 3 ? low * (c.root + 2 * c.block) : low * P;
  const double mp_shards = p.mixed() ? low * 2 * c.block / N : 0;
  const double reduce_buf = reduce * c.block + reduce * c.block / N;
  m.transient = bytes(gathered + mp_shards + reduce_buf);
  add(m, stage == 3 ? "unsharded units (root, in use, prefetched)" : "unsharded parameters (SHARD_GRAD_OP)", gathered,
      "forward/backward", stage == 3 ? fs + "FULL_SHARD, BACKWARD_PRE, limit_all_gathers: two units in flight"
                                     : fs + "SHARD_GRAD_OP keeps parameters unsharded from forward to backward");
  add(m, "low-precision shard copies", mp_shards, "forward/backward", fs + "MixedPrecision(param_dtype): _mp_shard");
  add(m, "reduce-scatter buffers", reduce_buf, "backward",
      fs + "the unit's unsharded gradient in reduce_dtype and its shard (profile reduce_bytes)");
  return m;
}

bool frameworkMemory(const workloads::Workload& w, const Plan& p, Framework f, const FrameworkProfile& profile,
                     FrameworkMemory& out, const DeepSpeedZero& z) {
  if (f == Framework::Deepspeed) out = deepspeedMemory(w, p, z);
  else if (f == Framework::Fsdp) out = fsdpMemory(w, p, profile);
  else return false;
  return true;
}

int64_t opListActivations(const MemoryPrediction& m) {
  if (m.stages.empty()) return 0;
  const StageMemory& s = m.stages[size_t(m.worst_stage)];
  return s.activations + s.head;
}

MegatronPeak megatronPeak(const workloads::Workload& w, const Plan& p, const MemoryPrediction& m) {
  const bool distributed = runconfig::shardsOptimizer(p.zero);
  const double emb_bpp = megatronBytesPerParam(p, distributed);
  MegatronPeak worst;
  for (const StageMemory& s : m.stages) {
    MegatronPeak at;
    at.stage = s.stage;
    at.params_opt = megatronLayersParamsOpt(w, p, s.stage, distributed);
    at.embedding_opt = megatronEmbeddingTables(w, p, s.stage) * megatronEmbeddingParamsOpt(w, p, emb_bpp);
    at.activations = s.megatron_activations;
    // --fp8-param-gather: the FP8 parameter (1 byte) replaces the 16-bit one (2, in params_opt) and TE
    // keeps its transpose (1): the two FP8 bytes a weight element are the 16-bit copy's.
    at.fp8_weights = p.fp8_param_gather ? 0 : s.fp8_weights;
    at.bytes = at.params_opt + at.embedding_opt + at.activations + at.fp8_weights;
    if (at.bytes > worst.bytes) worst = at;
  }
  return worst;
}

int64_t frameworkPeak(const workloads::Workload& w, const Plan& p, const Cluster& c, Framework f,
                      const MemoryPrediction& m, const DeepSpeedZero& z) {
  if (c.kind == ClusterKind::Cpu) return 0;
  if (f == Framework::Megatron) return megatronPeak(w, p, m).bytes;
  FrameworkMemory fm;
  if (!frameworkMemory(w, p, f, c.profile(f), fm, z)) return 0;
  return fm.total() + opListActivations(m);
}

}  // namespace trainscope::models
