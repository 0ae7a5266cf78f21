// tune_command.h — `trainscope tune` and `trainscope export STUDY --format …`.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace trainscope::apps {

struct TuneFlags;
CLI::App* addTuneCommand(CLI::App& app, TuneFlags*& flags);
int runTune(const TuneFlags& flags, const std::string& self_dir);

// `trainscope export STUDY.db --format run|command|megatron|deepspeed|accelerate [--trial N]`: the
// recommended (or the given candidate's) configuration in that format, on stdout or to `out`.
int exportStudy(const std::string& study, const std::string& format, int64_t candidate, const std::string& out);

}  // namespace trainscope::apps
