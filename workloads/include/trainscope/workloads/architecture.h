// trainscope/workloads/architecture.h — the decoder variants a workload describes (issue 32).
//
// One description, read by everyone: a Workload's architecture fields (norm, positions, MLP,
// attention heads, biases, tied head) default to GPT-2's shape, so every GPT workload reads as
// before. Llama, Mistral, Qwen2 and Mixtral configs set them (docs/architectures.md). Adding the
// next variant (QK-norm, sliding-window attention, MLA) is one enum value here, its key in
// architecture.cpp's parser, and its terms in the parameter count and FLOPs.
#pragma once

#include <cstdint>
#include <string>

namespace trainscope::workloads {

struct Workload;

enum class Norm { LayerNorm, RMSNorm };         // LayerNorm: weight + bias; RMSNorm: weight only
enum class Positions { Learned, Rope, Alibi, None };
enum class Mlp { Gelu, SwiGLU };                // GELU: 2 matrices C <-> F; SwiGLU: gate, up, down (3)

// Llama 3's RoPE frequency scaling (transformers' rope_type "llama3"). factor 0: no scaling.
struct RopeScaling {
  double factor = 0;
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  int64_t original_max_position_embeddings = 8192;
};

const char* normName(Norm n);           // "layernorm", "rmsnorm"
const char* positionsName(Positions p); // "learned", "rope", "alibi", "none"
const char* mlpName(Mlp m);             // "gelu", "swiglu"

// Throws UserError naming the key when an architecture field is out of range.
void validateArchitecture(const Workload& w, const std::string& where);

// Analytic parameter count in floating point (no overflow for absurd shapes); `active`: count
// only the k routed experts (and the shared one) of each MoE layer.
double parameterCountF(const Workload& w, bool active);

}  // namespace trainscope::workloads
