// sp_memory_test.cpp — sequence parallelism keeps the column-parallel linears' input sharded, as
// Megatron-LM does (issue 22): the same TP 2 + SP run with the previous layout
// (TRAINSCOPE_SP_KEEP_GATHERED=1, which saves the all-gathered (B, T, C) input) against the default
// (saves the (B, T/TP, C) shard and all-gathers it again in backward).
//   activations fall by exactly 2 · L · B · (T − T/TP) · C · 4 bytes (fp32, --ckpt none: all layers
//     held at the backward's start, the peak)
//   losses and weights are unchanged
//   the backward's re-gathers are recorded collectives: 2 more tp all_gathers per layer and micro-batch,
//     each of the gathered input's bytes
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "util.h"
#include "trainscope/rundb/reader.h"

using trainscope::testing::CliResult;
using trainscope::testing::sh;
using trainscope::testing::tempPath;
namespace rdb = trainscope::rundb;

namespace {

constexpr int64_t kL = 4, kB = 4, kT = 64, kC = 256, kTp = 2, kSteps = 2;  // small-cpu, one micro-batch a step

std::string runSp(const std::string& name, const std::string& env) {
  const std::string db = tempPath(name + ".db");
  const std::string cmd = env + " timeout 300 " + TRAINSCOPE_CLI +
                          " run --workload small-cpu --seq 64 --mbs 4 --gbs 4 --steps 2 --tp 2 --nproc 2"
                          " --sequence-parallel --ckpt none --device cpu -q --overwrite --out " + db;
  CliResult r = sh(cmd);
  EXPECT_EQ(r.status, 0) << cmd << "\n" << r.output;
  return db;
}

struct Gathers {
  int64_t count = 0, bytes = 0;
};
Gathers tpAllGathers(const std::string& db) {
  Gathers g;
  for (const auto& c : rdb::RunReader(db).collectives(0))
    if (c.op == "all_gather" && c.group == "tp") ++g.count, g.bytes += c.bytes;
  return g;
}

}  // namespace

TEST(SequenceParallelMemory, ShardedLinearInputsSaveTwoGatheredInputsPerLayer) {
  const std::string gathered = runSp("sp_gathered", "TRAINSCOPE_SP_KEEP_GATHERED=1");
  const std::string sharded = runSp("sp_sharded", "");
  auto a = rdb::readSteps(gathered, 0), b = rdb::readSteps(sharded, 0);
  ASSERT_EQ(a.size(), size_t(kSteps));
  ASSERT_EQ(b.size(), size_t(kSteps));
  const int64_t expected = 2 * kL * kB * (kT - kT / kTp) * kC * 4;  // 1 MiB
  for (size_t k = 0; k < a.size(); ++k) {
    // Within 4 KiB: the backward's asynchronous re-gathers and reduce-scatters finish in an order
    // the machine's load decides, so a few small buffers (a fresh bias gradient, a work handle's
    // staging) can fall on either side of the peak (once, on a loaded CI run: +192 bytes).
    EXPECT_NEAR(double(a[k].activation_bytes - b[k].activation_bytes), double(expected), 4096.0) << "step " << k;
    EXPECT_LE(std::abs(b[k].loss - a[k].loss), 1e-6 * a[k].loss) << "step " << k;
  }
  // One more all-gather of the (B, T, C) input per column-parallel linear in each backward.
  const Gathers ga = tpAllGathers(gathered), gb = tpAllGathers(sharded);
  EXPECT_EQ(gb.count - ga.count, 2 * kL * kSteps);
  EXPECT_EQ(gb.bytes - ga.bytes, 2 * kL * kSteps * kB * kT * kC * 4);
}
