// space.cpp — see space.h.
#include "trainscope/tuner/space.h"

#include <algorithm>
#include <cmath>

#include "trainscope/common/error.h"
#include "trainscope/models/framework_memory.h"

namespace trainscope::tuner {
namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

// The layouts of one world: TP within a node, CP and PP among what TP leaves, DP the rest.
struct Layout {
  int64_t dp, cp, tp, pp;
};

std::vector<Layout> layoutsOf(int64_t world, const Cluster& c, const SpaceOptions& o) {
  std::vector<Layout> out;
  for (int64_t tp : divisors(std::min(world, c.devices_per_node)))
    for (int64_t pp : divisors(world / tp))
      for (int64_t cp : o.cp) {
        if (cp < 1 || world % (tp * pp * cp) != 0) continue;
        out.push_back({world / (tp * pp * cp), cp, tp, pp});
      }
  return out;
}

// Knobs that do nothing for this layout are not separate candidates: ZeRO without DP, SP without
// TP, a pipeline schedule or interleaving without PP; interleaving is its own 1F1B schedule.
bool idleKnob(const Layout& l, runconfig::ZeroStage zero, bool sp, runconfig::PipelineSchedule sched, int64_t v) {
  return (runconfig::shardsOptimizer(zero) && l.dp == 1) || (sp && l.tp == 1) ||
         (sched == runconfig::PipelineSchedule::GPipe && (l.pp == 1 || v > 1)) || (v > 1 && l.pp == 1);
}

// ZeRO-3's shard-group sizes to try (Plan::zero_shard_size): 0 (every DP rank), and hybrid sharding's
// groups of N for every proper divisor N ≥ 2 of dp; the runtime's resolve() refuses the rest.
std::vector<int64_t> zeroShards(const Layout& l, runconfig::ZeroStage zero) {
  std::vector<int64_t> out = {0};
  if (zero != runconfig::ZeroStage::Parameters) return out;
  for (int64_t n : divisors(l.dp))
    if (n >= 2 && n < l.dp) out.push_back(n);
  return out;
}

// Expert-parallel degrees to try: 1, and for a mixture of experts every divisor of the layout's dp
// that divides n_experts (ep ranks are DP ranks holding E/ep experts each). What else the runtime
// refuses with ep (ZeRO-3, and for any MoE CP or SP) is enumerated and rejected with its reason.
std::vector<int64_t> epValues(const workloads::Workload& w, const Layout& l) {
  if (!w.isMoe()) return {1};
  std::vector<int64_t> out;
  for (int64_t e : divisors(l.dp))
    if (w.n_experts % e == 0) out.push_back(e);
  return out;
}

// Grouped-query attention under TP (the contract of issue 32, as megatron-core's attention does it):
// each rank takes n_head/tp query heads; the KV K/V heads split KV/tp per rank when tp divides KV,
// and when tp is a multiple of KV each rank holds the one K/V head its query heads use (replicated
// tp/KV times). Any other tp would split a query group across ranks: not a candidate's layout.
std::string tpSplitRefusal(const workloads::Workload& w, int64_t tp) {
  if (w.n_head % tp != 0)
    return "tp=" + std::to_string(tp) + " does not divide n_head=" + std::to_string(w.n_head);
  const int64_t kv = w.kvHeads();
  if (kv % tp != 0 && tp % kv != 0)
    return "tp=" + std::to_string(tp) + " neither divides n_kv_head=" + std::to_string(kv) +
           " nor is a multiple of it (grouped-query attention splits the K/V heads over TP or replicates them)";
  return "";
}

// Why the candidate is out (""): the plan's own inconsistency, what the runtime refuses to run, or
// the memory model's verdict; valid ones carry the models' predictions.
void price(Candidate& cand, const workloads::Workload& w, const Cluster& c, const SpaceOptions& o) {
  cand.rejected = tpSplitRefusal(w, cand.plan.tp);
  if (cand.rejected.empty()) cand.rejected = whyInvalid(w, cand.plan);
  if (cand.rejected.empty()) cand.rejected = runtimeRefusal(w, cand.plan);
  if (cand.rejected.empty()) {
    const FrameworkRefusal r = frameworkRefusal(o.framework, cand.plan, w);
    if (!r.why.empty()) cand.rejected = std::string(frameworkKey(o.framework)) + " refuses it: " + r.flag + ": " + r.why;
  }
  if (!cand.rejected.empty()) return;
  const MemoryPrediction m = predictMemory(w, cand.plan);
  const TimePrediction t = predictTime(w, cand.plan, c, exportedJobOptions(o.framework, cand.plan));
  // An FSDP, DeepSpeed or Megatron-LM job on GPUs is judged by that framework's own peak (frameworkPeak:
  // its model states and buffers, the op list's activations; Megatron-LM's theoretical memory), as its
  // trial will reach it; else the runtime's.
  const int64_t framework_peak = frameworkPeak(w, cand.plan, c, o.framework, m);
  cand.predicted_peak = framework_peak > 0 ? framework_peak : m.peak();
  cand.predicted_step_s = t.step_s;
  cand.predicted_tokens_per_s = t.tokens_per_s;
  cand.analytic_step_s = t.step_s;
  if (double(cand.predicted_peak) * (1.0 - o.memory_margin) > double(c.memory_bytes)) {
    char why[192];
    if (framework_peak > 0)
      std::snprintf(why, sizeof(why), "predicted %s memory %.1f MiB over the limit %.1f MiB",
                    frameworkKey(o.framework), double(framework_peak) / 1048576.0, double(c.memory_bytes) / 1048576.0);
    else
      std::snprintf(why, sizeof(why), "predicted memory %.1f MiB over the limit %.1f MiB (stage %lld)",
                    double(m.peak()) / 1048576.0, double(c.memory_bytes) / 1048576.0,
                    static_cast<long long>(m.worst_stage));
    cand.rejected = why;
  }
}

}  // namespace

