// trainscope/tuner/trace_fit.h — fitting a cluster file's constants from a trace (`trainscope
// calibrate --trace`; docs/time-model.md, "Calibration from a trace").
//
// A trace (an imported Kineto / Nsight database, or a native run recorded at --trace-level ops) says
// more than its step time: how long each class of kernel took per step, how busy the host thread
// was per kernel it launched, and how long each collective of a known size took. measureTrace reads
// those per counted step; fitFromTraces moves each class's constant (models/fit_params.h) until the
// time model's own time for that class equals the measured one:
//   GEMM kernels              sustained_clock (GPU) / peak_flops.fp32 (CPU)
//   attention forward, backward  frameworks.<f>.flash_forward_scale / flash_backward_scale (GPU;
//                             on a CPU cluster attention is counted with the GEMMs)
//   memory-bound kernels      memory_efficiency (GPU) / memory_bandwidth (CPU)
//   host time per launch      frameworks.<f>.host_op_s, or dispatch_s where the profile defers to it;
//                             the backward thread's per launch frameworks.<f>.host_backward_op_s
//   another framework's host work  on a CPU cluster, for a trace of another framework's job (its
//                             database's meta "framework", or --config's): the step less its ops sets
//                             frameworks.<f>.host_op_s, and zero0_step_tensor_s where the traces run
//                             two or more micro-batch counts (bounded least squares, after the rates)
//   gradient reductions beside compute  frameworks.<f>.overlap_reduce (GPU): the share of what the
//                             model could hide behind the backward that the trace shows hidden
//   collectives by size       the tier's efficiency (GPU) or bandwidth (CPU) and latency, by an α–β
//                             least-squares fit (calibrate.h fitCollectives)
//   pipeline bubble           no constant: the classes are fitted to the step less the bubble (a
//                             rank's trace holds only its own stage's work), and the model prices
//                             the bubble from the fitted stages, reported beside the traces' waits
// The model's time for a class is read off the model itself: the step time's change when that
// constant moves by 25% (a class's time is inversely proportional to its rate), so the fit follows
// the time model as it changes. Each constant stays within its physical bounds (fit_params.h).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "trainscope/rundb/rows.h"
#include "trainscope/tuner/calibrate.h"
#include "trainscope/tuner/fit.h"

namespace trainscope::rundb {
class RunReader;
}

namespace trainscope::tuner {

// Kernel classes, by name: "gemm", "attention_forward", "attention_backward", "memory", "comm"
// (NCCL), "" (not an op that the time model prices, e.g. a profiler marker).
std::string kernelClass(const std::string& kernel_name);
// The same for CPU ops (aten::mm, MmBackward0, aten::_scaled_dot_product_flash_attention_for_cpu…);
// "" for wrappers that are not aten ops (autograd::engine::…, Optimizer.step#…), whose inner ops count.
std::string hostOpClass(const std::string& op_name);

struct TraceMeasure {
  std::string source;
  bool gpu = false;                       // classes from kernels (device time), else from CPU ops
  int64_t steps = 0;                      // counted steps
  double step_s = 0;                      // their median
  int64_t ranks = 0, max_rank = 0;        // ranks with steps, the largest rank id
  std::map<std::string, double> class_s;  // per counted step, mean over ranks: union of the class's intervals
  double launches = 0;                    // kernels launched per step (GPU traces)
  double host_busy_s = 0;                 // per step: the launching thread's time inside CPU ops
  // Where the launches join their host threads (kernel correlation → API call) and the backward runs
  // on a thread of its own (CUDA's autograd engine thread: its ops are autograd nodes): `launches` and
  // `host_busy_s` are the forward thread's, these the backward thread's (0: no such split).
  double backward_launches = 0, host_backward_busy_s = 0;
  // Per step: gradient reductions' NCCL kernels (all-reduce, reduce-scatter) and the part of them
  // that ran while a compute kernel ran (the overlap of gradient collectives with compute).
  double grad_comm_s = 0, grad_comm_hidden_s = 0;
  // Per step, mean over ranks: the pipeline bubble — a stage waiting at its receives with nothing
  // running (the step breakdown's bubble, rundb/step_analysis.h). 0 without pipeline parallelism.
  double bubble_s = 0;
  std::vector<rundb::Collective> collectives;
};
// Throws UserError naming `field` for a trace with no counted step, or with neither kernels nor
// CPU ops (what to record instead).
TraceMeasure measureTrace(rundb::RunReader& r, const std::string& field);

struct TraceTarget {
  std::string path, cls;         // the constant, the class that sets it
  double base = 0, value = 0;    // the constant before and after
  double measured_s = 0;         // Σ over traces of the class's time per step
  double model_base_s = 0, model_fit_s = 0;  // the model's, on the base and the fitted cluster
  bool at_bound = false;
};
struct TraceFit {
  Cluster fitted;
  std::map<std::string, double> values;  // fitted path → value
  std::vector<TraceTarget> targets;
  bool collectives_fitted = false;
  CollectiveFit collectives;
  std::string collective_tier;           // "intra_node" or "inter_node"
  // The pipeline bubble, summed over the traces: no constant sets it. The classes are fitted to the
  // step less the bubble (a rank's own work), and the time model then prices the bubble from the
  // fitted stages' times; measured is the traces' stage waits (TraceMeasure::bubble_s).
  struct {
    double measured_s = 0, model_base_s = 0, model_fit_s = 0;
  } bubble;
  std::vector<std::string> notes;        // what could not be fitted, and why
};
// `rows[i]` prices the configuration of `traces[i]` (its measured_s: the trace's step time);
// `framework`: whose profile's constants move. `held`: paths that keep `base`'s value (calibrate
// --trace --keep-fitted: constants an earlier calibration fitted); the others are fitted around them,
// and a note names each held one the trace would have set.
TraceFit fitFromTraces(const Cluster& base, const std::vector<FitRow>& rows, const std::vector<TraceMeasure>& traces,
                       Framework framework, const std::set<std::string>& held = {});

}  // namespace trainscope::tuner
