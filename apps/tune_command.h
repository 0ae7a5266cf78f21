// tune_command.h — `trainscope tune` (`export` is export_command.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace trainscope::apps {

struct TuneFlags;
CLI::App* addTuneCommand(CLI::App& app, TuneFlags*& flags);
int runTune(const TuneFlags& flags, const std::string& self_dir);

}  // namespace trainscope::apps
