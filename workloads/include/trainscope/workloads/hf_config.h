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
std::string hfModelType(const Workload& w);
std::string hfUnsupported(const Workload& w);

// The config.json text (two-space indented, ending in a newline). Throws UserError naming `field`
// (the flag that asked for it) when hfModelType(w) is "".
std::string hfConfigJson(const Workload& w, const std::string& field);

}  // namespace trainscope::workloads
