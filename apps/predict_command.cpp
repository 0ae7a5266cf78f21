// predict_command.cpp — see predict_command.h. Prints per-stage memory (this runtime and Megatron-LM
// by Korthikanti et al.), the step-time split and throughput; --json gives every figure in bytes
// and seconds.
#include "predict_command.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/common/json_text.h"
#include "trainscope/tuner/cost_model.h"
#include "trainscope/tuner/models.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/runconfig/config.h"
#include "trainscope/tuner/profile.h"
#include "trainscope/workloads/workload.h"

namespace trainscope::apps {

namespace rt = trainscope::runtime;
namespace tn = trainscope::tuner;

struct PredictFlags {
  std::string workload = "gpt2-124m", cluster = "h100-80gb-x8", ckpt = "none", precision = "bf16",
              optimizer = "adamw", schedule = "1f1b", framework = "trainscope",
              attention = "default";
  int64_t ep = 1;  // expert parallelism: a MoE workload's experts over ep of the dp ranks
  int64_t tp = 1, pp = 1, cp = 1, mbs = 1, gbs = 0, seq = 0, nodes = 0, gpus = 0, virtual_stages = 1, cpu_lanes = 1;
  int zero = 0;
  int64_t zero_shard = 0;  // ZeRO-3 hybrid sharding: shard groups of N dp ranks (0: all)
  bool sp = false, json = false;
  double dp_overlap = -1, bucket_mb = 25;  // dp_overlap < 0: estimated from the schedule; bucket_mb as run's
  bool distributed_optimizer = false, allow_tp_across_nodes = false;
  std::string batch;
  std::vector<std::string> profiles;
};

namespace {

// The most a count may be, by kind: products of them (tp x pp x cp, mbs x dp) stay far inside
// int64, so a huge value is refused naming its flag instead of wrapping around.
constexpr int64_t kMostDegree = int64_t(1) << 20;  // nodes, gpus, tp, pp, cp, ep, virtual stages, lanes
constexpr int64_t kMostSize = int64_t(1) << 40;    // mbs, seq
constexpr int64_t kMostBatch = int64_t(1) << 50;   // gbs

// What is wrong with `n` as a count of at most `most` ("" when nothing).
std::string countProblem(const std::string& n, bool whole, long long value, int64_t most) {
  if (!whole || value < 1) return "must be a whole number of at least 1, not " + n;
  if (value > most)
    return "must be at most 2^" + std::to_string(int(std::log2(double(most)))) + " (" + std::to_string(most) + "), not " + n;
  return "";
}

// A count of at most `most` (CLI11's PositiveNumber prints the range up to DBL_MAX).
CLI::Validator countOf(int64_t most) {
  return CLI::Validator(
      [most](std::string& v) -> std::string {
        long long n = 0;
        bool whole = false;
        try {
          size_t used = 0;
          n = std::stoll(v, &used);
          whole = used == v.size();
        } catch (const std::out_of_range&) {
          return countProblem(v, true, v[0] == '-' ? -1 : LLONG_MAX, most);
        } catch (const std::exception&) {
        }
        return countProblem(v, whole, n, most);
      },
      "INT>=1");
}
const CLI::Validator kDegree = countOf(kMostDegree), kSize = countOf(kMostSize), kBatch = countOf(kMostBatch);

// A share from 0 to 1 (CLI::Range lets NaN through: every comparison with it is false).
const CLI::Validator kShare(
    [](std::string& v) -> std::string {
      try {
        size_t used = 0;
        const double x = std::stod(v, &used);
        if (used == v.size() && std::isfinite(x) && x >= 0 && x <= 1) return "";
      } catch (const std::exception&) {
      }
      return "must be a number from 0 to 1, not " + v;
    },
    "0..1");

}  // namespace

CLI::App* addPredictCommand(CLI::App& app, PredictFlags*& f) {
  f = new PredictFlags();  // lives as long as the process
  CLI::App* c = app.add_subcommand("predict", "predict memory per rank and step time of one configuration (runs nothing)");
  c->add_option("--workload", f->workload, "workload name or JSON path")->capture_default_str();
  c->add_option("--cluster", f->cluster, "cluster preset or JSON file")->capture_default_str();
  // Counts are positive: 0 or a negative value is an error naming the flag (exit 2), never a default.
  c->add_option("--nodes", f->nodes, "nodes (default: the cluster file's)")->check(kDegree);
  c->add_option("--gpus", f->gpus, "devices in all (default: nodes x devices per node)")->check(kDegree);
  c->add_option("--tp", f->tp)->capture_default_str()->check(kDegree);
  c->add_option("--pp", f->pp)->capture_default_str()->check(kDegree);
  c->add_option("--cp", f->cp, "context-parallel degree: each sequence split over cp ranks (ring attention)")
      ->capture_default_str()
      ->check(kDegree);
  c->add_option("--ep", f->ep, "expert-parallel degree: a MoE workload's experts split over ep of the dp ranks")
      ->capture_default_str()
      ->check(kDegree);
  c->add_option("--mbs", f->mbs)->capture_default_str()->check(kSize);
  c->add_option("--gbs", f->gbs, "global batch in sequences (default: mbs x dp)")->check(kBatch);
  c->add_option("--seq", f->seq, "sequence length (default: the workload's n_positions, at most 2048)")
      ->check(kSize);
  c->add_option("--ckpt", f->ckpt, "none|selective|full")->capture_default_str();
  c->add_option("--precision", f->precision, "fp32|bf16|fp16")->capture_default_str();
  c->add_option("--optimizer", f->optimizer, "adamw|adafactor|adam8bit|sgd")->capture_default_str();
  c->add_option("--zero", f->zero,
                 "ZeRO stage 0|1|2|3 (2 and 3 are priced as DeepSpeed shards them)")
      ->capture_default_str()
      ->check(CLI::IsMember({"0", "1", "2", "3"}));
  c->add_option("--zero-shard-size", f->zero_shard,
                "ZeRO-3 hybrid sharding: shard within groups of N dp ranks, replicate across (0: all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  c->add_flag("--sequence-parallel", f->sp);
  c->add_option("--pp-schedule", f->schedule, "gpipe|1f1b|interleaved")->capture_default_str();
  c->add_option("--virtual-stages", f->virtual_stages, "interleaved: model chunks per stage")
      ->capture_default_str()
      ->check(kDegree);
  c->add_option("--cpu-lanes", f->cpu_lanes, "CPU clusters: core lanes per rank")->capture_default_str()->check(kDegree);
  c->add_option("--bucket-mb", f->bucket_mb, "gradient buckets, MiB of fp32, as run's")->capture_default_str();
  c->add_option("--dp-overlap", f->dp_overlap,
                 "share of the DP all-reduce hidden behind backward, 0 to 1 (default: estimated from the schedule)")
      ->check(kShare);
  c->add_option("--profile", f->profiles,
                "traced run databases (trainscope run --trace) of this cluster: the step time is composed from "
                "their measured layer costs when one has this plan's layer shape")
      ->delimiter(',');
  c->add_option("--framework", f->framework,
                 "whose kernels and memory: trainscope (this runtime) or megatron (Megatron-LM as the published runs "
                 "used it: unfused attention, 18 bytes per parameter)")
      ->capture_default_str()
      ->check(CLI::IsMember({"trainscope", "megatron"}));
  c->add_option("--attention", f->attention,
                 "GPU clusters: how attention runs — default (the framework's: megatron unfused, trainscope flash), "
                 "unfused (s×s scores materialised) or flash (one fused kernel); the time only")
      ->capture_default_str()
      ->check(CLI::IsMember({"default", "unfused", "flash"}));
  c->add_flag("--use-distributed-optimizer", f->distributed_optimizer,
              "--framework megatron: the optimizer state sharded over DP (6 + 12/dp bytes per parameter)");
  c->add_flag("--allow-tp-across-nodes", f->allow_tp_across_nodes,
              "accept a TP group larger than a node (priced on the inter-node tier)");
  c->add_option("--batch", f->batch,
                "JSON-lines file: one configuration per line (predict's flags as keys, _ for -); one JSON result per "
                "line; the other flags are each line's defaults");
  c->add_flag("--json", f->json, "one JSON object, bytes and seconds");
  return c;
}

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
  int64_t megatronParamsOpt(int64_t stage) const {
    return tn::megatronLayersParamsOpt(w, p, stage, megatron_bytes_per_param);
  }
  int64_t megatronEmbeddingOpt() const { return tn::megatronEmbeddingParamsOpt(w, p, megatron_bytes_per_param); }
};

// Loaded files, kept across the lines of a batch (a 1,500-line batch names a few of each).
struct Loaded {
  std::map<std::string, workloads::Workload> workloads;
  std::map<std::pair<std::string, int64_t>, tn::Cluster> clusters;
  const workloads::Workload& workload(const std::string& name) {
    auto it = workloads.find(name);
    return it != workloads.end() ? it->second : workloads.emplace(name, workloads::load(name)).first->second;
  }
  const tn::Cluster& cluster(const std::string& name, int64_t nodes) {
    auto it = clusters.find({name, nodes});
    return it != clusters.end() ? it->second : clusters.emplace(std::make_pair(name, nodes), tn::loadCluster(name, nodes)).first->second;
  }
};

// The devices priced: --gpus, or every one of the cluster's; more than it has are refused.
int64_t devicesOf(const PredictFlags& f, const tn::Cluster& c) {
  const int64_t devices = f.gpus > 0 ? f.gpus : c.devices();
  if (devices > c.devices()) {
    // Rounded up without overflow (devices + per_node - 1 wrapped for 2^63 - 1).
    const int64_t nodes = devices / c.devices_per_node + (devices % c.devices_per_node != 0);
    throw UserError("--gpus", std::to_string(devices) + " devices, but " + c.name + " has " + std::to_string(c.nodes) +
                                  " node(s) of " + std::to_string(c.devices_per_node) + " (" +
                                  std::to_string(c.devices()) + " devices)",
                    nodes <= tn::kMostClusterDevices / c.devices_per_node
                        ? "pass --nodes " + std::to_string(nodes) + " to price a larger cluster, or fewer --gpus"
                        : "pass fewer --gpus (the models price at most " + std::to_string(tn::kMostClusterDevices) +
                              " devices)");
  }
  return devices;
}

// CP × TP × PP must divide the devices, and a TP group stay inside a node unless --allow-tp-across-nodes.
void checkSplit(const PredictFlags& f, const tn::Cluster& c, int64_t devices) {
  if (f.tp < 1 || f.pp < 1 || f.cp < 1 || devices % (f.tp * f.pp * f.cp) != 0)
    throw UserError(f.cp > 1 ? "--tp/--pp/--cp" : "--tp/--pp",
                    std::to_string(devices) + " devices cannot be split into tp=" + std::to_string(f.tp) +
                        " x pp=" + std::to_string(f.pp) + (f.cp > 1 ? " x cp=" + std::to_string(f.cp) : ""),
                    f.cp > 1 ? "use a cp x tp x pp that divides the device count"
                             : "use a tp x pp that divides the device count");
  if (f.tp > c.devices_per_node && !f.allow_tp_across_nodes)
    throw UserError("--tp", "tp=" + std::to_string(f.tp) + " spans nodes of " + std::to_string(c.devices_per_node) +
                                " devices: its per-layer collectives would cross the inter-node network",
                    "use tp <= " + std::to_string(c.devices_per_node) +
                        ", or pass --allow-tp-across-nodes to price it on the inter-node tier");
}

// The plan the flags describe on `devices` devices (DP takes what TP × PP leave).
tn::Plan planFromFlags(const PredictFlags& f, const workloads::Workload& w, const tn::Cluster& c, int64_t devices) {
  checkSplit(f, c, devices);
  tn::Plan p;
  p.tp = f.tp;
  p.pp = f.pp;
  p.cp = f.cp;
  p.dp = devices / (p.tp * p.pp * p.cp);
  p.ep = f.ep;  // whyInvalid names ep ∤ dp, ep ∤ n_experts, ep without experts
  p.mbs = f.mbs;
  p.gbs = f.gbs > 0 ? f.gbs : f.mbs * p.dp;
  p.seq = f.seq > 0 ? f.seq : std::min<int64_t>(w.n_positions, 2048);
  p.ckpt = rt::parseCheckpointing(f.ckpt);
  p.precision = rt::parsePrecision(f.precision);
  p.optimizer = rt::parseOptimizer(f.optimizer);
  p.zero = rt::zeroStage(f.zero);  // 0..3: the flag and the batch line refuse anything else
  p.zero_shard = f.zero_shard;     // whyInvalid names a shard group without ZeRO-3 or not dividing dp
  p.sequence_parallel = f.sp;
  if (f.schedule == "interleaved") {
    p.schedule = rt::PipelineSchedule::OneFOneB;
    p.virtual_stages = std::max<int64_t>(2, f.virtual_stages);
  } else {
    p.schedule = rt::parseSchedule(f.schedule);
    p.virtual_stages = f.virtual_stages;  // as `run --virtual-stages` (1f1b): interleaved when > 1
    if (p.virtual_stages > 1 && p.schedule == rt::PipelineSchedule::GPipe)
      throw UserError("--virtual-stages", "interleaving is a form of the 1f1b schedule, not of gpipe",
                      "pass --pp-schedule 1f1b, or --virtual-stages 1");
  }
  p.cpu_lanes = f.cpu_lanes;
  if (!(f.bucket_mb > 0) || !std::isfinite(f.bucket_mb))  // CLI11's PositiveNumber would print DBL_MAX
    throw UserError("--bucket-mb", "must be a positive number of MiB, not " + std::to_string(f.bucket_mb), "pass 25, run's default");
  p.bucket_mb = f.bucket_mb;
  p.cpu = c.kind == tn::ClusterKind::Cpu;
  return p;
}

// Refuses a plan the models cannot price: an invalid one, or one whose figures they cannot count.
void checkPriceable(const workloads::Workload& w, const tn::Plan& p, int64_t devices) {
  if (const std::string why = tn::whyInvalid(w, p); !why.empty())
    throw UserError("predict", "this configuration is not valid: " + why, "change the flag it names");
  // A stage holds up to pp micro-batches in flight: figures the models cannot count are refused,
  // never priced as a wrapped-around peak that "fits".
  if (!tn::figuresCountable(w, (long double)p.mbs * (long double)p.pp, p.seq, devices) &&
      tn::figuresCountable(w, (long double)p.mbs * (long double)p.pp, p.seq, 1))
    throw UserError("--nodes/--gpus", std::to_string(devices) + " devices of " + w.name +
                                          " hold more memory in all than the models can count (over 2^60 bytes)",
                    "price fewer devices");
  if (!tn::figuresCountable(w, (long double)p.mbs * (long double)p.pp, p.seq, devices))
    throw UserError("--mbs", "micro-batches of " + std::to_string(p.mbs) + " sequences of " + std::to_string(p.seq) +
                                 " tokens of " + w.name + " need more memory than the models can count (over 2^60 bytes)",
                    "pass a micro-batch a device could hold");
}

// The memory per stage; figures that overflow are refused.
tn::MemoryPrediction checkedMemory(const workloads::Workload& w, const tn::Plan& p) {
  tn::MemoryPrediction m = tn::predictMemory(w, p);
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
  if (framework == tn::Framework::Megatron && f.zero >= 2)
    throw UserError("--zero", "Megatron-LM has no ZeRO-" + std::to_string(f.zero) +
                                  ": its distributed optimizer shards the optimizer state only (ZeRO-1), and the FSDP "
                                  "of recent Megatron-core versions is not modelled",
                    "pass --use-distributed-optimizer for Megatron-LM's ZeRO-1, or --framework trainscope to price "
                    "ZeRO-" + std::to_string(f.zero));
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
    rundb::RunReader reader(path);
    const tn::Plan rp = profiledPlan(reader, path, w);
    costs.add(tn::shapeKey(rp, c), tn::costsFromRun(reader, w, rp));
  }
  return costs;
}

