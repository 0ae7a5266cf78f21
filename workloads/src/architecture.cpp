// architecture.cpp — the decoder variants: their keys, their checks, their parameter count, and
// Hugging Face Llama-family config.json (llama, mistral, qwen2, mixtral).
#include "trainscope/workloads/architecture.h"

#include <algorithm>
#include <cmath>

#include "architecture_json.h"
#include "trainscope/common/error.h"
#include "trainscope/common/json_text.h"
#include "trainscope/workloads/workload.h"

namespace trainscope::workloads {

const char* normName(Norm n) { return n == Norm::RMSNorm ? "rmsnorm" : "layernorm"; }
const char* positionsName(Positions p) {
  switch (p) {
    case Positions::Rope: return "rope";
    case Positions::Alibi: return "alibi";
    case Positions::None: return "none";
    default: return "learned";
  }
}
const char* mlpName(Mlp m) { return m == Mlp::SwiGLU ? "swiglu" : "gelu"; }

namespace {

// One MLP of hidden width F: GELU c_fc (F, C) + c_proj (C, F); SwiGLU gate, up (F, C) + down (C, F).
template <class T>
T mlpParams(const Workload& w, T F) {
  const T C = T(w.n_embd);
  const T matrices = w.mlp == Mlp::SwiGLU ? T(3) : T(2);
  const T bias = w.mlp_bias ? (matrices - 1) * F + C : T(0);
  return matrices * C * F + bias;
}

template <class T>
T countParams(const Workload& w, bool active) {
  const T C = T(w.n_embd), L = T(w.n_layer), V = T(w.vocab_size);
  const T q = T(w.n_head) * T(w.headSize()), kv = T(w.kvHeads()) * T(w.headSize());
  const T norm = w.norm == Norm::LayerNorm ? 2 * C : C;
  const T attn = C * (q + 2 * kv) + (w.qkv_bias ? q + 2 * kv : T(0))  // Q, K, V projections
                 + q * C + (w.proj_bias ? C : T(0));                   // output projection
  const T dense_block = 2 * norm + attn + mlpParams<T>(w, T(w.ffnHidden()));
  const T embed = V * C + (w.positions == Positions::Learned ? T(w.n_positions) * C : T(0));
  const T head = w.tie_embeddings ? T(0) : V * C;
  T total = embed + L * dense_block + norm + head;
  if (w.isMoe()) {
    const T experts = T(active ? w.top_k : w.n_experts);
    T moe_mlp = C * T(w.n_experts) + experts * mlpParams<T>(w, T(w.expertHidden()));  // router (E, C)
    if (w.shared_expert)  // its own width (Qwen2-MoE), and its sigmoid gate's (1, C)
      moe_mlp += mlpParams<T>(w, T(w.sharedExpertHidden())) + (w.shared_expert_gate ? C : T(0));
    total += T(w.moeLayers()) * (moe_mlp - mlpParams<T>(w, T(w.ffnHidden())));
  }
  return total;
}

const std::vector<std::string> kArchKeys = {"norm", "norm_eps", "bias", "qkv_bias", "positions", "rope_theta",
                                            "rope_scaling", "mlp", "ffn_hidden", "n_kv_head", "head_dim",
                                            "tie_embeddings", "source"};

template <class E>
E pickEnum(const nlohmann::json& j, const char* key, const std::string& source,
           const std::vector<std::pair<const char*, E>>& values, E dflt) {
  if (!j.contains(key)) return dflt;
  std::string list;
  for (const auto& [n, v] : values) list += (list.empty() ? "" : " | ") + std::string(n);
  if (j[key].is_string())
    for (const auto& [n, v] : values)
      if (j[key] == n) return v;
  throw UserError(std::string("workload.") + key, jsonText(j[key]) + " in " + source + " is not supported",
                  "set " + std::string(key) + " to one of " + list);
}

int64_t intKey(const nlohmann::json& j, const char* key, const std::string& source, const char* field, int64_t dflt) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  if (!j[key].is_number_integer())
    throw UserError(std::string("workload.") + field, "must be an integer in " + source + ", got " + jsonText(j[key]),
                    "set " + std::string(key) + " to a positive integer");
  if (j[key].is_number_unsigned() && j[key].get<uint64_t>() > uint64_t(INT64_MAX))
    throw UserError(std::string("workload.") + field, jsonText(j[key]) + " in " + source + " is too large", "");
  return j[key].get<int64_t>();
}

double numKey(const nlohmann::json& j, const char* key, const std::string& source, const char* field, double dflt) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  if (!j[key].is_number())
    throw UserError(std::string("workload.") + field, "must be a number in " + source + ", got " + jsonText(j[key]),
                    "set " + std::string(key) + " to a positive number");
  return j[key].get<double>();
}

