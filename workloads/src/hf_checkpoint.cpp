// hf_checkpoint.cpp — see hf_checkpoint.h: where each flat tensor goes among transformers' names.
#include "trainscope/workloads/hf_checkpoint.h"

#include <stdexcept>

namespace trainscope::workloads {
namespace {

// "h.12.attn.c_attn.weight" → layer 12 and "attn.c_attn.weight"; -1 for a tensor outside the blocks.
int64_t splitLayer(const std::string& name, std::string* rest) {
  if (name.rfind("h.", 0) != 0) {
    *rest = name;
    return -1;
  }
  const size_t dot = name.find('.', 2);
  if (dot == std::string::npos) throw std::invalid_argument("hf_checkpoint: no tensor " + name);
  *rest = name.substr(dot + 1);
  return std::stoll(name.substr(2, dot - 2));
}

}  // namespace

std::vector<HfPiece> hfPieces(const Workload& w, const std::string& flat, const std::vector<int64_t>& shape) {
  const std::string type = hfModelType(w);
  std::string rest;
  const int64_t layer = splitLayer(flat, &rest);
  auto unknown = [&] { return std::invalid_argument("hf_checkpoint: no Hugging Face name for " + flat + " in a " + type + " model"); };
  if (type == "gpt2") {
    const std::string t = "transformer.";
    if (layer < 0) {
      if (flat == "wte") return {{t + "wte.weight"}};
      if (flat == "wpe") return {{t + "wpe.weight"}};
      if (flat == "ln_f.weight" || flat == "ln_f.bias") return {{t + flat}};
      throw unknown();
    }
    const std::string h = t + "h." + std::to_string(layer) + ".";
    // Conv1D stores its weight (in, out): the transpose of the runtime's (out, in).
    const bool conv = rest == "attn.c_attn.weight" || rest == "attn.c_proj.weight" || rest == "mlp.c_fc.weight" ||
                      rest == "mlp.c_proj.weight";
    HfPiece p{h + rest};
    p.transpose = conv;
    return {p};
  }
  if (type.empty()) throw unknown();
  if (layer < 0) {
    if (flat == "wte") return {{"model.embed_tokens.weight"}};
    if (flat == "ln_f.weight") return {{"model.norm.weight"}};
    if (flat == "lm_head.weight") return {{"lm_head.weight"}};
    throw unknown();
  }
  const std::string h = "model.layers." + std::to_string(layer) + ".";
  const int64_t q = w.n_head * w.headSize(), kv = w.kvHeads() * w.headSize();
  if (rest == "ln_1.weight") return {{h + "input_layernorm.weight"}};
  if (rest == "ln_2.weight") return {{h + "post_attention_layernorm.weight"}};
  for (const char* s : {"weight", "bias"}) {
    const std::string suffix = s;
    if (rest == "attn.c_attn." + suffix)
      return {{h + "self_attn.q_proj." + suffix, -1, 0, q},
              {h + "self_attn.k_proj." + suffix, -1, q, kv},
              {h + "self_attn.v_proj." + suffix, -1, q + kv, kv}};
    if (rest == "attn.c_proj." + suffix) return {{h + "self_attn.o_proj." + suffix}};
    const int64_t F = w.ffnHidden();
    if (rest == "mlp.c_fc." + suffix)
      return {{h + "mlp.gate_proj." + suffix, -1, 0, F}, {h + "mlp.up_proj." + suffix, -1, F, F}};
    if (rest == "mlp.c_proj." + suffix) return {{h + "mlp.down_proj." + suffix}};
  }
  // Qwen2-MoE: model.layers.L.mlp.{gate (the router), experts.E.{gate,up,down}_proj, shared_expert.{gate,up,
  // down}_proj, shared_expert_gate}; Mixtral: block_sparse_moe.{gate, experts.E.{w1, w3, w2}}.
  const bool qwen = type == "qwen2_moe";
  const std::string moe = h + (qwen ? "mlp." : "block_sparse_moe.");
  if (rest == "mlp.router.weight") return {{moe + "gate.weight"}};
  if (qwen) {
    const int64_t Fs = w.sharedExpertHidden();
    if (rest == "mlp.shared.c_fc.weight")
      return {{moe + "shared_expert.gate_proj.weight", -1, 0, Fs}, {moe + "shared_expert.up_proj.weight", -1, Fs, Fs}};
    if (rest == "mlp.shared.c_proj.weight") return {{moe + "shared_expert.down_proj.weight"}};
    if (rest == "mlp.shared_gate.weight") return {{moe + "shared_expert_gate.weight"}};
  }
  if (rest == "mlp.experts.c_fc.weight" || rest == "mlp.experts.c_proj.weight") {
    if (shape.size() != 3) throw unknown();
    const int64_t F = w.expertHidden();
    std::vector<HfPiece> out;
    for (int64_t e = 0; e < shape[0]; ++e) {
      const std::string x = moe + "experts." + std::to_string(e) + ".";
      if (rest == "mlp.experts.c_fc.weight") {
        out.push_back({x + (qwen ? "gate_proj.weight" : "w1.weight"), e, 0, F});  // gate
        out.push_back({x + (qwen ? "up_proj.weight" : "w3.weight"), e, F, F});    // up
      } else {
        out.push_back({x + (qwen ? "down_proj.weight" : "w2.weight"), e});  // down
      }
    }
    return out;
  }
  throw unknown();
}

}  // namespace trainscope::workloads
