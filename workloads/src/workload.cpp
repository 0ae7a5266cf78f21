// workload.cpp — reading GPT shapes from trainscope JSON or Hugging Face config.json.
#include "trainscope/workloads/workload.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/near_key.h"
#include "trainscope/common/files.h"
#include "trainscope/common/json_text.h"
#include "architecture_json.h"

namespace trainscope::workloads {
namespace fs = std::filesystem;

int64_t Workload::moeLayers() const {
  if (!isMoe()) return 0;
  if (!moe_pattern.empty()) return std::count_if(moe_pattern.begin(), moe_pattern.end(), [](int m) { return m != 0; });
  if (moe_every <= 0) return 0;
  return (n_layer + moe_every - 1) / moe_every;  // layers 0, k, 2k, … below L
}

void simplifyMoePattern(Workload* w) {
  const auto& m = w->moe_pattern;
  if (int64_t(m.size()) != w->n_layer) return;
  for (int64_t k = 1; k <= w->n_layer; ++k) {
    bool same = true;
    for (int64_t l = 0; l < w->n_layer && same; ++l) same = (m[size_t(l)] != 0) == (l % k == 0);
    if (same) {
      w->moe_every = k;
      w->moe_pattern.clear();
      return;
    }
  }
}

namespace {

// The shape limits validate() enforces. Real GPTs stay far below them (GPT-3 175B: L = 96,
// 1.75e11 parameters); past them a typo or a wrapped integer is more likely than a model, and the
// memory model's per-layer tensor lists would grow without bound (n_layer = 2^31 - 1).
constexpr int64_t kMaxLayers = 10000;
constexpr double kMaxParameters = 1e15;

using keys::closeTo;
using keys::nearestKey;

// trainscope's own workload files hold exactly these keys (n_ctx: n_positions' alias).
const std::vector<std::string> kOwnKeys = {"name", "description", "n_layer", "n_head", "n_embd",
                                           "n_positions", "n_ctx", "vocab_size", "n_experts", "top_k",
                                           "moe_every", "moe_pattern", "moe_ffn_hidden", "capacity_factor",
                                           "aux_loss_coeff", "z_loss_coeff", "shared_expert", "shared_expert_hidden",
                                           "shared_expert_gate", "norm_topk_prob", "notes"};
// The mixture-of-experts keys: only meaningful with n_experts > 0.
const std::vector<std::string> kMoeKeys = {"top_k", "moe_every", "moe_pattern", "moe_ffn_hidden", "capacity_factor",
                                           "aux_loss_coeff", "z_loss_coeff", "shared_expert",
                                           "shared_expert_hidden", "shared_expert_gate", "norm_topk_prob"};

// The keys of a Hugging Face GPT-2 config.json: GPT2Config's own and PretrainedConfig's common ones
// (transformers 4.x). Those that change the model are checked in parse(); the rest do not change
// what GPT2LMHeadModel builds (token ids, generation settings, the double-heads model's summary).
const std::vector<std::string> kHfKeys = {
    "model_type", "architectures", "transformers_version", "torch_dtype", "dtype", "_name_or_path",
    "vocab_size", "n_positions", "n_ctx", "n_embd", "n_layer", "n_head", "n_inner", "activation_function",
    "resid_pdrop", "embd_pdrop", "attn_pdrop", "layer_norm_epsilon", "initializer_range", "summary_type",
    "summary_use_proj", "summary_activation", "summary_proj_to_labels", "summary_first_dropout",
    "scale_attn_weights", "use_cache", "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id",
    "decoder_start_token_id", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention",
    "n_special", "predict_special_tokens", "output_past", "task_specific_params", "tie_word_embeddings",
    "id2label", "label2id", "num_labels", "_num_labels", "tokenizer_class", "prefix", "finetuning_task",
    "problem_type", "is_decoder", "is_encoder_decoder", "gradient_checkpointing", "return_dict",
    "output_hidden_states", "output_attentions", "torchscript", "use_bfloat16", "pruned_heads",
    "chunk_size_feed_forward", "max_length", "min_length", "do_sample", "early_stopping", "num_beams",
    "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
    "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
    "begin_suppress_tokens", "tf_legacy_loss", "cross_attention_hidden_size", "tie_encoder_decoder",
    "name", "description"};

std::string joinKeys(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys)
    if (k != "n_ctx") out += (out.empty() ? "" : ", ") + k;
  return out;
}

// A file without "name": its folder and stem ("Llama-3.1-8B/config" for a Hugging Face folder's
// config.json); a file named without a folder is "./stem" ("llama.json" → "./llama", not "/llama").
// The name keeps a '/' either way: it is never taken for a preset's (predict's --profile fix).
// A file in the Hugging Face cache (HF_HOME/hub/models--ORG--NAME/snapshots/REVISION/config.json, where
// huggingface_hub and from_pretrained put a download) is named ORG/NAME, the model's Hub id.
std::string nameFromPath(const std::string& source) {
  const fs::path p(source);
  const fs::path snapshots = p.parent_path().parent_path();
  const std::string repo = snapshots.parent_path().filename().string();
  if (snapshots.filename() == "snapshots" && repo.rfind("models--", 0) == 0 && repo.size() > 8) {
    std::string id = repo.substr(8);
    if (const size_t sep = id.find("--"); sep != std::string::npos) id.replace(sep, 2, "/");
    else id = "./" + id;  // a model without an organisation (gpt2): still a name with a '/'
    return id;
  }
  const std::string folder = p.parent_path().filename().string();
  return (folder.empty() || folder == "." || folder == ".." ? std::string(".") : folder) + "/" + p.stem().string();
}

}  // namespace

