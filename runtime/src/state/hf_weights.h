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

// Whole tensors by flat name (a stage's or the model's; fp32, unpadded or vocabulary-padded): the
// Hugging Face tensors, contiguous on the CPU, in file order.
std::vector<std::pair<std::string, at::Tensor>> toHf(const workloads::Workload& w,
                                                     const std::vector<std::pair<std::string, at::Tensor>>& flat);
// The Hugging Face names those flat tensors become, and their bytes in fp32.
std::vector<std::pair<std::string, int64_t>> hfNames(const workloads::Workload& w, const std::vector<std::string>& flat);

// The whole model from Hugging Face tensors (F32, BF16 or F16; converted to fp32), checked against
// w's shapes. Errors are UserErrors naming `field` (--resume, --init-from) and the folder.
GptWeights fromHf(const workloads::Workload& w, const std::map<std::string, safetensors::Tensor>& hf,
                  const std::string& dir, const std::string& field);

// The flat names of the whole model (GptWeights::info of the whole stage).
std::vector<std::string> flatNames(const workloads::Workload& w);

}  // namespace trainscope::runtime
