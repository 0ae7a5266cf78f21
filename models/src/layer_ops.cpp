// layer_ops.cpp — the kernels of a layer (see layer_ops.h; derivation in docs/time-model.md).
#include "trainscope/models/layer_ops.h"

#include "trainscope/common/error.h"

namespace trainscope::models {

using runtime::Checkpointing;

Framework parseFramework(const std::string& s) {
  if (s == "trainscope") return Framework::Trainscope;
  if (s == "megatron") return Framework::Megatron;
  throw UserError("--framework", "unknown value \"" + s + "\"", "use trainscope or megatron");
}

const char* frameworkName(Framework f) { return f == Framework::Megatron ? "megatron" : "trainscope"; }

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

}  // namespace

LayerOps layerOps(const workloads::Workload& w, const Plan& p, Framework f) {
  const double b = double(p.mbs), s = double(p.seq), h = double(w.n_embd), t = double(p.tp);
  const double a = double(w.n_head), d = h / a, e = double(p.elementBytes());
  const double rows = b * s;                                  // tokens of the micro-batch
  const double local = p.sequence_parallel ? rows / t : rows; // rows a TP rank holds outside the GEMMs
  const double act = local * h * e;                           // one (b, s[/t], h) activation
  const bool megatron = f == Framework::Megatron;
  // What a column-parallel GEMM keeps of its input for the weight gradient: Megatron-LM keeps the
  // local shard under SP and all-gathers it again in the backward (Korthikanti et al. 2022, §4.2.2);
  // this runtime keeps the gathered (b, s, h) input.
  const double column_input = megatron ? act : rows * h * e;
  const double qkv_out = 3.0 * rows * h / t * e;  // Q, K, V of this rank: the attention core's input
  auto keeping = [](Op o, double saved) {
    o.saved = saved;
    return o;
  };
  LayerOps L;
  auto& F = L.forward;
  // Attention block: LayerNorm → QKV GEMM (column-parallel) → core → projection (row-parallel) →
  // bias + dropout + residual. Each op keeps its input unless said otherwise.
  // Megatron-LM's fused LayerNorm (fused_kernels/layer_norm_cuda_kernel.cu) reads x and dy twice in
  // its backward — once for the weight and bias gradients, once for dx — and writes dx: 2.5× its
  // forward's traffic.
  auto layernorm = [&](const char* name) {
    Op o = mem(name, 2.0 * act);
    if (megatron) o.backward_bytes = 5.0 * act;
    return keeping(o, act);
  };
  F.push_back(layernorm("layernorm 1"));
  F.push_back(keeping(gemm("qkv", rows, 3.0 * h / t, h), column_input));
  if (megatron) {
    // The QKV layer adds its bias after the GEMM (F.linear on a 3-D input: matmul, then add); its
    // backward sums dy over the tokens for the bias gradient.
    Op bias = mem("qkv bias", 2.0 * rows * 3.0 * h / t * e);
    bias.backward_bytes = rows * 3.0 * h / t * e;
    F.push_back(bias);
  }
  std::vector<Op> core;
  const double heads = b * a / t, scores = heads * s * s;  // score elements of this rank
  if (megatron) {
    core.push_back(keeping(gemm("scores q·kᵀ", s, s, d, heads), 2.0 * rows * h / t * e));  // Q and K
    // Megatron-LM's fused causal softmax (scaled_upper_triang_masked_softmax.h) reads the unmasked
    // half of each row and writes all of it; its backward reads the unmasked half of y and dy and
    // writes dx. Past 2048 keys the fused kernel is unavailable (its assert) and PyTorch runs it in
    // fp32: cast, scale, mask, softmax, cast back — 36 bytes per score — and their backwards, 40.
    Op softmax = mem("scale-mask-softmax", 1.5 * scores * e);
    softmax.backward_bytes = 2.0 * scores * e;
    if (p.seq > 2048) softmax.bytes = 36.0 * scores, softmax.backward_bytes = 40.0 * scores;
    core.push_back(keeping(softmax, scores * e));  // its output
    // Dropout writes its output and a byte mask; its backward reads dy and the mask and writes dx.
    Op dropout = mem("attention dropout", 2.0 * scores * e + scores);
    dropout.backward_bytes = dropout.bytes;
    core.push_back(keeping(dropout, scores));                                         // the mask
    core.push_back(keeping(gemm("context p·v", s, d, s, heads), scores * e + rows * h / t * e));  // P, V
  } else {
    // Flash attention (PyTorch SDPA): Q·Kᵀ and P·V on chip, causal (half of the products), nothing
    // of s×s in memory.
    // FlashAttention-2 reaches 50-73% of A100 peak forward and backward (Dao 2023, Fig. 5-7).
    Op fa = gemm("flash attention", s, s, d, heads);  // two products of s·s·d, halved by causality
    fa.bytes = 4.0 * s * d * heads * e;               // Q, K, V in, O out
    fa.efficiency_cap = 0.65;
    core.push_back(keeping(fa, 4.0 * rows * h / t * e + 4.0 * heads * s));  // Q, K, V, O, fp32 log-sum-exp
  }
  F.insert(F.end(), core.begin(), core.end());
  F.push_back(keeping(gemm("projection", rows, h, h / t), rows * h / t * e));
  // Megatron's fused bias-dropout-add reads x and the residual and writes the sum and a byte mask,
  // which it keeps. Its backward: dx = dy·mask (dy and the mask in, dx out), the bias gradient (dx
  // again), and autograd's sum of the residual stream's two gradients at the block's input (two in,
  // one out). The runtime's residual add keeps nothing.
  const double mask = megatron ? local * h : 0.0;
  auto residual = [&]() {
    Op o = mem(megatron ? "bias-dropout-add" : "residual add", megatron ? 3.0 * act + mask : 3.0 * act);
    if (megatron) o.backward_bytes = 6.0 * act + mask;
    return keeping(o, mask);
  };
  F.push_back(residual());
  // MLP block: LayerNorm → fc1 (column) → bias + GeLU → fc2 (row) → bias + dropout + residual.
  F.push_back(layernorm("layernorm 2"));
  F.push_back(keeping(gemm("fc1", rows, 4.0 * h / t, h), column_input));
  const double hidden4 = rows * 4.0 * h / t * e;  // the (b, s, 4h/t) MLP activation
  Op gelu = mem("bias-gelu", 2.0 * hidden4);
  if (megatron) gelu.backward_bytes = 4.0 * hidden4;  // dy and x in, dx out; dx again for the bias
  F.push_back(keeping(gelu, hidden4));
  F.push_back(keeping(gemm("fc2", rows, h, 4.0 * h / t), hidden4));
  F.push_back(residual());

  // Backward: two GEMMs per GEMM; a memory-bound kernel reads its input(s) and the incoming gradient
  // and writes the outgoing one: about 1.5× its forward traffic unless the op says otherwise.
  for (const Op& o : F) {
    if (o.kind == Op::Kind::Gemm && o.name != "flash attention") {
      backwardOf(o, L.backward);
    } else if (o.kind == Op::Kind::Gemm) {  // flash attention backward: recomputes P, five products
      Op fb = o;
      fb.name = "flash attention backward";
      fb.batch = o.batch * 2.5;
      fb.bytes = 2.0 * o.bytes;  // Q, K, V, O, dO in; dQ, dK, dV out
      L.backward.push_back(fb);
    } else {
      Op m = o;
      m.name = o.name + " backward";
      m.bytes = o.backward_bytes >= 0 ? o.backward_bytes : 1.5 * o.bytes;
      L.backward.push_back(m);
    }
    L.backward.back().saved = 0;
  }
  // Recomputation: full = the layer's forward again; selective = the attention core (Korthikanti et
  // al.; this runtime's checkpointAttention reruns its SDPA call the same way), which then keeps only
  // its input.
  double kept = 0, kept_by_core = 0;
  for (const Op& o : F) kept += o.saved;
  for (const Op& o : core) kept_by_core += o.saved;
  switch (p.ckpt) {
    case Checkpointing::Full:
      L.recompute = F;
      L.saved = act;  // the layer's input
      break;
    case Checkpointing::Selective:
      L.recompute = core;
      L.saved = kept - kept_by_core + qkv_out;
      break;
    case Checkpointing::None:
      L.saved = kept;
      L.saved_fp32 = megatron ? 0.0 : 4.0 * heads * s;
      break;
  }
  return L;
}

