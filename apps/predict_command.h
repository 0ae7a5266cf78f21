// predict_command.h — `trainscope predict`: the models' view of one configuration, nothing run.
#pragma once

#include <CLI/CLI.hpp>

#include "trainscope/tuner/models.h"

namespace trainscope::apps {

struct PredictFlags;
// Adds the subcommand's flags; the returned callback runs it (returns the exit status).
CLI::App* addPredictCommand(CLI::App& app, PredictFlags*& flags);
int runPredict(const PredictFlags& flags);

// One configuration as predict prices it on cluster `c` (the flags' --cluster and --nodes are the
// caller's: `calibrate` prices rows on clusters it varies): its plan and time options, to be priced
// again, and the prediction. Throws the UserErrors predict gives.
struct PricedConfig {
  tuner::Plan p;
  tuner::TimeOptions options;
  double step_s = 0;
  int64_t peak_bytes = 0;          // this runtime's memory model
  int64_t judged_peak_bytes = 0;   // what predict's "fits" is judged on (FSDP's / DeepSpeed's own peak where it has one)
};
PricedConfig priceConfig(const PredictFlags& f, const workloads::Workload& w, const tuner::Cluster& c);

}  // namespace trainscope::apps
