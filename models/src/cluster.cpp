// cluster.cpp — cluster files (see cluster.h).
#include "trainscope/models/cluster.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/common/json_text.h"
#include "trainscope/common/near_key.h"

namespace trainscope::models {
namespace {

std::string presetDir() {
  if (const char* env = std::getenv("TRAINSCOPE_CLUSTERS"); env && *env) return env;
  return TRAINSCOPE_CLUSTERS_DIR;
}

}  // namespace

const char* toString(ClusterKind k) { return k == ClusterKind::Cpu ? "cpu" : "gpu"; }

ClusterKind parseClusterKind(const std::string& s, const std::string& field) {
  if (s == "gpu") return ClusterKind::Gpu;
  if (s == "cpu") return ClusterKind::Cpu;
  throw UserError(field, "must be \"gpu\" or \"cpu\"", "");
}

double Cluster::peak(const std::string& dtype) const {
  auto it = peak_flops.find(dtype);
  if (it == peak_flops.end() || !(it->second > 0))
    throw UserError("cluster.peak_flops", name + " has no peak for " + dtype, "add \"" + dtype + "\" to peak_flops");
  return it->second;
}

const FrameworkProfile& Cluster::profile(Framework f) const {
  static const std::map<std::string, FrameworkProfile> builtin = [] {
    std::map<std::string, FrameworkProfile> m;
    for (const Framework x : allFrameworks()) m[frameworkKey(x)] = builtinProfile(x);
    return m;
  }();
  const auto it = frameworks.find(frameworkKey(f));
  return it != frameworks.end() ? it->second : builtin.at(frameworkKey(f));
}

FrameworkProfile& Cluster::mutableProfile(Framework f) {
  const auto it = frameworks.find(frameworkKey(f));
  if (it != frameworks.end()) return it->second;
  return frameworks[frameworkKey(f)] = builtinProfile(f);
}

double Cluster::matmulEfficiency(double flops) const {
  if (matmul_efficiency.empty()) return 1.0;
  if (flops <= matmul_efficiency.front().first) return matmul_efficiency.front().second;
  if (flops >= matmul_efficiency.back().first) return matmul_efficiency.back().second;
  for (size_t i = 1; i < matmul_efficiency.size(); ++i) {
    const auto [x1, y1] = matmul_efficiency[i];
    if (flops > x1) continue;
    const auto [x0, y0] = matmul_efficiency[i - 1];
    const double t = (std::log(flops) - std::log(x0)) / (std::log(x1) - std::log(x0));
    return y0 + t * (y1 - y0);
  }
  return matmul_efficiency.back().second;
}

double Cluster::fp8Scale() const {
  if (fp8_matmul_ceiling <= 0 || matmul_efficiency.empty()) return 1.0;
  double top = 0;
  for (const auto& [f, e] : matmul_efficiency) top = std::max(top, e);
  return top > 0 ? fp8_matmul_ceiling / top : 1.0;
}

namespace {

// `text` as JSON, or a UserError that says where and what in words.
nlohmann::json parseClusterJson(const std::string& text, const std::string& source) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // The library's text ("[json.exception.parse_error.101] parse error at line 1, …") is for
    // programmers: say where, and what, in words.
    const std::string what = e.what();
    const size_t cause = what.find(": ", what.find("parse error"));
    throw UserError("--cluster", source + " is not valid JSON (at byte " + std::to_string(e.byte) +
                                     (cause == std::string::npos ? std::string() : ": " + what.substr(cause + 2)) +
                                     jsonCutShort(e.byte, text.size(), what) + ")",
                    "fix the file; see docs/tuner.md, \"Cluster file\"");
  }
}

}  // namespace

