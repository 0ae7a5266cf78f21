// launch.cpp — local and Slurm launchers (see launch.h).
#include "trainscope/runtime/launch.h"

#include <arpa/inet.h>
#include <csignal>
#include <cstring>
#include <ctime>
#include <netinet/in.h>
#include <ostream>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <vector>
#include <map>
#include <thread>

#include "trainscope/common/error.h"
#include "trainscope/tracer/range.h"

namespace trainscope::runtime {
namespace {

std::string selfExe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) TRAINSCOPE_THROW("cannot find this executable through /proc/self/exe");
  buf[n] = 0;
  return buf;
}

// A port nobody listens on now (the kernel's choice); rank 0's store binds it moments later.
int freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) close(fd);
    TRAINSCOPE_THROW("cannot find a free TCP port on 127.0.0.1");
  }
  int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

// SIGINT/SIGTERM to the launcher: the first asks every rank to stop after its step; another one more
// than a second later (g_force) ends them at once. Within a second it is the same request arriving
// twice (Ctrl-C pressed twice, or a terminal and a script), as in the ranks (train.cpp).
volatile sig_atomic_t g_stop_signal = 0, g_force = 0;
std::atomic<int64_t> g_first_signal_ns{0};  // lock-free: safe in a handler
static_assert(std::atomic<int64_t>::is_always_lock_free);
void onSignal(int sig) {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  const int64_t now = int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  int64_t first = 0;
  if (g_first_signal_ns.compare_exchange_strong(first, now)) {
    g_stop_signal = sig;
  } else if (now - first > 1000000000) {
    g_force = 1;
  }
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

struct RankError {
  int rank = -1;
  int64_t time_ns = 0;
  std::string message;
};

// What a rank wrote to its error pipe: "TIME_NS\nMESSAGE\n" for its fatal error (empty: it reported
// nothing), and before it "stop\nLINE\n" when the run stopped on a signal (reportRankStop).
RankError parseRankError(std::string text, int rank, std::string* stop_line) {
  RankError e;
  if (text.rfind("stop\n", 0) == 0) {
    const size_t end = text.find('\n', 5);
    if (stop_line) *stop_line = text.substr(5, end == std::string::npos ? std::string::npos : end - 5);
    text = end == std::string::npos ? std::string() : text.substr(end + 1);
  }
  std::istringstream in(text);
  if (!(in >> e.time_ns)) return e;
  std::getline(in, e.message);
  std::string line;
  while (std::getline(in, line)) e.message += (e.message.empty() ? "" : " ") + line;
  e.rank = rank;
  return e;
}

void drain(int fd, std::string& into) {
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) into.append(buf, size_t(n));
}

}  // namespace

std::string userFacing(const std::string& message) {
  // "[DIR/.../NAME:LINE]" → "[NAME:LINE]": where it was thrown stays, the build machine's paths go.
  std::string out;
  size_t i = 0;
  while (i < message.size()) {
    const size_t open = message.find('[', i);
    if (open == std::string::npos) break;
    const size_t close = message.find(']', open);
    if (close == std::string::npos) break;
    const std::string inside = message.substr(open + 1, close - open - 1);
    const size_t colon = inside.rfind(':'), slash = inside.rfind('/', colon);
    const bool site = colon != std::string::npos && slash != std::string::npos && colon + 1 < inside.size() &&
                      inside.find_first_not_of("0123456789", colon + 1) == std::string::npos &&
                      inside.find(' ') == std::string::npos;
    out += message.substr(i, open + 1 - i);
    out += site ? inside.substr(slash + 1) : inside;
    out += ']';
    i = close + 1;
  }
  return out + message.substr(std::min(i, message.size()));
}

bool launchedByLocalLauncher() {
  const char* fd_text = std::getenv("TRAINSCOPE_ERROR_FD");
  return fd_text && *fd_text;
}

void reportRankError(const std::string& message) {
  if (!launchedByLocalLauncher()) return;
  static std::atomic<bool> reported{false};  // the first report is the root cause; keep its time
  if (reported.exchange(true)) return;
  // One write of at most PIPE_BUF bytes is atomic: the launcher reads whole reports.
  std::string text = std::to_string(tracer::nowNs()) + "\n" + userFacing(message).substr(0, 3000) + "\n";
  (void)!write(std::atoi(std::getenv("TRAINSCOPE_ERROR_FD")), text.data(), text.size());
}

bool reportRankStop(const std::string& line) {
  if (!launchedByLocalLauncher()) return false;
  std::string text = "stop\n" + line.substr(0, 1000) + "\n";
  return write(std::atoi(std::getenv("TRAINSCOPE_ERROR_FD")), text.data(), text.size()) == ssize_t(text.size());
}

