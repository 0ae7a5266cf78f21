// comm_impl.h — internal pieces of the collective wrapper.
#pragma once

#include <chrono>
#include <cstdint>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace trainscope::runtime {

// ProcessGroupNCCL for one group (comm_nccl.cpp in CUDA builds; throws elsewhere).
c10::intrusive_ptr<c10d::Backend> makeNcclBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                  std::chrono::milliseconds timeout);

}  // namespace trainscope::runtime
