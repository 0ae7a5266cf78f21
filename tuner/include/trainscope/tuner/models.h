// trainscope/tuner/models.h — the models the tuner builds on (models/: plans, clusters, the memory
// and time models, the per-layer op list), named in the tuner's namespace too: the tuner is their
// main reader, and `tuner::Plan` reads as well as `models::Plan`. The runtime includes models/
// directly (it checks a plan's memory before training it) and never the tuner.
#pragma once

#include "trainscope/models/cluster.h"
#include "trainscope/models/layer_ops.h"
#include "trainscope/models/memory_model.h"
#include "trainscope/models/plan.h"
#include "trainscope/models/time_model.h"

namespace trainscope::tuner {
using namespace trainscope::models;  // NOLINT(google-build-using-namespace): the tuner extends the models
}  // namespace trainscope::tuner
