// layer_ops.cpp — the kernels of a layer (see layer_ops.h; derivation in docs/time-model.md).
#include "trainscope/models/layer_ops.h"

#include <algorithm>
#include <cmath>

#include "fp8_ops.h"

#include "trainscope/common/error.h"
#include "trainscope/models/moe.h"
#include "trainscope/workloads/flops.h"

namespace trainscope::models {

using runconfig::Checkpointing;

Framework parseFramework(const std::string& s) {
  if (s == "trainscope") return Framework::Trainscope;
  if (s == "megatron") return Framework::Megatron;
  if (s == "fsdp") return Framework::Fsdp;
  if (s == "deepspeed") return Framework::Deepspeed;
  throw UserError("--framework", "unknown value \"" + s + "\"", "use trainscope, megatron, fsdp or deepspeed");
}

const char* frameworkName(Framework f) { return frameworkKey(f); }

double flashEfficiency(double keys, double head_dim, bool causal, bool backward) {
  // Head dim 128 and above: 73% forward, 63% backward at long sequences; head dim 64 reaches 0.84 of
  // that (Figures 4-7: 171 vs 203 TFLOP/s without the mask, 163 vs 193 causal, forward + backward at
  // 16k); below 64, log-linear on (32: 0.84²).
  const double top = backward ? kFlashTopBackward : kFlashTopForward;
  const double d = std::max(1.0, head_dim);
  const double by_d = d >= 128 ? 1.0 : std::pow(0.84, std::log2(128.0 / d));
  const double half = causal ? 800.0 : 300.0;
  const double k = std::max(1.0, keys);
  return top * by_d * k / (k + half);
}

Attention parseAttention(const std::string& s) {
  if (s == "default") return Attention::Default;
  if (s == "unfused") return Attention::Unfused;
  if (s == "flash") return Attention::Flash;
  throw UserError("--attention", "unknown value \"" + s + "\"", "use default, unfused or flash");
}

const char* attentionName(Attention a) {
  return a == Attention::Unfused ? "unfused" : a == Attention::Flash ? "flash" : "default";
}

bool attentionCore(const Op& o) {
  return o.kind == Op::Kind::Gemm && (o.name == "flash attention" || o.name == "scores q·kᵀ" || o.name == "context p·v");
}

namespace {

Op gemm(const char* name, double m, double n, double k, double batch = 1) {
  Op o;
  o.name = name;
  o.kind = Op::Kind::Gemm;
  o.m = m, o.n = n, o.k = k, o.batch = batch;
  return o;
}
Op mem(const char* name, double bytes) {
  Op o;
  o.name = name;
  o.bytes = bytes;
  return o;
}

// The backward of a GEMM y = x·W (m×k · k×n): dx = dy·Wᵀ (m×n · n×k) and dW = xᵀ·dy (k×m · m×n).
void backwardOf(const Op& g, std::vector<Op>& out) {
  out.push_back(gemm("dgrad", g.m, g.k, g.n, g.batch));
  out.back().name = g.name + " dgrad";
  out.push_back(gemm("wgrad", g.k, g.n, g.m, g.batch));
  out.back().name = g.name + " wgrad";
}

// `o`, keeping `saved` bytes for its backward.
Op keeping(Op o, double saved) {
  o.saved = saved;
  return o;
}

// One layer's sizes on a TP rank for one micro-batch; byte counts are of the plan's element size.
struct LayerShape {
  double b, s, h, t, a, d, e;
  double keys;          // keys each query attends over: the whole sequence (s = its CP rank's share)
  // Under a sliding window W < s, the flash core's products: query t multiplies min(t + 1, W) keys,
  // W·s − W(W − 1)/2 in all against causal's s(s + 1)/2 ≈ s·keys/2; as causal products over
  // window_keys = 2W − W²/s keys (= s when W = s; workloads::windowKeys, what MFU counts). Under CP
  // the load-balanced chunks give every rank the same share of them.
  double window_keys;
  bool alibi;           // ALiBi's bias on the scores (unfusedAttention's add)
  // The score bias this runtime's cores build in memory when they cannot apply it in a kernel: SDPA's
  // attn_mask (1 or NH/t, s, keys) of the compute dtype for a window or ALiBi (gpt.cpp attentionCore),
  // the context-parallel ring's fp32 one per block pair (built again in the backward). The fp32 CPU
  // kernel adds ALiBi and the window in its loop (nothing in memory): 0 there, and in Megatron-LM.
  double bias_elems, bias_e, bias_backward;
  double rows;          // tokens of the micro-batch
  double local;         // rows a TP rank holds outside the GEMMs
  double act;           // one (b, s[/t], h) activation
  double column_input;  // what a column-parallel GEMM keeps of its input for the weight gradient
  double qkv_out;       // Q, K, V of this rank: the attention core's input
  double heads, scores; // attention heads of this rank (× b), and their score elements
  // The architecture (workloads/architecture.h) per TP rank: query width NH·HS/t, K/V width
  // (kvHeadsPerRank · HS: split, or one replicated head when tp > KV), the MLP's hidden F/t.
  double q, kv, ffn;
  bool megatron, rms, rope, swiglu, qkv_bias;
  bool fused;           // this runtime's fused fp32 CPU ops (RMSNorm, SwiGLU, the grouped-query core)
  // This runtime's fp32 CPU attention kernel and its context-parallel ring (any dtype) read the GQA
  // K/V heads as they are (runtime attention.cpp ropeQkv, cpu_ops::causalAttention,
  // context_parallel.cpp), as Megatron-LM's cores do; SDPA (16-bit, GPU, no CP) takes multi-head Q, K,
  // V, each K/V head repeated for its query heads into one (b, s, 3·q) tensor (attention.cpp mhaQkv),
  // which the core keeps.
  double core_kv;       // the K/V width the attention core keeps: kv, or q when expanded
  double core_in;       // what the core keeps of its input: q + 2·core_kv per row
};

LayerShape layerShape(const workloads::Workload& w, const Plan& p, Framework f, int64_t layer) {
  LayerShape x;
  // Context parallelism: the rank's s/cp tokens (two chunks of the sequence) pass every layer; its
  // queries attend over the whole sequence, whose K and V come round the ring block by block.
  x.b = double(p.mbs), x.s = double(p.localSeq()), x.h = double(w.n_embd), x.t = double(p.tp);
  x.keys = double(p.seq);
  // This layer's window (Qwen2 windows only the layers from max_window_layers on): its keys, or the
  // whole sequence's.
  const bool windowed = w.windowedLayer(layer);
  x.window_keys = windowed ? workloads::windowKeys(w.sliding_window, p.seq) : x.keys;
  x.alibi = w.positions == workloads::Positions::Alibi;
  x.a = double(w.n_head), x.d = double(w.headSize()), x.e = double(p.elementBytes());
  x.rows = x.b * x.s;
  x.local = p.sequence_parallel ? x.rows / x.t : x.rows;
  x.act = x.local * x.h * x.e;
  x.megatron = f == Framework::Megatron;
  // Under SP both keep the local (b, s/t, h) shard and all-gather it again in the backward
  // (Korthikanti et al. 2022, §4.2.2; Megatron-LM's LinearWithGradAccumulationAndAsyncCommunication,
  // this runtime's columnParallelLinear); without SP the shard is the whole input.
  x.column_input = x.act;
  x.q = x.a * x.d / x.t, x.kv = double(kvHeadsPerRank(w, p.tp)) * x.d, x.ffn = double(w.ffnHidden()) / x.t;
  x.rms = w.norm == workloads::Norm::RMSNorm, x.rope = w.positions == workloads::Positions::Rope;
  x.swiglu = w.mlp == workloads::Mlp::SwiGLU, x.qkv_bias = w.qkv_bias;
  x.qkv_out = x.rows * (x.q + 2.0 * x.kv) * x.e;
  x.fused = !x.megatron && p.cpu && !p.mixed();
  const bool expanded = !x.megatron && !x.fused && p.cp == 1 && x.kv != x.q;
  x.core_kv = expanded ? x.q : x.kv;
  x.core_in = x.rows * (x.q + 2.0 * x.core_kv) * x.e;
  x.heads = x.b * x.a / x.t, x.scores = x.heads * x.s * x.keys;
  const bool biased = x.alibi || windowed, in_kernel = x.fused && p.cp == 1;
  x.bias_elems = biased && !x.megatron && !in_kernel ? (x.alibi ? x.a / x.t : 1.0) * x.s * x.keys : 0.0;
  x.bias_e = p.cp > 1 ? 4.0 : x.e;
  x.bias_backward = p.cp > 1 ? 2.0 : 1.0;  // the ring builds it again; SDPA's backward reads it once
  return x;
}

// RMSNorm (no bias, no mean): reads x, writes y, keeping x and its fp32 1/rms per row (transformers'
// LlamaRMSNorm as the runtime computes it, in fp32; Transformer Engine's RMSNorm keeps the same rsigma).
// Its backward reads x and dy once and writes dx (the weight's gradient from the same pass): 1.5× the
// forward's traffic, in Megatron-LM (TE) and in this runtime's fused fp32 CPU RMSNorm (cpu_ops::rmsNorm).
// Elsewhere (16-bit, GPU) the runtime's eager RMSNorm (x in fp32, x·rsqrt(mean(x²) + eps), cast back,
// times w) keeps its fp32 input (a 4-byte copy of x in 16-bit runs), 1/rms, and the normalised y for
// the weight's gradient: act·(1 + 4/e) + 4 bytes per row.
Op rmsnorm(const LayerShape& x, const char* name) {
  std::string n = name;
  if (n.rfind("layernorm", 0) == 0) n = "rmsnorm" + n.substr(9);
  Op o = mem("", 2.0 * x.act);
  o.name = n;
  if (!x.megatron && !x.fused) return keeping(o, x.act * (1.0 + 4.0 / x.e) + 4.0 * x.local);
  return keeping(o, x.act + 4.0 * x.local);
}

// A LayerNorm; it keeps its input. Megatron-LM's fused LayerNorm
// (fused_kernels/layer_norm_cuda_kernel.cu) reads x and dy twice in its backward — once for the
// weight and bias gradients, once for dx — and writes dx: 2.5× its forward's traffic.
Op layernorm(const LayerShape& x, const char* name) {
  if (x.rms) return rmsnorm(x, name);
  Op o = mem(name, 2.0 * x.act);
  if (x.megatron) o.backward_bytes = 5.0 * x.act;
  return keeping(o, x.act);
}

// Megatron's fused bias-dropout-add reads x and the residual and writes the sum and a byte mask,
// which it keeps. Its backward: dx = dy·mask (dy and the mask in, dx out), the bias gradient (dx
// again), and autograd's sum of the residual stream's two gradients at the block's input (two in,
// one out). The runtime's residual add keeps nothing.
Op residual(const LayerShape& x) {
  const double mask = x.megatron ? x.local * x.h : 0.0;
  Op o = mem(x.megatron ? "bias-dropout-add" : "residual add", x.megatron ? 3.0 * x.act + mask : 3.0 * x.act);
  if (x.megatron) o.backward_bytes = 6.0 * x.act + mask;
  return keeping(o, mask);
}

// Megatron-LM's attention core: Q·Kᵀ, scale-mask-softmax, dropout and P·V, each in memory.
std::vector<Op> unfusedAttention(const LayerShape& x) {
  const double s = x.s, keys = x.keys, d = x.d, e = x.e, heads = x.heads, scores = x.scores;
  std::vector<Op> core;
  // Q and K; under GQA Megatron-LM expands K and V to the query heads (repeat_interleave) first.
  core.push_back(keeping(gemm("scores q·kᵀ", s, keys, d, heads), 2.0 * x.rows * x.q * e));
  // Megatron-LM's fused causal softmax (scaled_upper_triang_masked_softmax.h) reads the unmasked
  // half of each row and writes all of it; its backward reads the unmasked half of y and dy and
  // writes dx. Past 2048 keys the fused kernel is unavailable (its assert) and PyTorch runs it in
  // fp32: cast, scale, mask, softmax, cast back — 36 bytes per score — and their backwards, 40.
  // Where Megatron-LM's kernel does not take the shape (megatronFusedSoftmax) it runs the same path.
  Op softmax = mem("scale-mask-softmax", 1.5 * scores * e);
  softmax.backward_bytes = 2.0 * scores * e;
  if (!megatronFusedSoftmax(x.heads, s, keys)) softmax.bytes = 36.0 * scores, softmax.backward_bytes = 40.0 * scores;
  // ALiBi (not in Megatron-LM; priced as an eager add): the scores read and written once more, plus
  // the (NH/t, s, keys) bias; the gradient passes through unchanged.
  if (x.alibi) {
    Op alibi = mem("alibi bias add", 2.0 * scores * e + heads / x.b * s * keys * e);
    alibi.backward_bytes = 0;
    core.push_back(alibi);
  }
  core.push_back(keeping(softmax, scores * e));  // its output
  // Dropout writes its output and a byte mask; its backward reads dy and the mask and writes dx.
  Op dropout = mem("attention dropout", 2.0 * scores * e + scores);
  dropout.backward_bytes = dropout.bytes;
  core.push_back(keeping(dropout, scores));  // the mask
  core.push_back(keeping(gemm("context p·v", s, d, keys, heads), scores * e + x.rows * x.q * e));  // P, V
  return core;
}

// Flash attention (PyTorch SDPA): Q·Kᵀ and P·V on chip, causal (half of the products), nothing of
// s×s in memory. FlashAttention-2 reaches 50-73% of A100 peak forward and backward (Dao 2023,
// Fig. 5-7). Under CP the rank's s/cp queries meet all s keys, a block of s/cp per ring step; the
// load-balanced chunks give every rank the same half of those products (Megatron-LM's context
// parallelism), and every block of K and V is read once.
std::vector<Op> flashAttention(const LayerShape& x) {
  // two products of s·keys·d, halved by causality (a sliding window: over its window_keys)
  Op fa = gemm("flash attention", x.s, x.window_keys, x.d, x.heads);
  // Q and O of the rank, every K and V block (GQA: the rank's KV heads, read once per query group)
  fa.bytes = 2.0 * x.b * (x.s * x.q + x.window_keys * x.core_kv) * x.e;
  // Its rate: FlashAttention-2's by the keys each query sweeps, head dim and causality
  // (flashEfficiency; GPT is causal); the backward's is set in backwardOps.
  fa.flash = 1;
  fa.efficiency_cap = flashEfficiency(x.window_keys, x.d, true, false);
  // Q, K, V, O, fp32 log-sum-exp
  std::vector<Op> core{keeping(fa, x.rows * (2.0 * x.q + 2.0 * x.core_kv) * x.e + 4.0 * x.heads * x.s)};
  if (x.bias_elems > 0) {  // the window's or ALiBi's bias, written and read by the core
    Op bias = mem("score bias", 2.0 * x.bias_elems * x.bias_e);
    bias.backward_bytes = x.bias_backward * x.bias_elems * x.bias_e;
    core.insert(core.begin(), bias);
  }
  return core;
}

// RoPE on the rank's q and k after the projection (HF rotate_half: q·cos + rotate_half(q)·sin):
// memory-bound, reading and writing q and k (the cos/sin table, s·HS, is negligible). It keeps
// nothing per token: its backward is the same rotation of dy by the constant table, and the rotated
// q and k are what the attention core keeps (its input). Megatron-LM's fused RoPE (TE) the same.
Op rope(const LayerShape& x) {
  Op o = mem("rope q, k", 2.0 * x.rows * (x.q + x.kv) * x.e);
  o.backward_bytes = o.bytes;
  return o;
}

// Attention block: LayerNorm → QKV GEMM (column-parallel) → core → projection (row-parallel) →
// bias + dropout + residual. Each op keeps its input unless said otherwise.
void addAttentionBlock(std::vector<Op>& F, const LayerShape& x, const std::vector<Op>& core) {
  F.push_back(layernorm(x, "layernorm 1"));
  // Q (NH·HS/t columns) and K, V (the rank's KV heads each: smaller under GQA).
  F.push_back(keeping(gemm("qkv", x.rows, x.q + 2.0 * x.kv, x.h), x.column_input));
  if (x.megatron && x.qkv_bias) {
    // The QKV layer adds its bias after the GEMM (F.linear on a 3-D input: matmul, then add); its
    // backward sums dy over the tokens for the bias gradient.
    Op bias = mem("qkv bias", 2.0 * x.qkv_out);
    bias.backward_bytes = x.qkv_out;
    F.push_back(bias);
  }
  if (x.rope) F.push_back(rope(x));
  F.insert(F.end(), core.begin(), core.end());
  F.push_back(keeping(gemm("projection", x.rows, x.h, x.q), x.rows * x.q * x.e));
  F.push_back(residual(x));
}

// SwiGLU MLP: [gate; up] (one column-parallel GEMM of 2F/t) → silu(gate)·up → down (row-parallel).
// The SiLU-multiply reads 2F and writes F. Megatron-LM's fused bias_swiglu
// (megatron/core/fusions/fused_bias_swiglu.py) and this runtime's fused fp32 CPU op (cpu_ops::swiglu)
// keep its input [gate; up] only (2F) and recompute silu in the backward (reading 2F and dy, writing
// 2F); elsewhere the runtime's eager silu and mul keep gate, silu(gate) and up (3F).
void addSwigluBlock(std::vector<Op>& F, const LayerShape& x) {
  const double f = x.rows * x.ffn * x.e;  // one (b, s, F/t) activation
  F.push_back(keeping(gemm("gate+up", x.rows, 2.0 * x.ffn, x.h), x.column_input));
  Op act = mem("silu-multiply", 3.0 * f);
  const bool fused = x.megatron || x.fused;
  if (fused) act.backward_bytes = 5.0 * f;
  F.push_back(keeping(act, (fused ? 2.0 : 3.0) * f));
  F.push_back(keeping(gemm("down", x.rows, x.h, x.ffn), f));
}

// MLP block: LayerNorm → fc1 (column) → bias + GeLU → fc2 (row) → bias + dropout + residual; or
// SwiGLU's three matrices.
void addMlpBlock(std::vector<Op>& F, const LayerShape& x) {
  F.push_back(layernorm(x, "layernorm 2"));
  if (x.swiglu) {
    addSwigluBlock(F, x);
    F.push_back(residual(x));
    return;
  }
  F.push_back(keeping(gemm("fc1", x.rows, x.ffn, x.h), x.column_input));
  const double hidden4 = x.rows * x.ffn * x.e;  // the (b, s, F/t) MLP activation (F = 4h for GPT)
  Op gelu = mem("bias-gelu", 2.0 * hidden4);
  if (x.megatron) gelu.backward_bytes = 4.0 * hidden4;  // dy and x in, dx out; dx again for the bias
  F.push_back(keeping(gelu, hidden4));
  F.push_back(keeping(gemm("fc2", x.rows, x.h, x.ffn), hidden4));
  F.push_back(residual(x));
}

// Backward: two GEMMs per GEMM; a memory-bound kernel reads its input(s) and the incoming gradient
// and writes the outgoing one: about 1.5× its forward traffic unless the op says otherwise.
std::vector<Op> backwardOps(const std::vector<Op>& F) {
  std::vector<Op> backward;
  for (const Op& o : F) {
    if (o.kind == Op::Kind::Gemm && o.name != "flash attention") {
      backwardOf(o, backward);
    } else if (o.kind == Op::Kind::Gemm) {  // flash attention backward: recomputes P, five products
      Op fb = o;
      fb.name = "flash attention backward";
      fb.batch = o.batch * 2.5;
      fb.bytes = 2.0 * o.bytes;  // Q, K, V, O, dO in; dQ, dK, dV out
      fb.flash = 2;
      fb.efficiency_cap = flashEfficiency(o.n, o.k, true, true);
      backward.push_back(fb);
    } else {
      Op m = o;
      m.name = o.name + " backward";
      m.bytes = o.backward_bytes >= 0 ? o.backward_bytes : 1.5 * o.bytes;
      backward.push_back(m);
    }
    backward.back().saved = 0;
  }
  return backward;
}

// Recomputation: full = the layer's forward again; selective = the attention core (Korthikanti et
// al.; this runtime's checkpointAttention reruns its SDPA call the same way), which then keeps only
// its input. What the layer keeps from its forward to its backward under either, or under none.
void setRecomputation(LayerOps& L, const std::vector<Op>& core, const LayerShape& x, Checkpointing ckpt) {
  double kept = 0, kept_by_core = 0;
  for (const Op& o : L.forward) kept += o.saved;
  for (const Op& o : core) kept_by_core += o.saved;
  switch (ckpt) {
    case Checkpointing::Full:
      L.recompute = L.forward;
      L.saved = x.act;  // the layer's input
      break;
    case Checkpointing::Selective:
      L.recompute = core;
      L.saved = kept - kept_by_core + x.core_in;
      break;
    case Checkpointing::None:
      L.saved = kept;
      L.saved_fp32 = x.megatron ? 0.0 : 4.0 * x.heads * x.s;
      break;
  }
}

}  // namespace

bool megatronFusedSoftmax(double attn_batches, double queries, double keys) {
  // Megatron-LM's FusedScaleMaskSoftmax.is_kernel_available (megatron/model/fused_softmax.py): the
  // fused kernel runs for 16 < keys <= 2048 (the 2021-2022 kernels' limit), queries and keys
  // multiples of 4, and b * np (the micro-batch's attention heads on this TP rank) a multiple of the
  // kernel's batches per block: get_batch_per_block = (128 threads / 32-lane warps) x 1 row per warp
  // = 4 once the keys pass 128 (2 rows per warp at <= 128 keys: 8).
  const double per_block = keys <= 128 ? 8.0 : 4.0;
  return keys > 16 && keys <= 2048 && std::fmod(queries, 4.0) == 0 && std::fmod(keys, 4.0) == 0 &&
         std::fmod(attn_batches, per_block) == 0;
}

LayerOps layerOps(const workloads::Workload& w, const Plan& p, Framework f, Attention a, bool moe, int64_t layer) {
  const LayerShape x = layerShape(w, p, f, layer);
  const bool unfused = keepsScores(a);  // every framework's default is flash (layer_ops.h)
  const std::vector<Op> core = unfused ? unfusedAttention(x) : flashAttention(x);
  LayerOps L;
  addAttentionBlock(L.forward, x, core);
  if (moe && w.isMoe()) {  // LayerNorm → router, experts, shared expert (moe.cpp) → residual
    L.forward.push_back(layernorm(x, "layernorm 2"));
    appendMoeMlp(L.forward, w, p, x.e);
    L.forward.push_back(residual(x));
  } else {
    addMlpBlock(L.forward, x);
  }
  L.backward = backwardOps(L.forward);
  setRecomputation(L, core, x, p.ckpt);
  applyFp8(L, p);
  // PyTorch's softmax path is five ops where the fused kernel is one (float, scale, masked_fill,
  // softmax, half), and five autograd nodes backward: 4 more each way on the host thread.
  if (unfused && !megatronFusedSoftmax(x.heads, x.s, x.keys)) L.extra_host_ops_forward = L.extra_host_ops_backward = 4;
  return L;
}

int64_t windowedLayersOfStage(const workloads::Workload& w, const Plan& p, int64_t stage) {
  if (w.windowedLayer(0)) return 0;  // every layer windowed, or none: layer 0 stands for all
  int64_t n = 0;
  for (int64_t l : layerIdsOfStage(w.n_layer, p.pp, stage, p.virtual_stages)) n += w.windowedLayer(l) ? 1 : 0;
  return n;
}

LayerOps headOps(const workloads::Workload& w, const Plan& p, Framework f) {
  const double b = double(p.mbs), s = double(p.localSeq()), h = double(w.n_embd), t = double(p.tp);
  const double V = double((w.vocab_size + p.tp - 1) / p.tp * p.tp), e = double(p.elementBytes());
  const double rows = b * s, local = p.sequence_parallel ? rows / t : rows;
  LayerOps L;
  Op final_norm = mem(w.norm == workloads::Norm::RMSNorm ? "final rmsnorm" : "final layernorm", 2.0 * local * h * e);
  L.forward.push_back(final_norm);
  const Op logits = gemm("lm head", rows, V / t, h);
  L.forward.push_back(logits);
  const double n = rows * V / t;  // logits of this rank
  if (f == Framework::Megatron) {
    // Megatron-LM casts the 16-bit logits to fp32 (fp16_lm_cross_entropy is off by default) and runs
    // its vocabulary-parallel cross-entropy (mpu/cross_entropy.py) as one kernel per step: the max,
    // subtracting it in place, exp in place, the sum, dividing by it in place (the softmax it keeps
    // for the backward). Backward: the softmax times the incoming gradient in place, then the cast's
    // backward to 16 bits. Bytes per logit: 6, 4, 8, 8, 4, 8; 8, 6.
    L.forward.push_back(mem("logits to fp32", 6.0 * n));
    L.forward.push_back(mem("cross-entropy max", 4.0 * n));
    L.forward.push_back(mem("cross-entropy subtract max", 8.0 * n));
    L.forward.push_back(mem("cross-entropy exp", 8.0 * n));
    L.forward.push_back(mem("cross-entropy sum", 4.0 * n));
    L.forward.push_back(mem("cross-entropy normalise", 8.0 * n));
    backwardOf(logits, L.backward);
    L.backward.push_back(mem("cross-entropy backward", 8.0 * n));
    L.backward.push_back(mem("logits to fp32 backward", 6.0 * n));
  } else {
    // This runtime's fused head walks the 16-bit logits in chunks: max, exp-sum and the loss.
    L.forward.push_back(mem("cross-entropy", 3.0 * n * e));
    backwardOf(logits, L.backward);
    L.backward.push_back(mem("cross-entropy backward", 2.0 * n * e));
  }
  const bool ln_backward = f == Framework::Megatron && w.norm == workloads::Norm::LayerNorm;
  L.backward.push_back(mem("final layernorm backward", (ln_backward ? 2.5 : 1.5) * final_norm.bytes));
  L.backward.back().name = final_norm.name + " backward";
  return L;
}

LayerOps embeddingOps(const workloads::Workload& w, const Plan& p) {
  const double rows = double(p.mbs) * double(p.localSeq()), h = double(w.n_embd), e = double(p.elementBytes());
  const double word = double((w.vocab_size + p.tp - 1) / p.tp) * h;  // V/t × h, this rank's rows
  LayerOps L;
  // The token rows gathered (and learned positions added: three tensors' traffic; RoPE or none: two).
  if (w.positions == workloads::Positions::Learned) L.forward.push_back(mem("embedding lookup + positions", 3.0 * rows * h * e));
  else L.forward.push_back(mem("embedding lookup", 2.0 * rows * h * e));
  // PyTorch's dense embedding backward zero-fills a gradient of the whole V/t × h table, then
  // scatter-adds the rows' gradients into it.
  L.backward.push_back(mem("embedding gradient zero-fill", word * e));
  L.backward.push_back(mem("embedding backward (scatter-add)", 3.0 * rows * h * 4.0));
  // Without PP a tied word embedding is also the LM head's weight: autograd sums its two gradients
  // (two tables in, one out). An untied head has its own weight and gradient.
  if (p.pp == 1 && w.tie_embeddings) L.backward.push_back(mem("tied embedding gradient sum", 3.0 * word * e));
  return L;
}

}  // namespace trainscope::models
