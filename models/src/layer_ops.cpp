// layer_ops.cpp — the kernels of a layer (see layer_ops.h; derivation in docs/tuner.md).
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
  LayerOps L;
  auto& F = L.forward;
  // Attention block: LayerNorm → QKV GEMM (column-parallel) → core → projection (row-parallel) →
  // bias + dropout + residual.
  F.push_back(mem("layernorm 1", 2.0 * act));
  F.push_back(gemm("qkv", rows, 3.0 * h / t, h));
  std::vector<Op> core;
  const double heads = b * a / t, scores = heads * s * s;  // score elements of this rank
  if (megatron) {
    core.push_back(gemm("scores q·kᵀ", s, s, d, heads));
    core.push_back(mem("scale-mask-softmax", 2.0 * scores * e));
    core.push_back(mem("attention dropout", 2.0 * scores * e + scores));  // + a byte mask
    core.push_back(gemm("context p·v", s, d, s, heads));
  } else {
    // Flash attention (PyTorch SDPA): Q·Kᵀ and P·V on chip, causal (half of the products), nothing
    // of s×s in memory.
    // FlashAttention-2 reaches 50-73% of A100 peak forward and backward (Dao 2023, Fig. 5-7).
    Op fa = gemm("flash attention", s, s, d, heads);  // two products of s·s·d, halved by causality
    fa.bytes = 4.0 * s * d * heads * e;               // Q, K, V in, O out
    fa.efficiency_cap = 0.65;
    core.push_back(fa);
  }
  F.insert(F.end(), core.begin(), core.end());
  F.push_back(gemm("projection", rows, h, h / t));
  F.push_back(mem(megatron ? "bias-dropout-add" : "residual add", (megatron ? 3.0 * act + local * h : 3.0 * act)));
  // MLP block: LayerNorm → fc1 (column) → bias + GeLU → fc2 (row) → bias + dropout + residual.
  F.push_back(mem("layernorm 2", 2.0 * act));
  F.push_back(gemm("fc1", rows, 4.0 * h / t, h));
  F.push_back(mem("bias-gelu", 2.0 * rows * 4.0 * h / t * e));
  F.push_back(gemm("fc2", rows, h, 4.0 * h / t));
  F.push_back(mem(megatron ? "bias-dropout-add" : "residual add", (megatron ? 3.0 * act + local * h : 3.0 * act)));

  // Backward: two GEMMs per GEMM; a memory-bound kernel reads its input(s) and the incoming gradient
  // and writes the outgoing one: about 1.5× its forward traffic (softmax backward reads y and dy).
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
      m.bytes = 1.5 * o.bytes;
      L.backward.push_back(m);
    }
  }
  // Recomputation: full = the layer's forward again; selective (Korthikanti et al.) = the attention
  // core only (with flash attention nothing is saved there, so nothing is recomputed).
  if (p.ckpt == Checkpointing::Full) L.recompute = F;
  if (p.ckpt == Checkpointing::Selective && megatron) L.recompute = core;
  return L;
}

LayerOps headOps(const workloads::Workload& w, const Plan& p, Framework f) {
  const double b = double(p.mbs), s = double(p.seq), h = double(w.n_embd), t = double(p.tp);
  const double V = double((w.vocab_size + p.tp - 1) / p.tp * p.tp), e = double(p.elementBytes());
  const double rows = b * s, local = p.sequence_parallel ? rows / t : rows;
  LayerOps L;
  L.forward.push_back(mem("final layernorm", 2.0 * local * h * e));
  const Op logits = gemm("lm head", rows, V / t, h);
  L.forward.push_back(logits);
  // Vocabulary-parallel cross-entropy: max, exp-sum and the loss pass over fp32 logits (Megatron
  // reads the 16-bit logits and works in fp32); trainscope's fused head walks them in chunks.
  const double logit_bytes = rows * V / t * (f == Framework::Megatron ? 4.0 : e);
  L.forward.push_back(mem("cross-entropy", 3.0 * logit_bytes));
  backwardOf(logits, L.backward);
  L.backward.push_back(mem("cross-entropy backward", 2.0 * logit_bytes));
  L.backward.push_back(mem("final layernorm backward", 3.0 * local * h * e));
  return L;
}

LayerOps embeddingOps(const workloads::Workload& w, const Plan& p) {
  const double rows = double(p.mbs) * double(p.seq), h = double(w.n_embd), e = double(p.elementBytes());
  LayerOps L;
  L.forward.push_back(mem("embedding lookup + positions", 3.0 * rows * h * e));
  L.backward.push_back(mem("embedding backward (scatter-add)", 3.0 * rows * h * 4.0));
  return L;
}

}  // namespace trainscope::models
