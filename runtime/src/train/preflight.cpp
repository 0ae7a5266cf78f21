// preflight.cpp — see preflight.h: the checks a run passes before any rank or thread starts.
#include "train/preflight.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>

#include "trainscope/common/error.h"
#include "trainscope/models/memory_model.h"
#include "trainscope/runconfig/host.h"

namespace trainscope::runtime {
namespace {

// The bytes this process may use: --mem-limit, else the smallest of the cgroup limits (v1 or v2, this
// cgroup's and its ancestors') and MemAvailable, shared by the ranks of this host (host.h). 0 when
// unknown (a GPU run: the device's memory is checked by CUDA).
std::pair<int64_t, std::string> availableBytes(const TrainConfig& cfg, int local_ranks, bool cpu) {
  if (cfg.mem_limit > 0) return {cfg.mem_limit, "--mem-limit"};
  if (!cpu) return {0, ""};
  const HostLimit m = memoryAvailable();
  return {m.value / std::max(1, local_ranks),
          m.source + (local_ranks > 1 ? " shared by " + std::to_string(local_ranks) + " ranks" : "")};
}

// The process's memory besides its tensors, on the CPU (docs/memory-model.md, "The process"): what
// it holds before the run (LibTorch's libraries and their data, Python-free: the VmRSS of this
// process, which is the launcher or the rank itself, both trainscope-train), what a running rank adds
// to it (its threads' stacks and glibc arenas, Gloo's buffers, oneDNN's kernels), and the slack of
// glibc's heaps over the tensors' bytes. The counting allocator's cache of freed blocks is not in it:
// under a limit, it is bounded to the room left (train()).
constexpr int64_t kRankRuntimeBytes = int64_t(160) << 20;
constexpr double kAllocatorSlack = 0.15;
int64_t nonTensorBytes(int64_t tensor_bytes) {
  return residentMemory().now + kRankRuntimeBytes + int64_t(kAllocatorSlack * double(tensor_bytes));
}

}  // namespace

// Before any thread or rank starts: the tasks the run will create must fit what the host allows
// (pids.max of the cgroup, threads-max, RLIMIT_NPROC). Past it, thread creation fails somewhere
// inside OpenMP or Gloo, far from the cause (a crash after 25 s with --threads 1000).
void checkTasksFit(const TrainConfig& cfg, int ranks_on_host) {
  const HostLimit room = taskLimit();
  if (room.value <= 0) return;
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t threads = cfg.threads > 0 ? cfg.threads : std::max(1, cores / std::max(1, ranks_on_host));
  const int64_t lanes = lanesFor(threads, cfg.cpu_lanes, cfg.mbs);
  const int64_t need = int64_t(ranks_on_host) * tasksPerRank(threads, lanes);
  if (need <= room.value) return;
  const int64_t fits = threadsThatFit(room.value, ranks_on_host, cfg.cpu_lanes, cfg.mbs);
  throw UserError(cfg.threads > 0 ? "--threads" : "--nproc",
                  std::to_string(ranks_on_host) + " rank" + (ranks_on_host > 1 ? "s" : "") + " with " +
                      std::to_string(threads) + " threads each need about " + std::to_string(need) +
                      " tasks (threads x (lanes + 1) + " + std::to_string(kRankOwnTasks) +
                      " per rank), but this host lets the run create " + std::to_string(room.value) + " more (" +
                      room.source + ")",
                  fits > 0 ? "pass --threads " + std::to_string(fits) + " or fewer" : "run fewer ranks on this host");
}

// Before anything is allocated: a run the memory model says cannot fit is refused (exit 2) with both
// numbers. The model over-predicts the tensors by a few percent (docs/tuner.md): refused only past
// 10%. Against the host's limits (a cgroup's, MemAvailable) the process's other memory counts too;
// --mem-limit bounds the tensors alone.
MemoryFit checkMemoryFits(const TrainConfig& cfg, int pp_rank, int local_ranks, bool cpu) {
  const auto [available, source] = availableBytes(cfg, local_ranks, cpu);
  if (!cfg.memory_check || available <= 0) return {available, 0};
  models::Plan plan = models::planOf(cfg);
  plan.cpu = cpu;
  const auto m = models::predictMemory(cfg.model, plan);
  const int64_t tensors = m.stages[size_t(std::min<int64_t>(pp_rank, int64_t(m.stages.size()) - 1))].total();
  const int64_t other = cfg.mem_limit > 0 || !cpu ? 0 : nonTensorBytes(tensors);
  if (double(tensors) * 0.9 + double(other) <= double(available)) return {available, tensors + other};
  auto gib = [](int64_t b) {  // GiB, or MiB / KiB / bytes where GiB would read 0.00 (--mem-limit 1K)
    char s[32];
    const double v = double(b);
    if (v >= double(int64_t(1) << 30) * 0.01) std::snprintf(s, sizeof(s), "%.2f GiB", v / double(int64_t(1) << 30));
    else if (v >= 1024.0 * 1024.0 * 0.01) std::snprintf(s, sizeof(s), "%.2f MiB", v / (1024.0 * 1024.0));
    else if (v >= 1024.0) std::snprintf(s, sizeof(s), "%.2f KiB", v / 1024.0);
    else std::snprintf(s, sizeof(s), "%lld bytes", static_cast<long long>(b));
    return std::string(s);
  };
  throw UserError(cfg.mem_limit > 0 ? "--mem-limit" : "memory",
                  "this run needs about " + gib(tensors + other) + " per rank (" +
                      (other > 0 ? gib(tensors) + " of tensors, the memory model; `trainscope predict` shows the split; "
                                   "and " + gib(other) + " the process holds besides, docs/memory-model.md"
                                 : "the memory model; `trainscope predict` shows the split") +
                      ") but " + gib(available) + " are available (" + source + ")",
                  "lower --mbs, add --ckpt full, shard with --tp/--pp/--zero 1, or pass --skip-memory-check");
}

}  // namespace trainscope::runtime
