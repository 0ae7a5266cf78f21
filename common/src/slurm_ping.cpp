// slurm_ping.cpp — `scontrol ping` before a --launcher slurm run or tune (see slurm_ping.h).
#include "trainscope/common/slurm_ping.h"

#include <sys/mman.h>
#include <unistd.h>

#include <sstream>
#include <vector>

#include "trainscope/common/error.h"
#include "trainscope/common/process.h"

namespace trainscope::slurm {
namespace {

// The lines worth quoting: the banner of asterisks scontrol prints under a DOWN controller is left
// out, and of a list of errors the fatal one is kept ("scontrol: fatal: Could not establish a
// configuration source").
std::string quoted(const std::string& out) {
  std::vector<std::string> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.empty() || line[0] == '*') continue;
    if (line.find("fatal:") != std::string::npos) return line;
    lines.push_back(line);
  }
  std::string s;
  for (const std::string& l : lines) s += (s.empty() ? "" : "; ") + l;
  if (s.size() > 400) s = s.substr(0, 400) + "…";
  return s.empty() ? "no output" : s;
}

}  // namespace

Ping pingController(double timeout_s) {
  Ping p;
  // A memory file, not a pipe: read after the wait whatever scontrol wrote, never blocked on a full pipe.
  const int fd = ::memfd_create("trainscope-scontrol-ping", MFD_CLOEXEC);
  if (fd < 0) {
    p.said = "could not capture scontrol's output";
    return p;
  }
  process::SpawnOptions so;
  so.argv = {"scontrol", "ping"};
  so.search_path = true;
  so.own_group = true;
  so.stdout_fd = fd;
  so.stderr_fd = fd;
  pid_t pid = -1;
  try {
    pid = process::spawn(so);
  } catch (const std::exception& e) {
    ::close(fd);
    p.said = e.what();
    return p;
  }
  const process::Exit e = process::wait(pid, timeout_s, /*group=*/true);
  std::string out;
  char buf[4096];
  ::lseek(fd, 0, SEEK_SET);
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0 && out.size() < (1 << 16);) out.append(buf, size_t(n));
  ::close(fd);
  if (e.kind == process::Exit::Exited && e.code == 127) {
    p.said = "scontrol is not found in PATH";
    return p;
  }
  p.ran = true;
  if (e.kind == process::Exit::TimedOut) {
    p.said = e.describe();
    return p;
  }
  const bool up = out.find(" is UP") != std::string::npos;
  const bool down = out.find(" is DOWN") != std::string::npos;
  p.answers = up || (e.kind == process::Exit::Exited && e.code == 0 && !down);
  p.said = quoted(out);
  if (!p.answers && e.shellStatus() != 0) p.said += " (" + e.describe() + ")";
  return p;
}

void requireController(double timeout_s) {
  const Ping p = pingController(timeout_s);
  if (p.answers) return;
  if (!p.ran)
    throw UserError("--launcher slurm", "no Slurm controller answers (scontrol ping: " + p.said + ")",
                    "run inside a Slurm installation, or use --launcher local");
  throw UserError("--launcher slurm", "no Slurm controller answers (scontrol ping: " + p.said + ")",
                  "start slurmctld, or use --launcher local");
}

}  // namespace trainscope::slurm
