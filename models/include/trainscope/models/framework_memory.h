// trainscope/models/framework_memory.h — the model state and the framework's own buffers per rank
// under PyTorch FSDP and DeepSpeed ZeRO (`predict --framework fsdp|deepspeed`; docs/memory-model.md,
// "FSDP and DeepSpeed"). The activations are the op list's (memory_model.h); what differs between
// frameworks, and what this prices, is what each keeps of the weights, gradients and optimizer state,
// and the buffers it allocates to communicate them.
//
// DeepSpeed (0.19.8, mixed precision with fp32 master weights and Adam; N = the dp ranks, P = the
// parameters a rank's model holds):
//   ZeRO-1  16-bit weights 2P and gradients 2P, fp32 master 4P/N, Adam 8P/N, fp32 gradient partition 4P/N
//   ZeRO-2  16-bit weights 2P, 16-bit gradient partition 2P/N, fp32 gradient partition, master, Adam 16P/N
//           (stage_1_and_2.py's estimate_zero2_model_states_mem_needs: 2P + 18P/N)
//   ZeRO-3  every state partitioned, 20P/N (stage3.py's estimate_zero3_model_states_mem_needs says
//           18P/N: it leaves out the 16-bit gradient partition, grad_partitions_flat_buffer), plus the
//           largest module's 16-bit weight and gradient gathered, 4·L (the estimator's), plus the persistent
//           parameters (fewer than param_persistence_threshold elements) kept whole: 2 bytes each.
//   buffers ZeRO-1/2 with contiguous_gradients: reduce_bucket_size elements of the gradient dtype, twice
//           with overlap_comm (stage_1_and_2.py setup_buckets); ZeRO-3: one such bucket (stage3.py's
//           IPG buffer) and, in forward and backward, the gathered parameters: the module in use
//           plus stage3_prefetch_bucket_size elements prefetched, at most stage3_max_live_parameters.
// FSDP (FULL_SHARD, one unit per transformer block plus the root; mixed precision bf16 parameters):
//   the sharded fp32 flat parameters 4P/N, fp32 gradient shards 4P/N, Adam 8P/N; in forward and
//   backward the unsharded bf16 flat parameters of the unit in use and the one prefetched (BACKWARD_PRE,
//   limit_all_gathers: two in flight), with their low-precision shard copies; in backward the unit's
//   unsharded gradient in the reduce dtype (fp32 by default in the profile) before its reduce-scatter.
//   SHARD_GRAD_OP (zero 2) keeps the unsharded bf16 parameters from forward to backward: 2P.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/models/cluster.h"
#include "trainscope/models/deepspeed_zero.h"
#include "trainscope/models/framework_profile.h"
#include "trainscope/models/memory_model.h"
#include "trainscope/models/plan.h"
#include "trainscope/workloads/workload.h"

namespace trainscope::models {

struct FrameworkMemoryItem {
  std::string name;
  int64_t bytes = 0;
  std::string when;    // "step" (held all step) or "forward/backward", "backward" (transient)
  std::string source;  // the formula and where it comes from
};

struct FrameworkMemory {
  std::string framework;  // "deepspeed" or "fsdp"
  int64_t params = 0, grads = 0, optimizer = 0;  // model states per rank
  int64_t buffers = 0;                           // framework buffers held the whole step
  int64_t transient = 0;                         // the largest set of transient buffers at once
  std::vector<FrameworkMemoryItem> items;
  int64_t modelStates() const { return params + grads + optimizer; }
  int64_t total() const { return modelStates() + buffers + transient; }
};

// Parameters the framework shards: a (tp, pp) rank's share of the whole model (P), the largest
// module's (a Linear's weight and bias, or an embedding) and a transformer block's.
struct ParamCounts {
  double total = 0, largest_module = 0, block = 0, root = 0, persistent = 0;
};
ParamCounts paramCounts(const workloads::Workload& w, const Plan& p, double persistence_threshold);

// DeepSpeed ZeRO-0..3 on plan `p` (stage: p.zero); `fsdp` for FSDP (FULL_SHARD for zero 3,
// SHARD_GRAD_OP for zero 2, NO_SHARD otherwise), its reduce dtype from the profile's reduce_bytes.
FrameworkMemory deepspeedMemory(const workloads::Workload& w, const Plan& p, const DeepSpeedZero& z = {});
FrameworkMemory fsdpMemory(const workloads::Workload& w, const Plan& p, const FrameworkProfile& profile);
// The one for `f` (Fsdp or Deepspeed); false for the others (this runtime's and Megatron-LM's memory
// are memory_model.h's columns: megatronPeak).
// `z`: DeepSpeed's knobs (predict --deepspeed-config), its defaults otherwise.
bool frameworkMemory(const workloads::Workload& w, const Plan& p, Framework f, const FrameworkProfile& profile,
                     FrameworkMemory& out, const DeepSpeedZero& z = {});

// The worst stage's activations and head of `m` (the op list's: the same kernels under FSDP and DeepSpeed).
int64_t opListActivations(const MemoryPrediction& m);

// Megatron-LM's own peak per rank on a GPU, its worst pipeline stage: megatron-core's theoretical
// memory (theoretical_memory_usage.py) — the stage's layers' weights and optimizer state at
// megatronBytesPerParam (18, or 6 + 12/d with --use-distributed-optimizer), the embedding and output
// tables it holds, Korthikanti et al.'s activations with the schedule's micro-batches in flight
// (StageMemory::megatron_activations, logits included) — plus, under --precision fp8, Transformer
// Engine's FP8 weight workspaces (each FP8 GEMM's E4M3 weight and its transpose, 2 bytes an element,
// cached across the step's micro-batches: StageMemory::fp8_weights; with --fp8-param-gather
// (Plan::fp8_param_gather) the FP8 parameter and its transpose replace the 16-bit copy: nothing added).
struct MegatronPeak {
  int64_t bytes = 0, stage = 0;
  int64_t params_opt = 0, embedding_opt = 0, activations = 0, fp8_weights = 0;  // that stage's parts
};
MegatronPeak megatronPeak(const workloads::Workload& w, const Plan& p, const MemoryPrediction& m);

// The peak a rank of framework `f` reaches on a GPU: FSDP's and DeepSpeed's model states, buffers and
// transients plus the op list's activations (`m`); Megatron-LM's megatronPeak. 0 for this runtime
// (m.peak() is its own) or on a CPU cluster, where this runtime's model holds: a CPU trial runs fp32 with no 16-bit
// copies, and the buffers DeepSpeed and FSDP allocate with torch.empty take no pages until written,
// so the framework's GPU figures would refuse CPU trials that fit (the CPU tune's measured peaks are
// what memory_model.h is checked against).
int64_t frameworkPeak(const workloads::Workload& w, const Plan& p, const Cluster& c, Framework f,
                      const MemoryPrediction& m, const DeepSpeedZero& z = {});

}  // namespace trainscope::models
