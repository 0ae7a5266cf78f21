// trainscope/runtime/calibrate.h — a short measurement of this machine for a cluster file
// (`trainscope tune --cluster local`): LibTorch's matmul rate at several GEMM sizes per dtype, the
// memory bandwidth of a large copy, and the rate of an elementwise add. The collective α–β comes
// from a traced two-rank run instead (tuner/calibrate.h fits it from the collectives table).
#pragma once

#include <string>

namespace trainscope::runtime {

// One JSON object: {"threads": T, "matmul": {"fp32": [[gemm_flops, flop_per_s], …], "bf16": …},
// "memory_bandwidth": bytes/s, "vector_flops": elements/s}. Best of several repetitions each;
// about five seconds in all.
std::string measureMachine(int threads);

}  // namespace trainscope::runtime
