// trainscope/tuner/megatron_prediction.h — what a plan exported to Megatron-LM should take there,
// beside what this runtime takes, on the study's cluster: one sentence for `export --format megatron`
// to print as a note (models/time_model.h with each framework's kernels; Megatron-LM's 18 bytes per
// parameter, or 6 + 12/d with the distributed optimizer the export turns on for ZeRO-1).
#pragma once

#include <string>

#include "trainscope/models/framework_profile.h"
#include "trainscope/runconfig/config.h"
#include "trainscope/tuner/study_inputs.h"

namespace trainscope::tuner {

// `c`: the exported config, resolved (runconfig::resolve). A study whose cluster is not a preset here,
// or a CPU one, gets the sentence that says so and how to price it instead (never a throw).
std::string megatronPrediction(const StudyInputs& study, const runconfig::TrainConfig& c);
// The same for framework `f`'s profile (framework_profile.h): `export --format deepspeed` (deepspeed),
// accelerate / accelerate-config / training-args (fsdp) print it beside this runtime's time. On a CPU
// study it prices the job as that framework's runner would run it there (Gloo ranks: the CPU rates and
// the profile's host work; a Trainer on CPU runs DDP), or says why the runner would not run the plan.
// `reduce_bytes` > 0: the bytes a gradient is reduced in (TimeOptions::reduce_bytes; 0: the profile's).
std::string frameworkPrediction(const StudyInputs& study, const runconfig::TrainConfig& c, models::Framework f,
                                double reduce_bytes = 0);

}  // namespace trainscope::tuner
