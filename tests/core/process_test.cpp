// process_test.cpp — starting, waiting for and decoding children (common/process.h), with scripted
// /bin/sh children: how they end, what they inherit, and that a timed-out group leaves nothing behind.
// No timing assertions: anything asynchronous is polled for with a generous deadline.
#include "trainscope/common/process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "../common/cli.h"
#include "trainscope/common/error.h"

namespace process = trainscope::process;
using trainscope::testing::tempPath;

namespace {

process::SpawnOptions shell(const std::string& script) {
  process::SpawnOptions s;
  s.argv = {"/bin/sh", "-c", script};
  return s;
}

process::Exit runShell(const std::string& script) { return process::wait(process::spawn(shell(script)), 0, false); }

// Polls `condition` until it holds or a deadline far beyond any expected delay passes.
template <class Condition>
bool eventually(Condition condition) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Dead: no such process, or a zombie its new parent (init, not us) has not reaped yet.
bool dead(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  const std::string stat = readFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
}

}  // namespace

TEST(Process, ExitZero) {
  const process::Exit e = runShell("exit 0");
  EXPECT_EQ(e.kind, process::Exit::Exited);
  EXPECT_EQ(e.code, 0);
  EXPECT_EQ(e.shellStatus(), 0);
  EXPECT_EQ(e.describe(), "exit status 0");
}

TEST(Process, ExitStatusIsKept) {
  const process::Exit e = runShell("exit 3");  // what the tuner reads as out of memory
  EXPECT_EQ(e.kind, process::Exit::Exited);
  EXPECT_EQ(e.code, trainscope::kExitOutOfMemory);
  EXPECT_EQ(e.signal, 0);
  EXPECT_EQ(e.shellStatus(), 3);
  EXPECT_EQ(e.describe(), "exit status 3");
}

TEST(Process, KilledBySignal) {
  const process::Exit e = runShell("ulimit -c 0; kill -SEGV $$");
  EXPECT_EQ(e.kind, process::Exit::Signaled);
  EXPECT_EQ(e.signal, SIGSEGV);
  EXPECT_EQ(e.shellStatus(), 128 + SIGSEGV);
  EXPECT_EQ(e.describe(), "killed by Segmentation fault");
}

TEST(Process, DescribeTexts) {
  process::Exit e;
  e.kind = process::Exit::TimedOut;
  e.signal = SIGKILL;
  e.timeout_s = 5;
  EXPECT_EQ(e.describe(), "no result within 5 s");
  EXPECT_EQ(e.shellStatus(), 128 + SIGKILL);
  EXPECT_EQ(process::decode(W_EXITCODE(2, 0)).describe(), "exit status 2");
  EXPECT_EQ(process::decode(W_EXITCODE(0, SIGTERM)).describe(), "killed by Terminated");
}

TEST(Process, TimeoutKillsTheWholeGroup) {
  // The child starts a grandchild in its group, writes its pid, and never ends by itself.
  const std::string pid_file = tempPath("process-grandchild.pid");
  process::SpawnOptions s = shell("sleep 30 & echo $! > " + pid_file + "; sleep 30");
  s.own_group = true;
  const pid_t pid = process::spawn(s);
  EXPECT_EQ(getpgid(pid), pid);
  pid_t grandchild = 0;
  ASSERT_TRUE(eventually([&] {
    const std::string text = readFile(pid_file);
    return !text.empty() && text.back() == '\n' && (grandchild = std::atoi(text.c_str())) > 0;
  }));

  const process::Exit e = process::wait(pid, 0.3, true);
  EXPECT_EQ(e.kind, process::Exit::TimedOut);
  EXPECT_EQ(e.signal, SIGKILL);
  EXPECT_EQ(e.timeout_s, 0.3);
  EXPECT_EQ(kill(pid, 0), -1);  // reaped
  EXPECT_EQ(errno, ESRCH);
  EXPECT_TRUE(eventually([&] { return dead(grandchild); })) << "grandchild " << grandchild << " survived";
}

