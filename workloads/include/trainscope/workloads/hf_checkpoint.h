// trainscope/workloads/hf_checkpoint.h — a workload in the Hugging Face layout: its config.json and
// where each of the runtime's flat parameters goes among transformers' tensor names.
//
// The runtime's flat names (docs/architecture.md, "Flat parameter layout") map to:
//   gpt2 (GPT2LMHeadModel): transformer.wte/wpe/h.L.{ln_1,attn.c_attn,attn.c_proj,ln_2,mlp.c_fc,mlp.c_proj}/ln_f;
//     the four Conv1D weights are stored (in, out), i.e. transposed; the head is tied (not written).
//   llama, mistral, qwen2 (…ForCausalLM): model.embed_tokens; model.layers.L.input_layernorm,
//     self_attn.{q,k,v}_proj (c_attn's rows [q; k; v]), self_attn.o_proj, post_attention_layernorm,
//     mlp.{gate,up}_proj (c_fc's rows [gate; up]), mlp.down_proj; model.norm; lm_head when untied.
//   qwen2_moe: as qwen2, the MLP being mlp.gate (the router), mlp.experts.E.{gate,up,down}_proj,
//     mlp.shared_expert.{gate,up,down}_proj and mlp.shared_expert_gate (1, C).
//   mixtral: as llama, the MLP being block_sparse_moe.gate (the router) and
//     block_sparse_moe.experts.E.{w1 (gate), w3 (up), w2 (down)} — the layout transformers 5.x
//     save_pretrained writes and from_pretrained reads (it fuses the experts itself on load).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/workloads/hf_config.h"
#include "trainscope/workloads/workload.h"

namespace trainscope::workloads {

// The model type, its refusal and config.json are hf_config.h's.

// One Hugging Face tensor cut from a flat tensor: [expert e of a stacked (E, …) tensor, then] rows
// [row_begin, row_begin + rows) of dim 0 (rows -1: all), stored transposed when `transpose`.
struct HfPiece {
  std::string name;
  int64_t expert = -1;
  int64_t row_begin = 0, rows = -1;
  bool transpose = false;
};

// The pieces of flat parameter `flat_name` (whole-model name, e.g. "h.3.attn.c_attn.weight") with
// its unsharded shape; empty for a tensor not written (GPT-2's tied head has no flat tensor of its
// own: nothing is empty today). Throws std::invalid_argument for a name it does not know.
std::vector<HfPiece> hfPieces(const Workload& w, const std::string& flat_name, const std::vector<int64_t>& shape);

}  // namespace trainscope::workloads
