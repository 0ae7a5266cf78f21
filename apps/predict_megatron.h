// predict_megatron.h — `predict --framework megatron`'s overlap flags (--overlap-grad-reduce,
// --overlap-param-gather, --tp-comm-overlap, --no-overlap-p2p-comm, --fp8-param-gather) into the time
// model's options (the last into the plan, Plan::fp8_param_gather, which priceFlags sets),
// refused where Megatron-LM refuses them (megatron/training/arguments.py) and under other frameworks.
#pragma once

#include "predict_flags.h"
#include "trainscope/tuner/models.h"

namespace trainscope::apps {

tuner::MegatronOverlap megatronOverlapOf(const PredictFlags& f, const tuner::Plan& p, tuner::Framework framework);

}  // namespace trainscope::apps
