// architecture_test.cpp — the decoder variants of workloads/architecture.h (issue 32, first piece):
// Hugging Face Llama-family configs, their refusals, presets' parameter counts against transformers,
// FLOPs of SwiGLU and GQA, and GPT workloads unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/runconfig/config.h"
#include "trainscope/workloads/architecture.h"
#include "trainscope/workloads/flops.h"
#include "trainscope/workloads/hf_config.h"
#include "trainscope/workloads/memory.h"
#include "trainscope/workloads/workload.h"

namespace ts = trainscope;
namespace wl = trainscope::workloads;

namespace {

// The UserError's field when parsing `text` fails; "" when it parses.
std::string refusedField(const std::string& text) {
  try {
    wl::parse(text, "test/config.json");
  } catch (const ts::UserError& e) {
    return e.field();
  }
  return "";
}

std::string refusal(const std::string& text) {
  try {
    wl::parse(text, "test/config.json");
  } catch (const ts::UserError& e) {
    return e.what();
  }
  return "";
}

const std::string kLlama = R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 176,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
  "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "hidden_act": "silu",
  "tie_word_embeddings": false, "attention_bias": false, "mlp_bias": false, "bos_token_id": 1,
  "initializer_range": 0.02, "torch_dtype": "bfloat16", "use_cache": true, "architectures": ["LlamaForCausalLM"]})";

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  text.replace(text.find(from), from.size(), to);
  return text;
}

std::string with(const std::string& base, const std::string& extra) {
  return base.substr(0, base.rfind('}')) + ", " + extra + "}";
}

}  // namespace

TEST(Architecture, LlamaConfigReadsEveryField) {
  const wl::Workload w = wl::parse(kLlama, "test/config.json");
  EXPECT_EQ(w.norm, wl::Norm::RMSNorm);
  EXPECT_DOUBLE_EQ(w.norm_eps, 1e-5);
  EXPECT_EQ(w.positions, wl::Positions::Rope);
  EXPECT_DOUBLE_EQ(w.rope_theta, 500000.0);
  EXPECT_EQ(w.mlp, wl::Mlp::SwiGLU);
  EXPECT_EQ(w.ffnHidden(), 176);
  EXPECT_EQ(w.n_head, 4);
  EXPECT_EQ(w.kvHeads(), 2);
  EXPECT_EQ(w.headSize(), 16);
  EXPECT_FALSE(w.tie_embeddings);
  EXPECT_FALSE(w.qkv_bias || w.proj_bias || w.mlp_bias);
  EXPECT_FALSE(w.isMoe());
  // embed 256*64 + 2 * (2 RMSNorm 64 + Q 64*64 + K,V 2*64*32 + O 64*64 + SwiGLU 3*64*176) + norm 64 + head 256*64
  EXPECT_EQ(w.parameterCount(), 256 * 64 + 2 * (2 * 64 + 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 176) + 64 + 256 * 64);
}

TEST(Architecture, LlamaBiasesAndExplicitHeadDim) {
  const wl::Workload w = wl::parse(
      replaced(kLlama, R"("attention_bias": false, "mlp_bias": false)", R"("attention_bias": true, "mlp_bias": true, "head_dim": 32)"),
      "test/config.json");
  EXPECT_TRUE(w.qkv_bias && w.proj_bias && w.mlp_bias);
  EXPECT_EQ(w.headSize(), 32);
}

