// trainscope/runconfig/host.h — what this host lets a run use: memory (the cgroup's limits, v1 and v2,
// nested, and MemAvailable) and tasks (the cgroup's pids limits, kernel.threads-max, RLIMIT_NPROC).
//
// Every reader takes the files it reads as parameters (HostPaths), so that tests point it at a fake
// cgroup tree in a temporary folder. No LibTorch: resolve() checks --threads against the task limit.
#pragma once

#include <cstdint>
#include <string>

namespace trainscope::runconfig {

struct HostPaths {
  std::string proc_self_cgroup = "/proc/self/cgroup";  // "ID:controllers:/path" lines
  std::string cgroup_root = "/sys/fs/cgroup";          // v2 (or v1 hierarchies below it; v2 in unified/ when hybrid)
  std::string meminfo = "/proc/meminfo";
  std::string threads_max = "/proc/sys/kernel/threads-max";
  std::string loadavg = "/proc/loadavg";  // its fourth field, "running/total", counts the host's tasks
  std::string proc_self_status = "/proc/self/status";  // VmRSS, VmHWM
};

// A limit and where it came from ("memory.max of cgroup /a/b"); value 0 when none was found.
struct HostLimit {
  int64_t value = 0;
  std::string source;
};

// The smallest memory limit of this process's cgroup and of every cgroup above it: v2 memory.max
// and memory.high (past it the kernel throttles and reclaims), v1 memory.limit_in_bytes. A v1
// value of 2^62 or more, and "max", mean none.
HostLimit cgroupMemoryLimit(const HostPaths& paths = {});
// The bytes this process may use: the smaller of cgroupMemoryLimit() and MemAvailable.
HostLimit memoryAvailable(const HostPaths& paths = {});
// The out-of-memory kills counted in this process's memory cgroup and the ones above it (v2
// memory.events, v1 memory.oom_control: "oom_kill N"), summed: it rises when the kernel kills a task
// of the cgroup for its limit. -1 when no count can be read (no limit, an old kernel).
int64_t oomKillCount(const HostPaths& paths = {});

// This process's resident memory: now (VmRSS) and its peak (VmHWM, since the process started or
// since resetPeakResident()). 0 when unknown.
struct ResidentMemory {
  int64_t now = 0, peak = 0;
};
ResidentMemory residentMemory(const HostPaths& paths = {});
// Starts VmHWM again from the current VmRSS (writes 5 to /proc/self/clear_refs); false when it cannot.
bool resetPeakResident();

// How many more tasks (processes and threads) this process may create: the smallest of
// pids.max − pids.current over its pids cgroup and its ancestors (v2 or v1), threads-max minus the
// host's tasks, and RLIMIT_NPROC (not for root, which the kernel exempts). 0 when nothing limits.
HostLimit taskLimit(const HostPaths& paths = {});

// The tasks (threads) one CPU rank starts, as counted on a running one: OpenMP (libgomp) gives each
// thread that enters a parallel region a team of its own, so the main thread's `threads` and each of
// the `lanes` core lanes' make about threads × (lanes + 1); plus kRankOwnTasks of LibTorch's, Gloo's
// (two per process group, up to ten groups) and trainscope's (the store and its heartbeat, the signal
// watcher, the tracer).
inline constexpr int64_t kRankOwnTasks = 32;
int64_t tasksPerRank(int64_t threads, int64_t lanes);
// The lanes a run of `threads` threads uses: --cpu-lanes when given, else one per thread up to mbs.
int64_t lanesFor(int64_t threads, int64_t cpu_lanes, int64_t mbs);
// The most threads per rank for which `ranks` ranks fit in `room` tasks (lanes as lanesFor); 0: none.
int64_t threadsThatFit(int64_t room, int64_t ranks, int64_t cpu_lanes, int64_t mbs);

}  // namespace trainscope::runconfig

// The runtime reads its configuration as its own (runtime::TrainConfig is runconfig::TrainConfig):
// runconfig is kept apart so that the front end, the models and the tuner link it without LibTorch.
namespace trainscope::runtime {
using namespace trainscope::runconfig;
}  // namespace trainscope::runtime
