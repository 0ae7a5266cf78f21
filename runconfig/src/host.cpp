// host.cpp — the host's memory and task limits (see host.h).
#include "trainscope/runconfig/host.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

namespace trainscope::runconfig {
namespace {
namespace fs = std::filesystem;

constexpr int64_t kV1Unlimited = int64_t(1) << 62;  // v1 writes PAGE_COUNTER_MAX pages as "no limit"

// One line of /proc/self/cgroup: "0::/path" (v2) or "4:memory:/path" (a v1 hierarchy).
struct CgroupLine {
  std::vector<std::string> controllers;  // empty for v2
  std::string path;
};

std::vector<CgroupLine> readCgroupLines(const std::string& file) {
  std::vector<CgroupLine> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    CgroupLine l;
    std::stringstream ctl(line.substr(a + 1, b - a - 1));
    for (std::string c; std::getline(ctl, c, ',');)
      if (!c.empty()) l.controllers.push_back(c);
    l.path = line.substr(b + 1);
    out.push_back(std::move(l));
  }
  return out;
}

// A value file: a number, or "max" (none). Missing or unreadable: none.
std::optional<int64_t> readValue(const fs::path& p) {
  std::ifstream in(p);
  std::string v;
  if (!(in >> v) || v == "max") return std::nullopt;
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (end == v.c_str() || *end != '\0' || n < 0) return std::nullopt;
  return int64_t(n);
}

// The mount of a v1 controller below the root: "memory", or a joint mount such as "cpu,cpuacct".
std::optional<fs::path> v1Mount(const fs::path& root, const std::string& controller) {
  std::error_code ec;
  if (fs::is_directory(root / controller, ec)) return root / controller;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    std::stringstream names(it->path().filename().string());
    for (std::string c; std::getline(names, c, ',');)
      if (c == controller && it->is_directory(ec)) return it->path();
  }
  return std::nullopt;
}

// The v2 hierarchy: the root itself, or unified/ below it on a hybrid host.
std::optional<fs::path> v2Mount(const fs::path& root) {
  std::error_code ec;
  if (fs::exists(root / "cgroup.controllers", ec)) return root;
  if (fs::exists(root / "unified" / "cgroup.controllers", ec)) return root / "unified";
  return std::nullopt;
}

// Calls visit(dir, cgroup path) for the process's cgroup and each one above it, up to the mount's
// root. A cgroup path the mount does not show (a container that sees only its own cgroup at the
// root, without a cgroup namespace) leaves the levels that exist: at least the root.
template <class Visit>
void walkUp(const fs::path& mount, const std::string& cgroup_path, Visit visit) {
  std::string rel = cgroup_path;
  for (;;) {
    while (!rel.empty() && rel.back() == '/') rel.pop_back();
    const fs::path dir = rel.empty() ? mount : mount / rel.substr(rel[0] == '/' ? 1 : 0);
    std::error_code ec;
    if (fs::is_directory(dir, ec)) visit(dir, rel.empty() ? std::string("/") : rel);
    if (rel.empty()) return;
    const size_t slash = rel.rfind('/');
    rel = slash == std::string::npos ? std::string() : rel.substr(0, slash);
  }
}

void takeSmaller(HostLimit& best, int64_t value, const std::string& source) {
  if (value > 0 && (best.value == 0 || value < best.value)) best = {value, source};
}

}  // namespace

HostLimit cgroupMemoryLimit(const HostPaths& paths) {
  HostLimit best;
  const fs::path root(paths.cgroup_root);
  for (const CgroupLine& l : readCgroupLines(paths.proc_self_cgroup)) {
    if (l.controllers.empty()) {
      if (auto mount = v2Mount(root))
        walkUp(*mount, l.path, [&](const fs::path& dir, const std::string& cg) {
          for (const char* file : {"memory.max", "memory.high"})
            if (auto v = readValue(dir / file)) takeSmaller(best, *v, std::string(file) + " of cgroup " + cg);
        });
    } else if (std::find(l.controllers.begin(), l.controllers.end(), "memory") != l.controllers.end()) {
      if (auto mount = v1Mount(root, "memory"))
        walkUp(*mount, l.path, [&](const fs::path& dir, const std::string& cg) {
          if (auto v = readValue(dir / "memory.limit_in_bytes"); v && *v < kV1Unlimited)
            takeSmaller(best, *v, "memory.limit_in_bytes of cgroup " + cg);
        });
    }
  }
  return best;
}

