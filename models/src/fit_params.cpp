// fit_params.cpp — the fittable constants of a cluster file (fit_params.h).
#include "trainscope/models/fit_params.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/models/framework_profile.h"

namespace trainscope::models {

namespace {

// The most a GPU framework's host may spend issuing one op: twice the top of eager PyTorch's 5-50 us
// (C++ dispatch, autograd, Python; the a100 preset's dispatch_s note), so that a fit cannot absorb a
// missing device term into host time and turn a small model's step host-bound (a fit on MPT's 80 GB rows
// alone had put dispatch_s and frameworks.fsdp.host_op_s at 0.42 ms: GPT-2 1.5B then priced 6x slow).
constexpr double kGpuHostOpCeiling = 100e-6;

}  // namespace

const std::vector<FitParam>& fitParams() {
  static const std::vector<FitParam> list = [] {
    std::vector<FitParam> l = {
      // GPU clusters (docs/time-model.md): bounds are what the hardware allows, not what fits.
      {"dispatch_s", 0, 1e-3, "the framework's host time to issue one op (s; eager PyTorch issues one in 5-50 us)",
       [](Cluster& c) -> double& { return c.dispatch_s; }, false, "gpu", true, kGpuHostOpCeiling},
      {"kernel_floor_s", 0, 50e-6, "the least a kernel takes, launch to end (s)",
       [](Cluster& c) -> double& { return c.kernel_floor_s; }, false, "gpu", false},
      {"sustained_clock", 0.5, 1, "tensor-core clock under sustained load over the clock peak_flops assumes (scales every GEMM)",
       [](Cluster& c) -> double& { return c.sustained_clock; }, false, "gpu"},
      {"memory_efficiency", 0.3, 1, "achieved share of memory_bandwidth by streaming kernels",
       [](Cluster& c) -> double& { return c.memory_efficiency; }, false, "gpu"},
      {"fp8_matmul_ceiling", 0.2, 1, "the share of peak_flops.fp8 the best FP8 GEMM reaches",
       [](Cluster& c) -> double& { return c.fp8_matmul_ceiling; }, false, "gpu", false},
      {"intra_node.efficiency", 0.2, 1, "achieved share of the in-node bandwidth by large collectives",
       [](Cluster& c) -> double& { return c.intra_node.efficiency; }, false, "gpu"},
      {"intra_node.latency", 0, 1e-3, "in-node latency per collective step (s)",
       [](Cluster& c) -> double& { return c.intra_node.latency; }, false, "", false},
      {"intra_node.half_bytes", 0, 1e8, "in-node message size at half the large-message bus bandwidth (bytes)",
       [](Cluster& c) -> double& { return c.intra_node.half_bytes; }, false, "gpu", false},
      {"inter_node.efficiency", 0.2, 1, "achieved share of the between-node bandwidth by large collectives",
       [](Cluster& c) -> double& { return c.inter_node.efficiency; }, false, "gpu"},
      {"inter_node.latency", 0, 1e-3, "between-node latency per collective step (s)",
       [](Cluster& c) -> double& { return c.inter_node.latency; }, false, "gpu", false},
      {"inter_node.half_bytes", 0, 1e9, "between-node message size at half the large-message bus bandwidth (bytes)",
       [](Cluster& c) -> double& { return c.inter_node.half_bytes; }, false, "gpu", false},
      // CPU clusters: the rates `trainscope-train calibrate` measured, refitted to whole steps
      // (within a factor of 10 of the measured figure).
      {"peak_flops.fp32", 0.1, 10, "a CPU node's fp32 matrix rate (FLOP/s), relative to the file's",
       [](Cluster& c) -> double& { return c.peak_flops["fp32"]; }, true, "cpu"},
      {"memory_bandwidth", 0.1, 10, "a CPU node's memory bandwidth (bytes/s), relative to the file's",
       [](Cluster& c) -> double& { return c.memory_bandwidth; }, true, "cpu"},
      {"intra_node.bandwidth", 0.1, 10, "a CPU node's rank-to-rank bandwidth (bytes/s), relative to the file's",
       [](Cluster& c) -> double& { return c.intra_node.bandwidth; }, true, "cpu"},
    };
    // physics: framework profiles' and new terms' constants, one line each.
    l.push_back({"flash_forward_ceiling", 0, 1, "the share of FlashAttention-2's forward rate this GPU's best attention kernel reaches (0: FlashAttention-2's own)",
                 [](Cluster& c) -> double& { return c.flash_forward_ceiling; }, false, "gpu", false});
    l.push_back({"flash_backward_ceiling", 0, 1, "the same for the backward",
                 [](Cluster& c) -> double& { return c.flash_backward_ceiling; }, false, "gpu", false});
    // Each framework's constants ("frameworks.fsdp.hook_s"): by default the per-op and per-micro-batch
    // host costs, the attention rates and the slowdown of a layer under the ZeRO-3 collectives it
    // overlaps move (the rows of one framework move only its own; overlap_slowdown only rows of
    // sharded parameters over several ranks); the rest when --fit names them.
    // On either kind of cluster: a CPU tune of an external runner's job (Hugging Face, DeepSpeed)
    // prices that framework's host work (time_model.h, host_s) and refits it from the trials.
    for (const ProfilePath& q : profilePaths()) {
      const std::string key = q.path.substr(q.path.rfind('.') + 1);
      const bool by_default = key == "host_op_s" || key == "host_micro_batch_s" || key == "flash_forward_scale" ||
                              key == "flash_backward_scale" || key == "overlap_slowdown";
      const bool per_op = key == "host_op_s" || key == "host_backward_op_s";
      l.push_back({q.path, q.lower, q.upper, q.what,
                   [q](Cluster& c) -> double& { return c.mutableProfile(q.framework).*q.member; }, false, "",
                   by_default, per_op ? kGpuHostOpCeiling : 0.0});
    }
    return l;
  }();
  return list;
}

const FitParam& fitParam(const std::string& path, const std::string& field) {
  std::string known;
  for (const FitParam& p : fitParams()) {
    if (p.path == path) return p;
    known += (known.empty() ? "" : ", ") + p.path;
  }
  throw UserError(field, "\"" + path + "\" is not a constant calibrate can fit", "fit some of: " + known);
}

double getParam(const Cluster& c, const FitParam& p) { return p.ref(const_cast<Cluster&>(c)); }

void setParam(Cluster& c, const FitParam& p, double value) { p.ref(c) = value; }

std::string paramText(const Cluster& c, const FitParam& p) {
  const double v = getParam(c, p);
  char buf[64];
  const std::string key = p.path.substr(p.path.rfind('.') + 1);  // the whole path when it has no dot
  if (v < 0 && (key == "host_op_s" || key == "host_backward_op_s"))
    std::snprintf(buf, sizeof(buf), "unset: dispatch_s %.6g", c.dispatch_s);
  else
    std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

std::pair<double, double> boundsOf(const FitParam& p, const Cluster& base) {
  if (p.gpu_upper > 0 && base.kind == ClusterKind::Gpu) return {p.lower, std::min(p.upper, p.gpu_upper)};
  if (!p.relative) return {p.lower, p.upper};
  const double v = getParam(base, p);
  return {p.lower * v, p.upper * v};
}

std::string withParams(const std::string& cluster_json, const std::map<std::string, double>& values,
                       const std::string& source) {
  nlohmann::json j = nlohmann::json::parse(cluster_json, nullptr, false);
  if (!j.is_object()) throw UserError("--cluster", source + " holds no JSON object", "pass a cluster file");
  for (const auto& [path, value] : values) {
    nlohmann::json* at = &j;
    std::string rest = path;
    for (size_t dot; (dot = rest.find('.')) != std::string::npos; rest = rest.substr(dot + 1)) {
      nlohmann::json& next = (*at)[rest.substr(0, dot)];
      if (!next.is_object()) next = nlohmann::json::object();
      at = &next;
    }
    (*at)[rest] = value;
  }
  return j.dump(2) + "\n";
}

std::string CalibrationInterval::text() const {
  char pct[32];
  std::snprintf(pct, sizeof(pct), "%.1f%%", pm * 100);
  return "\u00b1" + std::string(pct) + " from the calibration of " + file;
}

bool CalibrationInterval::covers(const std::string& framework) const {
  return frameworks.empty() || std::find(frameworks.begin(), frameworks.end(), framework) != frameworks.end();
}

bool calibrationInterval(const std::string& path, CalibrationInterval& out) {
  std::string text;
  try {
    text = files::readTextFile(path, "--cluster", "");  // a regular file only: never a FIFO waited on
  } catch (const std::exception&) {
    return false;
  }
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("calibration") || !j["calibration"].is_object()) return false;
  const nlohmann::json& cal = j["calibration"];
  double pm = -1;
  bool held_out = false;
  for (const char* key : {"cross_validation", "residuals"})
    if (pm < 0 && cal.contains(key) && cal[key].is_object() && cal[key].contains("abs_error_p90") &&
        cal[key]["abs_error_p90"].is_number()) {
      pm = cal[key]["abs_error_p90"].get<double>();
      held_out = std::string(key) == "cross_validation";
    }
  if (!(pm >= 0) || !std::isfinite(pm)) return false;
  out.pm = pm;
  out.held_out = held_out;
  out.frameworks.clear();
  if (cal.contains("frameworks") && cal["frameworks"].is_array())
    for (const auto& f : cal["frameworks"])
      if (f.is_string()) out.frameworks.push_back(f.get<std::string>());
  out.file = path;
  return true;
}

}  // namespace trainscope::models
