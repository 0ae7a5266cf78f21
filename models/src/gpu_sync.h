// gpu_sync.h — the gradients' synchronisation of a GPU step (gpu_sync.cpp; internal to gpu_time.cpp's
// predict, whose TimePrediction fields they fill).
#pragma once

#include <cstdint>

#include "trainscope/models/time_model.h"

namespace trainscope::models::gpu {

// The slowest stage as ZeRO-3's gathers see it: its index, its layers, and one layer's device seconds
// forward and backward (recomputation and TP collectives included), what the prefetched gathers hide behind.
struct SyncStage {
  int64_t index = 0;
  double layers = 0, layer_fwd = 0, layer_bwd = 0;
};

// The DP all-reduce of `bytes` of gradients after the last micro-batch, what of it the step waits for.
double dpSyncSeconds(const Plan& p, const Cluster& c, const TimeOptions& o, bool megatron, double bytes,
                     double backward_s);
// Megatron-LM with --overlap-grad-reduce (and --overlap-param-gather): the DP reduction of `params`
// gradients of `grad_bytes` in Megatron's DDP buckets (max(4e7, 1e6·dp) parameters each:
// megatron/core/distributed/distributed_data_parallel.py) issued during the last micro-batch's backward
// (`backward_s`); with the distributed optimizer its reduce-scatter there and its all-gather of the
// updated parameters after the step, or, with --overlap-param-gather, beside the next step's first
// forward (`forward_s`) bucket by bucket — the first bucket's shows. Half the all-reduce's bus bytes
// each, as dpSyncSeconds prices ZeRO-1.
double megatronBucketParams(const Plan& p);
double megatronDpSyncSeconds(const Plan& p, const Cluster& c, const TimeOptions& o, double params, double grad_bytes,
                             double backward_s, double forward_s);
// Stage s's routed-expert parameters under ep > 1 (0 otherwise).
double stageExpertParams(const workloads::Workload& w, const Plan& p, int64_t s);
// The expert gradients' all-reduce over dp/ep ranks, exposed by the DP reduction's rule.
double expertSyncSeconds(const Plan& p, const Cluster& c, const TimeOptions& o, bool megatron, double bytes,
                         double backward_s);
// ZeRO-2 and ZeRO-3's reduce-scatters and gathers over the DP group (sets r.zero_gather_s).
double zeroSyncSeconds(TimePrediction& r, const workloads::Workload& w, const Plan& p, const Cluster& c,
                       const TimeOptions& o, bool megatron, const SyncStage& slow, double scale, double params,
                       double grad_bytes, double backward_s);
// Under PP the tied word embedding's gradient all-reduce between the first and the last stage.
double tiedEmbeddingSeconds(const workloads::Workload& w, const Plan& p, const Cluster& c, double grad_bytes);

}  // namespace trainscope::models::gpu
