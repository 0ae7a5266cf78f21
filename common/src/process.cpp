// process.cpp — starting, waiting for and decoding child processes (see process.h).
#include "trainscope/common/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "trainscope/common/error.h"

extern char** environ;

namespace trainscope::process {
namespace {

// The parent's environment with `overrides` set or replaced, as "NAME=VALUE" strings.
std::vector<std::string> childEnvironment(const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    const bool replaced =
        std::any_of(overrides.begin(), overrides.end(), [&](const auto& o) { return o.first == name; });
    if (!replaced) out.push_back(entry);
  }
  for (const auto& [name, value] : overrides) out.push_back(name + "=" + value);
  return out;
}

// What execvp would run for `name`, found here because execvp is not async-signal-safe (it allocates).
// A name with a '/' is used as is; one found nowhere in PATH gives "" (the child exits 127).
std::string resolveProgram(const std::string& name, const std::vector<std::pair<std::string, std::string>>& env) {
  if (name.find('/') != std::string::npos) return name;
  const char* inherited = std::getenv("PATH");
  std::string path = inherited ? inherited : "/bin:/usr/bin";  // glibc's default when PATH is unset
  for (const auto& [key, value] : env)
    if (key == "PATH") path = value;
  for (size_t begin = 0; begin <= path.size();) {
    size_t end = path.find(':', begin);
    if (end == std::string::npos) end = path.size();
    const std::string dir = end == begin ? "." : path.substr(begin, end - begin);  // "" is the current folder
    const std::string candidate = dir + "/" + name;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    begin = end + 1;
  }
  return "";
}

std::vector<char*> pointers(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// In the child, between fork and exec: async-signal-safe calls only (no allocation, no locks).
[[noreturn]] void becomeChild(const SpawnOptions& o, pid_t parent, const char* program, char* const* argv,
                              char* const* envp) {
  if (o.own_group) setpgid(0, 0);
  if (o.death_signal != 0) {
    prctl(PR_SET_PDEATHSIG, o.death_signal);
    if (getppid() != parent) _exit(127);  // the parent died before prctl: nobody would stop us
  }
  // dup2 leaves the copy without close-on-exec; a descriptor already in place needs it cleared.
  const auto put = [](int fd, int target) {
    if (fd < 0) return;
    if (fd == target)
      fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) & ~FD_CLOEXEC);
    else
      dup2(fd, target);
  };
  put(o.stdout_fd, 1);
  put(o.stderr_fd, 2);
  for (int fd : o.keep_fds) fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) & ~FD_CLOEXEC);
  if (*program) execve(program, argv, envp);
  _exit(127);
}

}  // namespace

pid_t spawn(const SpawnOptions& o) {
  assert(!o.argv.empty());
  const std::string program = o.search_path ? resolveProgram(o.argv[0], o.env) : o.argv[0];
  const std::vector<std::string> env = childEnvironment(o.env);
  const std::vector<char*> argv = pointers(o.argv), envp = pointers(env);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::system_error(errno, std::generic_category(), "fork failed");
  if (pid == 0) becomeChild(o, parent, program.c_str(), argv.data(), envp.data());
  // Also here: a kill of the group right after spawn returns must not find it missing.
  if (o.own_group) setpgid(pid, pid);
  return pid;
}

std::string Exit::describe() const {
  switch (kind) {
    case Exited:
      return "exit status " + std::to_string(code);
    case Signaled:
      return std::string("killed by ") + strsignal(signal);
    case TimedOut:
      return "no result within " + std::to_string(int(timeout_s)) + " s";
  }
  return "";
}

int Exit::shellStatus() const { return signal != 0 ? 128 + signal : code; }

Exit decode(int wait_status) {
  assert(WIFEXITED(wait_status) || WIFSIGNALED(wait_status));
  Exit e;
  if (WIFSIGNALED(wait_status)) {
    e.kind = Exit::Signaled;
    e.signal = WTERMSIG(wait_status);
  } else {
    e.code = WEXITSTATUS(wait_status);
  }
  return e;
}

Exit wait(pid_t pid, double timeout_s, bool group) {
  const auto start = std::chrono::steady_clock::now();
  bool timed_out = false;
  auto pause = std::chrono::milliseconds(1);  // doubled up to 20 ms: short children are seen at once
  for (;;) {
    // WNOWAIT: seen to have ended but not reaped yet, so that its group can still be killed by its id.
    siginfo_t info{};
    const bool polling = timeout_s > 0 && !timed_out;
    if (waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT | (polling ? WNOHANG : 0)) != 0) {
      if (errno == EINTR) continue;
      TRAINSCOPE_THROW(std::string("waitid failed for process ") + std::to_string(pid) + ": " + std::strerror(errno));
    }
    if (info.si_pid == pid) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout_s) {
      timed_out = true;
      kill(group ? -pid : pid, SIGKILL);
      continue;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
  if (group) kill(-pid, SIGKILL);  // nothing of the group outlives its leader
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  Exit e = decode(status);
  if (timed_out) {
    e.kind = Exit::TimedOut;
    e.timeout_s = timeout_s;
  }
  return e;
}

int freePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("cannot find a free TCP port on 127.0.0.1");
  }
  const int port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

}  // namespace trainscope::process
