// gpu_time.cpp — step time of a plan on a GPU cluster from its kernels (derivation and sources in
// docs/tuner.md, "GPU time model").
//
//   kernel      GEMM: max(FLOPs / (peak · eff(FLOPs) · waves), operand bytes / achieved bandwidth,
//               floor); memory-bound: max(bytes / achieved bandwidth, floor).
//   micro-batch on a stage: device = Σ its layers' kernels + their TP collectives (+ the head, the
//               embedding, and under Megatron-LM the per-micro-batch accumulation of every weight's
//               gradient into its main_grad buffer); host = its framework ops × dispatch; the longer
//               bounds it.
//   step        pipeline: (M + (p − 1)/v) micro-batch times + the sends (steady state, fill and
//               drain); DP gradient reduction of the stage that holds the most parameters (the part not
//               hidden behind the last backward) and the tied embedding's reduction between the first
//               and last stage; the optimizer's passes over that stage's parameters.
//   ZeRO-2/3    each micro-batch's gradients reduce-scattered (the same exposure rule), ZeRO-2's
//               parameter all-gather after the step, ZeRO-3's per-layer parameter all-gathers before
//               each forward and backward, prefetched behind the previous layer's compute.
//   CP          a rank's layers run its s/cp tokens; per layer and pass the ring's cp − 1 K/V steps,
//               each shown where it outlasts the block of attention it overlaps; gradients summed
//               over dp·cp.
#include "gpu_time.h"
#include "gpu_sync.h"

#include <algorithm>
#include <cmath>

#include "trainscope/common/error.h"
#include "trainscope/models/dp_layout.h"
#include "trainscope/models/moe.h"
#include "trainscope/models/zero.h"
#include "trainscope/workloads/flops.h"

