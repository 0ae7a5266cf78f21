// trainscope/models/plan.h — one point of the configuration space: how a global batch of a GPT is
// split over a cluster (DP × CP × TP × PP ranks, micro-batches) and which memory/speed knobs are on.
// The tuner's models take a Plan; a Plan becomes a `trainscope run --config` TrainConfig.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/runconfig/config.h"
#include "trainscope/workloads/workload.h"

namespace trainscope::models {

// The layout (dp, cp, tp, pp, ep, virtual stages, ZeRO and its shard group, sequence parallelism,
// the pipeline schedule) is runconfig::Parallelism, the struct TrainConfig holds: planOf and the
// tuner's runConfigOf copy it whole.
struct Plan : runconfig::Parallelism {
  int64_t mbs = 1, gbs = 1, seq = 1024;
  runconfig::Checkpointing ckpt = runconfig::Checkpointing::None;
  runconfig::Precision precision = runconfig::Precision::BF16;
  runconfig::OptimizerKind optimizer = runconfig::OptimizerKind::AdamW;
  int64_t cpu_lanes = 1;       // CPU core lanes per rank (each keeps its own gradients until summed)
  bool cpu = false;            // CPU ranks (the LM head's one-pass fp32 path; no caching allocator)
  double bucket_mb = 25;       // --bucket-mb: DDP's all-reduce and ZeRO-2's reduce-scatter buckets (MiB of fp32)
  // MoE under ep > 1: the hottest EP rank's routed rows over balanced routing's (before capacity), the
  // routing load the memory and time models price (moe.h, moeRouting). 0: not known — the expected
  // hottest rank of uniformly random top-k routing (moeRandomRoutingLoad); 1: balanced; a run's
  // measured load from `predict --moe-load RUN.db` (rundb/moe_load.h, epRankLoad).
  double moe_load = 0;
  // Megatron-LM's --fp8-param-gather (predict --framework megatron --precision fp8 with the distributed
  // optimizer): parameters held in FP8, the 16-bit copy gone; Transformer Engine keeps only their
  // transposes beside them (megatronPeak) and the all-gather moves 1 byte a parameter.
  bool fp8_param_gather = false;

  int64_t world() const { return dp * cp * tp * pp; }
  int64_t gradientGroup() const { return dp * cp; }  // ranks that hold the same weights and sum gradients
  int64_t localSeq() const { return seq / cp; }      // tokens of a sequence on one CP rank
  int64_t ga() const { return gbs / (mbs * dp); }  // micro-batches per rank per step (M)
  bool mixed() const { return precision != runconfig::Precision::FP32; }
  int64_t elementBytes() const { return mixed() ? 2 : 4; }  // fp8: its activations are bf16
  // The dtype whose peak prices GEMMs that are not FP8 (and MFU): bf16 under fp8, else the precision.
  const char* computeDtype() const {
    return precision == runconfig::Precision::FP8 ? "bf16" : runconfig::toString(precision);
  }
  std::string describe() const;  // "dp2 tp1 pp1 mbs4 ga2 none fp32 adamw" (+ " cp2", " zero2", " interleaved v2")
};

// The plan a resolved run config trains (TrainConfig → Plan).
Plan planOf(const runconfig::TrainConfig& c);

// Checks a plan against the model; returns "" when valid, else the reason (heads % tp, …).
std::string whyInvalid(const workloads::Workload& w, const Plan& p);
std::string whyInvalidExperts(const workloads::Workload& w, const Plan& p);  // the ep/MoE part of it
std::string whyInvalidArchitecture(const workloads::Workload& w, const Plan& p);  // GQA under TP, window
// K/V heads one TP rank holds: n_kv_head/tp, or one (replicated tp/n_kv_head times, as Megatron-LM
// does) when tp > n_kv_head.
int64_t kvHeadsPerRank(const workloads::Workload& w, int64_t tp);
// Elements of one rank's K and V blocks as context parallelism's ring sends them: 2·b·(s/cp)·kv·D, kv
// the K/V heads on a TP rank (kvHeadsPerRank), D the head size (GPT: kv·D = h/t). The grouped K/V
// heads travel, not repeated per query head, as in Megatron-LM's ring (runtime/src/model/context_parallel.h).
double ringBlockElements(const workloads::Workload& w, const Plan& p);
// Layers of pipeline stage s (dp_layout.h's stageLayout, as the runtime splits them: the first L mod p
// stages get one more).
int64_t layersOfStage(int64_t n_layer, int64_t pp, int64_t stage);
// The layers stage `stage` holds (dp_layout.h's stageLayout, which StageSpec::of reads too): the
// balanced split of n_layer over pp·v chunks, chunk stage + k·pp for k < v. Which layers matters for a MoE (layer l is
// MoE when Workload::moeLayer(l)): interleaving gives stage 0 of small-cpu-moe both of its MoE layers.
std::vector<int64_t> layerIdsOfStage(int64_t n_layer, int64_t pp, int64_t stage, int64_t virtual_stages);

}  // namespace trainscope::models