// The mixture-of-experts keys' ranges (docs/config-reference.md, "Workload files").
static void validateMoe(const Workload& w, const std::string& where) {
  if (!w.isMoe()) {
    if (w.n_experts < 0)
      throw UserError("workload.n_experts", "must be 0 (dense) or at least 2, got " + std::to_string(w.n_experts),
                      "set n_experts in " + where);
    return;
  }
  if (w.n_experts < 2)
    throw UserError("workload.n_experts", "1 expert is a dense MLP with a router that always picks it (" + where + ")",
                    "set n_experts to 0 for a dense GPT or to at least 2");
  if (w.top_k < 1)
    throw UserError("workload.top_k", "must be at least 1, got " + std::to_string(w.top_k) + " (" + where + ")",
                    "set top_k to 1 (Switch), 2 (GShard, Mixtral) or 4 (Qwen1.5-MoE)");
  if (w.top_k > w.n_experts)
    throw UserError("workload.top_k", "top_k=" + std::to_string(w.top_k) + " exceeds n_experts=" +
                    std::to_string(w.n_experts) + " (" + where + ")", "set top_k to 1 (Switch) up to n_experts");
  if (w.moe_every < 1 || w.moe_every > w.n_layer)
    throw UserError("workload.moe_every",
                    "must be between 1 and n_layer=" + std::to_string(w.n_layer) + ", got " + std::to_string(w.moe_every),
                    "set moe_every to 1 (every layer) or 2 (every other layer)");
  if (!w.moe_pattern.empty()) {
    const bool bits = std::all_of(w.moe_pattern.begin(), w.moe_pattern.end(), [](int m) { return m == 0 || m == 1; });
    if (int64_t(w.moe_pattern.size()) != w.n_layer || !bits || w.moeLayers() == 0)
      throw UserError("workload.moe_pattern",
                      "must be a list of n_layer=" + std::to_string(w.n_layer) + " entries, each 1 (a MoE MLP) or 0 "
                      "(a dense one), at least one 1; got " + std::to_string(w.moe_pattern.size()) + " entries (" +
                          where + ")",
                      "give one 0 or 1 per layer, e.g. [0, 1, 0, 1], or remove moe_pattern for moe_every");
  }
  if (w.moe_ffn_hidden < 0)
    throw UserError("workload.moe_ffn_hidden", "must be positive, got " + std::to_string(w.moe_ffn_hidden),
                    "set moe_ffn_hidden to the expert's hidden width, or remove it for 4*n_embd");
  if (w.shared_expert_hidden < 0)
    throw UserError("workload.shared_expert_hidden", "must be positive, got " + std::to_string(w.shared_expert_hidden) +
                    " (" + where + ")", "set shared_expert_hidden to the shared expert's width, or remove it for moe_ffn_hidden");
  if (!w.shared_expert && (w.shared_expert_hidden > 0 || w.shared_expert_gate))
    throw UserError(w.shared_expert_gate ? "workload.shared_expert_gate" : "workload.shared_expert_hidden",
                    "is set in " + where + " but shared_expert is false (there is no shared expert to size or gate)",
                    "set shared_expert to true, or remove it");
  if (w.norm_topk_prob < -1 || w.norm_topk_prob > 1)
    throw UserError("workload.norm_topk_prob", "must be true, false or unset (" + where + ")", "set it to true or false");
  auto nonNegative = [&](const char* key, double v, const char* fix) {
    if (!(v >= 0) || !std::isfinite(v))
      throw UserError(std::string("workload.") + key, "must be a finite number >= 0, got " + std::to_string(v), fix);
  };
  nonNegative("capacity_factor", w.capacity_factor, "set capacity_factor to 0 (drop-less) or e.g. 1.25");
  nonNegative("aux_loss_coeff", w.aux_loss_coeff, "set aux_loss_coeff to e.g. 0.01 (Switch), or 0 to train without it");
  nonNegative("z_loss_coeff", w.z_loss_coeff, "set z_loss_coeff to e.g. 0.001 (ST-MoE), or 0");
}

