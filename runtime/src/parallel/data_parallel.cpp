// data_parallel.cpp — makeDataParallel: which ZeRO stage runs on which class (see data_parallel.h).
#include "parallel/data_parallel.h"

#include "parallel/grad_sync.h"
#include "parallel/zero3.h"

namespace trainscope::runtime {
namespace {

// --zero 3 over a shard group of more than one rank: Zero3 holds the weights, gradients and
// optimizer pieces, and `master`/`compute` become its per-tensor pieces. A shard group of one (one
// DP rank, or --zero-shard-size 1) has no parameters to shard: ZeRO-1 runs instead.
std::unique_ptr<DataParallel> zero3(const TrainConfig& cfg, Comm& comm, const StageSpec& stage,
                                    std::vector<at::Tensor>& master, std::vector<at::Tensor>& compute,
                                    at::ScalarType compute_dtype, const at::Device& device) {
  const Layout& layout = comm.layout();
  const int shard = cfg.zero_shard_size > 0 ? cfg.zero_shard_size : layout.dp;
  if (shard <= 1) return nullptr;
  Group& group = shard == layout.dp ? comm.dp() : comm.subGroup("zero_shard", layout.zeroShardGroup(shard));
  Group* replicas = shard == layout.dp ? nullptr : &comm.subGroup("zero_replica", layout.zeroReplicaGroup(shard));
  auto z = std::make_unique<Zero3>(group, replicas, layout.dp, stage, master, compute_dtype, device);
  master = z->master();
  compute = z->compute();
  return z;
}

}  // namespace

std::unique_ptr<DataParallel> makeDataParallel(const TrainConfig& cfg, Comm& comm, const StageSpec& stage,
                                               std::vector<at::Tensor>& master, std::vector<at::Tensor>& compute,
                                               const std::vector<bool>& managed, at::ScalarType compute_dtype,
                                               const at::Device& device) {
  if (cfg.zero == ZeroStage::Parameters)
    if (auto z = zero3(cfg, comm, stage, master, compute, compute_dtype, device)) return z;
  const auto mode = cfg.zero == ZeroStage::Gradients ? GradSync::Mode::Zero2
                    : shardsOptimizer(cfg.zero)        ? GradSync::Mode::Zero1
                    : cfg.local_sgd > 0                ? GradSync::Mode::None
                                                       : GradSync::Mode::Buckets;
  // Gradients are reduced over DP x CP (Megatron-LM's data-parallel-with-context group): each CP
  // rank's gradients cover its tokens only.
  return std::make_unique<GradSync>(comm.dpCp(), mode, int64_t(cfg.bucket_mb * 1024 * 1024), compute, master,
                                    compute_dtype != at::kFloat, managed);
}

}  // namespace trainscope::runtime