LayerOps headOps(const workloads::Workload& w, const Plan& p, Framework f) {
  const double b = double(p.mbs), s = double(p.seq), h = double(w.n_embd), t = double(p.tp);
  const double V = double((w.vocab_size + p.tp - 1) / p.tp * p.tp), e = double(p.elementBytes());
  const double rows = b * s, local = p.sequence_parallel ? rows / t : rows;
  LayerOps L;
  Op final_norm = mem("final layernorm", 2.0 * local * h * e);
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
  L.backward.push_back(mem("final layernorm backward", (f == Framework::Megatron ? 2.5 : 1.5) * final_norm.bytes));
  return L;
}

LayerOps embeddingOps(const workloads::Workload& w, const Plan& p) {
  const double rows = double(p.mbs) * double(p.seq), h = double(w.n_embd), e = double(p.elementBytes());
  const double word = double((w.vocab_size + p.tp - 1) / p.tp) * h;  // V/t × h, this rank's rows
  LayerOps L;
  L.forward.push_back(mem("embedding lookup + positions", 3.0 * rows * h * e));
  // PyTorch's dense embedding backward zero-fills a gradient of the whole V/t × h table, then
  // scatter-adds the rows' gradients into it.
  L.backward.push_back(mem("embedding gradient zero-fill", word * e));
  L.backward.push_back(mem("embedding backward (scatter-add)", 3.0 * rows * h * 4.0));
  // Without PP the word embedding is also the LM head's weight: autograd sums its two gradients
  // (two tables in, one out).
  if (p.pp == 1) L.backward.push_back(mem("tied embedding gradient sum", 3.0 * word * e));
  return L;
}

}  // namespace trainscope::models
