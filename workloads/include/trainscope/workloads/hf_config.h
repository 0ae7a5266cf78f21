// trainscope/workloads/hf_config.h — a workload as the Hugging Face `config.json` of its model.
//
// (The same functions as helper ckpt's hf_checkpoint.h, which also maps the tensors: a merge keeps one.)
// The inverse of load()'s Hugging Face reader: the config written for a workload reads back (through
// trainscope's reader and through transformers' AutoConfig) as the same architecture. The exports
// (DeepSpeed, Accelerate, TrainingArguments) write it beside their files; checkpoints beside the
// weights. docs/architectures.md lists the keys.
#pragma once

#include <string>

#include "trainscope/workloads/workload.h"

namespace trainscope::workloads {

// "gpt2", "llama", "mistral", "qwen2", "mixtral" or "qwen2_moe": the Hugging Face model_type that builds w as
// trainscope does; "" when none does (a GPT-style mixture of experts with GELU experts, a Llama
// with biases on some linears only, ALiBi, ...), and hfUnsupported(w) says why.
// A workload read from a config.json keeps its model_type where that type builds the same model
// (Mistral v0.3, sliding_window null: mistral, not llama).
std::string hfModelType(const Workload& w);
// The model_type of w's shape alone (what it was read as ignored): llama for any dense
// RMSNorm/RoPE/SwiGLU model without a window or Qwen2's biases. Two workloads of one shape load
// each other's checkpoints whatever type their files said.
std::string hfShapeType(const Workload& w);
std::string hfUnsupported(const Workload& w);

// The config.json text (two-space indented, ending in a newline). Throws UserError naming `field`
// (the flag that asked for it) when hfModelType(w) is "".
std::string hfConfigJson(const Workload& w, const std::string& field);

}  // namespace trainscope::workloads
