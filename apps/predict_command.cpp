// predict_command.cpp — see predict_command.h. Prints per-stage memory (this runtime and Megatron-LM
// by Korthikanti et al.), the step-time split and throughput; --json gives every figure in bytes
// and seconds.
#include "predict_command.h"

#include "predict_flags.h"
#include "predict_inline.h"
#include "deepspeed_config.h"
#include "predict_framework_memory.h"
#include "trainscope/models/framework_memory.h"
#include "predict_megatron.h"
#include "predict_plan.h"
#include "predict_moe_load.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <utility>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/common/json_text.h"
#include "trainscope/models/fit_params.h"
#include "trainscope/models/moe.h"
#include "trainscope/tuner/cost_model.h"
#include "trainscope/tuner/models.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/runconfig/config.h"
#include "trainscope/tuner/profile.h"
#include "trainscope/tuner/space.h"
#include "trainscope/workloads/architecture.h"
#include "trainscope/workloads/memory.h"
#include "trainscope/workloads/workload.h"

namespace trainscope::apps {

namespace rt = trainscope::runconfig;
namespace tn = trainscope::tuner;

namespace {

// One configuration's predictions.
struct Outcome {
  workloads::Workload w;
  tn::Cluster c;
  tn::Plan p;
  int64_t devices = 0;
  tn::MemoryPrediction m;
  tn::TimePrediction t;
  tn::Framework framework = tn::Framework::Trainscope;
  tn::Attention attention = tn::Attention::Default;
  std::string time_source = "analytic";
  double megatron_bytes_per_param = 18;
  tn::DeepSpeedZero deepspeed;  // --deepspeed-config's knobs (framework memory)
  std::string routing;          // which routing the MoE figures priced (routingLine; "" when dense)
  int64_t framework_peak = 0;   // FSDP's / DeepSpeed's / Megatron-LM's own peak on a GPU (frameworkPeak; 0: none)
  int64_t megatronParamsOpt(int64_t stage) const {
    return tn::megatronLayersParamsOpt(w, p, stage, runconfig::shardsOptimizer(p.zero));
  }
  int64_t megatronEmbeddingOpt() const { return tn::megatronEmbeddingParamsOpt(w, p, megatron_bytes_per_param); }
  // What `fits` is judged on: FSDP's, DeepSpeed's or Megatron-LM's own peak on a GPU (framework_peak),
  // else this runtime's worst stage.
  int64_t judgedPeak() const { return framework_peak > 0 ? framework_peak : m.peak(); }
  const char* judgedBy() const { return framework_peak > 0 ? tn::frameworkKey(framework) : "trainscope"; }
};

// Loaded files, kept across the lines of a batch (a 1,500-line batch names a few of each).
struct Loaded {
  std::map<std::string, workloads::Workload> workloads;
  std::map<std::pair<std::string, int64_t>, tn::Cluster> clusters;
  const workloads::Workload& workload(const std::string& name) {
    auto it = workloads.find(name);
    if (it != workloads.end()) return it->second;
    return workloads.emplace(name, isInline(name) ? inlineWorkload(name) : workloads::load(name)).first->second;
  }
  const tn::Cluster& cluster(const std::string& name, int64_t nodes) {
    auto it = clusters.find({name, nodes});
    if (it != clusters.end()) return it->second;
    tn::Cluster c = isInline(name) ? inlineCluster(name, nodes) : tn::loadCluster(name, nodes);
    return clusters.emplace(std::make_pair(name, nodes), std::move(c)).first->second;
  }
};

// The memory per stage; figures that overflow are refused.
tn::MemoryPrediction checkedMemory(const workloads::Workload& w, const tn::Plan& p, tn::Attention megatron_attention) {
  tn::MemoryPrediction m = tn::predictMemory(w, p, megatron_attention);
  for (const auto& stage : m.stages)
    if (stage.total() < 0 || stage.activations < 0)
      throw UserError("predict", "the memory model's figures overflow for " + p.describe(), "pass a smaller --mbs or --seq");
  return m;
}

// --framework; --use-distributed-optimizer only with Megatron-LM's, and ZeRO-2/3 only with this
// runtime's: Megatron-LM shards only the optimizer state (its distributed optimizer is ZeRO-1; the
// FSDP of recent Megatron-core versions is not modelled).
tn::Framework checkedFramework(const PredictFlags& f) {
  const tn::Framework framework = tn::parseFramework(f.framework);
  if (f.distributed_optimizer && framework != tn::Framework::Megatron)
    throw UserError("--use-distributed-optimizer", "is Megatron-LM's flag", "add --framework megatron, or use --zero 1");
  const int zero = rt::stageNumber(f.zero);
  if (framework == tn::Framework::Megatron && zero >= 2)
    throw UserError("--zero", "Megatron-LM has no ZeRO-" + std::to_string(zero) +
                                  ": its distributed optimizer shards the optimizer state only (ZeRO-1), and the FSDP "
                                  "of recent Megatron-core versions is not modelled",
                    "pass --use-distributed-optimizer for Megatron-LM's ZeRO-1, or --framework trainscope to price "
                    "ZeRO-" + std::to_string(zero));
  return framework;
}

// The plan a profiled run ran, from its config; refused unless the run trained workload `w`.
tn::Plan profiledPlan(rundb::RunReader& reader, const std::string& path, const workloads::Workload& w) {
  const std::string cfg = reader.meta("config");
  const nlohmann::json j = nlohmann::json::parse(cfg.empty() ? "{}" : cfg, nullptr, false);
  const auto dim = [&](const char* k) { return j.is_object() ? j.value(k, int64_t(-1)) : int64_t(-1); };
  if (dim("n_embd") != w.n_embd || dim("n_layer") != w.n_layer || dim("n_head") != w.n_head ||
      dim("vocab_size") != w.vocab_size)
    throw UserError("--profile", path + " is not a trainscope run of " + w.name + " (its config names another model, or none)",
                    "profile with `trainscope run --workload " + files::shellQuote(w.name.find('/') != std::string::npos && !w.source.empty() ? w.source : w.name) +
                        " --trace FILE`");
  tn::Plan rp = tn::planOf(rt::fromJson(cfg, path));
  rp.dp = std::max<int64_t>(1, dim("dp"));  // resolved at run time: not an input fromJson reads
  rp.gbs = std::max<int64_t>(rp.gbs, dim("gbs"));
  rp.cpu = reader.meta("device") == "cpu";
  if (dim("cpu_lanes") == 0) rp.cpu_lanes = tn::lanesOfRun(reader);  // auto: what the run resolved it to
  return rp;
}

// The layer costs the --profile runs measured, by their layer shape on cluster `c`.
tn::MeasuredCosts profiledCosts(const PredictFlags& f, const workloads::Workload& w, const tn::Cluster& c) {
  tn::MeasuredCosts costs;
  for (const std::string& path : f.profiles) {
    files::requireRegularFile(path, "--profile", "pass a traced run database (trainscope run --trace FILE)");
    try {
      rundb::RunReader reader(path);
      const tn::Plan rp = profiledPlan(reader, path, w);
      costs.add(tn::shapeKey(rp, c), tn::costsFromRun(reader, w, rp));
    } catch (const UserError& e) {
      if (e.field() == "--profile") throw;
      // The reader's ("database: … is not a trainscope run database …", its fix with it), under the flag.
      std::string what = e.what();
      if (what.rfind(e.field() + ": ", 0) == 0) what = what.substr(e.field().size() + 2);
      throw UserError("--profile", what, "");
    }
  }
  return costs;
}

// The step time composed from the measured layer costs when a profiled run has this plan's layer
// shape; otherwise a note, and the analytic model's stays.
void useMeasuredTime(Outcome& o, const PredictFlags& f) {
  if (o.p.zero >= rt::ZeroStage::Gradients) {  // profiles are composed for stages 0 and 1 only
    std::fprintf(stderr, "note: measured layer costs are not composed for ZeRO-%d; the step time is the "
                         "analytic model's\n", rt::stageNumber(f.zero));
    return;
  }
  const tn::MeasuredCosts costs = profiledCosts(f, o.w, o.c);
  if (auto measured = tn::composeTime(o.w, o.p, o.c, costs)) {
    o.t = *measured;
    o.time_source = "measured (" + tn::shapeKey(o.p, o.c) + ")";
  } else {
    std::fprintf(stderr, "note: no profiled run has this plan's layer shape (%s); the step time is the analytic model's\n",
                 tn::shapeKey(o.p, o.c).c_str());
  }
}

// --reduce-dtype as bytes per gradient element (0: "default", the framework profile's reduce_bytes).
// This runtime reduces fp32 gradients only, and a CPU cluster's model prices fp32 reductions only:
// a narrower dtype there is refused rather than priced as something that does not run.
double reduceBytes(const PredictFlags& f, const tn::Cluster& c, tn::Framework framework) {
  if (f.reduce_dtype == "default") return 0;
  const double bytes = f.reduce_dtype == "fp32" ? 4 : f.reduce_dtype == "bf16" || f.reduce_dtype == "fp16" ? 2 : -1;
  if (bytes < 0)
    throw UserError("--reduce-dtype", "must be default, fp32, bf16 or fp16, not \"" + f.reduce_dtype + "\"", "");
  if (c.kind != tn::ClusterKind::Gpu)
    throw UserError("--reduce-dtype", "prices GPU clusters only (" + c.name + " is a CPU cluster: its model reduces fp32 "
                    "gradients, as its runners do)", "drop --reduce-dtype, or pass a GPU cluster");
  if (framework == tn::Framework::Trainscope && bytes != 4)
    throw UserError("--reduce-dtype", "this runtime reduces gradients in fp32 only, not " + f.reduce_dtype,
                    "pass --framework fsdp, deepspeed or megatron to price a framework that reduces in " + f.reduce_dtype);
  return bytes;
}

// --deepspeed-config: the knobs into the options; its communication_data_type is the reduce dtype,
// and a --reduce-dtype that says otherwise is refused, as are batch keys or a 16-bit mode not the plan's.
void useDeepSpeedConfig(const PredictFlags& f, const workloads::Workload& w, const tn::Plan& p, tn::Framework framework,
                        tn::TimeOptions& options) {
  if (framework != tn::Framework::Deepspeed)
    throw UserError("--deepspeed-config", "is DeepSpeed's config", "add --framework deepspeed, or drop the flag");
  const DeepSpeedConfigRead ds = readDeepSpeedConfig(f.deepspeed_config, w, rt::stageNumber(f.zero), "--deepspeed-config");
  checkDeepSpeedPlan(ds, p, f.precision, f.deepspeed_config, "--deepspeed-config");
  if (ds.reduce_bytes > 0 && options.reduce_bytes > 0 && ds.reduce_bytes != options.reduce_bytes)
    throw UserError("--reduce-dtype", f.reduce_dtype + " contradicts the communication_data_type of " + f.deepspeed_config,
                    "drop --reduce-dtype: the config's is priced");
  if (ds.reduce_bytes > 0) options.reduce_bytes = ds.reduce_bytes;
  // No communication_data_type: DeepSpeed reduces in the model's dtype (DeepSpeedEngine's default),
  // fp32 for an fp32 model, where the profile's reduce_bytes (2) is a 16-bit model's.
  else if (options.reduce_bytes == 0 && f.precision == "fp32") options.reduce_bytes = 4;
  options.deepspeed = ds.zero;
}

// Flags `f` priced for workload `w` on cluster `c` by the analytic models: what predict's evaluate()
// and priceConfig (calibrate's) share. Throws the UserErrors predict gives.
struct Priced {
  int64_t devices = 0;
  tn::Plan p;
  tn::MemoryPrediction m;
  tn::TimeOptions options;
  tn::TimePrediction t;
};
// This runtime's time and memory for a plan it does not run would answer for no job: refused as tune
// rejects such candidates (runtimeRefusal: ZeRO-3 with cp, pp or sp, Adafactor or 8-bit Adam with
// sharded state, …), naming the runtime's reason.
void refuseWhatTheRuntimeRefuses(const workloads::Workload& w, const tn::Plan& p) {
  std::string why = tn::runtimeRefusal(w, p);
  if (why.empty()) return;
  // The runtime's own "(fix: …)" becomes part of the reason; the fix names the frameworks that run it.
  if (const size_t at = why.rfind(" (fix: "); at != std::string::npos && why.back() == ')')
    why = why.substr(0, at) + "; " + why.substr(at + 7, why.size() - at - 8);
  std::string others;
  for (tn::Framework f : {tn::Framework::Fsdp, tn::Framework::Deepspeed, tn::Framework::Megatron}) {
    if (f == tn::Framework::Megatron && p.zero >= rt::ZeroStage::Gradients) continue;  // checkedFramework's rule
    if (!tn::frameworkRefusal(f, p, w).why.empty()) continue;
    others += std::string(others.empty() ? "--framework " : " or ") + tn::frameworkKey(f);
  }
  throw UserError("predict", "--framework trainscope prices this runtime's plans, and " + why,
                  others.empty() ? "change the plan" : "change the plan, or price a framework that runs it: " + others);
}

Priced priceFlags(const PredictFlags& f, const workloads::Workload& w, const tn::Cluster& c, tn::Framework framework) {
  Priced out;
  out.devices = devicesOf(f, c);
  out.p = planFromFlags(f, w, c, out.devices);
  // Megatron-LM's distributed optimizer is its ZeRO-1: --use-distributed-optimizer and --zero 1 are one
  // job, whose fit (the plan's stage) and Megatron column (megatronBytesPerParam of that stage) agree.
  // Over one data-parallel rank the flag shards nothing and the stage stays none, as Megatron-LM allows.
  if (framework == tn::Framework::Megatron && f.distributed_optimizer && out.p.gradientGroup() > 1 &&
      out.p.zero == rt::ZeroStage::None)
    out.p.zero = rt::ZeroStage::OptimizerStates;
  checkPriceable(w, out.p, out.devices);
  if (framework == tn::Framework::Trainscope) refuseWhatTheRuntimeRefuses(w, out.p);
  if (!f.moe_load.empty()) out.p.moe_load = readMoeLoad(f.moe_load, w, out.p).load;  // else random routing's
  out.m = checkedMemory(w, out.p, tn::parseAttention(f.attention));  // Megatron-LM's column: the same attention
  out.options = {f.dp_overlap, framework, tn::parseAttention(f.attention), reduceBytes(f, c, framework)};
  out.options.megatron = megatronOverlapOf(f, out.p, framework);  // checks --fp8-param-gather too
  out.p.fp8_param_gather = f.fp8_param_gather;
  // What the framework itself refuses to run (DeepSpeed: ZeRO-2/3 with PP, interleaving), config or not.
  if (const tn::FrameworkRefusal r = tn::frameworkRefusal(framework, out.p, w); !r.why.empty())
    throw UserError(r.flag, r.why + " (--framework " + tn::frameworkKey(framework) + ")", r.fix);
  if (!f.deepspeed_config.empty()) useDeepSpeedConfig(f, w, out.p, framework, out.options);
  out.t = tn::predictTime(w, out.p, c, out.options);
  return out;
}

Outcome evaluate(const PredictFlags& f, Loaded& loaded) {
  Outcome o;
  o.framework = checkedFramework(f);
  o.w = loaded.workload(f.workload);
  o.c = loaded.cluster(f.cluster, f.nodes);
  Priced priced = priceFlags(f, o.w, o.c, o.framework);
  o.devices = priced.devices;
  o.p = std::move(priced.p);
  o.m = std::move(priced.m);
  o.attention = priced.options.attention;
  o.t = std::move(priced.t);
  // --reduce-dtype into the profile the framework memory reads (fsdpMemory's reduce buffers).
  if (priced.options.reduce_bytes > 0) o.c.mutableProfile(o.framework).reduce_bytes = priced.options.reduce_bytes;
  o.deepspeed = priced.options.deepspeed;
  o.routing = routingLine(o.w, o.p, f.moe_load);
  o.framework_peak = tn::frameworkPeak(o.w, o.p, o.c, o.framework, o.m, o.deepspeed);
  // Megatron-LM's parameters and optimizer state per stage (its theoretical_memory_usage and the
  // distributed-optimizer docs): 16-bit weights, fp32 main gradients, fp32 master weights and Adam
  // moments = 18 bytes per parameter, or 6 + 12/(dp·cp) with the distributed optimizer (the plan's
  // ZeRO-1). Layers only, as Korthikanti et al.'s Figure 1 counts them; the stage's embedding or head
  // shard beside it.
  o.megatron_bytes_per_param = tn::megatronBytesPerParam(o.p, rt::shardsOptimizer(o.p.zero));
  // Measured layer costs from profiled runs of this cluster, when one has this plan's layer shape.
  if (!f.profiles.empty()) useMeasuredTime(o, f);
  return o;
}

// "ZeRO-3", or "none" without ZeRO (a stage over one DP rank shards nothing: whyInvalid refuses it).
std::string zeroName(const tn::Plan& p) {
  return rt::shardsOptimizer(p.zero) ? "ZeRO-" + std::to_string(rt::stageNumber(p.zero)) : "none";
}

// What the plan's ZeRO stage shards and adds, for the text output: one line, or "" without ZeRO.
std::string zeroLine(const tn::Plan& p, const tn::StageMemory& s) {
  if (!rt::shardsOptimizer(p.zero)) return "";
  auto gib = [](int64_t b) { return double(b) / double(int64_t(1) << 30); };
  char line[512];
  const int stage = rt::stageNumber(p.zero);
  const char* what = stage == 1 ? "optimizer state" : stage == 2 ? "optimizer state and gradients"
                                                                 : "optimizer state, gradients and parameters";
  int n = std::snprintf(line, sizeof(line), "%s: %s sharded over dp=%lld", zeroName(p).c_str(), what,
                        static_cast<long long>(p.dp));
  if (stage >= 2)
    n += std::snprintf(line + n, sizeof(line) - size_t(n),
                       "; backward adds a %.2f GiB gradient bucket",
                       gib(s.grad_bucket));
  if (stage == 3)
    std::snprintf(line + n, sizeof(line) - size_t(n), ", forward and backward %.2f GiB of gathered parameters",
                  gib(s.gathered));
  return std::string(line) + "\n";
}

nlohmann::json toJson(const Outcome& o) {
  const auto& [w, c, p, devices, m, t, framework, attention, time_source, bpp, ds, routing, fpeak] = o;
  (void)devices, (void)bpp, (void)fpeak;
  const bool fits = o.judgedPeak() <= c.memory_bytes;
  nlohmann::json j = {{"workload", w.name}, {"cluster", c.name}, {"plan", p.describe()},
                      {"dp", p.dp}, {"cp", p.cp}, {"ep", p.ep}, {"tp", p.tp}, {"pp", p.pp}, {"mbs", p.mbs}, {"gbs", p.gbs}, {"ga", p.ga()},
                      {"seq", p.seq}, {"zero", rt::stageNumber(p.zero)}, {"zero_stage", zeroName(p)},
                      {"zero_shard_size", p.zero_shard_size},
                      {"pp_schedule", rt::scheduleName(p)}, {"virtual_stages", p.virtual_stages},
                      {"memory_limit_bytes", c.memory_bytes}, {"peak_bytes", m.peak()},
                      {"worst_stage", m.worst_stage}, {"fits", fits}, {"fits_by", o.judgedBy()}};
  for (const auto& s : m.stages)
    j["stages"].push_back({{"stage", s.stage}, {"layers", s.layers}, {"params_bytes", s.params},
                           {"grads_bytes", s.grads}, {"optimizer_bytes", s.optimizer},
                           {"activations_bytes", s.activations}, {"head_bytes", s.head},
                           {"buffers_bytes", s.buffers}, {"fp8_weights_bytes", s.fp8_weights}, {"head_chunk_bytes", s.head_chunk},
                           {"recompute_bytes", s.recompute}, {"allowance_bytes", s.allowance},
                           {"transient_bytes", s.transient()},
                           {"lane_grads_bytes", s.lane_grads}, {"lane_fresh_bytes", s.lane_fresh},
                           {"sync_bytes", s.sync}, {"grad_bucket_bytes", s.grad_bucket},
                           {"gathered_bytes", s.gathered}, {"expert_grads_bytes", s.expert_grads},
                           {"moe_freed_bytes", s.moe_freed}, {"moe_recompute_bytes", s.moe_recompute},
                           {"moe_dispatch_bytes", s.moe_dispatch},
                           {"peak_in", s.peakPhase()},
                           {"total_bytes", s.total()}, {"microbatches_in_flight", s.inflight},
                           {"megatron_activations_bytes", s.megatron_activations},
                           {"megatron_params_opt_bytes", o.megatronParamsOpt(s.stage)},
                           {"megatron_embedding_opt_bytes", tn::megatronEmbeddingTables(w, p, s.stage) * o.megatronEmbeddingOpt()}});
  j["time"] = {{"compute_s", t.compute_s}, {"recompute_s", t.recompute_s}, {"tp_comm_s", t.tp_comm_s},
               {"dp_comm_s", t.dp_comm_s}, {"zero_gather_s", t.zero_gather_s}, {"pp_comm_s", t.pp_comm_s},
               {"cp_comm_s", t.cp_comm_s}, {"ep_comm_s", t.ep_comm_s}, {"bubble_s", t.bubble_s},
               {"optimizer_s", t.optimizer_s}, {"other_s", t.other_s}, {"host_s", t.host_s}, {"step_s", t.step_s}};
  j["time_source"] = time_source;
  j["framework"] = tn::frameworkName(framework);
  j["attention"] = tn::attentionName(o.attention);
  j["time"]["bound"] = t.bound;
  addFrameworkMemoryJson(j, w, p, framework, c, m, ds);
  if (w.isMoe()) {
    const tn::MoeRouting r = tn::moeRouting(w, p);
    j["moe_routing"] = {{"text", routing}, {"source", p.ep <= 1 ? "ep1" : r.random_load ? "random" : "measured"},
                        {"load", r.load}, {"received_rows", r.received}, {"kept_rows", r.kept}, {"capacity", r.capacity}};
  }
  j["tokens_per_s"] = t.tokens_per_s;
  j["mfu"] = t.mfu;
  // The model's parameters (tied embeddings once) and those one token passes through (MoE: top-k experts).
  j["parameters"] = w.parameterCount();
  j["active_parameters"] = w.activeParameterCount();
  // A calibrated cluster file (`trainscope calibrate`) states how far its predictions held.
  // Only for a framework its rows were priced under: a file calibrated on FSDP rows states nothing
  // of Megatron-LM's times ("covers": false, no pm).
  if (tn::CalibrationInterval ci; tn::calibrationInterval(c.source, ci)) {
    j["time"]["calibration"] = {{"file", ci.file}, {"covers", ci.covers(tn::frameworkKey(framework))}};
    if (!ci.frameworks.empty()) j["time"]["calibration"]["frameworks"] = ci.frameworks;
    if (ci.covers(tn::frameworkKey(framework)))
      j["time"]["calibration"].update({{"pm", ci.pm}, {"text", ci.text()}, {"held_out", ci.held_out}});
  }
  return j;
}

void printText(const Outcome& o) {
  const auto& [w, c, p, devices, m, t, framework, attention, time_source, bpp, ds, routing, fpeak] = o;
  const bool fits = o.judgedPeak() <= c.memory_bytes;

  auto gib = [](int64_t b) { return double(b) / double(int64_t(1) << 30); };
  char line[512];
  std::printf("trainscope predict: %s on %s, %lld devices: %s, gbs %lld, seq %lld\n", w.name.c_str(), c.name.c_str(),
              static_cast<long long>(devices), p.describe().c_str(), static_cast<long long>(p.gbs),
              static_cast<long long>(p.seq));
  std::printf("\nmemory per rank (GiB)  limit %.2f\n", gib(c.memory_bytes));
  // Held all step (params … buffers), then what the moment with the peak adds ("peak in"): a micro-
  // batch's activations and the head's saved dX/dW, and that moment's transients.
  std::printf("stage layers  params   grads   optim  buffers |   activ    head  transient  peak in  |    total  | Megatron activ\n");
  for (const auto& s : m.stages) {
    const bool holds = std::string(s.peakPhase()) == "backward" || std::string(s.peakPhase()) == "head fwd" ||
                       std::string(s.peakPhase()) == "moe recomp";
    // A MoE's experts' backward holds the activations less what later layers freed, and no head.
    const bool moe = std::string(s.peakPhase()) == "moe bwd";
    const int64_t activ = holds ? s.activations : moe ? s.activations - s.moe_freed : 0, head = holds ? s.head : 0;
    std::snprintf(line, sizeof(line), "%5lld %6lld %7.2f %7.2f %7.2f %8.2f | %7.2f %7.2f %10.2f  %-8s | %8.2f%s | %9.2f\n",
                  static_cast<long long>(s.stage), static_cast<long long>(s.layers), gib(s.params), gib(s.grads),
                  gib(s.optimizer), gib(s.buffers), gib(activ), gib(head), gib(s.transient() - activ - head),
                  s.peakPhase(), gib(s.total()), s.stage == m.worst_stage ? "*" : " ", gib(s.megatron_activations));
    std::cout << line;
  }
  if (fpeak > 0)  // FSDP's / DeepSpeed's / Megatron-LM's own peak decides (printFrameworkMemory's line)
    std::printf("%s: %s's peak %.2f GiB of %.2f (this runtime's worst stage %lld: %.2f GiB)\n",
                fits ? "fits" : "DOES NOT FIT",
                framework == tn::Framework::Fsdp ? "FSDP" : framework == tn::Framework::Megatron ? "Megatron-LM" : "DeepSpeed",
                gib(o.judgedPeak()), gib(c.memory_bytes), static_cast<long long>(m.worst_stage), gib(m.peak()));
  else
    std::printf("%s: worst stage %lld needs %.2f GiB of %.2f\n", fits ? "fits" : "DOES NOT FIT",
                static_cast<long long>(m.worst_stage), gib(m.peak()), gib(c.memory_bytes));
  std::cout << zeroLine(p, m.stages[size_t(m.worst_stage)]);
  std::printf("\nstep time (%s) %.3f s = compute %.3f + recompute %.3f + TP comm %.3f + DP comm %.3f + PP comm %.3f"
              " + bubble %.3f + optimizer %.3f + other %.3f\n",
              time_source.c_str(), t.step_s, t.compute_s, t.recompute_s, t.tp_comm_s, t.dp_comm_s, t.pp_comm_s,
              t.bubble_s, t.optimizer_s, t.other_s);
  if (tn::CalibrationInterval ci; !tn::calibrationInterval(c.source, ci)) {
  } else if (!ci.covers(tn::frameworkKey(framework))) {
    std::string list;
    for (const std::string& f : ci.frameworks) list += (list.empty() ? "" : ", ") + f;
    std::printf("(no interval: %s was calibrated on rows of %s, not %s)\n", ci.file.c_str(), list.c_str(),
                tn::frameworkKey(framework));
  } else {
    std::printf("(step time and throughput %s: 90%% of its %s fell within)\n", ci.text().c_str(),
                ci.held_out ? "held-out rows"
                            : "fitted rows, in sample (it was not cross-validated: calibrate --folds 0, or --trace)");
  }
  if (t.measured) std::printf("(measured layer times include their TP collectives)\n");
  if (t.zero_gather_s > 0) std::printf("(DP comm includes %.3f s of ZeRO-3 parameter all-gathers)\n", t.zero_gather_s);
  if (t.host_s > 0)  // a CPU cluster under another framework's profile (time_model.h)
    std::printf("(and %s's host work %.3f s, its Python ops, hooks and micro-batches on the same cores: in the step, "
                "not in the sum above)\n", tn::frameworkName(framework), t.host_s);
  if (p.cp > 1)
    std::printf("(and CP ring %.3f s, the K/V exchange not hidden behind attention: in the step, not in the sum above)\n",
                t.cp_comm_s);
  if (w.isMoe())
    std::printf("(and EP all-to-all %.3f s; %lld experts over ep=%lld, %.4g total / %.4g active parameters; MFU on "
                "active FLOPs)\n",
                t.ep_comm_s, static_cast<long long>(w.n_experts), static_cast<long long>(p.ep),
                double(w.parameterCount()), double(w.activeParameterCount()));
  if (!routing.empty()) std::printf("%s\n", routing.c_str());
  if (!t.bound.empty())
    std::printf("kernels of %s%s; each micro-batch bound by the %s\n", tn::frameworkName(framework),
                attention == tn::Attention::Default ? "" : attention == tn::Attention::Flash ? ", flash attention"
                                                                                             : ", unfused attention",
                t.bound.c_str());
  if (framework == tn::Framework::Megatron && w.isMoe())
    std::printf("Megatron-LM parameters + optimizer (%.4g bytes/parameter, the experts' %.4g): stage 0 %.2f GiB in "
                "its layers\n", bpp, tn::megatronBytesPerExpertParam(p, rt::shardsOptimizer(p.zero)),
                gib(o.megatronParamsOpt(0)));
  else if (framework == tn::Framework::Megatron)
    std::printf("Megatron-LM parameters + optimizer (%.4g bytes/parameter): stage 0 %.2f GiB in its layers\n",
                bpp, gib(o.megatronParamsOpt(0)));
  printFrameworkMemory(w, p, framework, c, o.m, ds);
  std::printf("throughput %.0f tokens/s, MFU %.1f%%\n", t.tokens_per_s, t.mfu * 100);
}


}  // namespace

// --storage-gbps and the checkpoint's write (below), for a batch line as for the command line.
double storageGbps(const PredictFlags& f);
nlohmann::json checkpointPrice(const PredictFlags& f, const Outcome& o);

namespace {

// --batch: one configuration per line (a JSON object of predict's flags, underscores for dashes);
// the command line's flags are every line's defaults. One JSON result per line, in order; a line
// that fails gives {"line": N, "error": "..."} and the exit status is 2.
int runBatch(const PredictFlags& defaults) {
  storageGbps(defaults);  // the command line's --storage-gbps refused before any work, as without --batch
  std::istringstream in(files::readTextFile(defaults.batch, "--batch", "pass a JSON-lines file"));
  Loaded loaded;
  std::string text;
  int64_t n = 0, failed = 0;
  while (std::getline(in, text)) {
    ++n;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json out;
    try {
      const PredictFlags f = flagsFromJson(text, defaults, n);
      const double gbps = storageGbps(f);  // --storage-gbps, or the line's storage_gbps
      const Outcome o = evaluate(f, loaded);
      out = toJson(o);
      if (gbps > 0) out["checkpoint"] = checkpointPrice(f, o);
      out["line"] = n;
    } catch (const std::exception& e) {
      // Every error names its line: those of the shared checks (parseCheckpointing's "--ckpt: …")
      // are prefixed with it.
      ++failed;
      const std::string where = "--batch line " + std::to_string(n), what = e.what();
      out = {{"line", n}, {"error", what.rfind(where, 0) == 0 ? what : where + ": " + what}};
    }
    std::cout << jsonText(out) << "\n";
  }
  std::cout.flush();
  std::fflush(stdout);  // every result line whole before the note (stdout and stderr may be one pipe)
  if (failed) std::fprintf(stderr, "predict --batch: %lld of %lld line(s) failed (their error is on their line)\n",
                           static_cast<long long>(failed), static_cast<long long>(n));
  return failed ? 2 : 0;
}

}  // namespace

// --storage-gbps as a number (UserError naming it otherwise); 0 when not given.
double storageGbps(const PredictFlags& f) {
  if (f.storage_gbps.empty()) return 0;
  char* end = nullptr;
  const double v = std::strtod(f.storage_gbps.c_str(), &end);
  if (*end != '\0' || !(v > 0) || v > 1e9)
    throw UserError("--storage-gbps", "must be a positive number of GB/s, not \"" + f.storage_gbps + "\"",
                    "pass the storage's write bandwidth, e.g. --storage-gbps 2");
  return v;
}

// A `run --save` checkpoint's write (docs/time-model.md, "Checkpoint write"): its bytes are the
// fp32 weights (4 per parameter, whatever the precision: the Hugging Face files hold the master
// weights) plus the whole model's optimizer state (summed over ranks: ZeRO shards add up to it);
// written at the storage's aggregate bandwidth, time = bytes / (storage_gbps · 1e9).
nlohmann::json checkpointPrice(const PredictFlags& f, const Outcome& o) {
  const workloads::OptimizerState opt = f.optimizer == "sgd"         ? workloads::OptimizerState::SGD
                                        : f.optimizer == "adafactor" ? workloads::OptimizerState::Adafactor
                                        : f.optimizer == "adam8bit"  ? workloads::OptimizerState::Adam8bit
                                                                     : workloads::OptimizerState::AdamW;
  const int64_t weights = 4 * o.w.parameterCount();
  // Adafactor and 8-bit Adam also write their state per parameter name, fp32, two kinds (Adafactor's
  // factors broadcast, 8-bit Adam's moments dequantised): 8 bytes per parameter (checkpoints.md).
  const bool converted = opt == workloads::OptimizerState::Adafactor || opt == workloads::OptimizerState::Adam8bit;
  const int64_t optimizer =
      workloads::modelStateBytes(o.w, false, opt).optimizer + (converted ? 8 * o.w.parameterCount() : 0);
  const double bytes = double(weights + optimizer);
  return {{"bytes", weights + optimizer}, {"weights_bytes", weights}, {"optimizer_bytes", optimizer},
          {"storage_gbps", storageGbps(f)}, {"write_s", bytes / (storageGbps(f) * 1e9)}};
}

PricedConfig priceConfig(const PredictFlags& f, const workloads::Workload& w, const tn::Cluster& c) {
  Priced priced = priceFlags(f, w, c, checkedFramework(f));
  PricedConfig out;
  out.p = std::move(priced.p);
  out.options = priced.options;
  out.step_s = priced.t.step_s;
  out.peak_bytes = priced.m.peak();
  // What predict's "fits" is judged on (evaluate's framework_peak): FSDP's / DeepSpeed's / Megatron-LM's own
  // peak on a GPU.
  tn::Cluster fc = c;
  if (priced.options.reduce_bytes > 0) fc.mutableProfile(priced.options.framework).reduce_bytes = priced.options.reduce_bytes;
  const int64_t framework_peak =
      tn::frameworkPeak(w, out.p, fc, priced.options.framework, priced.m, priced.options.deepspeed);
  out.judged_peak_bytes = framework_peak > 0 ? framework_peak : out.peak_bytes;
  return out;
}

int runPredict(const PredictFlags& f) {
  if (!f.batch.empty()) return runBatch(f);
  const double gbps = storageGbps(f);  // refused before any work
  Loaded loaded;
  const Outcome o = evaluate(f, loaded);
  if (f.json) {
    nlohmann::json j = toJson(o);
    if (gbps > 0) j["checkpoint"] = checkpointPrice(f, o);
    std::cout << jsonText(j) << "\n";
    return 0;
  }
  printText(o);
  if (gbps > 0) {
    const nlohmann::json c = checkpointPrice(f, o);
    // GiB from a tenth of one, MiB below (a small model's checkpoint is not "0.00 GiB"); seconds to
    // two decimals from a tenth of one, three significant digits below.
    const double bytes = c["bytes"].get<double>(), write_s = c["write_s"].get<double>();
    const bool gib = bytes >= 0.1 * double(int64_t(1) << 30);
    const double unit = double(int64_t(1) << (gib ? 30 : 20));
    std::printf("\ncheckpoint (run --save): %.2f %s (fp32 weights %.2f + optimizer state %.2f) at %.3g GB/s: %.*f s "
                "to write (bytes / bandwidth)\n",
                bytes / unit, gib ? "GiB" : "MiB", c["weights_bytes"].get<double>() / unit,
                c["optimizer_bytes"].get<double>() / unit, gbps,
                write_s >= 0.1 || write_s <= 0 ? 2 : std::max(2, 3 - int(std::floor(std::log10(write_s))) - 1), write_s);
  }
  return 0;
}

}  // namespace trainscope::apps
