// run_flags.h — the flags of `trainscope run` (CLI11), shared by trainscope-train's parser and its
// help. The flags of TrainConfig's fields are made from the field list (runconfig/fields.h); the
// rest are where the run is recorded and what it prints.
//
// `--config FILE.json` alone reads FILE straight as a RunSpec (configOnly). With other flags it
// expands to the flags of FILE's spec before the others, so that flags given after it override it
// (a flag given twice takes its last value).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "trainscope/runconfig/config.h"

namespace trainscope::apps {

struct RunFlags {
  runconfig::TrainConfig cfg;  // the fields' flags write here (enums parsed: UserError naming the flag)
  runconfig::RunOutput out;
  std::string config_file;   // --config (expanded before parsing: see expandConfigFlag)
  bool json = false, quiet = false;
};

void addRunFlags(CLI::App* run, RunFlags& f);
// argv with every `--config FILE` replaced by the flags of FILE's spec (UserError for a bad file).
std::vector<std::string> expandConfigFlag(const std::vector<std::string>& argv);
// When argv is exactly `<exe> run --config FILE` (or `--config=FILE`): FILE read straight as a
// RunSpec, without going through flags (UserError for a bad file). Otherwise nullopt.
std::optional<runconfig::RunSpec> configOnly(const std::vector<std::string>& argv);

}  // namespace trainscope::apps
