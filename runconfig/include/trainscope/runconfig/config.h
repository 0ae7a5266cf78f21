// trainscope/runconfig/config.h — what to train (TrainConfig) and where to record it (RunOutput),
// their checks, and their two outside forms: JSON and `trainscope run` arguments.
//
// Plain data, no LibTorch (library trainscope::runconfig, which the tuner and the front end link
// without LibTorch). `resolve()` fills derived fields (ga from gbs/mbs, the workload) and throws
// UserError naming the flag and the fix for anything inconsistent, before any work starts.
// A config round-trips: toArgs(c) are `trainscope run` flags that give back c; toJson(c) is what
// `run --json` prints under "config" and what `run --config FILE.json` reads (fromJson). A RunSpec
// adds the output, so that one file describes a whole run.
// The user-settable fields are listed once, in fields.h: the JSON and flag forms and the CLI11
// flags of `trainscope run` are generated from that list. docs/config-reference.md lists every field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainscope/workloads/workload.h"

namespace trainscope::runconfig {

enum class Checkpointing { None, Selective, Full };
// FP8: bf16 training whose transformer-block linears run their GEMMs in tensor-wise scaled FP8
// (docs/config-reference.md, "--precision fp8").
enum class Precision { FP32, BF16, FP16, FP8 };
enum class OptimizerKind { AdamW, Adafactor, Adam8bit, SGD };
enum class DeviceRequest { Auto, CPU, CUDA };
enum class PipelineSchedule { GPipe, OneFOneB };
enum class Launcher { Local, Slurm };

// ZeRO (Rajbhandari et al., 2020): what the data-parallel ranks shard besides the batch. The values
// are the stage numbers that JSON and `--zero` use. resolve() says which stages the runtime runs
// (ZeRO-2: runtime/src/parallel/grad_sync.cpp); the models price all four (`trainscope predict --zero 0..3`), the tuner's space
// enumerates what the runtime runs.
enum class ZeroStage {
  None = 0,             // every DP rank holds the whole optimizer state (plain data parallelism)
  OptimizerStates = 1,  // ZeRO-1: each DP rank keeps and updates the optimizer state of its shard
  Gradients = 2,        // ZeRO-2: and reduces only its shard of the gradients
  Parameters = 3,       // ZeRO-3: and holds only its shard of the parameters
};
inline bool shardsOptimizer(ZeroStage z) { return z >= ZeroStage::OptimizerStates; }
inline int stageNumber(ZeroStage z) { return static_cast<int>(z); }
// 0..3 → the stage; anything else throws UserError(field, ...).
ZeroStage zeroStage(int64_t stage, const std::string& field = "--zero");

// What `--trace` records, each level on top of the one before (docs/trace-schema.md, "Trace levels").
// The tracer has its own level type with an "off": train() converts by name.
enum class TraceLevel {
  Steps,   // what --out writes, plus the ranks and drops tables
  Ranges,  // TRAINSCOPE_RANGE scopes, the memory counter, collectives (the default)
  Ops,     // LibTorch operators through RecordFunction
  All,     // on a GPU: CUPTI kernels, copies, sets and API calls
};

// --rendezvous-timeout and --collective-timeout: a tenth of a second to a week (resolve()).
inline constexpr double kMinTimeoutS = 0.1, kMaxTimeoutS = 7 * 24 * 3600;

// How the ranks split the work: the parallel layout and its data-parallel sharding. Held by
// TrainConfig (what `run` trains) and models::Plan (what the models price), so a layout is copied
// between them as one struct. Its user-settable fields are listed once (visitParallelism,
// fields.h): that list makes the flags of `run` and of `predict` and the keys of `predict --batch`.
// dp is not in the list: resolve() derives it from the ranks, predict from the devices.
struct Parallelism {
  int64_t dp = 1;                  // data-parallel degree (derived: world / (tp x pp x cp))
  int64_t tp = 1, pp = 1;
  int64_t cp = 1;                  // context-parallel degree: the sequence split over cp ranks
  int64_t ep = 1;                  // expert-parallel degree: a MoE workload's experts split over ep of the dp ranks
  int64_t virtual_stages = 1;      // > 1: interleaved 1F1B, this many model chunks per pipeline rank
  bool sequence_parallel = false;
  ZeroStage zero = ZeroStage::None;  // 0 to 3, sharded over the dp ranks (ZeRO-3: runtime/src/parallel/zero3.h)
  int64_t zero_shard_size = 0;     // ZeRO-3: shard within groups of N DP ranks, replicate across (0: all)
  PipelineSchedule pp_schedule = PipelineSchedule::OneFOneB;

