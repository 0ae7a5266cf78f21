// viewer_app_support.h — what the tests of trainscope-viewer itself share (viewer_app_test.cpp,
// viewer_app_runs_test.cpp, viewer_app_panels_test.cpp): an Xvfb of the test process's own, the viewer
// run on a synthetic trace or a long real-name run with its screenshot and --layout read back, the
// layout's x of a time and its rows, a guard against a hang, and a one-trial study. Not for the model
// tests (viewer_support.h): these start the app.
#pragma once

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "../common/ruler_label.h"
#include "trainscope/rundb/sqlite.h"
#include "trainscope/rundb/store.h"
#include "trainscope/tuner/study.h"
#include "trainscope/viewer/details.h"
#include "trainscope/viewer/image.h"
#include "trainscope/viewer/model.h"
#include "trainscope/viewer/query.h"
#include "trainscope/viewer/ruler.h"
#include "trainscope/viewer/stats.h"
#include "trainscope/viewer/diff.h"

namespace trainscope::testing {

// An X server of our own for this test process: Xvfb picks a free display and tells us which
// (-displayfd); it is stopped when the process exits. Nothing outside the test is touched.
class Xvfb {
 public:
  Xvfb() {
    int fd[2];
    if (pipe(fd) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);  // and with this test process, however it ends
      close(fd[0]);
      const std::string out = std::to_string(fd[1]);
      execlp("Xvfb", "Xvfb", "-displayfd", out.c_str(), "-screen", "0", "1920x1080x24", "-nolisten", "tcp",
             static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fd[1]);
    char buf[32] = {};
    ssize_t n = 0, got = 0;
    while (got < ssize_t(sizeof buf) - 1 && (n = read(fd[0], buf + got, sizeof buf - 1 - size_t(got))) > 0) {
      got += n;
      if (buf[got - 1] == '\n') break;
    }
    close(fd[0]);
    if (got > 0) setenv("DISPLAY", (":" + std::string(buf, size_t(got) - (buf[got - 1] == '\n'))).c_str(), 1);
  }
  ~Xvfb() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }

 private:
  pid_t pid_ = -1;
};

// One server for the whole test process, whichever file asks first (inline: one static, not one per file).
inline void ensureDisplay() { static Xvfb server; }

}  // namespace trainscope::testing

namespace v = trainscope::viewer;
using trainscope::testing::sh;
using trainscope::testing::tempPath;

namespace {
namespace db = trainscope::rundb;

const std::string kViewer = TRAINSCOPE_VIEWER;

using trainscope::testing::ensureDisplay;

inline std::string trace() {
  const std::string p = tempPath("app.db");
  if (!std::filesystem::exists(p)) v::writeSyntheticTrace(p, {2, 6'000, 3});
  return p;
}

struct Shot {
  trainscope::testing::CliResult run;
  v::Image img;
  nlohmann::json layout;
};

inline Shot shoot(const std::string& files, const std::string& extra, const std::string& name) {
  ensureDisplay();
  Shot s;
  const std::string png = tempPath(name + ".png"), layout = tempPath(name + ".json");
  s.run = sh(kViewer + " " + files + " --screenshot " + png + " --layout " + layout + " --size 1400x800 " + extra);
  if (s.run.status == 0) {
    s.img = v::readPng(png);
    s.layout = nlohmann::json::parse(std::ifstream(layout));
  }
  return s;
}

// The screen x of an absolute time, from the layout the viewer reported.
inline float xOf(const nlohmann::json& l, int64_t t) {
  const double t0 = l["view"]["t0"], t1 = l["view"]["t1"];
  const double x0 = l["timeline"]["x0"], x1 = l["timeline"]["x1"];
  const int64_t origin = l["view"]["origin"];
  return float(x0 + (double(t - origin) - t0) / (t1 - t0) * (x1 - x0));
}

inline const nlohmann::json* row(const nlohmann::json& l, int64_t rank, const std::string& label, int lane) {
  for (const auto& r : l["rows"])
    if (r["rank"] == rank && r["label"] == label && r["lane"] == lane) return &r;
  return nullptr;
}

// The viewer under a guard: a run that would hang (a FIFO opened, a loop that never ends) is stopped
// after `limit` seconds and reported as status 124, which the tests treat as a failure.
inline trainscope::testing::CliResult guarded(const std::string& args, int limit = 240) {
  ensureDisplay();
  return sh("timeout -s KILL " + std::to_string(limit) + " " + kViewer + " " + args);
}
inline bool hung(const trainscope::testing::CliResult& r) { return r.status == 124 || r.status == 128 + SIGKILL; }

inline std::set<std::string> listing(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A study with one finished trial whose run database is `trial_db`.
inline void makeStudy(const std::string& path, const std::string& trial_db) {
  trainscope::tuner::Study st(path, R"({"workload":"tiny","cluster":"cpu-local","memory_bytes":1000000})", false);
  trainscope::tuner::TrialRecord tr;
  tr.candidate = 0;
  tr.steps = 3;
  tr.db_path = trial_db;
  tr.id = st.beginTrial(tr);
  tr.status = trainscope::tuner::TrialStatus::Ok;
  tr.step_s = 0.2;
  tr.predicted_step_s = 0.25;
  tr.peak_bytes = 800000;
  st.finishTrial(tr);
}

inline int64_t parseLabel(const std::string& s) { return trainscope::testing::parseRulerLabel(s); }

constexpr int64_t kEpoch = 1'700'000'000'000'000'000;

// A run of one rank and 101 s: a kernel at the start, kernels with real CUDA names 100.345 s in, one
// at the end, and a second stream 17% busy with short kernels (1.7 us every 10 us for 50 ms).
inline std::string longRun() {
  const std::string p = tempPath("long_run.db");
  if (std::filesystem::exists(p)) return p;
  trainscope::rundb::RunStore st(p, {true, "--out", true});
  st.setMeta("world_size", "1");
  st.putRank({0, "node0", "cuda:0"});
  st.begin();
  std::vector<trainscope::rundb::Kernel> ks;
  auto kernel = [&](int64_t a, int64_t b, int64_t stream, const std::string& name) {
    trainscope::rundb::Kernel k{kEpoch + a, kEpoch + b, 0, stream, st.intern(name), -1};
    ks.push_back(k);
  };
  kernel(0, 5'000, 7, "ampere_sgemm_128x64_nn");
  // 100.345 100 s .. 100.346 200 s: one kernel that fills a 1 us window at 100.345 12 s.
  kernel(100'345'100'000, 100'346'200'000, 7, "ampere_sgemm_128x64_nn");
  const int64_t at = 100'400'000'000;
  kernel(at, at + 2'000'000, 7,
         "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_");
  kernel(at + 2'500'000, at + 4'500'000, 7, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)");
  for (int64_t t = 0; t < 50'000'000; t += 10'000) kernel(at + t, at + t + 1'700, 9, "elementwise_kernel");
  kernel(101'000'000'000, 101'000'005'000, 7, "ampere_sgemm_128x64_nn");
  st.put(ks);
  st.commit();
  st.createIndexes();
  st.close();
  return p;
}

}  // namespace
