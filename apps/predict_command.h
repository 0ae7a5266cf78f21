// predict_command.h — `trainscope predict`: the models' view of one configuration, nothing run.
#pragma once

#include <CLI/CLI.hpp>

namespace trainscope::apps {

struct PredictFlags;
// Adds the subcommand's flags; the returned callback runs it (returns the exit status).
CLI::App* addPredictCommand(CLI::App& app, PredictFlags*& flags);
int runPredict(const PredictFlags& flags);

}  // namespace trainscope::apps
