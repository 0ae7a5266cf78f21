// architecture_json.h — workloads' private JSON readers for the architecture keys (architecture.cpp).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainscope/workloads/workload.h"

namespace trainscope::workloads {

// Reads the architecture keys of trainscope's own workload files (norm, norm_eps, bias, qkv_bias,
// positions, rope_theta, rope_scaling, mlp, ffn_hidden, n_kv_head, head_dim, tie_embeddings) into w.
void parseArchitectureKeys(const nlohmann::json& j, const std::string& source, Workload* w);
// The keys parseArchitectureKeys reads (for the unknown-key check).
const std::vector<std::string>& architectureKeys();

// True for the Hugging Face model_types read by parseHfDecoder: llama, mistral, qwen2, mixtral.
bool isHfDecoder(const std::string& model_type);
// Reads a Hugging Face Llama-family config.json (LlamaConfig / MistralConfig / Qwen2Config /
// MixtralConfig keys) into w; refuses what it does not describe, naming the key.
// The keys of those configs (for the unknown-key check).
const std::vector<std::string>& hfDecoderKeys();
void parseHfDecoder(const nlohmann::json& j, const std::string& source, Workload* w);
// A config.json's rope_scaling (or rope_parameters) that trainscope does not read, as "KEY.TYPE_KEY
// VALUE" (rope_scaling.type "yarn"); "" when it has none or one trainscope reads.
std::string unsupportedRopeScaling(const nlohmann::json& j);

// A moe_pattern that moe_every says as well (every layer l with l % k == 0 MoE, the others dense)
// becomes moe_every = k and no pattern: one way to write each layout, and exports keep their integer form.
void simplifyMoePattern(Workload* w);

}  // namespace trainscope::workloads
