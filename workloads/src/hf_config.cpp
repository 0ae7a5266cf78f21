// hf_config.cpp — see hf_config.h. The keys are transformers' own (GPT2Config, LlamaConfig,
// MistralConfig, Qwen2Config, MixtralConfig, Qwen2MoeConfig); the values are the ones architecture.cpp's reader maps
// back to the same Workload fields, so parse(hfConfigJson(w)) == w's architecture.
#include "trainscope/workloads/hf_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/json_text.h"

namespace trainscope::workloads {
namespace {

// GPT-2's shape exactly (what GPT2LMHeadModel builds): LayerNorm 1e-5 with biases, learned
// positions, a GELU MLP of 4C with biases, full multi-head attention, a tied head, dense.
bool gpt2Shaped(const Workload& w) {
  return w.norm == Norm::LayerNorm && std::abs(w.norm_eps - 1e-5) < 1e-12 && w.qkv_bias && w.proj_bias &&
         w.mlp_bias && w.positions == Positions::Learned && w.mlp == Mlp::Gelu && w.ffnHidden() == 4 * w.n_embd &&
         w.kvHeads() == w.n_head && w.headSize() * w.n_head == w.n_embd && w.tie_embeddings && !w.isMoe() &&
         w.sliding_window == 0;
}

// What every config.json ends with: the token ids of the config the model was read from (a
// fine-tuned Hub model keeps its own), the weights' dtype (transformers loads them as stored, fp32)
// and trainscope's name of the model (transformers keeps unknown keys as attributes).
std::string withOurs(nlohmann::ordered_json& j, const Workload& w) {
  if (!w.hf_token_ids.empty()) {
    const nlohmann::json ids = nlohmann::json::parse(w.hf_token_ids);  // a local: items() does not own it
    for (const auto& [key, value] : ids.items()) j[key] = value;
  }
  j["dtype"] = "float32";
  j["name"] = w.name;
  return jsonText(j, 2) + "\n";
}

}  // namespace

// ALiBi (positions alibi): transformers 5.x has three ALiBi models, and none computes trainscope's
// (Press et al. 2022: scores q·kᵀ/√d + m·(j − i), fp32 slopes, no other change to the layer) with
// any of its norms and MLPs, so no config.json would load as the same model (docs/checkpoints.md).
constexpr const char* kAlibiUnsupported =
    "positions alibi: no transformers model computes trainscope's ALiBi layer — BLOOM adds a LayerNorm after "
    "the word embedding (word_embeddings_layernorm), MPT's GELU is the erf form (trainscope's the tanh one) and "
    "its LayerNorms have no bias, Falcon (alibi: true) divides the bias by sqrt(head_dim) and rounds the slopes' "
    "products to bfloat16; and none pairs ALiBi with RMSNorm or SwiGLU";

std::string hfUnsupported(const Workload& w) {
  if (w.positions == Positions::Alibi) return kAlibiUnsupported;
  if (gpt2Shaped(w)) return "";
  if (w.norm != Norm::RMSNorm || w.positions != Positions::Rope || w.mlp != Mlp::SwiGLU)
    return std::string("norm ") + normName(w.norm) + ", positions " + positionsName(w.positions) + ", mlp " +
           mlpName(w.mlp) + " is neither GPT-2's shape (layernorm, learned, gelu, every bias, a tied head, full "
           "multi-head attention, 4*n_embd, no experts) nor the Llama family's (rmsnorm, rope, swiglu)";
  const bool qwen2 = w.qkv_bias && !w.proj_bias && !w.mlp_bias && !w.isMoe();
  if (w.sliding_window > 0 && w.window_from_layer > 0 && !qwen2)
    return "a window on layers " + std::to_string(w.window_from_layer) + " on only: only Qwen2 (max_window_layers; "
           "biases on q/k/v only) windows some layers";
  if (w.isMoe()) {
    // Mixtral (no shared expert) or Qwen2-MoE (a shared expert of its own width behind a sigmoid gate).
    const bool qwen = w.shared_expert;
    if (qwen && !w.shared_expert_gate)
      return "a shared expert without a gate: Qwen2-MoE's shared expert has its sigmoid gate (shared_expert_gate), "
             "Mixtral has no shared expert";
    if (w.proj_bias || w.mlp_bias || (!qwen && w.qkv_bias))
      return qwen ? "Qwen2-MoE's linears have no biases but the q/k/v projections'" : "Mixtral's linears have no biases";
    const std::string who = qwen ? "Qwen2-MoE" : "Mixtral";
    // Qwen2-MoE names its dense layers (mlp_only_layers); Mixtral's layers are all MoE.
    if (!qwen && w.moeLayers() != w.n_layer)
      return "Mixtral has experts in every layer (this workload has " + std::to_string(w.moeLayers()) + " of " +
             std::to_string(w.n_layer) + ")";
    if (w.capacity_factor > 0) return who + " is drop-less (capacity_factor " + std::to_string(w.capacity_factor) + ")";
    if (w.z_loss_coeff > 0) return who + "'s router has no z-loss";
    if (!qwen && !w.renormalisesGates()) return "Mixtral renormalises the chosen gates (norm_topk_prob is false)";
    if (qwen && w.sliding_window > 0)
      return "a sliding window on a Qwen2-MoE model: transformers' Qwen2-MoE windows alternate layers, trainscope "
             "the layers from one on";
    return "";
  }
  if (w.qkv_bias && !w.proj_bias && !w.mlp_bias) return "";  // Qwen2: biases on q, k, v only
  if (w.qkv_bias != w.proj_bias)
    return "biases on the q/k/v projections but not the output one, or the reverse (Llama's attention_bias covers "
           "all four; Qwen2's only q/k/v, without MLP biases)";
  if (w.sliding_window > 0 && (w.qkv_bias || w.mlp_bias)) return "a sliding window with biases (Mistral's linears have none)";
  return "";
}

std::string hfModelType(const Workload& w) {
  const std::string shape = hfShapeType(w);
  // Mistral without a window (v0.3: sliding_window null) builds what Llama without biases builds: the
  // type the config.json said is kept, so that an import -> export round trip keeps its model_type.
  if (shape == "llama" && w.hf_model_type == "mistral" && !w.qkv_bias && !w.proj_bias && !w.mlp_bias) return "mistral";
  // Qwen2-MoE with num_experts 0 (or every layer in mlp_only_layers): transformers builds every
  // layer's MLP as a dense Qwen2MoeMLP of intermediate_size, with q/k/v biases as qkv_bias says —
  // Qwen2's shape (Llama's without qkv_bias), under the same parameter names. The type is kept, and
  // the export says num_experts 0, so that import -> export keeps the model_type (it said qwen2).
  if ((shape == "qwen2" || (shape == "llama" && !w.qkv_bias)) && w.hf_model_type == "qwen2_moe" && !w.proj_bias &&
      !w.mlp_bias && w.sliding_window == 0)
    return "qwen2_moe";
  return shape;
}

std::string hfShapeType(const Workload& w) {
  if (!hfUnsupported(w).empty()) return "";
  if (gpt2Shaped(w)) return "gpt2";
  if (w.isMoe()) return w.shared_expert ? "qwen2_moe" : "mixtral";
  if (w.qkv_bias && !w.proj_bias && !w.mlp_bias) return "qwen2";
  if (w.sliding_window > 0) return "mistral";
  return "llama";
}

std::string hfConfigJson(const Workload& w, const std::string& field) {
  const std::string type = hfModelType(w);
  if (type.empty())
    throw UserError(field, "workload " + w.name + " has no Hugging Face config.json: " + hfUnsupported(w),
                    "export a workload of GPT-2's shape (model_type gpt2) or of the Llama family (RMSNorm, RoPE, "
                    "SwiGLU: llama, mistral, qwen2, mixtral, qwen2_moe); docs/architectures.md");
  nlohmann::ordered_json j;
  if (type == "gpt2") {
    // trainscope's GELU is the tanh approximation (gelu_new); no dropout (0 here, so the file reads
    // back without a dropout note).
    j = {{"model_type", "gpt2"},        {"architectures", {"GPT2LMHeadModel"}},
         {"n_layer", w.n_layer},        {"n_head", w.n_head},
         {"n_embd", w.n_embd},          {"n_positions", w.n_positions},
         {"n_inner", nullptr},          {"vocab_size", w.vocab_size},
         {"activation_function", "gelu_new"}, {"layer_norm_epsilon", w.norm_eps},
         {"resid_pdrop", 0.0},          {"embd_pdrop", 0.0},
         {"attn_pdrop", 0.0},           {"tie_word_embeddings", true},
         // GPT-2's end-of-text token is its last one (50256 of 50257): inside any vocabulary.
         {"bos_token_id", w.vocab_size - 1}, {"eos_token_id", w.vocab_size - 1}};
    return withOurs(j, w);
  }
  const std::string arch = type == "llama"     ? "LlamaForCausalLM"
                           : type == "mistral" ? "MistralForCausalLM"
                           : type == "qwen2"   ? "Qwen2ForCausalLM"
                           : type == "qwen2_moe" ? "Qwen2MoeForCausalLM"
                                               : "MixtralForCausalLM";
  j = {{"model_type", type},
       {"architectures", {arch}},
       {"hidden_size", w.n_embd},
       {"intermediate_size", w.isMoe() ? w.expertHidden() : w.ffnHidden()},
       {"num_hidden_layers", w.n_layer},
       {"num_attention_heads", w.n_head},
       {"num_key_value_heads", w.kvHeads()},
       {"head_dim", w.headSize()},
       {"vocab_size", w.vocab_size},
       {"max_position_embeddings", w.n_positions},
       {"hidden_act", "silu"},
       {"rms_norm_eps", w.norm_eps},
       {"rope_theta", w.rope_theta}};
  // transformers 4 reads rope_theta and rope_scaling; 5 folds both into rope_parameters on load.
  if (w.rope_scaling.factor > 0)
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", w.rope_scaling.factor},
                         {"low_freq_factor", w.rope_scaling.low_freq_factor},
                         {"high_freq_factor", w.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", w.rope_scaling.original_max_position_embeddings}};
  else
    j["rope_scaling"] = nullptr;
  j["tie_word_embeddings"] = w.tie_embeddings;
  j["attention_dropout"] = 0.0;
  if (type == "llama") {
    j["attention_bias"] = w.qkv_bias;
    j["mlp_bias"] = w.mlp_bias;
  }
  if (type == "mistral" || type == "mixtral")
    j["sliding_window"] = w.sliding_window > 0 ? nlohmann::ordered_json(w.sliding_window) : nlohmann::ordered_json();
  if (type == "qwen2") {
    j["use_sliding_window"] = w.sliding_window > 0;
    if (w.sliding_window > 0) j["sliding_window"] = w.sliding_window;
    if (w.sliding_window > 0) j["max_window_layers"] = w.window_from_layer;  // transformers' default is 28
  }
  if (type == "mixtral") {
    j["num_local_experts"] = w.n_experts;
    j["num_experts_per_tok"] = w.top_k;
    j["router_aux_loss_coef"] = w.aux_loss_coeff;
    // transformers adds the load-balancing loss to the loss only when the router logits are output.
    j["output_router_logits"] = w.aux_loss_coeff > 0;
    j["router_jitter_noise"] = 0.0;
  }
  if (type == "qwen2_moe" && !w.isMoe()) {  // every layer dense (num_experts 0: no router, no shared expert)
    j["intermediate_size"] = w.ffnHidden();
    j["qkv_bias"] = w.qkv_bias;
    j["use_sliding_window"] = false;
    j["num_experts"] = 0;
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = nlohmann::ordered_json::array();
    j["output_router_logits"] = false;
  } else if (type == "qwen2_moe") {
    j["intermediate_size"] = w.ffnHidden();  // the dense layers' (those in mlp_only_layers)
    j["qkv_bias"] = w.qkv_bias;
    j["use_sliding_window"] = false;
    j["num_experts"] = w.n_experts;
    j["num_experts_per_tok"] = w.top_k;
    j["moe_intermediate_size"] = w.expertHidden();
    j["shared_expert_intermediate_size"] = w.sharedExpertHidden();
    j["norm_topk_prob"] = w.renormalisesGates();
    // Every layer a MoE but those listed (transformers: (l + 1) % 1 == 0 and l not in mlp_only_layers).
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = nlohmann::ordered_json::array();
    for (int64_t l = 0; l < w.n_layer; ++l)
      if (!w.moeLayer(l)) j["mlp_only_layers"].push_back(l);
    j["router_aux_loss_coef"] = w.aux_loss_coeff;
    j["output_router_logits"] = w.aux_loss_coeff > 0;
  }
  return withOurs(j, w);
}

}  // namespace trainscope::workloads
