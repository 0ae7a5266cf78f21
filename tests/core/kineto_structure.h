// kineto_structure.h — one rank's PyTorch profiler (Kineto) trace written the way torch.profiler
// writes it (PyTorch 2.x layout; shared by import_test.cpp and viewer_files_test.cpp): distributedInfo of
// rank 3 of 4, a CPU process (pid 4242) with its main thread, an autograd thread with a negative tid
// (older Kineto wrote an int32 tid as is; newer ones write abs()), a thread whose tid comes once as
// -5 and once as its unsigned 32-bit form 4294967291, the GPU (pid 0 = device 0) with kernels on
// streams 7 and 20 and gpu_user_annotation events on stream 7, and the metadata events Kineto
// writes: process_name / process_labels / process_sort_index, thread_name / thread_sort_index
// (stream names with Kineto's trailing space), the "Overhead" process (pid -1), the "Spans" trace
// span, iteration and window-end instants, and ac2g flows.
#pragma once

#include <cstdint>
#include <string>

namespace trainscope::testing {

inline constexpr int64_t kStructureBase = 1700000000000000000LL;  // baseTimeNanoseconds

inline std::string kinetoStructureTrace() {
  return R"JSON({
  "schemaVersion": 1,
  "deviceProperties": [
    {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85029158912, "computeMajor": 9, "computeMinor": 0,
     "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "regsPerMultiprocessor": 65536,
     "warpSize": 32, "sharedMemPerBlock": 49152, "sharedMemPerMultiprocessor": 233472, "numSms": 132,
     "sharedMemPerBlockOptin": 232448}
  ],
  "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 4, "pg_count": 1, "pg_config": [], "nccl_version": "2.20.5"},
  "cuda_runtime_version": 12040, "cuda_driver_version": 12040, "with_flops": 0, "record_shapes": 1, "profile_memory": 0,
  "trace_id": "2A4F5C5E61D14C10A8E1D0C1E4B9F0AA",
  "displayTimeUnit": "ms",
  "baseTimeNanoseconds": 1700000000000000000,
  "traceEvents": [
  {
    "ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "pid": 4242, "tid": 4242,
    "ts": 10.000, "dur": 1000.000,
    "args": {"External id": 1, "Record function id": 0, "Ev Idx": 0}
  },
  {
    "ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 4242, "tid": 4242,
    "ts": 20.500, "dur": 60.000,
    "args": {"External id": 2, "Record function id": 0, "Sequence number": 10, "Fwd thread id": 0, "Ev Idx": 1}
  },
  {
    "ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 4242, "tid": 4242,
    "ts": 25.000, "dur": 50.000,
    "args": {"External id": 3, "Record function id": 0, "Sequence number": 11, "Fwd thread id": 0, "Ev Idx": 2,
             "Input Dims": [[64], [8, 64], [64, 64], [], []], "Input type": ["float", "float", "float", "Scalar", "Scalar"]}
  },
  {
    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242,
    "ts": 40.000, "dur": 6.000,
    "args": {"External id": 3, "cbid": 211, "correlation": 501}
  },
  {
    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242,
    "ts": 120.000, "dur": 5.000,
    "args": {"External id": 4, "cbid": 211, "correlation": 502}
  },
  {
    "ph": "X", "cat": "kernel", "name": "ampere_sgemm_64x64_tn", "pid": 0, "tid": 7,
    "ts": 100.000, "dur": 200.000,
    "args": {"External id": 3, "queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": 501,
             "registers per thread": 96, "shared memory": 8192, "blocks per SM": 0.484848, "warps per SM": 3.878788,
             "grid": [32, 2, 1], "block": [256, 1, 1], "est. achieved occupancy %": 6}
  },
  {
    "ph": "X", "cat": "kernel", "name": "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>(int, at::native::AddFunctor<float>)", "pid": 0, "tid": 7,
    "ts": 310.000, "dur": 40.000,
    "args": {"External id": 4, "queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": 502,
             "registers per thread": 16, "shared memory": 0, "grid": [64, 1, 1], "block": [128, 1, 1]}
  },
  {
    "ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#7", "pid": 0, "tid": 7,
    "ts": 99.999, "dur": 250.002,
    "args": {"External id": 1}
  },
  {
    "ph": "X", "cat": "gpu_user_annotation", "name": "forward", "pid": 0, "tid": 7,
    "ts": 99.999, "dur": 200.002,
    "args": {"External id": 5}
  },
  {
    "ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "pid": 0, "tid": 20,
    "ts": 400.000, "dur": 300.000,
    "args": {"External id": 6, "queued": 0, "device": 0, "context": 1, "stream": 20, "correlation": 503,
             "registers per thread": 96, "shared memory": 0, "grid": [2, 1, 1], "block": [512, 1, 1]}
  },
  {
    "ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: AddmmBackward0", "pid": 4242, "tid": -77,
    "ts": 500.000, "dur": 100.000,
    "args": {"External id": 7, "Record function id": 0, "Sequence number": 11, "Fwd thread id": 1, "Ev Idx": 6}
  },
  {
    "ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 4242, "tid": 4294967291,
    "ts": 520.000, "dur": 30.000,
    "args": {"External id": 8, "Record function id": 0, "Ev Idx": 7}
  },
  {
    "ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 4242, "tid": -5,
    "ts": 560.000, "dur": 10.000,
    "args": {"External id": 9, "Record function id": 0, "Ev Idx": 8}
  },
  {
    "ph": "s", "id": 501, "pid": 4242, "tid": 4242, "ts": 40.000,
    "cat": "ac2g", "name": "ac2g"
  },
  {
    "ph": "f", "id": 501, "pid": 0, "tid": 7, "ts": 100.000,
    "cat": "ac2g", "name": "ac2g", "bp": "e"
  },
  {
    "name": "process_name", "ph": "M", "ts": 0.000, "pid": 4242, "tid": 0,
    "args": {"name": "python3"}
  },
  {
    "name": "process_labels", "ph": "M", "ts": 0.000, "pid": 4242, "tid": 0,
    "args": {"labels": "CPU"}
  },
  {
    "name": "process_sort_index", "ph": "M", "ts": 0.000, "pid": 4242, "tid": 0,
    "args": {"sort_index": 4242}
  },
  {
    "name": "process_name", "ph": "M", "ts": 0.000, "pid": 0, "tid": 0,
    "args": {"name": "python3"}
  },
  {
    "name": "process_labels", "ph": "M", "ts": 0.000, "pid": 0, "tid": 0,
    "args": {"labels": "GPU 0"}
  },
  {
    "name": "process_sort_index", "ph": "M", "ts": 0.000, "pid": 0, "tid": 0,
    "args": {"sort_index": 16777216}
  },
  {
    "name": "thread_name", "ph": "M", "ts": 0.000, "pid": 4242, "tid": 4242,
    "args": {"name": "thread 4242 (python3)"}
  },
  {
    "name": "thread_sort_index", "ph": "M", "ts": 0.000, "pid": 4242, "tid": 4242,
    "args": {"sort_index": 4242}
  },
  {
    "name": "thread_name", "ph": "M", "ts": 0.000, "pid": 4242, "tid": -77,
    "args": {"name": "thread 77 (pt_autograd_0)"}
  },
  {
    "name": "thread_sort_index", "ph": "M", "ts": 0.000, "pid": 4242, "tid": -77,
    "args": {"sort_index": 5000}
  },
  {
    "name": "thread_name", "ph": "M", "ts": 0.000, "pid": 0, "tid": 7,
    "args": {"name": "stream 7 "}
  },
  {
    "name": "thread_sort_index", "ph": "M", "ts": 0.000, "pid": 0, "tid": 7,
    "args": {"sort_index": 7}
  },
  {
    "name": "thread_name", "ph": "M", "ts": 0.000, "pid": 0, "tid": 20,
    "args": {"name": "stream 20 "}
  },
  {
    "name": "thread_sort_index", "ph": "M", "ts": 0.000, "pid": 0, "tid": 20,
    "args": {"sort_index": 20}
  },
  {
    "name": "process_name", "ph": "M", "ts": 0.000, "pid": -1, "tid": 0,
    "args": {"name": "Overhead"}
  },
  {
    "name": "process_sort_index", "ph": "M", "ts": 0.000, "pid": -1, "tid": 0,
    "args": {"sort_index": 1048576}
  },
  {
    "ph": "X", "cat": "Trace", "ts": 0.000, "dur": 1100.000,
    "pid": "Spans", "tid": "PyTorch Profiler",
    "name": "PyTorch Profiler (0)",
    "args": {"Op count": 0}
  },
  {
    "name": "process_sort_index", "ph": "M", "ts": 0.000,
    "pid": "Spans", "tid": 0,
    "args": {"sort_index": 536870912}
  },
  {
    "name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g",
    "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": 0.000
  },
  {
    "name": "Record Window End", "ph": "i", "s": "g",
    "pid": "", "tid": "", "ts": 1200.000
  }
  ],
  "traceName": "/tmp/trace/rank3.1700000000000.pt.trace.json"
})JSON";
}

}  // namespace trainscope::testing
