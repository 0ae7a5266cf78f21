// hf_weights.h — the whole model's fp32 weights to and from the Hugging Face layout (internal).
// Names and the cutting of fused tensors are workloads/hf_checkpoint.h's; this file moves tensors.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "trainscope/common/safetensors.h"
#include "trainscope/runtime/gpt.h"

namespace trainscope::runtime {

// The whole model's tensors in flat order (GptWeights::info(StageSpec::whole) names), each fp32 on
// the CPU, unpadded or vocabulary-padded: the Hugging Face tensors, contiguous, in file order.
std::vector<std::pair<std::string, at::Tensor>> toHf(const workloads::Workload& w, const std::vector<at::Tensor>& full);

// The whole model from Hugging Face tensors (F32, BF16 or F16; converted to fp32), checked against
// w's shapes. Errors are UserErrors naming `field` (--resume, --init-from) and the folder.
GptWeights fromHf(const workloads::Workload& w, const std::map<std::string, safetensors::Tensor>& hf,
                  const std::string& dir, const std::string& field);

// The flat names of the whole model (GptWeights::info of the whole stage).
std::vector<std::string> flatNames(const workloads::Workload& w);

}  // namespace trainscope::runtime