TEST(Architecture, MistralQwen2MixtralConfigs) {
  const std::string shape = R"("hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 1, "vocab_size": 256, "max_position_embeddings": 256)";
  const wl::Workload mistral = wl::parse(R"({"model_type": "mistral", "sliding_window": 64, )" + shape + "}", "m.json");
  EXPECT_EQ(mistral.kvHeads(), 1);  // multi-query attention
  EXPECT_EQ(mistral.sliding_window, 64);
  EXPECT_FALSE(mistral.notes.empty());
  EXPECT_FALSE(mistral.qkv_bias || mistral.proj_bias || mistral.mlp_bias);

  const wl::Workload qwen = wl::parse(
      R"({"model_type": "qwen2", "use_sliding_window": false, "sliding_window": 64, "rms_norm_eps": 1e-6, )" + shape + "}",
      "q.json");
  EXPECT_TRUE(qwen.qkv_bias);  // Qwen2: biases on q, k, v only
  int64_t qwen_tensors = 0;
  for (const auto& t : wl::parameterTensors(qwen)) qwen_tensors += t.numel();
  EXPECT_EQ(qwen_tensors, qwen.parameterCount());
  EXPECT_FALSE(qwen.proj_bias || qwen.mlp_bias);
  EXPECT_EQ(qwen.sliding_window, 0);  // use_sliding_window false: full attention
  // use_sliding_window: the layers from max_window_layers on are windowed (transformers' default 28):
  // none of these 2, all of them, or layer 1 only (transformers' layer_types).
  const std::string qwen_window = R"({"model_type": "qwen2", "use_sliding_window": true, "sliding_window": 64, )";
  EXPECT_EQ(wl::parse(qwen_window + shape + "}", "q.json").sliding_window, 0);
  EXPECT_EQ(wl::parse(qwen_window + R"("max_window_layers": 0, )" + shape + "}", "q.json").sliding_window, 64);
  const wl::Workload partial = wl::parse(qwen_window + R"("max_window_layers": 1, )" + shape + "}", "q.json");
  EXPECT_EQ(partial.sliding_window, 64);
  EXPECT_EQ(partial.window_from_layer, 1);
  EXPECT_FALSE(partial.windowedLayer(0));
  EXPECT_TRUE(partial.windowedLayer(1));
  EXPECT_EQ(partial.windowedLayers(), 1);
  // layer_types as transformers writes it: agreeing, it loads; another pattern is refused naming it.
  const std::string agreeing = R"("max_window_layers": 1, "layer_types": ["full_attention", "sliding_attention"], )";
  EXPECT_EQ(wl::parse(qwen_window + agreeing + shape + "}", "q.json").window_from_layer, 1);
  for (const char* bad : {R"("max_window_layers": 1, "layer_types": ["sliding_attention", "full_attention"], )",
                          R"("max_window_layers": 0, "layer_types": ["full_attention", "sliding_attention"], )",
                          R"("max_window_layers": 1, "layer_types": ["full_attention"], )",
                          R"("max_window_layers": 1, "layer_types": ["full_attention", "chunked_attention"], )"}) {
    try {
      wl::parse(qwen_window + bad + shape + "}", "q.json");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const ts::UserError& e) {
      EXPECT_EQ(e.field(), "workload.layer_types") << bad;
    }
  }
  // Exported and read back: max_window_layers travels (transformers' default 28 would window none).
  const nlohmann::json exported = nlohmann::json::parse(wl::hfConfigJson(partial, "--format"));
  EXPECT_EQ(exported["max_window_layers"], 1);
  EXPECT_EQ(wl::parse(exported.dump(), "e.json").window_from_layer, 1);
  EXPECT_DOUBLE_EQ(qwen.norm_eps, 1e-6);

  const wl::Workload mixtral = wl::parse(
      R"({"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2, "router_aux_loss_coef": 0.02, )" +
          shape + "}",
      "x.json");
  EXPECT_EQ(mixtral.n_experts, 4);
  EXPECT_EQ(mixtral.top_k, 2);
  EXPECT_EQ(mixtral.expertHidden(), 128);
  EXPECT_EQ(mixtral.mlp, wl::Mlp::SwiGLU);
  EXPECT_DOUBLE_EQ(mixtral.rope_theta, 1e6);  // MixtralConfig's default
  EXPECT_DOUBLE_EQ(mixtral.aux_loss_coeff, 0.02);
  // Experts are SwiGLU without biases: router 4*64 + 4 experts * 3*64*128 per layer; active: 2 experts.
  const int64_t attn = 64 * 64 + 2 * 64 * 16 + 64 * 64, norms = 2 * 64;
  const int64_t base = 2 * 256 * 64 + 64 + 2 * (attn + norms + 4 * 64);
  EXPECT_EQ(mixtral.parameterCount(), base + 2 * 4 * 3 * 64 * 128);
  EXPECT_EQ(mixtral.activeParameterCount(), base + 2 * 2 * 3 * 64 * 128);
}

