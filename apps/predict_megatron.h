// predict_megatron.h — `predict --framework megatron`'s overlap flags (--overlap-grad-reduce,
// --overlap-param-gather, --tp-comm-overlap, --no-overlap-p2p-comm) into the time model's options,
// refused where Megatron-LM refuses them (megatron/training/arguments.py) and under other frameworks.
#pragma once

#include "predict_flags.h"
#include "trainscope/tuner/models.h"

namespace trainscope::apps {

tuner::MegatronOverlap megatronOverlapOf(const PredictFlags& f, const tuner::Plan& p, tuner::Framework framework);

}  // namespace trainscope::apps