bool boolKey(const nlohmann::json& j, const char* key, const std::string& source, const char* field, bool dflt) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  if (!j[key].is_boolean())
    throw UserError(std::string("workload.") + field, "must be true or false in " + source + ", got " + jsonText(j[key]),
                    "set " + std::string(key) + " to true or false");
  return j[key].get<bool>();
}

// rope_scaling: null, {"rope_type": "default"} or Llama 3's {"rope_type": "llama3", factor, ...}.
// The other schemes change the positions (and, for YaRN, the attention scale): refused by name.
void parseRopeScaling(const nlohmann::json& j, const std::string& source, Workload* w) {
  if (!j.contains("rope_scaling") || j["rope_scaling"].is_null()) return;
  const nlohmann::json& r = j["rope_scaling"];
  if (!r.is_object())
    throw UserError("workload.rope_scaling", "must be an object or null in " + source, "remove rope_scaling");
  const char* type_key = r.contains("rope_type") ? "rope_type" : "type";
  const std::string type = r.contains(type_key) && r[type_key].is_string() ? r[type_key].get<std::string>() : "";
  if (type == "default") return;
  if (type != "llama3")
    throw UserError(std::string("workload.rope_scaling.") + type_key,
                    (r.contains(type_key) ? jsonText(r[type_key]) : std::string("missing")) + " in " + source +
                        " is not supported: trainscope supports RoPE without scaling (rope_scaling null or "
                        "rope_type \"default\") and Llama 3's scaling (rope_type \"llama3\") only",
                    "set rope_scaling to null to price and train the model at its unscaled context (YaRN, linear "
                    "and dynamic scaling change no parameter and no FLOP, only the positions' angles), or use "
                    "{\"rope_type\": \"llama3\", \"factor\", \"low_freq_factor\", \"high_freq_factor\", "
                    "\"original_max_position_embeddings\"}");
  w->rope_scaling.factor = numKey(r, "factor", source, "rope_scaling.factor", -1);
  // 0 is the workload's "no scaling": a file's factor 0 (or below 1) would be read as none. transformers
  // warns and computes inv_freq / 0; refused here, as a missing factor is (validateArchitecture).
  if (r.contains("factor") && !r["factor"].is_null() && !(w->rope_scaling.factor >= 1))
    throw UserError("workload.rope_scaling.factor", jsonText(r["factor"]) + " in " + source +
                    " is below 1 (Llama 3's scaling divides the low frequencies by it)",
                    "use the model's published factor: 8 (Llama 3.1) or 32 (Llama 3.2), or set rope_scaling to null");
  w->rope_scaling.low_freq_factor = numKey(r, "low_freq_factor", source, "rope_scaling.low_freq_factor", 1);
  w->rope_scaling.high_freq_factor = numKey(r, "high_freq_factor", source, "rope_scaling.high_freq_factor", 4);
  w->rope_scaling.original_max_position_embeddings = intKey(
      r, "original_max_position_embeddings", source, "rope_scaling.original_max_position_embeddings", 8192);
}

// transformers' layer_types (written by Qwen2Config and others into config.json): "full_attention" or
// "sliding_attention" per layer. trainscope windows a suffix of the layers (Qwen2's max_window_layers
// rule), so the list must be full layers then windowed ones, and agree with what the other keys say.
void parseLayerTypes(const nlohmann::json& j, const std::string& source, const std::string& type, Workload* w) {
  if (!j.contains("layer_types") || j["layer_types"].is_null()) return;
  const nlohmann::json& t = j["layer_types"];
  if (!t.is_array() || int64_t(t.size()) != w->n_layer)
    throw UserError("workload.layer_types", "must be a list of num_hidden_layers (" + std::to_string(w->n_layer) +
                    ") entries in " + source, "remove layer_types");
  int64_t from = w->n_layer;  // the first sliding layer
  for (int64_t l = 0; l < w->n_layer; ++l) {
    const nlohmann::json& v = t[size_t(l)];
    const bool sliding = v == "sliding_attention";
    if (!sliding && v != "full_attention")
      throw UserError("workload.layer_types", jsonText(v) + " (layer " + std::to_string(l) + ") in " + source +
                      " is not supported", "list only \"full_attention\" and \"sliding_attention\"");
    if (sliding && from == w->n_layer) from = l;
    if (!sliding && from < l)
      throw UserError("workload.layer_types", "a full-attention layer " + std::to_string(l) + " after sliding layer " +
                      std::to_string(from) + " in " + source + ": trainscope windows the layers from one on (Qwen2's "
                      "max_window_layers)", "list the full_attention layers first");
  }
  const bool windowed = w->sliding_window > 0;
  const int64_t ours = windowed ? w->window_from_layer : w->n_layer;
  if (from != ours)
    throw UserError("workload.layer_types", "windows the layers from " + std::to_string(from) + " on in " + source +
                    " but " + (type == "qwen2" ? "use_sliding_window, sliding_window and max_window_layers say " :
                                                 "sliding_window says ") + std::to_string(ours),
                    "make layer_types agree with them, or remove layer_types");
}