namespace trainscope::models::gpu {
namespace {

using runconfig::Checkpointing;

constexpr double kTile = 128.0;  // a CTA's output tile edge in cuBLAS's large-GEMM kernels
double sum(const std::vector<Op>& ops, const Cluster& c, double peak, double e) {
  double t = 0;
  for (const Op& o : ops) t += o.kind == Op::Kind::Gemm ? gemmSeconds(o, c, peak, e) : memorySeconds(o, c);
  return t;
}

}  // namespace

double gemmSeconds(const Op& g, const Cluster& c, double peak, double e) {
  const double flops = g.flops();
  double eff = c.matmulEfficiency(flops);
  if (g.fp8) {  // FP8 operands (fp8_ops.h): the fp8 peak, the curve scaled to the fp8 ceiling
    peak *= c.peak("fp8") / c.peak("bf16");
    eff *= c.fp8Scale();
    if (g.bytes <= 0) e = 1.0;  // operands 1 byte (the bf16 output is counted as 1 byte too: small)
  }
  if (g.efficiency_cap > 0) eff = std::min(eff, g.efficiency_cap);
  if (g.flash) eff = g.efficiency_cap;  // flash attention: its measured rate (flashEfficiency), no GEMM curve
  if (c.sm_count > 0 && !g.flash) {  // tiles fill the SMs in waves; the last wave's idle SMs are lost
    const double tiles = std::ceil(g.m / kTile) * std::ceil(g.n / kTile) * g.batch;
    const double sms = double(c.sm_count), waves = std::ceil(tiles / sms);
    eff *= tiles / (waves * sms);
  }
  const double compute = flops / (peak * std::max(eff, 1e-6));
  const double bytes = g.bytes > 0 ? g.bytes : (g.m * g.k + g.k * g.n + g.m * g.n) * g.batch * e;
  const double memory = bytes / (c.memory_bandwidth * c.memory_efficiency);
  return std::max({compute, memory, c.kernel_floor_s});
}

double memorySeconds(const Op& m, const Cluster& c) {
  return std::max(m.bytes / (c.memory_bandwidth * c.memory_efficiency), c.kernel_floor_s);
}

double collectiveSeconds(const NetworkTier& tier, double bytes, double n, double factor) {
  if (n <= 1 || bytes <= 0) return 0;
  double busbw = tier.bandwidth * tier.efficiency;
  if (tier.half_bytes > 0) busbw *= bytes / (bytes + tier.half_bytes);  // small messages: latency-bound protocols
  return tier.latency * (1.0 + std::log2(n)) + bytes * factor / std::max(busbw, 1.0);
}

namespace {

// Bytes per element of the buffer gradients are accumulated and reduced in. Megatron-LM (2021–2022)
// keeps its main_grad buffer in the parameters' dtype for fp16 (--accumulate-allreduce-grads-in-fp32
// is off by default) and forces fp32 for bf16; this runtime keeps fp32 gradients.
double gradBytes(const Plan& p, bool megatron, const FrameworkProfile& fp) {
  if (fp.reduce_bytes > 0) return fp.reduce_bytes;
  return megatron && p.precision == runconfig::Precision::FP16 ? 2.0 : 4.0;
}

// The framework's flash attention: FlashAttention-2's rate (the op list's efficiency_cap, A100's),
// moved to this GPU's ceiling where the cluster file gives one, × the profile's scale for its own
// kernel, forward and backward.
void scaleFlash(LayerOps& L, const FrameworkProfile& fp, const Cluster& c) {
  const double fwd = (c.flash_forward_ceiling > 0 ? c.flash_forward_ceiling / kFlashTopForward : 1.0) * fp.flash_forward_scale;
  const double bwd = (c.flash_backward_ceiling > 0 ? c.flash_backward_ceiling / kFlashTopBackward : 1.0) * fp.flash_backward_scale;
  for (auto* ops : {&L.forward, &L.backward, &L.recompute})
    for (Op& o : *ops)
      if (o.flash) o.efficiency_cap = std::min(1.0, o.efficiency_cap * (o.flash == 1 ? fwd : bwd));
}

// The network a CP group's ring crosses: cp ranks tp apart inside a tp·cp block — NVLink while the
// block fits a node, else the ports of the dpn/tp members each node holds (spanningTier).
NetworkTier cpTier(const Plan& p, const Cluster& c) {
  if (p.tp * p.cp <= c.devices_per_node) return c.intra_node;
  return spanningTier(c, double(std::max<int64_t>(1, c.devices_per_node / p.tp)));
}

// One layer's exposed ring exchange for one micro-batch (ringLayerSeconds), beside the blocks of the
// layer's attention forward and backward.
double ringSecondsPerLayer(const workloads::Workload& w, const Plan& p, const Cluster& c, const LayerOps& layer,
                           double peak) {
  if (p.cp <= 1) return 0;
  const double e = double(p.elementBytes()), cp = double(p.cp);
  double attn_fwd = 0, attn_bwd = 0;
  for (const Op& o : layer.forward)
    if (attentionCore(o))
      attn_fwd += gemmSeconds(o, c, peak, e);
  for (const Op& o : layer.backward)
    if (o.name.rfind("flash attention", 0) == 0 || o.name.rfind("scores", 0) == 0 || o.name.rfind("context", 0) == 0)
      attn_bwd += gemmSeconds(o, c, peak, e);
  const NetworkTier tier = cpTier(p, c);
  const double kv = ringStepBytes(w, p), grad = ringGradBytes(w, p);
  auto send = [&](double bytes) { return collectiveSeconds(tier, bytes, 2, 1.0); };
  return ringLayerSeconds(cp, send(kv), send(grad), send(kv + grad), attn_fwd / cp, attn_bwd / cp, p.ckpt);
}

// One micro-batch on a stage: its kernels forward and backward, its recomputation, its TP collectives
// (device seconds), and the host's dispatch of its ops; and one of its layers' device time forward and
// backward (recomputation and TP collectives included), what ZeRO-3's prefetched gathers hide behind.
struct Stage {
  double device_fwd, device_bwd, recompute, tp, cp, ep, host;
  HostPhases host_phases, device_phases;  // the micro-batch by pass: the host's and the device's
  int64_t index;
  double layers, layer_fwd, layer_bwd;
};

// Tensor parallelism's collectives on one micro-batch: per layer forward, backward and recomputation,
// and the embedding's and the head's.
struct TpSeconds {
  double fwd, bwd, rec, emb, head;
};

// The network a TP group crosses: NVLink inside a node; a group spanning nodes leaves each node
// through the NICs of all its members there (min(tp, per node) ports: TP 16 on nodes of 8 leaves
// through 8), as NCCL's rings do (spanningTier).
NetworkTier tpTier(const Plan& p, const Cluster& c) {
  if (p.tp <= c.devices_per_node) return c.intra_node;
  return spanningTier(c, double(std::min<int64_t>(p.tp, c.devices_per_node)));
}

TpSeconds tpSeconds(const workloads::Workload& w, const Plan& p, const Cluster& c, bool megatron) {
  const double e = double(p.elementBytes()), t = double(p.tp);
  // Tensor parallelism per layer: 2 all-reduces forward and 2 backward of the (b, s, h) activation
  // (under SP: an all-gather and a reduce-scatter in place of each, the same bus bytes), 2 more
  // when full recomputation reruns the forward. Inside a node unless the group spans nodes.
  const NetworkTier tp_tier = tpTier(p, c);
  const double act_bytes = double(p.mbs) * double(p.localSeq()) * double(w.n_embd) * e;
  // Sequence parallelism keeps only the local shard of a column-parallel GEMM's input, so backward
  // all-gathers it again for the weight gradient (Korthikanti et al. 2022, §4.2.2): 2 more
  // all-gathers per layer.
  const double gather = collectiveSeconds(tp_tier, act_bytes, t, (t - 1) / t);
  const double all_reduce = collectiveSeconds(tp_tier, act_bytes, t, 2.0 * (t - 1) / t);
  TpSeconds s;
  s.fwd = p.tp <= 1 ? 0 : p.sequence_parallel ? 4.0 * gather : 2.0 * all_reduce;
  s.bwd = p.tp <= 1 ? 0 : p.sequence_parallel ? 6.0 * gather : 2.0 * all_reduce;
  s.rec = p.ckpt == Checkpointing::Full ? s.fwd : 0;
  // The vocabulary-parallel embedding sums its partial lookups over TP (an all-reduce forward; a
  // reduce-scatter under SP); the LM head's input is copied into the TP region (an all-reduce of its
  // gradient backward; under SP an all-gather forward and a reduce-scatter backward).
  // Megatron's vocabulary-parallel cross-entropy adds three all-reduces of one fp32 value per token
  // (the max, the target's logit, the sum of exponentials).
  s.emb = p.tp <= 1 ? 0 : p.sequence_parallel ? gather : all_reduce;
  const double tokens = double(p.mbs) * double(p.localSeq());
  const double cross_entropy = megatron ? 3.0 * collectiveSeconds(tp_tier, 4.0 * tokens, t, 2.0 * (t - 1) / t) : 0.0;
  s.head = p.tp <= 1 ? 0 : (p.sequence_parallel ? 2.0 * gather : all_reduce) + cross_entropy;
  return s;
}

} // namespace

double tpOverlapShown(double tp_s, double compute_s, double tail_share) {
  const double tail = tp_s * tail_share;
  return tail + std::max(0.0, tp_s - tail - compute_s);
}

namespace {

// A MoE layer's extra device time over a dense one (forward, backward, recomputation), and its 4
// all-to-alls (6 when full recomputation reruns the forward's pair) of M·C·b bytes each (moe.h).
struct MoeSeconds {
  double fwd, bwd, rec, ep;
};

MoeSeconds moeSeconds(const workloads::Workload& w, const Plan& p, const Cluster& c, const TimeOptions& o,
                      const LayerOps& layer, double peak) {
  const double e = double(p.elementBytes());
  LayerOps moe = layerOps(w, p, o.framework, o.attention, true);
  scaleFlash(moe, c.profile(o.framework), c);
  MoeSeconds s;
  s.fwd = sum(moe.forward, c, peak, e) - sum(layer.forward, c, peak, e);
  s.bwd = sum(moe.backward, c, peak, e) - sum(layer.backward, c, peak, e);
  s.rec = sum(moe.recompute, c, peak, e) - sum(layer.recompute, c, peak, e);
  const double a2a = moeAllToAllSeconds(moeTier(p, c), moeAllToAllBytes(w, p), double(p.ep));
  s.ep = (p.ckpt == Checkpointing::Full ? 6.0 : 4.0) * a2a;
  return s;
}

} // namespace

namespace {

// One micro-batch's time on any stage, from one layer's costs (the same on every stage) and what the
// stage holds besides: MoE layers, windowed layers (Qwen2), the embedding (first), the head (last).
class StageTimes {
 public:
  StageTimes(const workloads::Workload& w, const Plan& p, const Cluster& c, const TimeOptions& o, double peak)
      : w_(w), p_(p), c_(c), peak_(peak), e_(double(p.elementBytes())), megatron_(o.framework == Framework::Megatron),
        fsdp_(o.framework == Framework::Fsdp),
        fp_(profileFor(c, o)), head_(headOps(w, p, o.framework)), emb_(embeddingOps(w, p)) {
    LayerOps layer = layerOps(w, p, o.framework, o.attention);
    scaleFlash(layer, fp_, c);
    moe_ = moeSeconds(w, p, c, o, layer, peak);
    // Qwen2's windowed layers (from max_window_layers on) where layer 0 is not: their difference,
    // added per windowed layer of a stage (the stages holding them see their cost, not a mean).
    if (w.sliding_window > 0 && !w.windowedLayer(0) && w.windowedLayers() > 0) {
      LayerOps win = layerOps(w, p, o.framework, o.attention, false, w.window_from_layer);
      scaleFlash(win, fp_, c);
      const bool reruns = !(p.cp > 1 && p.ckpt == Checkpointing::Selective);
      window_.fwd = sum(win.forward, c, peak, e_) - sum(layer.forward, c, peak, e_);
      window_.bwd = sum(win.backward, c, peak, e_) - sum(layer.backward, c, peak, e_);
      window_.rec = reruns ? sum(win.recompute, c, peak, e_) - sum(layer.recompute, c, peak, e_) : 0.0;
      window_.ring = ringSecondsPerLayer(w, p, c, win, peak) - ringSecondsPerLayer(w, p, c, layer, peak);
    }
    tp_ = tpSeconds(w, p, c, megatron_);
    // One layer, one micro-batch: the device's time and the host's.
    layer_fwd_ = sum(layer.forward, c, peak, e_), layer_bwd_ = sum(layer.backward, c, peak, e_);
    // Selective recomputation reruns the attention core; under CP the runtime's ring keeps q, k, v and
    // the output instead (runtime/src/model/gpt.cpp, blockForward), so nothing is rerun.
    const bool reruns = !(p.cp > 1 && p.ckpt == Checkpointing::Selective);
    layer_rec_ = reruns ? sum(layer.recompute, c, peak, e_) : 0.0;
    ring_ = ringSecondsPerLayer(w, p, c, layer, peak);
    host_layer_ = hostLayerPhases(p, c, fp_, layer.extra_host_ops_forward, layer.extra_host_ops_backward,
                                  layerParamTensors(w));
    // Megatron-LM's --tp-comm-overlap: a layer's TP collectives beside its GEMMs, pass by pass; what
    // shows is the rest (tpOverlapShown). The embedding's and the head's collectives are not overlapped.
    if (megatron_ && o.megatron.tp_comm && p.tp > 1) {
      tp_.fwd = tpOverlapShown(tp_.fwd, layer_fwd_, kTeForwardTail);
      tp_.bwd = tpOverlapShown(tp_.bwd, layer_bwd_, 0.0);
      tp_.rec = tpOverlapShown(tp_.rec, layer_rec_, kTeForwardTail);
    }
  }

