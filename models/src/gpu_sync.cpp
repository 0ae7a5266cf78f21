// gpu_sync.cpp — the gradients' synchronisation of a step on a GPU cluster (gpu_sync.h): the DP
// reduction and what of it the backward hides, the experts' reduction over dp/ep, ZeRO-2/3's
// reduce-scatters and gathers, and the tied embedding's reduction between the first and last stage.
// Split from gpu_time.cpp (derivation and sources in docs/tuner.md, "GPU time model").
#include "gpu_sync.h"

#include <algorithm>
#include <cmath>

#include "gpu_time.h"
#include "trainscope/models/dp_layout.h"
#include "trainscope/models/moe.h"
#include "trainscope/models/zero.h"

namespace trainscope::models::gpu {
namespace {

// The DDP buckets: the plan's --bucket-mb (25 MiB by default, PyTorch DDP's and the runtime's).
double ddpBucketBytes(const Plan& p) { return double(bucketBytes(p.bucket_mb)); }

// The network a stage's gradient group crosses: its tp·cp·dp-rank block (Megatron-LM's order: TP
// fastest, then CP, then DP), members tp apart — dpn/tp of them in each node.
NetworkTier dpTier(const Plan& p, const Cluster& c) {
  const int64_t group = p.gradientGroup();
  const bool spans = p.tp * group > c.devices_per_node;
  const double per_node = double(std::min(group, std::max<int64_t>(1, c.devices_per_node / p.tp)));
  return spans ? spanningTier(c, per_node) : c.intra_node;
}

// What the step waits for of a gradient reduction taking `full` seconds, issued bucket by bucket
// (`buckets`) during a backward of `backward_s`: Megatron-LM's published runs reduce after the
// backward (all of it); this runtime overlaps, so what shows is the larger of the last bucket and what
// the backward could not hide. `--dp-overlap` replaces the estimate with a measured share.
// `share`: the profile's overlap_reduce, the share of what could hide that does (0: issued after
// the backward; 1: all of it; between, as a trace measured it — calibrate --trace).
// The profile's overlap_reduce with the options' overrides (profileFor: 0 where a user's DeepSpeed
// config has overlap_comm off).
double overlapShare(const Cluster& c, const TimeOptions& o) { return profileFor(c, o).overlap_reduce; }

double exposedReduction(const TimeOptions& o, double share, double full, double buckets, double backward_s) {
  double hidden = 0;
  if (o.dp_overlap >= 0) {
    hidden = std::clamp(o.dp_overlap, 0.0, 1.0) * full;
  } else {
    hidden = std::clamp(share, 0.0, 1.0) * std::min(full - full / std::max(1.0, buckets), backward_s);
  }
  return full - hidden;
}

}  // namespace

// The DP all-reduce of `bytes` of gradients after the last micro-batch (ZeRO-1: reduce-scatter +
// all-gather, the same bus bytes), in the plan's buckets.
double dpSyncSeconds(const Plan& p, const Cluster& c, const TimeOptions& o, bool megatron, double bytes,
                     double backward_s) {
  const double dp = double(p.gradientGroup());
  const double full = collectiveSeconds(dpTier(p, c), bytes, dp, 2.0 * (dp - 1) / dp);
  return exposedReduction(o, overlapShare(c, o), full, std::ceil(bytes / ddpBucketBytes(p)), backward_s);
}

double megatronBucketParams(const Plan& p) {
  return std::max(4e7, 1e6 * double(p.gradientGroup()));
}

double megatronDpSyncSeconds(const Plan& p, const Cluster& c, const TimeOptions& o, double params, double grad_bytes,
                             double backward_s, double forward_s) {
  const double dp = double(p.gradientGroup());
  const double full = collectiveSeconds(dpTier(p, c), params * grad_bytes, dp, 2.0 * (dp - 1) / dp);
  const double buckets = std::ceil(params / megatronBucketParams(p));
  const double share = o.megatron.grad_reduce ? 1.0 : 0.0;  // --overlap-grad-reduce: issued bucket by bucket
  if (!runconfig::shardsOptimizer(p.zero)) return exposedReduction(o, share, full, buckets, backward_s);
  const double half = full / 2.0;  // the reduce-scatter's and the all-gather's bus bytes
  // --fp8-param-gather: the all-gather moves the FP8 parameters, 1 byte each, against the gradients'.
  const double all_gather = p.fp8_param_gather ? half / grad_bytes : half;
  const double gather = o.megatron.param_gather
                            ? all_gather / buckets + std::max(0.0, all_gather - all_gather / buckets - forward_s)
                            : all_gather;
  return exposedReduction(o, share, half, buckets, backward_s) + gather;
}

// A mixture of experts with ep > 1: stage s's routed-expert parameters (E/ep experts of 2CF + F + C
// per MoE layer), whose gradients are summed over their expert-dp group of dp/ep ranks rather than
// over dp (runtime/src/train/experts.h; Megatron-LM's expert-data-parallel group), outside ZeRO.
double stageExpertParams(const workloads::Workload& w, const Plan& p, int64_t s) {
  return p.ep > 1 ? moeStageExpertParameters(w, p, s) : 0.0;
}

// The expert gradients' all-reduce over dp/ep ranks, exposed by the DP reduction's rule.
double expertSyncSeconds(const Plan& p, const Cluster& c, const TimeOptions& o, bool megatron, double bytes,
                         double backward_s) {
  const double n = double(p.dp / p.ep);
  if (n <= 1 || bytes <= 0) return 0;
  const double full = collectiveSeconds(dpTier(p, c), bytes, n, 2.0 * (n - 1) / n);
  return exposedReduction(o, overlapShare(c, o), full, std::ceil(bytes / ddpBucketBytes(p)), backward_s);
}

// ZeRO-2 and ZeRO-3 over the DP group (docs/time-model.md, "ZeRO-2 and ZeRO-3"); `params` of the
// stage with the most, `grad_bytes` per gradient element.
//   Each micro-batch's gradients are reduce-scattered during its backward (a rank keeps only its
//   shard, so they cannot be accumulated whole; DeepSpeed's stage-2 hooks reduce at every
//   micro-step): M reduce-scatters, each exposed by the all-reduce's rule, in reduce_bucket_size
//   buckets. ZeRO-2 then all-gathers the updated fp32 master weights after the step, in view.
//   ZeRO-3 instead gathers every layer's parameters (compute dtype) before its forward and again
//   before its backward, each micro-batch: per pass the first gather shows (with it the stage's
//   embedding, head and final LayerNorm shards), every later one only where it outlasts the layer
//   it is prefetched behind (zeroGatherSeconds). The step waits for the slowest stage's.
double zeroSyncSeconds(TimePrediction& r, const workloads::Workload& w, const Plan& p, const Cluster& c,
                       const TimeOptions& o, bool megatron, const SyncStage& slow, double scale, double params,
                       double grad_bytes, double backward_s) {
  const NetworkTier tier = dpTier(p, c);
  // Hybrid sharding: the shards are over the N ranks of a shard group (dp·cp / replicas).
  const double R = double(zero::replicas(p)), dp = double(p.gradientGroup()) / R;
  const double M = double(p.ga()), e = double(p.elementBytes());
  const bool fsdp = o.framework == Framework::Fsdp;
  // FSDP's post-backward stream casts and pre-divides each unit's gradient before its reduce-scatter
  // (fsdpGradientBytes' side): on the same chain as the reduce-scatter.
  auto fsdpSide = [&](double n) {
    Op side;
    side.name = "fsdp gradient cast and predivide";
    side.bytes = fsdpGradientBytes(n, e, grad_bytes, dp).side_bytes;
    return fsdp && side.bytes > 0 ? memorySeconds(side, c) : 0.0;
  };
  const double rs = collectiveSeconds(tier, params * grad_bytes, dp, (dp - 1) / dp) + fsdpSide(params);
  const bool ds_config = o.framework == Framework::Deepspeed && o.deepspeed.from_config;
  const double buckets = std::ceil(params / (ds_config ? o.deepspeed.reduce_bucket_size : zero::kReduceBucketElements));
  double seconds = M * exposedReduction(o, overlapShare(c, o), rs, buckets, backward_s);
  if (!zero::shardsParameters(p)) return seconds + collectiveSeconds(tier, params * 4.0, dp, (dp - 1) / dp);
  const double layer = layerParams(w, p), others = stageParams(w, p, slow.index) - slow.layers * layer;
  const double gather = collectiveSeconds(tier, layer * e, dp, (dp - 1) / dp);
  const double first = collectiveSeconds(tier, (layer + others) * e, dp, (dp - 1) / dp);
  const FrameworkProfile& fp = c.profile(o.framework);
  if (o.framework == Framework::Fsdp || o.framework == Framework::Deepspeed) {
    // FSDP / DeepSpeed ZeRO-3 (zeroLayerSeconds): each layer's backward gathers the next layer's
    // parameters and reduce-scatters its own gradients over the same links, so both hide behind the
    // one layer's backward; the last layer's reduce-scatter shows. No prefetch: every gather shows.
    // FSDP's all-gathers and reduce-scatters run as NCCL rings (ringCollectiveSeconds: n − 1 hops).
    auto ag = [&](double bytes) {
      return fsdp ? ringCollectiveSeconds(tier, bytes, dp, (dp - 1) / dp) : collectiveSeconds(tier, bytes, dp, (dp - 1) / dp);
    };
    const double rs_layer = ag(layer * grad_bytes) + fsdpSide(layer);
    const double g = ag(layer * e), f1 = ag((layer + others) * e), sd = fp.overlap_slowdown;
    // DeepSpeed fetches stage3_prefetch_bucket_size elements ahead: that many layers' worth.
    const double depth = ds_config ? o.deepspeed.prefetch_bucket_size / std::max(layer, 1.0) : fp.prefetch_depth;
    r.zero_gather_s = M * (zeroLayerSeconds(f1, g, 0.0, slow.layer_fwd * scale, slow.layers, depth, sd) +
                           zeroLayerSeconds(f1, g, rs_layer, slow.layer_bwd * scale, slow.layers, depth, sd));
    seconds = M * rs_layer;  // the last layer's reduce-scatter, after its backward
  } else {
    r.zero_gather_s = M * (zeroGatherSeconds(first, gather, slow.layer_fwd * scale, slow.layers) +
                           zeroGatherSeconds(first, gather, slow.layer_bwd * scale, slow.layers));
  }
  // Hybrid sharding: after the last backward each fp32 gradient shard is all-reduced over the R
  // replicas holding it (runtime/src/parallel/zero3.h), nothing left to hide behind.
  const double replicas = collectiveSeconds(tier, params / dp * 4.0, R, 2.0 * (R - 1) / R);
  return seconds + r.zero_gather_s + replicas;
}

// Under PP the tied word embedding lives on the first and the last stage: after the backward their
// gradients are summed by an all-reduce between the two (Megatron-LM's embedding group; this
// runtime's reduceTiedAndPartial), between nodes once the stages are a node apart.
double tiedEmbeddingSeconds(const workloads::Workload& w, const Plan& p, const Cluster& c, double grad_bytes) {
  const double word = double((w.vocab_size + p.tp - 1) / p.tp) * double(w.n_embd);
  const bool apart = (p.pp - 1) * p.tp * p.cp * p.dp >= c.devices_per_node;
  return collectiveSeconds(apart ? c.inter_node : c.intra_node, word * grad_bytes, 2, 1.0);
}

}  // namespace trainscope::models::gpu