const std::vector<std::string> kHfDecoderTypes = {"llama", "mistral", "qwen2", "mixtral", "qwen2_moe"};

// The keys of LlamaConfig, MistralConfig, Qwen2Config, MixtralConfig and Qwen2MoeConfig that parseHfDecoder reads
// or that do not change the model (token ids, initialisation, caching, dtype), plus PretrainedConfig's
// common ones and trainscope's name/description/source. Unknown keys are refused only when they look
// like a misspelling of one of these (workload.cpp's refuseUnknownKeys).
const std::vector<std::string> kHfDecoderKeys = {
    "model_type", "architectures", "transformers_version", "torch_dtype", "dtype", "_name_or_path", "name",
    "description", "source", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings", "initializer_range",
    "rms_norm_eps", "use_cache", "pad_token_id", "bos_token_id", "eos_token_id", "pretraining_tp",
    "tie_word_embeddings", "rope_theta", "rope_scaling", "rope_parameters", "attention_bias", "attention_dropout",
    "mlp_bias", "vocab_size", "sliding_window", "use_sliding_window", "max_window_layers", "num_local_experts",
    "num_experts_per_tok", "output_router_logits", "router_aux_loss_coef", "router_jitter_noise",
    "layer_types", "num_experts", "moe_intermediate_size", "shared_expert_intermediate_size", "norm_topk_prob",
    "decoder_sparse_step", "mlp_only_layers", "qkv_bias", "use_mrope"};

}  // namespace

// The RoPE scaling of a config.json trainscope cannot read ("" when it has none or can): the key
// and its value, for a refusal that names it beside another reason (an unsupported model_type).
std::string unsupportedRopeScaling(const nlohmann::json& j) {
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!j.contains(key) || !j[key].is_object()) continue;
    const nlohmann::json& r = j[key];
    const char* type_key = r.contains("rope_type") ? "rope_type" : "type";
    if (!r.contains(type_key)) continue;
    const nlohmann::json& t = r[type_key];
    if (t != "default" && t != "llama3") return std::string(key) + "." + type_key + " " + jsonText(t);
  }
  return "";
}

double parameterCountF(const Workload& w, bool active) { return countParams<double>(w, active); }

int64_t Workload::parameterCount() const { return countParams<int64_t>(*this, false); }
int64_t Workload::activeParameterCount() const { return countParams<int64_t>(*this, true); }

const std::vector<std::string>& architectureKeys() { return kArchKeys; }
const std::vector<std::string>& hfDecoderKeys() { return kHfDecoderKeys; }

void parseArchitectureKeys(const nlohmann::json& j, const std::string& source, Workload* w) {
  w->norm = pickEnum<Norm>(j, "norm", source, {{"layernorm", Norm::LayerNorm}, {"rmsnorm", Norm::RMSNorm}}, w->norm);
  w->norm_eps = numKey(j, "norm_eps", source, "norm_eps", w->norm_eps);
  const bool bias = boolKey(j, "bias", source, "bias", true);
  w->qkv_bias = boolKey(j, "qkv_bias", source, "qkv_bias", bias);
  w->proj_bias = w->mlp_bias = bias;
  w->positions = pickEnum<Positions>(j, "positions", source,
                                     {{"learned", Positions::Learned}, {"rope", Positions::Rope},
                                      {"alibi", Positions::Alibi}, {"none", Positions::None}},
                                     w->positions);
  w->rope_theta = numKey(j, "rope_theta", source, "rope_theta", w->rope_theta);
  parseRopeScaling(j, source, w);
  w->mlp = pickEnum<Mlp>(j, "mlp", source, {{"gelu", Mlp::Gelu}, {"swiglu", Mlp::SwiGLU}}, w->mlp);
  w->ffn_hidden = intKey(j, "ffn_hidden", source, "ffn_hidden", 0);
  w->n_kv_head = intKey(j, "n_kv_head", source, "n_kv_head", 0);
  w->head_dim = intKey(j, "head_dim", source, "head_dim", 0);
  w->tie_embeddings = boolKey(j, "tie_embeddings", source, "tie_embeddings", true);
  if (w->mlp == Mlp::SwiGLU && w->ffn_hidden == 0)
    throw UserError("workload.ffn_hidden", "is required with mlp \"swiglu\" (" + source + ")",
                    "set ffn_hidden, e.g. 14336 for Llama 3 8B (SwiGLU has no conventional 4C width)");
  if (j.contains("rope_theta") && w->positions != Positions::Rope)
    throw UserError("workload.rope_theta", "is set in " + source + " but positions is not \"rope\"",
                    "set positions to \"rope\" or remove rope_theta");
}

bool isHfDecoder(const std::string& model_type) {
  return std::find(kHfDecoderTypes.begin(), kHfDecoderTypes.end(), model_type) != kHfDecoderTypes.end();
}

