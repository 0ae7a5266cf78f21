// time_model.cpp — see time_model.h; formulas and sources in docs/tuner.md.
#include "trainscope/models/time_model.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "gpu_time.h"
#include "trainscope/models/layer_ops.h"
#include "trainscope/models/moe.h"
#include "trainscope/models/zero.h"
#include "trainscope/workloads/flops.h"

namespace trainscope::models {
namespace {

using runconfig::Checkpointing;

// A mixture of experts on a CPU cluster (moe.h): the slowest stage's MoE layers add their experts'
// compute over the dense MLP's (forward + 2× backward, and full recomputation's forward again) and
// 4 all-to-alls per layer and micro-batch (6 under full recomputation) and the per-expert counts'
// all-gather before each dispatch, on the tier the ep group shares — the cluster's measured Gloo
// figures, as for the other collectives.
void addCpuExperts(TimePrediction& r, const workloads::Workload& w, const Plan& p, const Cluster& c, double peak) {
  if (!w.isMoe()) return;
  const double M = double(p.ga()), moes = double(moeLayersOfStage(w, p, 0));
  const double extra = moeCpuExtraForwardSeconds(w, p, c, peak);
  r.compute_s += M * moes * 3.0 * extra;
  if (p.ckpt == Checkpointing::Full) r.recompute_s += M * moes * extra;
  const double a2a = moeAllToAllSeconds(moeTier(p, c), moeAllToAllBytes(w, p), double(p.ep));
  const double counts = moeCountsAllGatherSeconds(moeTier(p, c), w, double(p.ep));
  const bool full = p.ckpt == Checkpointing::Full;
  r.ep_comm_s = M * moes * ((full ? 6.0 : 4.0) * a2a + (full ? 2.0 : 1.0) * counts);
}

// α–β time of one collective over `n` ranks moving `bytes` (nccl-tests' bus-bandwidth factors).
double collective(const NetworkTier& tier, double bytes, double n, double factor) {
  if (n <= 1 || bytes <= 0) return 0;
  const double bw = tier.bandwidth * tier.efficiency;
  return tier.latency * 2.0 * (n - 1) + bytes * factor / std::max(bw, 1.0);
}

// The ring exchange of a CPU cluster's CP group (the tier its ranks share) over all micro-batches, as
// the runtime runs it (ringLayerSeconds): K/V blocks in the compute dtype, dK/dV in fp32, beside the
// blocks of the attention passes (backward about twice the forward's).
double cpuRingSeconds(const workloads::Workload& w, const Plan& p, const Cluster& c, double attn_fwd_s,
                      double layers, double M) {
  if (p.cp <= 1) return 0;
  const NetworkTier& tier = p.world() <= c.devices_per_node ? c.intra_node : c.inter_node;
  const double cp = double(p.cp), kv = ringStepBytes(w, p), grad = ringGradBytes(w, p);
  auto send = [&](double bytes) { return collective(tier, bytes, 2, 1.0); };
  return M * layers *
         ringLayerSeconds(cp, send(kv), send(grad), send(kv + grad), attn_fwd_s / cp, 2.0 * attn_fwd_s / cp, p.ckpt);
}

}  // namespace

TimeOptions exportedJobOptions(Framework f, const Plan& p) {
  TimeOptions o;
  o.framework = f;
  if (f == Framework::Megatron) {
    o.megatron.grad_reduce = p.gradientGroup() > 1;
    o.megatron.param_gather = o.megatron.grad_reduce && runconfig::shardsOptimizer(p.zero);
  }
  return o;
}

FrameworkProfile profileFor(const Cluster& c, const TimeOptions& o) {
  FrameworkProfile fp = c.profile(o.framework);
  if (o.reduce_bytes > 0) fp.reduce_bytes = o.reduce_bytes;
  // A user's DeepSpeed config with overlap_comm off (stages 1–2 by default): stage_1_and_2.py reduces
  // each bucket on the compute stream (average_tensor: `stream = self.reduction_stream if
  // self.overlap_comm else current_stream()`), nothing hidden.
  if (o.framework == Framework::Deepspeed && o.deepspeed.from_config && o.deepspeed.overlap_comm == 0)
    fp.overlap_reduce = 0;
  return fp;
}

double cpuAttentionShare(const workloads::Workload& w, const Plan& p, int64_t layer) {
  if (!w.windowedLayer(layer) || w.sliding_window >= p.seq) return 1.0;
  if (p.cp > 1) return workloads::windowKeys(w.sliding_window, p.seq) / double(p.seq);
  if (p.mixed()) return 1.0;
  auto products = [&](int64_t window) {
    double n = 0;
    for (int64_t r0 = 0; r0 < p.seq; r0 += kCpuAttentionBlock) {
      const int64_t rows = std::min(kCpuAttentionBlock, p.seq - r0);
      const int64_t k0 = window > 0 ? std::max<int64_t>(0, r0 - window + 1) : 0;
      n += double(rows) * double(r0 + rows - k0);
    }
    return n;
  };
  return products(w.sliding_window) / products(0);
}

namespace {

// A sliding window (Mistral every layer, Qwen2 those from max_window_layers on) on the CPU: a windowed
// layer's seconds over an unwindowed one's — its core at its share of the products
// (cpuAttentionShare; `attention(share)` prices the core, `attn_fwd` is its whole), and the score bias
// the runtime builds in memory where its kernel cannot apply the window in its loop (layer_ops.cpp
// "score bias": SDPA's attn_mask in 16-bit, the ring's per block pair under CP), written and read
// forward, read backward.
struct CpuWindow {
  bool any = false;   // the model has windowed layers
  int64_t layer = 0;  // its first windowed layer
  double fwd = 0, bwd = 0;
};
CpuWindow cpuWindow(const workloads::Workload& w, const Plan& p, const std::function<double(double)>& attention,
                    double attn_fwd, double mem_bw) {
  CpuWindow r;
  const int64_t win_layer = w.sliding_window > 0 ? std::min(w.window_from_layer, w.n_layer - 1) : 0;
  r.layer = win_layer;
  r.any = w.windowedLayer(win_layer);
  if (!r.any) return r;
  const double fwd = attention(cpuAttentionShare(w, p, win_layer)) - attn_fwd;
  double bias_fwd = 0, bias_bwd = 0;
  for (const Op& o : layerOps(w, p, Framework::Trainscope, Attention::Default, false, win_layer).forward)
    if (o.name == "score bias") bias_fwd += o.bytes, bias_bwd += o.backward_bytes >= 0 ? o.backward_bytes : 1.5 * o.bytes;
  r.fwd = fwd + bias_fwd / std::max(mem_bw, 1.0);
  r.bwd = 2.0 * fwd + bias_bwd / std::max(mem_bw, 1.0);
  return r;
}

// Windowed layers of a stage, every one counted (layer_ops.h's windowedLayersOfStage counts none when
// layer 0 is windowed: the GPU model's whole-layer list is windowed already).
double cpuWindowedLayersOfStage(const workloads::Workload& w, const Plan& p, int64_t stage) {
  double n = 0;
  for (int64_t l : layerIdsOfStage(w.n_layer, p.pp, stage, p.virtual_stages)) n += w.windowedLayer(l) ? 1.0 : 0.0;
  return n;
}

}  // namespace

double ringExposedSeconds(double cp, double step_s, double block_s) {
  return std::max(0.0, cp - 1.0) * std::max(0.0, step_s - block_s);
}

double ringStepBytes(const workloads::Workload& w, const Plan& p) {
  return ringBlockElements(w, p) * double(p.elementBytes());
}

double ringGradBytes(const workloads::Workload& w, const Plan& p) { return ringBlockElements(w, p) * 4.0; }

double ringLayerSeconds(double cp, double kv_s, double grad_s, double kv_grad_s, double fwd_block_s,
                        double bwd_block_s, Checkpointing ckpt) {
  if (cp <= 1) return 0;
  auto excess = [](double send_s, double block_s) { return std::max(0.0, send_s - block_s); };
  const double fwd = ringExposedSeconds(cp, kv_s, fwd_block_s);
  const double bwd = excess(kv_s, bwd_block_s) + std::max(0.0, cp - 2.0) * excess(kv_grad_s, bwd_block_s) +
                     excess(grad_s, bwd_block_s) + grad_s;
  return (ckpt == Checkpointing::Full ? 2.0 : 1.0) * fwd + bwd;
}

namespace {

// Data parallelism on a CPU cluster: all-reduce of the fp32 main gradients of one (tp, pp) shard
// (ZeRO-1: reduce-scatter + all-gather, the same bytes), partly hidden behind backward. Under CP the
// cp ranks of a DP rank hold the same weights: the gradients are summed over dp·cp.
// PyTorch FSDP 1 as the Hugging Face Trainer runs it on Gloo CPU ranks (--runner hf|accelerate's FSDP
// trials; docs/framework-profiles.md, "FSDP on CPU ranks"): every collective is issued per wrapped unit
// — each transformer block (TRANSFORMER_BASED_WRAP) and the root, which holds the embeddings, the final
// norm and the head: U = layers + 1 — and pays the tier's latency each time; the units' parameters are
// taken as equal shares of the rank's (the bytes sum to the model's either way). The Trainer runs all
// but the last micro-batch under Accelerate's no_sync (transformers trainer.py, sync_context), so
// (counted per step in instrumented trials, torch 2.11):
//  - gradients are reduce-scattered once a step, in fp32 (FSDP 1 no_sync keeps unsharded gradients):
//    U reduce_scatter_tensor calls, and the clip's all-reduce (FSDP's clip_grad_norm_). They stand
//    where DDP's bucketed all-reduce stands, after the last backward, and are priced as DDP's is: on
//    the tier alone (DDP's host costs are the profile's fitted per-op and per-micro-batch ones);
//  - FULL_SHARD unshards every unit before each micro-batch's forward and, but for the root (not
//    resharded after forward: torch fsdp/_runtime_utils.py _post_forward_reshard), before its
//    backward: M (2U - 1) unshards; SHARD_GRAD_OP keeps the gathered parameters through the no_sync
//    micro-batches (_should_free_in_backward) and unshards each unit once a step: U.
// An unshard is more than its all-gather: on CPU tensors FSDP 1 gathers into a list of chunks
// (fsdp/_flat_param.py _all_gather_flat_param: Gloo's list all_gather), after allocating the padded
// flat parameter and before setting every parameter's view into it, and its reshard frees it and
// restores the sharded views — host_gather_s (the profile's host_collective_s) a call, on the thread that
// computes. Nothing overlaps on the CPU: the ranks' one thread computes and communicates.
void addCpuFsdp(TimePrediction& r, const workloads::Workload& w, const Plan& p, const NetworkTier& tier,
                double host_gather_s, double params_per_rank, double e) {
  const double n = double(p.gradientGroup()), M = double(p.ga());
  const double U = double((w.n_layer + p.pp - 1) / p.pp) + 1.0;
  auto perUnit = [&](double bytes) { return collective(tier, bytes / U, n, (n - 1) / n); };
  const double unshards = zero::shardsParameters(p) ? M * (2.0 * U - 1.0) : U;
  r.zero_gather_s = unshards * (perUnit(params_per_rank * e) + host_gather_s);
  r.dp_comm_s = r.zero_gather_s + U * perUnit(params_per_rank * 4.0) + collective(tier, 4.0, n, 2.0 * (n - 1) / n);
}

// The layouts addCpuFsdp prices: the fsdp profile's ZeRO-2/3 without replicas (FSDP 1's SHARD_GRAD_OP and
// FULL_SHARD; a hybrid layout falls back to the ZeRO pricing below).
bool cpuFsdp(const Plan& p, const TimeOptions& o) {
  return o.framework == Framework::Fsdp && zero::shardsGradients(p) && zero::replicas(p) == 1;
}

void addCpuDataParallel(TimePrediction& r, const workloads::Workload& w, const Plan& p, const Cluster& c,
                        const TimeOptions& o, double params_per_rank, double e) {
  const double M = double(p.ga());
  if (p.gradientGroup() > 1 && cpuFsdp(p, o)) {
    addCpuFsdp(r, w, p, p.world() > c.devices_per_node ? c.inter_node : c.intra_node,
               c.profile(o.framework).host_collective_s, params_per_rank, e);
    return;
  }
  if (p.gradientGroup() > 1) {
    const bool inter = p.world() > c.devices_per_node;
    const NetworkTier& tier = inter ? c.inter_node : c.intra_node;
    const double dp = double(p.gradientGroup());
    const double full = collective(tier, params_per_rank * 4.0, dp, 2.0 * (dp - 1) / dp);
    r.dp_comm_s = full * (1.0 - std::clamp(o.dp_overlap, 0.0, 1.0));
    if (zero::shardsGradients(p)) {
      // ZeRO-2/3 (docs/time-model.md): every micro-batch's fp32 gradients reduce-scattered; ZeRO-2
      // then all-gathers the fp32 master weights, ZeRO-3 gathers the parameters in the compute dtype
      // before each micro-batch's forward and backward. Nothing hides them on a CPU.
      // Hybrid sharding: shards over the N ranks of a shard group, then the fp32 gradient shard
      // all-reduced over the R = d/N replicas once after the last backward.
      const double R = double(zero::replicas(p)), n = dp / R;
      const double rs = collective(tier, params_per_rank * 4.0, n, (n - 1) / n);
      r.dp_comm_s = M * rs * (1.0 - std::clamp(o.dp_overlap, 0.0, 1.0));
      if (zero::shardsParameters(p)) {
        r.zero_gather_s = 2.0 * M * collective(tier, params_per_rank * e, n, (n - 1) / n);
        r.dp_comm_s += r.zero_gather_s + collective(tier, params_per_rank * 4.0 / n, R, 2.0 * (R - 1) / R);
      } else {
        r.dp_comm_s += collective(tier, params_per_rank * 4.0, dp, (dp - 1) / dp);
      }
    }
  }
}

// A rank's parameters by how their gradients are reduced (runtime/src/train/experts.h): the dense
// ones (attention, router, shared expert, embeddings) are split over tp and pp and reduced over dp
// (x cp) by GradSync; the routed experts are whole on every TP rank, E/ep of them per rank, and with
// ep > 1 all-reduced over their expert-dp group of dp/ep ranks after backward, outside GradSync
// (never hidden behind it, never ZeRO-sharded). With ep 1 they go through GradSync as dense ones.
struct RankParams {
  double synced = 0;   // through GradSync over dp x cp
  double experts = 0;  // ep > 1: over the expert-dp group
};
RankParams rankParams(const workloads::Workload& w, const Plan& p) {
  const double experts = moeExpertParameters(w) / double(p.pp);
  const double dense = (double(w.parameterCount()) - moeExpertParameters(w)) / (double(p.tp) * double(p.pp));
  if (p.ep <= 1) return {dense + experts, 0};
  return {dense, experts / double(p.ep)};
}

// Another framework's job on a CPU cluster (an external runner's trial): its host work per micro-batch —
// each layer's ops issued from Python and by autograd, its hooks and collective calls (the GPU model's
// hostLayerSeconds, gpu_time.h), and its fixed per-micro-batch work — on the cores that compute, so
// it adds to the step rather than overlapping it; with its per-step work by ZeRO stage
// (zeroStepHostSeconds). The profile's constants on a CPU are what a tune
// refits from its trials (its host_op_s < 0 is the cluster's dispatch_s, 0 in a CPU file).
double cpuHostSeconds(const workloads::Workload& w, const Plan& p, const Cluster& c, const TimeOptions& o) {
  if (o.framework == Framework::Trainscope) return 0;  // the runtime's own cost is in the measured rates
  FrameworkProfile fp = c.profile(o.framework);
  const double layers = double((w.n_layer + p.pp - 1) / p.pp);
  // FSDP wraps the root too (its embeddings, final norm and head): one more unit's hooks a micro-batch
  // beside the blocks'; its collective calls' host cost is priced per call by addCpuFsdp.
  const bool fsdp = cpuFsdp(p, o);
  const double root_hooks = fsdp ? fp.hooks_per_layer * fp.hook_s : 0.0;
  if (fsdp) fp.host_collective_s = 0;
  return double(p.ga()) * (layers * gpu::hostLayerSeconds(p, c, fp, gpu::layerParamTensors(w)) + root_hooks +
                           fp.host_micro_batch_s) +
         gpu::zeroStepHostSeconds(p, fp, gpu::modelParamTensors(w, layers, true, p.pp == 1));
}

void addCpuExpertSync(TimePrediction& r, const Plan& p, const Cluster& c, double expert_params) {
  const double n = double(p.dp / p.ep);
  if (expert_params <= 0 || n <= 1) return;
  const NetworkTier& tier = p.world() > c.devices_per_node ? c.inter_node : c.intra_node;
  r.dp_comm_s += collective(tier, expert_params * 4.0, n, 2.0 * (n - 1) / n);
}

}  // namespace

TimePrediction predictTime(const workloads::Workload& w, const Plan& p, const Cluster& c, const TimeOptions& o) {
  if (c.kind == ClusterKind::Gpu) return gpu::predict(w, p, c, o);
  // A CPU cluster: the layer's GEMMs and memory-bound work in aggregate (the tuner replaces this with
  // measured layer costs after its profile trials).
  TimePrediction r;
  const double h = double(w.n_embd), V = double((w.vocab_size + p.tp - 1) / p.tp * p.tp), a = double(w.n_head);
  // Under CP a rank's layers see its s/cp tokens; its queries attend over all s keys.
  const double s = double(p.localSeq()), keys = double(p.seq), b = double(p.mbs), t = double(p.tp);
  const double e = double(p.elementBytes());
  const double M = double(p.ga());
  // A CPU cluster's peak is one node's: its ranks share the cores.
  const double ranks_per_node = double(std::min<int64_t>(p.world(), c.devices_per_node));
  const double peak = c.peak(p.computeDtype()) / (c.kind == ClusterKind::Cpu ? ranks_per_node : 1.0);
  const double mem_bw = c.memory_bandwidth / (c.kind == ClusterKind::Cpu ? ranks_per_node : 1.0);
  // The weight GEMMs of a list of ops (layer_ops.h: this runtime's kernels), forward, in its order.
  auto weightGemms = [&](const std::vector<Op>& ops) {
    double seconds = 0;
    for (const Op& o : ops)
      if (o.kind == Op::Kind::Gemm && !attentionCore(o)) seconds += o.flops() / (peak * c.matmulEfficiency(o.flops()));
    return seconds;
  };
  // One layer, one micro-batch, forward: its four weight GEMMs (QKV, projection, fc1, fc2; the dense
  // MLP's, experts are added below) and the attention core (causal: half the product is skipped by
  // fused kernels, counted whole as Narayanan et al. do).
  const double rows = s * b;
  double layer_fwd = weightGemms(layerOps(w, p, Framework::Trainscope).forward);
  const double attn_flops = 4.0 * b * s * keys * double(w.n_head * w.headSize()) / t;  // NH·HS: C for GPT
  auto attention = [&](double share) {  // one layer's core at `share` of its products (cpuAttentionShare)
    const double f = attn_flops * share;
    return f / (peak * c.matmulEfficiency(f / std::max(1.0, a / t)));
  };
  const double attn_fwd = attention(1.0);
  layer_fwd += attn_fwd;
  const CpuWindow win = cpuWindow(w, p, attention, attn_fwd, mem_bw);
  const double win_fwd = win.fwd, win_bwd = win.bwd;
  auto windowedOf = [&](int64_t stage) { return win.any ? cpuWindowedLayersOfStage(w, p, stage) : 0.0; };
  // Memory-bound work per layer: LayerNorms, GELU, softmax statistics, residual adds, bias adds:
  // about 16 reads and writes of an s·b·h tensor (÷t where the work is sharded).
  const double local_rows = p.sequence_parallel ? rows / t : rows;
  // The MLP's share is of its width F (SwiGLU's SiLU-multiply reads gate and up: 1.5×).
  const double mlp_width = double(w.ffnHidden()) * (w.mlp == workloads::Mlp::SwiGLU ? 1.5 : 1.0);
  layer_fwd += (10.0 * local_rows * h + 6.0 * rows * mlp_width / t) * e / std::max(mem_bw, 1.0);
  const double head_fwd = weightGemms(headOps(w, p, Framework::Trainscope).forward) + 3.0 * rows * V / t * 4.0 / std::max(mem_bw, 1.0);
  // The slowest stage: the first holds ⌈L/p⌉ layers, the last ⌊L/p⌋ layers and the LM head.
  const double layers_per_stage = double((w.n_layer + p.pp - 1) / p.pp);
  const double last_stage_layers = double(layersOfStage(w.n_layer, p.pp, p.pp - 1));
  const double wins_first = windowedOf(0), wins_last = windowedOf(p.pp - 1);
  const double first_fwd = layer_fwd * layers_per_stage + wins_first * win_fwd;
  const double last_fwd = layer_fwd * last_stage_layers + head_fwd + wins_last * win_fwd;
  const bool first_slowest = first_fwd + wins_first * win_bwd / 3.0 >= last_fwd + wins_last * win_bwd / 3.0;
  const double stage_fwd = first_slowest ? first_fwd : last_fwd, wins = first_slowest ? wins_first : wins_last;
  // fwd + 2x bwd (a windowed layer's backward: its core's twice, its score bias read once)
  const double per_micro = 3.0 * stage_fwd + wins * (win_bwd - 2.0 * win_fwd);
  r.compute_s = M * per_micro;
  if (p.ckpt == Checkpointing::Full) r.recompute_s = M * stage_fwd;
  // Selective reruns the attention core; under CP the ring keeps q, k, v and the output instead.
  if (p.ckpt == Checkpointing::Selective && p.cp <= 1)
    r.recompute_s = M * (layers_per_stage * attn_fwd + wins_first * (attention(cpuAttentionShare(w, p, win.layer)) - attn_fwd));
  // Tensor parallelism: 2 all-reduces per layer forward and 2 backward (SP: all-gather +
  // reduce-scatter pairs, the same bytes), more with full recomputation; inside a node.
  if (p.tp > 1) {
    const NetworkTier& tier = p.tp <= c.devices_per_node ? c.intra_node : c.inter_node;
    const double bytes = rows * h * e;
    const double per_layer = 4.0 * collective(tier, bytes, t, 2.0 * (t - 1) / t);
    r.tp_comm_s = M * layers_per_stage * per_layer * (p.ckpt == Checkpointing::Full ? 1.5 : 1.0);
  }
  // Pipeline: one activation send and one gradient send per micro-batch per boundary; the bubble.
  if (p.pp > 1) {
    const NetworkTier& tier = p.world() <= c.devices_per_node ? c.intra_node : c.inter_node;
    const double bytes = b * (p.sequence_parallel ? s / t : s) * h * e;
    // Interleaved: each micro-batch crosses each boundary once per model chunk.
    const double v = double(std::max<int64_t>(1, p.virtual_stages));
    r.pp_comm_s = 2.0 * M * v * collective(tier, bytes, 2, 1.0);
    r.bubble_s = (r.compute_s + r.recompute_s) * (double(p.pp) - 1.0) / (v * M);
  }
  addCpuExperts(r, w, p, c, peak);
  r.cp_comm_s = cpuRingSeconds(w, p, c, attn_fwd, layers_per_stage, M);
  const RankParams params = rankParams(w, p);
  addCpuDataParallel(r, w, p, c, o, params.synced, e);
  addCpuExpertSync(r, p, c, params.experts);
  // Optimizer: AdamW reads and writes ~28 bytes per parameter (p, g, m, v and the copy).
  const double opt_bytes = p.optimizer == runconfig::OptimizerKind::SGD ? 12.0 : 28.0;
  r.optimizer_s = (params.synced / (runconfig::shardsOptimizer(p.zero) && p.dp > 1 ? double(p.dp) : 1.0) + params.experts) *
                  opt_bytes / std::max(mem_bw, 1.0);
  r.host_s = cpuHostSeconds(w, p, c, o);
  r.step_s = r.compute_s + r.recompute_s + r.tp_comm_s + r.dp_comm_s + r.pp_comm_s + r.cp_comm_s + r.ep_comm_s +
             r.bubble_s + r.optimizer_s + r.host_s;
  const double tokens = double(p.gbs) * keys;
  r.tokens_per_s = tokens / r.step_s;
  r.model_flops = workloads::stepFlops(w, p.gbs, p.seq, workloads::Recompute::None).model;  // MoE: active FLOPs
  r.mfu = r.model_flops / r.step_s / (double(p.world()) * c.peak(p.computeDtype()) /
                                      (c.kind == ClusterKind::Cpu ? ranks_per_node : 1.0));
  return r;
}

}  // namespace trainscope::models