void validate(const Workload& w) {
  const std::string where = w.source.empty() ? w.name : w.source;
  auto positive = [&](const char* field, int64_t v) {
    if (v <= 0)
      throw UserError(std::string("workload.") + field, "must be a positive integer, got " + std::to_string(v),
                      "set " + std::string(field) + " in " + where);
  };
  positive("n_layer", w.n_layer);
  positive("n_head", w.n_head);
  positive("n_embd", w.n_embd);
  positive("n_positions", w.n_positions);
  positive("vocab_size", w.vocab_size);
  validateArchitecture(w, where);
  if (w.n_layer > kMaxLayers)
    throw UserError("workload.n_layer",
                    std::to_string(w.n_layer) + " layers in " + where + " is beyond what trainscope models (at most " +
                        std::to_string(kMaxLayers) + ")",
                    "check n_layer; GPT-3 175B has 96 layers");
  validateMoe(w, where);
  // In floating point: the int64 count itself overflows for such shapes.
  const double params = parameterCountF(w, false);
  if (params > kMaxParameters) {
    char n[32];
    std::snprintf(n, sizeof(n), "%.3g", params);
    throw UserError("workload", where + " has " + n + " parameters, beyond what trainscope models (at most 1e15)",
                    "check n_embd, n_layer, n_positions and vocab_size");
  }
}

// An integer JSON holds past int64 (read as int64 it would wrap to a negative or small value).
static bool pastInt64(const nlohmann::json& v) {
  return v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX);
}