// Qwen2MoeConfig's experts (transformers' modeling_qwen2_moe): every layer l with (l + 1) %
// decoder_sparse_step == 0 and not in mlp_only_layers is a Qwen2MoeSparseMoeBlock — a router
// (softmax in fp32, then top-k, renormalised only under norm_topk_prob), num_experts SwiGLU experts
// of moe_intermediate_size, and a shared SwiGLU expert of shared_expert_intermediate_size whose
// output is multiplied by sigmoid(shared_expert_gate(x)) (a Linear(hidden, 1) without bias); the
// others a dense Qwen2MoeMLP of intermediate_size. That choice is the workload's moe_pattern (one
// entry per layer), moe_every where the pattern is every k-th layer from layer 0 (step 1: all).
static std::vector<int> qwen2MoePattern(const nlohmann::json& j, const std::string& source, int64_t n_layer) {
  const int64_t step = intKey(j, "decoder_sparse_step", source, "decoder_sparse_step", 1);
  if (step < 1)
    throw UserError("workload.decoder_sparse_step", "must be at least 1 in " + source + ", got " + std::to_string(step),
                    "set decoder_sparse_step to 1 (experts in every layer) or k (in layers k-1, 2k-1, ...)");
  if (n_layer <= 0 || n_layer > 10000) return {};  // validate() refuses num_hidden_layers itself
  std::vector<int> pattern(size_t(n_layer), 0);
  for (int64_t l = 0; l < n_layer; ++l) pattern[size_t(l)] = (l + 1) % step == 0 ? 1 : 0;
  if (!j.contains("mlp_only_layers") || j["mlp_only_layers"].is_null()) return pattern;
  const auto& only = j["mlp_only_layers"];
  if (!only.is_array())
    throw UserError("workload.mlp_only_layers", "must be a list of layer indices in " + source + ", got " + jsonText(only),
                    "set mlp_only_layers to e.g. [0] or []");
  for (const auto& v : only) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= n_layer)
      throw UserError("workload.mlp_only_layers", jsonText(v) + " in " + source + " is not a layer index in [0, " +
                      std::to_string(n_layer) + ") (num_hidden_layers " + std::to_string(n_layer) + ")",
                      "list layer indices from 0 to num_hidden_layers - 1");
    pattern[size_t(v.get<int64_t>())] = 0;
  }
  return pattern;
}

static void parseQwen2Moe(const nlohmann::json& j, const std::string& source, Workload* w) {
  w->n_experts = intKey(j, "num_experts", source, "num_experts", 60);
  if (w->n_experts == 0) return;  // every layer a dense Qwen2MoeMLP of intermediate_size
  w->moe_pattern = qwen2MoePattern(j, source, w->n_layer);
  w->moe_every = 1;
  if (!w->moe_pattern.empty() && w->moeLayers() == 0) {  // every layer dense, as num_experts 0 builds it
    w->n_experts = 0;
    w->moe_pattern.clear();
    w->notes.push_back(source + ": decoder_sparse_step and mlp_only_layers leave no layer with experts; every MLP is "
                       "the dense one of intermediate_size");
    return;
  }
  simplifyMoePattern(w);
  w->top_k = intKey(j, "num_experts_per_tok", source, "num_experts_per_tok", 4);
  w->moe_ffn_hidden = intKey(j, "moe_intermediate_size", source, "moe_intermediate_size", 1408);
  w->shared_expert = true;
  w->shared_expert_gate = true;
  w->shared_expert_hidden =
      intKey(j, "shared_expert_intermediate_size", source, "shared_expert_intermediate_size", 5632);
  if (w->moe_ffn_hidden <= 0)
    throw UserError("workload.moe_intermediate_size", "must be positive in " + source, "set moe_intermediate_size");
  if (w->shared_expert_hidden <= 0)
    throw UserError("workload.shared_expert_intermediate_size", "must be positive in " + source,
                    "set shared_expert_intermediate_size (5632 for Qwen1.5-MoE-A2.7B)");
  w->norm_topk_prob = boolKey(j, "norm_topk_prob", source, "norm_topk_prob", false) ? 1 : 0;
  w->capacity_factor = 0;  // drop-less, as transformers' experts
  w->aux_loss_coeff = numKey(j, "router_aux_loss_coef", source, "router_aux_loss_coef", 0.001);
}

