// trainscope/rundb/rows.h — one plain type per table of the run database (docs/trace-schema.md).
//
// What the writer takes and the reader returns. Names are ids into the `strings` table (StringId);
// the reader resolves them with RunReader::string. Times are integer nanoseconds. Every event row
// ends with its `rank`, so that the recording side can brace-initialise the event fields and leave
// the rank to the tracer.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace trainscope::rundb {

using StringId = uint32_t;
inline constexpr StringId kNoString = UINT32_MAX;

// ranges.kind
enum class RangeKind : int { PushPop = 0, StartEnd = 1 };
// memcpy.kind (CUPTI's CUpti_ActivityMemcpyKind values)
enum class MemcpyKind : int { Unknown = 0, HtoD = 1, DtoH = 2, HtoA = 3, AtoH = 4, AtoA = 5, AtoD = 6, DtoA = 7,
                              DtoD = 8, HtoH = 9, PtoP = 10 };
// api_calls.kind
enum class ApiKind : int { Runtime = 0, Driver = 1 };
// threads.kind: what `tid` (and `device`) name.
//   Thread: a CPU thread, `tid` as in ranges, host_ops and api_calls (device -1);
//   Stream: a device stream, `device` and `tid` = the stream id as in kernels, memcpy, memset and
//           gpu_annotations;
//   Process: an OS process of the rank, `tid` = its pid (device -1).
enum class ThreadKind : int { Thread = 0, Stream = 1, Process = 2 };

// steps: one optimizer step as one rank saw it.
struct Step {
  int64_t rank = 0;
  int64_t step = 0;              // 0-based optimizer step
  double loss = 0;               // mean over the global batch (unscaled)
  bool loss_recorded = true;     // false: the run gave none (a probe row without one; the column NULL)
  double lr = 0;
  double grad_norm = 0;          // global L2 norm before clipping (unscaled)
  double loss_scale = 1;         // fp16 dynamic loss scale used for this step (1 otherwise)
  bool skipped = false;          // non-finite gradient: update skipped
  int64_t tokens = 0;            // tokens in the global batch
  int64_t start_ns = 0;          // wall clock at step start
  int64_t step_time_ns = 0;
  double tokens_per_s = 0;       // tokens / this rank's step time
  double model_flops = 0;        // this rank's share: Narayanan et al. 2021, no recomputation
  double hw_flops = 0;           // this rank's share, recomputation included
  std::optional<double> mfu;     // model FLOP/s / peak (null when the peak is unknown)
  std::optional<double> hfu;
  int64_t peak_bytes = 0;        // peak allocated bytes during the step
  int64_t param_bytes = 0;
  int64_t grad_bytes = 0;
  int64_t optim_bytes = 0;
  int64_t activation_bytes = 0;  // peak during forward/backward above the step's baseline
};

struct Range {
  int64_t start_ns = 0, end_ns = 0;
  StringId name = 0, domain = 0;
  int64_t tid = 0;
  int32_t depth = 0, kind = 0;  // kind: RangeKind
  int64_t rank = 0;
};

// A range on a device stream (Kineto's gpu_user_annotation): drawn above that stream's kernels.
struct GpuAnnotation {
  int64_t start_ns = 0, end_ns = 0;
  int64_t device = 0, stream = 0;
  StringId name = 0, domain = 0;
  int64_t rank = 0;
};

struct HostOp {
  int64_t start_ns = 0, end_ns = 0;
  StringId name = 0;
  int64_t tid = 0;
  int64_t seq = -1;               // autograd sequence number (-1: none)
  StringId shapes = kNoString;    // input shapes as text (kNoString: not recorded)
  int64_t rank = 0;
};

struct Kernel {
  int64_t start_ns = 0, end_ns = 0;
  int64_t device = 0, stream = 0;
  StringId name = 0;
  int64_t correlation = -1;       // joins the API call that launched it (-1: none)
  std::array<int32_t, 3> grid{}, block{};
  int32_t registers = 0, shared_bytes = 0;
  int64_t collective_seq = -1;    // NCCL kernels: the seq of their collective (set at merge)
  int64_t rank = 0;
};

struct Memcpy {
  int64_t start_ns = 0, end_ns = 0;
  int64_t device = 0, stream = 0;
  int64_t correlation = -1;
  int32_t kind = 0;               // MemcpyKind
  int64_t bytes = 0;
  int64_t rank = 0;
};

struct Memset {
  int64_t start_ns = 0, end_ns = 0;
  int64_t device = 0, stream = 0;
  int64_t correlation = -1;
  int64_t bytes = 0;
  int32_t value = 0;
  int64_t rank = 0;
};

struct ApiCall {
  int64_t start_ns = 0, end_ns = 0;
  int64_t tid = 0;
  StringId name = 0;
  int64_t correlation = -1;
  int32_t kind = 0;               // ApiKind
  int64_t rank = 0;
};

