// memory.cpp — see memory.h.
#include "trainscope/workloads/memory.h"

namespace trainscope::workloads {

int64_t ParamTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The contract's flat layout (runtime/include/trainscope/runtime/gpt.h, GptWeights::flat), whole
// and unsharded: GPT-2 is the case where every optional tensor exists. Matrices are (out, in); a
// SwiGLU c_fc holds [gate; up] (2F rows); c_attn holds [q; k; v] ((H + 2·KV)·D rows); a MoE layer's
// experts are stacked on a leading E.
std::vector<ParamTensor> parameterTensors(const Workload& w) {
  const int64_t C = w.n_embd, V = w.vocab_size, D = w.headSize();
  const int64_t qkv = (w.n_head + 2 * w.kvHeads()) * D, q = w.n_head * D;
  const bool ln = w.norm == Norm::LayerNorm, swiglu = w.mlp == Mlp::SwiGLU;
  std::vector<ParamTensor> t = {{"wte", {V, C}}};
  if (w.positions == Positions::Learned) t.push_back({"wpe", {w.n_positions, C}});
  auto norm = [&](const std::string& n) {
    t.push_back({n + ".weight", {C}});
    if (ln) t.push_back({n + ".bias", {C}});
  };
  auto linear = [&](const std::string& n, std::vector<int64_t> shape, bool bias) {
    t.push_back({n + ".weight", shape});
    shape.pop_back();  // the bias: the weight's shape without its input dimension
    if (bias) t.push_back({n + ".bias", shape});
  };
  auto mlp = [&](const std::string& p, std::vector<int64_t> lead, int64_t F) {
    auto with = [&](std::vector<int64_t> s) { s.insert(s.begin(), lead.begin(), lead.end()); return s; };
    linear(p + "c_fc", with({swiglu ? 2 * F : F, C}), w.mlp_bias);
    linear(p + "c_proj", with({C, F}), w.mlp_bias);
  };
  for (int64_t l = 0; l < w.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    norm(h + "ln_1");
    linear(h + "attn.c_attn", {qkv, C}, w.qkv_bias);
    linear(h + "attn.c_proj", {C, q}, w.proj_bias);
    norm(h + "ln_2");
    if (!w.moeLayer(l)) {
      mlp(h + "mlp.", {}, w.ffnHidden());
      continue;
    }
    t.push_back({h + "mlp.router.weight", {w.n_experts, C}});
    mlp(h + "mlp.experts.", {w.n_experts}, w.expertHidden());
    if (w.shared_expert) mlp(h + "mlp.shared.", {}, w.sharedExpertHidden());
    if (w.shared_expert && w.shared_expert_gate) t.push_back({h + "mlp.shared_gate.weight", {1, C}});
  }
  norm("ln_f");
  if (!w.tie_embeddings) t.push_back({"lm_head.weight", {V, C}});
  return t;
}

int64_t optimizerStateBytes(const ParamTensor& t, OptimizerState o, bool momentum, int64_t k) {
  const int64_t n = t.numel();
  switch (o) {
    case OptimizerState::AdamW:
      return 8 * n;
    case OptimizerState::SGD:
      return momentum ? 4 * n : 0;
    case OptimizerState::Adam8bit: {
      const int64_t blocks = (n + k - 1) / k;
      return 2 * blocks * k + 8 * blocks;
    }
    case OptimizerState::Adafactor: {
      if (t.shape.size() < 2) return 4 * n;
      const int64_t r = t.shape[t.shape.size() - 2], c = t.shape.back();
      return 4 * (r + c) * (n / (r * c));  // one factored pair per leading index
    }
  }
  return 0;
}

ModelStateBytes modelStateBytes(const Workload& w, bool mixed, OptimizerState o, bool momentum, int64_t block) {
  ModelStateBytes b;
  for (const ParamTensor& t : parameterTensors(w)) {
    b.params += (mixed ? 6 : 4) * t.numel();
    b.grads += 4 * t.numel();  // fp32 main gradients; 16-bit ones are not kept (Megatron-LM's 18 bytes)
    b.optimizer += optimizerStateBytes(t, o, momentum, block);
  }
  return b;
}

}  // namespace trainscope::workloads
