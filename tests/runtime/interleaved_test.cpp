// interleaved_test.cpp — interleaved 1F1B (--virtual-stages), on real two-rank runs through the
// command line and Gloo: a 4-layer model on pp 2 × v 2 model chunks (rank 0 holds layers 0 and 2,
// rank 1 layers 1 and 3) must train like one process —
//   the same loss per step and the same final weights (parallel_test.cpp's tolerances), at ga 2 and
//   4, under full and selective checkpointing, beside DP with ZeRO-1 and beside TP, and in bf16
//   (equal to plain 1F1B there);
//   the trace shows each unit as a "chunk/k" range in Megatron-LM's order, and every send;
//   a stage's measured peak stops growing once the warm-up is full and is within 5% of the model;
//   what it cannot run is refused naming the flag and the fix.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "parallel/pipeline.h"
#include "trainscope/rundb/reader.h"
#include "../common/workload_files.h"
#include "same_training.h"
#include "util.h"

using trainscope::testing::CliResult;
using trainscope::testing::cli;
using trainscope::testing::sh;
using trainscope::testing::tempPath;
namespace rdb = trainscope::rundb;

namespace {

constexpr int64_t kMbs = 2, kSeq = 32, kEmbd = 32;
const char* kInterleaved = " --nproc 2 --pp 2 --virtual-stages 2";

// The tiny model's shape with 4 layers, so that pp 2 × v 2 gives every chunk one layer (workload_files.h).
std::string workload() { return trainscope::testing::tiny4Workload(); }

// 4 steps of a global batch of 8 sequences (ga = 8 / mbs), constant LR, no clipping.
std::string run(const std::string& name, const std::string& extra, int64_t steps = 4) {
  const std::string db = tempPath(name + ".db");
  const std::string cmd = std::string("timeout 300 ") + TRAINSCOPE_CLI + " run --workload " + workload() +
                          " --seq 32 --mbs 2 --gbs 8 --steps " + std::to_string(steps) +
                          " --device cpu --cpu-lanes 1 --clip 0 --min-lr-ratio 1 --lr 3e-3 -q --overwrite" + extra +
                          (extra.find("--trace") == std::string::npos ? " --out " + db : "");
  CliResult r = sh(cmd);
  EXPECT_EQ(r.status, 0) << cmd << "\n" << r.output;
  return db;
}

// same_training.h's comparison, and every layer's tensors present once.
void expectSameTraining(const std::string& ref_db, const std::string& db, double tol = 1e-5, double wtol = 1e-4) {
  trainscope::testing::expectSameTraining(ref_db, db, tol, wtol);
  EXPECT_EQ(rdb::RunReader(db).weightDigest().size(), 2u + 4 * 12 + 2);  // wte, wpe, 4 blocks, ln_f
}

// A rank's peak over the steps after the first (the first also allocates the optimizer state).
int64_t peakOf(const std::string& db, int rank) {
  int64_t peak = 0;
  for (const auto& s : rdb::readSteps(db, rank))
    if (s.step > 0) peak = std::max(peak, s.peak_bytes);
  return peak;
}

// One send's tensor: an activation (or its gradient) of one micro-batch, (mbs, T, C) fp32.
constexpr int64_t kOneSend = kMbs * kSeq * kEmbd * 4;

// Megatron-LM's order of one rank's units for p 2, v 2, M 4 ("F1" = forward of model chunk 1):
// groups of p micro-batches through chunk 0 then chunk 1, 2(p − s − 1) + (v − 1)p warm-up forwards.
const std::vector<std::string> kOrder[2] = {
    {"F0", "F0", "F1", "F1", "F0", "B1", "F0", "B1", "F1", "B0", "F1", "B0", "B1", "B1", "B0", "B0"},
    {"F0", "F0", "F1", "B1", "F1", "B1", "F0", "B0", "F0", "B0", "F1", "B1", "F1", "B1", "B0", "B0"}};

// pipeline.cpp's point-to-point under a rendezvous model of Gloo: a receive completes once its send
// is posted, a send's wait once its receive is posted. Each stage runs interleavedOrder; before a
// forward's compute it waits for its oldest gradient sends until at most `keep_fwd` remain, before a
// backward's until `keep_bwd` remain (pipeline.h: 1 and 0). True when every stage finishes.
bool completesUnderRendezvous(int p, int v, int64_t M, size_t keep_fwd, size_t keep_bwd) {
  enum Op { kSend, kRecv, kWait };
  using Key = std::tuple<int, int64_t, int64_t>;  // (0 activation / 1 gradient, m, boundary chunk)
  const int64_t last = int64_t(p) * v - 1;
  std::vector<std::vector<std::pair<Op, Key>>> program(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    auto& ops = program[size_t(r)];
    std::vector<Key> sent;  // gradient sends not yet waited for, oldest first
    auto retire = [&](size_t keep) {
      while (sent.size() > keep) {
        ops.push_back({kWait, sent.front()});
        sent.erase(sent.begin());
      }
    };
    for (const auto& u : trainscope::runtime::interleavedOrder(p, v, r, M)) {
      const int64_t c = r + int64_t(u.chunk) * p;
      if (u.forward) {
        if (c > 0) ops.push_back({kRecv, Key{0, u.m, c - 1}});
        retire(keep_fwd);
        if (c < last) ops.push_back({kSend, Key{0, u.m, c}});
      } else {
        if (c < last) {
          ops.push_back({kRecv, Key{1, u.m, c}});
          ops.push_back({kWait, Key{0, u.m, c}});  // the activation send, complete once its gradient is back
        }
        retire(keep_bwd);
        if (c > 0) {
          ops.push_back({kSend, Key{1, u.m, c - 1}});
          sent.push_back(Key{1, u.m, c - 1});
        }
      }
    }
    retire(0);
  }
  std::set<Key> posted, received;
  std::vector<size_t> pc(static_cast<size_t>(p), 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < p; ++r) {
      size_t& i = pc[size_t(r)];
      for (; i < program[size_t(r)].size(); ++i) {  // run stage r until it blocks
        const auto& [op, key] = program[size_t(r)][i];
        if (op == kRecv && !posted.count(key)) break;
        if (op == kWait && !received.count(key)) break;
        if (op == kSend) posted.insert(key);
        if (op == kRecv) received.insert(key);
        moved = true;
      }
    }
  }
  for (int r = 0; r < p; ++r)
    if (pc[size_t(r)] < program[size_t(r)].size()) return false;
  return true;
}

}  // namespace