// Qwen2-MoE (transformers' Qwen2MoeConfig): a shared expert of its own width behind a sigmoid gate,
// gates renormalised per norm_topk_prob (false by default), q/k/v biases per qkv_bias (true by
// default), and the layouts trainscope does not build refused naming their key.
TEST(Architecture, Qwen2MoeConfig) {
  const std::string qwen = R"({"model_type": "qwen2_moe", "hidden_size": 64, "intermediate_size": 176,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
    "max_position_embeddings": 128, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 96,
    "shared_expert_intermediate_size": 160})";
  const wl::Workload w = wl::parse(qwen, "q.json");
  EXPECT_EQ(w.n_experts, 4);
  EXPECT_EQ(w.top_k, 2);
  EXPECT_EQ(w.moe_every, 1);
  EXPECT_EQ(w.expertHidden(), 96);
  EXPECT_TRUE(w.shared_expert);
  EXPECT_TRUE(w.shared_expert_gate);
  EXPECT_EQ(w.sharedExpertHidden(), 160);
  EXPECT_FALSE(w.renormalisesGates());  // Qwen2MoeConfig's norm_topk_prob default
  EXPECT_TRUE(w.qkv_bias);
  EXPECT_FALSE(w.proj_bias);
  EXPECT_FALSE(w.mlp_bias);
  EXPECT_DOUBLE_EQ(w.norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(w.aux_loss_coeff, 0.001);
  EXPECT_EQ(w.capacity_factor, 0);
  EXPECT_TRUE(wl::parse(with(qwen, R"("norm_topk_prob": true)"), "q.json").renormalisesGates());
  EXPECT_FALSE(wl::parse(with(qwen, R"("qkv_bias": false)"), "q.json").qkv_bias);
  // Per layer: attention 64*64 + 2*64*32 + 64*64 + q/k/v biases 128, norms 128, router 4*64,
  // 4 experts * 3*64*96, the shared expert 3*64*160 and its gate 64; active: 2 experts.
  const int64_t attn = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 128, norms = 128;
  const int64_t base = 2 * 256 * 64 + 64 + 2 * (attn + norms + 4 * 64 + 3 * 64 * 160 + 64);
  EXPECT_EQ(w.parameterCount(), base + 2 * 4 * 3 * 64 * 96);
  EXPECT_EQ(w.activeParameterCount(), base + 2 * 2 * 3 * 64 * 96);
  int64_t n = 0;
  for (const auto& t : wl::parameterTensors(w)) n += t.numel();
  EXPECT_EQ(n, w.parameterCount());
  // FLOPs per token and MoE layer forward: router 2*64*4, 2 experts 2 * 6*64*96, shared 6*64*160 and gate 2*64.
  const auto moe = wl::stepFlops(w, 1, 8, wl::Recompute::None);
  wl::Workload dense = w;
  dense.n_experts = 0;
  dense.shared_expert = dense.shared_expert_gate = false;
  dense.shared_expert_hidden = 0;
  const auto d = wl::stepFlops(dense, 1, 8, wl::Recompute::None);
  const double per_token = 2 * 64 * 4 + 2 * 6 * 64 * 96 + 6 * 64 * 160 + 2 * 64 - 6 * 64 * 176;
  EXPECT_DOUBLE_EQ(moe.model - d.model, 3 * 8 * 2 * per_token);
  // What trainscope does not build, refused naming the key; decoder_sparse_step and mlp_only_layers'
  // values that name no layout (Qwen2MoeSparseMoeBlock where (l + 1) % step == 0 outside the list).
  EXPECT_EQ(refusedField(with(qwen, R"("decoder_sparse_step": 0)")), "workload.decoder_sparse_step");
  EXPECT_EQ(refusedField(with(qwen, R"("decoder_sparse_step": -1)")), "workload.decoder_sparse_step");
  EXPECT_EQ(refusedField(with(qwen, R"("decoder_sparse_step": 1.5)")), "workload.decoder_sparse_step");
  EXPECT_EQ(refusedField(with(qwen, R"("mlp_only_layers": [2])")), "workload.mlp_only_layers");  // L = 2
  EXPECT_EQ(refusedField(with(qwen, R"("mlp_only_layers": [-1])")), "workload.mlp_only_layers");
  EXPECT_EQ(refusedField(with(qwen, R"("mlp_only_layers": ["0"])")), "workload.mlp_only_layers");
  EXPECT_EQ(refusedField(with(qwen, R"("mlp_only_layers": 1)")), "workload.mlp_only_layers");
  EXPECT_EQ(refusedField(with(qwen, R"("decoder_sparse_step": 2)")), "");
  EXPECT_EQ(refusedField(with(qwen, R"("mlp_only_layers": [1])")), "");
  EXPECT_EQ(refusedField(with(qwen, R"("use_sliding_window": true)")), "workload.use_sliding_window");
  EXPECT_EQ(refusedField(with(qwen, R"("shared_expert_intermediate_size": 0)")),
            "workload.shared_expert_intermediate_size");
  EXPECT_EQ(refusedField(with(qwen, R"("norm_topk_prob": "yes")")), "workload.norm_topk_prob");
  EXPECT_EQ(refusedField(with(qwen, R"("mlp_only_layers": [], "decoder_sparse_step": 1)")), "");
  EXPECT_EQ(refusedField(with(kLlama, R"("moe_intermediate_size": 8)")), "workload.moe_intermediate_size");
  // Top-4 of 60 (Qwen1.5-MoE) is a top-k trainscope trains.
  EXPECT_EQ(wl::load("qwen1.5-moe-a2.7b").top_k, 4);
}

