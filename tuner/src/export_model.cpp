// export_model.cpp — see export_model.h. Megatron-LM's names are arguments.py's and those its
// ArgumentGroupFactory makes from megatron-core's TransformerConfig fields (megatron-core 0.19.2:
// layernorm_epsilon is --norm-epsilon, add_bias_linear is --disable-bias-linear); bench/check_exports.py
// parses them with that parser and builds the TransformerConfig from them.
#include "export_model.h"

#include <cmath>

#include "trainscope/common/error.h"
#include "trainscope/models/plan.h"
#include "trainscope/tuner/space.h"
#include "trainscope/workloads/hf_config.h"

namespace trainscope::tuner::detail {
namespace {

namespace wl = trainscope::workloads;

std::string number(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

// Megatron-LM's biases: add_bias_linear puts one on every linear (q/k/v, the attention output, the
// MLP's and the experts'), add_qkv_bias on the q/k/v projection only (Qwen2). Other mixes have no flag.
void megatronBiases(std::ostringstream& o, const wl::Workload& w, std::vector<std::string>& notes) {
  if (w.qkv_bias && w.proj_bias && w.mlp_bias) return;  // Megatron-LM's default
  const bool linear = w.proj_bias || w.mlp_bias;
  if (!linear) {
    o << " --disable-bias-linear";
    if (w.qkv_bias) o << " --add-qkv-bias";
    return;
  }
  notes.push_back(std::string("Megatron-LM puts biases on every linear (--disable-bias-linear: on none; --add-qkv-bias: on "
                              "q/k/v only): this model's q/k/v ") + (w.qkv_bias ? "with" : "without") +
                  ", attention output " + (w.proj_bias ? "with" : "without") + ", MLP " +
                  (w.mlp_bias ? "with" : "without") + " biases has no flag; these flags keep them on every linear");
}

void megatronPositions(std::ostringstream& o, const runconfig::TrainConfig& c, std::vector<std::string>& notes) {
  const wl::Workload& w = c.model;
  switch (w.positions) {
    case wl::Positions::Learned:
      o << " --position-embedding-type learned_absolute";
      return;
    case wl::Positions::None:
      o << " --position-embedding-type none";
      return;
    case wl::Positions::Alibi:
      o << " --position-embedding-type none";
      notes.push_back("Megatron-LM has no ALiBi: these flags give the model no positions at all");
      return;
    case wl::Positions::Rope:
      break;
  }
  // RoPE on the whole head (--rotary-percent 1), halves rotated as transformers' rotate_half
  // (Megatron-LM's default, not --rotary-interleaved). --rotary-base is an integer there.
  const double theta = w.rope_theta;
  o << " --position-embedding-type rope --rotary-base " << int64_t(std::llround(theta)) << " --rotary-percent 1.0";
  if (std::abs(theta - std::round(theta)) > 1e-9)
    notes.push_back("Megatron-LM's --rotary-base is an integer: rope_theta " + number(theta) + " is rounded to " +
                    std::to_string(std::llround(theta)));
  const wl::RopeScaling& r = w.rope_scaling;
  if (r.factor > 0) {
    o << " --use-rope-scaling --rope-scaling-factor " << r.factor;
    // megatron-core's apply_rope_scaling is called with Llama 3's constants only.
    if (r.low_freq_factor != 1 || r.high_freq_factor != 4 || r.original_max_position_embeddings != 8192)
      notes.push_back("Megatron-LM's Llama 3 RoPE scaling uses low_freq_factor 1, high_freq_factor 4 and "
                      "original_max_position_embeddings 8192 (no flags): this model's " + number(r.low_freq_factor) +
                      ", " + number(r.high_freq_factor) + ", " + std::to_string(r.original_max_position_embeddings) +
                      " are not in these flags");
  }
}

// Sliding-window attention (Mistral v0.1's sliding_window, Qwen2's layers from max_window_layers on).
// megatron-core's window_size is Transformer Engine's (left, right): query i attends keys
// i − left … i + right, so transformers' mask t − W < j ≤ t is (W − 1, 0) under the causal mask.
// Qwen2's full-attention layers below max_window_layers are --window-attn-skip-freq's list form, one 1
// (windowed) or 0 (full) per layer (megatron-core's is_layer_window_attention), quoted for the shell.
// Transformer Engine runs a window under context parallelism only with its all-to-all exchange
// (Megatron-Bridge's Mistral bridge sets cp_comm_type a2a with the window likewise).
void megatronWindow(std::ostringstream& o, const runconfig::TrainConfig& c, std::vector<std::string>& notes) {
  const wl::Workload& w = c.model;
  if (w.sliding_window <= 0) return;
  o << " --window-size " << w.sliding_window - 1 << ",0";
  if (w.window_from_layer > 0) {
    o << " --window-attn-skip-freq '[";
    for (int64_t l = 0; l < w.n_layer; ++l) o << (l ? "," : "") << (w.windowedLayer(l) ? "1" : "0");
    o << "]'";
  }
  if (c.cp > 1) {
    // The exchange splits the heads over the cp ranks: a layout it cannot split is refused, not written.
    if (const FrameworkRefusal r = megatronWindowCpRefusal(models::planOf(c), w); !r.why.empty())
      throw UserError(r.flag, r.why + " (--format megatron)",
                      r.fix + "; or export another candidate of the study (--trial N), or tune with --runner megatron, "
                      "whose space leaves such layouts out");
    o << " --cp-comm-type a2a";
    notes.push_back("the sliding window under context parallelism: Transformer Engine applies it only with the "
                    "all-to-all exchange (--cp-comm-type a2a), which splits the heads over the " +
                    std::to_string(c.cp) + " CP ranks where this runtime's ring passes K/V blocks");
  }
}

}  // namespace

void megatronArchitecture(std::ostringstream& o, const runconfig::TrainConfig& c, std::vector<std::string>& notes) {
  const wl::Workload& w = c.model;
  o << " --normalization " << (w.norm == wl::Norm::RMSNorm ? "RMSNorm" : "LayerNorm") << " --norm-epsilon "
    << w.norm_eps;
  // The dense MLP's width, always: with --swiglu Megatron-LM's default is not 4h but ~8h/3 rounded.
  if (w.mlp == wl::Mlp::SwiGLU) o << " --swiglu";
  o << " --ffn-hidden-size " << w.ffnHidden();
  megatronPositions(o, c, notes);
  // Grouped-query attention: K/V heads split over TP when tp divides them; with fewer K/V heads than
  // tp each rank holds the one its q heads use (megatron-core's attention replicates them as trainscope does).
  if (w.kvHeads() != w.n_head) o << " --group-query-attention --num-query-groups " << w.kvHeads();
  if (w.headSize() * w.n_head != w.n_embd) o << " --kv-channels " << w.headSize();
  if (!w.tie_embeddings) o << " --untie-embeddings-and-output-weights";
  megatronBiases(o, w, notes);
  megatronWindow(o, c, notes);
}

void addModelConfig(const runconfig::TrainConfig& c, ExportResult& r) {
  if (workloads::hfModelType(c.model).empty())
    r.notes.push_back("no config.json is written beside this export: transformers has no model of workload " +
                      c.model.name + "'s shape (" + workloads::hfUnsupported(c.model) + ")");
  else
    r.files.push_back({"config.json", workloads::hfConfigJson(c.model, "--format")});
}

std::string wrapClass(const runconfig::TrainConfig& c) {
  const std::string type = workloads::hfModelType(c.model);
  if (type == "llama") return "LlamaDecoderLayer";
  if (type == "mistral") return "MistralDecoderLayer";
  if (type == "qwen2") return "Qwen2DecoderLayer";
  if (type == "mixtral") return "MixtralDecoderLayer";
  // transformers' Qwen2MoePreTrainedModel._no_split_modules (modeling_qwen2_moe.py); it has no GPT2Block,
  // which Accelerate's TRANSFORMER_BASED_WRAP refuses ("Could not find the transformer layer class").
  if (type == "qwen2_moe") return "Qwen2MoeDecoderLayer";
  return "GPT2Block";
}

}  // namespace trainscope::tuner::detail