TEST(Process, GroupLeftoversAreKilledWhenTheChildEnds) {
  // The child exits at once; the grandchild it left in its group must not outlive it.
  const std::string pid_file = tempPath("process-leftover.pid");
  process::SpawnOptions s = shell("sleep 30 & echo $! > " + pid_file);
  s.own_group = true;
  const process::Exit e = process::wait(process::spawn(s), 0, true);
  EXPECT_EQ(e.kind, process::Exit::Exited);
  EXPECT_EQ(e.code, 0);
  const pid_t grandchild = std::atoi(readFile(pid_file).c_str());
  ASSERT_GT(grandchild, 0);
  EXPECT_TRUE(eventually([&] { return dead(grandchild); })) << "grandchild " << grandchild << " survived";
}

TEST(Process, EnvironmentOverridesAndInherits) {
  setenv("TRAINSCOPE_PROCESS_TEST_INHERITED", "kept", 1);
  setenv("TRAINSCOPE_PROCESS_TEST_REPLACED", "old", 1);
  process::SpawnOptions s = shell(
      "[ \"$TRAINSCOPE_PROCESS_TEST_INHERITED\" = kept ] || exit 10; "
      "[ \"$TRAINSCOPE_PROCESS_TEST_REPLACED\" = new ] || exit 11; "
      "[ \"$TRAINSCOPE_PROCESS_TEST_ADDED\" = 'a b=c' ] || exit 12; "
      "[ \"$(env | grep -c '^TRAINSCOPE_PROCESS_TEST_REPLACED=')\" = 1 ] || exit 13");
  s.env = {{"TRAINSCOPE_PROCESS_TEST_REPLACED", "new"}, {"TRAINSCOPE_PROCESS_TEST_ADDED", "a b=c"}};
  const process::Exit e = process::wait(process::spawn(s), 0, false);
  unsetenv("TRAINSCOPE_PROCESS_TEST_INHERITED");
  unsetenv("TRAINSCOPE_PROCESS_TEST_REPLACED");
  EXPECT_EQ(e.describe(), "exit status 0");
}

TEST(Process, OnlyKeptDescriptorsAreInherited) {
  int kept[2], closed[2];
  ASSERT_EQ(pipe2(kept, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(closed, O_CLOEXEC), 0);
  process::SpawnOptions s =
      shell("[ -e /proc/self/fd/" + std::to_string(kept[1]) + " ] || exit 10; [ ! -e /proc/self/fd/" +
            std::to_string(closed[1]) + " ] || exit 11; echo through > /proc/self/fd/" + std::to_string(kept[1]));
  s.keep_fds = {kept[1]};
  const pid_t pid = process::spawn(s);
  close(kept[1]);
  close(closed[1]);
  const process::Exit e = process::wait(pid, 0, false);
  EXPECT_EQ(e.describe(), "exit status 0");
  char buf[64] = {};
  EXPECT_EQ(read(kept[0], buf, sizeof(buf) - 1), ssize_t(8));
  EXPECT_STREQ(buf, "through\n");
  EXPECT_EQ(fcntl(kept[0], F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);  // the parent's stay close-on-exec
  close(kept[0]);
  close(closed[0]);
}

TEST(Process, OutputGoesToTheGivenDescriptor) {
  const std::string path = tempPath("process-output.log");
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  process::SpawnOptions s = shell("echo out; echo err >&2");
  s.stdout_fd = s.stderr_fd = fd;
  const process::Exit e = process::wait(process::spawn(s), 0, false);
  close(fd);
  EXPECT_EQ(e.describe(), "exit status 0");
  EXPECT_EQ(readFile(path), "out\nerr\n");
}

TEST(Process, MissingProgramExits127) {
  process::SpawnOptions s;
  s.argv = {"/nonexistent/trainscope-no-such-program"};
  EXPECT_EQ(process::wait(process::spawn(s), 0, false).describe(), "exit status 127");
  s.argv = {"trainscope-no-such-program"};
  s.search_path = true;
  EXPECT_EQ(process::wait(process::spawn(s), 0, false).describe(), "exit status 127");
}

TEST(Process, SearchPathFindsTheProgram) {
  process::SpawnOptions s;
  s.argv = {"sh", "-c", "exit 4"};
  s.search_path = true;
  EXPECT_EQ(process::wait(process::spawn(s), 0, false).describe(), "exit status 4");
  s.env = {{"PATH", "/nonexistent"}};  // the child's PATH is the one searched
  EXPECT_EQ(process::wait(process::spawn(s), 0, false).describe(), "exit status 127");
}