// Sliding-window attention (every layer: Mistral's, Mixtral's; Qwen2's layers from
// max_window_layers on, under use_sliding_window, as transformers' Qwen2Config builds layer_types):
// the attention core's mask (query t sees keys t - window < j <= t), priced in layer_ops.cpp.
static void parseHfWindow(const nlohmann::json& j, const std::string& source, const std::string& type, Workload* w) {
  const bool window_used = type == "qwen2" ? boolKey(j, "use_sliding_window", source, "use_sliding_window", false)
                                           : (type == "mistral" || type == "mixtral");
  // Qwen2MoeConfig windows every other layer below max_window_layers ((i + 1) % 2 and i < max_window_layers):
  // not a suffix of the layers, which is what trainscope windows.
  if (type == "qwen2_moe" && boolKey(j, "use_sliding_window", source, "use_sliding_window", false))
    throw UserError("workload.use_sliding_window", "true in " + source + " is not supported: Qwen2-MoE windows "
                    "alternate layers below max_window_layers, and trainscope windows only the layers from one on",
                    "set use_sliding_window to false (as Qwen1.5-MoE and Qwen2-57B-A14B ship)");
  if (window_used) {
    w->sliding_window = intKey(j, "sliding_window", source, "sliding_window",
                               type != "mixtral" && !j.contains("sliding_window") ? 4096 : 0);
    // transformers' mask t − W < j ≤ t leaves a query no key at W ≤ 0 (NaN rows); null is "no window".
    if (j.contains("sliding_window") && !j["sliding_window"].is_null() && w->sliding_window <= 0)
      throw UserError("workload.sliding_window", std::to_string(w->sliding_window) + " in " + source +
                      " leaves each query no key to attend to", "set sliding_window to a positive number of tokens "
                      "(4096: Mistral-7B-v0.1), or to null for attention over the whole sequence");
  }
  if (type == "qwen2" && w->sliding_window > 0) {
    const int64_t from = intKey(j, "max_window_layers", source, "max_window_layers", 28);  // transformers' default
    if (from < 0) throw UserError("workload.max_window_layers", "must be >= 0 in " + source, "use 0 (every layer windowed)");
    if (from >= w->n_layer) w->sliding_window = 0;  // no layer is windowed
    else w->window_from_layer = from;
  }
  parseLayerTypes(j, source, type, w);
  if (w->sliding_window > 0)
    w->notes.push_back(source + " sets sliding_window " + std::to_string(w->sliding_window) + ": each query of " +
                       (w->window_from_layer > 0 ? "layers " + std::to_string(w->window_from_layer) + ".." +
                                                       std::to_string(w->n_layer - 1)
                                                 : std::string("every layer")) +
                       " attends over the last " + std::to_string(w->sliding_window) + " tokens");
}

// An integer key a config.json of `type` must have (absent or null: refused naming it).
static int64_t requiredInt(const nlohmann::json& j, const char* key, const std::string& source, const std::string& type) {
  if (!j.contains(key) || j[key].is_null())
    throw UserError(std::string("workload.") + key, "missing in " + source + " (a " + type + " config.json)",
                    std::string("add \"") + key + "\": <integer>");
  return intKey(j, key, source, key, 0);
}

// The attention heads: K/V heads and the head size, with transformers' defaults per model_type.
static void parseHfHeads(const nlohmann::json& j, const std::string& source, const std::string& type, Workload* w) {
  // A key the file leaves out takes transformers' default for its model_type (5.x's configuration
  // classes): MistralConfig and MixtralConfig default num_key_value_heads to 8, LlamaConfig and
  // Qwen2Config (and, for null, these two only: refuseNulls refuses the others') to num_attention_heads; rms_norm_eps is 1e-5 for Mixtral, 1e-6 otherwise;
  // MistralConfig's sliding_window is 4096, as Qwen2Config's under use_sliding_window (null in the file: none).
  // Qwen2MoeConfig's is 16 whatever the heads.
  const bool mistral_like = type == "mistral" || type == "mixtral";
  const int64_t kv_default = mistral_like ? 8 : type == "qwen2_moe" ? 16 : w->n_head;
  w->n_kv_head = intKey(j, "num_key_value_heads", source, "num_key_value_heads",
                        !j.contains("num_key_value_heads") ? kv_default : w->n_head);  // null: n_head
  // 0 would read as "the default" (n_head): transformers divides the heads by it (ZeroDivisionError).
  if (w->n_kv_head == 0)
    throw UserError("workload.num_key_value_heads", "0 in " + source + " is not a number of K/V heads",
                    "set num_key_value_heads to a divisor of num_attention_heads (" + std::to_string(w->n_head) +
                        "): 1 (MQA) up to num_attention_heads (MHA), or null for num_attention_heads");
  w->head_dim = intKey(j, "head_dim", source, "head_dim", 0);
  // 0 would read as "hidden_size / num_attention_heads"; transformers builds heads of 0 (and fails in RoPE).
  if (j.contains("head_dim") && !j["head_dim"].is_null() && w->head_dim == 0)
    throw UserError("workload.head_dim", "0 in " + source + " is not a head size",
                    "set head_dim to the model's head size (e.g. 128), or null for hidden_size / num_attention_heads");
  // LlamaConfig's validate_architecture refuses this whatever head_dim says (transformers 5.x).
  if (type == "llama" && w->n_head > 0 && w->n_embd > 0 && w->n_embd % w->n_head != 0)
    throw UserError("workload.num_attention_heads", std::to_string(w->n_head) + " does not divide hidden_size " +
                    std::to_string(w->n_embd) + " in " + source + " (transformers' LlamaConfig refuses it, head_dim or not)",
                    "choose num_attention_heads dividing hidden_size");
}

