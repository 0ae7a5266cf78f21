// memory_model.cpp — see memory_model.h; formulas and their sources in docs/tuner.md.
#include "trainscope/models/memory_model.h"

#include <algorithm>
#include <cmath>

#include "trainscope/models/dp_layout.h"
#include "trainscope/models/layer_ops.h"
#include "trainscope/models/moe.h"
#include "trainscope/models/zero.h"
#include "fp8_ops.h"
#include "sp_backward.h"
#include "trainscope/workloads/memory.h"

namespace trainscope::models {
namespace {

using runconfig::Checkpointing;
using runconfig::PipelineSchedule;

// Calibrated on the CPU search space (tests/runtime/tuner_test.cpp): the gradients that flow
// between ops during backward and the fresh parameter gradients before they are accumulated, in
// units of one micro-batch's s·b·h activation and of the stage's largest weight.
constexpr double kTransientActivations = 6.0;  // × s·b·h elements
constexpr double kTransientWeights = 1.0;      // × the largest tensor's elements

workloads::OptimizerState stateOf(runconfig::OptimizerKind k) {
  switch (k) {
    case runconfig::OptimizerKind::AdamW: return workloads::OptimizerState::AdamW;
    case runconfig::OptimizerKind::Adafactor: return workloads::OptimizerState::Adafactor;
    case runconfig::OptimizerKind::Adam8bit: return workloads::OptimizerState::Adam8bit;
    case runconfig::OptimizerKind::SGD: return workloads::OptimizerState::SGD;
  }
  return workloads::OptimizerState::AdamW;
}

// A MoE layer's stacked expert tensors (E/ep, …). Under ep > 1 each is whole on every expert-dp
// replica, with its own fp32 main gradient and optimizer state on every rank whatever the ZeRO stage
// (GradSync's "unmanaged" tensors); with ep 1 they are sharded like any other. The tensors a rank
// holds are dp_layout.h's stageSlots, in the runtime's order.
bool isExpert(const Slot& x) { return x.name.find(".mlp.experts.") != std::string::npos; }
bool unmanaged(const Slot& x, const Plan& p) { return p.ep > 1 && isExpert(x); }
workloads::ParamTensor tensorOf(const Slot& x) { return {x.name, x.shape}; }
int64_t stateBytes(const Slot& x, workloads::OptimizerState state) {
  return workloads::optimizerStateBytes(tensorOf(x), state, false, 256);
}

// The op lists the per-layer activations are counted from (layer_ops.h): this runtime's layer under
// the plan's checkpointing, the same layer without any (the one a full recomputation rebuilds), and
// Megatron-LM's with 16-bit activations, as Korthikanti et al. count them
// (megatronLayerActivationBytes, their closed form, is what the list reproduces).
struct LayerLists {
  LayerOps runtime_layer, runtime_whole, megatron_layer;
  LayerOps runtime_moe, runtime_moe_whole, megatron_moe;  // the same for a MoE layer (moe.h)
  bool megatron_scores = false;  // Megatron-LM's attention unfused (the s×s scores kept)
};

LayerLists layerListsOf(const workloads::Workload& w, const Plan& p, Attention megatron_attention) {
  Plan whole = p, sixteen = p;
  whole.ckpt = Checkpointing::None;
  if (!sixteen.mixed()) sixteen.precision = runconfig::Precision::BF16;
  LayerLists lists;
  lists.megatron_scores = keepsScores(megatron_attention);
  lists.runtime_layer = layerOps(w, p, Framework::Trainscope);
  lists.runtime_whole = layerOps(w, whole, Framework::Trainscope);
  lists.megatron_layer = layerOps(w, sixteen, Framework::Megatron, megatron_attention);
  if (w.isMoe()) {
    lists.runtime_moe = layerOps(w, p, Framework::Trainscope, Attention::Default, true);
    lists.runtime_moe_whole = layerOps(w, whole, Framework::Trainscope, Attention::Default, true);
    lists.megatron_moe = layerOps(w, sixteen, Framework::Megatron, megatron_attention, true);
  }
  return lists;
}

// Parameters and gradients, held all step: `n` elements, the largest tensor `largest`.
void addWeights(StageMemory& sm, const Plan& p, int64_t n, int64_t largest) {
  const int64_t per_param = p.mixed() ? 6 : 4;  // fp32 (master) + the low-precision copy
  sm.params = per_param * n;
  sm.grads = 4 * n;  // fp32 main gradients only: 16-bit ones are added in and released (18 bytes)
  if (p.cpu_lanes > 1) {
    // Each lane's gradients (autograd's, fp32) live from its first backward to their sum; as the
    // lanes finish backward together, each holds the embedding's fresh dense gradient and the
    // head's dW (two of the largest tensor) before they are accumulated, and with more micro-
    // batches the head's saved dW of the next one as well.
    sm.lane_grads = p.cpu_lanes * 4 * n;
    sm.lane_fresh = p.cpu_lanes * 4 * largest * (sm.micro_batches > 1 ? 3 : 2);
  }
}

// ZeRO-1 as the runtime partitions (dp_layout.h): whole tensors, largest first, onto the least-loaded
// rank (the tied embedding under PP stays outside, its state on every rank). The most loaded rank's
// state, its flat buffers' padding and the step's sync buffers.
void addShardedOptimizer(StageMemory& sm, const std::vector<Slot>& slots, const Plan& p, workloads::OptimizerState state) {
  const DpLayout layout = dpLayout(slots, runconfig::ZeroStage::OptimizerStates, p.dp, bucketBytes(p.bucket_mb));
  const ShardGroup& g = layout.groups[0];
  int64_t outside_state = 0;
  for (size_t i = 0; i < slots.size(); ++i)
    if (layout.group_of[i] < 0) outside_state += stateBytes(slots[i], state);
  std::vector<int64_t> load(size_t(p.dp), 0), bytes(size_t(p.dp), 0);
  for (size_t k = 0; k < g.tensors.size(); ++k) {
    const size_t r = g.shard > 0 ? size_t(g.ranges[k].begin / g.shard) : 0;  // its owner
    load[r] += g.ranges[k].size();
    bytes[r] += stateBytes(slots[g.tensors[k]], state);
  }
  const size_t worst = size_t(std::max_element(load.begin(), load.end()) - load.begin());
  sm.optimizer = bytes[worst] + outside_state;
  sm.buffers += 2 * 4 * (g.padded - g.numel);  // flat master and grad buffers: d·S elements
  // The step's reduce-scatter output and all-gather input (S elements each, one at a time); Gloo
  // (CPU) reduce-scatters through an all-reduce of a copy of the whole flat buffer (d·S).
  sm.sync = 4 * g.shard * (p.cpu ? p.dp + 1 : 1);
}

// The optimizer state of the stage's tensors: all of it, or with DP one rank's share — under ZeRO-1
// the runtime's partition by tensor, under ZeRO-2/3 ⌈1/d⌉ of it (DeepSpeed's flat, element-wise split;
// for Adafactor and 8-bit Adam, whose state is not one number per element, the even share of it).
void addOptimizerState(StageMemory& sm, const std::vector<Slot>& slots, const Plan& p) {
  const auto state = stateOf(p.optimizer);
  if (zero::shardsGradients(p)) {
    int64_t all = 0, experts = 0;
    for (const auto& x : slots) (unmanaged(x, p) ? experts : all) += stateBytes(x, state);
    sm.optimizer = evenShard(all, zero::shardRanks(p)) + experts;  // hybrid: over the shard group
  } else if (runconfig::shardsOptimizer(p.zero) && p.dp > 1) {
    addShardedOptimizer(sm, slots, p, state);
  } else {
    for (const auto& x : slots) sm.optimizer += stateBytes(x, state);
  }
}

// ZeRO-2 and ZeRO-3 (docs/memory-model.md, "ZeRO-2 and ZeRO-3"), on a stage of `n` parameters whose
// layers have `layer` each.
//   ZeRO-2: each rank keeps its ⌈n/d⌉ share of the gradients (the runtime's bytes per parameter:
//           fp32 main + low-precision, 6, or 4 in fp32); during backward one reduce bucket of full
//           fp32 gradients, min(n, reduce_bucket_size) elements, waits for its reduce-scatter; after
//           the step the updated fp32 master shard is copied for the all-gather (4·⌈n/d⌉), as ZeRO-1.
//   ZeRO-3: as the runtime runs it (runtime/src/parallel/zero3.h; docs/memory-model.md, "ZeRO-3"):
//           the parameters too (⌈n/d⌉ of the fp32 master and the low-precision copy) and only the
//           fp32 gradient shard (4·⌈n/d⌉: 16-bit gradients live only until their layer is reduced).
//           Gathered in the compute dtype during a layer's backward: the stage's non-layer unit
//           (embeddings, ln_f), the layer and the one prefetched, e·(rest + 2·layer); and the
//           reduce-scatter of a layer's gradients as one flat fp32 buffer, with the previous layer's
//           still in flight: 4·2·layer, and on Gloo (CPU) the copy it all-reduces, 4·layer more;
//           the in-flight one's output shard, 4·⌈layer/d⌉.
//           No all-gather after the step.
//           A MoE's layers differ in size (`sizes`, the stage's in order; `saved`, what each keeps
//           for backward): the moment is taken at every layer's backward i, from the last, with
//           the layers after it freed: e·(rest + s_i + s_{i−1}) gathered, layer i's own fp32
//           gradients 4·s_i, and layer i+1's reduce-scatter in flight — its flat buffer 4·s_{i+1},
//           on Gloo the copy it reduces (ProcessGroupGloo's reduce-scatter clones its input when it
//           is issued and holds the clone until the work is waited for), 4·s_{i+1} more, and its
//           output shard (at the last layer, one of its own size, as for equal layers) — less
//           Σ_{j>i} saved_j; the worst such moment is the one kept (gathered, and grad_bucket net
//           of what was freed). Equal layers: the last one's, 4·s·(2 + Gloo's copy) + its shard.
//           (Until 2026-12-07 the Gloo copy was counted at layer i's size, 4·s_i·(1 + copy) + 4·s_{i+1}:
//           the same for equal layers, but a MoE layer's backward followed by a dense layer's reduce
//           then held a copy of the MoE layer that exists only after its own gradients are freed —
//           small-cpu-moe's ZeRO-3 row +4.6–5.0%, tests/runtime/moe_memory_test.cpp.)
void addZeroShards(StageMemory& sm, const Plan& p, int64_t n, const std::vector<int64_t>& sizes,
                   const std::vector<double>& saved) {
  if (!zero::shardsGradients(p)) return;
  const int64_t per_param = p.mixed() ? 6 : 4, share = evenShard(n, zero::shardRanks(p));
  sm.grads = 4 * share;  // fp32 main gradients only (18 bytes per parameter)
  sm.grad_bucket = 4 * int64_t(std::min(double(n), zero::kReduceBucketElements));
  sm.sync = 4 * share;
  if (!zero::shardsParameters(p)) return;
  sm.params = per_param * share;
  sm.sync = 0;
  int64_t layers = 0;
  for (int64_t x : sizes) layers += x;
  const int64_t rest = n - layers, L = int64_t(sizes.size());
  // The in-flight reduce-scatter's output shard (zero3.cpp's `out`, 4·⌈ℓ/d⌉) lives until the next
  // layer's gradients are in; it is the ~1/d part of the peak the buffers alone missed (d 2 → 4).
  double freed = 0, worst = -1e300;
  for (int64_t i = L - 1; i >= 0; --i) {
    const int64_t s = sizes[size_t(i)], prev = i > 0 ? sizes[size_t(i - 1)] : 0;
    const int64_t next = i < L - 1 ? sizes[size_t(i + 1)] : (L > 1 ? s : 0);
    const int64_t gathered = p.elementBytes() * (rest + s + prev);
    // One layer alone: its own reduce when issued (its buffer, Gloo's copy, its shard) is the moment.
    const int64_t copy = p.cpu ? 1 : 0, shards = zero::shardRanks(p);
    const int64_t buffers = L > 1 ? 4 * s + 4 * next * (1 + copy) + 4 * evenShard(next, shards)
                                  : 4 * s * (1 + copy) + 4 * evenShard(s, shards);
    if (double(gathered + buffers) - freed > worst) {
      worst = double(gathered + buffers) - freed;
      sm.gathered = gathered;
      sm.grad_bucket = buffers - int64_t(freed);
    }
    freed += saved[size_t(i)];
  }
}

// ZeRO-2's buckets as the runtime makes them (dp_layout.h): the managed tensors (not the tied
// embedding under PP, not the experts under ep > 1) in reverse flat() order — ln_f, the last layer's
// MLP back to the first layer's attention, wpe, wte — a new bucket whenever the next tensor would
// take it past the plan's bucket_mb of fp32 (so a larger tensor is a bucket of its own).
//   at_layer[i]:   the bytes of buckets alive when layer i's backward starts, all the gradients of
//                  ln_f and the layers after i produced (`produced` elements in that order);
//   at_experts[i]: the same at a MoE layer's experts' backward, its MLP's gradients past the router in.
// A bucket is alive from its first gradient (the one to come next counts: it is allocated as the
// layer's first gradient arrives) until the next one is launched; the last one launched is in flight:
// its buffer, on Gloo the copy it all-reduces, and its ⌈B/d⌉ output.
struct ZeroTwoWalk {
  std::vector<ShardGroup> buckets;  // in launch order
  std::vector<int64_t> at_layer, at_experts;
  int64_t alive(int64_t produced, const Plan& p) const {
    int64_t bytes = 0, start = 0, flight = 0;
    for (const ShardGroup& b : buckets) {
      const int64_t end = start + b.numel, full = 4 * b.padded;
      if (end <= produced) flight = full * (p.cpu ? 2 : 1) + 4 * b.shard;  // the later launch retires this
      else if (start <= produced) bytes += full;
      start = end;
    }
    return bytes + flight;
  }
  int64_t last() const { return buckets.back().numel; }  // its elements
};

ZeroTwoWalk zeroTwoWalk(const std::vector<Slot>& slots, const Plan& p, int64_t layers) {
  ZeroTwoWalk walk;
  walk.at_layer.assign(size_t(layers), 0);
  walk.at_experts.assign(size_t(layers), 0);
  if (!zero::shardsGradients(p) || zero::shardsParameters(p)) return walk;
  walk.buckets = dpLayout(slots, runconfig::ZeroStage::Gradients, p.dp, bucketBytes(p.bucket_mb)).groups;
  std::vector<int64_t> layer_start(size_t(layers), -1), expert_end(size_t(layers), -1);
  int64_t produced = 0;
  for (const ShardGroup& b : walk.buckets)
    for (size_t i : b.tensors) {
      const int64_t l = slots[i].layer;
      if (l >= 0 && layer_start[size_t(l)] < 0) layer_start[size_t(l)] = produced;
      produced += slots[i].numel();
      if (l >= 0 && slots[i].expert_mlp) expert_end[size_t(l)] = produced;
    }
  for (size_t i = 0; i < size_t(layers); ++i) {
    if (layer_start[i] >= 0) walk.at_layer[i] = walk.alive(layer_start[i], p);
    if (expert_end[i] >= 0) walk.at_experts[i] = walk.alive(expert_end[i], p);
  }
  return walk;
}

// ZeRO-2 as runtime/src/parallel/grad_sync.cpp runs it (docs/memory-model.md, "ZeRO-2 as run"): a
// rank keeps 4·⌈n/d⌉ bytes of gradients; the expert tensors under ep > 1 (`experts` elements) keep
// their whole fp32 gradient outside the buckets.
//   One bucket, B = min(n, max(25 MiB of fp32, the largest tensor)) elements: it fills through the
//   layers' backward, under all their activations (4·B), made at ln_f's gradient after the LM head's
//   backward: in place of the head's dX/dW, as the walk's first bucket (max(0, 4·B − head)).
//   Several: the walk's moments (ZeroTwoWalk), layer i's with the activations the layers after it
//   have freed (Σ_{j>i} saved_j, one micro-batch's). Its first bucket comes after the LM head's
//   backward, whose saved dX/dW are consumed by then (as at the experts' moment, moeBackward): the
//   walk's worst moment replaces the head at the layer-backward moment when it is larger.
// When backward ends the last bucket is reduce-scattered (its buffer, Gloo's copy, its output) while
// autograd still holds the embedding's two fresh gradients (its own and the tied head's): 2·e·embedding.
void addZeroTwo(StageMemory& sm, const Plan& p, int64_t n, int64_t largest, int64_t embedding, int64_t experts,
                const ZeroTwoWalk& walk, const std::vector<double>& saved) {
  if (!zero::shardsGradients(p) || zero::shardsParameters(p)) return;
  n -= experts;
  sm.grads = 4 * evenShard(n, p.dp) + 4 * experts;
  if (walk.buckets.size() < 2) {
    // A tensor larger than the bucket is a bucket of its own (the word embedding, often).
    const int64_t B = std::min<int64_t>(n, std::max<int64_t>(bucketBytes(p.bucket_mb) / 4, largest));
    const int64_t in_flight = (p.cpu ? 2 : 1) * B + evenShard(B, p.dp);
    // Made at the first gradient after the LM head's backward, as the walk's first bucket (below).
    sm.grad_bucket = std::max<int64_t>(0, 4 * (B + (n > B ? in_flight : 0)) - sm.head);
    sm.sync = 4 * in_flight + 2 * p.elementBytes() * embedding;
    return;
  }
  double freed = 0, worst = 0;
  for (size_t i = walk.at_layer.size(); i-- > 0;) {
    worst = std::max(worst, double(walk.at_layer[i]) - freed);
    freed += saved[i];
  }
  sm.grad_bucket = std::max<int64_t>(0, int64_t(worst) - sm.head);
  const int64_t B = walk.last();
  sm.sync = 4 * ((p.cpu ? 2 : 1) * evenShard(B, p.dp) * p.dp + evenShard(B, p.dp)) +
            2 * p.elementBytes() * embedding;
}

// Elements of each of the stage's layers, in order: ZeRO-3's units past unit 0 (dp_layout.h).
std::vector<int64_t> layerSizes(const std::vector<Slot>& slots, const Plan& p) {
  const DpLayout units = dpLayout(slots, runconfig::ZeroStage::Parameters, zero::shardRanks(p), bucketBytes(p.bucket_mb));
  std::vector<int64_t> sizes;
  for (size_t u = 1; u < units.groups.size(); ++u) sizes.push_back(units.groups[u].numel);
  return sizes;
}

// Micro-batches whose activations stage `st` holds at once.
int64_t inflightOf(const Plan& p, int64_t st, int64_t M) {
  int64_t inflight = 1;
  if (p.pp > 1)
    inflight = p.pp_schedule == PipelineSchedule::GPipe ? M : std::min<int64_t>(p.pp - st, M);
  return inflight;
}

// The factor on a stage's activations (layers × micro-batches in flight) under the interleaved
// schedule. Megatron-LM's schedule (runtime/src/parallel/pipeline.cpp runs it) holds at most
// u = min(W + 1, v·M) units (one model chunk, L/(p·v) layers, of one micro-batch) on stage s, with
// W = min(2(p − s − 1) + (v − 1)·p, v·M) warm-up forwards: u / (v · in-flight). On the first stage
// with M ≥ p that is 1 + (p − 1)/(p·v) (Narayanan et al. 2021, §3.5 / Korthikanti et al. 2022, §4.2.3);
// later stages hold more than their 1F1B p − s micro-batches (p 2, v 2: the last stage 1.5×).
double interleaveOf(const Plan& p, int64_t st, int64_t M, int64_t inflight) {
  if (p.virtual_stages <= 1 || p.pp == 1) return 1.0;
  const int64_t v = p.virtual_stages, units = v * M;
  const int64_t warmup = std::min<int64_t>(2 * (p.pp - st - 1) + (v - 1) * p.pp, units);
  return double(std::min<int64_t>(warmup + 1, units)) / double(v * inflight);
}

// What the stage's layers keep for their backward: the op list's `saved` (layer_ops.h), the same
// list the time model prices — this runtime's kernels (fused attention, no dropout;
// docs/memory-model.md) — for every micro-batch in flight, with its inputs and targets; and under
// full recomputation the one layer rebuilt at a time.
void addActivations(StageMemory& sm, const workloads::Workload& w, const Plan& p, const LayerLists& ops, double interleave,
                    int64_t moe_layers) {
  const double s = double(p.localSeq()), b = double(p.mbs);
  // Dense layers keep the dense list's bytes, MoE layers the MoE list's (their dispatch buffers).
  const double per_stage = ops.runtime_layer.saved * double(sm.layers - moe_layers) + ops.runtime_moe.saved * double(moe_layers);
  double act = per_stage * double(sm.inflight) * interleave;
  act += 2.0 * 8.0 * s * b * double(sm.inflight);  // the micro-batch's int64 inputs and targets
  sm.activations = int64_t(act);
  if (moe_layers > 0 && p.ckpt != Checkpointing::Full) sm.moe_dispatch = int64_t(moeDispatchBytes(w, p));  // moe.h
  if (p.ckpt != Checkpointing::Full) return;  // one layer's activations live while it is recomputed (16-bit ones)
  const double moe = moe_layers > 0 ? ops.runtime_moe_whole.saved - ops.runtime_moe_whole.saved_fp32 : 0.0;
  sm.recompute = int64_t(std::max(ops.runtime_whole.saved - ops.runtime_whole.saved_fp32, moe));
  if (moe_layers > 0) sm.moe_recompute = int64_t(moe + moeRecomputedCombineBytes(w, p));  // moe.h
}

// The moment a MoE layer's unbinds run backward (StageMemory::moeBackward): the layer-backward
// moment, less what the layers after it freed for that micro-batch (none under full recomputation,
// whose activations are the layers' inputs only) and what its expert chains freed, plus the
// expert-gradient stacks. The stage's last MoE layer's, which has freed least — but under ZeRO-2
// with several buckets the buckets alive differ layer by layer: the worst layer's. There the three
// stacks meet the buckets of the gradients before the layer's (walk.at_layer), and once the first
// stacked gradient is added into its bucket (a new one, maybe, and the previous launched) two stacks
// are left with the buckets of all its experts' gradients (walk.at_experts, less one stack; measured,
// docs/memory-model.md "ZeRO-2 as run").
void addExpertBackward(StageMemory& sm, const workloads::Workload& w, const Plan& p, const LayerLists& ops,
                       const ZeroTwoWalk& walk) {
  const auto ids = layerIdsOfStage(w.n_layer, p.pp, sm.stage, p.virtual_stages);
  const bool walked = walk.buckets.size() > 1;
  double after = 0, worst = -1e300;  // what the layers after i keep
  for (size_t i = ids.size(); i-- > 0;) {
    if (w.moeLayer(ids[i])) {
      const double freed = moeExpertChainSaved(w, p) + (p.ckpt != Checkpointing::Full ? after : 0.0);
      const int64_t stack =  // one (E/ep)·F·C stack of the compute dtype
          int64_t(double(w.n_experts / p.ep) * double(w.expertHidden()) * double(w.n_embd) * double(p.elementBytes()));
      const int64_t bucket = walked ? std::max(walk.at_layer[i], walk.at_experts[i] - stack) : sm.grad_bucket;
      if (double(bucket) - freed > worst) {
        worst = double(bucket) - freed;
        sm.moe_freed = int64_t(freed);
        sm.moe_bucket = bucket;
      }
      if (!walked) break;
    }
    after += w.moeLayer(ids[i]) ? ops.runtime_moe.saved : ops.runtime_layer.saved;
  }
  if (worst > -1e300) sm.expert_grads = int64_t(moeExpertGradientBuffers(w, p));
}

// The last stage's LM head: dX for the rows, dW per lane (each core lane runs its own head on its
// rows), and one chunk of its logits.
void addHead(StageMemory& sm, const workloads::Workload& w, const Plan& p) {
  const int64_t M = sm.micro_batches, h = w.n_embd, t = p.tp;
  const int64_t Vp = (w.vocab_size + t - 1) / t * t;
  const double s = double(p.localSeq()), b = double(p.mbs);
  const int64_t head_inflight = p.pp > 1 && p.pp_schedule == PipelineSchedule::GPipe ? M : 1;
  const double lanes = double(std::max<int64_t>(1, p.cpu_lanes));
  const double dx_dw = 4.0 * s * b * double(h) + lanes * 4.0 * double(Vp / t) * double(h);
  const double rows = lanes * std::min(s * b / lanes, std::max(128.0, double(8 << 20) / (4.0 * double(Vp / t))));
  sm.head = int64_t(dx_dw * double(head_inflight));
  // One chunk of fp32 logits; the general path (TP, 16-bit or GPU) also holds a same-sized
  // temporary (logsumexp's, or exp(logits − max) under TP), and 16-bit the logits before the cast.
  const bool one_pass = p.cpu && t == 1 && !p.mixed();
  sm.head_chunk = int64_t(rows * double(Vp / t) * (one_pass ? 4.0 : p.mixed() ? 10.0 : 8.0));
}

// Under PP each send's tensor (b·s'·h elements) lives until the send has completed, as
// runtime/src/parallel/pipeline.cpp waits for it:
//   activation sends (all stages but the last): the stage's output, which no layer of this stage
//     saves, is held as the root of its micro-batch's backward and freed when that gradient comes
//     back — one per micro-batch in flight (sm.inflight: M under GPipe, min(p − s, M) under 1F1B);
//   gradient sends (all stages but the first): at most one outstanding, from the backward that makes
//     it to the next micro-batch's receive; it is waited for before that micro-batch computes, so it
//     is never held at a forward's or a backward's peak — 0 here.
void addSendBuffers(StageMemory& sm, const workloads::Workload& w, const Plan& p, int64_t st) {
  const double s = double(p.localSeq()), b = double(p.mbs);
  const double s_local = p.sequence_parallel ? s / double(p.tp) : s;
  const double one = b * s_local * double(w.n_embd) * double(p.elementBytes());
  if (st < p.pp - 1) sm.buffers += int64_t(one * double(sm.inflight));
}

// Full recomputation of a dense SwiGLU layer: the rebuilt layer's saved tensors are its only
// activations, but its MLP's backward holds more than them. The down projection's input gradient
// (F/t wide) arrives at the SiLU-multiply, whose backward writes the gradients of both its factors
// (2F/t: d silu(gate) and d up) while that input gradient is still held; only the down projection's
// saved input (F/t) has been freed by then: 2·rows·F/t·e above the layer's saved bytes. (Measured on
// tiny-llama, F = 2.75h: the full-recomputation peaks were 5.0–5.3·s·b·h·e above the model without
// it, at mbs 4 and 8; docs/memory-model.md, "What trainscope keeps".) The GELU MLP's backward frees
// as much as it writes and needs no term. MoE layers' experts have their own moment (moeBackward).
int64_t recomputedSwigluBackward(const workloads::Workload& w, const Plan& p, int64_t st) {
  if (p.ckpt != Checkpointing::Full || w.mlp != workloads::Mlp::SwiGLU) return 0;
  if (moeLayersOfStage(w, p, st) >= layersOfStage(w.n_layer, p.pp, st)) return 0;  // no dense layer
  const double rows = double(p.localSeq()) * double(p.mbs), F = double(w.ffnHidden()) / double(p.tp);
  return int64_t(2.0 * rows * F * double(p.elementBytes()));
}

// The calibrated transients of a layer's backward (kTransientActivations, kTransientWeights).
int64_t transientAllowance(const workloads::Workload& w, const Plan& p, int64_t st, int64_t largest,
                           const LayerOps& dense_layer, double not_with_gemms) {
  const int64_t e = p.elementBytes(), t = p.tp;
  const double sbh = double(p.localSeq()) * double(p.mbs) * double(w.n_embd);
  // The fresh dense gradient of the embedding, made while its tied head's gradient is already in
  // .grad, is added to it: a second largest-sized tensor during backward. A pipeline stage holds
  // one end of the tie only, and autograd steals a fresh gradient into an empty .grad (the first
  // micro-batch) or adds it when that stage's activations are already freed (the embedding's
  // backward ends the stage's), so under PP it does not raise the layer-backward moment.
  const double fresh_weight = p.pp == 1 ? kTransientWeights * double(largest) : 0.0;
  // Under full recomputation the rebuilt layer's saved tensors are the layer's only activations and
  // autograd frees each op's as its backward ends, so the model adds no between-op gradients on top
  // of StageMemory::recompute. Measured (docs/memory-model.md, "What trainscope keeps") that is only
  // part of the story: at mbs 8 the layer moment is activations + head + recompute + 6·s·b·h with no
  // fresh embedding gradient (pp 1 and pp 2 both to 0.1%), but at mbs ≤ 4 the peak is a moment this
  // model lacks (~3 V·h fp32 tensors above the held state), which the fresh-gradient term stands in for.
  const double between_ops = p.ckpt == Checkpointing::Full ? 0.0 : kTransientActivations;
  double between = p.ckpt == Checkpointing::Full ? double(recomputedSwigluBackward(w, p, st))
                                                 : between_ops * sbh * double(e) / (p.sequence_parallel ? double(t) : 1.0);
  // FP8 on the CPU: the emulated FP8 GEMMs' backward (fp8CpuBackwardBytes) when it is the larger
  // moment (the LM head's dW, held to the end of backward, is in StageMemory::head all the same);
  // under SP the column-parallel GEMMs' gathered backward (spColumnBackwardBytes) likewise. Those
  // moments come before the layer's own gradients are reduced: `not_with_gemms` (ZeRO-3's flat
  // buffer of the layer, in grad_bucket) is not held beside them.
  const double gemms = std::max(fp8CpuBackwardBytes(dense_layer, p, sbh * double(e)),
                                spColumnBackwardBytes(dense_layer, p, double(w.n_embd)));
  between = std::max(between, gemms - not_with_gemms);
  return int64_t(between + fresh_weight * double(e) * double(std::max<int64_t>(1, p.cpu_lanes)));
}

// Context parallelism's ring (docs/memory-model.md, "Context parallelism"): during a layer's attention
// a rank holds the K and V block it computes with and the one arriving from its neighbour, each
// b·(s/cp)·kv·D elements (kv K/V heads of size D on a TP rank: the grouped heads travel; GPT:
// kv·D = h/t); backward passes dK and dV round the ring as well, double-buffered alike:
// 8·b·(s/cp)·kv·D·e at the backward's moment — 4 × ringBlockElements. What the layer saves is its
// own s/cp tokens only (the blocks are received again in backward), so the op list's `saved` needs no
// ring term.
int64_t ringBuffers(const workloads::Workload& w, const Plan& p) {
  if (p.cp <= 1) return 0;
  return int64_t(4.0 * ringBlockElements(w, p) * double(p.elementBytes()));
}

// Megatron-LM's theoretical memory for the decoders Korthikanti et al.'s Table 2 does not describe
// (RMSNorm, RoPE, SwiGLU, GQA, untied head): its theoretical_memory_usage.py (Megatron-LM
// megatron/training/, and Megatron-Bridge's training/utils/theoretical_memory_utils.py, the test
// oracle) writes Table 2 with the MLP's width F in place of 4h and the heads at full width:
// sbh(18 + 4F/h)/t per layer under SP and selective recomputation (docs/memory-model.md, "Megatron-LM
// on Llama-family decoders"). The other modes generalise Table 2 the same way (megatronLayerActivationBytes).
// On the first stage it adds the embedding's input tokens (8sb) and dropout mask (sbh) of every
// micro-batch in flight, and without PP the output layer's input and fp32 logits 4sb(h + V); ÷ t
// with SP, as the oracle does. The last stage of a pipeline keeps the fp32 logits 4sbV/t.
int64_t megatronTheoreticalActivations(const workloads::Workload& w, const Plan& p, const StageMemory& sm,
                                       double interleave, bool scores) {
  const double s = double(p.localSeq()), b = double(p.mbs), h = double(w.n_embd), t = double(p.tp);
  const double V = double((w.vocab_size + p.tp - 1) / p.tp * p.tp);
  const double layer = megatronLayerActivationBytes(s, b, h, double(w.n_head), t, p.sequence_parallel, p.ckpt,
                                                    double(w.ffnHidden()) / h, scores);
  const double split = p.sequence_parallel ? t : 1.0;
  double mega = layer * double(sm.layers) * double(sm.inflight) * interleave;
  if (sm.stage == 0) mega += (8.0 * s * b + s * b * h) * double(sm.inflight) * interleave / split;
  if (p.pp == 1) mega += 4.0 * s * b * h * (1.0 + V / h) / split;
  else if (sm.stage == p.pp - 1) mega += 4.0 * s * b * V / t;
  return int64_t(mega);
}

// Megatron-LM on the same plan (Korthikanti et al. 2022): 16-bit activations of the micro-batches
// in flight, and the last stage's fp32 logits.
int64_t megatronActivations(const workloads::Workload& w, const Plan& p, const StageMemory& sm,
                            const LayerLists& ops, double interleave) {
  const double s = double(p.localSeq()), b = double(p.mbs);
  const int64_t moe = moeLayersOfStage(w, p, sm.stage);
  if (!korthikantiShape(w) && !w.isMoe()) return megatronTheoreticalActivations(w, p, sm, interleave, ops.megatron_scores);
  double mega = (ops.megatron_layer.saved * double(sm.layers - moe) + ops.megatron_moe.saved * double(moe)) *
                double(sm.inflight) * interleave;
  if (sm.stage == p.pp - 1) mega += 4.0 * s * b * double(w.vocab_size) / double(p.tp);  // fp32 logits
  return int64_t(mega);
}

// One stage's bytes per rank: what it holds all step, and what each moment of the step adds.
StageMemory stageMemory(const workloads::Workload& w, const Plan& p, int64_t st, const LayerLists& ops) {
  StageMemory sm;
  sm.stage = st;
  sm.layers = layersOfStage(w.n_layer, p.pp, st);
  sm.micro_batches = p.ga();
  const std::vector<Slot> slots = stageSlots(w, p, st);
  // largest_dense: the embedding, whose fresh gradients the transients count (not an expert stack).
  int64_t n = 0, largest = 0, largest_dense = 0, experts = 0;
  for (const auto& x : slots) {
    n += x.numel();
    largest = std::max(largest, x.numel());
    if (!isExpert(x)) largest_dense = std::max(largest_dense, x.numel());
    if (unmanaged(x, p)) experts += x.numel();
  }
  addWeights(sm, p, n, largest);
  addOptimizerState(sm, slots, p);
  // ZeRO-3 gathers a layer at a time (and the stage's other parameters as one more unit).
  std::vector<double> saved;  // what each layer keeps for its backward, one micro-batch
  for (int64_t l : layerIdsOfStage(w.n_layer, p.pp, st, p.virtual_stages))
    saved.push_back(w.moeLayer(l) ? ops.runtime_moe.saved : ops.runtime_layer.saved);
  addZeroShards(sm, p, n, layerSizes(slots, p), saved);
  sm.inflight = inflightOf(p, st, sm.micro_batches);
  const double interleave = interleaveOf(p, st, sm.micro_batches, sm.inflight);
  addActivations(sm, w, p, ops, interleave, moeLayersOfStage(w, p, st));
  if (p.precision == runconfig::Precision::FP8) {  // 1 byte each, and as much again for the transpose
    const int64_t moe = moeLayersOfStage(w, p, st);
    sm.fp8_weights = int64_t(2.0 * (fp8WeightElements(ops.runtime_layer) * double(sm.layers - moe) +
                                    (moe > 0 ? fp8WeightElements(ops.runtime_moe) * double(moe) : 0.0)));
  }
  if (st == p.pp - 1) addHead(sm, w, p);
  // ZeRO-2 after the head: the walk's moments come after its backward.
  const ZeroTwoWalk walk = zeroTwoWalk(slots, p, int64_t(saved.size()));
  addZeroTwo(sm, p, n, largest, largest_dense, experts, walk, saved);
  if (p.pp > 1) addSendBuffers(sm, w, p, st);
  // ZeRO-3: grad_bucket holds a layer's own fp32 gradients (4·ℓ) beside the layer after it's reduce in
  // flight (its flat buffer, Gloo's copy, its shard: addZeroShards). At the layer's GEMMs' backward
  // the own flat buffer is not made yet (zero3.cpp's reduceScatter makes it when the last gradient is in).
  const std::vector<int64_t> sizes = zero::shardsParameters(p) ? layerSizes(slots, p) : std::vector<int64_t>{};
  const double own_reduce = sizes.empty() ? 0.0 : 4.0 * double(sizes.back());
  sm.allowance = transientAllowance(w, p, st, largest_dense, ops.runtime_whole, own_reduce);
  addExpertBackward(sm, w, p, ops, walk);
  sm.ring = ringBuffers(w, p);
  sm.megatron_activations = megatronActivations(w, p, sm, ops, interleave);
  return sm;
}

}  // namespace

double megatronLayerActivationBytes(double s, double b, double h, double a, double t, bool sp, Checkpointing ckpt,
                                    double ffn_over_h, bool scores) {
  // Table 2's 34 = 18 + 16 and 24 = 8 + 16, the 16 being the MLP's GeLU input and fc2 input of 4h
  // each: 4F/h for an MLP of width F (theoretical_memory_usage.py's 18 + 4F/h).
  const double sbh = s * b * h, score = scores ? 5.0 * a * s / (h * t) : 0.0, mlp = 4.0 * ffn_over_h;
  switch (ckpt) {
    case Checkpointing::Full: return sp ? 2 * sbh / t : 2 * sbh;
    case Checkpointing::Selective: return sp ? (18 + mlp) * sbh / t : sbh * (10 + (8 + mlp) / t);
    case Checkpointing::None: break;
  }
  return sp ? sbh * ((18 + mlp) / t + score) : sbh * (10 + (8 + mlp) / t + score);
}

bool korthikantiShape(const workloads::Workload& w) {
  return w.norm == workloads::Norm::LayerNorm && w.positions == workloads::Positions::Learned &&
         w.mlp == workloads::Mlp::Gelu && w.ffnHidden() == 4 * w.n_embd && w.kvHeads() == w.n_head &&
         w.headSize() * w.n_head == w.n_embd && w.tie_embeddings && w.qkv_bias && w.proj_bias && w.mlp_bias;
}

MemoryPrediction predictMemory(const workloads::Workload& w, const Plan& p, Attention megatron_attention) {
  MemoryPrediction m;
  const LayerLists ops = layerListsOf(w, p, megatron_attention);
  for (int64_t st = 0; st < p.pp; ++st) m.stages.push_back(stageMemory(w, p, st, ops));
  for (size_t i = 0; i < m.stages.size(); ++i)
    if (m.stages[i].total() > m.stages[size_t(m.worst_stage)].total()) m.worst_stage = int64_t(i);
  return m;
}

bool figuresCountable(const workloads::Workload& w, long double sequences, int64_t seq, int64_t devices) {
  const long double s = seq, h = w.n_embd, L = w.n_layer, V = w.vocab_size, a = w.n_head;
  const long double per_token = L * (64 * h + 8 * a * s) + 32 * (h + V) + 64;
  const long double params = (V + w.n_positions + 13 * L * h) * h;
  const long double bound = 4 * sequences * s * per_token + 64 * params * ((long double)devices + 2) + 16 * V * h * s;
  return bound < std::ldexp(1.0L, 60);
}

double megatronBytesPerParam(const Plan& p, bool distributed_optimizer) {
  // The distributed optimizer shards over the data-parallel ranks with context parallelism's
  // (megatron-core 0.19.2, optimizer/__init__.py: data_parallel_group=intra_dp_cp_group). Megatron's
  // own estimate (theoretical_memory_usage) divides by the data-parallel size alone: the same at cp 1.
  return distributed_optimizer ? 6.0 + 12.0 / double(p.dp * std::max<int64_t>(1, p.cp)) : 18.0;
}

double megatronBytesPerExpertParam(const Plan& p, bool distributed_optimizer) {
  // The experts' state shards over their expert-data-parallel group, world / (etp · ep · pp) ranks
  // (theoretical_memory_usage.py's expert_data_parallel_size; megatron-core's expert_data_parallel
  // group): dp · cp · tp / ep under the export's --expert-tensor-parallel-size 1 (export.cpp).
  const int64_t edp = std::max<int64_t>(1, p.dp * std::max<int64_t>(1, p.cp) * p.tp / std::max<int64_t>(1, p.ep));
  return distributed_optimizer ? 6.0 + 12.0 / double(edp) : 18.0;
}

namespace {

// Megatron-LM's attention of one layer: QKV (GQA's smaller K/V), the projection, their biases.
double megatronAttentionParams(const workloads::Workload& w) {
  const double h = double(w.n_embd), q = double(w.n_head * w.headSize()), kv = double(w.kvHeads() * w.headSize());
  return h * (q + 2.0 * kv) + q * h + (w.qkv_bias ? q + 2.0 * kv : 0.0) + (w.proj_bias ? h : 0.0);
}

// One MLP of width F as Megatron-LM builds it: 2 (GELU) or 3 (SwiGLU) matrices and their biases.
double megatronMlpParams(const workloads::Workload& w, int64_t width) {
  const double h = double(w.n_embd), F = double(width), mats = w.mlp == workloads::Mlp::SwiGLU ? 3.0 : 2.0;
  return mats * h * F + (w.mlp_bias ? (mats - 1.0) * F + h : 0.0);
}

}  // namespace

double megatronLayerParams(const workloads::Workload& w) {
  // A MoE workload's dense layers (Qwen2-MoE's mlp_only_layers) are this too; its MoE layers are
  // priced term by term in megatronLayersParamsOpt.
  const double h = double(w.n_embd);
  const double n = (w.norm == workloads::Norm::LayerNorm ? 4.0 : 2.0) * h;  // two norms
  return n + megatronAttentionParams(w) + megatronMlpParams(w, w.ffnHidden());  // GPT-2's shape: 12h² + 13h
}

int64_t megatronEmbeddingTables(const workloads::Workload& w, const Plan& p, int64_t stage) {
  const bool first = stage == 0, last = stage == p.pp - 1;
  return (first ? 1 : 0) + (last && !(first && w.tie_embeddings) ? 1 : 0);
}

int64_t megatronLayersParamsOpt(const workloads::Workload& w, const Plan& p, int64_t stage, bool distributed_optimizer) {
  const double bpp = megatronBytesPerParam(p, distributed_optimizer);
  if (!w.isMoe())
    return int64_t(bpp * megatronLayerParams(w) * double(layersOfStage(w.n_layer, p.pp, stage)) / double(p.tp));
  // theoretical_memory_usage.py's split of a MoE layer: the attention and the shared expert sharded
  // over TP, the norms, the router (E·h) and the shared expert's gate (h) replicated, the E routed
  // experts over EP (whole on each TP rank: --expert-tensor-parallel-size 1) at the expert data-parallel
  // group's bytes; a dense layer as megatronLayerParams, ÷ tp.
  const double h = double(w.n_embd), E = double(w.n_experts), t = double(p.tp);
  const double norms = (w.norm == workloads::Norm::LayerNorm ? 4.0 : 2.0) * h;
  const double sharded = megatronAttentionParams(w) + (w.shared_expert ? megatronMlpParams(w, w.sharedExpertHidden()) : 0.0);
  const double replicated = norms + E * h + (w.shared_expert && w.shared_expert_gate ? h : 0.0);
  const double experts = E * megatronMlpParams(w, w.expertHidden()) / double(std::max<int64_t>(1, p.ep));
  const double moe_layer = bpp * (sharded / t + replicated) + megatronBytesPerExpertParam(p, distributed_optimizer) * experts;
  const double dense_layer = bpp * megatronLayerParams(w) / t;
  double bytes = 0;
  for (const int64_t l : layerIdsOfStage(w.n_layer, p.pp, stage, p.virtual_stages))
    bytes += w.moeLayer(l) ? moe_layer : dense_layer;
  return int64_t(bytes);
}

int64_t megatronEmbeddingParamsOpt(const workloads::Workload& w, const Plan& p, double bytes_per_param) {
  return int64_t(bytes_per_param * double(w.vocab_size) * double(w.n_embd) / double(p.tp));
}

}  // namespace trainscope::models
