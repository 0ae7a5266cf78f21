// trainscope/workloads/hf_config.h — a workload as the Hugging Face `config.json` of its model.
//
// The inverse of load()'s Hugging Face reader: the config written for a workload reads back (through
// trainscope's reader and through transformers' AutoConfig) as the same architecture. The exports
// (DeepSpeed, Accelerate, TrainingArguments) write it beside their files; checkpoints beside the
// weights. docs/architectures.md lists the keys.
#pragma once

#include <string>

#include "trainscope/workloads/workload.h"

namespace trainscope::workloads {

// "gpt2", "llama", "mistral", "qwen2" or "mixtral": the Hugging Face model_type that builds w as
// trainscope does. Throws UserError naming the field when no supported model_type does (a GPT-style
// mixture of experts with GELU experts, a Llama with biases on some linears only, ALiBi, ...).
std::string hfModelType(const Workload& w, const std::string& field = "workload");
// "" when hfModelType(w) has an answer, else why not (the reason its error gives).
std::string hfUnsupported(const Workload& w);

// The transformer block class FSDP wraps for that model (GPT2Block, LlamaDecoderLayer, ...).
std::string hfDecoderLayerClass(const Workload& w);

// The config.json text (two-space indented, ending in a newline). Throws as hfModelType.
// `dtype` float32 and the workload's name ride along (transformers loads the weights as fp32;
// trainscope names the model it reads back).
std::string hfConfigJson(const Workload& w, const std::string& field = "workload");

}  // namespace trainscope::workloads