namespace {

// "matmul_efficiency": [[GEMM FLOPs, achieved share], ...], sorted by FLOPs; absent: empty.
std::vector<std::pair<double, double>> parseMatmulCurve(const nlohmann::json& j, const std::string& field) {
  std::vector<std::pair<double, double>> curve;
  if (!j.contains("matmul_efficiency")) return curve;
  if (!j["matmul_efficiency"].is_array())
    throw UserError(field, "must be a list of [flops, efficiency] pairs", "");
  for (const auto& p : j["matmul_efficiency"]) {
    if (!p.is_array() || p.size() != 2 || !p[0].is_number() || !p[1].is_number())
      throw UserError(field, "must be a list of [flops, efficiency] pairs", "");
    const double flops = p[0].get<double>(), e = p[1].get<double>();
    if (!std::isfinite(flops) || !(flops > 0) || !std::isfinite(e) || !(e > 0) || e > 1)
      throw UserError(field, "holds " + jsonText(p) + "; each pair is [FLOPs above 0, efficiency in (0, 1]]",
                      "see docs/tuner.md, \"Cluster file\"");
    curve.emplace_back(flops, e);
  }
  std::sort(curve.begin(), curve.end());
  return curve;
}

// The cluster file's "frameworks" object over the built-in profiles (framework_profile.h).
void parseFrameworks(const nlohmann::json& j, const std::string& source, Cluster& c) {
  const std::string field = "--cluster " + source + ": ";
  for (const Framework f : allFrameworks()) c.frameworks[frameworkKey(f)] = builtinProfile(f);
  if (j.contains("frameworks")) {
    if (!j["frameworks"].is_object())
      throw UserError(field + "frameworks", "must be an object of framework profiles",
                      "e.g. {\"fsdp\": {\"hook_s\": 3e-5}}; see docs/framework-profiles.md");
    for (const auto& [name, profile] : j["frameworks"].items()) {
      if (!c.frameworks.count(name))
        throw UserError(field + "frameworks." + name, "is not a framework",
                        "use trainscope, megatron, fsdp or deepspeed");
      c.frameworks[name] = parseProfile(profile.dump(), c.frameworks[name], field + "frameworks." + name);
    }
  }
}

}  // namespace

namespace {

// Figures in another unit than the file's (TFLOP/s for FLOP/s, GB for bytes, microseconds for
// seconds) gave steps of 10^10 s and "fits" under a limit of 0 GiB with exit 0: each figure must lie
// where no device of any kind, CPU core or GPU, could put it otherwise.
void checkUnits(const Cluster& c, const std::function<std::string(const char*)>& field) {
  auto refuse = [&](const std::string& key, double v, const std::string& bound, const std::string& unit) {
    throw UserError(field(key.c_str()), "is " + jsonText(nlohmann::json(v)) + ", " + bound + ": a figure in another unit?",
                    "the file's unit is " + unit + " (docs/tuner.md, \"Cluster file\")");
  };
  for (const auto& [dtype, flops] : c.peak_flops)
    if (flops < 1e8) refuse("peak_flops." + dtype, flops, "under 0.1 GFLOP/s", "FLOP/s (989 TFLOP/s is 989e12)");
  // 1 MiB: a tune's own local cluster file holds --mem-limit or its free memory over its ranks.
  if (c.memory_bytes < (int64_t(1) << 20)) refuse("memory_bytes", double(c.memory_bytes), "under 1 MiB", "bytes (80 GiB is 85899345920)");
  if (c.memory_bandwidth < 1e8) refuse("memory_bandwidth", c.memory_bandwidth, "under 0.1 GB/s", "bytes/s (3.35 TB/s is 3.35e12)");
  for (auto [key, tier] : {std::pair{"intra_node", &c.intra_node}, {"inter_node", &c.inter_node}}) {
    if (tier->bandwidth < 1e6) refuse(std::string(key) + ".bandwidth", tier->bandwidth, "under 1 MB/s", "bytes/s (450 GB/s is 450e9)");
    if (tier->latency > 1) refuse(std::string(key) + ".latency", tier->latency, "over 1 s", "seconds (5 us is 5e-6)");
  }
  for (const auto& [key, v] : {std::pair{"kernel_floor_s", c.kernel_floor_s}, {"dispatch_s", c.dispatch_s}})
    if (v > 1) refuse(key, v, "over 1 s", "seconds (3 us is 3e-6)");
}

// A key one or two edits from a key of a cluster file ("sustained_clok", "calibratoin") is refused
// naming the key it resembles: ignored, a hand edit would change nothing, silently. Other keys (a
// user's own "comment") stay allowed, as before.
void refuseMisspeltKeys(const nlohmann::json& o, const std::vector<std::string>& known, const std::string& where) {
  if (!o.is_object()) return;
  for (const auto& item : o.items()) {
    const std::string& key = item.key();
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    const auto near = keys::nearestKey(key, known);
    if (keys::closeTo(key, near))
      throw UserError(where + key, "is not a key of a cluster file (ignored, it would change nothing)",
                      "did you mean \"" + near.first + "\"? see docs/tuner.md, \"Cluster file\"");
  }
}

// The "calibration" record that calibrate wrote: what predict reads from it (the interval's 90th
// percentile, the frameworks it covers) must be what calibrate writes, or the file is refused naming
// the key. Unread, a hand-edited "big" or -0.5 had silently turned a cross-validated interval into
// the in-sample one, and a record that is not an object had dropped the interval without a word.
void checkCalibrationRecord(const nlohmann::json& j, const std::string& where) {
  if (!j.contains("calibration")) return;
  const nlohmann::json& cal = j["calibration"];
  const std::string fix = "restore the record trainscope calibrate wrote, or rerun calibrate; see docs/time-model.md";
  if (!cal.is_object()) throw UserError(where + "calibration", "must be an object (calibrate's record)", fix);
  for (const char* key : {"cross_validation", "residuals"}) {
    if (!cal.contains(key)) continue;
    if (!cal[key].is_object()) throw UserError(where + "calibration." + key, "must be an object", fix);
    const nlohmann::json& p90 = cal[key].contains("abs_error_p90") ? cal[key]["abs_error_p90"] : nlohmann::json();
    if (!p90.is_number() || !(p90.get<double>() >= 0) || !std::isfinite(p90.get<double>()))
      throw UserError(where + "calibration." + key + ".abs_error_p90",
                      "is " + jsonText(p90) + "; it must be a number, 0 or more (predict's interval: the 90th "
                      "percentile of |predicted / measured - 1|)", fix);
  }
  if (cal.contains("frameworks")) {
    bool ok = cal["frameworks"].is_array();
    for (const auto& f : ok ? cal["frameworks"] : nlohmann::json::array())
      ok = ok && f.is_string() && (f == "trainscope" || f == "megatron" || f == "fsdp" || f == "deepspeed");
    if (!ok)
      throw UserError(where + "calibration.frameworks", "is " + jsonText(cal["frameworks"]) +
                      "; it must be a list of the frameworks the rows were priced under (trainscope, megatron, fsdp, deepspeed)",
                      fix);
  }
}

}  // namespace

