// hf_checkpoint.cpp — see hf_checkpoint.h. The inverse of parseHfDecoder (architecture.cpp) and
// of the GPT-2 config.json reader (workload.cpp): parse(hfConfigJson(w)) is w's architecture.
#include "trainscope/workloads/hf_checkpoint.h"

#include <cmath>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/json_text.h"

namespace trainscope::workloads {
namespace {

bool gpt2Shaped(const Workload& w) {
  return w.norm == Norm::LayerNorm && w.positions == Positions::Learned && w.mlp == Mlp::Gelu && w.qkv_bias &&
         w.proj_bias && w.mlp_bias && w.tie_embeddings && w.kvHeads() == w.n_head && w.head_dim == 0 &&
         w.ffnHidden() == 4 * w.n_embd && !w.isMoe() && std::abs(w.norm_eps - 1e-5) < 1e-12;
}

bool llamaShaped(const Workload& w) {
  return w.norm == Norm::RMSNorm && w.positions == Positions::Rope && w.mlp == Mlp::SwiGLU;
}

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

std::string hfUnsupported(const Workload& w) {
  if (gpt2Shaped(w)) return "";
  if (w.norm == Norm::LayerNorm && w.positions == Positions::Learned && w.mlp == Mlp::Gelu)
    return "a GPT-2 model in transformers has every bias, a tied head, full multi-head attention, an MLP of 4*n_embd, "
           "LayerNorm eps 1e-5 and no experts";
  if (!llamaShaped(w))
    return std::string("transformers has no model with norm ") + normName(w.norm) + ", positions " +
           positionsName(w.positions) + " and mlp " + mlpName(w.mlp) +
           " (gpt2: layernorm/learned/gelu; llama, mistral, qwen2, mixtral: rmsnorm/rope/swiglu)";
  if (w.isMoe() && (w.moe_every != 1 || w.shared_expert || w.mlp_bias || w.qkv_bias || w.proj_bias))
    return "a Mixtral model has a mixture of experts in every layer (moe_every 1), no shared expert and no biases";
  if (!w.isMoe() && w.qkv_bias && !w.proj_bias && w.mlp_bias)
    return "a Qwen2 model has biases on q, k, v only (not on the MLP)";
  if (!w.isMoe() && w.qkv_bias != w.proj_bias && !(w.qkv_bias && !w.proj_bias))
    return "a Llama model's attention_bias covers q, k, v and o together";
  return "";
}

std::string hfModelType(const Workload& w) {
  if (!hfUnsupported(w).empty()) return "";
  if (gpt2Shaped(w)) return "gpt2";
  if (w.isMoe()) return "mixtral";
  if (w.qkv_bias && !w.proj_bias) return "qwen2";
  if (w.sliding_window > 0 && !w.qkv_bias && !w.mlp_bias) return "mistral";
  return "llama";
}

std::string hfConfigJson(const Workload& w, const std::string& field) {
  const std::string type = hfModelType(w);
  if (type.empty())
    throw UserError(field, "workload " + w.name + " cannot be written as a Hugging Face config.json: " + hfUnsupported(w),
                    "use a workload of a shape transformers builds (gpt2, llama, mistral, qwen2, mixtral)");
  nlohmann::ordered_json j;
  j["model_type"] = type;
  if (type == "gpt2") {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["vocab_size"] = w.vocab_size;
    j["n_positions"] = w.n_positions;
    j["n_embd"] = w.n_embd;
    j["n_layer"] = w.n_layer;
    j["n_head"] = w.n_head;
    j["n_inner"] = nullptr;
    j["activation_function"] = "gelu_new";
    j["layer_norm_epsilon"] = 1e-5;
    // trainscope trains without dropout: transformers' defaults (0.1) would make another model in training.
    j["resid_pdrop"] = 0.0;
    j["embd_pdrop"] = 0.0;
    j["attn_pdrop"] = 0.0;
    j["initializer_range"] = 0.02;
    j["scale_attn_weights"] = true;
    j["tie_word_embeddings"] = true;
  } else {
    const char* arch = type == "llama" ? "LlamaForCausalLM" : type == "mistral" ? "MistralForCausalLM"
                     : type == "qwen2" ? "Qwen2ForCausalLM" : "MixtralForCausalLM";
    j["architectures"] = {arch};
    j["vocab_size"] = w.vocab_size;
    j["hidden_size"] = w.n_embd;
    j["intermediate_size"] = w.isMoe() ? w.expertHidden() : w.ffnHidden();
    j["num_hidden_layers"] = w.n_layer;
    j["num_attention_heads"] = w.n_head;
    j["num_key_value_heads"] = w.kvHeads();
    j["head_dim"] = w.headSize();
    j["hidden_act"] = "silu";
    j["max_position_embeddings"] = w.n_positions;
    j["rms_norm_eps"] = w.norm_eps;
    nlohmann::ordered_json rope = {{"rope_type", w.rope_scaling.factor != 0 ? "llama3" : "default"},
                                   {"rope_theta", w.rope_theta}};
    if (w.rope_scaling.factor != 0) {
      rope["factor"] = w.rope_scaling.factor;
      rope["low_freq_factor"] = w.rope_scaling.low_freq_factor;
      rope["high_freq_factor"] = w.rope_scaling.high_freq_factor;
      rope["original_max_position_embeddings"] = w.rope_scaling.original_max_position_embeddings;
    }
    j["rope_parameters"] = rope;
    j["tie_word_embeddings"] = w.tie_embeddings;
    j["attention_dropout"] = 0.0;
    if (type == "llama") {
      j["attention_bias"] = w.qkv_bias;
      j["mlp_bias"] = w.mlp_bias;
    }
    if (type == "mistral" || type == "mixtral")
      j["sliding_window"] = w.sliding_window > 0 ? nlohmann::ordered_json(w.sliding_window) : nlohmann::ordered_json();
    if (type == "qwen2") j["use_sliding_window"] = false;
    if (type == "mixtral") {
      j["num_local_experts"] = w.n_experts;
      j["num_experts_per_tok"] = w.top_k;
      j["router_aux_loss_coef"] = w.aux_loss_coeff;
      j["router_jitter_noise"] = 0.0;
      j["output_router_logits"] = false;
    }
  }
  j["dtype"] = "float32";
  j["name"] = w.name;
  if (!w.description.empty()) j["description"] = w.description;
  return j.dump(2) + "\n";
}

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
  const std::string moe = h + "block_sparse_moe.";
  if (rest == "mlp.router.weight") return {{moe + "gate.weight"}};
  if (rest == "mlp.experts.c_fc.weight" || rest == "mlp.experts.c_proj.weight") {
    if (shape.size() != 3) throw unknown();
    const int64_t F = w.expertHidden();
    std::vector<HfPiece> out;
    for (int64_t e = 0; e < shape[0]; ++e) {
      const std::string x = moe + "experts." + std::to_string(e) + ".";
      if (rest == "mlp.experts.c_fc.weight") {
        out.push_back({x + "w1.weight", e, 0, F});  // gate
        out.push_back({x + "w3.weight", e, F, F});  // up
      } else {
        out.push_back({x + "w2.weight", e});  // down
      }
    }
    return out;
  }
  throw unknown();
}

}  // namespace trainscope::workloads
