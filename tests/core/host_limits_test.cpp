// host_limits_test.cpp — the memory and task limits a run is checked against (runtime/host.h), read
// from fake cgroup trees: v2, v1, hybrid, nested, and a container that sees only its own cgroup.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../common/cli.h"
#include "trainscope/runconfig/host.h"

namespace rt = trainscope::runtime;
namespace fs = std::filesystem;
using trainscope::testing::tempPath;

namespace {

// A fake /proc and /sys/fs/cgroup under a temporary folder.
struct FakeHost {
  explicit FakeHost(const std::string& name) : root(tempPath(name)) {
    fs::create_directories(root + "/cgroup");
    paths.proc_self_cgroup = root + "/self-cgroup";
    paths.cgroup_root = root + "/cgroup";
    paths.meminfo = root + "/meminfo";
    paths.threads_max = root + "/threads-max";
    paths.loadavg = root + "/loadavg";
    write("meminfo", "MemTotal:       33554432 kB\nMemAvailable:   16777216 kB\n");  // 16 GiB
  }
  void write(const std::string& rel, const std::string& text) const {
    fs::create_directories(fs::path(root + "/" + rel).parent_path());
    std::ofstream(root + "/" + rel) << text;
  }
  void cgroup(const std::string& rel, const std::string& file, const std::string& value) const {
    write("cgroup/" + rel + "/" + file, value + "\n");
  }
  std::string root;
  rt::HostPaths paths;
};

constexpr int64_t kGiB = int64_t(1) << 30;

}  // namespace

TEST(HostLimits, CgroupV2TakesTheSmallestLimitOfTheCgroupAndItsAncestorsIncludingMemoryHigh) {
  FakeHost h("v2");
  h.write("self-cgroup", "0::/user.slice/job/step\n");
  h.cgroup("", "cgroup.controllers", "cpu memory pids");
  h.cgroup("user.slice", "memory.max", std::to_string(8 * kGiB));
  h.cgroup("user.slice/job", "memory.max", std::to_string(2 * kGiB));  // the binding one, a level up
  h.cgroup("user.slice/job", "memory.high", "max");
  h.cgroup("user.slice/job/step", "memory.max", "max");
  h.cgroup("user.slice/job/step", "memory.high", std::to_string(4 * kGiB));
  rt::HostLimit m = rt::cgroupMemoryLimit(h.paths);
  EXPECT_EQ(m.value, 2 * kGiB);
  EXPECT_EQ(m.source, "memory.max of cgroup /user.slice/job");
  // memory.high below every memory.max binds too.
  h.cgroup("user.slice/job/step", "memory.high", std::to_string(kGiB));
  m = rt::cgroupMemoryLimit(h.paths);
  EXPECT_EQ(m.value, kGiB);
  EXPECT_EQ(m.source, "memory.high of cgroup /user.slice/job/step");
  // MemAvailable (16 GiB) is larger: the cgroup's limit is what is available.
  EXPECT_EQ(rt::memoryAvailable(h.paths).value, kGiB);
}

TEST(HostLimits, CgroupV1ReadsLimitInBytesUpTheMemoryHierarchyAndIgnoresItsUnlimitedValue) {
  FakeHost h("v1");
  h.write("self-cgroup", "9:pids:/\n5:cpu,cpuacct:/\n4:memory:/docker/abc\n0::/\n");
  h.cgroup("memory", "memory.limit_in_bytes", "9223372036854771712");  // v1's "no limit"
  h.cgroup("memory/docker", "memory.limit_in_bytes", std::to_string(3 * kGiB));
  h.cgroup("memory/docker/abc", "memory.limit_in_bytes", "9223372036854771712");
  h.cgroup("unified", "cgroup.controllers", "");  // hybrid: a v2 tree without the memory controller
  const rt::HostLimit m = rt::cgroupMemoryLimit(h.paths);
  EXPECT_EQ(m.value, 3 * kGiB);
  EXPECT_EQ(m.source, "memory.limit_in_bytes of cgroup /docker");
  // Without any limit, MemAvailable is what is available.
  FakeHost none("v1-none");
  none.write("self-cgroup", "4:memory:/a\n");
  none.cgroup("memory/a", "memory.limit_in_bytes", "9223372036854771712");
  EXPECT_EQ(rt::cgroupMemoryLimit(none.paths).value, 0);
  EXPECT_EQ(rt::memoryAvailable(none.paths).value, 16 * kGiB);
  EXPECT_EQ(rt::memoryAvailable(none.paths).source, "MemAvailable");
}

TEST(HostLimits, AContainerThatSeesOnlyItsOwnCgroupAtTheRootIsStillRead) {
  // /proc/self/cgroup names the host's path; the container's mount shows its own cgroup at the root.
  FakeHost h("ns");
  h.write("self-cgroup", "0::/system.slice/docker-1234.scope\n");
  h.cgroup("", "cgroup.controllers", "memory pids");
  h.cgroup("", "memory.max", std::to_string(512 << 20));
  const rt::HostLimit m = rt::cgroupMemoryLimit(h.paths);
  EXPECT_EQ(m.value, 512 << 20);
  EXPECT_EQ(m.source, "memory.max of cgroup /");
}

TEST(HostLimits, TasksLeftAreTheSmallestRoomOfThePidsCgroupsAndThreadsMax) {
  FakeHost h("pids");
  h.write("self-cgroup", "8:pids:/batch/job\n4:memory:/\n");
  h.cgroup("pids/batch", "pids.max", "500");
  h.cgroup("pids/batch", "pids.current", "420");  // 80 left here, though the job itself has room
  h.cgroup("pids/batch/job", "pids.max", "max");
  h.cgroup("pids/batch/job", "pids.current", "12");
  h.write("threads-max", "100000\n");
  h.write("loadavg", "0.10 0.20 0.30 2/1500 12345\n");
  rt::HostLimit t = rt::taskLimit(h.paths);
  EXPECT_EQ(t.value, 80);
  EXPECT_EQ(t.source, "pids.max of cgroup /batch");
  // v2: the same files in the unified tree.
  FakeHost v2("pids-v2");
  v2.write("self-cgroup", "0::/a\n");
  v2.cgroup("", "cgroup.controllers", "pids");
  v2.cgroup("a", "pids.max", "300");
  v2.cgroup("a", "pids.current", "100");
  v2.write("threads-max", "250\n");
  v2.write("loadavg", "0 0 0 1/60 1\n");
  t = rt::taskLimit(v2.paths);
  EXPECT_EQ(t.value, 190);  // threads-max 250 − 60 tasks on the host, below the cgroup's 200
  EXPECT_EQ(t.source, "kernel.threads-max");
}
