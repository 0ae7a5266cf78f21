// optim_impl.h — factories of the optimizers that live in their own files (internal).
#pragma once

#include <memory>
#include <vector>

#include "trainscope/runtime/optim.h"

namespace trainscope::runtime {
std::unique_ptr<Optimizer> makeAdafactor(const TrainConfig& cfg, std::vector<at::Tensor> params,
                                         std::vector<bool> decay);
std::unique_ptr<Optimizer> makeAdam8bit(const TrainConfig& cfg, std::vector<at::Tensor> params,
                                        std::vector<bool> decay);
}  // namespace trainscope::runtime
