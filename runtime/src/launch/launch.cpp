// launch.cpp — local and Slurm launchers (see launch.h).
#include "trainscope/runtime/launch.h"

#include <arpa/inet.h>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <netinet/in.h>
#include <ostream>
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
#include <system_error>
#include <vector>
#include <map>
#include <thread>

#include "trainscope/common/error.h"
#include "trainscope/common/process.h"
#include "trainscope/runconfig/host.h"
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

// SIGINT/SIGTERM/SIGHUP to the launcher: the first asks every rank to stop after its step; another one more
// than a second later (g_force) ends them at once. Within a second it is the same request arriving
// twice (Ctrl-C pressed twice, or a terminal and a script), as in the ranks (train.cpp).
volatile sig_atomic_t g_stop_signal = 0, g_force = 0;
std::atomic<int64_t> g_first_signal_ns{0};  // lock-free: safe in a handler
static_assert(std::atomic<int64_t>::is_always_lock_free);
void onSignal(int sig) {
  if (sig == SIGHUP) signal(SIGPIPE, SIG_IGN);  // the terminal is gone: a write there must not end us
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

// A rank's status after it stopped on a signal and recorded the run (128 + SIGINT, SIGTERM or SIGHUP).
bool isStopStatus(int code) { return code == 128 + SIGINT || code == 128 + SIGTERM || code == 128 + SIGHUP; }

// How a rank (or srun) ended, in the launcher's words: "exit status 1", "signal Segmentation fault".
std::string describe(const process::Exit& e) {
  return e.kind == process::Exit::Signaled ? std::string("signal ") + strsignal(e.signal) : e.describe();
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

std::string withoutLibraryBacktrace(std::string message) {
  // c10::Error::what(): "MESSAGE\nException raised from FUNC at FILE:LINE (most recent call first):\n
  // frame #0: …"; a C++ backtrace may also follow without that line.
  for (const char* start : {"Exception raised from ", "frame #"}) {
    const size_t at = message.find(start);
    if (at == std::string::npos) continue;
    const size_t line = message.rfind('\n', at);
    message.erase(line == std::string::npos ? at : line);
  }
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  return message;
}

std::string killerOf(int signal, int64_t oom_kills_before, int64_t oom_kills_after, int64_t limit_bytes,
                     const std::string& limit_source) {
  const bool counted = oom_kills_before >= 0 && oom_kills_after >= 0;
  if (signal != SIGKILL || limit_bytes <= 0 || (counted && oom_kills_after <= oom_kills_before))
    return strsignal(signal);
  char mib[32];
  std::snprintf(mib, sizeof(mib), "%.1f MiB", double(limit_bytes) / (1024.0 * 1024.0));
  return std::string("the out-of-memory killer (cgroup limit ") + mib + ": " + limit_source + ")";
}

std::string userFacing(const std::string& text) {
  const std::string message = withoutLibraryBacktrace(text);
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

namespace {

// One local run: the ranks it started, their error pipes, and what supervising them has seen.
// run() starts the ranks, reaps them as they end (stopping the others when one fails, or when we are
// asked to stop), and reports how the run ended. Messages and exit statuses are what users and tests
// read: change them only on purpose.
class LocalLaunch {
 public:
  LocalLaunch(const LaunchOptions& o, std::ostream& err, rundb::RunFailure* failure)
      : o_(o), err_(err), failure_out_(failure), err_read_(size_t(o.nproc), -1), err_text_(size_t(o.nproc)) {}
  ~LocalLaunch() { closePipes(); }
  LocalLaunch(const LocalLaunch&) = delete;
  LocalLaunch& operator=(const LocalLaunch&) = delete;

  int run() {
    const std::string exe = selfExe();
    int port = 0;
    try {
      port = process::freePort();
    } catch (const std::runtime_error& e) {
      TRAINSCOPE_THROW(e.what());
    }
    struct sigaction sa {};
    sa.sa_handler = onSignal;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGHUP, &sa, nullptr);  // a closed terminal, a dropped ssh
    limit_ = cgroupMemoryLimit();
    oom_kills_ = oomKillCount();
    startRanks(exe, port);
    supervise();
    return report();
  }

 private:
  using Clock = std::chrono::steady_clock;

  // Each rank reports its fatal error through its own pipe (no files: nothing to leak when the
  // launcher itself is killed). The write end is the only descriptor of ours a rank inherits.
  void startRanks(const std::string& exe, int port) {
    for (int r = 0; r < o_.nproc; ++r) {
      int fds[2];
      if (pipe2(fds, O_CLOEXEC) != 0) abandon(r, std::string("pipe failed: ") + std::strerror(errno));
      pid_t pid = -1;
      try {
        pid = process::spawn(rankOptions(exe, port, r, fds[1]));
      } catch (const std::system_error& e) {  // "fork failed: <why>"
        close(fds[0]);
        close(fds[1]);
        abandon(r, e.what());
      }
      close(fds[1]);
      fcntl(fds[0], F_SETFL, O_NONBLOCK);
      err_read_[size_t(r)] = fds[0];
      rank_of_[pid] = r;
      if (r == 0 && failure_out_) failure_out_->writer_pid = pid;
    }
  }

  // torchrun's variables, and the pipe to report a fatal error through.
  process::SpawnOptions rankOptions(const std::string& exe, int port, int r, int error_fd) const {
    process::SpawnOptions s;
    s.argv.push_back(exe);
    for (size_t i = 1; i < o_.argv.size(); ++i) s.argv.push_back(o_.argv[i]);
    const std::string rank = std::to_string(r), world = std::to_string(o_.nproc);
    s.env = {{"RANK", rank},
             {"LOCAL_RANK", rank},
             {"WORLD_SIZE", world},
             {"LOCAL_WORLD_SIZE", world},
             {"MASTER_ADDR", "127.0.0.1"},
             {"MASTER_PORT", std::to_string(port)},
             {"TRAINSCOPE_ERROR_FD", std::to_string(error_fd)}};
    s.death_signal = SIGKILL;  // never outlive the launcher
    s.keep_fds = {error_fd};
    return s;
  }

  // Rank r could not be started: the ranks already running are ended before the error goes up.
  [[noreturn]] void abandon(int r, const std::string& why) {
    for (const auto& [p, q] : rank_of_) kill(p, SIGKILL);
    for (const auto& [p, q] : rank_of_) waitpid(p, nullptr, 0);
    closePipes();
    TRAINSCOPE_THROW("cannot start rank " + std::to_string(r) + ": " + why);
  }

  void closePipes() {
    for (int& fd : err_read_) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  }

  void signalAll(int sig) {
    for (const auto& [pid, r] : rank_of_) kill(pid, sig);
  }

  // Ending the others after a failure: SIGTERM, but SIGKILL to a stopped rank (SIGSTOP, Ctrl-Z),
  // which acts on nothing else until it is continued.
  void endOthers() {
    for (const auto& [pid, r] : rank_of_) kill(pid, paused_.count(r) ? SIGKILL : SIGTERM);
  }

  // A rank that reported its fatal error exits moments later. One that is still there after the
  // grace (blocked on a peer that is stopped, in a library's teardown) fails the run as if it had
  // exited: it is ended with the others.
  void watchReporters() {
    if (terminating_ || stopping_) return;
    for (int r = 0; r < o_.nproc; ++r) {
      if (reported_at_.count(r) || parseRankError(err_text_[size_t(r)], r, nullptr).rank < 0) continue;
      reported_at_[r] = Clock::now();
    }
    for (const auto& [r, at] : reported_at_) {
      if (Clock::now() - at <= std::chrono::seconds(2 * o_.grace_seconds)) continue;
      failed_rank_ = r;
      failure_ = "rank " + std::to_string(r) + " failed (it did not exit within " +
                 std::to_string(2 * o_.grace_seconds) + " s of its error)";
      exit_code_ = 1;
      exit_of_[r] = 1;
      for (const auto& [q, sig] : paused_)
        failure_ += "; rank " + std::to_string(q) + " had been stopped (SIG" + std::string(sigabbrev_np(sig)) + ")";
      terminating_ = true;
      term_sent_ = Clock::now();
      for (const auto& [pid, q] : rank_of_)
        if (q == r) kill(pid, SIGKILL);
      endOthers();
      return;
    }
  }

  void supervise() {
    while (!rank_of_.empty()) {
      for (int r = 0; r < o_.nproc; ++r) drain(err_read_[size_t(r)], err_text_[size_t(r)]);
      int status = 0;
      const pid_t pid = waitpid(-1, &status, WNOHANG | WUNTRACED | WCONTINUED);
      if (pid > 0 && (WIFSTOPPED(status) || WIFCONTINUED(status))) {
        // A rank stopped (SIGSTOP, Ctrl-Z) or continued: not an exit. Remembered, so that a failure it
        // causes in the others (a collective that times out) can name it.
        if (WIFSTOPPED(status))
          paused_[rank_of_[pid]] = WSTOPSIG(status);
        else
          paused_.erase(rank_of_[pid]);
        continue;
      }
      if (pid > 0) {
        handleExit(pid, process::decode(status));
        continue;
      }
      if (g_stop_signal && !terminating_ && !stopping_) handleStop();
      watchReporters();
      escalate();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  void handleExit(pid_t pid, const process::Exit& e) {
    const int r = rank_of_[pid];
    rank_of_.erase(pid);
    paused_.erase(r);
    const int code = e.shellStatus();
    const bool ok = code == 0;
    if (!ok) exit_of_.emplace(r, code);  // kept when the grace already failed it (watchReporters)
    const bool stop_code = isStopStatus(code);
    if (e.kind == process::Exit::Exited && stop_code && !stopping_ && !terminating_) {
      // A rank got SIGINT/SIGTERM/SIGHUP itself (not through us): the ranks agreed to stop after the
      // same step (train.h, RunEnd::Stopped), and each exits with 128 + signal once the run is
      // recorded. A stop, not a failure: the others are finishing too.
      stopping_ = true;
      stop_by_rank_ = true;
      stop_signal_ = code - 128;
      term_sent_ = Clock::now();
      return;
    }
    const bool stopped = stopping_ && (stop_code || code == 128 + SIGKILL);
    if (ok || terminating_ || stopped) return;
    // A rank that died of a signal (before anyone was stopped) never reports an error of its
    // own: it is the root cause, whatever its peers then write about closed connections.
    if (e.kind == process::Exit::Signaled) {
      signaled_rank_ = r;
      signaled_signal_ = e.signal;
      signaled_oom_kills_ = oomKillCount();  // read now: the kernel counts the kill before the parent sees it
    }
    failed_rank_ = r;
    failure_ = "rank " + std::to_string(r) + " failed (" + describe(e) + ")";
    exit_code_ = code;
    for (const auto& [q, sig] : paused_)
      failure_ += "; rank " + std::to_string(q) + " had been stopped (SIG" + std::string(sigabbrev_np(sig)) + ")";
    // The others are stopped a moment later, not at once: a rank that has reported its own
    // failure (out of memory, exit 3) is usually exiting already, and its status is the
    // run's; stopped mid-exit by our SIGTERM it would read as a crash.
    terminating_ = true;
    term_pending_ = true;
    term_sent_ = Clock::now();
  }

  // Asked to stop: every rank finishes its step and records the run (train.h, RunEnd::Stopped).
  // A second signal more than a second later, or ranks that take longer than the stop grace,
  // end them at once (escalate).
  void handleStop() {
    stop_signal_ = g_stop_signal;
    stopping_ = true;
    term_sent_ = Clock::now();
    signalAll(SIGTERM);
  }

  // After a failure: SIGTERM to the others once the pending moment has passed, SIGKILL past the grace.
  // After a stop: SIGKILL on a forced stop or past the stop grace.
  void escalate() {
    if (term_pending_ && Clock::now() - term_sent_ > std::chrono::milliseconds(500)) {
      term_pending_ = false;
      term_sent_ = Clock::now();
      endOthers();
    }
    const auto waited = Clock::now() - term_sent_;
    if ((terminating_ && waited > std::chrono::seconds(o_.grace_seconds)) ||
        (stopping_ && (g_force || waited > std::chrono::seconds(o_.stop_grace_seconds))))
      signalAll(SIGKILL);
  }

  int report() {
    // The root cause is the rank whose error came first, not the first one reaped.
    RankError first;
    std::string stop_line;  // rank 0's account of a stop
    for (int r = 0; r < o_.nproc; ++r) {
      drain(err_read_[size_t(r)], err_text_[size_t(r)]);
      std::string line;
      RankError e = parseRankError(err_text_[size_t(r)], r, &line);
      if (e.rank >= 0) error_of_[r] = e.message;
      if (r == 0) stop_line = line;
      if (e.rank >= 0 && (first.rank < 0 || e.time_ns < first.time_ns)) first = e;
    }
    closePipes();
    if (stopping_ && failure_.empty()) return reportStop(stop_line);
    if (!failure_.empty()) return reportFailure(first);
    return 0;
  }

  // For the run database: the rank named as failing first, and each rank's end (exit status, error).
  void fillFailure(int first_rank, const std::string& killer) {
    if (!failure_out_) return;
    failure_out_->first_rank = first_rank;
    for (int r = 0; r < o_.nproc; ++r) {
      const auto code = exit_of_.find(r);
      const auto said = error_of_.find(r);
      if (code == exit_of_.end() && said == error_of_.end()) continue;
      rundb::RankFailure f;
      f.rank = r;
      f.exit_status = code == exit_of_.end() ? 0 : code->second;
      f.error = said != error_of_.end() ? said->second : r == signaled_rank_ ? "killed by " + killer : "";
      failure_out_->ranks.push_back(std::move(f));
    }
  }

  // `first`: the rank whose reported error came first, if any did.
  int reportFailure(const RankError& first) {
    if (signaled_rank_ >= 0) {
      const std::string killer =
          killerOf(signaled_signal_, oom_kills_, signaled_oom_kills_, limit_.value, limit_.source);
      fillFailure(signaled_rank_, killer);
      if (killer != strsignal(signaled_signal_))
        err_ << "error: rank " << signaled_rank_ << " was killed by " << killer << " (status "
             << 128 + signaled_signal_ << "); stopped the other ranks (fix: lower --mbs, add --ckpt full, run fewer "
             << "ranks on this host, or raise the limit)\n";
      else
        err_ << "error: rank " << signaled_rank_ << " failed first: it was killed by " << killer << " (status "
             << 128 + signaled_signal_ << "); stopped the other ranks\n";
      return 128 + signaled_signal_;
    }
    int exit_code = exit_code_;
    if (first.rank >= 0 && exit_of_.count(first.rank) && exit_of_[first.rank] != 0) exit_code = exit_of_[first.rank];
    fillFailure(first.rank >= 0 ? first.rank : failed_rank_, "");
    if (first.rank >= 0)
      err_ << "error: rank " << first.rank << " failed first: " << first.message << " (" << failure_
           << "); stopped the other ranks\n";
    else
      err_ << "error: " << failure_ << "; stopped the other ranks\n";
    return exit_code == 0 ? 1 : exit_code;
  }

  int reportStop(const std::string& stop_line) {
    if (exit_of_.empty()) return 0;  // every rank had finished its run: nothing was stopped
    bool all_stopped = exit_of_.size() == size_t(o_.nproc);
    for (const auto& [r, code] : exit_of_) all_stopped = all_stopped && isStopStatus(code);
    // Rank 0's account: "stopped by Terminated [sent to rank 1] after step N; every rank finished its
    // step and DB holds what was recorded". When the signal was ours (and forwarded), it names ours.
    const size_t after = stop_line.find(" after step ");
    if (all_stopped && !stop_by_rank_ && after != std::string::npos)
      err_ << "stopped by " << strsignal(stop_signal_) << stop_line.substr(after) << "\n";
    else if (all_stopped && stop_by_rank_ && !stop_line.empty())
      err_ << stop_line << "\n";
    else
      err_ << "stopped by " << strsignal(stop_signal_)
           << (all_stopped ? ": every rank finished its step and the run was recorded"
                           : ": ranks were ended before they could record the run")
           << "\n";
    return 128 + stop_signal_;
  }

  const LaunchOptions& o_;
  std::ostream& err_;
  rundb::RunFailure* failure_out_;     // filled after a failure (may be null)
  std::map<int, std::string> error_of_;  // rank → the error it reported
  int failed_rank_ = -1;               // the rank of failure_
  std::vector<int> err_read_;          // rank → the read end of its error pipe
  std::vector<std::string> err_text_;  // rank → what it wrote there so far
  std::map<pid_t, int> rank_of_;       // the ranks still running
  std::map<int, int> exit_of_;         // rank → exit code, for the ranks that failed
  std::map<int, int> paused_;          // rank → the signal that stopped it (SIGSTOP, SIGTSTP), while it is stopped
  std::map<int, Clock::time_point> reported_at_;  // rank → when its fatal error was read (watchReporters)
  std::string failure_;                // the first failure, as "rank R failed (…)"
  int exit_code_ = 0;                  // its status
  int signaled_rank_ = -1, signaled_signal_ = 0;  // when that rank was killed by a signal
  HostLimit limit_;                               // the cgroup's memory limit, if any
  int64_t oom_kills_ = -1, signaled_oom_kills_ = -1;  // the cgroup's oom_kill count at the start, and then
  bool terminating_ = false;                      // a rank failed: the others are being ended
  bool term_pending_ = false;                     // … after a moment (escalate)
  bool stopping_ = false;                         // the run is stopping on a signal
  bool stop_by_rank_ = false;                     // the stop began with a signal to a rank, not to us
  int stop_signal_ = 0;
  Clock::time_point term_sent_{};  // when the ending or the stop began
};

}  // namespace

int launchLocal(const LaunchOptions& o, std::ostream& err, rundb::RunFailure* failure) {
  return LocalLaunch(o, err, failure).run();
}

int launchSlurm(const LaunchOptions& o, std::ostream& err) {
  const std::string exe = selfExe();
  process::SpawnOptions s;
  s.argv = {"srun", "--ntasks=" + std::to_string(o.nproc), "--kill-on-bad-exit=1", "--export=ALL", exe};
  // A tuner's trial: the step takes the study's name, by which the tuner cancels what srun leaves.
  if (const char* name = std::getenv("TRAINSCOPE_SLURM_STEP_NAME"); name && *name)
    s.argv.insert(s.argv.begin() + 3, std::string("--job-name=") + name);
  for (size_t i = 1; i < o.argv.size(); ++i) s.argv.push_back(o.argv[i]);
  s.search_path = true;
  s.death_signal = SIGTERM;
  pid_t pid = -1;
  try {
    pid = process::spawn(s);
  } catch (const std::system_error&) {
    TRAINSCOPE_THROW("fork failed for srun");
  }
  const process::Exit e = process::wait(pid, 0, false);
  if (e.kind == process::Exit::Exited && e.code == 127) {
    err << "error: --launcher slurm: could not run srun (fix: run inside a Slurm installation, or use --launcher local)\n";
    return 2;
  }
  if (e.shellStatus() != 0) {
    err << "error: srun failed (" << describe(e) << ")\n";
    return e.kind == process::Exit::Exited ? e.code : 1;
  }
  return 0;
}

}  // namespace trainscope::runtime