// The mixture-of-experts keys of trainscope's own files (a Hugging Face GPT-2 config has none).
static void parseMoe(const nlohmann::json& j, const std::string& source, Workload* w) {
  if (j.contains("model_type")) return;
  auto integer = [&](const char* key, int64_t* out) {
    if (!j.contains(key)) return;
    if (!j[key].is_number_integer() || pastInt64(j[key]))
      throw UserError(std::string("workload.") + key,
                      "must be an integer in " + source + (pastInt64(j[key]) ? ", not " + jsonText(j[key]) : ""), "");
    *out = j[key].get<int64_t>();
  };
  auto number = [&](const char* key, double* out) {
    if (!j.contains(key)) return;
    if (!j[key].is_number()) throw UserError(std::string("workload.") + key, "must be a number in " + source, "");
    *out = j[key].get<double>();
  };
  integer("n_experts", &w->n_experts);
  integer("top_k", &w->top_k);
  integer("moe_every", &w->moe_every);
  if (j.contains("moe_pattern")) {
    if (j.contains("moe_every"))
      throw UserError("workload.moe_pattern", "and moe_every are both set in " + source + " (each says which layers are MoE)",
                      "keep one of them");
    const auto& m = j["moe_pattern"];
    if (!m.is_array() || !std::all_of(m.begin(), m.end(), [](const nlohmann::json& v) { return v.is_number_integer(); }))
      throw UserError("workload.moe_pattern", "must be a list of 0s and 1s (one per layer) in " + source,
                      "e.g. \"moe_pattern\": [0, 1, 0, 1]");
    for (const auto& v : m) w->moe_pattern.push_back(v.get<int64_t>() == 0 ? 0 : v.get<int64_t>() == 1 ? 1 : 2);
  }
  integer("moe_ffn_hidden", &w->moe_ffn_hidden);
  number("capacity_factor", &w->capacity_factor);
  number("aux_loss_coeff", &w->aux_loss_coeff);
  number("z_loss_coeff", &w->z_loss_coeff);
  auto boolean = [&](const char* key, bool* out) {
    if (!j.contains(key)) return;
    if (!j[key].is_boolean()) throw UserError(std::string("workload.") + key, "must be true or false in " + source, "");
    *out = j[key].get<bool>();
  };
  boolean("shared_expert", &w->shared_expert);
  integer("shared_expert_hidden", &w->shared_expert_hidden);
  boolean("shared_expert_gate", &w->shared_expert_gate);
  if (j.contains("norm_topk_prob")) {
    bool renorm = false;
    boolean("norm_topk_prob", &renorm);
    w->norm_topk_prob = renorm ? 1 : 0;
  }
  if (!w->isMoe())
    for (const auto& key : kMoeKeys)
      if (j.contains(key))
        throw UserError("workload." + key, "is set in " + source + " but n_experts is 0 (a dense GPT)",
                        "set n_experts to the number of experts (at least 2), or remove " + key);
  // A preset's notes: what its published model has that trainscope trains otherwise.
  if (j.contains("notes")) {
    if (!j["notes"].is_array()) throw UserError("workload.notes", "must be a list of strings in " + source, "");
    for (const auto& n : j["notes"]) {
      if (!n.is_string()) throw UserError("workload.notes", "must be a list of strings in " + source, "");
      w->notes.push_back(n.get<std::string>());
    }
  }
}

