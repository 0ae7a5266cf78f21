// gpu_time.h — the GPU branch of predictTime (internal to the tuner; see time_model.h).
#pragma once

#include <vector>

#include "trainscope/models/time_model.h"

namespace trainscope::models::gpu {

TimePrediction predict(const workloads::Workload& w, const Plan& p, const Cluster& c, const TimeOptions& o);

// The pieces, exposed for the unit tests that check each against a hand computation.
double gemmSeconds(const Op& g, const Cluster& c, double peak, double element_bytes);
double memorySeconds(const Op& m, const Cluster& c);
// A collective over `n` ranks of `bytes` (the buffer the bus-bandwidth rule is stated for), with
// nccl-tests' bus factor (all-reduce 2(n−1)/n, all-gather and reduce-scatter (n−1)/n, send 1).
double collectiveSeconds(const NetworkTier& tier, double bytes, double n, double factor);
// The network a collective crosses when its ranks sit on several nodes, `per_node` to a node: NCCL's
// rings leave each node through the NICs of all its member ranks (one port per GPU in the presets)
// and carry the rest over NVLink, so the bus bandwidth is min(per_node × the port's, NVLink's), at
// the inter-node latency and message-size curve. One rank per node: the port's rate.
NetworkTier spanningTier(const Cluster& c, double per_node);
// The parameter tensors (their element counts) one (tp, pp) rank of pipeline stage `s` holds: its
// layers' weights and biases (sharded by TP, LayerNorms whole), the first stage's word (V/t × h) and
// position embeddings, the last stage's final LayerNorm and, under PP, its copy of the tied word
// embedding; and their sum.
std::vector<double> stageTensors(const workloads::Workload& w, const Plan& p, int64_t s);
double stageParams(const workloads::Workload& w, const Plan& p, int64_t s);
// The pipeline's fill and drain under 1F1B with stages of unequal micro-batch times `stage_s` (the
// first holds the embedding, the last the head): the first micro-batch's forward reaches the slowest
// stage through the ones before it, which then runs M micro-batches back to back, and the last
// backward returns through the ones before it; the stages after it add their forward and backward
// on the way out and back. The step is M·t_slowest + Σ_{s ≠ slowest} t_s: this sum, which is
// (p − 1)·t when the stages are equal (Narayanan et al. 2021 §2.2's bubble).
double pipelineFillSeconds(const std::vector<double>& stage_s, int64_t slowest);
// One transformer layer's parameters on a TP rank (12h²/t + 7h/t + 6h).
double layerParams(const workloads::Workload& w, const Plan& p);
// ZeRO-3's parameter all-gathers of one pass (forward or backward) over `layers` layers, each
// prefetched while the layer before it computes: the first gather (`first_s`) shows whole, every later
// one (`gather_s`) only where it outlasts the `compute_s` of the layer it hides behind.
double zeroGatherSeconds(double first_s, double gather_s, double compute_s, double layers);
// FSDP's and DeepSpeed's ZeRO-3, one pass: each later layer's gather (and, backward, the layer's
// gradient reduce-scatter, `reduce_s`, on the same links) beside that layer's compute: first_s +
// (layers − 1) · max(0, gather_s + reduce_s − compute_s); with no prefetch (depth 0) all of it; with
// part of a layer prefetched (0 < depth < 1: DeepSpeed's stage3_prefetch_bucket_size under a layer's
// parameters) that share of the gather hides with the reduce-scatter and the rest shows.
// `slowdown`: the share of the compute's rate the overlapped collectives take (their kernels' SMs and
// memory traffic), so a layer lasts max(chain, compute + slowdown · min(chain, compute)).
double zeroLayerSeconds(double first_s, double gather_s, double reduce_s, double compute_s, double layers,
                        double prefetch_depth, double slowdown = 0);
// PyTorch FSDP's gradient path for `params` parameters of one unit (a layer), one micro-batch, with
// `e`-byte gradients reduced in `reduce_bytes` over a shard group of `n` ranks (docs/framework-profiles.md,
// "FSDP's flat gradient"). `copy`: on the compute stream, autograd's backward of the flat parameter's
// split into its views concatenates the views' gradients into the flat gradient (read and write,
// 2·P·e). `side`: on the post-backward stream before the reduce-scatter, the cast to the reduce dtype
// where it is wider (P·(e + r)) and the in-place pre-division by the gradient predivide factor (> 1
// from 2 ranks on: 2·P·r). Byte counts of memory-bound kernels, no constant.
struct FsdpGradient {
  double copy_bytes = 0, side_bytes = 0;
};
FsdpGradient fsdpGradientBytes(double params, double e, double reduce_bytes, double n);
double fsdpPredivideFactor(double n);  // FSDP1's _get_gradient_predivide_factor
// An all-gather or reduce-scatter as NCCL runs it: a ring (NCCL has no tree for these), n − 1 steps
// each a hop's latency, where collectiveSeconds charges a tree's 1 + log2 n; the bandwidth term the same.
double ringCollectiveSeconds(const NetworkTier& tier, double bytes, double n, double factor);
// The host thread's seconds for one layer and micro-batch under a framework profile: its forward ops
// (twice under full recomputation) at host_op_s, its backward ops at host_backward_op_s, its
// collective calls (TP's, ZeRO-3's gathers and reduce-scatter) at host_collective_s, and under ZeRO
// its module hooks from the profile's module_hooks_from_zero stage on (FSDP wraps the blocks at any
// sharding, DeepSpeed hooks submodules at ZeRO-3 only; 1.5× under full recomputation: the rerun
// forward's) and, where the profile has grad_hooks (DeepSpeed ZeRO 1-3), one gradient hook per
// parameter tensor of the layer (`param_tensors`, layerParamTensors), each at hook_s. A profile's
// negative per-op cost is the cluster's dispatch_s (hostOpSeconds).
double hostLayerSeconds(const Plan& p, const Cluster& c, const FrameworkProfile& fp, double param_tensors = 0);
// A dense layer's parameter tensors as a Hugging Face model holds them (each a ZeRO gradient hook):
// two norms (LayerNorm weight and bias, RMSNorm weight), QKV (GPT-2's fused c_attn, else q, k, v),
// the output projection and the MLP's matrices, with their biases. GPT-2 12, Llama 9.
double layerParamTensors(const workloads::Workload& w);
// The parameter tensors of a pipeline stage's `layers` layers as a Hugging Face model holds them, with
// the word embedding (and GPT-2's learned positions) on the first stage and the final norm (and an
// untied lm_head) on the last: tiny GPT-2 2 × 12 + 2 + 2 = 28, the tiny Llama 2 × 9 + 1 + 2 = 21.
double modelParamTensors(const workloads::Workload& w, double layers, bool first, bool last);
// The host work of DeepSpeed's step boundary and gradient bucketing, per optimizer step, by ZeRO stage
// (docs/framework-profiles.md, "DeepSpeed by ZeRO stage"): at ZeRO 0 zero0_step_tensor_s per parameter
// tensor (engine.py allreduce_gradients → buffered_allreduce_fallback's per-tensor flatten/unflatten
// copies, the per-tensor gradient clipping and the torch optimizer's per-tensor loop); at ZeRO 1-3
// grad_bucket_s per parameter tensor each time its gradient is copied into a reduce bucket
// (stage_1_and_2.py reduce_ready_partitions_and_remove_grads: stage 1 on the boundary micro-batch
// only, stage 2 on every micro-batch; stage3.py on every micro-batch). 0 under a profile without them.
double zeroStepHostSeconds(const Plan& p, const FrameworkProfile& fp, double tensors);
// The same by pass: the forward, the rerun forward of full recomputation, the backward (each pass's
// collective calls and half its hooks with it).
struct HostPhases {
  double fwd = 0, rec = 0, bwd = 0;
};
HostPhases hostLayerPhases(const Plan& p, const Cluster& c, const FrameworkProfile& fp, double extra_forward_ops = 0,
                           double extra_backward_ops = 0, double param_tensors = 0);
// A micro-batch's seconds from its host thread and device stream by pass: Σ max(host, device) over
// the forward, the recomputation and the backward (the host runs ahead only within a pass).
double phasedSeconds(const HostPhases& host, const HostPhases& device);
double hostOpSeconds(double profile_s, const Cluster& c);
// Megatron-LM's --tp-comm-overlap (Transformer Engine's userbuffers; docs/framework-profiles.md,
// "Megatron-LM's overlaps"): of a pass's TP collectives (`tp_s`) beside its compute (`compute_s`), what
// shows: the share no GEMM is left to hide (`tail_share`) and whatever outlasts the compute.
// Forward (and a full recomputation's rerun): TE splits each reduce-scatter after a row-parallel GEMM
// into 4 chunks (its pipelined method), the last of which follows the last GEMM chunk; the two
// reduce-scatters are half of the pass's collectives, so 1/8 shows (kTeForwardTail). The all-gathers
// run as ring exchanges, each chunk's GEMM beside the next chunk's transfer; backward, the dgrad's and
// wgrad's collectives run beside the other GEMM of the pair (bulk): tail 0.
inline constexpr double kTeForwardTail = 0.5 / 4.0;
double tpOverlapShown(double tp_s, double compute_s, double tail_share);

}  // namespace trainscope::models::gpu

