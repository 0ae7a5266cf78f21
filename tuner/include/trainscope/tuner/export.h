// trainscope/tuner/export.h — a configuration in other tools' formats (`trainscope export STUDY
// --format …`). Pure functions: a TrainConfig in, text and notes out; no files, no study, no output.
// The command line (apps/export_command.cpp) reads the study and writes the text where it was asked.
//
//   run                a `trainscope run --config` file (TrainConfig JSON)
//   command            the `trainscope run` command lines, local and Slurm, quoted for a POSIX shell
//   megatron           Megatron-LM's pretrain_gpt.py flags (arguments.py's names)
//   deepspeed          a DeepSpeed config JSON (ds_config.json), with its WarmupCosineLR scheduler
//   accelerate-config  the YAML that `accelerate launch --config_file FILE` reads as it is
//   training-args      Transformers' TrainingArguments as JSON (HfArgumentParser.parse_json_file,
//                      or TrainingArguments(**json.load(f)))
//   accelerate         both of the last two in one JSON object, {"accelerate_config": {…},
//                      "training_arguments": {…}}: a bundle for scripts, not a file either tool
//                      reads; write each part to its own file (or use the two formats above)
//   torchtitan         torchtitan's train.py overrides (--training.*, --parallelism.*, --optimizer.*;
//                      0.3's config manager takes them after --module/--config), export_torchtitan.cpp
//   hf-config          the model's Hugging Face config.json (workloads/hf_config.h); deepspeed,
//                      accelerate-config, training-args and accelerate also return it as a file to
//                      write beside theirs (ExportResult::files), so the model is built as trained
// What a format cannot say (a GPipe schedule for Megatron-LM, TP for DeepSpeed's config, …) is
// returned as notes, one sentence each, for the caller to show.
#pragma once

#include <string>
#include <vector>

#include "trainscope/runconfig/config.h"

namespace trainscope::tuner {

enum class ExportFormat { Run, Command, Megatron, DeepSpeed, Accelerate, AccelerateConfig, TrainingArgs, HfConfig, Torchtitan };

// "run|command|megatron|deepspeed|accelerate|accelerate-config|training-args|hf-config": for help and errors.
const char* exportFormatNames();
// Throws UserError naming `field` for an unknown name.
ExportFormat parseExportFormat(const std::string& name, const std::string& field = "--format");

struct ExportTarget {
  bool cpu = false;  // the study's cluster is a CPU one (Accelerate: MULTI_CPU and use_cpu)
  // export --reduce-dtype: the dtype DeepSpeed reduces gradients in (its communication_data_type):
  // "default" (the model's dtype, DeepSpeed's own default, written out), "fp32", "bf16" or "fp16".
  std::string reduce_dtype = "default";
  // The study's cluster's devices per node (0: not known): Accelerate's num_machines is the nodes a
  // candidate's ranks fill (accelerate launch starts num_processes / num_machines on each).
  int64_t devices_per_node = 0;
};

// The communication_data_type a DeepSpeed export of `c` writes ("fp32", "bf16" or "fp16"); UserError
// naming --reduce-dtype for another value.
std::string deepspeedReduceDtype(const runconfig::TrainConfig& c, const ExportTarget& t);

// A file that belongs beside the export (the model's config.json), named as the target reads it.
struct ExportFile {
  std::string name;  // a plain file name, e.g. "config.json"
  std::string text;
};

struct ExportResult {
  std::string text;                // the file's contents, ending in a newline
  std::vector<std::string> notes;  // what the format cannot express
  std::vector<ExportFile> files;   // to write in the same directory as the text (export_command.cpp)
};

// The trials ran a few steps at a constant learning rate; a training run gets the usual schedule
// (warm-up, cosine to min_lr_ratio × lr), a placeholder length to edit, and no injected fault.
// Returns the config resolved (resolve() throws UserError if it is not valid).
runconfig::TrainConfig trainingRunOf(runconfig::TrainConfig trial);

// `c` must be resolved (runconfig::resolve): the exports read its derived fields (dp, ga, world).
ExportResult exportConfig(const runconfig::TrainConfig& c, ExportFormat format, const ExportTarget& target = {});

// torchtitan's overrides of one config (export_torchtitan.cpp; exportConfig's Torchtitan).
ExportResult torchtitanFlags(const runconfig::TrainConfig& c);

}  // namespace trainscope::tuner
