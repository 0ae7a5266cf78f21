// trainscope/runconfig/fields.h — the one list of TrainConfig's user-settable fields.
//
// Each field is named here once: its JSON key, its `trainscope run` flag, the flag's help text, and
// the member it sets. Everything that turns a config into text or back walks this list:
// toJson, fromJson and toArgs (runconfig/src/forms.cpp), the CLI11 flags of `trainscope run`
// (apps/run_flags.cpp), and a test that gives every field a value other than its default and checks
// that it survives both text forms (tests/core/config_fields_test.cpp).
//
// Adding a field: the member in TrainConfig (or, for the parallel layout, in Parallelism: config.h),
// one line in visitFields (visitParallelism) below (in the
// order toArgs should write it), its bounds in resolve() (config.cpp), and a row in
// docs/config-reference.md. A member of a type not handled yet needs a case in argText, in the
// JSON reader and writer (forms.cpp) and in the flag binder (run_flags.cpp).
//
// Not in the list: what resolve() derives (model, ga_steps, global_batch, world, dp), which toJson
// writes as well and fromJson ignores; RunOutput, which is not part of what is trained.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "trainscope/runconfig/config.h"

namespace trainscope::runconfig {

struct Field {
  enum Flags : unsigned {
    kShowDefault = 1u << 0,      // the flag's help shows its default ("--mbs INT=4")
    kOmitDefault = 1u << 1,      // JSON and toArgs leave it out while it has its default value
    kArgsOmitDefault = 1u << 2,  // toArgs leaves it out while it has its default (JSON keeps it)
    kBytes = 1u << 3,            // an int64 byte count: the flag takes "2G", "512MiB" … (parseBytes)
    kNegated = 1u << 4,          // a bool that its flag turns off (--skip-memory-check: memory_check = false)
  };
  const char* key;   // JSON key
  const char* flag;  // `trainscope run` flag
  const char* help;  // the flag's help text
  unsigned flags = 0;
  bool has(unsigned f) const { return (flags & f) != 0; }
};

// Calls v(field, &Parallelism::member) for each user-settable field of the parallel layout (all but
// dp, which is derived), in toArgs' order. This one list makes the layout's flags of `trainscope run`
// (through visitFields), of `trainscope predict` and the keys of `predict --batch`
// (apps/predict_flags.cpp). The member types are int64_t, bool, ZeroStage and PipelineSchedule; a
// schedule is read with parseScheduleInto ("interleaved" sets the virtual stages too), which is why
// virtual_stages comes before pp_schedule.
template <class V>
void visitParallelism(V&& v) {
  using P = Parallelism;
  using F = Field;
  constexpr unsigned kShow = F::kShowDefault;
  v(F{"tp", "--tp", "tensor-parallel degree", kShow}, &P::tp);
  v(F{"pp", "--pp", "pipeline-parallel degree", kShow}, &P::pp);
  v(F{"cp", "--cp", "context-parallel degree: the sequence split over cp ranks", F::kOmitDefault | kShow}, &P::cp);
  v(F{"ep", "--ep",
      "expert-parallel degree: a MoE workload's experts split over ep of the data-parallel ranks (tokens "
      "dispatched by all-to-all)",
      F::kOmitDefault | kShow},
    &P::ep);
  v(F{"virtual_stages", "--virtual-stages",
      "interleaved 1F1B: model chunks per pipeline rank (1: off; --pp-schedule interleaved alone: 2)",
      F::kOmitDefault | kShow},
    &P::virtual_stages);
  v(F{"sequence_parallel", "--sequence-parallel",
      "shard LayerNorm/dropout regions along the sequence (needs --tp > 1)"},
    &P::sequence_parallel);
  v(F{"zero", "--zero", "ZeRO stage over data-parallel ranks: 1 shards optimizer state, 2 also gradients, 3 also parameters", kShow}, &P::zero);
  v(F{"zero_shard_size", "--zero-shard-size",
      "ZeRO-3 hybrid sharding: shard within groups of N data-parallel ranks, replicate across them (0: all)",
      F::kOmitDefault | kShow},
    &P::zero_shard_size);
  v(F{"pp_schedule", "--pp-schedule",
      "gpipe|1f1b|interleaved (interleaved: 1f1b over --virtual-stages model chunks per pipeline rank)", kShow}, &P::pp_schedule);
}

// A Parallelism field passed on as a member of C, a struct derived from Parallelism (TrainConfig).
template <class C, class V>
struct AsMemberOf {
  V& v;
  template <class T>
  void operator()(const Field& f, T Parallelism::*m) const {
    v(f, static_cast<T C::*>(m));
  }
};

// Calls v(field, &TrainConfig::member) for each user-settable field, in toArgs' order. The member
// types are int, int64_t, uint64_t, double, bool, std::string, std::optional<int64_t>,
// std::optional<double> and the enums of config.h.
//
// Resolved configs: a derived value stands in for the field it came from where they differ (the
// workload's file for "workload_spec", world for "nproc", global_batch for "gbs", ga_steps for
// "ga"); forms.cpp does that before walking the list. fromJson also reads "workload" when
// "workload_spec" is absent and "world" when "nproc" is, and ignores "ga" when "gbs" is given.
template <class V>
void visitFields(V&& v) {
  using C = TrainConfig;
  using F = Field;
  constexpr unsigned kShow = F::kShowDefault;
  // model and batch
  v(F{"workload_spec", "--workload",
      "workload name (workloads/*.json), a JSON path, or a Hugging Face config.json or its model folder", kShow},
    &C::workload);
  v(F{"seq", "--seq", "sequence length T (default: the workload's n_positions, at most 1024)", F::kArgsOmitDefault},
    &C::seq);
  v(F{"mbs", "--mbs", "micro-batch size in sequences", kShow}, &C::mbs);
  v(F{"gbs", "--gbs", "global batch in sequences (= mbs x ga x dp)"}, &C::gbs);
  v(F{"ga", "--ga", "gradient-accumulation steps"}, &C::ga);
  v(F{"steps", "--steps", "optimizer steps", kShow}, &C::steps);
  v(F{"ckpt", "--ckpt", "activation checkpointing: none|selective|full", kShow}, &C::ckpt);
  v(F{"precision", "--precision", "fp32|bf16|fp16|fp8", kShow}, &C::precision);
  // optimisation
  v(F{"optimizer", "--optimizer", "adamw|adafactor|adam8bit|sgd", kShow}, &C::optimizer);
  v(F{"lr", "--lr", "peak learning rate", kShow}, &C::lr);
  v(F{"min_lr_ratio", "--min-lr-ratio", "cosine decays to lr x this", kShow}, &C::min_lr_ratio);
  v(F{"warmup", "--warmup", "linear warm-up steps", kShow}, &C::warmup);
  v(F{"clip", "--clip", "gradient global-norm clip (0: off)", kShow}, &C::clip);
  v(F{"weight_decay", "--weight-decay", "weight decay on 2-D tensors (decoupled; sgd: L2)", kShow}, &C::weight_decay);
  v(F{"beta1", "--beta1", "Adam beta1, in [0, 1)", kShow}, &C::beta1);
  v(F{"beta2", "--beta2", "Adam beta2, in [0, 1)", kShow}, &C::beta2);
  v(F{"eps", "--eps", "Adam epsilon, above 0", kShow}, &C::eps);
  v(F{"momentum", "--momentum", "SGD momentum", kShow}, &C::momentum);
  v(F{"adam8bit_block", "--adam8bit-block", "8-bit Adam quantisation block", kShow}, &C::adam8bit_block);
  v(F{"fp16_init_scale", "--fp16-init-scale", "initial fp16 loss scale", kShow}, &C::fp16_init_scale);
  v(F{"fp16_growth_interval", "--fp16-growth-interval", "clean steps before the fp16 scale doubles", kShow},
    &C::fp16_growth_interval);
  // data, device
  v(F{"seed", "--seed", "weight initialisation and synthetic data (0 to 2^64-1; default 1337)"}, &C::seed);
  v(F{"data", "--data", "synthetic | path to a uint16 token file (nanoGPT / llm.c layout)", kShow}, &C::data);
  v(F{"device", "--device", "auto|cpu|cuda", kShow}, &C::device);
  v(F{"threads", "--threads", "intra-op CPU threads (0: LibTorch default)", kShow}, &C::threads);
  v(F{"cpu_lanes", "--cpu-lanes",
      "CPU: run each micro-batch as N one-core lanes in parallel (0: auto = one per thread, 1: off)", kShow},
    &C::cpu_lanes);
  // parallelism
  v(F{"nproc", "--nproc", "ranks to start (world = dp x cp x tp x pp)", kShow}, &C::nproc);
  v(F{"launcher", "--launcher", "local|slurm (slurm: under srun)", kShow}, &C::launcher);
  visitParallelism(AsMemberOf<C, V>{v});  // tp, pp, cp, ep, virtual stages, sp, zero, shard group, schedule
  v(F{"local_sgd", "--local-sgd", "H > 0: no gradient all-reduce; average weights every H steps", kShow},
    &C::local_sgd);
  v(F{"bucket_mb", "--bucket-mb", "data-parallel all-reduce bucket size (MiB)", kShow}, &C::bucket_mb);
  v(F{"rendezvous_timeout_s", "--rendezvous-timeout", "seconds to wait for every rank to join", kShow},
    &C::rendezvous_timeout_s);
  v(F{"collective_timeout_s", "--collective-timeout", "seconds before a stuck collective fails", kShow},
    &C::collective_timeout_s);
  // measurement and limits
  v(F{"peak_tflops", "--peak-tflops", "device peak dense TFLOP/s for MFU/HFU"}, &C::peak_tflops);
  v(F{"mem_limit", "--mem-limit",
      "CPU: bytes tensors may hold per rank (e.g. 2G); an allocation past it ends the run out of memory (exit 3)",
      F::kOmitDefault | F::kBytes},
    &C::mem_limit);
  v(F{"memory_check", "--skip-memory-check",
      "start even when the memory model says the run cannot fit the memory available", F::kOmitDefault | F::kNegated},
    &C::memory_check);
  v(F{"oversubscribe", "--oversubscribe", "allow --threads and --nproc beyond 4x this machine's cores",
      F::kOmitDefault},
    &C::oversubscribe);
  v(F{"inject_failure", "--inject-failure",
      "testing: RANK:STEP[:throw|segv|hang|oom|linger] makes that rank fail at that step (linger: report, never "
      "exit); \"merge\" makes the "
      "trace merge fail, \"close\" the run database's close (as on a full disk), \"save\" kills rank 0 while it "
      "writes a --save checkpoint",
      F::kOmitDefault},
    &C::inject_failure);
}

// The shortest decimal that reads back as the same double.
std::string shortestDecimal(double v);

// A value as `trainscope run` takes it (toArgs, and the defaults the flags' help shows): numbers
// that read back exactly, enums by name, ZeRO stages by number.
template <class T>
std::string argText(const T& v) {
  if constexpr (std::is_same_v<T, std::string>)
    return v;
  else if constexpr (std::is_same_v<T, double>)
    return shortestDecimal(v);
  else if constexpr (std::is_same_v<T, ZeroStage>)
    return std::to_string(stageNumber(v));
  else if constexpr (std::is_enum_v<T>)
    return toString(v);
  else
    return std::to_string(v);
}

// The enum parsers of config.h picked by type, for code that walks the list.
inline void parseInto(const std::string& s, const std::string& field, Checkpointing& v) {
  v = parseCheckpointing(s, field);
}
inline void parseInto(const std::string& s, const std::string& field, Precision& v) { v = parsePrecision(s, field); }
inline void parseInto(const std::string& s, const std::string& field, OptimizerKind& v) {
  v = parseOptimizer(s, field);
}
inline void parseInto(const std::string& s, const std::string& field, DeviceRequest& v) { v = parseDevice(s, field); }
inline void parseInto(const std::string& s, const std::string& field, PipelineSchedule& v) {
  v = parseSchedule(s, field);
}
inline void parseInto(const std::string& s, const std::string& field, Launcher& v) { v = parseLauncher(s, field); }
inline void parseInto(const std::string& s, const std::string& field, TraceLevel& v) { v = parseTraceLevel(s, field); }

// "12" → 12 for an integer flag or JSON key: the whole string, a whole number from `min` to `max`
// (no saturation, no wrapping). Throws UserError(field) naming the range, with `fix`.
int64_t parseInteger(const std::string& text, const std::string& field, int64_t min, int64_t max,
                     const std::string& fix = "pass a whole number in that range");
template <class T>
T parseIntegerAs(const std::string& text, const std::string& field) {
  return T(parseInteger(text, field, std::numeric_limits<T>::min(), std::numeric_limits<T>::max()));
}

// "1337" → 1337 for --seed: the whole string, 0 to 2^64 − 1 (no sign). Throws UserError(field).
uint64_t parseSeed(const std::string& text, const std::string& field);

}  // namespace trainscope::runconfig

// The runtime reads its configuration as its own (runtime::TrainConfig is runconfig::TrainConfig):
// runconfig is kept apart so that the front end, the models and the tuner link it without LibTorch.
namespace trainscope::runtime {
using namespace trainscope::runconfig;
}  // namespace trainscope::runtime