namespace trainscope::models {

// Context parallelism's ring as the runtime runs it (runtime/src/model/context_parallel.h), one layer
// and one micro-batch, shared by the GPU and CPU branches (docs/time-model.md, "Context parallelism").
// `kv_s`: the send of one K/V block (ringStepBytes); `grad_s`: one fp32 dK/dV accumulator
// (ringGradBytes); `kv_grad_s`: both at once; `fwd_block_s`, `bwd_block_s`: a pass's attention ÷ cp.
// Forward: cp − 1 K/V sends, each beside a block. Backward (ringBackward): beside block 0 the next K/V
// block travels, beside blocks 1..cp−2 a K/V block and the accumulator of the block before, beside the
// last the accumulator only; the last accumulator's way home shows whole. Full checkpointing reruns
// the forward and its ring; selective reruns nothing under CP (the ring keeps q, k, v and the output).
double ringLayerSeconds(double cp, double kv_s, double grad_s, double kv_grad_s, double fwd_block_s,
                        double bwd_block_s, runconfig::Checkpointing ckpt);
// Bytes of one dK/dV accumulator: 2·b·(s/cp)·kv·D fp32 elements (ringBlockElements), whatever the
// compute dtype.
double ringGradBytes(const workloads::Workload& w, const Plan& p);

}  // namespace trainscope::models
