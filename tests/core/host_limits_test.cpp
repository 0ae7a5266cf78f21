// host_limits_test.cpp — the memory and task limits a run is checked against (runtime/host.h), read
// from fake cgroup trees: v2, v1, hybrid, nested, and a container that sees only its own cgroup.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../common/cli.h"
#include "trainscope/runconfig/host.h"

namespace rt = trainscope::runconfig;
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

TEST(HostLimits, ARankStartsThreadsTimesLanesPlusOneTasksAndTheFixFitsTheRoom) {
  // libgomp gives the main thread and each core lane a team of its own (issue 30).
  EXPECT_EQ(rt::tasksPerRank(1000, 2), 1000 * 3 + rt::kRankOwnTasks);
  EXPECT_EQ(rt::tasksPerRank(4, 1), 4 * 2 + rt::kRankOwnTasks);
  EXPECT_EQ(rt::lanesFor(1000, 0, 2), 2);   // auto: one per thread, up to mbs
  EXPECT_EQ(rt::lanesFor(3, 0, 16), 3);
  EXPECT_EQ(rt::lanesFor(8, 1, 16), 1);     // --cpu-lanes given
  // The largest --threads whose tasks fit: 3 × 989 + 32 = 2999 <= 3000 < 3 × 990 + 32.
  EXPECT_EQ(rt::threadsThatFit(3000, 1, 0, 2), 989);
  EXPECT_EQ(rt::threadsThatFit(6000, 2, 0, 2), 989);  // the room is shared by the ranks
  // Lanes follow the threads up to mbs 16: 17 t + 32 <= 1000 → t = 56; mbs 64: t (t + 1) + 32 <= 1000 → 30.
  EXPECT_EQ(rt::threadsThatFit(1000, 1, 0, 16), 56);
  EXPECT_EQ(rt::threadsThatFit(1000, 1, 0, 64), 30);
  EXPECT_EQ(rt::threadsThatFit(20, 1, 0, 2), 0);  // not even one thread beside the rank's own
  for (int64_t room : {33, 100, 3000, 123456})
    for (int64_t mbs : {1, 2, 16}) {
      const int64_t t = rt::threadsThatFit(room, 1, 0, mbs);
      EXPECT_LE(rt::tasksPerRank(t, rt::lanesFor(t, 0, mbs)), std::max<int64_t>(room, rt::kRankOwnTasks));
      EXPECT_GT(rt::tasksPerRank(t + 1, rt::lanesFor(t + 1, 0, mbs)), room);
    }
}

TEST(HostLimits, TheOutOfMemoryKillCountIsReadFromV2EventsAndV1OomControl) {
  FakeHost v2("oom-v2");
  v2.write("self-cgroup", "0::/job/step\n");
  v2.cgroup("", "cgroup.controllers", "memory pids");
  EXPECT_EQ(rt::oomKillCount(v2.paths), -1);  // nothing to read
  v2.cgroup("job/step", "memory.events", "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0");
  EXPECT_EQ(rt::oomKillCount(v2.paths), 2);
  v2.cgroup("job", "memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1");
  EXPECT_EQ(rt::oomKillCount(v2.paths), 3);  // summed over the levels: it rises with any of them
  FakeHost v1("oom-v1");
  v1.write("self-cgroup", "4:memory:/job\n3:pids:/job\n");
  v1.cgroup("memory/job", "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 5");
  EXPECT_EQ(rt::oomKillCount(v1.paths), 5);
}

TEST(HostLimits, ResidentMemoryIsReadFromProcStatus) {
  FakeHost h("status");
  h.paths.proc_self_status = h.root + "/status";
  h.write("status", "Name:\ttrainscope-train\nVmPeak:\t 9000 kB\nVmHWM:\t  524288 kB\nVmRSS:\t  262144 kB\n");
  const rt::ResidentMemory m = rt::residentMemory(h.paths);
  EXPECT_EQ(m.now, 256 << 20);
  EXPECT_EQ(m.peak, 512 << 20);
  const rt::ResidentMemory self = rt::residentMemory();  // this test process, for real
  EXPECT_GT(self.now, 0);
  EXPECT_GE(self.peak, self.now);
}
