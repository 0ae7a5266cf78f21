// trainscope/tuner/tune_json.h — a study's outcome as one JSON object (`trainscope tune --json`): the
// inputs named, every trial, every candidate ranked with its predictions (the current one and the
// analytic one it was first priced at, both as the candidate keeps them: nothing is re-priced here),
// the measured costs, the prediction check and the network fit.
#pragma once

#include <string>

#include "trainscope/tuner/tune.h"

namespace trainscope::tuner {

// `study`: the study's path as the user named it. The text is one JSON object (jsonText), no newline.
std::string tuneResultJson(const std::string& study, const workloads::Workload& w, const Cluster& c,
                           const TuneResult& r);

}  // namespace trainscope::tuner