// Refuses a key no workload file has (see parse for the two formats' rules).
static void refuseUnknownKeys(const nlohmann::json& j, bool hf, const std::vector<std::string>& known,
                              const std::string& source) {
  // Unknown keys. In trainscope's own files every key is known, so a misspelt or extra key (dropuot,
  // n_layers beside n_layer, n_experts) is refused rather than silently ignored. A Hugging Face
  // config carries many keys that do not change the model and grows new ones with transformers
  // versions: there a key is refused only when it looks like a misspelling of a known one or is an
  // unknown shape key (n_*), since transformers would ignore it as well and build another model than meant.
  // A Hugging Face decoder's config.json with its model_type left out (cut by hand, or written by a
  // tool): said so, not read as a trainscope workload with unknown keys.
  if (!hf)
    for (const char* key : {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"})
      if (j.contains(key))
        throw UserError("workload.model_type",
                        source + " has Hugging Face config.json keys (\"" + key + "\") but no \"model_type\"",
                        "add \"model_type\": one of gpt2, llama, mistral, qwen2, mixtral, qwen2_moe, as the model's "
                        "published config.json has it (transformers' AutoConfig reads it too)");
  for (const auto& [key, value] : j.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    const auto near = nearestKey(key, known);
    const bool close = closeTo(key, near);
    if (hf && !close && key.rfind("n_", 0) != 0) continue;
    std::string problem = "unknown key \"" + key + "\" in " + source;
    if (close) {
      problem += "; did you mean \"" + near.first + "\"?";
      if (j.contains(near.first)) problem += " (that key is set as well)";
    } else {
      problem += "; the nearest known key is \"" + near.first + "\"";
    }
    std::string fix;
    if (!hf && std::find(kHfKeys.begin(), kHfKeys.end(), key) != kHfKeys.end())
      fix = key + " is a Hugging Face config.json key: a Hugging Face config has \"model_type\": \"gpt2\"; "
            "a trainscope workload has only " + joinKeys(hf ? kOwnKeys : known);
    else if (key.find("drop") != std::string::npos)
      fix = "remove it: trainscope trains without dropout; a workload has " + joinKeys(hf ? kOwnKeys : known);
    else
      fix = "remove or rename it; a " +
            (hf ? j.value("model_type", std::string("gpt2")) + " config.json's model keys are " : std::string("workload has ")) +
            (hf ? std::string(j.value("model_type", "") == "gpt2" ? "n_layer, n_head, n_embd, n_positions, vocab_size, n_inner"
                                                                  : "hidden_size, intermediate_size, num_hidden_layers, "
                                                                    "num_attention_heads, num_key_value_heads, head_dim")
                : joinKeys(hf ? kOwnKeys : known));
    throw UserError("workload." + key, problem, fix);
  }
}

// Keys that would make the file describe another model than trainscope builds: refused, or loaded
// with a note where the difference is only in training (dropout, the exact GELU).
static void refuseChangedArchitecture(const nlohmann::json& j, const std::string& source, Workload* w) {
  // Hugging Face fields that would change the architecture trainscope builds must match it.
  if (j.contains("n_inner") && !j["n_inner"].is_null() &&
      (!j["n_inner"].is_number_integer() || j["n_inner"].get<int64_t>() != 4 * w->n_embd))
    throw UserError("workload.n_inner", "only an MLP width of 4*n_embd is supported (" + source + ")",
                    "remove n_inner or set it to null");
  // Keys that change the model or its training: honoured where they match what the runtime does,
  // refused otherwise (docs/config-reference.md, "Workload files").
  auto refuseUnless = [&](const char* key, bool ok, const std::string& fix) {
    if (j.contains(key) && !j[key].is_null() && !ok)
      throw UserError(std::string("workload.") + key, jsonText(j[key]) + " in " + source + " is not what trainscope trains", fix);
  };
  auto num = [&](const char* key) { return j[key].is_number() ? j[key].get<double>() : -1.0; };
  auto flag = [&](const char* key, bool want) { return j[key].is_boolean() && j[key].get<bool>() == want; };
  if (j.contains("layer_norm_epsilon"))
    refuseUnless("layer_norm_epsilon", std::abs(num("layer_norm_epsilon") - 1e-5) < 1e-12,
                 "trainscope's LayerNorm uses 1e-5: set layer_norm_epsilon to 1e-5 or remove it");
  if (j.contains("tie_word_embeddings"))
    refuseUnless("tie_word_embeddings", flag("tie_word_embeddings", true),
                 "the LM head is tied to the token embedding: set tie_word_embeddings to true or remove it");
  if (j.contains("scale_attn_weights"))
    refuseUnless("scale_attn_weights", flag("scale_attn_weights", true),
                 "attention scores are scaled by 1/sqrt(head size): set scale_attn_weights to true or remove it");
  if (j.contains("scale_attn_by_inverse_layer_idx"))
    refuseUnless("scale_attn_by_inverse_layer_idx", flag("scale_attn_by_inverse_layer_idx", false),
                 "attention scores are not scaled by layer: set scale_attn_by_inverse_layer_idx to false or remove it");
  if (j.contains("add_cross_attention"))
    refuseUnless("add_cross_attention", flag("add_cross_attention", false),
                 "trainscope's GPT has no cross-attention: set add_cross_attention to false or remove it");
  // Dropout: Hugging Face's GPT-2 configs (the stock gpt2 one included) set 0.1. trainscope trains
  // without dropout, as llm.c and nanoGPT's pre-training do; the file loads, with a note saying so.
  std::string dropped;
  for (const char* key : {"resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_first_dropout"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    const double p = num(key);
    refuseUnless(key, j[key].is_number() && p >= 0 && p < 1, "a dropout probability is a number in [0, 1)");
    if (p > 0 && std::string(key) != "summary_first_dropout")  // the double-heads model's summary only
      dropped += (dropped.empty() ? "" : ", ") + std::string(key) + " " + jsonText(j[key]);
  }
  if (!dropped.empty())
    w->notes.push_back(source + " sets dropout (" + dropped +
                      "); trainscope trains without dropout, so these are ignored");
  if (j.contains("activation_function")) {
    if (!j["activation_function"].is_string())
      throw UserError("workload.activation_function", "must be a string in " + source, "use gelu_new");
    const std::string act = j["activation_function"].get<std::string>();
    if (act != "gelu_new" && act != "gelu_pytorch_tanh" && act != "gelu")
      throw UserError("workload.activation_function", "\"" + act + "\" is not supported (" + source + ")",
                      "use gelu_new (GELU, tanh approximation)");
    if (act == "gelu")
      w->notes.push_back(source + " asks for the exact GELU (activation_function \"gelu\"); trainscope uses its tanh "
                        "approximation (gelu_new)");
  }
}

Workload parse(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw UserError("workload", source + " is not valid JSON: " + jsonErrorText(e.what()) + jsonCutShort(e.byte, text.size(), e.what()),
                    "fix the file's syntax");
  } catch (const nlohmann::json::exception& e) {
    throw UserError("workload", source + " is not valid JSON: " + jsonErrorText(e.what()), "fix the file's syntax");
  }
  if (!j.is_object())
    throw UserError("workload", source + " must hold a JSON object, not " + std::string(j.type_name()),
                    "write the model as one object: a Hugging Face config.json ({\"model_type\": …}) or a trainscope "
                    "workload ({\"n_layer\": …})");
  Workload w;
  w.source = source;
  // Two formats, told apart by `model_type`, which Hugging Face writes into every config.json and
  // trainscope's own files never hold. A Hugging Face config is read as transformers would build
  // GPT2LMHeadModel from it.
  const bool hf = j.contains("model_type");
  const bool decoder = hf && j["model_type"].is_string() && isHfDecoder(j["model_type"].get<std::string>());
  if (hf && !decoder && !(j["model_type"].is_string() && j["model_type"] == "gpt2")) {
    // The other key that would be refused in a supported model too (DeepSeek-V3's YaRN) is named as well.
    const std::string rope = unsupportedRopeScaling(j);
    throw UserError("workload.model_type",
                    jsonText(j["model_type"]) + " in " + source +
                        " is not supported: trainscope reads Hugging Face configs of model_type gpt2, llama, "
                        "mistral, qwen2, mixtral and qwen2_moe" +
                        (rope.empty() ? std::string() : "; its " + rope + " is not supported either (RoPE without "
                                                        "scaling and Llama 3's rope_type \"llama3\" only)"),
                    "use a config.json of one of those model types, or a trainscope workload file");
  }
  // GPT-2's shape keys under a Llama-family model_type: the model_type is what is wrong (or the
  // file was written by hand from a GPT-2 config); say so rather than refusing each GPT-2 key.
  if (decoder)
    for (const char* key : {"n_layer", "n_head", "n_embd", "n_positions"})
      if (j.contains(key))
        throw UserError("workload.model_type",
                        jsonText(j["model_type"]) + " in " + source + " comes with GPT-2's key \"" + key +
                            "\": a " + j["model_type"].get<std::string>() +
                            " config.json names its shape hidden_size, num_hidden_layers, num_attention_heads, "
                            "max_position_embeddings",
                        "use \"model_type\": \"gpt2\" for a GPT-2 config, or the " +
                            j["model_type"].get<std::string>() + " keys");
  std::vector<std::string> own_keys = kOwnKeys;
  own_keys.insert(own_keys.end(), architectureKeys().begin(), architectureKeys().end());
  std::vector<std::string> gpt2_keys = kHfKeys;
  gpt2_keys.push_back("source");
  refuseUnknownKeys(j, hf, decoder ? hfDecoderKeys() : hf ? gpt2_keys : own_keys, source);
  for (const char* key : {"name", "description", "source"})
    if (j.contains(key) && !j[key].is_string())
      throw UserError(std::string("workload.") + key, "must be a string in " + source, "");
  if (j.contains("source")) w.origin = j["source"].get<std::string>();
  if (hf) {
    nlohmann::json ids = nlohmann::json::object();
    for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"})
      if (j.contains(key) && !j[key].is_null()) ids[key] = j[key];
    if (!ids.empty()) w.hf_token_ids = ids.dump();
  }
  if (decoder) {
    parseHfDecoder(j, source, &w);
    w.hf_model_type = j["model_type"].get<std::string>();
    w.name = j.contains("name") ? j["name"].get<std::string>()
                                : nameFromPath(source);
    if (j.contains("description")) w.description = j["description"].get<std::string>();
    validate(w);
    return w;
  }
  auto getInt = [&](const char* key, const char* alt) -> int64_t {
    const nlohmann::json* v = nullptr;
    if (j.contains(key)) v = &j[key];
    else if (alt && j.contains(alt)) v = &j[alt];
    if (!v)
      throw UserError(std::string("workload.") + key, "missing in " + source,
                      std::string("add \"") + key + "\": <integer>");
    if (!v->is_number_integer() || pastInt64(*v))
      throw UserError(std::string("workload.") + key,
                      "must be an integer in " + source + (pastInt64(*v) ? ", not " + jsonText(*v) : ""), "");
    return v->get<int64_t>();
  };
  // trainscope's own files and Hugging Face GPT-2 configs share these keys; HF's n_ctx is an alias.
  w.n_layer = getInt("n_layer", nullptr);
  w.n_head = getInt("n_head", nullptr);
  w.n_embd = getInt("n_embd", nullptr);
  w.n_positions = getInt("n_positions", "n_ctx");
  w.vocab_size = getInt("vocab_size", nullptr);
  parseMoe(j, source, &w);
  if (!hf) parseArchitectureKeys(j, source, &w);
  if (j.contains("name")) w.name = j["name"].get<std::string>();
  else w.name = nameFromPath(source);
  if (j.contains("description")) w.description = j["description"].get<std::string>();
  refuseChangedArchitecture(j, source, &w);
  validate(w);
  simplifyMoePattern(&w);
  return w;
}

std::vector<std::string> searchPath() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("TRAINSCOPE_WORKLOADS")) dirs.emplace_back(env);
#ifdef TRAINSCOPE_WORKLOADS_DIR
  dirs.emplace_back(TRAINSCOPE_WORKLOADS_DIR);
#endif
  return dirs;
}