namespace {

// A key one or two edits from one parseCluster reads (sustained_clok) is refused naming it; other
// keys stay allowed. A key added to parseCluster is added here too.
void refuseMisspeltClusterKeys(const nlohmann::json& j, const std::string& source) {
  refuseMisspeltKeys(j, {"name", "description", "kind", "nodes", "devices_per_node", "memory_bytes", "peak_flops",
                         "matmul_efficiency", "vector_flops", "memory_bandwidth", "sm_count", "memory_efficiency",
                         "kernel_floor_s", "dispatch_s", "sustained_clock", "fp8_matmul_ceiling",
                         "flash_forward_ceiling", "flash_backward_ceiling", "intra_node", "inter_node", "frameworks",
                         "sources", "fitted", "calibration",
                         // a user's own remarks, never taken for "nodes" misspelt
                         "notes", "note", "comment", "comments"},
                     "--cluster " + source + ": ");
  for (const char* tier : {"intra_node", "inter_node"})
    refuseMisspeltKeys(j[tier], {"bandwidth", "efficiency", "latency", "half_bytes"},
                       "--cluster " + source + ": " + tier + ".");
}

}  // namespace

Cluster parseCluster(const std::string& text, const std::string& source) {
  const nlohmann::json j = parseClusterJson(text, source);
  Cluster c;
  c.source = source;
  auto field = [&](const char* key) { return "--cluster " + source + ": " + key; };
  // Every number finite; rates, sizes and counts above 0 (a bandwidth of 0 priced a step at 871 million
  // seconds, a memory bandwidth of 0 a NaN throughput); delays and optional figures at least 0.
  enum Range { AtLeastZero, AboveZero };
  auto num = [&](const nlohmann::json& o, const char* key, bool required, double fallback, Range range,
                 const std::string& within = "") {
    const std::string name = within.empty() ? field(key) : field((within + "." + key).c_str());
    if (!o.contains(key)) {
      if (required) throw UserError(name, "is missing", "see docs/tuner.md, \"Cluster file\"");
      return fallback;
    }
    if (!o[key].is_number()) throw UserError(name, "must be a number", "see docs/tuner.md, \"Cluster file\"");
    const double v = o[key].get<double>();
    if (!std::isfinite(v) || v < 0 || (range == AboveZero && v == 0))
      throw UserError(name, "is " + jsonText(o[key]) + (range == AboveZero ? "; it must be above 0" : "; it must be 0 or more"),
                      "see docs/tuner.md, \"Cluster file\"");
    return v;
  };
  // A count: a whole number from 1 to `most` (a wrapped or mistyped figure is refused, never truncated).
  auto count = [&](const char* key, bool required, int64_t fallback, int64_t most) {
    if (!j.contains(key)) {
      if (required) throw UserError(field(key), "is missing", "see docs/tuner.md, \"Cluster file\"");
      return fallback;
    }
    const nlohmann::json& v = j[key];
    const double d = v.is_number() ? v.get<double>() : 0;
    if (!v.is_number() || !(d >= 1) || d > double(most) || d != std::floor(d))
      throw UserError(field(key), "is " + jsonText(v) + "; it must be a whole number from 1 to " + std::to_string(most),
                      "see docs/tuner.md, \"Cluster file\"");
    return v.is_number_integer() ? v.get<int64_t>() : int64_t(d);
  };
  if (!j.is_object()) throw UserError("--cluster", source + " holds no JSON object", "");
  for (const char* key : {"name", "description"})
    if (j.contains(key) && !j[key].is_string()) throw UserError(field(key), "must be a string", "");
  c.name = j.value("name", std::filesystem::path(source).stem().string());
  c.description = j.value("description", "");
  if (j.contains("kind") && !j["kind"].is_string()) throw UserError(field("kind"), "must be \"gpu\" or \"cpu\"", "");
  c.kind = parseClusterKind(j.value("kind", "gpu"), field("kind"));
  constexpr int64_t kMostDevices = kMostClusterDevices, kMostBytes = int64_t(1) << 50;
  c.nodes = count("nodes", false, 1, kMostDevices);
  c.devices_per_node = count("devices_per_node", true, 0, kMostDevices);
  c.memory_bytes = count("memory_bytes", true, 0, kMostBytes);
  if (c.nodes > kMostDevices / c.devices_per_node)
    throw UserError(field("nodes"), std::to_string(c.nodes) + " nodes of " + std::to_string(c.devices_per_node) +
                                        " devices is more than " + std::to_string(kMostDevices) + " devices",
                    "see docs/tuner.md, \"Cluster file\"");
  if (!j.contains("peak_flops") || !j["peak_flops"].is_object() || j["peak_flops"].empty())
    throw UserError(field("peak_flops"), "is missing", "give dense FLOP/s per dtype, e.g. {\"bf16\": 989e12}");
  for (auto& [k, v] : j["peak_flops"].items())
    c.peak_flops[k] = num(j["peak_flops"], k.c_str(), true, 0, AboveZero, "peak_flops");
  c.matmul_efficiency = parseMatmulCurve(j, "--cluster " + source + ": matmul_efficiency");
  c.vector_flops = num(j, "vector_flops", false, 0, AtLeastZero);
  c.memory_bandwidth = num(j, "memory_bandwidth", true, 0, AboveZero);
  c.sm_count = j.contains("sm_count") ? count("sm_count", false, 0, kMostDevices) : 0;
  c.memory_efficiency = num(j, "memory_efficiency", false, 1.0, AboveZero);
  c.kernel_floor_s = num(j, "kernel_floor_s", false, 0, AtLeastZero);
  c.dispatch_s = num(j, "dispatch_s", false, 0, AtLeastZero);
  c.sustained_clock = num(j, "sustained_clock", false, 1.0, AboveZero);
  c.fp8_matmul_ceiling = num(j, "fp8_matmul_ceiling", false, 0.0, AtLeastZero);
  c.flash_forward_ceiling = num(j, "flash_forward_ceiling", false, 0.0, AtLeastZero);
  c.flash_backward_ceiling = num(j, "flash_backward_ceiling", false, 0.0, AtLeastZero);
  for (const auto& [key, value] : {std::pair{"flash_forward_ceiling", c.flash_forward_ceiling},
                                    std::pair{"flash_backward_ceiling", c.flash_backward_ceiling}})
    if (value > 1)
      throw UserError(field(key), "must lie in [0, 1]", "FlashAttention-2's best share of the dense peak on this GPU");
  if (c.fp8_matmul_ceiling > 1)
    throw UserError(field("fp8_matmul_ceiling"), "must lie in [0, 1]", "the best FP8 GEMM's share of peak_flops.fp8");
  if (c.sustained_clock <= 0 || c.sustained_clock > 1)
    throw UserError(field("sustained_clock"), "must lie in (0, 1]", "the sustained clock over the boost clock");
  if (c.memory_efficiency > 1)
    throw UserError(field("memory_efficiency"), "must lie in (0, 1]", "see docs/tuner.md, \"Cluster file\"");
  for (auto [key, tier] : {std::pair{"intra_node", &c.intra_node}, {"inter_node", &c.inter_node}}) {
    if (!j.contains(key) || !j[key].is_object())
      throw UserError(field(key), "is missing", "give bandwidth (bytes/s), efficiency, latency (s)");
    const std::string tier_name = key;  // keys named by their path: "intra_node.bandwidth"
    tier->bandwidth = num(j[key], "bandwidth", true, 0, AboveZero, tier_name);
    tier->efficiency = num(j[key], "efficiency", false, 1, AboveZero, tier_name);
    if (tier->efficiency > 1)
      throw UserError(field((tier_name + ".efficiency").c_str()), "must lie in (0, 1]", "see docs/tuner.md, \"Cluster file\"");
    tier->latency = num(j[key], "latency", false, 0, AtLeastZero, tier_name);
    tier->half_bytes = num(j[key], "half_bytes", false, 0, AtLeastZero, tier_name);
  }
  refuseMisspeltClusterKeys(j, source);
  checkCalibrationRecord(j, "--cluster " + source + ": ");
  checkUnits(c, field);
  parseFrameworks(j, source, c);
  if (j.contains("sources"))
    for (const auto& s : j["sources"]) c.sources.push_back(s.is_string() ? s.get<std::string>() : jsonText(s));
  return c;
}

