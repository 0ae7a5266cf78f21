// predict_plan.cpp — see predict_plan.h.
#include "predict_plan.h"

#include <algorithm>
#include <string>

#include "trainscope/common/error.h"
#include "trainscope/runconfig/config.h"

namespace trainscope::apps {

namespace rt = trainscope::runconfig;
namespace tn = trainscope::tuner;

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

namespace {

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

}  // namespace

// The plan the flags describe on `devices` devices (DP takes what TP × PP leave).
tn::Plan planFromFlags(const PredictFlags& f, const workloads::Workload& w, const tn::Cluster& c, int64_t devices) {
  checkSplit(f, c, devices);
  tn::Plan p;
  static_cast<rt::Parallelism&>(p) = f;  // the layout as the flags give it ("interleaved": 1f1b, v >= 2)
  p.dp = devices / (p.tp * p.pp * p.cp);  // whyInvalid names ep ∤ dp, a shard group not dividing dp, …
  p.mbs = f.mbs;
  p.gbs = f.gbs > 0 ? f.gbs : f.mbs * p.dp;
  p.seq = f.seq > 0 ? f.seq : std::min<int64_t>(w.n_positions, 2048);
  p.ckpt = rt::parseCheckpointing(f.ckpt);
  p.precision = rt::parsePrecision(f.precision);
  p.optimizer = rt::parseOptimizer(f.optimizer);
  if (p.virtual_stages > 1 && p.pp_schedule == rt::PipelineSchedule::GPipe)
    throw UserError("--virtual-stages", "interleaving is a form of the 1f1b schedule, not of gpipe",
                    "pass --pp-schedule 1f1b, or --virtual-stages 1");
  if (f.cpu_lanes != 1 && c.kind != tn::ClusterKind::Cpu)
    throw UserError("--cpu-lanes", "sets a CPU cluster's core lanes per rank; " + c.name + " is a GPU cluster (" +
                                       std::to_string(f.cpu_lanes) + " would be ignored)",
                    "leave --cpu-lanes out, or pass a CPU cluster file");
  p.cpu_lanes = f.cpu_lanes;
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

}  // namespace trainscope::apps
