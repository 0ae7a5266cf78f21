// config.cpp — validation and string forms of TrainConfig.
#include "trainscope/runtime/config.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"

namespace trainscope::runtime {
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
    {"fp32", Precision::FP32}, {"bf16", Precision::BF16}, {"fp16", Precision::FP16}};
const std::pair<const char*, OptimizerKind> kOpt[] = {{"adamw", OptimizerKind::AdamW},
                                                       {"adafactor", OptimizerKind::Adafactor},
                                                       {"adam8bit", OptimizerKind::Adam8bit},
                                                       {"sgd", OptimizerKind::SGD}};
const std::pair<const char*, DeviceRequest> kDev[] = {
    {"auto", DeviceRequest::Auto}, {"cpu", DeviceRequest::CPU}, {"cuda", DeviceRequest::CUDA}};

const std::pair<const char*, PipelineSchedule> kSched[] = {{"gpipe", PipelineSchedule::GPipe},
                                                          {"1f1b", PipelineSchedule::OneFOneB}};
const std::pair<const char*, Launcher> kLaunch[] = {{"local", Launcher::Local}, {"slurm", Launcher::Slurm}};

template <class E, size_t N>
const char* nameOf(E v, const std::pair<const char*, E> (&table)[N]) {
  for (const auto& [name, value] : table)
    if (value == v) return name;
  return "?";
}

void requirePositive(const char* field, int64_t v, const char* fix) {
  if (v <= 0) throw UserError(field, "must be positive, got " + std::to_string(v), fix);
}

}  // namespace

Checkpointing parseCheckpointing(const std::string& s, const std::string& f) { return parseEnum(s, f, kCkpt); }
Precision parsePrecision(const std::string& s, const std::string& f) { return parseEnum(s, f, kPrec); }
OptimizerKind parseOptimizer(const std::string& s, const std::string& f) { return parseEnum(s, f, kOpt); }
DeviceRequest parseDevice(const std::string& s, const std::string& f) { return parseEnum(s, f, kDev); }
const char* toString(Checkpointing v) { return nameOf(v, kCkpt); }
const char* toString(Precision v) { return nameOf(v, kPrec); }
const char* toString(OptimizerKind v) { return nameOf(v, kOpt); }
const char* toString(DeviceRequest v) { return nameOf(v, kDev); }
const char* toString(PipelineSchedule v) { return nameOf(v, kSched); }
const char* toString(Launcher v) { return nameOf(v, kLaunch); }
PipelineSchedule parseSchedule(const std::string& s, const std::string& f) { return parseEnum(s, f, kSched); }
Launcher parseLauncher(const std::string& s, const std::string& f) { return parseEnum(s, f, kLaunch); }