// The order itself, without processes: every unit once, each backward after its forward, Megatron-LM's
// order at p 2, v 2, M 4, and no deadlock with pipeline.h's rule for gradient sends over p ≤ 6,
// v ≤ 4, M ≤ 4p (waiting for every gradient send before each forward deadlocks at once).
TEST(InterleavedSchedule, RunsEveryUnitOnceInMegatronOrderWithoutDeadlock) {
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> names;
    for (const auto& u : trainscope::runtime::interleavedOrder(2, 2, r, 4))
      names.push_back((u.forward ? "F" : "B") + std::to_string(u.chunk));
    EXPECT_EQ(names, kOrder[r]) << "rank " << r;
  }
  for (int p = 2; p <= 6; ++p)
    for (int v = 2; v <= 4; ++v)
      for (int64_t M = p; M <= 4 * p; M += p) {
        for (int r = 0; r < p; ++r) {
          std::map<std::tuple<bool, int, int64_t>, int> seen;
          for (const auto& u : trainscope::runtime::interleavedOrder(p, v, r, M)) {
            EXPECT_TRUE(u.forward || seen.count({true, u.chunk, u.m})) << "backward before forward";
            ++seen[{u.forward, u.chunk, u.m}];
          }
          EXPECT_EQ(seen.size(), size_t(2 * v * M)) << "p " << p << " v " << v << " M " << M << " rank " << r;
        }
        EXPECT_TRUE(completesUnderRendezvous(p, v, M, 1, 0)) << "p " << p << " v " << v << " M " << M;
      }
  EXPECT_FALSE(completesUnderRendezvous(2, 2, 4, 0, 0));
}

TEST(Interleaved, TwoStagesTwoChunksEqualOneProcessAtTwoAndFourMicroBatches) {
  const std::string ref = run("il_ref", "");
  expectSameTraining(ref, run("il_ga4", kInterleaved));                       // mbs 2: ga 4
  expectSameTraining(ref, run("il_ga2", std::string(kInterleaved) + " --mbs 4 --gbs 8"));  // ga 2 = pp: all warm-up
}

