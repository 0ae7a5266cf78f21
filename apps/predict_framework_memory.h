// predict_framework_memory.h — `predict --framework fsdp|deepspeed|megatron` on a GPU: the framework's
// own model state and buffers (models/framework_memory.h; Megatron-LM's: megatronPeak) beside this
// runtime's memory, in the text and the JSON.
#pragma once

#include <nlohmann/json.hpp>

#include "trainscope/tuner/models.h"

namespace trainscope::apps {

// Adds "framework_memory" to `j` for FSDP, DeepSpeed and Megatron-LM (nothing for this runtime).
void addFrameworkMemoryJson(nlohmann::json& j, const workloads::Workload& w, const tuner::Plan& p,
                            tuner::Framework f, const tuner::Cluster& c, const tuner::MemoryPrediction& m,
                            const tuner::DeepSpeedZero& z);
// The same as lines of text.
void printFrameworkMemory(const workloads::Workload& w, const tuner::Plan& p, tuner::Framework f,
                          const tuner::Cluster& c, const tuner::MemoryPrediction& m,
                            const tuner::DeepSpeedZero& z);

}  // namespace trainscope::apps