  Stage stage(int64_t index, double layers, bool first, bool last) const {
    const Cluster& c = c_;
    const double peak = peak_, e = e_;
    Stage s{};
    const double moes = double(moeLayersOfStage(w_, p_, index));
    const double wins = double(windowedLayersOfStage(w_, p_, index));
    s.device_fwd = layers * layer_fwd_ + moes * moe_.fwd + wins * window_.fwd + (first ? sum(emb_.forward, c, peak, e) : 0) +
                   (last ? sum(head_.forward, c, peak, e) : 0);
    s.device_bwd = layers * layer_bwd_ + moes * moe_.bwd + wins * window_.bwd + (first ? sum(emb_.backward, c, peak, e) : 0) +
                   (last ? sum(head_.backward, c, peak, e) : 0);
    s.device_bwd += accumulation(index) + fsdpFlatGradient(index);
    s.recompute = layers * layer_rec_ + moes * moe_.rec + wins * window_.rec;
    s.ep = moes * moe_.ep;
    s.tp = layers * (tp_.fwd + tp_.bwd + tp_.rec) + (first ? tp_.emb : 0) + (last ? tp_.head : 0);
    s.cp = layers * ring_ + wins * window_.ring;
    // The head: at least 8 framework ops, one per kernel where its op list has more.
    const double head_ops = std::max(8.0, double(head_.forward.size() + head_.backward.size()));
    // The host by pass: the head's ops and the micro-batch's fixed work (schedule, data, loss) with
    // the forward. The device by pass: the TP collectives of each pass with it, the ring and the
    // experts' exchanges with the backward.
    const double head_host = last ? head_ops * hostOpSeconds(fp_.host_op_s, c) : 0;
    s.host_phases = {layers * host_layer_.fwd + head_host + fp_.host_micro_batch_s, layers * host_layer_.rec,
                     layers * host_layer_.bwd};
    s.host = s.host_phases.fwd + s.host_phases.rec + s.host_phases.bwd;
    const double tp_fwd = layers * tp_.fwd + (first ? tp_.emb : 0) + (last ? tp_.head : 0);
    s.device_phases = {s.device_fwd + tp_fwd, s.recompute + layers * tp_.rec, s.device_bwd + layers * tp_.bwd + s.cp + s.ep};
    s.index = index;
    s.layers = layers;
    s.layer_fwd = layer_fwd_ + tp_.fwd;
    s.layer_bwd = layer_bwd_ + layer_rec_ + tp_.bwd + tp_.rec + ring_;
    return s;
  }

