// trainscope/workloads/workload.h — decoder shapes, from tiny test models to GPT-3 175B and Llama 3.1 405B.
//
// A workload is a pre-norm decoder: token (+ learned position) embeddings, L blocks (causal
// self-attention, MLP), a final norm and an LM head. Its architecture fields (architecture.h)
// default to GPT-2's: LayerNorm with biases, learned positions, GELU MLP of 4C, full multi-head
// attention, head tied to the token embedding; Llama-family configs set them otherwise. This header knows shapes and counts only; it has no LibTorch in it, so the tuner's
// models and the command line can use it cheaply.
//
// Dimension vocabulary used across trainscope: B batch, T sequence, C hidden (n_embd),
// L layers, NH heads, HS head size (C/NH), V vocabulary.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/workloads/architecture.h"

namespace trainscope::workloads {

struct Workload {
  std::string name;         // e.g. "gpt2-124m"
  std::string description;  // one line
  int64_t n_layer = 0;      // L
  int64_t n_head = 0;       // NH
  int64_t n_embd = 0;       // C
  int64_t n_positions = 0;  // maximum T (rows of the position embedding)
  int64_t vocab_size = 0;   // V
  std::string source;       // file it was read from
  std::string origin;       // where the shape is published (a preset's "source" key)
  // What the file asks for that trainscope loads but does not train as asked (a Hugging Face
  // config's dropout), one sentence each; `trainscope run` prints them as notes.
  std::vector<std::string> notes;
  // A Hugging Face config's bos/eos/pad_token_id as it has them (a JSON object's text; "": none). They
  // do not change the model, but generation stops on eos: hfConfigJson writes them back, so a model
  // fine-tuned from SmolLM2 (eos 0) does not come out with LlamaConfig's default eos 2.
  std::string hf_token_ids;
  // The model_type of the Hugging Face config.json it was read from ("": not one). Two types can
  // build the same model (Mistral v0.3, sliding_window null, is a Llama without biases): the export
  // keeps the one the user gave (hf_config.h's hfModelType).
  std::string hf_model_type;

  // Architecture (architecture.h, docs/architectures.md). Defaults: GPT-2.
  Norm norm = Norm::LayerNorm;
  double norm_eps = 1e-5;
  bool qkv_bias = true;           // biases of the Q, K, V projections
  bool proj_bias = true;          // bias of the attention output projection
  bool mlp_bias = true;           // biases of the MLP's (and experts') matrices
  Positions positions = Positions::Learned;
  double rope_theta = 10000;      // RoPE base (positions == Rope)
  RopeScaling rope_scaling;       // Llama 3's frequency scaling; factor 0: none
  Mlp mlp = Mlp::Gelu;
  int64_t ffn_hidden = 0;         // the dense MLP's hidden width; 0: 4C
  int64_t n_kv_head = 0;          // K/V heads (GQA; 1: MQA); 0: n_head
  int64_t head_dim = 0;           // HS; 0: C / n_head
  bool tie_embeddings = true;     // LM head shares the token embedding
  int64_t sliding_window = 0;     // a Mistral/Qwen2 config's attention window; 0: none (see notes)
  int64_t window_from_layer = 0;  // the first windowed layer (Qwen2's max_window_layers); those before attend over all

