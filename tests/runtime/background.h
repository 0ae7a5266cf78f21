// background.h — runs of the command line in the background for tests that signal, stop or
// constrain them: the run itself (Background), its ranks' pids (rankPid), and this process's v1
// cgroups (ownV1Cgroup) to make a limited child cgroup in.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "../common/cli.h"

namespace trainscope::testing {

inline std::string readFile(const std::string& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A run in the background: its launcher's pid (`trainscope` execs `trainscope-train` in place),
// its log, and a way to wait for a line or for its end. Waits are for conditions, with generous caps.
struct Background {
  // `cgroup_dir`: a v1 cgroup folder the run starts in (its cgroup.procs), "" for this process's own.
  explicit Background(const std::string& args, const std::string& log_name, const std::string& cgroup_dir = "")
      : log(tempPath(log_name)) {
    pid = fork();
    if (pid == 0) {
      setpgid(0, 0);  // its own process group: a test's signals reach only what they name
      if (!cgroup_dir.empty()) {
        std::ofstream procs(cgroup_dir + "/cgroup.procs");
        if (!(procs << getpid() << "\n" << std::flush)) _exit(126);
      }
      const std::string cmd = "exec " + std::string(TRAINSCOPE_CLI) + " " + args + " > " + log + " 2>&1";
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~Background() {
    if (pid > 0 && !reaped) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  bool waitFor(const std::string& text, int seconds = 300) const {
    for (int i = 0; i < seconds * 20; ++i) {
      if (readFile(log).find(text) != std::string::npos) return true;
      usleep(50000);
    }
    return false;
  }
  int wait() {  // exit status, 128 + signal when killed
    int st = 0;
    waitpid(pid, &st, 0);
    reaped = true;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  // The exit status when it ends within `seconds` (a generous cap, not a measure of speed); nullopt
  // when it is still running then (a hang).
  std::optional<int> waitUpTo(int seconds) {
    for (int i = 0; i < seconds * 20; ++i) {
      int st = 0;
      if (waitpid(pid, &st, WNOHANG) == pid) {
        reaped = true;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      usleep(50000);
    }
    return std::nullopt;
  }
  std::string output() const { return readFile(log); }

  std::string log;
  pid_t pid = -1;
  bool reaped = false;
};

// The pid of the launcher's child that is rank `rank` (its RANK in /proc/PID/environ), or -1.
inline pid_t rankPid(pid_t launcher, int rank) {
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != launcher) continue;
    std::istringstream env(readFile((e.path() / "environ").string()));
    for (std::string var; std::getline(env, var, '\0');)
      if (var == "RANK=" + std::to_string(rank)) return pid_t(std::stol(name));
  }
  return -1;
}

// This process's cgroup in a v1 hierarchy ("" at its root, "/a/b" below); nullopt without that
// hierarchy.
inline std::optional<std::string> ownV1Cgroup(const std::string& controller) {
  std::istringstream in(readFile("/proc/self/cgroup"));
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::istringstream names(line.substr(a + 1, b - a - 1));
    for (std::string n; std::getline(names, n, ',');)
      if (n == controller) {
        std::string path = line.substr(b + 1);
        while (!path.empty() && path.back() == '/') path.pop_back();
        return path;
      }
  }
  return std::nullopt;
}

}  // namespace trainscope::testing
