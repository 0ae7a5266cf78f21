// export_model.h — the model's architecture in the exports (tuner/src only): Megatron-LM's
// architecture flags, and the Hugging Face config.json written beside the DeepSpeed, Accelerate and
// TrainingArguments files.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "trainscope/runconfig/config.h"
#include "trainscope/tuner/export.h"

namespace trainscope::tuner::detail {

// Megatron-LM's flags for the workload's architecture (arguments.py's names: --normalization,
// --swiglu, --position-embedding-type, --group-query-attention, ...), appended to `o`; what
// Megatron-LM cannot express goes to `notes`.
void megatronArchitecture(std::ostringstream& o, const runconfig::TrainConfig& c, std::vector<std::string>& notes);

// The model's config.json as a file to write beside the export, or a note saying why there is none.
void addModelConfig(const runconfig::TrainConfig& c, ExportResult& r);

// The transformer block class FSDP wraps: the Transformers class of hfModelType (GPT2Block,
// LlamaDecoderLayer, ...); GPT2Block for a model without one (a GPT-style mixture of experts).
std::string wrapClass(const runconfig::TrainConfig& c);

// PyTorch FSDP's sharding strategy of a layout (SHARD_GRAD_OP, FULL_SHARD, HYBRID_SHARD; nullptr: none):
// the Accelerate config's fsdp_sharding_strategy, and the FSDP_SHARDING_STRATEGY an --runner hf trial
// gets (job.cpp).
const char* fsdpStrategy(const runconfig::TrainConfig& c);

}  // namespace trainscope::tuner::detail
