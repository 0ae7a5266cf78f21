// trainscope/rundb/range_names.h — the names of the ranges the runtime emits. The tracer, the
// report and the viewer match on these strings, so they live here and nowhere else.
#pragma once

namespace trainscope::rundb::names {

inline constexpr const char* kDomain = "trainscope";

inline constexpr const char* kStep = "step";
inline constexpr const char* kMicroBatch = "micro_batch";
inline constexpr const char* kForward = "forward";
inline constexpr const char* kBackward = "backward";
inline constexpr const char* kRecompute = "recompute";
inline constexpr const char* kLayer = "layer";
inline constexpr const char* kHead = "lm_head";
inline constexpr const char* kGradSync = "grad_sync";
inline constexpr const char* kOptimizer = "optimizer";
inline constexpr const char* kCollective = "collective";  // prefix: "collective/all_reduce"
inline constexpr const char* kPipelineSend = "pp_send";
inline constexpr const char* kPipelineRecv = "pp_recv";
inline constexpr const char* kCpAttention = "cp_attention";  // one ring step's block of attention (context parallelism)

// Counters.
inline constexpr const char* kMemoryCounter = "memory.allocated_bytes";

// Ranges whose time counts as compute in the report's step breakdown (CPU runs).
inline constexpr const char* kComputeRanges[] = {kForward, kBackward, kOptimizer};

}  // namespace trainscope::rundb::names