  // Interleaved 1F1B: the 1F1B schedule with more than one model chunk per pipeline rank.
  bool interleaved() const { return virtual_stages > 1 && pp_schedule == PipelineSchedule::OneFOneB; }
};
// The schedule's one name, as `run`, `predict`, `tune --pp-schedules`, the study and the exports
// spell it: "gpipe", "1f1b", or "interleaved" (1f1b with virtual_stages > 1).
const char* scheduleName(const Parallelism& p);
// "gpipe" | "1f1b" | "interleaved" into p.pp_schedule; "interleaved" is 1f1b with
// max(2, p.virtual_stages) chunks (so `--virtual-stages V` sets how many: the list reads it first).
// Throws UserError(field) listing the three names. `stages_given`: the input named the virtual stages
// too (--virtual-stages, "virtual_stages"): "interleaved" with 1 of them is then refused, not read as 2.
void parseScheduleInto(const std::string& s, const std::string& field, Parallelism& p, bool stages_given = false);
// The counts' upper bound (tp, pp, cp, ep, virtual stages, the shard group): far past any cluster,
// and small enough that products of them (tp x pp x cp) stay inside int64.
inline constexpr int64_t kMostDegree = int64_t(1) << 20;

struct TrainConfig : Parallelism {
  // model and batch
  std::string workload = "tiny";
  int64_t seq = 0;                 // T; 0 = the workload's n_positions, capped at 1024
  int64_t mbs = 4;                 // micro-batch size (sequences)
  std::optional<int64_t> gbs;      // global batch (sequences); gbs = mbs * ga
  std::optional<int64_t> ga;       // gradient-accumulation steps (micro-batches per step)
  int64_t steps = 10;
  Checkpointing ckpt = Checkpointing::None;
  Precision precision = Precision::FP32;

  // optimisation
  OptimizerKind optimizer = OptimizerKind::AdamW;
  double lr = 6e-4;
  double min_lr_ratio = 0.1;       // cosine decays to lr * min_lr_ratio at the last step
  int64_t warmup = 0;              // linear warm-up steps
  double clip = 1.0;               // global-norm clip; 0 disables
  double weight_decay = 0.1;       // on 2-D weights only (not biases, LayerNorm)
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double momentum = 0.0;           // SGD
  int64_t adam8bit_block = 256;    // elements per quantisation block
  double fp16_init_scale = 65536;  // initial dynamic loss scale
  int64_t fp16_growth_interval = 2000;

  // parallelism (world = DP x CP x TP x PP; see parallel.h): tp, pp, cp, ep, the virtual stages,
  // sequence parallelism, ZeRO and the pipeline schedule are the Parallelism base's
  int nproc = 1;                   // ranks to start (--nproc); under torchrun/srun: WORLD_SIZE
  Launcher launcher = Launcher::Local;
  int64_t local_sgd = 0;           // H > 0: average parameters every H steps, no gradient all-reduce
  double bucket_mb = 25;           // DP all-reduce bucket size (MiB)
  double rendezvous_timeout_s = 60, collective_timeout_s = 300;  // kMinTimeoutS .. kMaxTimeoutS
  std::string inject_failure;      // testing: "RANK:STEP" makes that rank throw at that step

  // data, device
  uint64_t seed = 1337;
  std::string data = "synthetic";  // "synthetic" or a uint16 token file (nanoGPT / llm.c layout)
  DeviceRequest device = DeviceRequest::Auto;
  std::optional<double> peak_tflops;  // for MFU/HFU; default: a known device peak, else none
  int threads = 0;                 // intra-op threads; 0 = LibTorch's default
  int cpu_lanes = 0;               // CPU: split each micro-batch over this many one-core lanes; 0 = auto
  int64_t mem_limit = 0;           // CPU: bytes tensors may hold per rank (0: none); past it, out of memory
  bool memory_check = true;        // refuse before allocating when the memory model says it cannot fit
  bool oversubscribe = false;      // allow --threads / --nproc beyond 4x this machine's cores

  // Derived by resolve().
  workloads::Workload model;
  int64_t ga_steps = 1;            // resolved ga
  int64_t global_batch = 0;        // resolved gbs = mbs x ga x dp
  int world = 1;                   // resolved (and dp, the Parallelism base's)