std::vector<std::string> available() {
  std::vector<std::string> names;
  for (const auto& d : searchPath()) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(d, ec))
      if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

// A FIFO or device named as the workload is refused at once (never waited on, never read without end).
static std::string readFile(const fs::path& p) {
  return files::readTextFile(p.string(), "--workload", "pass a workload name or a JSON file");
}

Workload load(const std::string& name_or_path) {
  if (name_or_path.empty()) throw UserError("--workload", "is empty", "pass a workload name or a JSON path");
  fs::path p(name_or_path);
  const bool looks_like_path = name_or_path.find('/') != std::string::npos || p.extension() == ".json";
  if (looks_like_path) {
    if (!fs::exists(p))
      throw UserError("--workload", "file " + name_or_path + " does not exist", "pass an existing JSON file");
    // A Hugging Face model folder (what --init-from takes): its config.json is the workload.
    std::error_code ec;
    if (fs::is_directory(p, ec) && fs::exists(p / "config.json", ec)) p /= "config.json";
    return parse(readFile(p), p.string());
  }
  for (const auto& d : searchPath()) {
    fs::path f = fs::path(d) / (name_or_path + ".json");
    if (fs::exists(f)) {
      Workload w = parse(readFile(f), f.string());
      w.name = name_or_path;
      return w;
    }
  }
  // Not a preset: a Hugging Face model folder named bare, as `huggingface-cli download --local-dir
  // Meta-Llama-3-8B` leaves it in the working folder (`--workload Meta-Llama-3-8B`).
  std::error_code ec;
  if (fs::is_directory(p, ec) && fs::exists(p / "config.json", ec))
    return parse(readFile(p / "config.json"), (p / "config.json").string());
  std::string names;
  for (const auto& n : available()) names += (names.empty() ? "" : ", ") + n;
  throw UserError("--workload", "unknown workload \"" + name_or_path + "\"",
                  "use one of: " + (names.empty() ? std::string("(none found; set TRAINSCOPE_WORKLOADS)") : names) +
                      ", or a path to a JSON file or to a Hugging Face model folder holding config.json");
}

}  // namespace trainscope::workloads
