// config.cpp — the enums' string forms and the checks of TrainConfig and RunOutput (the JSON and
// flag forms are in forms.cpp).
#include "trainscope/runconfig/config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <tuple>

#include "trainscope/common/error.h"
#include "trainscope/runconfig/fields.h"

namespace trainscope::runconfig {
namespace {

template <class E, size_t N>
E parseEnum(const std::string& s, const std::string& field, const std::pair<const char*, E> (&table)[N]) {
  std::string accepted;
  for (const auto& [name, value] : table) {
    if (s == name) return value;
    accepted += (accepted.empty() ? "" : "|") + std::string(name);
  }
  throw UserError(field, "unknown value \"" + s + "\"", "use one of " + accepted);
}

const std::pair<const char*, Checkpointing> kCkpt[] = {
    {"none", Checkpointing::None}, {"selective", Checkpointing::Selective}, {"full", Checkpointing::Full}};
const std::pair<const char*, Precision> kPrec[] = {
    {"fp32", Precision::FP32}, {"bf16", Precision::BF16}, {"fp16", Precision::FP16}, {"fp8", Precision::FP8}};
const std::pair<const char*, OptimizerKind> kOpt[] = {{"adamw", OptimizerKind::AdamW},
                                                       {"adafactor", OptimizerKind::Adafactor},
                                                       {"adam8bit", OptimizerKind::Adam8bit},
                                                       {"sgd", OptimizerKind::SGD}};
const std::pair<const char*, DeviceRequest> kDev[] = {
    {"auto", DeviceRequest::Auto}, {"cpu", DeviceRequest::CPU}, {"cuda", DeviceRequest::CUDA}};

const std::pair<const char*, PipelineSchedule> kSched[] = {{"gpipe", PipelineSchedule::GPipe},
                                                          {"1f1b", PipelineSchedule::OneFOneB}};
const std::pair<const char*, Launcher> kLaunch[] = {{"local", Launcher::Local}, {"slurm", Launcher::Slurm}};
const std::pair<const char*, TraceLevel> kTrace[] = {
    {"steps", TraceLevel::Steps}, {"ranges", TraceLevel::Ranges}, {"ops", TraceLevel::Ops}, {"all", TraceLevel::All}};

template <class E, size_t N>
const char* nameOf(E v, const std::pair<const char*, E> (&table)[N]) {
  for (const auto& [name, value] : table)
    if (value == v) return name;
  return "?";
}

constexpr int kMaxThreads = 1024;  // intra-op threads per rank, beyond 4 x cores only with --oversubscribe

void requirePositive(const char* field, int64_t v, const char* fix) {
  if (v <= 0) throw UserError(field, "must be positive, got " + std::to_string(v), fix);
}

}  // namespace

Checkpointing parseCheckpointing(const std::string& s, const std::string& f) { return parseEnum(s, f, kCkpt); }
Precision parsePrecision(const std::string& s, const std::string& f) { return parseEnum(s, f, kPrec); }
OptimizerKind parseOptimizer(const std::string& s, const std::string& f) { return parseEnum(s, f, kOpt); }
DeviceRequest parseDevice(const std::string& s, const std::string& f) { return parseEnum(s, f, kDev); }
TraceLevel parseTraceLevel(const std::string& s, const std::string& f) { return parseEnum(s, f, kTrace); }
const char* toString(Checkpointing v) { return nameOf(v, kCkpt); }
const char* toString(Precision v) { return nameOf(v, kPrec); }
const char* toString(OptimizerKind v) { return nameOf(v, kOpt); }
const char* toString(DeviceRequest v) { return nameOf(v, kDev); }
const char* toString(PipelineSchedule v) { return nameOf(v, kSched); }
const char* toString(Launcher v) { return nameOf(v, kLaunch); }
const char* toString(TraceLevel v) { return nameOf(v, kTrace); }
PipelineSchedule parseSchedule(const std::string& s, const std::string& f) { return parseEnum(s, f, kSched); }
Launcher parseLauncher(const std::string& s, const std::string& f) { return parseEnum(s, f, kLaunch); }

const char* scheduleName(const Parallelism& p) { return p.interleaved() ? "interleaved" : toString(p.pp_schedule); }

void parseScheduleInto(const std::string& s, const std::string& field, Parallelism& p, bool stages_given) {
  if (s == "interleaved") {
    if (stages_given && p.virtual_stages < 2)
      throw UserError(field, "\"interleaved\" runs 2 or more model chunks per pipeline stage, and the virtual stages are given as " +
                                 std::to_string(p.virtual_stages),
                      "give 2 or more virtual stages (\"interleaved\" alone: 2), or name the schedule 1f1b");
    p.pp_schedule = PipelineSchedule::OneFOneB;
    p.virtual_stages = std::max<int64_t>(2, p.virtual_stages);
    return;
  }
  if (s != "gpipe" && s != "1f1b")
    throw UserError(field, "unknown value \"" + s + "\"", "use one of gpipe|1f1b|interleaved");
  p.pp_schedule = parseSchedule(s, field);
}

ZeroStage zeroStage(int64_t stage, const std::string& field) {
  if (stage < 0 || stage > 3)
    throw UserError(field, "must be a ZeRO stage from 0 to 3, got " + std::to_string(stage),
                    "pass 0 for none, or 1 for ZeRO-1");
  return ZeroStage(stage);
}

namespace {

// ZeRO-3 (runtime/src/parallel/zero3.h) and its hybrid sharding: what the runtime runs, and a clear
// refusal of the rest.
void resolveZero3(const TrainConfig& c) {
  if (c.zero_shard_size < 0)
    throw UserError("--zero-shard-size", "must be >= 0, got " + std::to_string(c.zero_shard_size),
                    "pass 0 to shard over every data-parallel rank, or N dividing the DP degree");
  if (c.zero != ZeroStage::Parameters) {
    if (c.zero_shard_size > 0)
      throw UserError("--zero-shard-size", "shards ZeRO-3's parameters and is only for --zero 3",
                      "pass --zero 3, or drop --zero-shard-size");
    return;
  }
  if (c.zero_shard_size > 0 && c.dp % c.zero_shard_size != 0)
    throw UserError("--zero-shard-size",
                    std::to_string(c.zero_shard_size) + " does not divide the data-parallel degree " +
                        std::to_string(c.dp),
                    "pass a divisor of dp = nproc / (tp x pp x cp), or 0 for all DP ranks");
  // The per-layer gathers follow one forward then one backward per micro-batch; the pipeline's
  // schedules interleave micro-batches, and the tied embedding's two stages reduce it by hand.
  if (c.pp > 1)
    throw UserError("--zero", "ZeRO-3 is not run with pipeline parallelism (pp=" + std::to_string(c.pp) + ")",
                    "pass --pp 1 with --zero 3, or --zero 1 with pipelines");
  if (c.cp > 1) throw UserError("--zero", "ZeRO-3 is not run with context parallelism", "pass --cp 1 with --zero 3");
  // Sequence-parallel gradients of replicated tensors are partial sums over TP; they would need a
  // TP all-reduce of the shard's pieces that ZeRO-3 does not do.
  if (c.sequence_parallel)
    throw UserError("--sequence-parallel", "is not run with --zero 3", "drop --sequence-parallel, or use --zero 1 or 2");
  // Shards are 1-D pieces of flat buffers: Adafactor factors whole matrices, 8-bit Adam quantises
  // blocks of whole tensors; neither would train as it does unsharded.
  if (c.optimizer == OptimizerKind::Adafactor || c.optimizer == OptimizerKind::Adam8bit)
    throw UserError("--optimizer",
                    std::string(toString(c.optimizer)) + " is not run with --zero 3 (its state spans whole tensors)",
                    "use --optimizer adamw or sgd with --zero 3");
}

// Mixture of experts (runtime/src/model/moe.h): expert parallelism over ep of the dp ranks, and
// what the MoE layer does not run with yet, refused by name.
void resolveMoe(const TrainConfig& c) {
  requirePositive("--ep", c.ep, "pass --ep N with N >= 1 (1: every expert on every rank)");
  const workloads::Workload& w = c.model;
  if (!w.isMoe()) {
    if (c.ep > 1)
      throw UserError("--ep", "expert parallelism needs a mixture-of-experts workload; " + w.name + " is dense",
                      "drop --ep, or pick a workload with n_experts > 0 (e.g. small-cpu-moe)");
    return;
  }
  if (c.dp % c.ep != 0)
    throw UserError("--ep", "ep=" + std::to_string(c.ep) + " does not divide the data-parallel degree " +
                                std::to_string(c.dp),
                    "pass an --ep dividing dp = nproc / (tp x pp x cp)");
  if (w.n_experts % c.ep != 0)
    throw UserError("--ep", "ep=" + std::to_string(c.ep) + " does not divide n_experts=" + std::to_string(w.n_experts),
                    "pass an --ep dividing the number of experts");
  // The router's capacity and its load-balancing loss are per rank's tokens: splitting a sequence
  // over CP or SP ranks would route (and drop) differently from one rank holding it.
  if (c.cp > 1)
    throw UserError("--cp", "context parallelism is not run with a mixture-of-experts workload", "pass --cp 1");
  if (c.sequence_parallel)
    throw UserError("--sequence-parallel", "is not run with a mixture-of-experts workload",
                    "drop --sequence-parallel (tensor parallelism alone runs)");
  if (c.ep > 1 && c.zero == ZeroStage::Parameters)
    throw UserError("--zero", "ZeRO-3 shards over the data-parallel ranks, and expert weights are split over ep ranks",
                    "use --zero 1 or 2 with --ep > 1, or --ep 1 with --zero 3");
  if (c.ep > 1 && c.local_sgd > 0)
    throw UserError("--local-sgd", "averages weights over dp, which hold different experts under --ep > 1",
                    "drop --local-sgd or pass --ep 1");
}

// world, DP × TP × PP and the knobs that depend on the layout.
void resolveLayout(TrainConfig& c, int world) {
  requirePositive("--nproc", c.nproc, "pass --nproc N with N >= 1");
  c.world = world > 0 ? world : c.nproc;
  requirePositive("--tp", c.tp, "pass --tp N with N >= 1");
  requirePositive("--pp", c.pp, "pass --pp N with N >= 1");
  requirePositive("--cp", c.cp, "pass --cp N with N >= 1 (1: no context parallelism)");
  // Bounded before any product of them is formed (tp x pp x cp must not wrap).
  for (const auto& [flag, v] : std::initializer_list<std::pair<const char*, int64_t>>{
           {"--tp", c.tp}, {"--pp", c.pp}, {"--cp", c.cp}, {"--ep", c.ep}, {"--virtual-stages", c.virtual_stages},
           {"--zero-shard-size", c.zero_shard_size}})
    if (v > kMostDegree)
      throw UserError(flag, "must be at most 2^20 (" + std::to_string(kMostDegree) + "), not " + std::to_string(v),
                      "pass a degree a cluster could have");
  if (c.world % (c.tp * c.pp * c.cp) != 0)
    throw UserError("--nproc", std::to_string(c.world) + " ranks cannot be split into tp=" + std::to_string(c.tp) +
                                   " x pp=" + std::to_string(c.pp) + " x cp=" + std::to_string(c.cp) + " groups",
                    "use a multiple of tp*pp*cp ranks");
  c.dp = c.world / (c.tp * c.pp * c.cp);
  if (c.model.n_head % c.tp != 0)
    throw UserError("--tp", "tp=" + std::to_string(c.tp) + " does not divide n_head=" + std::to_string(c.model.n_head),
                    "choose --tp dividing the number of heads");
  // Grouped-query attention: K/V heads split over TP (tp divides n_kv_head), or each replicated over
  // tp / n_kv_head ranks (n_kv_head divides tp), as Megatron-LM does.
  if (const int64_t kv = c.model.kvHeads(); kv % c.tp != 0 && c.tp % kv != 0)
    throw UserError("--tp", "tp=" + std::to_string(c.tp) + " neither divides n_kv_head=" + std::to_string(kv) +
                                " nor is a multiple of it",
                    "choose --tp dividing n_kv_head, or a multiple of it that divides n_head");
  if (const int64_t F = c.model.ffnHidden(); F % c.tp != 0)
    throw UserError("--tp", "tp=" + std::to_string(c.tp) + " does not divide the MLP's width ffn_hidden=" +
                                std::to_string(F), "choose --tp dividing ffn_hidden");
  if (c.pp > c.model.n_layer)
    throw UserError("--pp", "pp=" + std::to_string(c.pp) + " exceeds n_layer=" + std::to_string(c.model.n_layer),
                    "use at most one stage per layer");
  resolveZero3(c);
  resolveMoe(c);
  // ZeRO-2 splits each gradient bucket element by element; Adafactor's factored second moment needs
  // whole rows and columns of a matrix, which a slice does not have.
  if (c.zero == ZeroStage::Gradients && c.dp > 1 && c.optimizer == OptimizerKind::Adafactor)
    throw UserError("--zero", "ZeRO-2 shards parameters element-wise, and Adafactor needs whole matrices",
                    "use --zero 1 with adafactor, or another --optimizer (adamw, adam8bit, sgd) with --zero 2");
  // Local SGD averages weights over dp only; context-parallel ranks must hold equal weights, which
  // the gradient reduction over dp x cp gives and local SGD's would not.
  if (c.cp > 1 && c.local_sgd > 0)
    throw UserError("--cp", "context parallelism cannot be combined with --local-sgd", "drop one of them");
  if (c.local_sgd < 0)
    throw UserError("--local-sgd", "must be >= 0 (the steps between weight averages; 0: off), got " +
                                       std::to_string(c.local_sgd), "pass --local-sgd 0, or a period H >= 1");
  if (c.local_sgd > 0 && shardsOptimizer(c.zero))
    throw UserError("--local-sgd", "cannot be combined with --zero " + std::to_string(stageNumber(c.zero)),
                    "drop one of them");
  if (c.sequence_parallel && c.tp == 1)
    throw UserError("--sequence-parallel", "needs tensor parallelism", "pass --tp 2 or more");
  if (!(c.bucket_mb > 0)) throw UserError("--bucket-mb", "must be positive", "");
  // Timeouts from a tenth of a second (below it a busy host misses it) to a week (past it the
  // milliseconds LibTorch counts in stop being meaningful, and the run waits as if for ever).
  for (const auto& [flag, v, example] : {std::tuple<const char*, double, const char*>{"--rendezvous-timeout", c.rendezvous_timeout_s, "60"},
                                         {"--collective-timeout", c.collective_timeout_s, "300"}})
    if (!(v >= kMinTimeoutS && v <= kMaxTimeoutS))
      throw UserError(flag, "must be from 0.1 to 604800 seconds (a week), got " + shortestDecimal(v),
                      std::string("pass e.g. ") + flag + " " + example);
}

// seq, and the batch: ga from gbs (or --ga), the global batch mbs × ga × dp.
void resolveBatch(TrainConfig& c) {
  if (c.seq == 0) c.seq = std::min<int64_t>(c.model.n_positions, 1024);
  requirePositive("--seq", c.seq, "pass --seq N with N > 0");
  if (c.seq > c.model.n_positions)
    throw UserError("--seq", std::to_string(c.seq) + " exceeds the workload's n_positions=" +
                                 std::to_string(c.model.n_positions),
                    "pass --seq <= " + std::to_string(c.model.n_positions));
  // Context parallelism cuts the sequence into 2·cp chunks (rank i holds chunks i and 2·cp−1−i).
  if (c.cp > 1 && c.seq % (2 * int64_t(c.cp)) != 0)
    throw UserError("--seq", "context parallelism needs seq divisible by 2 x cp = " + std::to_string(2 * c.cp) +
                                 " (seq=" + std::to_string(c.seq) + ")",
                    "pick --seq a multiple of " + std::to_string(2 * c.cp) + ", or a smaller --cp");
  if (c.sequence_parallel && (c.seq / c.cp) % c.tp != 0)
    throw UserError("--seq", "sequence parallelism needs seq / cp divisible by tp", "pick --seq a multiple of --tp x --cp");
  requirePositive("--mbs", c.mbs, "pass --mbs N with N > 0");
  requirePositive("--steps", c.steps, "pass --steps N with N > 0");
  if (c.gbs && c.ga) {
    if (*c.gbs != *c.ga * c.mbs * c.dp)
      throw UserError("--gbs", "gbs=" + std::to_string(*c.gbs) + " != mbs*ga*dp=" + std::to_string(*c.ga * c.mbs * c.dp),
                      "pass only one of --gbs and --ga");
  }
  if (c.gbs) {
    requirePositive("--gbs", *c.gbs, "pass --gbs N with N > 0");
    if (*c.gbs % c.mbs != 0)
      throw UserError("--gbs", "gbs=" + std::to_string(*c.gbs) + " is not divisible by mbs=" + std::to_string(c.mbs),
                      "make --gbs a multiple of --mbs");
    if (*c.gbs % (c.mbs * c.dp) != 0)
      throw UserError("--gbs", "gbs=" + std::to_string(*c.gbs) + " is not divisible by mbs x dp=" +
                                   std::to_string(c.mbs * c.dp),
                      "make --gbs a multiple of --mbs times the data-parallel degree");
    c.ga_steps = *c.gbs / (c.mbs * c.dp);
  } else if (c.ga) {
    requirePositive("--ga", *c.ga, "pass --ga N with N > 0");
    c.ga_steps = *c.ga;
  } else {
    c.ga_steps = 1;
  }
  if (__builtin_mul_overflow(c.mbs, c.ga_steps, &c.global_batch) ||
      __builtin_mul_overflow(c.global_batch, int64_t(c.dp), &c.global_batch))
    throw UserError("--ga", "mbs x ga x dp overflows", "pass a smaller batch");
  // The batch products must fit: tokens per step is gbs × seq.
  int64_t prod = 0;
  if (__builtin_mul_overflow(c.global_batch, c.seq, &prod) || c.global_batch > (int64_t(1) << 40))
    throw UserError("--gbs", "mbs x ga x dp x seq overflows", "pass a smaller batch");
}

// Interleaved 1F1B (--virtual-stages v > 1): Megatron-LM's layout and schedule, which need pp > 1,
// the 1F1B schedule, n_layer split evenly over pp·v chunks, and the micro-batches per step a
// multiple of pp (its schedule takes them through each chunk in groups of pp).
void checkInterleaving(const TrainConfig& c) {
  const int64_t v = c.virtual_stages, chunks = int64_t(c.pp) * v;
  requirePositive("--virtual-stages", v, "pass --virtual-stages N with N >= 1 (1: no interleaving)");
  if (v == 1) return;
  if (c.pp == 1)
    throw UserError("--virtual-stages", "interleaving needs pipeline parallelism (pp=1)",
                    "pass --pp 2 or more, or --virtual-stages 1");
  if (c.pp_schedule != PipelineSchedule::OneFOneB)
    throw UserError("--virtual-stages", "interleaving is a form of the 1f1b schedule, not of gpipe",
                    "pass --pp-schedule 1f1b, or --virtual-stages 1");
  if (c.model.n_layer % chunks != 0)
    throw UserError("--virtual-stages",
                    "n_layer=" + std::to_string(c.model.n_layer) + " does not split into pp x virtual stages = " +
                        std::to_string(chunks) + " equal chunks",
                    "choose --virtual-stages (and --pp) so that pp x virtual stages divides " +
                        std::to_string(c.model.n_layer));
  if (c.ga_steps % c.pp != 0) {
    const bool by_ga = c.ga && !c.gbs;
    const int64_t fix = (c.ga_steps / c.pp + 1) * c.pp;
    throw UserError(by_ga ? "--ga" : "--gbs",
                    "interleaving needs the micro-batches per step (" + std::to_string(c.ga_steps) +
                        ") to be a multiple of pp=" + std::to_string(c.pp),
                    by_ga ? "pass --ga " + std::to_string(fix)
                          : "pass --gbs " + std::to_string(fix * c.mbs * c.dp) + " (mbs x dp x " + std::to_string(fix) +
                                " micro-batches)");
  }
}

// The optimizer's numbers.
void checkOptimizer(const TrainConfig& c) {
  // Every float must be finite: NaN and inf pass comparisons that are written as range checks.
  for (const auto& [flag, v] : std::initializer_list<std::pair<const char*, double>>{
           {"--lr", c.lr}, {"--min-lr-ratio", c.min_lr_ratio}, {"--clip", c.clip}, {"--weight-decay", c.weight_decay},
           {"--beta1", c.beta1}, {"--beta2", c.beta2}, {"--eps", c.eps}, {"--momentum", c.momentum},
           {"--fp16-init-scale", c.fp16_init_scale}, {"--bucket-mb", c.bucket_mb},
           {"--rendezvous-timeout", c.rendezvous_timeout_s}, {"--collective-timeout", c.collective_timeout_s},
           {"--peak-tflops", c.peak_tflops.value_or(1.0)}})
    if (!std::isfinite(v))
      throw UserError(flag, "must be a finite number, got " + shortestDecimal(v), "pass a finite value");
  // Each bound is the optimizer's own (a value outside it is no optimizer: a negative step, a moment
  // that never decays, a division by zero), stated with the value given; no cap is put on a finite,
  // valid value (--lr 1e20 runs, and its non-finite gradients are skipped as any others).
  const auto refuse = [](const char* flag, double v, const std::string& range, const std::string& example) {
    std::string key = flag + 2;  // the --config file's key: --min-lr-ratio is min_lr_ratio
    std::replace(key.begin(), key.end(), '-', '_');
    throw UserError(flag, "must be " + range + ", got " + shortestDecimal(v),
                    "pass " + std::string(flag) + " " + example + " (in a --config file: \"" + key + "\": " + example + ")");
  };
  if (!(c.lr > 0)) refuse("--lr", c.lr, "positive (the peak learning rate)", "6e-4");
  if (!(c.beta1 >= 0 && c.beta1 < 1)) refuse("--beta1", c.beta1, "in [0, 1) (the first moment's decay)", "0.9");
  if (!(c.beta2 >= 0 && c.beta2 < 1)) refuse("--beta2", c.beta2, "in [0, 1) (the second moment's decay)", "0.95");
  if (!(c.eps > 0)) refuse("--eps", c.eps, "positive (Adam divides by sqrt(v) + eps)", "1e-8");
  if (!(c.momentum >= 0 && c.momentum < 1)) refuse("--momentum", c.momentum, "in [0, 1) (SGD's momentum)", "0.9");
  if (!(c.fp16_init_scale <= 1e30))
    throw UserError("--fp16-init-scale", "must be at most 1e30", "pass e.g. --fp16-init-scale 65536");
  if (c.warmup < 0) refuse("--warmup", double(c.warmup), ">= 0 (linear warm-up steps; 0: none)", "0");
  if (!(c.clip >= 0)) refuse("--clip", c.clip, ">= 0 (the gradients' global-norm clip; 0 disables it)", "1.0");
  if (!(c.weight_decay >= 0)) refuse("--weight-decay", c.weight_decay, ">= 0 (decoupled weight decay)", "0.1");
  if (!(c.min_lr_ratio >= 0 && c.min_lr_ratio <= 1))
    refuse("--min-lr-ratio", c.min_lr_ratio, "in [0, 1] (the cosine's end as a share of --lr)", "0.1");
  if (c.adam8bit_block < 16)
    throw UserError("--adam8bit-block", "must be >= 16, got " + std::to_string(c.adam8bit_block),
                    "pass a block of 16 to 4096 elements (default 256)");
  // bitsandbytes' largest block; the memory model assumes blocks of 256 and stays within a few
  // percent up to here (each tensor pads to whole blocks: past 4096 small tensors grow many-fold).
  if (c.adam8bit_block > 4096)
    throw UserError("--adam8bit-block", "must be <= 4096, got " + std::to_string(c.adam8bit_block),
                    "pass a block of 16 to 4096 elements (default 256)");
  if (c.fp16_growth_interval < 1)
    throw UserError("--fp16-growth-interval", "must be >= 1, got " + std::to_string(c.fp16_growth_interval),
                    "pass e.g. 2000");
  if (!(c.fp16_init_scale > 0)) throw UserError("--fp16-init-scale", "must be positive", "pass e.g. 65536");
}

// Threads and ranks against this machine's cores.
void checkHost(const TrainConfig& c) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (!c.oversubscribe && c.threads > int(4 * cores))
    throw UserError("--threads", std::to_string(c.threads) + " threads on " + std::to_string(cores) + " cores",
                    "pass at most " + std::to_string(4 * cores) + ", or --oversubscribe");
  // Even oversubscribed, a rank's thread pools have a bound: 100,000 threads only livelock the host
  // while they are created. (What the host's task limits allow is checked before launch: host.h.)
  const int max_threads = std::max<int>(kMaxThreads, int(4 * cores));
  if (c.threads > max_threads)
    throw UserError("--threads",
                    std::to_string(c.threads) + " threads per rank is more than trainscope starts (at most " +
                        std::to_string(max_threads) + ", --oversubscribe or not)",
                    "pass at most " + std::to_string(max_threads) + " (0: one per core)");
  if (c.threads < 0) throw UserError("--threads", "must be >= 0", "");
  if (!c.oversubscribe && c.launcher == Launcher::Local && c.nproc > int(4 * cores))
    throw UserError("--nproc", std::to_string(c.nproc) + " ranks on " + std::to_string(cores) + " cores of this machine",
                    "pass at most " + std::to_string(4 * cores) + " (use --launcher slurm for more hosts), or --oversubscribe");
}

// Lanes, memory, the peak, failure injection.
void checkDeviceAndTesting(const TrainConfig& c) {
  if (!c.inject_failure.empty() && c.inject_failure != "merge") {
    int r = -1;
    long long k = -1;
    if (std::sscanf(c.inject_failure.c_str(), "%d:%lld", &r, &k) == 2 && (r >= c.world || k >= c.steps))
      throw UserError("--inject-failure", "names rank " + std::to_string(r) + " step " + std::to_string(k) +
                                              ", which this run does not have (" + std::to_string(c.world) +
                                              " ranks, " + std::to_string(c.steps) + " steps)",
                      "name an existing rank and step");
  }
  if (c.peak_tflops && !(*c.peak_tflops > 0))
    throw UserError("--peak-tflops", "must be positive", "pass the device's peak dense TFLOP/s");
  if (c.cpu_lanes < 0) throw UserError("--cpu-lanes", "must be >= 0", "pass 0 (auto), 1 (off) or a lane count");
  if (c.cpu_lanes > c.mbs)
    throw UserError("--cpu-lanes", "must not exceed --mbs (" + std::to_string(c.mbs) + "): each lane takes whole sequences",
                    "pass --cpu-lanes " + std::to_string(c.mbs) + " or fewer");
  // What the config alone rules out (the Trainer also refuses lanes on a GPU that --device auto
  // found): here, so that the launcher reports it once rather than every rank.
  if (c.cpu_lanes > 1 && (c.device == DeviceRequest::CUDA || c.precision != Precision::FP32 || c.tp > 1 ||
                          c.pp > 1 || c.cp > 1 || c.zero != ZeroStage::None || (c.dp > 1 && c.local_sgd == 0) ||
                          c.model.isMoe()))
    throw UserError("--cpu-lanes", kLanesNeed, "drop --cpu-lanes (auto picks 1 here) or pass --cpu-lanes 1");
  if (c.mem_limit < 0) throw UserError("--mem-limit", "must be >= 0 bytes", "pass e.g. --mem-limit 2G");
}

// --precision fp8: what FP8 GEMMs need (docs/config-reference.md, "--precision fp8"). FP8 GEMMs
// (cuBLASLt, Transformer Engine) take only dimensions that are multiples of 16; the CPU's
// _scaled_mm would take any, but a run that only works on the CPU would be priced and exported
// for GPUs that refuse it, so the rule is the same everywhere.
void checkFp8(const TrainConfig& c) {
  if (c.precision != Precision::FP8) return;
  const auto& m = c.model;
  const int64_t tp = std::max<int64_t>(1, c.tp);
  const std::pair<const char*, int64_t> dims[] = {{"n_embd", m.n_embd},
                                                  {"n_head x head_dim / tp", m.n_head * m.headSize() / tp},
                                                  {"ffn_hidden / tp", m.ffnHidden() / tp}};
  for (const auto& [what, v] : dims)
    if (v % 16 != 0)
      throw UserError("--precision", "fp8 needs GEMM dimensions that are multiples of 16, but " + std::string(what) +
                                         " is " + std::to_string(v),
                      "pass --precision bf16, or a workload (and --tp) whose dimensions are multiples of 16");
  // The GEMMs' token dimension M = mbs x seq / cp: the weight gradient dW = dY^T X takes it as its inner
  // dimension, which CUDA's _scaled_mm requires to be a multiple of 16 like the others (torch 2.11
  // torch/_meta_registrations.py _check_scaled_mm_sizes: "self.size(1) % 16 == 0", and both dimensions
  // of mat2). The CPU would run it; the same run would fail on a GPU in its first backward.
  const int64_t tokens = c.mbs * c.seq / std::max<int64_t>(1, c.cp);
  if (tokens % 16 != 0)
    throw UserError("--precision", "fp8 needs GEMM dimensions that are multiples of 16, but the tokens of a micro-batch "
                                   "(mbs x seq / cp) are " + std::to_string(tokens),
                    "pass --precision bf16, or an --mbs and --seq whose product over --cp is a multiple of 16");
  if (c.fp16_init_scale != TrainConfig{}.fp16_init_scale || c.fp16_growth_interval != TrainConfig{}.fp16_growth_interval)
    throw UserError("--precision", "fp8 trains like bf16, without a loss scaler, so --fp16-init-scale and "
                                   "--fp16-growth-interval do not apply",
                    "drop the --fp16-* flags, or pass --precision fp16");
}

}  // namespace