// Qwen2-MoE's dense layers (transformers' Qwen2MoeDecoderLayer: a Qwen2MoeSparseMoeBlock where
// (l + 1) % decoder_sparse_step == 0 and l is not in mlp_only_layers, else a Qwen2MoeMLP of
// intermediate_size): the workload's moe_pattern, and the parameter count transformers gives.
TEST(Architecture, Qwen2MoeDenseLayers) {
  const std::string qwen = R"({"model_type": "qwen2_moe", "hidden_size": 64, "intermediate_size": 176,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
    "max_position_embeddings": 128, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 96,
    "shared_expert_intermediate_size": 160})";
  const wl::Workload w = wl::parse(with(qwen, R"("decoder_sparse_step": 2, "mlp_only_layers": [0])"), "q.json");
  EXPECT_EQ(w.moe_pattern, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(w.moeLayers(), 2);
  EXPECT_FALSE(w.moeLayer(0));
  EXPECT_TRUE(w.moeLayer(3));
  // Per layer: attention + norms 12416 + 128; a MoE MLP 256 + 4*3*64*96 + 3*64*160 + 64; a dense one 3*64*176.
  const int64_t base = 2 * 256 * 64 + 64 + 4 * (12416 + 128), moe = 256 + 4 * 3 * 64 * 96 + 3 * 64 * 160 + 64;
  const int64_t dense = 3 * 64 * 176;
  EXPECT_EQ(w.parameterCount(), base + 2 * moe + 2 * dense);
  // transformers 5.25: sum(p.numel() for p in Qwen2MoeForCausalLM(Qwen2MoeConfig(**this config)).parameters()).
  EXPECT_EQ(w.parameterCount(), 360128);
  EXPECT_EQ(w.activeParameterCount(), base + 2 * (moe - 2 * 3 * 64 * 96) + 2 * dense);
  int64_t n = 0;
  for (const auto& t : wl::parameterTensors(w)) n += t.numel();
  EXPECT_EQ(n, w.parameterCount());
  // mlp_only_layers takes a layer that decoder_sparse_step gives experts: layer 3 dense as well.
  const wl::Workload w3 = wl::parse(with(qwen, R"("decoder_sparse_step": 2, "mlp_only_layers": [3])"), "q.json");
  EXPECT_EQ(w3.moe_pattern, (std::vector<int>{0, 1, 0, 0}));
  EXPECT_EQ(w3.parameterCount(), 289152);  // transformers, as above
  // Every layer from 0 on with experts every k-th is moe_every k (step 1: every layer; mlp_only_layers [1, 3]: k = 2).
  const wl::Workload w1 = wl::parse(with(qwen, R"("mlp_only_layers": [1, 3])"), "q.json");
  EXPECT_TRUE(w1.moe_pattern.empty());
  EXPECT_EQ(w1.moe_every, 2);
  EXPECT_EQ(wl::parse(qwen, "q.json").parameterCount(), 502080);  // transformers, decoder_sparse_step 1
  // No layer left with experts: a dense model, as num_experts 0 builds it.
  const wl::Workload none = wl::parse(with(qwen, R"("decoder_sparse_step": 5)"), "q.json");
  EXPECT_FALSE(none.isMoe());
  EXPECT_EQ(none.parameterCount(), base + 4 * dense);
  // trainscope's own key for the same choice, checked as the others.
  const std::string own = R"({"n_layer": 4, "n_head": 4, "n_embd": 64, "n_positions": 128, "vocab_size": 256,
    "n_experts": 4, "moe_pattern": [0, 1, 0, 1]})";
  EXPECT_EQ(wl::parse(own, "own.json").moe_pattern, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(refusedField(with(own, R"("moe_every": 2)")), "workload.moe_pattern");
  const std::string bad = R"({"n_layer": 4, "n_head": 4, "n_embd": 64, "n_positions": 128, "vocab_size": 256,
    "n_experts": 4, "moe_pattern": )";
  EXPECT_EQ(refusedField(bad + "[0, 1, 0]}"), "workload.moe_pattern");
  EXPECT_EQ(refusedField(bad + "[0, 2, 0, 1]}"), "workload.moe_pattern");
  EXPECT_EQ(refusedField(bad + "[0, 0, 0, 0]}"), "workload.moe_pattern");
  EXPECT_EQ(wl::parse(bad + "[1, 0, 1, 0]}", "own.json").moe_every, 2);
}

// trainscope's own workload keys for the same layer.
TEST(Architecture, OwnSharedExpertKeys) {
  const std::string own = R"({"n_layer": 2, "n_head": 4, "n_embd": 64, "n_positions": 128, "vocab_size": 256,
    "n_experts": 4, "top_k": 2, "moe_ffn_hidden": 96, "shared_expert": true, "shared_expert_hidden": 160,
    "shared_expert_gate": true, "norm_topk_prob": false})";
  const wl::Workload w = wl::parse(own, "own.json");
  EXPECT_EQ(w.sharedExpertHidden(), 160);
  EXPECT_TRUE(w.shared_expert_gate);
  EXPECT_FALSE(w.renormalisesGates());
  EXPECT_EQ(refusedField(replaced(own, R"("shared_expert": true)", R"("shared_expert": false)")),
            "workload.shared_expert_gate");
  EXPECT_EQ(refusedField(replaced(own, R"("shared_expert_hidden": 160)", R"("shared_expert_hidden": -1)")),
            "workload.shared_expert_hidden");
  EXPECT_EQ(refusedField(replaced(own, R"("shared_expert_gate": true)", R"("shared_expert_gate": 1)")),
            "workload.shared_expert_gate");
  EXPECT_EQ(refusedField(replaced(own, R"("top_k": 2)", R"("top_k": 5)")), "workload.top_k");
  EXPECT_EQ(refusedField(replaced(own, R"("top_k": 2)", R"("top_k": 0)")), "workload.top_k");
  // Without norm_topk_prob: renormalised when k > 1 (GShard), not for k = 1 (Switch), as before.
  const std::string plain = R"({"n_layer": 2, "n_head": 4, "n_embd": 64, "n_positions": 128, "vocab_size": 256,
    "n_experts": 4, "top_k": 2})";
  EXPECT_TRUE(wl::parse(plain, "p.json").renormalisesGates());
  EXPECT_FALSE(wl::parse(replaced(plain, R"("top_k": 2)", R"("top_k": 1)"), "p.json").renormalisesGates());
}