void resolve(TrainConfig& c, int world) {
  c.model = workloads::load(c.workload);
  requirePositive("--nproc", c.nproc, "pass --nproc N with N >= 1");
  c.world = world > 0 ? world : c.nproc;
  requirePositive("--tp", c.tp, "pass --tp N with N >= 1");
  requirePositive("--pp", c.pp, "pass --pp N with N >= 1");
  if (c.world % (c.tp * c.pp) != 0)
    throw UserError("--nproc", std::to_string(c.world) + " ranks cannot be split into tp=" + std::to_string(c.tp) +
                                   " x pp=" + std::to_string(c.pp) + " groups",
                    "use a multiple of tp*pp ranks");
  c.dp = c.world / (c.tp * c.pp);
  if (c.model.n_head % c.tp != 0)
    throw UserError("--tp", "tp=" + std::to_string(c.tp) + " does not divide n_head=" + std::to_string(c.model.n_head),
                    "choose --tp dividing the number of heads");
  if (c.pp > c.model.n_layer)
    throw UserError("--pp", "pp=" + std::to_string(c.pp) + " exceeds n_layer=" + std::to_string(c.model.n_layer),
                    "use at most one stage per layer");
  if (c.zero != 0 && c.zero != 1) throw UserError("--zero", "must be 0 or 1", "pass --zero 1 for ZeRO-1");
  if (c.local_sgd < 0) throw UserError("--local-sgd", "must be >= 0", "");
  if (c.local_sgd > 0 && c.zero) throw UserError("--local-sgd", "cannot be combined with --zero 1", "drop one of them");
  if (c.sequence_parallel && c.tp == 1)
    throw UserError("--sequence-parallel", "needs tensor parallelism", "pass --tp 2 or more");
  if (!(c.bucket_mb > 0)) throw UserError("--bucket-mb", "must be positive", "");
  if (!(c.rendezvous_timeout_s > 0)) throw UserError("--rendezvous-timeout", "must be positive (seconds)", "");
  if (!(c.collective_timeout_s > 0)) throw UserError("--collective-timeout", "must be positive (seconds)", "");
  if (!c.trace.empty()) {
    if (!c.out.empty() && c.out != c.trace)
      throw UserError("--trace", "and --out name different files (" + c.trace + ", " + c.out + ")",
                      "the trace is the run database: pass only --trace, or the same path to both");
    c.out = c.trace;
  }
  if (c.trace_level != "steps" && c.trace_level != "ranges" && c.trace_level != "ops" && c.trace_level != "all")
    throw UserError("--trace-level", "unknown value \"" + c.trace_level + "\"", "use one of steps|ranges|ops|all");
  if (c.seq == 0) c.seq = std::min<int64_t>(c.model.n_positions, 1024);
  requirePositive("--seq", c.seq, "pass --seq N with N > 0");
  if (c.seq > c.model.n_positions)
    throw UserError("--seq", std::to_string(c.seq) + " exceeds the workload's n_positions=" +
                                 std::to_string(c.model.n_positions),
                    "pass --seq <= " + std::to_string(c.model.n_positions));
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
  c.global_batch = c.mbs * c.ga_steps * c.dp;
  if (!(c.lr > 0)) throw UserError("--lr", "must be positive", "pass e.g. --lr 6e-4");
  if (c.warmup < 0) throw UserError("--warmup", "must be >= 0", "");
  if (c.clip < 0) throw UserError("--clip", "must be >= 0 (0 disables clipping)", "");
  if (c.weight_decay < 0) throw UserError("--weight-decay", "must be >= 0", "");
  if (c.min_lr_ratio < 0 || c.min_lr_ratio > 1) throw UserError("--min-lr-ratio", "must be in [0, 1]", "");
  if (c.adam8bit_block < 16) throw UserError("--adam8bit-block", "must be >= 16", "");
  if (c.peak_tflops && !(*c.peak_tflops > 0))
    throw UserError("--peak-tflops", "must be positive", "pass the device's peak dense TFLOP/s");
  if (c.threads < 0) throw UserError("--threads", "must be >= 0", "");
  if (c.cpu_lanes < 0) throw UserError("--cpu-lanes", "must be >= 0", "pass 0 (auto), 1 (off) or a lane count");
  if (c.cpu_lanes > c.mbs)
    throw UserError("--cpu-lanes", "must not exceed --mbs (" + std::to_string(c.mbs) + "): each lane takes whole sequences",
                    "pass --cpu-lanes " + std::to_string(c.mbs) + " or fewer");
  if (c.fp16_growth_interval < 1) throw UserError("--fp16-growth-interval", "must be >= 1", "pass e.g. 2000");
  if (!(c.fp16_init_scale > 0)) throw UserError("--fp16-init-scale", "must be positive", "pass e.g. 65536");
}

std::string toJson(const TrainConfig& c) {
  nlohmann::json j = {
      {"workload", c.model.name.empty() ? c.workload : c.model.name},
      {"n_layer", c.model.n_layer}, {"n_head", c.model.n_head}, {"n_embd", c.model.n_embd},
      {"n_positions", c.model.n_positions}, {"vocab_size", c.model.vocab_size},
      {"seq", c.seq}, {"mbs", c.mbs}, {"ga", c.ga_steps}, {"gbs", c.global_batch}, {"steps", c.steps},
      {"ckpt", toString(c.ckpt)}, {"precision", toString(c.precision)}, {"optimizer", toString(c.optimizer)},
      {"lr", c.lr}, {"min_lr_ratio", c.min_lr_ratio}, {"warmup", c.warmup}, {"clip", c.clip},
      {"weight_decay", c.weight_decay}, {"beta1", c.beta1}, {"beta2", c.beta2}, {"eps", c.eps},
      {"momentum", c.momentum}, {"adam8bit_block", c.adam8bit_block}, {"fp16_init_scale", c.fp16_init_scale},
      {"fp16_growth_interval", c.fp16_growth_interval},
      {"seed", c.seed}, {"data", c.data}, {"device", toString(c.device)}, {"threads", c.threads},
      {"cpu_lanes", c.cpu_lanes},
      {"world", c.world}, {"dp", c.dp}, {"tp", c.tp}, {"pp", c.pp}, {"sequence_parallel", c.sequence_parallel},
      {"zero", c.zero}, {"pp_schedule", toString(c.pp_schedule)}, {"local_sgd", c.local_sgd},
      {"bucket_mb", c.bucket_mb}, {"launcher", toString(c.launcher)},
      {"trace_level", c.trace.empty() ? std::string("off") : c.trace_level}};
  if (c.peak_tflops) j["peak_tflops"] = *c.peak_tflops;
  return j.dump();
}

}  // namespace trainscope::runtime