 private:
  // Megatron-LM's DDP hook adds each weight's fresh gradient into its main_grad buffer after every
  // micro-batch's backward (param.main_grad.add_(param.grad)): one memory-bound kernel per parameter
  // tensor that reads both and writes the buffer (before gradient-accumulation fusion folded it into
  // the weight-gradient GEMM).
  double accumulation(int64_t index) const {
    if (!megatron_) return 0.0;
    Op add;
    add.name = "main_grad accumulation";
    double seconds = 0;
    for (const double n : stageTensors(w_, p_, index)) {
      if (n <= 0) continue;  // a tensor the architecture lacks (a bias of a bias-less decoder): no kernel
      add.bytes = n * (e_ + 2.0 * gradBytes(p_, true, fp_));
      seconds += memorySeconds(add, c_);
    }
    return seconds;
  }

  // PyTorch FSDP (SHARD_GRAD_OP and FULL_SHARD flatten each wrapped block's parameters): each unit's
  // flat gradient is assembled from its views' gradients on the compute stream (fsdpGradientBytes'
  // copy), one kernel per layer and one for the stage's other parameters.
  double fsdpFlatGradient(int64_t index) const {
    if (!fsdp_ || !zero::shardsGradients(p_)) return 0.0;
    const double n = double(zero::shardRanks(p_)), rb = gradBytes(p_, false, fp_);
    const double layer = layerParams(w_, p_), layers = double(layersOfStage(w_.n_layer, p_.pp, index));
    const double others = std::max(0.0, stageParams(w_, p_, index) - layers * layer);
    Op copy;
    copy.name = "fsdp flat gradient";
    copy.bytes = fsdpGradientBytes(layer, e_, rb, n).copy_bytes;
    double seconds = layers * memorySeconds(copy, c_);
    copy.bytes = fsdpGradientBytes(others, e_, rb, n).copy_bytes;
    return seconds + (copy.bytes > 0 ? memorySeconds(copy, c_) : 0.0);
  }