void resolve(TrainConfig& c, int world) {
  c.model = workloads::load(c.workload);
  resolveLoaded(c, world);
}

void resolveLoaded(TrainConfig& c, int world) {
  resolveLayout(c, world);
  resolveBatch(c);
  checkInterleaving(c);
  checkOptimizer(c);
  checkFp8(c);
  checkHost(c);
  checkDeviceAndTesting(c);
}

std::string warmupNote(const TrainConfig& c) {
  if (c.warmup <= 0 || c.warmup < c.steps || c.steps <= 0) return "";
  const double last = c.lr * double(c.steps) / double(c.warmup);  // learningRate at the last step, k = steps - 1
  auto figure = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3g", v);
    return std::string(b);
  };
  return "note: --warmup " + std::to_string(c.warmup) + " covers all " + std::to_string(c.steps) +
         " steps: the learning rate only rises (to " + figure(last) + ", --lr is " + figure(c.lr) +
         ") and never decays; pass --warmup below --steps, unless these are the first steps of a longer run "
         "(--save, then --resume with its --steps)";
}

int64_t parseBytes(const std::string& text, const std::string& field) {
  const std::string fix = "pass bytes, e.g. 2G, 512MiB or 1073741824";
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || errno == ERANGE || !std::isfinite(v) || v < 0)
    throw UserError(field, "\"" + text + "\" is not a byte count", fix);
  const std::string unit(end);
  double scale = 0;
  const std::pair<const char*, double> units[] = {
      {"", 1},           {"B", 1},         {"K", 1024.0},        {"KiB", 1024.0},        {"kB", 1e3},
      {"M", 1048576.0},  {"MiB", 1048576.0}, {"MB", 1e6},       {"G", 1073741824.0},    {"GiB", 1073741824.0},
      {"GB", 1e9},       {"T", 1099511627776.0}, {"TiB", 1099511627776.0}, {"TB", 1e12}};
  for (const auto& [u, f] : units)
    if (unit == u) scale = f;
  if (scale == 0) throw UserError(field, "unknown unit \"" + unit + "\" in \"" + text + "\"", fix);
  const double bytes = v * scale;
  if (bytes > 9.2e18) throw UserError(field, "\"" + text + "\" is too large", fix);
  return int64_t(bytes);
}

void resolve(RunOutput& o) {
  if (o.save_every < 0)
    throw UserError("--save-every", "must be 0 (only at the end) or a positive number of steps, got " +
                    std::to_string(o.save_every), "pass --save-every N with N >= 1");
  if (o.save_every > 0 && o.save.empty())
    throw UserError("--save-every", "needs --save DIR (where the checkpoints go)", "add --save DIR");
  if (o.save_shard_bytes <= 0)
    throw UserError("--save-shard-size", "must be positive", "pass a size such as 5G (the default) or 100M");
  if (!o.resume.empty() && !o.init_from.empty())
    throw UserError("--init-from", "and --resume are two ways to start: a run takes one",
                    "use --resume DIR to continue a saved run, or --init-from DIR for its weights with a fresh optimizer");
  if (!o.trace.empty()) {
    if (!o.out.empty() && o.out != o.trace)
      throw UserError("--trace", "and --out name different files (" + o.trace + ", " + o.out + ")",
                      "the trace is the run database: pass only --trace, or the same path to both");
    o.out = o.trace;
  }
}

}  // namespace trainscope::runconfig