struct Counter {
  int64_t ts_ns = 0;
  StringId name = 0;
  double value = 0;
  int64_t rank = 0;
};

// One collective as one rank saw it. Bandwidths by nccl-tests' definitions (PERFORMANCE.md):
//   algbw = bytes / time;  busbw = algbw × factor, factor = 2(n−1)/n for all-reduce,
//   (n−1)/n for reduce-scatter, all-gather and all-to-all, 1 for broadcast, send, recv and anything else,
// where bytes is the all-reduce buffer, the all-gather output, the reduce-scatter input, the
// all-to-all's input on this rank (its own rows included; splits vary by rank under expert parallelism).
struct Collective {
  std::string op;     // all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, send, recv, barrier
  std::string group;  // world, dp, tp, pp, embedding (or a profiler's process-group name)
  int64_t rank = 0;   // global rank that recorded it
  int64_t group_size = 1;
  int64_t seq = 0;    // per-group sequence number
  int64_t bytes = 0;
  int64_t start_ns = 0, end_ns = 0;
  // The trace's end cut the call (an import's "finished": false): its bytes are known, its end is
  // not — end_ns is the last time the trace recorded on the rank, a bound, not the call's end. Such a
  // row counts in bytes and calls, never in a sum of collective time or a bandwidth fit.
  bool cut = false;
  // end − start, exact, without overflowing for any two times a damaged or foreign file may hold
  double seconds() const {
    return end_ns >= start_ns ? double(uint64_t(end_ns) - uint64_t(start_ns)) * 1e-9
                              : -double(uint64_t(start_ns) - uint64_t(end_ns)) * 1e-9;
  }
  double algbw() const;   // bytes/s (0 for an empty, zero-length or cut call)
  double busbw() const;   // bytes/s
};

// The name and display order a profiler gave a thread, a stream or a process (threads table).
struct ThreadName {
  int32_t kind = 0;                   // ThreadKind
  int64_t device = -1;                // streams: the device; -1 otherwise
  int64_t tid = 0;                    // thread id, stream id or pid (see ThreadKind)
  StringId name = kNoString;          // kNoString: none recorded
  std::optional<int64_t> sort_index;  // the profiler's order (Chrome's thread_sort_index): lower first
  int64_t rank = 0;
};

struct RankInfo {
  int64_t rank = 0;
  std::string host, device;
  int64_t pid = 0;
  int64_t clock_offset_ns = 0;                    // added to this rank's times → rank 0's clock
  std::optional<int64_t> offset_start_ns, offset_end_ns;
  // A failed run (schema 8; NULL otherwise): how the rank's process ended (its exit status, 128 +
  // signal when killed) and the error it reported ("" when none), as the local launcher saw them.
  std::optional<int64_t> exit_status;
  std::string error;
};

struct Drop {
  int64_t rank = 0;
  std::string source;
  int64_t emitted = 0, stored = 0, dropped = 0;
};

struct WeightDigest {
  std::string name;
  double sum = 0, sumsq = 0, abssum = 0;
};

// expert_load: what one MoE layer's router did on one rank in one optimizer step, one row per expert
// (summed over the step's micro-batches). aux_loss / z_loss are the layer's (coefficient applied, mean
// over the micro-batches), repeated on each of its experts' rows. Not an event: rank 0 writes every
// rank's rows into the run database itself, as it does `steps`.
struct ExpertLoad {
  int64_t rank = 0;
  int64_t step = 0;
  int64_t layer = 0;      // global layer number
  int64_t expert = 0;     // global expert id
  int64_t tokens = 0;     // assignments this rank's router sent to the expert, before capacity
  int64_t dropped = 0;    // of those, dropped over capacity
  int64_t capacity = 0;   // per expert and micro-batch; 0: drop-less
  double aux_loss = 0;
  double z_loss = 0;
};

// checkpoints: one `run --save` checkpoint written (docs/checkpoints.md): after `step` steps, its
// files' bytes over every rank, and the seconds from its first write to its swap into place.
struct Checkpoint {
  int64_t step = 0;
  double seconds = 0;
  int64_t bytes = 0;
  std::string path;
};

// --precision fp8: one FP8 linear's scaling in one step (docs/trace-schema.md, "fp8_scales").
struct Fp8Scale {
  int64_t rank = 0;
  int64_t step = 0;
  std::string tensor;  // the weight's parameter name, e.g. "h.0.attn.c_attn.weight"
  std::string role;    // "input" | "weight" | "grad_output"
  double amax = 0;     // max |value| this step, reduced (max) over the data- and tensor-parallel ranks
  double scale = 0;    // the scale this step quantised with (fp8_max / amax of the history)
};

}  // namespace trainscope::rundb
