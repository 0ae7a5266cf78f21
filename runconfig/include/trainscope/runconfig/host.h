// trainscope/runconfig/host.h — what this host lets a run use: memory (the cgroup's limits, v1 and v2,
// nested, and MemAvailable) and tasks (the cgroup's pids limits, kernel.threads-max, RLIMIT_NPROC).
//
// Every reader takes the files it reads as parameters (HostPaths), so that tests point it at a fake
// cgroup tree in a temporary folder. No LibTorch: resolve() checks --threads against the task limit.
#pragma once

#include <cstdint>
#include <string>

namespace trainscope::runtime {

struct HostPaths {
  std::string proc_self_cgroup = "/proc/self/cgroup";  // "ID:controllers:/path" lines
  std::string cgroup_root = "/sys/fs/cgroup";          // v2 (or v1 hierarchies below it; v2 in unified/ when hybrid)
  std::string meminfo = "/proc/meminfo";
  std::string threads_max = "/proc/sys/kernel/threads-max";
  std::string loadavg = "/proc/loadavg";  // its fourth field, "running/total", counts the host's tasks
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
// How many more tasks (processes and threads) this process may create: the smallest of
// pids.max − pids.current over its pids cgroup and its ancestors (v2 or v1), threads-max minus the
// host's tasks, and RLIMIT_NPROC (not for root, which the kernel exempts). 0 when nothing limits.
HostLimit taskLimit(const HostPaths& paths = {});

}  // namespace trainscope::runtime