  int64_t tokensPerStep() const { return global_batch * seq; }
};

// Where a run is recorded: not part of what is trained (a config compares equal whatever it writes).
struct RunOutput {
  std::string out;                     // run database; empty = none
  std::string trace;                   // --trace PATH: the run database, with events (implies out = PATH)
  TraceLevel trace_level = TraceLevel::Ranges;
  bool trace_shapes = false;           // record op input shapes (ops level and above)
  bool overwrite = false;
  // Checkpoints (docs/checkpoints.md): --save DIR writes one at the end (and every save_every
  // steps); --resume DIR continues a saved run; --init-from DIR starts from a checkpoint's weights.
  std::string save, resume, init_from;
  int64_t save_every = 0;
  int64_t save_shard_bytes = int64_t(5) << 30;  // --save-shard-size: past it the weights are sharded
  std::string dump_logits;  // --dump-logits FILE: the first batch's logits (safetensors), one process
  bool tracing() const { return !trace.empty(); }
};

// Fills the derived fields and checks everything; throws UserError naming the field. `world` is
// the number of ranks (--nproc, or WORLD_SIZE when started by a launcher).
void resolve(TrainConfig& c, int world = 0);
// The same checks on the workload already in c.model, which is not read again from c.workload (the
// tuner's runtimeRefusal: a workload given inline to `predict --batch` has no file to read).
void resolveLoaded(TrainConfig& c, int world = 0);
void resolve(RunOutput& o);

// A one-line note when --warmup is not below --steps (empty otherwise): every step is then a warm-up
// step, so the learning rate only rises and never decays. Allowed, not refused: the first steps of a
// longer run, saved with --save and continued with --resume and the longer --steps, run exactly so.
// The run's measured steps are not affected (the report leaves out its own first step, not --warmup's).
std::string warmupNote(const TrainConfig& c);

// The --cpu-lanes refusal (resolve() for what the config rules out, the Trainer for a GPU found by
// --device auto).
inline constexpr const char* kLanesNeed =
    "lanes need a CPU run of a dense workload in fp32 without tensor or pipeline parallelism, ZeRO, or a data-parallel "
    "gradient all-reduce";

// "4G", "512MiB", "1e9", "1073741824" → bytes (K/M/G/T are powers of 1024, with or without "iB";
// "kB"/"MB"/"GB" powers of 1000). Throws UserError(field) for anything else.
int64_t parseBytes(const std::string& text, const std::string& field);

// String forms, used by the CLI, the run database and the JSON summary.
const char* toString(Checkpointing v);
const char* toString(Precision v);
const char* toString(OptimizerKind v);
const char* toString(DeviceRequest v);
const char* toString(PipelineSchedule v);
const char* toString(Launcher v);
const char* toString(TraceLevel v);
PipelineSchedule parseSchedule(const std::string& s, const std::string& field = "--pp-schedule");
Launcher parseLauncher(const std::string& s, const std::string& field = "--launcher");
// Parsers throw UserError(field, ...) listing the accepted values.
Checkpointing parseCheckpointing(const std::string& s, const std::string& field = "--ckpt");
Precision parsePrecision(const std::string& s, const std::string& field = "--precision");
OptimizerKind parseOptimizer(const std::string& s, const std::string& field = "--optimizer");
DeviceRequest parseDevice(const std::string& s, const std::string& field = "--device");
TraceLevel parseTraceLevel(const std::string& s, const std::string& field = "--trace-level");

// The whole config as one JSON object (stored as meta.config in the run database, printed by
// `run --json` under "config"). "workload" is the model's name, "workload_spec" what --workload takes
// (a name, or the absolute path of a JSON file); derived fields (shapes, world, dp) are included.
std::string toJson(const TrainConfig& c);
// Reads that JSON back (derived fields are ignored and recomputed by resolve()). Throws UserError
// naming `source` and the key for a wrong type or an unknown value.
TrainConfig fromJson(const std::string& json_text, const std::string& source);
// The `trainscope run` flags that reproduce `c` (resolved or not), in a fixed order, every field
// given explicitly so that no default of a later version changes the run.
std::vector<std::string> toArgs(const TrainConfig& c);

// A whole run in one file: what to train, where to record it, and whether to print per-step lines.
// `trainscope run --config FILE` alone reads it straight; the tuner writes one per trial.
struct RunSpec {
  TrainConfig config;
  RunOutput output;
  bool quiet = false;
};
// The config's object (toJson) plus "output": {"out", "trace", "trace_level", "trace_shapes",
// "overwrite"} and "quiet".
std::string toJson(const RunSpec& s);
// Reads that JSON; a plain config (no "output") gives the default output. Throws as fromJson does.
RunSpec runSpecFromJson(const std::string& json_text, const std::string& source);
// toArgs(s.config), then the output's flags and -q: the spec as `trainscope run` flags.
std::vector<std::string> toArgs(const RunSpec& s);

}  // namespace trainscope::runconfig

// The runtime reads its configuration as its own (runtime::TrainConfig is runconfig::TrainConfig):
// runconfig is kept apart so that the front end, the models and the tuner link it without LibTorch.
namespace trainscope::runtime {
using namespace trainscope::runconfig;
}  // namespace trainscope::runtime