  const workloads::Workload& w_;
  const Plan& p_;
  const Cluster& c_;
  const double peak_, e_;
  const bool megatron_, fsdp_;
  const FrameworkProfile fp_;  // with the options' reduce dtype (profileFor)
  const LayerOps head_, emb_;
  MoeSeconds moe_{};
  struct {
    double fwd = 0, bwd = 0, rec = 0, ring = 0;
  } window_;  // a windowed layer's seconds over layer 0's (Qwen2)
  TpSeconds tp_{};
  double layer_fwd_ = 0, layer_bwd_ = 0, layer_rec_ = 0, ring_ = 0;
  HostPhases host_layer_{};
};

// One micro-batch on a stage: its device time, or the host's pass by pass where that is longer.
double stageMicroSeconds(const Stage& s) {
  return std::max(s.device_fwd + s.device_bwd + s.recompute + s.tp + s.cp + s.ep,
                  phasedSeconds(s.host_phases, s.device_phases));
}

// The slowest stage's micro-batch: the first stage holds ⌈L/p⌉ layers and the embedding, the last
// ⌊L/p⌋ and the head. `fill_s` (under PP): the other stages' micro-batch times summed, what the
// pipeline's fill and drain add (pipelineFillSeconds).
Stage slowestStage(const workloads::Workload& w, const Plan& p, const Cluster& c, const TimeOptions& o, double peak,
                   double* fill_s) {
  const StageTimes times(w, p, c, o, peak);
  const double first_layers = double(layersOfStage(w.n_layer, p.pp, 0));
  const double last_layers = double(layersOfStage(w.n_layer, p.pp, p.pp - 1));
  const Stage a = times.stage(0, first_layers, true, p.pp == 1), z = times.stage(p.pp - 1, last_layers, false, true);
  auto total = [](const Stage& s) { return phasedSeconds(s.host_phases, s.device_phases); };
  const Stage& slow = p.pp == 1 || total(a) >= total(z) ? a : z;
  if (fill_s && p.pp > 1) {
    std::vector<double> stages = {stageMicroSeconds(a)};
    for (int64_t s = 1; s + 1 < p.pp; ++s)
      stages.push_back(stageMicroSeconds(times.stage(s, double(layersOfStage(w.n_layer, p.pp, s)), false, false)));
    stages.push_back(stageMicroSeconds(z));
    *fill_s = pipelineFillSeconds(stages, slow.index);
  }
  return slow;
}

}  // namespace

NetworkTier spanningTier(const Cluster& c, double per_node) {
  NetworkTier tier = c.inter_node;
  tier.bandwidth = std::min(per_node * c.inter_node.bandwidth * c.inter_node.efficiency,
                            c.intra_node.bandwidth * c.intra_node.efficiency);
  tier.efficiency = 1.0;
  return tier;
}

double zeroGatherSeconds(double first_s, double gather_s, double compute_s, double layers) {
  return first_s + std::max(0.0, layers - 1.0) * std::max(0.0, gather_s - compute_s);
}

double zeroLayerSeconds(double first_s, double gather_s, double reduce_s, double compute_s, double layers,
                        double prefetch_depth, double slowdown) {
  const double rest = std::max(0.0, layers - 1.0);
  if (prefetch_depth <= 0) return first_s + rest * (gather_s + reduce_s);
  // A prefetch of less than a layer (DeepSpeed's stage3_prefetch_bucket_size under a layer's
  // parameters): that share of the next gather hides with the reduce-scatter, the rest shows.
  const double ahead = std::min(1.0, prefetch_depth) * gather_s, chain = ahead + reduce_s;
  const double slowed = compute_s + slowdown * std::min(chain, compute_s);
  return first_s + rest * (gather_s - ahead + std::max(chain, slowed) - compute_s);
}

double pipelineFillSeconds(const std::vector<double>& stage_s, int64_t slowest) {
  double fill = 0;
  for (size_t s = 0; s < stage_s.size(); ++s)
    if (int64_t(s) != slowest) fill += stage_s[s];
  return fill;
}

namespace {

// The slowest stage's micro-batch: how long it takes (its device time, or the host's dispatch where
// that is longer), and the factor a host-bound one stretches every part by.
struct MicroBatchTime {
  double per_micro, scale;
};

// The step's micro-batches on the slowest stage: their compute, recomputation and TP collectives.
MicroBatchTime addMicroBatches(TimePrediction& r, const Stage& slow, double M) {
  const double device = slow.device_fwd + slow.device_bwd + slow.recompute + slow.tp + slow.cp + slow.ep;
  // Pass by pass the longer of the host thread and the device stream (the host runs ahead of the
  // device only within a pass: a forward of tiny kernels is host-bound while its backward's GEMMs
  // may not be; the totals' max would let one pass's idle device hide the other's).
  const double per_micro = std::max(device, phasedSeconds(slow.host_phases, slow.device_phases));
  r.bound = slow.host > device ? "host launch" : "device";
  const double scale = per_micro / std::max(device, 1e-30);  // a host-bound micro-batch stretches every part
  r.compute_s = M * (slow.device_fwd + slow.device_bwd) * scale;
  r.recompute_s = M * slow.recompute * scale;
  r.tp_comm_s = M * slow.tp * scale;
  r.cp_comm_s = M * slow.cp * scale;
  r.ep_comm_s = M * slow.ep * scale;  // blocking: the experts wait for their rows
  return {per_micro, scale};
}

// Pipeline: the bubble is the fill and the drain, the other stages' micro-batch times (p − 1 of them
// when the stages are equal), ÷ v when interleaved (pipelineFillSeconds). Each micro-batch crosses each boundary
// forward and backward, once per model chunk, and the fill and the drain add the p − 1 hops of the
// first forward and of the last backward. Megatron-LM sends 1/t of the activation from each TP rank
// and all-gathers it inside the node after the receive (its scatter-gather optimisation, Narayanan
// et al. 2021 §4.1; under SP the activation is already 1/t); its sends are blocking
// (batch_isend_irecv, then torch.cuda.synchronize), so none overlaps compute. This runtime sends
// 1/t between nodes and under SP.
void addPipeline(TimePrediction& r, const workloads::Workload& w, const Plan& p, const Cluster& c, bool megatron,
                 double fill_s, bool overlap_p2p, double per_micro) {
  const double e = double(p.elementBytes()), t = double(p.tp), M = double(p.ga());
  const double act_bytes = double(p.mbs) * double(p.localSeq()) * double(w.n_embd) * e;  // one (b, s/cp, h) activation
  const double v = double(std::max<int64_t>(1, p.virtual_stages)), pp = double(p.pp);
  r.bubble_s = fill_s / v;
  // Ranks are laid out TP fastest, then DP, then PP (Megatron-LM's initialize_model_parallel and
  // this runtime's Layout): a stage is a block of tp·dp ranks, and once the job spans nodes some
  // boundary crosses one, which sets the pace.
  const bool across = p.world() > c.devices_per_node;
  const NetworkTier& tier = across ? c.inter_node : c.intra_node;
  double hop = collectiveSeconds(tier, act_bytes / (megatron || p.sequence_parallel || across ? t : 1.0), 2, 1.0);
  const NetworkTier tp_tier = tpTier(p, c);
  if (megatron && !p.sequence_parallel && p.tp > 1) hop += collectiveSeconds(tp_tier, act_bytes, t, (t - 1) / t);
  r.pp_comm_s = (2.0 * M * v + 2.0 * (pp - 1.0)) * hop;
  // Megatron-LM's interleaved schedule with overlap_p2p_comm (its default since 2023): each chunk's
  // send and receive run beside the next chunk's compute (a chunk's forward, a third of its 1/v of the
  // micro-batch, the shorter side); the fill's and the drain's p − 1 hops show whole.
  if (megatron && overlap_p2p && p.interleaved()) {
    const double chunk = per_micro / (3.0 * v);
    r.pp_comm_s = 2.0 * (pp - 1.0) * hop + 2.0 * M * v * std::max(0.0, hop - chunk);
  }
}

// Optimizer, per parameter of the rank's shard (÷ dp under ZeRO-1 / the distributed optimizer):
// Megatron's fp16 path copies 16-bit gradients to fp32, unscales and checks them, takes the norm,
// runs Adam on fp32 master weights and moments, and copies the weights back to 16 bits: about 54
// bytes moved; this runtime's AdamW step about 28 (SGD 12). The grad-norm's all-reduce over the
// model-parallel group makes every stage wait for the one with the most parameters.
double optimizerSeconds(const Plan& p, const Cluster& c, bool megatron, double params) {
  const double opt_bytes = p.optimizer == runconfig::OptimizerKind::SGD ? 12.0 : megatron && p.mixed() ? 54.0 : 28.0;
  return params / (runconfig::shardsOptimizer(p.zero) && p.dp > 1 ? double(p.dp) : 1.0) * opt_bytes /
         (c.memory_bandwidth * c.memory_efficiency);
}

// The step: the sum of its parts, and the throughput and model FLOPs utilisation it gives.
void addStepTotals(TimePrediction& r, const workloads::Workload& w, const Plan& p, const Cluster& c) {
  r.step_s = r.compute_s + r.recompute_s + r.tp_comm_s + r.dp_comm_s + r.pp_comm_s + r.cp_comm_s + r.ep_comm_s +
             r.bubble_s + r.optimizer_s;
  r.tokens_per_s = double(p.gbs) * double(p.seq) / r.step_s;
  // A mixture of experts' active FLOPs (flops.h); a dense workload's are the usual 6·N·D + attention.
  r.model_flops = workloads::stepFlops(w, p.gbs, p.seq, workloads::Recompute::None).model;
  r.mfu = r.model_flops / r.step_s / (double(p.world()) * c.peak(p.computeDtype()));
}

}  // namespace

TimePrediction predict(const workloads::Workload& w, const Plan& p, const Cluster& c, const TimeOptions& o) {
  if (p.precision == runconfig::Precision::FP8 && !c.peak_flops.count("fp8"))
    throw UserError("--precision", "fp8 needs FP8 tensor cores, and cluster " + c.name +
                                       " gives no fp8 peak (A100 and older GPUs have none)",
                    "pass --precision bf16, or a cluster with FP8 such as h100-80gb-x8 or h200-x8");
  TimePrediction r;
  const bool megatron = o.framework == Framework::Megatron;
  // Tensor cores run at the clock the board sustains at its power limit, not at the boost clock the
  // datasheet's peak is quoted at (A100: 1305 of 1410 MHz under HPL).
  const double peak = c.peak(p.computeDtype()) * c.sustained_clock;
  double fill_s = 0;
  const Stage slow = slowestStage(w, p, c, o, peak, &fill_s);
  const MicroBatchTime micro = addMicroBatches(r, slow, double(p.ga()));
  if (p.pp > 1) addPipeline(r, w, p, c, megatron, fill_s, o.megatron.p2p, micro.per_micro);
  // Data parallelism: the gradients of one (tp, pp) shard reduced across DP (ZeRO-1: reduce-scatter
  // + all-gather, the same bus bytes). Every stage reduces at once over its own group; the step waits
  // for the stage with the most parameters (the first or the last, which hold the word embedding).
  // A MoE's experts under ep > 1 are summed over dp/ep ranks instead (stageExpertParams).
  const int64_t most = stageParams(w, p, 0) >= stageParams(w, p, p.pp - 1) ? 0 : p.pp - 1;
  const double experts = stageExpertParams(w, p, most), params = stageParams(w, p, most) - experts;
  const double grad_bytes = gradBytes(p, megatron, profileFor(c, o));
  const double backward_s = (slow.device_bwd + slow.recompute) * micro.scale;
  if (zero::shardsGradients(p)) {
    const SyncStage sync{slow.index, slow.layers, slow.layer_fwd, slow.layer_bwd};
    r.dp_comm_s = zeroSyncSeconds(r, w, p, c, o, megatron, sync, micro.scale, params, grad_bytes, backward_s);
  } else if (p.gradientGroup() > 1 && megatron && (o.megatron.grad_reduce || o.megatron.param_gather || p.fp8_param_gather)) {
    r.dp_comm_s = megatronDpSyncSeconds(p, c, o, params, grad_bytes, backward_s, slow.device_fwd * micro.scale);
  } else if (p.gradientGroup() > 1) {
    r.dp_comm_s = dpSyncSeconds(p, c, o, megatron, params * grad_bytes, backward_s);
  }
  r.dp_comm_s += expertSyncSeconds(p, c, o, megatron, experts * grad_bytes, backward_s);
  if (p.pp > 1 && w.tie_embeddings) r.dp_comm_s += tiedEmbeddingSeconds(w, p, c, grad_bytes);
  Plan whole = p;  // the experts' state is not ZeRO-sharded: every rank updates its E/ep experts
  whole.zero = runconfig::ZeroStage::None;
  r.optimizer_s = optimizerSeconds(p, c, megatron, params) + optimizerSeconds(whole, c, megatron, experts);
  // The framework's host work at the step boundary and in its gradient buckets (DeepSpeed's, by ZeRO
  // stage; 0 in the built-in profiles): the device waits for it.
  const double stage_layers = double((w.n_layer + p.pp - 1) / p.pp);
  r.optimizer_s += zeroStepHostSeconds(p, c.profile(o.framework), modelParamTensors(w, stage_layers, true, p.pp == 1));
  addStepTotals(r, w, p, c);
  return r;
}

}  // namespace trainscope::models::gpu