static void parseHfBiases(const nlohmann::json& j, const std::string& source, const std::string& type, Workload* w) {
  // Biases as transformers builds them: Llama's attention_bias (q, k, v, o) and mlp_bias; Qwen2 has
  // q, k, v biases only, Qwen2-MoE as its qkv_bias says (true by default); Mistral and Mixtral none.
  const bool attn_bias = type == "llama" && boolKey(j, "attention_bias", source, "attention_bias", false);
  w->qkv_bias = type == "qwen2" || attn_bias ||
                (type == "qwen2_moe" && boolKey(j, "qkv_bias", source, "qkv_bias", true));
  if (type != "qwen2_moe" && j.contains("qkv_bias") && !j["qkv_bias"].is_null() &&
      boolKey(j, "qkv_bias", source, "qkv_bias", w->qkv_bias) != w->qkv_bias)
    throw UserError("workload.qkv_bias", jsonText(j["qkv_bias"]) + " in " + source + " but a " + type +
                    " model's q/k/v biases are " + (w->qkv_bias ? "on" : "off") + " (only model_type qwen2_moe honours it)",
                    "remove qkv_bias");
  w->proj_bias = attn_bias;
  w->mlp_bias = type == "llama" && boolKey(j, "mlp_bias", source, "mlp_bias", false);
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (type != "llama" && j.contains(key) && boolKey(j, key, source, key, false))
      throw UserError(std::string("workload.") + key, "true in " + source + " but a " + type +
                      " model has no such biases (only model_type llama honours it)", std::string("remove ") + key);
}

// Mixtral's experts: every layer a MoE of num_local_experts SwiGLU experts of intermediate_size.
static void parseMixtral(const nlohmann::json& j, const std::string& source, Workload* w) {
  w->n_experts = requiredInt(j, "num_local_experts", source, "mixtral");
  if (w->n_experts < 1)
    throw UserError("workload.num_local_experts", std::to_string(w->n_experts) + " in " + source +
                    ": a mixtral model routes every token to its experts (transformers builds no MLP without them)",
                    "set num_local_experts (8: Mixtral-8x7B), or use model_type mistral for the dense model");
  w->top_k = intKey(j, "num_experts_per_tok", source, "num_experts_per_tok", 2);
  w->moe_every = 1;
  w->moe_ffn_hidden = w->ffn_hidden;
  w->capacity_factor = 0;  // transformers' Mixtral is drop-less
  w->aux_loss_coeff = numKey(j, "router_aux_loss_coef", source, "router_aux_loss_coef", 0.001);
  if (numKey(j, "router_jitter_noise", source, "router_jitter_noise", 0) != 0)
    throw UserError("workload.router_jitter_noise", "is not supported (" + source + ")", "set it to 0 or remove it");
  // transformers' Mixtral renormalises the chosen gates whatever k (top-1: a gate of 1).
  if (w->top_k == 1) w->norm_topk_prob = 1;
}

// A dense model_type with expert keys would be another model: refused by key.
static void refuseExpertKeys(const nlohmann::json& j, const std::string& source, const std::string& type) {
  for (const char* key : {"num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
                          "shared_expert_intermediate_size"})
    if (j.contains(key) && !j[key].is_null())
      throw UserError(std::string("workload.") + key, "is set in " + source + " but model_type " + type +
                      " is dense", "use model_type mixtral or qwen2_moe for a mixture of experts, or remove " +
                      std::string(key));
}

