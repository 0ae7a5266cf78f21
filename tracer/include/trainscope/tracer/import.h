// trainscope/tracer/import.h — other profilers' traces into a run database, so report, export and
// the viewer work on them as on a native trace.
//   PyTorch profiler (Kineto) Chrome-trace JSON, plain or gzipped, one file per rank (the rank comes
//   from distributedInfo.rank when present, else the file's position on the command line):
//     cpu_op → host_ops, user_annotation/gpu_user_annotation → ranges, kernel → kernels,
//     cuda_runtime/cuda_driver → api_calls, gpu_memcpy → memcpy, gpu_memset → memset;
//     "ProfilerStep#N" annotations become steps.
//   Nsight Systems SQLite exports (`nsys export --type sqlite`): CUPTI_ACTIVITY_KIND_KERNEL/RUNTIME/
//     MEMCPY/MEMSET, NVTX_EVENTS (push/pop and start/end ranges), StringIds; NVTX ranges named
//     "step" or "ProfilerStep#N" become steps.
// Files are recognised by content (SQLite header, gzip magic, JSON), not by name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainscope::tracer {

struct ImportStats {
  int files = 0;
  int64_t host_ops = 0, ranges = 0, kernels = 0, api_calls = 0, memcpy = 0, memset = 0, steps = 0;
};

// Throws UserError naming the file for unreadable, unrecognised or malformed input.
ImportStats importTraces(const std::vector<std::string>& inputs, const std::string& out_db, bool overwrite);

}  // namespace trainscope::tracer