TEST(Architecture, Llama3RopeScalingAndTransformers5RopeParameters) {
  const wl::Workload w = wl::parse(
      with(kLlama, R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})"),
      "c.json");
  EXPECT_DOUBLE_EQ(w.rope_scaling.factor, 8.0);
  EXPECT_EQ(w.rope_scaling.original_max_position_embeddings, 8192);
  std::string v5 = kLlama;
  v5.replace(v5.find("\"rope_theta\": 500000.0"), 22, "\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 250000.0}");
  EXPECT_DOUBLE_EQ(wl::parse(v5, "c.json").rope_theta, 250000.0);
}

TEST(Architecture, RefusalsNameTheKey) {
  for (const char* type : {"yarn", "linear", "dynamic", "longrope"}) {
    const std::string text = with(kLlama, std::string(R"("rope_scaling": {"rope_type": ")") + type + R"(", "factor": 4.0})");
    EXPECT_EQ(refusedField(text), "workload.rope_scaling.rope_type") << type;
    EXPECT_NE(refusal(text).find(type), std::string::npos);
  }
  // The older spelling "type".
  EXPECT_EQ(refusedField(with(kLlama, R"("rope_scaling": {"type": "yarn", "factor": 4.0})")), "workload.rope_scaling.type");
  const std::string gemma = R"({"model_type": "gemma", "hidden_size": 64})";
  EXPECT_EQ(refusedField(gemma), "workload.model_type");
  EXPECT_NE(refusal(gemma).find("llama, mistral, qwen2, mixtral and qwen2_moe"), std::string::npos);
  // An unsupported model_type with an unsupported RoPE scaling (DeepSeek-V3's YaRN): both named.
  const std::string deepseek = R"({"model_type": "deepseek_v3", "rope_scaling": {"type": "yarn", "factor": 40}})";
  EXPECT_EQ(refusedField(deepseek), "workload.model_type");
  EXPECT_NE(refusal(deepseek).find(R"(rope_scaling.type "yarn")"), std::string::npos) << refusal(deepseek);
  EXPECT_EQ(refusal(gemma).find("rope_scaling"), std::string::npos);
  // The fix says how to price the model anyway: without the scaling.
  EXPECT_NE(refusal(with(kLlama, R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0})")).find("set rope_scaling to null"),
            std::string::npos);
  // Qwen2.5's use_mrope: false loads (its files carry it), true (Qwen2-VL's multimodal RoPE) is refused.
  std::string qwen = replaced(kLlama, R"("model_type": "llama")", R"("model_type": "qwen2")");
  qwen = replaced(qwen, R"("attention_bias": false, "mlp_bias": false)", R"("use_sliding_window": false)");
  EXPECT_NO_THROW(wl::parse(with(qwen, R"("use_mrope": false)"), "c.json"));
  EXPECT_EQ(refusedField(with(qwen, R"("use_mrope": true)")), "workload.use_mrope");
  EXPECT_EQ(refusedField(replaced(kLlama, R"("num_key_value_heads": 2)", R"("num_key_value_heads": 3)")), "workload.n_kv_head");
  std::string gelu = kLlama;
  gelu.replace(gelu.find("\"silu\""), 6, "\"gelu\"");
  EXPECT_EQ(refusedField(gelu), "workload.hidden_act");
  std::string no_ffn = kLlama;
  no_ffn.replace(no_ffn.find("\"intermediate_size\": 176,"), 25, "");
  EXPECT_EQ(refusedField(no_ffn), "workload.intermediate_size");
  EXPECT_EQ(refusedField(with(kLlama, R"("num_hiden_layers": 2)")), "workload.num_hiden_layers");  // misspelt
  EXPECT_EQ(refusedField(with(kLlama, R"("num_local_experts": 8)")), "workload.num_local_experts");
  EXPECT_EQ(refusedField(with(kLlama, R"("layer_types": ["sliding_attention", "full_attention"])")),
            "workload.layer_types");
}

TEST(Architecture, OwnWorkloadKeys) {
  const std::string own = R"({"n_layer": 2, "n_head": 4, "n_embd": 64, "n_positions": 128, "vocab_size": 256,
    "norm": "rmsnorm", "bias": false, "positions": "rope", "rope_theta": 10000, "mlp": "swiglu", "ffn_hidden": 176,
    "n_kv_head": 2, "tie_embeddings": false})";
  const wl::Workload w = wl::parse(own, "own.json");
  // The same shape as the Llama config above.
  EXPECT_EQ(w.parameterCount(), wl::parse(kLlama, "c.json").parameterCount());
  std::string bad = own;
  bad.replace(bad.find("\"rmsnorm\""), 9, "\"batchnorm\"");
  EXPECT_EQ(refusedField(bad), "workload.norm");
  EXPECT_NE(refusal(bad).find("layernorm | rmsnorm"), std::string::npos);
  bad = own;
  bad.replace(bad.find("\"ffn_hidden\": 176,"), 18, "");
  EXPECT_EQ(refusedField(bad), "workload.ffn_hidden");
  bad = own;
  bad.replace(bad.find("\"rope\""), 6, "\"alibi\"");
  EXPECT_EQ(refusedField(bad), "workload.rope_theta");
}

