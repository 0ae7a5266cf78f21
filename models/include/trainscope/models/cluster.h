// trainscope/models/cluster.h — what the models know about a cluster (docs/tuner.md, "Cluster file").
//
// A JSON file: nodes, devices per node (CPU ranks per node for a CPU cluster), memory per device
// (the per-rank limit for CPU ranks), peak FLOP/s per dtype with a matrix-efficiency curve by GEMM
// size (as Calculon's system files), a vector rate for memory-bound ops, memory bandwidth, and two
// network tiers (inside a node, between nodes) with bandwidth per device, efficiency and latency.
// Shipped presets (models/clusters/*.json) carry the public figures they come from in "sources".
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "trainscope/models/framework_profile.h"

namespace trainscope::models {

struct NetworkTier {
  double bandwidth = 0;   // bytes/s per device, one direction
  double efficiency = 1;  // achieved share of the bandwidth for large messages
  double latency = 0;     // seconds per collective step (alpha)
  double half_bytes = 0;  // message size at which a collective reaches half its large-message bus
                          // bandwidth (0: every size at full rate)
};

// What a cluster's devices are: GPUs (the GPU time model), or CPU ranks that share each node's cores
// and memory bandwidth. Cluster files and a study's stored inputs spell them "gpu" and "cpu".
enum class ClusterKind { Gpu, Cpu };
const char* toString(ClusterKind k);
ClusterKind parseClusterKind(const std::string& s, const std::string& field);  // UserError(field) otherwise

// The most devices a cluster may have (nodes x devices_per_node): 2^20, past any machine built; a
// larger --nodes, --gpus or cluster file is refused by name before a count can wrap.
inline constexpr int64_t kMostClusterDevices = int64_t(1) << 20;

struct Cluster {
  std::string name, description, source;  // source: the file read
  ClusterKind kind = ClusterKind::Gpu;
  int64_t nodes = 1, devices_per_node = 1;
  int64_t memory_bytes = 0;                                 // per device / per rank
  std::map<std::string, double> peak_flops;                 // dense, per dtype: fp32, bf16, fp16 …
  std::vector<std::pair<double, double>> matmul_efficiency; // (GEMM FLOPs, achieved share), ascending
  double vector_flops = 0, memory_bandwidth = 0;            // per device
  // GPU kernel physics (docs/tuner.md, "GPU time model"); 0 leaves a term out.
  int64_t sm_count = 0;            // streaming multiprocessors: GEMM tiles are quantised into waves
  double memory_efficiency = 1.0;  // achieved share of memory_bandwidth by streaming kernels
  double kernel_floor_s = 0;       // the least a kernel takes on the device (launch to end)
  double dispatch_s = 0;           // the framework's host time to issue one op (eager PyTorch)
  double sustained_clock = 1.0;    // tensor-core clock under sustained load / the clock peak_flops assumes
  // The share of peak_flops.fp8 the best FP8 GEMM reaches (a measured ceiling; 0: the bf16 curve's).
  double fp8_matmul_ceiling = 0;
  // FlashAttention-2's top share of the dense peak on this GPU, forward and backward at long sequences
  // and head dim 128 (0: A100's, kFlashTopForward / kFlashTopBackward; layer_ops.h flashEfficiency).
  double flash_forward_ceiling = 0, flash_backward_ceiling = 0;
  NetworkTier intra_node, inter_node;
  std::vector<std::string> sources;
  // The framework profiles (framework_profile.h): every framework's built-in one, with the constants
  // the file's "frameworks" object gives set, keyed by frameworkKey.
  std::map<std::string, FrameworkProfile> frameworks;

  const FrameworkProfile& profile(Framework f) const;
  // The profile to change (calibrate's setParam): the file's, else the built-in one, inserted first
  // (a Cluster built in code has none in `frameworks`).
  FrameworkProfile& mutableProfile(Framework f);
  int64_t devices() const { return nodes * devices_per_node; }
  double peak(const std::string& dtype) const;           // UserError when the dtype has no figure
  double matmulEfficiency(double gemm_flops) const;      // log-linear between the curve's points
  // FP8 GEMMs: matmulEfficiency × this, the curve rescaled so that its top is fp8_matmul_ceiling.
  double fp8Scale() const;
};

// A preset name (`trainscope tune --cluster h100-80gb-x8`) or a JSON path. `nodes` > 0 overrides
// the file's node count. Throws UserError naming the file and the field.
Cluster loadCluster(const std::string& name_or_path, int64_t nodes = 0);
Cluster parseCluster(const std::string& json_text, const std::string& source);
// `nodes` > 0 replaces the cluster's node count (UserError naming --nodes past kMostClusterDevices).
void setClusterNodes(Cluster& c, int64_t nodes);
std::vector<std::string> clusterPresets();

}  // namespace trainscope::models
