// predict_plan.h — the plan `trainscope predict`'s flags describe: the devices priced, the split of
// them into DP × CP × TP × PP, and the refusals of a plan the models cannot price (predict_command.cpp
// and priceConfig's callers).
#pragma once

#include <cstdint>

#include "predict_flags.h"
#include "trainscope/tuner/models.h"
#include "trainscope/workloads/workload.h"

namespace trainscope::apps {

// The devices priced: --gpus, or every one of the cluster's; more than it has are refused.
int64_t devicesOf(const PredictFlags& f, const tuner::Cluster& c);
// The plan the flags describe on `devices` devices (DP takes what TP × PP × CP leave); the split
// refused where it does not divide the devices or a TP group would span nodes unasked.
tuner::Plan planFromFlags(const PredictFlags& f, const workloads::Workload& w, const tuner::Cluster& c, int64_t devices);
// Refuses a plan the models cannot price: an invalid one, or one whose figures they cannot count.
void checkPriceable(const workloads::Workload& w, const tuner::Plan& p, int64_t devices);

}  // namespace trainscope::apps