// Expected counts from transformers 5.25.0 (torch 2.11.0), AutoModelForCausalLM.from_config on the
// meta device: bench/arch_param_oracle.py, run by hand. Active: the routed experts' share k/E.
TEST(Architecture, PresetParameterCountsMatchTransformers) {
  struct Expect { const char* name; int64_t total, active; };
  const Expect cases[] = {
      {"tiny-llama", 125248, 125248},
      {"tiny-mixtral", 254784, 156480},
      {"llama3-8b", 8030261248, 8030261248},
      {"llama3-70b", 70553706496, 70553706496},
      {"llama3.1-405b", 405853388800, 405853388800},
      {"mistral-7b", 7248023552, 7248023552},
      {"qwen2.5-7b", 7615616512, 7615616512},
      {"mixtral-8x7b", 46702792704, 12879925248},
      {"tiny-qwen2-moe", 267456, 193728},
      {"qwen1.5-moe-a2.7b", 14315784192, 2689173504},  // the model card's 14.3B total, 2.7B active
  };
  for (const auto& c : cases) {
    const wl::Workload w = wl::load(c.name);
    EXPECT_EQ(w.parameterCount(), c.total) << c.name;
    EXPECT_EQ(w.activeParameterCount(), c.active) << c.name;
    EXPECT_EQ(wl::parameterCountF(w, false), double(c.total)) << c.name;
    EXPECT_FALSE(w.origin.empty()) << c.name;
    // The memory model's tensor list covers the same parameters.
    int64_t n = 0;
    for (const auto& t : wl::parameterTensors(w)) n += t.numel();
    EXPECT_EQ(n, c.total) << c.name;
  }
  const auto names = wl::available();
  for (const char* n : {"llama3-8b", "llama3.1-405b", "mixtral-8x7b", "tiny-llama", "tiny-mixtral", "qwen1.5-moe-a2.7b"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
}

// GPT workloads are unchanged: the closed-form GPT-2 count.
TEST(Architecture, GptWorkloadsUnchanged) {
  for (const char* n : {"tiny", "gpt2-124m", "gpt2-1.5b", "gpt3-175b"}) {
    const wl::Workload w = wl::load(n);
    const int64_t C = w.n_embd;
    EXPECT_EQ(w.parameterCount(), w.vocab_size * C + w.n_positions * C + w.n_layer * (12 * C * C + 13 * C) + 2 * C) << n;
  }
  EXPECT_EQ(wl::load("gpt2-124m").parameterCount(), 124439808);  // Hugging Face's gpt2
  // GPT shapes keep exactly the paper's FLOPs.
  const wl::Workload g = wl::load("gpt2-124m");
  for (auto r : {wl::Recompute::None, wl::Recompute::Selective, wl::Recompute::Full}) {
    const auto a = wl::stepFlops(g, 8, 1024, r), b = wl::stepFlops(8, 1024, g.n_layer, g.n_embd, g.vocab_size, r);
    EXPECT_EQ(a.model, b.model);
    EXPECT_EQ(a.hardware, b.hardware);
  }
}

// Hand-computed: tiny-llama shape (C 64, NH 4, KV 2, HS 16, F 176, L 2, V 256), B 1, s 8.
// Per token and layer, forward: Q 2*64*64 = 8192, K+V 4*64*32 = 8192, out 8192, core 4*8*64 = 2048,
// SwiGLU 3*2*64*176 = 67584: 94208; two layers 188416; head 2*64*256 = 32768; 221184 per token.
// Step = 3 forwards over 8 tokens = 5308416.
TEST(Architecture, FlopsCountSwiGluAndGqa) {
  const wl::Workload w = wl::parse(kLlama, "c.json");
  const auto f = wl::stepFlops(w, 1, 8, wl::Recompute::None);
  EXPECT_DOUBLE_EQ(f.model, 5308416.0);
  EXPECT_DOUBLE_EQ(f.hardware, 5308416.0);
  EXPECT_DOUBLE_EQ(wl::stepFlops(w, 1, 8, wl::Recompute::Full).hardware, 5308416.0 + 8 * 188416.0);
  EXPECT_DOUBLE_EQ(wl::stepFlops(w, 1, 8, wl::Recompute::Selective).hardware, 5308416.0 + 2 * 8 * 2048.0);
}

// run trains the Llama family (the runtime builds its blocks from the description), ALiBi and sliding
// windows under every parallel mode (CP too); resolve() refuses a tp that neither divides n_kv_head
// nor is a multiple of it.
TEST(Architecture, RunResolvesTheLlamaFamilyAndRefusesWhatTheRuntimeCannotBuild) {
  for (const char* n : {"tiny-llama", "tiny-mixtral"}) {
    trainscope::runconfig::TrainConfig c;
    c.workload = n;
    EXPECT_NO_THROW(trainscope::runconfig::resolve(c)) << n;
  }
  auto fieldOf = [](const std::string& workload, int64_t seq, int64_t tp, int64_t cp = 1) -> std::string {
    trainscope::runconfig::TrainConfig c;
    c.workload = workload;
    c.seq = seq;
    c.tp = tp;
    c.cp = cp;
    try {
      trainscope::runconfig::resolve(c, int(tp * cp));
    } catch (const ts::UserError& e) {
      return e.field();
    }
    return "";
  };
  const std::string dir = ::testing::TempDir();
  const std::string alibi = dir + "arch_alibi.json", window = dir + "arch_window.json";
  std::ofstream(alibi) << R"({"n_layer":2,"n_head":4,"n_embd":32,"n_positions":64,"vocab_size":128,"positions":"alibi"})";
  std::ofstream(window) << R"({"model_type": "mistral", "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128,
    "max_position_embeddings": 64, "rope_theta": 10000.0, "rms_norm_eps": 1e-05, "sliding_window": 16})";
  EXPECT_EQ(fieldOf(alibi, 16, 1), "");
  EXPECT_EQ(fieldOf(alibi, 16, 1, 2), "");
  // A window shorter than the sequence trains in one process and over the CP ring alike.
  EXPECT_EQ(fieldOf(window, 32, 1), "");
  EXPECT_EQ(fieldOf(window, 32, 1, 2), "");
  // tiny-llama: 4 heads, 2 K/V heads: tp 4 replicates them (4 % 2 == 0); tiny-llama's F 176 / 4 = 44.
  EXPECT_EQ(fieldOf("tiny-llama", 32, 4), "");
  trainscope::runconfig::TrainConfig gpt;
  gpt.workload = "tiny";
  EXPECT_NO_THROW(trainscope::runconfig::resolve(gpt));
}

