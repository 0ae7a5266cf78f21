// cli.cpp — see cli.h.
#include "cli.h"

#include <ftw.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

namespace trainscope::testing {

namespace {
std::string folder() {
  return (std::filesystem::temp_directory_path() / ("trainscope-tests-" + std::to_string(getpid()))).string();
}
}  // namespace

std::string tempPath(const std::string& name) {
  std::filesystem::create_directories(folder());
  return folder() + "/" + name;
}

void removeTempFolder() {
  // Not std::filesystem::remove_all: libtorch.so exports its own copy of that symbol, which
  // crashes when called from a binary linking it (seen with torch 2.11's wheel). nftw does the same.
  nftw(folder().c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }, 16,
       FTW_DEPTH | FTW_PHYS);
}

CliResult sh(const std::string& cmd) {
  CliResult r;
  const auto t0 = std::chrono::steady_clock::now();
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  while (p && fgets(buf, sizeof(buf), p)) r.output += buf;
  const int st = p ? pclose(p) : -1;
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

CliResult cli(const std::string& args) { return sh(std::string(TRAINSCOPE_CLI) + " " + args); }

CliResult slowStagePipelineRun(const std::string& trace, int global_batch) {
  return sh("TRAINSCOPE_TEST_SLOW_RANK=1:200 " + std::string(TRAINSCOPE_CLI) +
            " run --workload tiny --seq 16 --mbs 1 --gbs " + std::to_string(global_batch) +
            " --steps 3 --nproc 2 --pp 2 --device cpu --cpu-lanes 1 --trace " + trace +
            " --trace-level ranges --overwrite -q");
}

}  // namespace trainscope::testing