TEST(Interleaved, EqualsOneProcessUnderFullAndSelectiveCheckpointing) {
  const std::string ref = run("il_ref_ckpt", "");  // recomputation is exact: the plain run is the reference
  expectSameTraining(ref, run("il_full", std::string(kInterleaved) + " --ckpt full"));
  expectSameTraining(ref, run("il_selective", std::string(kInterleaved) + " --ckpt selective"));
}

// Beside DP (each chunk's gradients reduced in its last backward, ZeRO-1's reduce-scatter after the
// schedule) and TP (each chunk's collectives inside its units): the same training.
TEST(Interleaved, TimesDataParallelWithZeroOneAndTimesTensorParallelEqualOneProcess) {
  expectSameTraining(run("il_ref_tp", ""), run("il_tp2", " --nproc 4 --pp 2 --virtual-stages 2 --tp 2"));
  const std::string ref = run("il_ref_gbs16", " --gbs 16");  // dp 2 × ga 4 × mbs 2
  expectSameTraining(ref, run("il_dp2_zero1", " --nproc 4 --pp 2 --virtual-stages 2 --gbs 16 --zero 1"));
}

// bf16: every pipeline run differs from one process by how the tied embedding's two bf16 gradients
// round before they are summed in fp32 (plain 1F1B as much as interleaved: losses within 1e-4);
// interleaving itself changes nothing, so it equals plain 1F1B to the fp32 tolerances.
TEST(Interleaved, Bf16EqualsPlainOneFOneBAndOneProcess) {
  const std::string ref = run("il_ref_bf16", " --precision bf16");
  const std::string plain = run("il_1f1b_bf16", " --precision bf16 --nproc 2 --pp 2");
  const std::string il = run("il_bf16", std::string(kInterleaved) + " --precision bf16");
  expectSameTraining(plain, il);
  auto a = rdb::readSteps(ref), b = rdb::readSteps(il);
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) EXPECT_LE(std::abs(b[k].loss - a[k].loss) / a[k].loss, 1e-4) << "step " << k;
}

