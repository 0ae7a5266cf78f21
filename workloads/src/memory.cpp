// memory.cpp — see memory.h.
#include "trainscope/workloads/memory.h"

namespace trainscope::workloads {

int64_t ParamTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {
// A workload that is not GPT-2-shaped (architecture.h): its tensors in Hugging Face's Llama/Mixtral
// names and shapes (out, in), so that the model-state bytes (Adafactor's factored rows and columns
// included) are those of the real model. A MoE layer's experts are stacked on a leading E, each
// matrix separately, as the GPT runtime stacks its experts.
std::vector<ParamTensor> decoderTensors(const Workload& w) {
  const int64_t C = w.n_embd, V = w.vocab_size, q = w.n_head * w.headSize(), kv = w.kvHeads() * w.headSize();
  const bool ln = w.norm == Norm::LayerNorm, swiglu = w.mlp == Mlp::SwiGLU;
  std::vector<ParamTensor> t = {{"model.embed_tokens.weight", {V, C}}};
  if (w.positions == Positions::Learned) t.push_back({"model.embed_positions.weight", {w.n_positions, C}});
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
    if (swiglu) linear(p + "gate_proj", with({F, C}), w.mlp_bias);
    linear(p + "up_proj", with({F, C}), w.mlp_bias);
    linear(p + "down_proj", with({C, F}), w.mlp_bias);
  };
  for (int64_t l = 0; l < w.n_layer; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".";
    norm(h + "input_layernorm");
    linear(h + "self_attn.q_proj", {q, C}, w.qkv_bias);
    linear(h + "self_attn.k_proj", {kv, C}, w.qkv_bias);
    linear(h + "self_attn.v_proj", {kv, C}, w.qkv_bias);
    linear(h + "self_attn.o_proj", {C, q}, w.proj_bias);
    norm(h + "post_attention_layernorm");
    if (!w.moeLayer(l)) {
      mlp(h + "mlp.", {}, w.ffnHidden());
      continue;
    }
    t.push_back({h + "mlp.gate.weight", {w.n_experts, C}});  // the router
    mlp(h + "mlp.experts.", {w.n_experts}, w.expertHidden());
    if (w.shared_expert) mlp(h + "mlp.shared_expert.", {}, w.expertHidden());
  }
  norm("model.norm");
  if (!w.tie_embeddings) t.push_back({"lm_head.weight", {V, C}});
  return t;
}
}  // namespace

std::vector<ParamTensor> parameterTensors(const Workload& w) {
  if (!unsupportedForTraining(w).empty()) return decoderTensors(w);
  const int64_t C = w.n_embd, V = w.vocab_size, T = w.n_positions;
  std::vector<ParamTensor> t = {{"wte", {V, C}}, {"wpe", {T, C}}};
  for (int64_t l = 0; l < w.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    t.push_back({h + "ln_1.weight", {C}});
    t.push_back({h + "ln_1.bias", {C}});
    t.push_back({h + "attn.c_attn.weight", {3 * C, C}});
    t.push_back({h + "attn.c_attn.bias", {3 * C}});
    t.push_back({h + "attn.c_proj.weight", {C, C}});
    t.push_back({h + "attn.c_proj.bias", {C}});
    t.push_back({h + "ln_2.weight", {C}});
    t.push_back({h + "ln_2.bias", {C}});
    if (!w.moeLayer(l)) {
      t.push_back({h + "mlp.c_fc.weight", {4 * C, C}});
      t.push_back({h + "mlp.c_fc.bias", {4 * C}});
      t.push_back({h + "mlp.c_proj.weight", {C, 4 * C}});
      t.push_back({h + "mlp.c_proj.bias", {C}});
      continue;
    }
    // A MoE MLP (runtime/src/model/moe.h): the router, then the experts stacked on a leading E.
    const int64_t E = w.n_experts, F = w.expertHidden();
    t.push_back({h + "mlp.router.weight", {E, C}});
    t.push_back({h + "mlp.experts.c_fc.weight", {E, F, C}});
    t.push_back({h + "mlp.experts.c_fc.bias", {E, F}});
    t.push_back({h + "mlp.experts.c_proj.weight", {E, C, F}});
    t.push_back({h + "mlp.experts.c_proj.bias", {E, C}});
    if (w.shared_expert) {
      t.push_back({h + "mlp.shared.c_fc.weight", {F, C}});
      t.push_back({h + "mlp.shared.c_fc.bias", {F}});
      t.push_back({h + "mlp.shared.c_proj.weight", {C, F}});
      t.push_back({h + "mlp.shared.c_proj.bias", {C}});
    }
  }
  t.push_back({"ln_f.weight", {C}});
  t.push_back({"ln_f.bias", {C}});
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