runconfig::TrainConfig runConfigOf(const workloads::Workload& w, const Plan& p) {
  runconfig::TrainConfig c;
  static_cast<runconfig::Parallelism&>(c) = p;  // the layout, whole (resolve() derives dp again)
  c.workload = w.source.empty() ? w.name : w.source;
  c.model = w;
  c.seq = p.seq;
  c.mbs = p.mbs;
  c.gbs = p.gbs;
  c.ckpt = p.ckpt;
  c.precision = p.precision;
  c.optimizer = p.optimizer;
  c.nproc = int(p.world());
  c.cpu_lanes = int(p.cpu_lanes);
  c.bucket_mb = p.bucket_mb;
  return c;
}

std::string runtimeRefusal(const workloads::Workload& w, const Plan& p) {
  runconfig::TrainConfig c = runConfigOf(w, p);
  c.oversubscribe = true;  // the cluster's ranks, not this host's cores: the launcher checks those
  try {
    runconfig::resolveLoaded(c);  // w as given (an inline workload has no file to read again)
  } catch (const UserError& e) {
    return std::string("the runtime refuses it: ") + e.what();
  }
  return "";
}

// deepspeed 0.19.8 runtime/pipe/engine.py: PipelineEngine.__init__ asserts zero_optimization_stage() <
// gradients ("ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"), and _train_schedule is
// always schedule.TrainSchedule (1F1B over the stages, one model chunk each): no interleaving.
FrameworkRefusal frameworkRefusal(Framework f, const Plan& p) {
  if (f != Framework::Deepspeed) return {};
  const std::string pp = std::to_string(p.pp);
  if (p.virtual_stages > 1)
    return {"--virtual-stages",
            std::to_string(p.virtual_stages) + " model chunks per stage (the interleaved schedule): DeepSpeed's "
            "PipelineEngine has no interleaved schedule (it runs TrainSchedule, 1F1B with one chunk per stage)",
            "drop --virtual-stages and --pp-schedule interleaved (DeepSpeed runs 1F1B on the " + pp +
                " stages), or price --framework megatron"};
  if (p.pp > 1 && p.pp_schedule == runconfig::PipelineSchedule::GPipe)
    return {"--pp-schedule",
            "gpipe: DeepSpeed's PipelineEngine runs TrainSchedule only (1F1B over the " + pp + " stages)",
            "pass --pp-schedule 1f1b (DeepSpeed's), or price GPipe as this runtime runs it (--framework trainscope)"};
  if (p.pp > 1 && p.zero >= runconfig::ZeroStage::Gradients)
    return {"--zero",
            "ZeRO-" + std::to_string(runconfig::stageNumber(p.zero)) + " with --pp " + pp + ": DeepSpeed's PipelineEngine "
            "asserts \"ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism\"",
            "pass --zero 1 (or 0) with --pp " + pp + ", or --pp 1 for ZeRO-" + std::to_string(runconfig::stageNumber(p.zero))};
  return {};
}

