// predict_flags.h — what `trainscope predict` takes: the parallel layout (runconfig's Parallelism,
// from its one field list, as `run` takes it) and predict's own fields (the cluster, the batch, the
// framework priced). One list of both, visitPredictFields, makes predict's flags and the keys of a
// `predict --batch` line (predict_flags.cpp), so a line takes every flag predict has.
// No CLI11 and no LibTorch here: the core tests walk the list.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/runconfig/fields.h"

namespace trainscope::apps {

struct PredictFlags : runconfig::Parallelism {  // tp, pp, cp, ep, virtual stages, sp, zero, shard group, schedule
  std::string workload = "gpt2-124m", cluster = "h100-80gb-x8";
  int64_t nodes = 0, gpus = 0;  // 0: the cluster file's
  int64_t mbs = 1, gbs = 0, seq = 0;  // gbs 0: mbs x dp; seq 0: the workload's n_positions, at most 2048
  std::string ckpt = "none", precision = "bf16", optimizer = "adamw";
  int64_t cpu_lanes = 1;
  double dp_overlap = -1;  // < 0: estimated from the schedule
  double bucket_mb = 25;   // gradient buckets (MiB of fp32), as run's --bucket-mb
  std::vector<std::string> profiles;
  std::string framework = "trainscope", attention = "default";
  std::string reduce_dtype = "default";  // default (the framework profile's) | fp32 | bf16 | fp16
  std::string deepspeed_config;          // --framework deepspeed: the user's ds_config.json ("": none)
  std::string moe_load;                  // a MoE run's database: its measured routing load ("": random routing's)
  bool distributed_optimizer = false, allow_tp_across_nodes = false;
  // --framework megatron: Megatron-LM's communication overlaps (tuner::MegatronOverlap).
  bool overlap_grad_reduce = false, overlap_param_gather = false, tp_comm_overlap = false, no_overlap_p2p_comm = false;
  bool fp8_param_gather = false;  // Megatron-LM's --fp8-param-gather (Plan::fp8_param_gather)
  // The command's modes, not part of a configuration (not in the list, not batch keys).
  std::string batch;
  bool json = false;
  std::string storage_gbps;  // --storage-gbps G: price a `run --save` checkpoint's write ("": not asked)
};

// The most a count may be, by kind: products of them (tp x pp x cp, mbs x dp) stay far inside
// int64, so a huge value is refused naming its flag instead of wrapping around.
constexpr int64_t kMostSize = int64_t(1) << 40;   // mbs, seq
constexpr int64_t kMostBatch = int64_t(1) << 50;  // gbs
// The largest value of the count whose JSON key is `key` (the degrees: runconfig::kMostDegree).
inline int64_t mostOf(const std::string& key) {
  return key == "gbs" ? kMostBatch : key == "mbs" || key == "seq" ? kMostSize : runconfig::kMostDegree;
}
// The least: 1 for a count, 0 for the shard group (0: every dp rank).
inline int64_t leastOf(const std::string& key) { return key == "zero_shard_size" ? 0 : 1; }

// Calls v(field, &PredictFlags::member) for every field of a configuration predict prices: the
// layout's (runconfig::visitParallelism) and predict's own, in the order of `predict --help`.
// Member types: std::string, int64_t, double (dp_overlap a share from 0 to 1, bucket_mb MiB above 0), bool, std::vector<std::string>
// (a comma list), runconfig::ZeroStage and runconfig::PipelineSchedule.
template <class V>
void visitPredictFields(V&& v) {
  using P = PredictFlags;
  using F = runconfig::Field;
  constexpr unsigned kShow = F::kShowDefault;
  v(F{"workload", "--workload", "workload name or JSON path", kShow}, &P::workload);
  v(F{"cluster", "--cluster", "cluster preset or JSON file", kShow}, &P::cluster);
  v(F{"nodes", "--nodes", "nodes (default: the cluster file's)"}, &P::nodes);
  v(F{"gpus", "--gpus", "devices in all (default: nodes x devices per node)"}, &P::gpus);
  runconfig::visitParallelism(runconfig::AsMemberOf<P, V>{v});
  v(F{"mbs", "--mbs", "micro-batch size in sequences", kShow}, &P::mbs);
  v(F{"gbs", "--gbs", "global batch in sequences (default: mbs x dp)"}, &P::gbs);
  v(F{"seq", "--seq", "sequence length (default: the workload's n_positions, at most 2048)"}, &P::seq);
  v(F{"ckpt", "--ckpt", "none|selective|full", kShow}, &P::ckpt);
  v(F{"precision", "--precision", "fp32|bf16|fp16|fp8", kShow}, &P::precision);
  v(F{"optimizer", "--optimizer", "adamw|adafactor|adam8bit|sgd", kShow}, &P::optimizer);
  v(F{"cpu_lanes", "--cpu-lanes", "CPU clusters: core lanes per rank", kShow}, &P::cpu_lanes);
  v(F{"dp_overlap", "--dp-overlap",
      "share of the DP all-reduce hidden behind backward, 0 to 1 (default: estimated from the schedule)"},
    &P::dp_overlap);
  v(F{"bucket_mb", "--bucket-mb", "gradient buckets, MiB of fp32, as run's", kShow}, &P::bucket_mb);
  v(F{"profile", "--profile",
      "traced run databases (trainscope run --trace) of this cluster: the step time is composed from their measured "
      "layer costs when one has this plan's layer shape"},
    &P::profiles);
  v(F{"framework", "--framework",
      "whose kernels, host costs and collectives: trainscope (this runtime), megatron (Megatron-LM: Transformer "
      "Engine's fused attention as it runs today, 18 bytes per parameter), fsdp (PyTorch FSDP) or deepspeed (DeepSpeed "
      "ZeRO); "
      "profiles' constants in the cluster file's \"frameworks\"",
      kShow},
    &P::framework);
  v(F{"attention", "--attention",
      "GPU clusters: how attention runs, in the time and in Megatron-LM's memory column — default (every framework's "
      "own: a fused flash kernel; Megatron-LM's Transformer Engine with --attention-backend auto), unfused (s×s "
      "scores materialised, as Megatron-LM's 2021-2022 published runs) or flash (one fused kernel)",
      kShow},
    &P::attention);
  v(F{"reduce_dtype", "--reduce-dtype",
      "GPU clusters: the dtype data-parallel gradients are reduced in (FSDP's MixedPrecision reduce_dtype, DeepSpeed's "
      "communication_data_type, Megatron-LM's main_grad) — default (the framework profile's reduce_bytes: fsdp fp32, "
      "deepspeed the model's, this runtime fp32), fp32, bf16 or fp16",
      kShow},
    &P::reduce_dtype);
  v(F{"deepspeed_config", "--deepspeed-config",
      "--framework deepspeed: the job's DeepSpeed config (ds_config.json); its zero_optimization buckets, prefetch and "
      "overlap_comm and its communication_data_type are priced (default: the profile's, as export writes them); its stage, "
      "batch keys, 16-bit mode, optimizer and pipeline stages must be the plan's, and what is not priced (offload, ZeRO++, "
      "…) is refused by key"},
    &P::deepspeed_config);
  v(F{"moe_load", "--moe-load",
      "MoE under ep > 1: a run database (trainscope run --out) of this workload whose recorded expert load "
      "(expert_load rows) gives the hottest EP rank's routed rows, priced in memory and time (default: the expected "
      "hottest rank of random top-k routing)"},
    &P::moe_load);
  v(F{"use_distributed_optimizer", "--use-distributed-optimizer",
      "--framework megatron: the optimizer state sharded over DP x CP (6 + 12/(dp x cp) bytes per parameter); the same job as --zero 1"},
    &P::distributed_optimizer);
  v(F{"overlap_grad_reduce", "--overlap-grad-reduce",
      "--framework megatron: Megatron-LM's flag — the DP gradient reduction in its DDP buckets during the last "
      "micro-batch's backward"},
    &P::overlap_grad_reduce);
  v(F{"overlap_param_gather", "--overlap-param-gather",
      "--framework megatron with the distributed optimizer and --overlap-grad-reduce: Megatron-LM's flag — the "
      "parameters' all-gather beside the next step's first forward"},
    &P::overlap_param_gather);
  v(F{"tp_comm_overlap", "--tp-comm-overlap",
      "--framework megatron with --sequence-parallel: Megatron-LM's flag — TP collectives beside the GEMMs "
      "(Transformer Engine's userbuffers)"},
    &P::tp_comm_overlap);
  v(F{"no_overlap_p2p_comm", "--no-overlap-p2p-comm",
      "--framework megatron, interleaved schedule: blocking pipeline sends (Megatron-LM's "
      "--no-overlap-p2p-communication; its default overlaps them with the next chunk)"},
    &P::no_overlap_p2p_comm);
  v(F{"fp8_param_gather", "--fp8-param-gather",
      "--framework megatron, --precision fp8, the distributed optimizer: Megatron-LM's flag — parameters held and "
      "all-gathered in FP8 (no 16-bit copy beside Transformer Engine's FP8 weights)"},
    &P::fp8_param_gather);
  v(F{"allow_tp_across_nodes", "--allow-tp-across-nodes",
      "accept a TP group larger than a node (priced on the inter-node tier)"},
    &P::allow_tp_across_nodes);
}

// A `predict --batch` line: `defaults` with the line's keys (the list's JSON keys) set, each checked
// as its flag is. Throws UserError naming "--batch line N: KEY".
PredictFlags flagsFromJson(const std::string& text, const PredictFlags& defaults, int64_t line);
// The keys a --batch line takes: the list's JSON keys, then storage_gbps.
std::vector<std::string> predictKeys();
// Why `text` is not one JSON object, in words: "is not valid JSON (…)" with the parser's place, NaN and
// Infinity named (Python's json.dumps writes them; JSON has no such number), or "is not a JSON object".
std::string notJsonObjectProblem(const std::string& text);
// The fix for an unknown key: the known key it resembles (one or two edits: common/near_key.h), else
// the list of `known`.
std::string unknownKeyFix(const std::string& key, const std::vector<std::string>& known);

}  // namespace trainscope::apps
