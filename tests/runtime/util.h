// util.h — helpers shared by the runtime tests (LibTorch tensors, a tiny config).
#pragma once

#include <ATen/ATen.h>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "trainscope/runconfig/config.h"
#include "trainscope/runtime/comm.h"
#include "trainscope/runtime/device.h"
#include "trainscope/runtime/trainer.h"
#include "../common/cli.h"

namespace trainscope::testing {

// The tiny workload on the CPU, fp32, constant learning rate, no clipping, one core lane:
// deterministic and fast. (With several lanes the measured activation peak depends on how the
// lanes' forward passes overlap in time; the CoreLanes tests set lanes themselves.)
inline runtime::TrainConfig tinyConfig(int64_t mbs = 4, int64_t ga = 1, int64_t seq = 32) {
  runtime::TrainConfig c;
  c.workload = "tiny";
  c.seq = seq;
  c.mbs = mbs;
  c.ga = ga;
  c.steps = 20;
  c.device = runtime::DeviceRequest::CPU;
  c.min_lr_ratio = 1.0;
  c.clip = 0.0;
  c.lr = 1e-3;
  c.cpu_lanes = 1;
  runtime::resolve(c);
  return c;
}

inline runtime::DeviceChoice cpu() {
  return runtime::chooseDevice(runtime::DeviceRequest::CPU, runtime::Precision::FP32);
}

// ||a - b|| / max(||b||, tiny): the norm-wise relative error used by every numerical test.
inline double relErr(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor x = a.detach().to(at::kDouble), y = b.detach().to(at::kDouble);
  return (x - y).norm().item<double>() / std::max(y.norm().item<double>(), 1e-30);
}

inline double maxRelErr(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, relErr(a[i], b[i]));
  return m;
}

inline std::vector<at::Tensor> snapshot(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  for (const auto& t : ts) out.push_back(t.detach().clone());
  return out;
}


// A loopback port nothing listens on now (closed again on return: another program may take it
// meanwhile, which is harmless to the tests that use it).
inline int freePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// Rank `rank` of a two-process world on this host (a child of runForkedRanks), connected through the
// rendezvous rank 0 hosts on `port`: its world group is the dp group.
inline std::unique_ptr<runtime::Comm> connectForkedRank(int rank, int port) {
  runtime::RankEnv env;
  env.distributed = true;
  env.rank = env.local_rank = rank;
  env.world = env.local_world = 2;
  env.master_addr = "127.0.0.1";
  env.master_port = port;
  env.source = "test";
  return runtime::Comm::connect(env, runtime::Layout::make(2, rank, 1, 1), runtime::CommOptions{});
}

// Forks `ranks` children that each run rank(r, port) with one free rendezvous port and exit with its
// code (an exception's first line goes to stderr, as exit 3); expects every child to exit 0. The
// children leave by _exit: no destructor of the test process's state runs twice.
inline void runForkedRanks(int ranks, const std::function<int(int rank, int port)>& rank) {
  const int port = freePort();
  std::vector<pid_t> kids;
  for (int r = 0; r < ranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      int code = 3;
      try {
        code = rank(r, port);
      } catch (const std::exception& e) {
        const std::string what = e.what();  // LibTorch's errors go on with a backtrace
        std::fprintf(stderr, "rank %d: %s\n", r, what.substr(0, what.find('\n')).c_str());
      }
      std::fflush(stderr);
      _exit(code);
    }
    ASSERT_GT(pid, 0);
    kids.push_back(pid);
  }
  for (int r = 0; r < ranks; ++r) {
    int st = 0;
    ASSERT_EQ(waitpid(kids[size_t(r)], &st, 0), kids[size_t(r)]);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
        << "rank " << r << " of " << ranks << " ended with " << (WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st))
        << " (its error is above)";
  }
}

// The tiny model through the real command line: 4 steps of a global batch of 8 sequences of 32
// tokens, micro-batches of 2, constant LR 3e-3, no clipping — the run every parallel-equivalence test
// compares (parallel_test.cpp's tolerances). Returns the run database, <name>.db in the temp folder.
inline std::string runTiny(const std::string& name, const std::string& extra) {
  const std::string db = tempPath(name + ".db");
  const std::string cmd = std::string("timeout 300 ") + TRAINSCOPE_CLI +
                          " run --workload tiny --seq 32 --mbs 2 --gbs 8 --steps 4 --device cpu --clip 0"
                          " --min-lr-ratio 1 --lr 3e-3 -q --overwrite --out " + db + " " + extra;
  CliResult r = sh(cmd);
  EXPECT_EQ(r.status, 0) << cmd << "\n" << r.output;
  return db;
}

}  // namespace trainscope::testing
