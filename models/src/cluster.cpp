// cluster.cpp — cluster files (see cluster.h).
#include "trainscope/models/cluster.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"

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

Cluster parseCluster(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // The library's text ("[json.exception.parse_error.101] parse error at line 1, …") is for
    // programmers: say where, and what, in words.
    const std::string what = e.what();
    const size_t cause = what.find(": ", what.find("parse error"));
    throw UserError("--cluster", source + " is not valid JSON (at byte " + std::to_string(e.byte) +
                                     (cause == std::string::npos ? std::string() : ": " + what.substr(cause + 2)) + ")",
                    "fix the file; see docs/tuner.md, \"Cluster file\"");
  }
  Cluster c;
  c.source = source;
  auto field = [&](const char* key) { return "--cluster " + source + ": " + key; };
  auto num = [&](const nlohmann::json& o, const char* key, bool required, double fallback) {
    if (!o.contains(key)) {
      if (required) throw UserError(field(key), "is missing", "see docs/tuner.md, \"Cluster file\"");
      return fallback;
    }
    if (!o[key].is_number()) throw UserError(field(key), "must be a number", "");
    const double v = o[key].get<double>();
    if (!std::isfinite(v) || v < 0) throw UserError(field(key), "must be finite and >= 0", "");
    return v;
  };
  if (!j.is_object()) throw UserError("--cluster", source + " holds no JSON object", "");
  c.name = j.value("name", std::filesystem::path(source).stem().string());
  c.description = j.value("description", "");
  if (j.contains("kind") && !j["kind"].is_string()) throw UserError(field("kind"), "must be \"gpu\" or \"cpu\"", "");
  c.kind = parseClusterKind(j.value("kind", "gpu"), field("kind"));
  c.nodes = int64_t(num(j, "nodes", false, 1));
  c.devices_per_node = int64_t(num(j, "devices_per_node", true, 0));
  c.memory_bytes = int64_t(num(j, "memory_bytes", true, 0));
  if (c.nodes < 1 || c.devices_per_node < 1 || c.memory_bytes < 1)
    throw UserError(field("nodes/devices_per_node/memory_bytes"), "must be positive", "");
  if (!j.contains("peak_flops") || !j["peak_flops"].is_object() || j["peak_flops"].empty())
    throw UserError(field("peak_flops"), "is missing", "give dense FLOP/s per dtype, e.g. {\"bf16\": 989e12}");
  for (auto& [k, v] : j["peak_flops"].items()) c.peak_flops[k] = num(j["peak_flops"], k.c_str(), true, 0);
  if (j.contains("matmul_efficiency")) {
    for (const auto& p : j["matmul_efficiency"]) {
      if (!p.is_array() || p.size() != 2 || !p[0].is_number() || !p[1].is_number())
        throw UserError(field("matmul_efficiency"), "must be a list of [flops, efficiency] pairs", "");
      c.matmul_efficiency.emplace_back(p[0].get<double>(), p[1].get<double>());
    }
    std::sort(c.matmul_efficiency.begin(), c.matmul_efficiency.end());
  }
  c.vector_flops = num(j, "vector_flops", false, 0);
  c.memory_bandwidth = num(j, "memory_bandwidth", true, 0);
  c.sm_count = int64_t(num(j, "sm_count", false, 0));
  c.memory_efficiency = num(j, "memory_efficiency", false, 1.0);
  c.kernel_floor_s = num(j, "kernel_floor_s", false, 0);
  c.dispatch_s = num(j, "dispatch_s", false, 0);
  c.sustained_clock = num(j, "sustained_clock", false, 1.0);
  if (c.sustained_clock <= 0 || c.sustained_clock > 1)
    throw UserError(field("sustained_clock"), "must lie in (0, 1]", "the sustained clock over the boost clock");
  if (c.sm_count < 0 || c.memory_efficiency <= 0 || c.memory_efficiency > 1 || c.kernel_floor_s < 0 || c.dispatch_s < 0)
    throw UserError(field("sm_count/memory_efficiency/kernel_floor_s/dispatch_s"),
                    "out of range (sm_count >= 0, 0 < memory_efficiency <= 1, times >= 0)", "see docs/tuner.md, \"Cluster file\"");
  for (auto [key, tier] : {std::pair{"intra_node", &c.intra_node}, {"inter_node", &c.inter_node}}) {
    if (!j.contains(key)) throw UserError(field(key), "is missing", "give bandwidth (bytes/s), efficiency, latency (s)");
    tier->bandwidth = num(j[key], "bandwidth", true, 0);
    tier->efficiency = num(j[key], "efficiency", false, 1);
    tier->latency = num(j[key], "latency", false, 0);
    tier->half_bytes = num(j[key], "half_bytes", false, 0);
  }
  if (j.contains("sources"))
    for (const auto& s : j["sources"]) c.sources.push_back(s.is_string() ? s.get<std::string>() : s.dump());
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
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    std::string known;
    for (const auto& p : clusterPresets()) known += (known.empty() ? "" : ", ") + p;
    throw UserError("--cluster", "unknown cluster \"" + name + "\"", "pass a JSON file or one of: " + known);
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  Cluster c = parseCluster(text.str(), path);
  if (nodes > 0) c.nodes = nodes;
  return c;
}

}  // namespace trainscope::models