  // Mixture of experts (docs/architecture.md, "Mixture of experts"). n_experts = 0: a dense GPT and
  // the other keys unset. Otherwise the MLP of the layers moeLayer(l) names — those moe_pattern marks
  // 1, or without a pattern those with l % moe_every == 0 (Megatron-LM's --moe-layer-freq: layer 0 is
  // one) — is E experts, each an MLP C -> F -> C of the workload's kind (`mlp`: GELU, or SwiGLU as
  // Mixtral's) and biases, behind a top-k router; the other layers' MLP is the dense one (ffnHidden()).
  int64_t n_experts = 0;          // E
  int64_t top_k = 1;              // k: 1 (Switch), 2 (GShard, Mixtral), 4 (Qwen1.5-MoE); at most E
  int64_t moe_every = 1;          // every k-th layer's MLP is a MoE
  // One entry per layer, 1: its MLP is a MoE, 0: dense (Megatron-LM's --moe-layer-freq list form; what a
  // Qwen2-MoE config's decoder_sparse_step and mlp_only_layers say). Empty: moe_every decides.
  std::vector<int> moe_pattern;
  int64_t moe_ffn_hidden = 0;     // F, an expert's hidden width; 0: 4C
  double capacity_factor = 0;     // 0: drop-less; else capacity = ceil(cf * tokens * k / E) per expert
  double aux_loss_coeff = 0.01;   // Switch/GShard load-balancing loss E * sum_e f_e * P_e
  double z_loss_coeff = 0;        // router z-loss (ST-MoE): mean over tokens of logsumexp(logits)^2
  bool shared_expert = false;     // one more expert of width F that every token passes through
  int64_t shared_expert_hidden = 0;  // the shared expert's width; 0: F (Qwen2-MoE's shared_expert_intermediate_size)
  // Qwen2-MoE's shared_expert_gate: the shared expert's output times sigmoid(x · g), g (C) a Linear(C, 1) without bias.
  bool shared_expert_gate = false;
  // The k chosen gates renormalised to sum to 1 (norm_topk_prob): -1 when k > 1 (GShard, Mixtral; Switch's
  // k = 1 keeps its probability), 1 always, 0 never (Qwen2-MoE's default: the softmax probabilities as they are).
  int norm_topk_prob = -1;

  int64_t headSize() const { return head_dim > 0 ? head_dim : n_embd / n_head; }  // HS
  int64_t kvHeads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int64_t ffnHidden() const { return ffn_hidden > 0 ? ffn_hidden : 4 * n_embd; }
  bool isMoe() const { return n_experts > 0; }
  // Whether layer l attends over a sliding window, and how many layers do (Qwen2: those from
  // max_window_layers on; Mistral, Mixtral: all).
  bool windowedLayer(int64_t l) const { return sliding_window > 0 && l >= window_from_layer; }
  int64_t windowedLayers() const { return sliding_window > 0 ? std::max<int64_t>(0, n_layer - window_from_layer) : 0; }
  bool moeLayer(int64_t l) const {
    if (!isMoe()) return false;
    if (!moe_pattern.empty()) return l >= 0 && l < int64_t(moe_pattern.size()) && moe_pattern[size_t(l)] != 0;
    return l % moe_every == 0;
  }
  int64_t moeLayers() const;                                          // how many layers have a MoE MLP
  int64_t expertHidden() const { return moe_ffn_hidden > 0 ? moe_ffn_hidden : 4 * n_embd; }  // F
  int64_t sharedExpertHidden() const { return shared_expert_hidden > 0 ? shared_expert_hidden : expertHidden(); }
  bool renormalisesGates() const { return norm_topk_prob < 0 ? top_k > 1 : norm_topk_prob == 1; }
  // Analytic parameter count: V*C + Tmax*C + L*(12*C*C + 13*C) + 2*C (tied head) for a dense GPT;
  // each MoE layer's MLP is instead a router E*C and (E + shared) experts of 2*C*F + F + C.
  // Other architectures: docs/architectures.md (checked against transformers' models).
  int64_t parameterCount() const;
  // The parameters one token passes through: each MoE layer counts its router, k experts and the
  // shared one. Dense: parameterCount(). MFU counts the FLOPs of these (flops.h).
  int64_t activeParameterCount() const;
};

// Throws UserError naming the field when a shape is invalid (non-positive, NH not dividing C) or
// absurd (more than 10,000 layers or 1e15 parameters: a typo, and the models would not cope).
void validate(const Workload& w);

// Loads a workload by name (a JSON file in the workloads directory) or by path. A path may also be
// a Hugging Face `config.json` of model_type gpt2 (n_layer/n_head/n_embd/n_positions/vocab_size) or
// llama, mistral, qwen2, mixtral (architecture.h), recognised by its `model_type`. Throws UserError for unknown names, unreadable files, missing, invalid or
// unknown fields (docs/config-reference.md, "Workload files").
Workload load(const std::string& name_or_path);

// Parses a workload from JSON text (either trainscope's or a Hugging Face config).
Workload parse(const std::string& json_text, const std::string& source);

// The directories searched for named workloads: $TRAINSCOPE_WORKLOADS, then the install/source dir.
std::vector<std::string> searchPath();
// Names of the workloads found on the search path, sorted.
std::vector<std::string> available();

}  // namespace trainscope::workloads