// Keys whose JSON null transformers 5.x refuses for a model_type (its configuration class's strict
// field check: "expected float, got NoneType"), or accepts but cannot build a model of (rope_theta:
// RoPE's inverse frequencies raise None to a power; Qwen2's and Qwen2-MoE's head_dim: the attention
// keeps None as the head size). Their null is refused naming the key, never read as trainscope's
// default. The nulls that mean something are read as transformers reads them: num_key_value_heads
// (llama, qwen2: num_attention_heads), head_dim (llama, mistral, mixtral: hidden_size /
// num_attention_heads), sliding_window (no window), rope_scaling, layer_types, mlp_only_layers.
struct NullRule {
  const char* key;
  const char* types;  // the model_types that refuse it ("": every one)
  const char* fix;
};
constexpr NullRule kNullRefused[] = {
    {"rms_norm_eps", "", "set rms_norm_eps to the model's epsilon (1e-5: Llama 2, Mistral; 1e-6: Qwen2), or remove it for "
                         "transformers' default"},
    {"rope_theta", "", "set rope_theta to the model's RoPE base (10000: Llama 2; 500000: Llama 3; 1e6: Mistral v0.3), or "
                       "remove it for transformers' default"},
    {"tie_word_embeddings", "", "set tie_word_embeddings to true or false, or remove it (false)"},
    {"attention_dropout", "", "set attention_dropout to 0.0, or remove it"},
    {"attention_bias", "llama", "set attention_bias to true or false, or remove it (false)"},
    {"mlp_bias", "llama", "set mlp_bias to true or false, or remove it (false)"},
    {"num_key_value_heads", "mistral mixtral qwen2_moe", "set num_key_value_heads to the model's K/V heads, or remove it "
                                                         "for transformers' default"},
    {"head_dim", "qwen2 qwen2_moe", "set head_dim to hidden_size / num_attention_heads, or remove it"},
    {"num_experts_per_tok", "mixtral qwen2_moe", "set num_experts_per_tok to the experts each token is routed to (2: "
                                                 "Mixtral; 4: Qwen1.5-MoE), or remove it for transformers' default"},
    {"num_experts", "mixtral qwen2_moe", "set num_experts to the number of experts, or remove it"},
    {"router_aux_loss_coef", "mixtral qwen2_moe", "set router_aux_loss_coef (0.001: transformers' default), or remove it"},
    {"router_jitter_noise", "mixtral", "set router_jitter_noise to 0, or remove it"},
    {"use_sliding_window", "qwen2 qwen2_moe", "set use_sliding_window to true or false, or remove it (false)"},
    {"max_window_layers", "qwen2 qwen2_moe", "set max_window_layers to the first windowed layer, or remove it"},
    {"norm_topk_prob", "qwen2_moe", "set norm_topk_prob to true or false, or remove it (false)"},
    {"moe_intermediate_size", "qwen2_moe", "set moe_intermediate_size to the experts' width, or remove it"},
    {"shared_expert_intermediate_size", "qwen2_moe", "set shared_expert_intermediate_size, or remove it"},
    {"qkv_bias", "qwen2_moe", "set qkv_bias to true or false, or remove it (true)"},
    {"decoder_sparse_step", "qwen2_moe", "set decoder_sparse_step (1: every layer), or remove it"},
};

static void refuseNulls(const nlohmann::json& j, const std::string& source, const std::string& type) {
  const auto refused = [&](const NullRule& r) {
    const std::string types = std::string(" ") + r.types + " ";
    return *r.types == 0 || types.find(" " + type + " ") != std::string::npos;
  };
  for (const NullRule& r : kNullRefused) {
    const bool in_params = std::string(r.key) == "rope_theta" && j.contains("rope_parameters") &&
                           j["rope_parameters"].is_object() && j["rope_parameters"].contains("rope_theta") &&
                           j["rope_parameters"]["rope_theta"].is_null();
    if (!refused(r) || !((j.contains(r.key) && j[r.key].is_null()) || in_params)) continue;
    throw UserError(std::string("workload.") + (in_params ? "rope_parameters.rope_theta" : r.key),
                    "is null in " + source + ": transformers refuses a null " + r.key + " for model_type " + type +
                        " (its configuration's field check, or the model it builds fails), so no default is assumed",
                    r.fix);
  }
}

void parseHfDecoder(const nlohmann::json& j, const std::string& source, Workload* w) {
  const std::string type = j["model_type"].get<std::string>();
  refuseNulls(j, source, type);
  auto need = [&](const char* key) { return requiredInt(j, key, source, type); };
  w->n_layer = need("num_hidden_layers");
  w->n_head = need("num_attention_heads");
  w->n_embd = need("hidden_size");
  w->vocab_size = need("vocab_size");
  w->n_positions = need("max_position_embeddings");
  parseHfHeads(j, source, type, w);
  w->ffn_hidden = need("intermediate_size");
  // 0 would read as "no width given" (4·hidden_size); transformers builds an MLP of width 0.
  if (w->ffn_hidden == 0)
    throw UserError("workload.intermediate_size", "0 in " + source + " is not an MLP width",
                    "set intermediate_size to the model's MLP width (14336: Llama 3 8B)");
  w->norm = Norm::RMSNorm;
  w->norm_eps = numKey(j, "rms_norm_eps", source, "rms_norm_eps", type == "mixtral" ? 1e-5 : 1e-6);
  w->positions = Positions::Rope;
  w->rope_theta = numKey(j, "rope_theta", source, "rope_theta", type == "mixtral" ? 1e6 : 10000);
  parseRopeScaling(j, source, w);
  // transformers 5 writes rope_theta and the scaling together as rope_parameters.
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) {
    if (!j["rope_parameters"].is_object())
      throw UserError("workload.rope_parameters", "must be an object in " + source, "remove rope_parameters");
    w->rope_theta = numKey(j["rope_parameters"], "rope_theta", source, "rope_parameters.rope_theta", w->rope_theta);
    parseRopeScaling(nlohmann::json{{"rope_scaling", j["rope_parameters"]}}, source, w);
  }
  w->mlp = Mlp::SwiGLU;
  w->tie_embeddings = boolKey(j, "tie_word_embeddings", source, "tie_word_embeddings", false);
  parseHfBiases(j, source, type, w);
  if (j.contains("hidden_act") && !(j["hidden_act"].is_string() && j["hidden_act"] == "silu"))
    throw UserError("workload.hidden_act", jsonText(j["hidden_act"]) + " in " + source + " is not supported",
                    "set hidden_act to \"silu\" (SwiGLU), as every " + type + " model has");
  // Qwen2's use_mrope (Qwen2.5 files carry false): multimodal RoPE, the positions of Qwen2-VL.
  if (boolKey(j, "use_mrope", source, "use_mrope", false))
    throw UserError("workload.use_mrope", "true in " + source + " is not supported: multimodal RoPE (Qwen2-VL's "
                    "3-D positions) is not the 1-D RoPE trainscope trains", "set use_mrope to false or remove it");
  if (numKey(j, "attention_dropout", source, "attention_dropout", 0) != 0)
    w->notes.push_back(source + " sets attention_dropout; trainscope trains without dropout, so it is ignored");
  if (intKey(j, "pretraining_tp", source, "pretraining_tp", 1) != 1)
    w->notes.push_back(source + " sets pretraining_tp, which only slices the GEMMs in transformers; the model is the same");
  parseHfWindow(j, source, type, w);
  if (type == "qwen2_moe") {
    parseQwen2Moe(j, source, w);
  } else if (type == "mixtral") {
    parseMixtral(j, source, w);
  } else {
    refuseExpertKeys(j, source, type);
  }
}