// What a viewer shows: on each rank every forward and backward sits in a "chunk/k" range, in
// Megatron-LM's order; every activation and gradient crossed a chunk boundary as a pp send.
TEST(Interleaved, TraceShowsEachChunksUnitsInMegatronOrderAndEverySend) {
  const std::string db = tempPath("il_trace.db");
  run("il_trace", std::string(kInterleaved) + " --trace " + db, 2);
  rdb::RunReader reader(db);
  ASSERT_EQ(reader.steps(0).size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    auto ranges = reader.events<rdb::Range>(rank);
    std::sort(ranges.begin(), ranges.end(), [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
    // Each chunk range and the forward or backward inside it, both steps in time order.
    std::vector<std::string> units;
    for (const auto& r : ranges) {
      const std::string& name = reader.string(r.name);
      if (name.rfind("chunk/", 0) != 0) continue;
      std::string kind;
      for (const auto& in : ranges) {
        if (in.tid != r.tid || in.start_ns < r.start_ns || in.end_ns > r.end_ns) continue;
        const std::string& n = reader.string(in.name);
        if (n == "forward") kind = "F";
        if (n == "backward") kind = "B";
      }
      units.push_back(kind + name.substr(6));
    }
    ASSERT_EQ(units.size(), 2 * kOrder[rank].size()) << "rank " << rank;
    for (size_t step = 0; step < 2; ++step)
      EXPECT_EQ(std::vector<std::string>(units.begin() + ptrdiff_t(step * 16), units.begin() + ptrdiff_t(step * 16 + 16)),
                kOrder[rank])
          << "rank " << rank << " step " << step;
  }
  // Per step 2(p·v − 1)·M sends over both ranks (an activation and a gradient across each of the
  // 3 chunk boundaries per micro-batch), each received once, each one micro-batch's (mbs, T, C).
  int64_t sends = 0, recvs = 0;
  for (const auto& c : reader.collectives()) {
    if (c.group != "pp") continue;
    if (c.op == "send") ++sends;
    if (c.op == "recv") ++recvs;
    if (c.op == "send" || c.op == "recv") EXPECT_EQ(c.bytes, kOneSend);
  }
  EXPECT_EQ(sends, 2 * 2 * (2 * 2 - 1) * 4);
  EXPECT_EQ(recvs, sends);
}

// Megatron-LM's schedule holds at most min(W + 1, v·M) units on a stage (W warm-up forwards:
// 4 on stage 0, 2 on stage 1 here), so a stage's peak grows from M = 2 (= pp, all warm-up) to M = 4
// and not after; the memory model (models/memory_model.cpp interleaveOf) prices the same count.
TEST(Interleaved, StagePeakStopsGrowingAfterTheWarmUpAndMatchesTheMemoryModel) {
  std::vector<std::vector<int64_t>> peaks(2);
  for (int64_t ga : {2, 4, 8}) {
    const std::string db = run("il_mem_ga" + std::to_string(ga), std::string(kInterleaved) + " --gbs " +
                                                                     std::to_string(kMbs * ga), 3);
    const std::string shape = " --workload " + workload() + " --seq 32 --mbs 2 --gbs " + std::to_string(kMbs * ga);
    auto pred = cli("predict" + shape + " --pp 2 --pp-schedule interleaved --virtual-stages 2 --cluster cpu-local"
                    " --gpus 2 --precision fp32 --cpu-lanes 1 --json");
    ASSERT_EQ(pred.status, 0) << pred.output;
    const auto j = nlohmann::json::parse(pred.output.substr(pred.output.rfind("\n{") + 1));
    for (int rank = 0; rank < 2; ++rank) {
      const int64_t measured = peakOf(db, rank);
      const double predicted = j["stages"][rank]["total_bytes"].get<double>();
      peaks[size_t(rank)].push_back(measured);
      std::printf("  p2 v2 ga %lld stage %d: peak %lld bytes, model %.0f (%+.1f%%)\n", static_cast<long long>(ga), rank,
                  static_cast<long long>(measured), predicted, 100 * (predicted - measured) / double(measured));
      EXPECT_LE(std::abs(predicted - double(measured)), 0.05 * double(measured)) << "stage " << rank;
    }
  }
  for (int rank = 0; rank < 2; ++rank) {
    const auto& p = peaks[size_t(rank)];
    // Fewer units in flight at M = pp. Within 4 KiB: the asynchronous sends finish in an order the
    // machine's load decides, so a few small buffers can fall on either side of the peak (a loaded
    // CI run once saw stage 1's ga 2 peak 192 bytes above its ga 4 one, which the model says are equal).
    EXPECT_LE(p[0], p[1] + 4096) << "stage " << rank;
    // As pipeline_memory_test.cpp: half a send of slack for scalars; keeping one send per
    // micro-batch longer than its unit would add four sends from ga 4 to ga 8.
    EXPECT_LE(p[2] - p[1], kOneSend / 2) << "stage " << rank << " grew from ga 4 to ga 8";
  }
}

TEST(InterleavedConfig, RefusesWhatItCannotRunNamingTheFlagAndTheFix) {
  const std::string base = "run --workload " + workload() + " --seq 32 --mbs 2 --device cpu --steps 1";
  auto expectRefusal = [&](const std::string& flags, const std::string& field, const std::string& fix) {
    CliResult r = cli(base + flags);
    EXPECT_EQ(r.status, 2) << flags << "\n" << r.output;
    EXPECT_NE(r.output.find(field), std::string::npos) << flags << "\n" << r.output;
    EXPECT_NE(r.output.find(fix), std::string::npos) << flags << "\n" << r.output;
  };
  expectRefusal(" --virtual-stages 2", "--virtual-stages", "--pp 2");                          // no pipeline
  expectRefusal(" --nproc 2 --pp 2 --virtual-stages 3 --gbs 8", "--virtual-stages", "divides 4");  // 4 layers, 6 chunks
  expectRefusal(" --nproc 2 --pp 2 --virtual-stages 2 --pp-schedule gpipe --gbs 8", "--virtual-stages",
                "--pp-schedule 1f1b");
  expectRefusal(" --nproc 2 --pp 2 --virtual-stages 2 --gbs 6", "--gbs", "--gbs 8");  // 3 micro-batches, pp 2
  expectRefusal(" --nproc 2 --pp 2 --virtual-stages 2 --ga 3", "--ga", "--ga 4");
  expectRefusal(" --virtual-stages 0", "--virtual-stages", ">= 1");
}
