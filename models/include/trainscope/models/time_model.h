// trainscope/models/time_model.h — predicted step time of a plan on a cluster (docs/tuner.md). GPU
// clusters: every kernel of the layer's op list (layer_ops.h) priced by its shape — GEMMs with
// tile/wave quantisation and a roofline, memory-bound kernels at achieved bandwidth, each at least
// the device's kernel floor, the step bound by the longer of the device stream and the host's
// per-op dispatch; collectives with size-dependent bus bandwidth. CPU clusters, in the
// manner of Calculon (Isaev et al., SC'23): per layer, GEMM FLOPs at the cluster's size-dependent
// matrix efficiency, memory-bound work (LayerNorm, GELU, softmax, residual adds, the optimizer) at
// memory bandwidth, collectives by α–β with nccl-tests' per-collective factors (all-reduce 2(n−1)/n,
// all-gather and reduce-scatter (n−1)/n, send/recv 1) on the tier the group spans, the pipeline
// bubble per schedule ((p−1)/M, interleaved (p−1)/(vM)), the data-parallel all-reduce overlapped
// with backward by the share `dp_overlap` (measured where a run exists), and context parallelism's
// ring exchange where it outlasts the block of attention it overlaps (ringExposedSeconds).
#pragma once

#include <string>

#include "trainscope/models/cluster.h"
#include "trainscope/models/deepspeed_zero.h"
#include "trainscope/models/layer_ops.h"
#include "trainscope/models/plan.h"

namespace trainscope::models {

struct TimePrediction {
  double compute_s = 0;      // forward + backward GEMMs and memory-bound ops, all micro-batches
  double recompute_s = 0;    // activation recomputation
  double tp_comm_s = 0;      // exposed tensor-parallel collectives
  double dp_comm_s = 0;      // exposed data-parallel gradient reduction (ZeRO-2/3: and parameter gathers)
  double zero_gather_s = 0;  // of which ZeRO-3's exposed per-layer parameter all-gathers
  double pp_comm_s = 0;      // pipeline sends and receives
  double cp_comm_s = 0;      // context parallelism: the ring's K/V exchange not hidden behind attention
  double ep_comm_s = 0;      // expert parallelism: the MoE layers' all-to-all dispatch and combine
  double bubble_s = 0;       // pipeline bubble
  double optimizer_s = 0;
  double other_s = 0;        // measured only: clipping, data, zeroing (step − the rest)
  // CPU clusters under another framework's profile (an external runner's job: Hugging Face, DeepSpeed):
  // that framework's host work — its ops issued from Python, module hooks, per-micro-batch work — on
  // the same cores as the compute, so added to it (framework_profile.h; 0 for trainscope's runtime).
  double host_s = 0;
  double step_s = 0;         // the sum
  double tokens_per_s = 0;
  double model_flops = 0;    // per step, the whole model (Narayanan et al. 2021)
  double mfu = 0;            // model FLOP/s / (world × peak)
  bool measured = false;     // composed from measured layer costs (profile.h), not the analytic model
  // GPU clusters: what bounds a micro-batch's time on the slowest stage: "device" (the GPU's
  // kernels and collectives) or "host launch" (the framework's per-op dispatch on the CPU, when
  // the kernels are tiny).
  std::string bound;
};

// --framework megatron: Megatron-LM's communication overlaps, each its own flag (megatron/training/
// arguments.py; docs/framework-profiles.md, "Megatron-LM's overlaps"). The defaults are Megatron-LM's,
// which is what `export --format megatron` writes (it sets none of these flags).
struct MegatronOverlap {
  bool grad_reduce = false;   // --overlap-grad-reduce: the DP reduction in buckets during the last backward
  bool param_gather = false;  // --overlap-param-gather: the distributed optimizer's all-gather beside the
                              // next step's first forward
  bool tp_comm = false;       // --tp-comm-overlap: Transformer Engine's userbuffers, TP collectives beside GEMMs
  bool p2p = true;            // the interleaved schedule's overlap_p2p_comm (off: --no-overlap-p2p-communication)
};

struct TimeOptions {
  // Share of the DP gradient reduction hidden behind backward; < 0: estimated from the schedule
  // (GPU clusters: what is left after the last micro-batch's backward; CPU clusters: none).
  double dp_overlap = -1.0;
  Framework framework = Framework::Trainscope;  // GPU clusters: whose kernels (layer_ops.h); CPU: host_s
  Attention attention = Attention::Default;     // GPU clusters: the framework's attention, or forced
  // GPU clusters: bytes a gradient element is reduced in (predict --reduce-dtype: fp32 4, bf16/fp16 2);
  // 0: the framework profile's reduce_bytes (framework_profile.h).
  double reduce_bytes = 0;
  // --framework deepspeed: the user's ZeRO knobs (predict --deepspeed-config); from_config false: the
  // profile's buckets, prefetch and overlap.
  DeepSpeedZero deepspeed;
  MegatronOverlap megatron;  // read under Framework::Megatron only
};
// The options of framework `f`'s job for plan `p` as `export` writes it: Megatron-LM's with
// --overlap-grad-reduce over more than one gradient rank and --overlap-param-gather with the
// distributed optimizer (tuner/src/export.cpp), the interleaved sends overlapped (its default); the
// others' defaults. What tune ranks and the export's prediction price.
TimeOptions exportedJobOptions(Framework f, const Plan& p);
// The framework profile `o` prices on `c`: c.profile(o.framework) with the options' overrides put in
// (o.reduce_bytes; a user's DeepSpeed config with overlap_comm off: overlap_reduce 0).
FrameworkProfile profileFor(const Cluster& c, const TimeOptions& o);

TimePrediction predictTime(const workloads::Workload& w, const Plan& p, const Cluster& c, const TimeOptions& o = {});

// Of an unwindowed layer's attention-core products on a CPU cluster, the share layer `layer`'s core
// computes (this runtime's kernels; docs/time-model.md, "Sliding windows on the CPU"); 1 without a
// window. fp32 (cpu_ops::causalAttention): blocks of kCpuAttentionBlock query rows r0 … r0 + n − 1,
// each over the keys from its first row's window start max(0, r0 − W + 1) to its last row, so
// Σ n·(r0 + n − max(0, r0 − W + 1)) against W = 0's Σ n·(r0 + n). 16-bit (SDPA, the window an
// attn_mask with is_causal off): SDPA skips no block of a masked product, so no fewer than the
// unwindowed core's: 1 (the mask's bytes are priced beside it). Context parallelism (the ring skips
// the block pairs the window leaves out): windowKeys(W, s) / s, the continuum's share.
inline constexpr int64_t kCpuAttentionBlock = 32;  // runtime/src/cpu/cpu_ops.cpp kBlock
double cpuAttentionShare(const workloads::Workload& w, const Plan& p, int64_t layer);

// Context parallelism's ring, one layer's pass (docs/time-model.md, "Context parallelism"): cp − 1
// steps, each sending the K and V blocks of one rank (`step_s`) while the attention of the block in
// hand computes (`block_s`, the pass's attention ÷ cp); what shows is each step's excess:
// (cp − 1) · max(0, step_s − block_s).
double ringExposedSeconds(double cp, double step_s, double block_s);
// Bytes one ring step of a layer's forward sends: ringBlockElements (plan.h) in the compute dtype,
// 2·b·(s/cp)·kv·D·e (GPT: kv·D = h/t). Backward
// sends K, V and their gradients: twice.
double ringStepBytes(const workloads::Workload& w, const Plan& p);

}  // namespace trainscope::models
