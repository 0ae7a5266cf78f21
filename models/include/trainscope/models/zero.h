// trainscope/models/zero.h — what the memory and time models assume of ZeRO stages 2 and 3
// (Rajbhandari et al. 2020). The layouts the runtime runs (ZeRO-1's whole tensors, ZeRO-2's buckets,
// ZeRO-3's units) are dp_layout.h's; where a stage is priced as DeepSpeed implements it: flat
// buffers split element by element, ⌈n/d⌉ elements per rank, and DeepSpeed's default bucket sizes
// (deepspeed/runtime/zero/config.py). Formulas and sources: docs/memory-model.md and
// docs/time-model.md, "ZeRO-2 and ZeRO-3".
#pragma once

#include <cstdint>

#include "trainscope/models/dp_layout.h"
#include "trainscope/models/plan.h"

namespace trainscope::models::zero {

// Elements of full gradients gathered into one bucket before its reduce-scatter (reduce_bucket_size).
constexpr double kReduceBucketElements = 5e8;
// Elements all-gathered at a time after the step (allgather_bucket_size): sets message sizes only, and
// one collective of the whole shard is priced.
constexpr double kAllgatherBucketElements = 5e8;
// ZeRO-3: parameter elements fetched ahead of the module in use (stage3_prefetch_bucket_size).
constexpr double kPrefetchElements = 5e7;
// ZeRO-3: parameters under this many elements stay whole on every rank (stage3_param_persistence_threshold),
// and at most this many are gathered at once (stage3_max_live_parameters): DeepSpeed's defaults, which the
// exports write; the memory model's gathered term stays within them for GPT layers.
constexpr double kParamPersistenceElements = 1e5;
constexpr double kMaxLiveParameters = 1e9;

// The stage the plan prices: nothing is sharded over a single DP rank.
inline bool shardsGradients(const Plan& p) { return p.dp > 1 && p.zero >= runconfig::ZeroStage::Gradients; }
inline bool shardsParameters(const Plan& p) { return p.dp > 1 && p.zero >= runconfig::ZeroStage::Parameters; }
// The ranks a ZeRO shard is split over: the dp ranks, or under ZeRO-3 hybrid sharding (PyTorch FSDP's
// HYBRID_SHARD, DeepSpeed's MiCS) the N of a shard group; `replicas` groups hold the same shard and
// all-reduce its gradients after the last backward (runtime/src/parallel/zero3.h).
inline int64_t shardRanks(const Plan& p) {
  return shardsParameters(p) && p.zero_shard_size > 0 && p.zero_shard_size < p.dp ? p.zero_shard_size : p.dp;
}
inline int64_t replicas(const Plan& p) { return p.dp / shardRanks(p); }
// One rank's share of n elements split over d ranks: dp_layout.h's evenShard.

}  // namespace trainscope::models::zero