HostLimit memoryAvailable(const HostPaths& paths) {
  HostLimit best = cgroupMemoryLimit(paths);
  std::ifstream mi(paths.meminfo);
  for (std::string key; mi >> key;) {
    int64_t kb = 0;
    mi >> kb;
    if (key == "MemAvailable:") takeSmaller(best, kb * 1024, "MemAvailable");
    mi.ignore(256, '\n');
  }
  return best;
}

int64_t oomKillCount(const HostPaths& paths) {
  int64_t total = -1;
  auto add = [&](const fs::path& file) {
    std::ifstream in(file);
    for (std::string key; in >> key;) {
      int64_t n = 0;
      if (!(in >> n)) break;
      if (key == "oom_kill") total = std::max<int64_t>(total, 0) + n;
    }
  };
  const fs::path root(paths.cgroup_root);
  for (const CgroupLine& l : readCgroupLines(paths.proc_self_cgroup)) {
    if (l.controllers.empty()) {
      if (auto mount = v2Mount(root))
        walkUp(*mount, l.path, [&](const fs::path& dir, const std::string&) { add(dir / "memory.events"); });
    } else if (std::find(l.controllers.begin(), l.controllers.end(), "memory") != l.controllers.end()) {
      if (auto mount = v1Mount(root, "memory"))
        walkUp(*mount, l.path, [&](const fs::path& dir, const std::string&) { add(dir / "memory.oom_control"); });
    }
  }
  return total;
}

ResidentMemory residentMemory(const HostPaths& paths) {
  ResidentMemory m;
  std::ifstream in(paths.proc_self_status);
  for (std::string line; std::getline(in, line);) {
    const bool rss = line.rfind("VmRSS:", 0) == 0, hwm = line.rfind("VmHWM:", 0) == 0;
    if (!rss && !hwm) continue;
    const int64_t kb = std::atoll(line.c_str() + 6);
    (rss ? m.now : m.peak) = kb * 1024;
  }
  return m;
}

bool resetPeakResident() {
  std::ofstream out("/proc/self/clear_refs");
  return bool(out << "5" << std::flush);
}

HostLimit taskLimit(const HostPaths& paths) {
  HostLimit best;
  auto room = [&](int64_t max, int64_t used, const std::string& source) {
    takeSmaller(best, std::max<int64_t>(1, max - used), source);  // 1: "none left" must not read as "no limit"
  };
  const fs::path root(paths.cgroup_root);
  for (const CgroupLine& l : readCgroupLines(paths.proc_self_cgroup)) {
    std::optional<fs::path> mount;
    if (l.controllers.empty()) mount = v2Mount(root);
    else if (std::find(l.controllers.begin(), l.controllers.end(), "pids") != l.controllers.end())
      mount = v1Mount(root, "pids");
    if (!mount) continue;
    walkUp(*mount, l.path, [&](const fs::path& dir, const std::string& cg) {
      if (auto max = readValue(dir / "pids.max"))
        room(*max, readValue(dir / "pids.current").value_or(0), "pids.max of cgroup " + cg);
    });
  }
  if (auto max = readValue(paths.threads_max)) {
    std::ifstream la(paths.loadavg);
    std::string a, b, c, running_total;
    int64_t total = 0;
    if (la >> a >> b >> c >> running_total && running_total.find('/') != std::string::npos)
      total = std::atoll(running_total.substr(running_total.find('/') + 1).c_str());
    room(*max, total, "kernel.threads-max");
  }
  rlimit rl{};
  if (geteuid() != 0 && getrlimit(RLIMIT_NPROC, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    takeSmaller(best, int64_t(rl.rlim_cur), "RLIMIT_NPROC (ulimit -u)");
  return best;
}

int64_t tasksPerRank(int64_t threads, int64_t lanes) { return threads * (lanes + 1) + kRankOwnTasks; }

int64_t lanesFor(int64_t threads, int64_t cpu_lanes, int64_t mbs) {
  return cpu_lanes > 0 ? cpu_lanes : std::max<int64_t>(1, std::min(threads, mbs));
}

int64_t threadsThatFit(int64_t room, int64_t ranks, int64_t cpu_lanes, int64_t mbs) {
  const int64_t per_rank = room / std::max<int64_t>(1, ranks);
  int64_t lo = 0, hi = std::max<int64_t>(0, per_rank);  // tasksPerRank(t) >= t + kRankOwnTasks
  while (lo < hi) {  // the largest t with tasksPerRank(t, lanes(t)) <= per_rank: it grows with t
    const int64_t t = lo + (hi - lo + 1) / 2;
    if (tasksPerRank(t, lanesFor(t, cpu_lanes, mbs)) <= per_rank) lo = t;
    else hi = t - 1;
  }
  return lo;
}

}  // namespace trainscope::runconfig
