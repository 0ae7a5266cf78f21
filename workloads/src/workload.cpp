// workload.cpp — reading GPT shapes from trainscope JSON or Hugging Face config.json.
#include "trainscope/workloads/workload.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"

namespace trainscope::workloads {
namespace fs = std::filesystem;

int64_t Workload::parameterCount() const {
  const int64_t C = n_embd, L = n_layer;
  const int64_t per_block = 2 * C                  // ln_1 weight, bias
                            + 3 * C * C + 3 * C    // c_attn (qkv)
                            + C * C + C            // attn c_proj
                            + 2 * C                // ln_2
                            + 4 * C * C + 4 * C    // mlp c_fc
                            + 4 * C * C + C;       // mlp c_proj
  return vocab_size * C + n_positions * C + L * per_block + 2 * C;
}

void validate(const Workload& w) {
  auto positive = [&](const char* field, int64_t v) {
    if (v <= 0)
      throw UserError(std::string("workload.") + field, "must be a positive integer, got " + std::to_string(v),
                      "set " + std::string(field) + " in " + (w.source.empty() ? w.name : w.source));
  };
  positive("n_layer", w.n_layer);
  positive("n_head", w.n_head);
  positive("n_embd", w.n_embd);
  positive("n_positions", w.n_positions);
  positive("vocab_size", w.vocab_size);
  if (w.n_embd % w.n_head != 0)
    throw UserError("workload.n_head",
                    "n_head=" + std::to_string(w.n_head) + " does not divide n_embd=" + std::to_string(w.n_embd),
                    "choose n_head so that n_embd / n_head is an integer");
}

Workload parse(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw UserError("workload", source + " is not valid JSON: " + e.what(), "fix the file's syntax");
  }
  if (!j.is_object()) throw UserError("workload", source + " must hold a JSON object", "");
  Workload w;
  w.source = source;
  auto getInt = [&](const char* key, const char* alt) -> int64_t {
    const nlohmann::json* v = nullptr;
    if (j.contains(key)) v = &j[key];
    else if (alt && j.contains(alt)) v = &j[alt];
    if (!v)
      throw UserError(std::string("workload.") + key, "missing in " + source,
                      std::string("add \"") + key + "\": <integer>");
    if (!v->is_number_integer())
      throw UserError(std::string("workload.") + key, "must be an integer in " + source, "");
    return v->get<int64_t>();
  };
  // trainscope's own files and Hugging Face GPT-2 configs share these keys; HF's n_ctx is an alias.
  w.n_layer = getInt("n_layer", nullptr);
  w.n_head = getInt("n_head", nullptr);
  w.n_embd = getInt("n_embd", nullptr);
  w.n_positions = getInt("n_positions", "n_ctx");
  w.vocab_size = getInt("vocab_size", nullptr);
  if (j.contains("name") && j["name"].is_string()) w.name = j["name"].get<std::string>();
  else w.name = fs::path(source).parent_path().filename().string() + "/" + fs::path(source).stem().string();
  if (j.contains("description") && j["description"].is_string()) w.description = j["description"].get<std::string>();
  if (j.contains("model_type") && j["model_type"].is_string() && j["model_type"] != "gpt2")
    throw UserError("workload.model_type", "\"" + j["model_type"].get<std::string>() + "\" in " + source +
                    " is not a GPT-2 architecture", "use a GPT-2 style config.json");
  // Hugging Face fields that would change the architecture trainscope builds must match it.
  if (j.contains("n_inner") && !j["n_inner"].is_null() &&
      (!j["n_inner"].is_number_integer() || j["n_inner"].get<int64_t>() != 4 * w.n_embd))
    throw UserError("workload.n_inner", "only an MLP width of 4*n_embd is supported (" + source + ")",
                    "remove n_inner or set it to null");
  // Keys that change the model or its training: honoured where they match what the runtime does,
  // refused otherwise (docs/config-reference.md, "Workload files").
  auto refuseUnless = [&](const char* key, bool ok, const std::string& fix) {
    if (j.contains(key) && !j[key].is_null() && !ok)
      throw UserError(std::string("workload.") + key, j[key].dump() + " in " + source + " is not what trainscope trains", fix);
  };
  auto num = [&](const char* key) { return j[key].is_number() ? j[key].get<double>() : -1.0; };
  if (j.contains("layer_norm_epsilon"))
    refuseUnless("layer_norm_epsilon", std::abs(num("layer_norm_epsilon") - 1e-5) < 1e-12,
                 "trainscope's LayerNorm uses 1e-5: set layer_norm_epsilon to 1e-5 or remove it");
  if (j.contains("tie_word_embeddings"))
    refuseUnless("tie_word_embeddings", j["tie_word_embeddings"].is_boolean() && j["tie_word_embeddings"].get<bool>(),
                 "the LM head is tied to the token embedding: set tie_word_embeddings to true or remove it");
  if (j.contains("scale_attn_weights"))
    refuseUnless("scale_attn_weights", j["scale_attn_weights"].is_boolean() && j["scale_attn_weights"].get<bool>(),
                 "attention scores are scaled by 1/sqrt(head size): set scale_attn_weights to true or remove it");
  for (const char* key : {"resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_first_dropout"})
    if (j.contains(key))
      refuseUnless(key, num(key) == 0.0,
                   "trainscope trains without dropout: set the *_pdrop keys to 0 (Hugging Face's GPT-2 default is 0.1)");
  if (j.contains("activation_function") && j["activation_function"].is_string()) {
    const std::string act = j["activation_function"].get<std::string>();
    if (act != "gelu_new" && act != "gelu_pytorch_tanh" && act != "gelu")
      throw UserError("workload.activation_function", "\"" + act + "\" is not supported (" + source + ")",
                      "use gelu_new (GELU, tanh approximation)");
  }
  validate(w);
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

static std::string readFile(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw UserError("workload", "cannot read " + p.string(), "check the path and its permissions");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Workload load(const std::string& name_or_path) {
  if (name_or_path.empty()) throw UserError("--workload", "is empty", "pass a workload name or a JSON path");
  fs::path p(name_or_path);
  const bool looks_like_path = name_or_path.find('/') != std::string::npos || p.extension() == ".json";
  if (looks_like_path) {
    if (!fs::exists(p))
      throw UserError("--workload", "file " + name_or_path + " does not exist", "pass an existing JSON file");
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
  std::string names;
  for (const auto& n : available()) names += (names.empty() ? "" : ", ") + n;
  throw UserError("--workload", "unknown workload \"" + name_or_path + "\"",
                  "use one of: " + (names.empty() ? std::string("(none found; set TRAINSCOPE_WORKLOADS)") : names) +
                      ", or a path to a JSON file");
}

}  // namespace trainscope::workloads