// A config.json without "name" is named by its folder and stem; a file named without a folder is
// "./stem" ("llama31-8b.json" was "/llama31-8b" in predict's header and JSON). Either keeps a '/', so
// it is never taken for a preset's name.
TEST(Architecture, AFileWithoutNameIsNamedByItsFolderAndStem) {
  EXPECT_EQ(wl::parse(kLlama, "Llama-3.1-8B/config.json").name, "Llama-3.1-8B/config");
  EXPECT_EQ(wl::parse(kLlama, "/models/Llama-3.1-8B/config.json").name, "Llama-3.1-8B/config");
  EXPECT_EQ(wl::parse(kLlama, "llama31-8b.json").name, "./llama31-8b");
  EXPECT_EQ(wl::parse(kLlama, "./llama31-8b.json").name, "./llama31-8b");
  EXPECT_EQ(wl::parse(kLlama, "/llama31-8b.json").name, "./llama31-8b");
  const std::string gpt2 = R"({"model_type": "gpt2", "n_layer": 2, "n_head": 4, "n_embd": 32, "n_positions": 64,
    "vocab_size": 96})";
  EXPECT_EQ(wl::parse(gpt2, "gpt2.json").name, "./gpt2");
  EXPECT_EQ(wl::parse(gpt2, "openai-community-gpt2/config.json").name, "openai-community-gpt2/config");
  EXPECT_EQ(wl::parse(with(kLlama, R"("name": "mine")"), "x.json").name, "mine");
}