FrameworkRefusal megatronWindowCpRefusal(const Plan& p, const workloads::Workload& w) {
  if (w.sliding_window <= 0 || p.cp <= 1 || p.tp < 1) return {};
  const int64_t q = w.n_head / p.tp;
  const int64_t kv = w.kvHeads() % p.tp == 0 ? w.kvHeads() / p.tp : 1;  // fewer K/V heads than tp: one, replicated
  if (q % p.cp == 0 && kv % p.cp == 0) return {};
  std::string fits;
  for (int d = 2; d <= q && d <= kv; ++d)
    if (q % d == 0 && kv % d == 0) fits += (fits.empty() ? "" : ", ") + std::to_string(d);
  return {"--cp",
          std::to_string(p.cp) + " with a sliding window: Megatron-LM (Transformer Engine) applies the window under "
          "context parallelism only with the all-to-all exchange (--cp-comm-type a2a), which splits each TP rank's " +
              std::to_string(q) + " query and " + std::to_string(kv) + " K/V heads over the cp ranks, and cp " +
              std::to_string(p.cp) + " does not divide both",
          (fits.empty() ? std::string("pass --cp 1") : "pass --cp " + fits + " (dividing both), or --cp 1") +
              "; this runtime's ring exchange has no such bound (--framework trainscope)"};
}

FrameworkRefusal frameworkRefusal(Framework f, const Plan& p, const workloads::Workload& w) {
  FrameworkRefusal r = frameworkRefusal(f, p);
  if (r.why.empty() && f == Framework::Megatron) r = megatronWindowCpRefusal(p, w);
  return r;
}

std::vector<Candidate> enumerateSpace(const workloads::Workload& w, const Cluster& c, const SpaceOptions& o) {
  using runconfig::Checkpointing;
  using runconfig::PipelineSchedule;
  std::vector<runconfig::Precision> precisions = o.precisions;
  const bool cpu = c.kind == ClusterKind::Cpu;
  if (precisions.empty()) precisions = {cpu ? runconfig::Precision::FP32 : runconfig::Precision::BF16};
  for (runconfig::Precision prec : precisions)  // the GPU time model prices fp8 GEMMs at the fp8 peak
    if (prec == runconfig::Precision::FP8 && !cpu && !c.peak_flops.count("fp8"))
      throw UserError("--precision", "fp8 needs FP8 tensor cores, and cluster " + c.name +
                                         " gives no fp8 peak (A100 and older GPUs have none)",
                      "drop fp8 from --precision, or tune on a cluster with FP8 such as h100-80gb-x8 or h200-x8");
  const int64_t seq = o.seq > 0 ? o.seq : std::min<int64_t>(w.n_positions, 1024);
  // CPU clusters: every world that divides the ranks; GPU clusters: every device.
  std::vector<int64_t> worlds = cpu ? divisors(c.devices()) : std::vector<int64_t>{c.devices()};
  if (!o.worlds.empty()) worlds = o.worlds;
  std::vector<Candidate> all;
  for (int64_t world : worlds)
    for (const Layout& l : layoutsOf(world, c, o))
      for (int64_t ep : epValues(w, l))
      for (int64_t mbs : o.mbs)
        for (Checkpointing ck : o.ckpt)
          for (runconfig::Precision prec : precisions)
            for (runconfig::ZeroStage zero : o.zero)
              for (bool sp : o.sequence_parallel)
                for (PipelineSchedule sched : o.schedules)
                  for (int64_t v : o.virtual_stages)
                    for (int64_t shard : zeroShards(l, zero)) {
                    if (idleKnob(l, zero, sp, sched, v)) continue;
                    if (sched == PipelineSchedule::OneFOneB && v == 1 && !o.plain_one_f_one_b) continue;
                    Candidate cand;
                    Plan& p = cand.plan;
                    p.dp = l.dp, p.cp = l.cp, p.tp = l.tp, p.pp = l.pp, p.ep = ep;
                    p.mbs = mbs, p.gbs = o.gbs, p.seq = seq;
                    p.ckpt = ck, p.precision = prec, p.zero = zero, p.zero_shard_size = shard;
                    p.sequence_parallel = sp, p.pp_schedule = sched, p.virtual_stages = v;
                    p.cpu = cpu;
                    // The core lanes the runtime will pick (auto): one per core of the rank, at most mbs,
                    // for a one-process fp32 CPU run of a dense model; each keeps its own gradients.
                    if (cpu && world == 1 && prec == runconfig::Precision::FP32 && !w.isMoe())
                      p.cpu_lanes = std::min<int64_t>(c.devices_per_node, mbs);
                    price(cand, w, c, o);
                    all.push_back(cand);
                  }
  std::stable_sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    if (a.rejected.empty() != b.rejected.empty()) return a.rejected.empty();
    return a.rejected.empty() && a.predicted_step_s < b.predicted_step_s;
  });
  for (size_t i = 0; i < all.size(); ++i) all[i].id = int64_t(i);
  return all;
}

}  // namespace trainscope::tuner
