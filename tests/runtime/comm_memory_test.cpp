// comm_memory_test.cpp — what a Gloo collective allocates is gone when its wait() returns, on two
// real processes (runtime/src/comm/comm.cpp). The measured peaks the memory model is held to
// (tuner_test.cpp) count every tensor byte of the process; a copy the engine's worker thread frees
// at a moment of its own made them move run to run (a ZeRO-2 bucket's reduce-scatter copy met the
// next micro-batch's forward on a busy machine). Each call is repeated so that a late release, which
// only sometimes happens, is caught; every result is checked too.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "trainscope/runtime/comm.h"
#include "trainscope/runtime/memory.h"
#include "util.h"

namespace rt = trainscope::runtime;
using trainscope::testing::runForkedRanks;

namespace {

constexpr int kRepeats = 100;
constexpr int64_t kShard = 64 * 1024;  // elements of one rank's part: 256 KiB of fp32

// "" when the bytes allocated are back at `baseline` and `got` holds `want` everywhere; else why.
std::string check(const char* what, int i, int64_t baseline, const at::Tensor& got, float want) {
  const int64_t held = rt::cpuAllocatedBytes() - baseline;
  if (held != 0) return std::string(what) + " #" + std::to_string(i) + ": " + std::to_string(held) + " bytes still held after wait()";
  if (!got.eq(want).all().item<bool>()) return std::string(what) + " #" + std::to_string(i) + ": wrong result";
  return "";
}

// One rank: every asynchronous collective the training step uses, kRepeats times each.
int collectivesAsRank(int rank, int port) {
  rt::installCountingCpuAllocator();
  auto comm = trainscope::testing::connectForkedRank(rank, port);
  rt::Group& g = comm->world();
  at::Tensor whole = at::empty({2 * kShard}), part = at::empty({kShard});
  std::string wrong;  // the first thing wrong; both ranks go on so that neither waits for the other
  auto note = [&wrong](const std::string& w) {
    if (wrong.empty()) wrong = w;
  };
  for (int i = 0; i < kRepeats; ++i) {
    whole.fill_(1.0f + rank);  // the sum over the two ranks: 3
    const int64_t baseline = rt::cpuAllocatedBytes();
    g.reduceScatterAsync(part, whole)->wait();  // ZeRO-2's buckets, ZeRO-3's layers, TP's dX
    note(check("reduce_scatter", i, baseline, part, 3.0f));
    part.fill_(2.0f);
    g.allGatherAsync(whole, part)->wait();  // ZeRO-3's prefetch
    note(check("all_gather", i, baseline, whole, 2.0f));
    g.allReduceAsync(part)->wait();  // DDP's buckets
    note(check("all_reduce", i, baseline, part, 4.0f));
    if (rank == 0) {  // a pipeline stage's activation
      part.fill_(5.0f);
      g.send(part, 1, i)->wait();
    } else {
      g.recvAsync(part, 0, i)->wait();
    }
    note(check(rank == 0 ? "send" : "recv", i, baseline, part, 5.0f));
  }
  if (!wrong.empty()) std::fprintf(stderr, "rank %d: %s\n", rank, wrong.c_str());
  return wrong.empty() ? 0 : 1;
}

}  // namespace

TEST(GlooCollectives, WhatACollectiveAllocatedIsFreedWhenItsWaitReturns) {
  runForkedRanks(2, [](int rank, int port) { return collectivesAsRank(rank, port); });
}