// The step time composed from the measured layer costs when a profiled run has this plan's layer
// shape; otherwise a note, and the analytic model's stays.
void useMeasuredTime(Outcome& o, const PredictFlags& f) {
  if (o.p.zero >= rt::ZeroStage::Gradients) {  // profiles are composed for stages 0 and 1 only
    std::fprintf(stderr, "note: measured layer costs are not composed for ZeRO-%d; the step time is the "
                         "analytic model's\n", f.zero);
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

Outcome evaluate(const PredictFlags& f, Loaded& loaded) {
  Outcome o;
  o.framework = checkedFramework(f);
  o.w = loaded.workload(f.workload);
  o.c = loaded.cluster(f.cluster, f.nodes);
  o.devices = devicesOf(f, o.c);
  o.p = planFromFlags(f, o.w, o.c, o.devices);
  checkPriceable(o.w, o.p, o.devices);
  o.m = checkedMemory(o.w, o.p);
  o.attention = tn::parseAttention(f.attention);
  o.t = tn::predictTime(o.w, o.p, o.c, {f.dp_overlap, o.framework, o.attention});
  // Megatron-LM's parameters and optimizer state per stage (its theoretical_memory_usage and the
  // distributed-optimizer docs): 16-bit weights, fp32 main gradients, fp32 master weights and Adam
  // moments = 18 bytes per parameter, or 6 + 12/dp with the distributed optimizer. Layers only, as
  // Korthikanti et al.'s Figure 1 counts them; the stage's embedding or head shard beside it.
  o.megatron_bytes_per_param = tn::megatronBytesPerParam(o.p, f.distributed_optimizer);
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
  const auto& [w, c, p, devices, m, t, framework, attention, time_source, bpp] = o;
  (void)devices, (void)bpp;
  const bool fits = m.peak() <= c.memory_bytes;
  nlohmann::json j = {{"workload", w.name}, {"cluster", c.name}, {"plan", p.describe()},
                      {"dp", p.dp}, {"cp", p.cp}, {"ep", p.ep}, {"tp", p.tp}, {"pp", p.pp}, {"mbs", p.mbs}, {"gbs", p.gbs}, {"ga", p.ga()},
                      {"seq", p.seq}, {"zero", rt::stageNumber(p.zero)}, {"zero_stage", zeroName(p)},
                      {"zero_shard_size", p.zero_shard},
                      {"memory_limit_bytes", c.memory_bytes}, {"peak_bytes", m.peak()},
                      {"worst_stage", m.worst_stage}, {"fits", fits}};
  for (const auto& s : m.stages)
    j["stages"].push_back({{"stage", s.stage}, {"layers", s.layers}, {"params_bytes", s.params},
                           {"grads_bytes", s.grads}, {"optimizer_bytes", s.optimizer},
                           {"activations_bytes", s.activations}, {"head_bytes", s.head},
                           {"buffers_bytes", s.buffers}, {"head_chunk_bytes", s.head_chunk},
                           {"recompute_bytes", s.recompute}, {"allowance_bytes", s.allowance},
                           {"transient_bytes", s.transient()},
                           {"lane_grads_bytes", s.lane_grads}, {"lane_fresh_bytes", s.lane_fresh},
                           {"sync_bytes", s.sync}, {"grad_bucket_bytes", s.grad_bucket},
                           {"gathered_bytes", s.gathered}, {"expert_grads_bytes", s.expert_grads},
                           {"moe_freed_bytes", s.moe_freed}, {"peak_in", s.peakPhase()},
                           {"total_bytes", s.total()}, {"microbatches_in_flight", s.inflight},
                           {"megatron_activations_bytes", s.megatron_activations},
                           {"megatron_params_opt_bytes", o.megatronParamsOpt(s.stage)},
                           {"megatron_embedding_opt_bytes", s.stage == 0 || s.stage == p.pp - 1 ? o.megatronEmbeddingOpt() : 0}});
  j["time"] = {{"compute_s", t.compute_s}, {"recompute_s", t.recompute_s}, {"tp_comm_s", t.tp_comm_s},
               {"dp_comm_s", t.dp_comm_s}, {"zero_gather_s", t.zero_gather_s}, {"pp_comm_s", t.pp_comm_s},
               {"cp_comm_s", t.cp_comm_s}, {"ep_comm_s", t.ep_comm_s}, {"bubble_s", t.bubble_s},
               {"optimizer_s", t.optimizer_s}, {"other_s", t.other_s}, {"step_s", t.step_s}};
  j["time_source"] = time_source;
  j["framework"] = tn::frameworkName(framework);
  j["attention"] = tn::attentionName(o.attention);
  j["time"]["bound"] = t.bound;
  j["tokens_per_s"] = t.tokens_per_s;
  j["mfu"] = t.mfu;
  return j;
}

void printText(const Outcome& o) {
  const auto& [w, c, p, devices, m, t, framework, attention, time_source, bpp] = o;
  const bool fits = m.peak() <= c.memory_bytes;

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
    const bool holds = std::string(s.peakPhase()) == "backward" || std::string(s.peakPhase()) == "head fwd";
    // A MoE's experts' backward holds the activations less what later layers freed, and no head.
    const bool moe = std::string(s.peakPhase()) == "moe bwd";
    const int64_t activ = holds ? s.activations : moe ? s.activations - s.moe_freed : 0, head = holds ? s.head : 0;
    std::snprintf(line, sizeof(line), "%5lld %6lld %7.2f %7.2f %7.2f %8.2f | %7.2f %7.2f %10.2f  %-8s | %8.2f%s | %9.2f\n",
                  static_cast<long long>(s.stage), static_cast<long long>(s.layers), gib(s.params), gib(s.grads),
                  gib(s.optimizer), gib(s.buffers), gib(activ), gib(head), gib(s.transient() - activ - head),
                  s.peakPhase(), gib(s.total()), s.stage == m.worst_stage ? "*" : " ", gib(s.megatron_activations));
    std::cout << line;
  }
  std::printf("%s: worst stage %lld needs %.2f GiB of %.2f\n", fits ? "fits" : "DOES NOT FIT",
              static_cast<long long>(m.worst_stage), gib(m.peak()), gib(c.memory_bytes));
  std::cout << zeroLine(p, m.stages[size_t(m.worst_stage)]);
  std::printf("\nstep time (%s) %.3f s = compute %.3f + recompute %.3f + TP comm %.3f + DP comm %.3f + PP comm %.3f"
              " + bubble %.3f + optimizer %.3f + other %.3f\n",
              time_source.c_str(), t.step_s, t.compute_s, t.recompute_s, t.tp_comm_s, t.dp_comm_s, t.pp_comm_s,
              t.bubble_s, t.optimizer_s, t.other_s);
  if (t.measured) std::printf("(measured layer times include their TP collectives)\n");
  if (t.zero_gather_s > 0) std::printf("(DP comm includes %.3f s of ZeRO-3 parameter all-gathers)\n", t.zero_gather_s);
  if (p.cp > 1)
    std::printf("(and CP ring %.3f s, the K/V exchange not hidden behind attention: in the step, not in the sum above)\n",
                t.cp_comm_s);
  if (w.isMoe())
    std::printf("(and EP all-to-all %.3f s; %lld experts over ep=%lld, %.4g total / %.4g active parameters; MFU on "
                "active FLOPs)\n",
                t.ep_comm_s, static_cast<long long>(w.n_experts), static_cast<long long>(p.ep),
                double(w.parameterCount()), double(w.activeParameterCount()));
  if (!t.bound.empty())
    std::printf("kernels of %s%s; each micro-batch bound by the %s\n", tn::frameworkName(framework),
                attention == tn::Attention::Default ? "" : attention == tn::Attention::Flash ? ", flash attention"
                                                                                             : ", unfused attention",
                t.bound.c_str());
  if (framework == tn::Framework::Megatron)
    std::printf("Megatron-LM parameters + optimizer (%.4g bytes/parameter): stage 0 %.2f GiB in its layers\n",
                bpp, gib(o.megatronParamsOpt(0)));
  std::printf("throughput %.0f tokens/s, MFU %.1f%%\n", t.tokens_per_s, t.mfu * 100);
}


// A batch line's flags: `defaults` with the line's keys set; the same checks as the command line's.
PredictFlags flagsFromJson(const std::string& text, const PredictFlags& defaults, int64_t line) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  const std::string where = "--batch line " + std::to_string(line);
  if (!j.is_object()) throw UserError(where, "is not a JSON object", "one object of predict's flags per line");
  PredictFlags f = defaults;
  f.batch.clear();
  auto text_of = [&](const std::string& k, const nlohmann::json& v) {
    if (!v.is_string()) throw UserError(where + ": " + k, "must be a string", "");
    return v.get<std::string>();
  };
  auto count = [&](const std::string& k, const nlohmann::json& v) {
    const int64_t most = k == "gbs" ? kMostBatch : k == "mbs" || k == "seq" ? kMostSize : kMostDegree;
    // An unsigned past int64 would read back wrapped: it is past `most`, and said so.
    const bool whole = v.is_number_integer();
    const long long n = !whole ? 0 : v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(LLONG_MAX) ? LLONG_MAX
                                                                                                      : v.get<int64_t>();
    if (const std::string why = countProblem(jsonText(v), whole, n, most); !why.empty())
      throw UserError(where + ": " + k, why, "");
    return int64_t(n);
  };
  auto flag = [&](const std::string& k, const nlohmann::json& v) {
    if (!v.is_boolean()) throw UserError(where + ": " + k, "must be true or false", "");
    return v.get<bool>();
  };
  for (const auto& [k, v] : j.items()) {
    if (k == "workload") f.workload = text_of(k, v);
    else if (k == "cluster") f.cluster = text_of(k, v);
    else if (k == "ckpt") f.ckpt = text_of(k, v);
    else if (k == "precision") f.precision = text_of(k, v);
    else if (k == "optimizer") f.optimizer = text_of(k, v);
    else if (k == "pp_schedule") f.schedule = text_of(k, v);
    else if (k == "framework") f.framework = text_of(k, v);
    else if (k == "attention") f.attention = text_of(k, v);
    else if (k == "nodes") f.nodes = count(k, v);
    else if (k == "gpus") f.gpus = count(k, v);
    else if (k == "tp") f.tp = count(k, v);
    else if (k == "pp") f.pp = count(k, v);
    else if (k == "cp") f.cp = count(k, v);
    else if (k == "mbs") f.mbs = count(k, v);
    else if (k == "gbs") f.gbs = count(k, v);
    else if (k == "seq") f.seq = count(k, v);
    else if (k == "virtual_stages") f.virtual_stages = count(k, v);
    else if (k == "zero_shard_size") f.zero_shard = v.is_number_integer() && v.get<int64_t>() == 0 ? 0 : count(k, v);
    else if (k == "cpu_lanes") f.cpu_lanes = count(k, v);
    else if (k == "sequence_parallel") f.sp = flag(k, v);
    else if (k == "use_distributed_optimizer") f.distributed_optimizer = flag(k, v);
    else if (k == "allow_tp_across_nodes") f.allow_tp_across_nodes = flag(k, v);
    else if (k == "zero") {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 3)
        throw UserError(where + ": zero", "must be 0, 1, 2 or 3, not " + jsonText(v), "");
      f.zero = v.get<int>();
    } else if (k == "dp_overlap" || k == "bucket_mb") {  // a share 0 to 1; MiB above 0
      const bool share = k == "dp_overlap", bad = !v.is_number() || !std::isfinite(v.get<double>());
      if (bad || (share ? v.get<double>() < 0 || v.get<double>() > 1 : !(v.get<double>() > 0)))
        throw UserError(where + ": " + k, std::string(share ? "must be a number from 0 to 1" : "must be a positive number") + ", not " + jsonText(v), "");
      (share ? f.dp_overlap : f.bucket_mb) = v.get<double>();
    } else {
      throw UserError(where + ": " + k, "is not a flag of predict",
                      "use workload, cluster, nodes, gpus, tp, pp, cp, mbs, gbs, seq, ckpt, precision, optimizer, zero, "
                      "sequence_parallel, pp_schedule, virtual_stages, cpu_lanes, dp_overlap, framework, "
                      "use_distributed_optimizer, allow_tp_across_nodes");
    }
  }
  if (f.framework != "trainscope" && f.framework != "megatron")
    throw UserError(where + ": framework", "must be trainscope or megatron, not \"" + f.framework + "\"", "");
  return f;
}

// --batch: one configuration per line (a JSON object of predict's flags, underscores for dashes);
// the command line's flags are every line's defaults. One JSON result per line, in order; a line
// that fails gives {"line": N, "error": "..."} and the exit status is 2.
int runBatch(const PredictFlags& defaults) {
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
      out = toJson(evaluate(f, loaded));
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
  if (failed) std::fprintf(stderr, "predict --batch: %lld of %lld line(s) failed (their error is on their line)\n",
                           static_cast<long long>(failed), static_cast<long long>(n));
  return failed ? 2 : 0;
}

}  // namespace

int runPredict(const PredictFlags& f) {
  if (!f.batch.empty()) return runBatch(f);
  Loaded loaded;
  const Outcome o = evaluate(f, loaded);
  if (f.json) std::cout << jsonText(toJson(o)) << "\n";
  else printText(o);
  return 0;
}

}  // namespace trainscope::apps
