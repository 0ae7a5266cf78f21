// run_flags.h — the flags of `trainscope run` (CLI11), shared by trainscope-train's parser and its
// help. `--config FILE.json` expands to the flags of that config before the others, so that flags
// given after it override it (a flag given twice takes its last value).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "trainscope/runconfig/config.h"

namespace trainscope::apps {

struct RunFlags {
  runtime::TrainConfig cfg;
  runtime::RunOutput out;
  std::string ckpt = "none", precision = "fp32", optimizer = "adamw", device = "auto";
  std::string schedule = "1f1b", launcher = "local", config_file, mem_limit, seed;
  int64_t gbs = 0, ga = 0;
  double peak = 0;
  bool json = false, quiet = false, skip_memory_check = false, oversubscribe = false;
};

void addRunFlags(CLI::App* run, RunFlags& f);
// The parsed flags as a TrainConfig (enums parsed; throws UserError naming the flag).
runtime::TrainConfig finish(RunFlags& f, CLI::App* run);
// argv with every `--config FILE` replaced by the flags of FILE's config (UserError for a bad file).
std::vector<std::string> expandConfigFlag(const std::vector<std::string>& argv);

}  // namespace trainscope::apps