// --workload accepts a Hugging Face model folder (the one --init-from takes): its config.json is the
// workload. A folder without one is still refused naming --workload.
TEST(Architecture, AHuggingFaceModelFolderIsItsConfigJson) {
  const std::string dir = ::testing::TempDir() + "arch_hf_folder_Llama-3.1-8B";
  const std::string empty = ::testing::TempDir() + "arch_hf_folder_empty";
  std::filesystem::create_directories(dir);
  std::filesystem::create_directories(empty);
  std::ofstream(dir + "/config.json") << kLlama;
  const wl::Workload w = wl::load(dir);
  EXPECT_EQ(w.name, "arch_hf_folder_Llama-3.1-8B/config");
  EXPECT_EQ(w.parameterCount(), wl::parse(kLlama, "test/config.json").parameterCount());
  EXPECT_EQ(wl::load(dir + "/").name, "arch_hf_folder_Llama-3.1-8B/config");
  try {
    wl::load(empty);
    ADD_FAILURE() << "a folder without config.json was read";
  } catch (const ts::UserError& e) {
    EXPECT_EQ(e.field(), "--workload") << e.what();
  }
  // Named bare, as `huggingface-cli download --local-dir Llama-3.1-8B` leaves it in the working folder
  // (was: "unknown workload"); a bare name that is neither a preset nor such a folder is still refused.
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(::testing::TempDir());
  std::string bare_name, refused_field;
  int64_t bare_params = 0;
  try {
    const wl::Workload bare = wl::load("arch_hf_folder_Llama-3.1-8B");
    bare_name = bare.name;
    bare_params = bare.parameterCount();
    wl::load("arch_hf_folder_empty");
  } catch (const ts::UserError& e) {
    refused_field = e.field();
  }
  std::filesystem::current_path(before);
  EXPECT_EQ(bare_name, "arch_hf_folder_Llama-3.1-8B/config");
  EXPECT_EQ(bare_params, w.parameterCount());
  EXPECT_EQ(refused_field, "--workload");
}

// A key the file leaves out takes transformers' default for its model_type (5.25's configuration
// classes: MistralConfig().num_key_value_heads == 8 and .sliding_window == 4096, MixtralConfig()
// .rms_norm_eps == 1e-5, Qwen2Config(use_sliding_window=True).sliding_window == 4096), not one
// default for all: a hand-written Mistral config without num_key_value_heads was multi-head here and
// GQA 8 in transformers.
TEST(Architecture, MissingKeysTakeTransformersDefaultsPerModelType) {
  const std::string shape = R"("hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 2,
    "num_attention_heads": 32, "vocab_size": 256, "max_position_embeddings": 8192)";
  const wl::Workload mistral = wl::parse(R"({"model_type": "mistral", )" + shape + "}", "m.json");
  EXPECT_EQ(mistral.kvHeads(), 8);
  EXPECT_EQ(mistral.sliding_window, 4096);
  EXPECT_DOUBLE_EQ(mistral.norm_eps, 1e-6);
  EXPECT_EQ(wl::parse(R"({"model_type": "mistral", "sliding_window": null, )" + shape + "}", "m.json").sliding_window, 0);
  // transformers 5.25's MistralConfig refuses a null num_key_value_heads (strict field check): refused
  // naming the key (it used to read as num_attention_heads); LlamaConfig reads null as the heads.
  EXPECT_THROW(wl::parse(R"({"model_type": "mistral", "num_key_value_heads": null, )" + shape + "}", "m.json"),
               trainscope::UserError);
  EXPECT_EQ(wl::parse(R"({"model_type": "llama", "num_key_value_heads": null, )" + shape + "}", "l.json").kvHeads(), 32);
  const wl::Workload mixtral = wl::parse(R"({"model_type": "mixtral", "num_local_experts": 4, )" + shape + "}", "x.json");
  EXPECT_EQ(mixtral.kvHeads(), 8);
  EXPECT_EQ(mixtral.sliding_window, 0);
  EXPECT_DOUBLE_EQ(mixtral.norm_eps, 1e-5);
  const wl::Workload llama = wl::parse(R"({"model_type": "llama", )" + shape + "}", "l.json");
  EXPECT_EQ(llama.kvHeads(), 32);
  EXPECT_DOUBLE_EQ(llama.norm_eps, 1e-6);
  const wl::Workload qwen = wl::parse(R"({"model_type": "qwen2", "use_sliding_window": true, "max_window_layers": 0, )" +
                                          shape + "}", "q.json");
  EXPECT_EQ(qwen.kvHeads(), 32);
  EXPECT_EQ(qwen.sliding_window, 4096);
  EXPECT_EQ(wl::parse(R"({"model_type": "qwen2", )" + shape + "}", "q.json").sliding_window, 0);
}

// A config.json that is not an object (a list, a number) is refused naming what it is, with a fix.
TEST(Architecture, AConfigThatIsNotAnObjectIsRefusedWithAFix) {
  EXPECT_EQ(refusedField("[1, 2]"), "workload");
  EXPECT_NE(refusal("[1, 2]").find("not array"), std::string::npos) << refusal("[1, 2]");
  EXPECT_NE(refusal("[1, 2]").find("fix:"), std::string::npos) << refusal("[1, 2]");
  EXPECT_NE(refusal("3").find("not number"), std::string::npos) << refusal("3");
}