int launchLocal(const LaunchOptions& o, std::ostream& err) {
  const std::string exe = selfExe();
  const int port = freePort();
  // Each rank reports its fatal error through its own pipe (no files: nothing to leak when the
  // launcher itself is killed).
  std::vector<int> err_read(size_t(o.nproc), -1);
  std::vector<std::string> err_text(size_t(o.nproc));
  std::map<pid_t, int> rank_of;
  std::map<int, int> exit_of;  // rank → exit code, for the ranks that failed
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  auto closePipes = [&] {
    for (int& fd : err_read) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  };
  for (int r = 0; r < o.nproc; ++r) {
    int fds[2];
    if (pipe(fds) != 0) {
      const std::string why = std::strerror(errno);
      for (const auto& [p, q] : rank_of) kill(p, SIGKILL);
      for (const auto& [p, q] : rank_of) waitpid(p, nullptr, 0);
      closePipes();
      TRAINSCOPE_THROW("cannot start rank " + std::to_string(r) + ": pipe failed: " + why);
    }
    pid_t pid = fork();
    if (pid < 0) {
      const std::string why = std::strerror(errno);
      close(fds[0]);
      close(fds[1]);
      for (const auto& [p, q] : rank_of) kill(p, SIGKILL);
      for (const auto& [p, q] : rank_of) waitpid(p, nullptr, 0);
      closePipes();
      TRAINSCOPE_THROW("cannot start rank " + std::to_string(r) + ": fork failed: " + why);
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the launcher
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(o.nproc).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(o.nproc).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      close(fds[0]);
      for (int fd : err_read)
        if (fd >= 0) close(fd);
      setenv("TRAINSCOPE_ERROR_FD", std::to_string(fds[1]).c_str(), 1);
      std::vector<char*> args;
      args.push_back(const_cast<char*>(exe.c_str()));
      for (size_t i = 1; i < o.argv.size(); ++i) args.push_back(const_cast<char*>(o.argv[i].c_str()));
      args.push_back(nullptr);
      execv(exe.c_str(), args.data());
      _exit(127);
    }
    close(fds[1]);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    fcntl(fds[0], F_SETFD, FD_CLOEXEC);
    err_read[size_t(r)] = fds[0];
    rank_of[pid] = r;
  }

  int exit_code = 0;
  std::string failure;
  auto stopAll = [&](int sig) {
    for (const auto& [pid, r] : rank_of) kill(pid, sig);
  };
  std::chrono::steady_clock::time_point term_sent{};
  bool terminating = false, stopping = false, term_pending = false;
  bool stop_by_rank = false;  // the stop began with a signal to a rank, not to us
  int signaled_rank = -1, signaled_status = 0;
  int stop_signal = 0;
  std::map<int, int> paused;  // rank → the signal that stopped it (SIGSTOP, SIGTSTP), while it is stopped
  while (!rank_of.empty()) {
    for (int r = 0; r < o.nproc; ++r) drain(err_read[size_t(r)], err_text[size_t(r)]);
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG | WUNTRACED | WCONTINUED);
    if (pid > 0 && (WIFSTOPPED(status) || WIFCONTINUED(status))) {
      // A rank stopped (SIGSTOP, Ctrl-Z) or continued: not an exit. Remembered, so that a failure it
      // causes in the others (a collective that times out) can name it.
      if (WIFSTOPPED(status)) paused[rank_of[pid]] = WSTOPSIG(status);
      else paused.erase(rank_of[pid]);
      continue;
    }
    if (pid > 0) {
      const int r = rank_of[pid];
      rank_of.erase(pid);
      paused.erase(r);
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok) exit_of[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      const int code = ok ? 0 : exit_of[r];
      const bool stop_exit = WIFEXITED(status) && (code == 128 + SIGINT || code == 128 + SIGTERM);
      if (stop_exit && !stopping && !terminating) {
        // A rank got SIGINT/SIGTERM itself (not through us): the ranks agreed to stop after the
        // same step (train.h, RunEnd::Stopped), and each exits with 128 + signal once the run is
        // recorded. A stop, not a failure: the others are finishing too.
        stopping = true;
        stop_by_rank = true;
        stop_signal = code - 128;
        term_sent = std::chrono::steady_clock::now();
        continue;
      }
      const bool stopped = stopping && (code == 128 + SIGINT || code == 128 + SIGTERM || code == 128 + SIGKILL);
      if (!ok && !terminating && !stopped) {
        // A rank that died of a signal (before anyone was stopped) never reports an error of its
        // own: it is the root cause, whatever its peers then write about closed connections.
        if (WIFSIGNALED(status)) {
          signaled_rank = r;
          signaled_status = status;
        }
        failure = "rank " + std::to_string(r) + " failed (" + describe(status) + ")";
        exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        for (const auto& [q, sig] : paused)
          failure += "; rank " + std::to_string(q) + " had been stopped (SIG" + std::string(sigabbrev_np(sig)) + ")";
        // The others are stopped a moment later, not at once: a rank that has reported its own
        // failure (out of memory, exit 3) is usually exiting already, and its status is the
        // run's; stopped mid-exit by our SIGTERM it would read as a crash.
        terminating = true;
        term_pending = true;
        term_sent = std::chrono::steady_clock::now();
      }
      continue;
    }
    if (g_stop_signal && !terminating && !stopping) {
      // Asked to stop: every rank finishes its step and records the run (train.h, RunEnd::Stopped).
      // A second signal more than a second later, or ranks that take longer than the stop grace,
      // end them at once.
      stop_signal = g_stop_signal;
      stopping = true;
      term_sent = std::chrono::steady_clock::now();
      stopAll(SIGTERM);
    }
    if (term_pending && std::chrono::steady_clock::now() - term_sent > std::chrono::milliseconds(500)) {
      term_pending = false;
      term_sent = std::chrono::steady_clock::now();
      stopAll(SIGTERM);
    }
    const auto waited = std::chrono::steady_clock::now() - term_sent;
    if ((terminating && waited > std::chrono::seconds(o.grace_seconds)) ||
        (stopping && (g_force || waited > std::chrono::seconds(o.stop_grace_seconds))))
      stopAll(SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // The root cause is the rank whose error came first, not the first one reaped.
  RankError first;
  std::string stop_line;  // rank 0's account of a stop
  for (int r = 0; r < o.nproc; ++r) {
    drain(err_read[size_t(r)], err_text[size_t(r)]);
    std::string line;
    RankError e = parseRankError(err_text[size_t(r)], r, &line);
    if (r == 0) stop_line = line;
    if (e.rank >= 0 && (first.rank < 0 || e.time_ns < first.time_ns)) first = e;
  }
  closePipes();
  if (stopping && failure.empty()) {
    if (exit_of.empty()) return 0;  // every rank had finished its run: nothing was stopped
    bool all_stopped = exit_of.size() == size_t(o.nproc);
    for (const auto& [r, code] : exit_of) all_stopped = all_stopped && (code == 128 + SIGINT || code == 128 + SIGTERM);
    // Rank 0's account: "stopped by Terminated [sent to rank 1] after step N; every rank finished its
    // step and DB holds what was recorded". When the signal was ours (and forwarded), it names ours.
    const size_t after = stop_line.find(" after step ");
    if (all_stopped && !stop_by_rank && after != std::string::npos)
      err << "stopped by " << strsignal(stop_signal) << stop_line.substr(after) << "\n";
    else if (all_stopped && stop_by_rank && !stop_line.empty())
      err << stop_line << "\n";
    else
      err << "stopped by " << strsignal(stop_signal)
          << (all_stopped ? ": every rank finished its step and the run was recorded"
                          : ": ranks were ended before they could record the run")
          << "\n";
    return 128 + stop_signal;
  }
  if (!failure.empty() && signaled_rank >= 0) {
    err << "error: rank " << signaled_rank << " failed first: it was killed by " << strsignal(WTERMSIG(signaled_status))
        << " (status " << 128 + WTERMSIG(signaled_status) << "); stopped the other ranks\n";
    return 128 + WTERMSIG(signaled_status);
  }
  if (!failure.empty()) {
    if (first.rank >= 0 && exit_of.count(first.rank) && exit_of[first.rank] != 0) exit_code = exit_of[first.rank];
    if (first.rank >= 0)
      err << "error: rank " << first.rank << " failed first: " << first.message << " (" << failure
          << "); stopped the other ranks\n";
    else
      err << "error: " << failure << "; stopped the other ranks\n";
    return exit_code == 0 ? 1 : exit_code;
  }
  return 0;
}

int launchSlurm(const LaunchOptions& o, std::ostream& err) {
  const std::string exe = selfExe();
  std::vector<std::string> cmd = {"srun", "--ntasks=" + std::to_string(o.nproc), "--kill-on-bad-exit=1",
                                  "--export=ALL", exe};
  for (size_t i = 1; i < o.argv.size(); ++i) cmd.push_back(o.argv[i]);
  std::vector<char*> args;
  for (auto& c : cmd) args.push_back(const_cast<char*>(c.c_str()));
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) TRAINSCOPE_THROW("fork failed for srun");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    execvp("srun", args.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    err << "error: --launcher slurm: could not run srun (fix: run inside a Slurm installation, or use --launcher local)\n";
    return 2;
  }
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    err << "error: srun failed (" << describe(status) << ")\n";
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
  return 0;
}

}  // namespace trainscope::runtime
