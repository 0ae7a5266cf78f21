// space.cpp — see space.h.
#include "trainscope/tuner/space.h"

#include <algorithm>
#include <cmath>

namespace trainscope::tuner {
namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

}  // namespace

std::vector<Candidate> enumerateSpace(const workloads::Workload& w, const Cluster& c, const SpaceOptions& o) {
  using runtime::Checkpointing;
  using runtime::PipelineSchedule;
  std::vector<runtime::Precision> precisions = o.precisions;
  const bool cpu = c.kind == ClusterKind::Cpu;
  if (precisions.empty()) precisions = {cpu ? runtime::Precision::FP32 : runtime::Precision::BF16};
  const int64_t seq = o.seq > 0 ? o.seq : std::min<int64_t>(w.n_positions, 1024);
  // CPU clusters: every world that divides the ranks; GPU clusters: every device.
  std::vector<int64_t> worlds = cpu ? divisors(c.devices()) : std::vector<int64_t>{c.devices()};
  if (!o.worlds.empty()) worlds = o.worlds;
  std::vector<Candidate> all;
  for (int64_t world : worlds)
    for (int64_t tp : divisors(std::min(world, c.devices_per_node)))
      for (int64_t pp : divisors(world / tp)) {
        if (world % (tp * pp) != 0) continue;
        const int64_t dp = world / (tp * pp);
        for (int64_t mbs : o.mbs)
          for (Checkpointing ck : o.ckpt)
            for (runtime::Precision prec : precisions)
              for (runtime::ZeroStage zero : o.zero)
                for (bool sp : o.sequence_parallel)
                  for (PipelineSchedule sched : o.schedules) {
                    // Knobs that do nothing for this layout are not separate candidates.
                    if ((runtime::shardsOptimizer(zero) && dp == 1) || (sp && tp == 1) ||
                        (sched == PipelineSchedule::GPipe && pp == 1))
                      continue;
                    Candidate cand;
                    cand.plan.dp = dp;
                    cand.plan.tp = tp;
                    cand.plan.pp = pp;
                    cand.plan.mbs = mbs;
                    cand.plan.gbs = o.gbs;
                    cand.plan.seq = seq;
                    cand.plan.ckpt = ck;
                    cand.plan.precision = prec;
                    cand.plan.zero = zero;
                    cand.plan.sequence_parallel = sp;
                    cand.plan.schedule = sched;
                    cand.plan.cpu = cpu;
                    // The core lanes the runtime will pick (auto): one per core of the rank, at most mbs,
                    // for a one-process fp32 CPU run; each keeps its own gradients.
                    if (cpu && world == 1 && prec == runtime::Precision::FP32)
                      cand.plan.cpu_lanes = std::min<int64_t>(c.devices_per_node, mbs);
                    cand.rejected = whyInvalid(w, cand.plan);
                    if (cand.rejected.empty()) {
                      const MemoryPrediction m = predictMemory(w, cand.plan);
                      const TimePrediction t = predictTime(w, cand.plan, c);
                      cand.predicted_peak = m.peak();
                      cand.predicted_step_s = t.step_s;
                      cand.predicted_tokens_per_s = t.tokens_per_s;
                      if (double(m.peak()) * (1.0 - o.memory_margin) > double(c.memory_bytes)) {
                        char why[160];
                        std::snprintf(why, sizeof(why), "predicted memory %.1f MiB over the limit %.1f MiB (stage %lld)",
                                      double(m.peak()) / 1048576.0, double(c.memory_bytes) / 1048576.0,
                                      static_cast<long long>(m.worst_stage));
                        cand.rejected = why;
                      }
                    }
                    all.push_back(cand);
                  }
      }
  std::stable_sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    if (a.rejected.empty() != b.rejected.empty()) return a.rejected.empty();
    return a.rejected.empty() && a.predicted_step_s < b.predicted_step_s;
  });
  for (size_t i = 0; i < all.size(); ++i) all[i].id = int64_t(i);
  return all;
}

}  // namespace trainscope::tuner