void validateArchitecture(const Workload& w, const std::string& where) {
  if (!(w.norm_eps > 0 && w.norm_eps < 1))
    throw UserError("workload.norm_eps", "(rms_norm_eps in a Hugging Face config) must be in (0, 1), got " + std::to_string(w.norm_eps) + " (" + where + ")",
                    "use 1e-5 (GPT-2, Llama) or 1e-6 (Qwen2)");
  if (w.head_dim < 0) throw UserError("workload.head_dim", "must be positive (" + where + ")", "remove head_dim");
  if (w.head_dim == 0 && w.n_head > 0 && w.n_embd % w.n_head != 0)
    throw UserError("workload.n_head",
                    "n_head=" + std::to_string(w.n_head) + " does not divide n_embd=" + std::to_string(w.n_embd),
                    "choose n_head so that n_embd / n_head is an integer, or set head_dim");
  if (w.n_kv_head < 0 || (w.n_kv_head > 0 && w.n_head % w.n_kv_head != 0))
    throw UserError("workload.n_kv_head",
                    "n_kv_head=" + std::to_string(w.n_kv_head) + " must divide n_head=" + std::to_string(w.n_head) +
                        " (" + where + ")",
                    "set n_kv_head (num_key_value_heads) to a divisor of n_head: 1 (MQA) up to n_head (MHA)");
  if (w.ffn_hidden < 0) throw UserError("workload.ffn_hidden", "must be positive (" + where + ")", "set ffn_hidden");
  // RoPE rotates the head's two halves against each other (transformers' rotate_half; its config
  // validation refuses an odd rotary dimension): an odd head size has no halves.
  if (w.positions == Positions::Rope && w.n_head > 0 && w.headSize() % 2 != 0)
    throw UserError(w.head_dim > 0 ? "workload.head_dim" : "workload.n_head",
                    "RoPE needs an even head size, and it is " + std::to_string(w.headSize()) +
                        (w.head_dim > 0 ? "" : " (n_embd " + std::to_string(w.n_embd) + " / n_head " + std::to_string(w.n_head) + ")") +
                        " (" + where + ")",
                    w.head_dim > 0 ? "set head_dim (in a config.json) to an even number, e.g. 64 or 128"
                                   : "choose n_head (num_attention_heads) so that n_embd / n_head is even, or set an even head_dim");
  if (w.positions == Positions::Rope && !(w.rope_theta > 0))
    throw UserError("workload.rope_theta", "must be positive (" + where + ")", "use 10000 (Llama 2) or 500000 (Llama 3)");
  const RopeScaling& r = w.rope_scaling;
  if (r.factor != 0) {
    if (!(r.factor >= 1))
      throw UserError("workload.rope_scaling.factor", "must be at least 1 (" + where + ")", "use 8 (Llama 3.1)");
    if (!(r.low_freq_factor > 0 && r.high_freq_factor > r.low_freq_factor))
      throw UserError("workload.rope_scaling.high_freq_factor", "must exceed low_freq_factor > 0 (" + where + ")",
                      "use low_freq_factor 1 and high_freq_factor 4 (Llama 3.1)");
    if (r.original_max_position_embeddings <= 0)
      throw UserError("workload.rope_scaling.original_max_position_embeddings", "must be positive (" + where + ")",
                      "use 8192 (Llama 3.1)");
  }
}

}  // namespace trainscope::workloads