std::vector<std::string> clusterPresets() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(presetDir(), ec))
    if (e.path().extension() == ".json") out.push_back(e.path().stem().string());
  std::sort(out.begin(), out.end());
  return out;
}

Cluster loadCluster(const std::string& name, int64_t nodes) {
  std::string path = name;
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) path = presetDir() + "/" + name + ".json";
  std::string known;
  for (const auto& p : clusterPresets()) known += (known.empty() ? "" : ", ") + p;
  const bool a_path = name.find('/') != std::string::npos ||
                      (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0);  // as --workload reads it
  if (stat(path.c_str(), &st) != 0 && a_path)
    throw UserError("--cluster", "file " + name + " does not exist",
                    "pass an existing cluster JSON file or one of: " + known);
  if (stat(path.c_str(), &st) != 0)
    throw UserError("--cluster", "unknown cluster \"" + name + "\"", "pass a JSON file or one of: " + known);
  // A FIFO or device is refused at once, never waited on or read without end.
  Cluster c = parseCluster(files::readTextFile(path, "--cluster", "pass a JSON file or one of: " + known), path);
  setClusterNodes(c, nodes);
  return c;
}

void setClusterNodes(Cluster& c, int64_t nodes) {
  if (nodes > 0 && nodes > kMostClusterDevices / c.devices_per_node)
    throw UserError("--nodes", std::to_string(nodes) + " nodes of " + std::to_string(c.devices_per_node) +
                                   " devices is more than the " + std::to_string(kMostClusterDevices) +
                                   " devices the models price",
                    "pass at most " + std::to_string(kMostClusterDevices / c.devices_per_node) + " nodes");
  if (nodes > 0) c.nodes = nodes;
}

}  // namespace trainscope::models
