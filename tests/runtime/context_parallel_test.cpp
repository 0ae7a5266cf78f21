// context_parallel_test.cpp — context parallelism (--cp): the ring attention against plain causal
// attention on random tensors (forward and gradients, real Gloo ranks in forked children); whole
// training runs through the real command line equal to one process (CP 2; CP 2 x TP 2 with and
// without SP; CP 2 x DP 2 with and without ZeRO-1; CP 2 x PP 2; full and selective checkpointing);
// bad layouts refused naming the field; a traced run whose ring sends and receives are recorded on
// the `cp` group with their bytes, and a grouped-query model's ring sending its K/V heads only.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <ATen/Parallel.h>

#include "model/context_parallel.h"
#include "trainscope/common/error.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/report.h"
#include "trainscope/runtime/data.h"
#include "same_training.h"
#include "util.h"

namespace rt = trainscope::runtime;
namespace rdb = trainscope::rundb;
using trainscope::testing::CliResult;
using trainscope::testing::relErr;
using trainscope::testing::runForkedRanks;
using trainscope::testing::runTiny;
using trainscope::testing::sh;
using trainscope::testing::tempPath;

namespace {


// Plain causal attention, (B, NH, T, HS) each, by the textbook formula.
at::Tensor causalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t T = q.size(2);
  at::Tensor s = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(q.size(-1)));
  s = s.masked_fill(at::ones({T, T}, at::kBool).triu(1), -INFINITY);
  return at::matmul(at::softmax(s, -1), v);
}

// One CP rank in a forked child: its chunks of the same random q (NH heads), k and v (KV heads)
// through the ring, compared with the whole sequence's plain attention (each K/V head repeated for
// its NH/KV query heads; autograd sums the repeats' gradients onto it). 0 when output and the three
// gradients agree.
int ringAsRank(int rank, int cp, int port, int64_t NH, int64_t KV) {
  at::set_num_threads(1);
  rt::RankEnv env;
  env.distributed = true;
  env.rank = env.local_rank = rank;
  env.world = env.local_world = cp;
  env.master_port = port;
  env.source = "test";
  auto comm = rt::Comm::connect(env, rt::Layout::make(cp, rank, 1, 1, cp), rt::CommOptions{});
  const int64_t B = 2, T = 4 * cp * 3, HS = 8;
  at::manual_seed(7);
  at::Tensor q = at::randn({B, NH, T, HS}), k = at::randn({B, KV, T, HS}), v = at::randn({B, KV, T, HS});
  at::Tensor w = at::randn({B, NH, T, HS});  // loss = Σ y ∘ w: a gradient that differs per element
  for (at::Tensor* t : {&q, &k, &v}) t->requires_grad_(true);
  at::Tensor ref = causalAttention(q, k.repeat_interleave(NH / KV, 1), v.repeat_interleave(NH / KV, 1));
  (ref * w).sum().backward();

  rt::CpContext ctx;
  ctx.group = &comm->cp();
  ctx.positions = rt::contextPositions(T, cp, rank, at::kCPU);
  auto mine = [&](const at::Tensor& t) { return t.detach().index_select(2, ctx.positions); };  // (B, NH | KV, T/CP, HS)
  at::Tensor ql = mine(q).requires_grad_(true), kl = mine(k).requires_grad_(true), vl = mine(v).requires_grad_(true);
  at::Tensor y = rt::ringAttention(ql, kl, vl, ctx);
  (y * mine(w)).sum().backward();

  const double errs[] = {relErr(y, mine(ref)), relErr(ql.grad(), mine(q.grad())), relErr(kl.grad(), mine(k.grad())),
                         relErr(vl.grad(), mine(v.grad()))};
  bool ok = true;
  for (double e : errs) ok = ok && e < 1e-5;
  if (!ok)
    std::fprintf(stderr, "rank %d of %d, %lld/%lld heads: rel err y %.3g dq %.3g dk %.3g dv %.3g\n", rank, cp,
                 static_cast<long long>(NH), static_cast<long long>(KV), errs[0], errs[1], errs[2], errs[3]);
  return ok ? 0 : 1;
}

// Forks `cp` ranks running ringAsRank; every one must exit 0.
void expectRingMatches(int cp, int64_t n_head = 3, int64_t n_kv = 3) {
  runForkedRanks(cp, [&](int rank, int port) { return ringAsRank(rank, cp, port, n_head, n_kv); });
}

// The tiny model, 4 steps of a global batch of 8 sequences of 32 tokens (parallel_test.cpp's run).
std::string run(const std::string& name, const std::string& extra) { return runTiny("cp_" + name, extra); }

using trainscope::testing::expectSameTraining;  // losses 1e-5, weights 1e-4: same_training.h

class ContextParallel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ref_ = new std::string(run("ref", "")); }
  static void TearDownTestSuite() { delete ref_; }
  static std::string* ref_;
};
std::string* ContextParallel::ref_ = nullptr;

// What resolve() says to a tiny config with these changes: the field it names, "" when accepted.
template <class Change>
std::string refusedField(Change change) {
  rt::TrainConfig c;
  c.workload = "tiny";
  c.seq = 32;
  c.mbs = 2;
  c.device = rt::DeviceRequest::CPU;
  c.cpu_lanes = 1;
  change(c);
  try {
    rt::resolve(c, c.nproc);
  } catch (const trainscope::UserError& e) {
    return e.field();
  }
  return "";
}

}  // namespace

TEST(RingAttention, TwoRanksMatchPlainCausalAttentionAndItsGradients) { expectRingMatches(2); }

TEST(RingAttention, ThreeRanksMatchPlainCausalAttentionAndItsGradients) { expectRingMatches(3); }

// Grouped-query attention: the ring carries the 2 (or 1) K/V heads of 4 query heads as they are, and
// dK/dV sum over each head's group — as plain attention over repeated heads gives them.
TEST(RingAttention, GroupedKvHeadsMatchRepeatedHeadsAndTheirSummedGradients) {
  expectRingMatches(2, 4, 2);
  expectRingMatches(3, 4, 2);
  expectRingMatches(2, 4, 1);  // multi-query
}

TEST(ContextParallelLayout, RanksAreTpThenCpThenDpThenPpAndGradientsGoOverDpTimesCp) {
  // world 16 = TP 2 x CP 2 x DP 2 x PP 2: rank 13 = tp 1 + 2·(cp 0 + 2·(dp 1 + 2·pp 1)).
  const rt::Layout l = rt::Layout::make(16, 13, 2, 2, 2);
  EXPECT_EQ(l.dp, 2);
  EXPECT_EQ(l.tp_rank, 1);
  EXPECT_EQ(l.cp_rank, 0);
  EXPECT_EQ(l.dp_rank, 1);
  EXPECT_EQ(l.pp_rank, 1);
  EXPECT_EQ(l.cpGroup(), (std::vector<int>{13, 15}));
  EXPECT_EQ(l.tpGroup(), (std::vector<int>{12, 13}));
  EXPECT_EQ(l.dpGroup(), (std::vector<int>{9, 13}));
  EXPECT_EQ(l.dpCpGroup(), (std::vector<int>{9, 11, 13, 15}));
  EXPECT_EQ(l.ppGroup(), (std::vector<int>{5, 13}));
  EXPECT_EQ(l.embeddingGroup(), (std::vector<int>{5, 13}));
  // cp = 1 is the DP x TP x PP layout of before, rank for rank.
  const rt::Layout old = rt::Layout::make(8, 5, 2, 2);
  EXPECT_EQ(old.dp_rank, 0);
  EXPECT_EQ(old.pp_rank, 1);
  EXPECT_EQ(old.dpGroup(), (std::vector<int>{5, 7}));
  EXPECT_THROW(rt::Layout::make(6, 0, 1, 1, 4), trainscope::UserError);
}

TEST(ContextShard, RankIHoldsChunksIAndTwoCpMinusOneMinusI) {
  // seq 8, cp 2: chunks of 2 tokens; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  at::Tensor p0 = rt::contextPositions(8, 2, 0, at::kCPU), p1 = rt::contextPositions(8, 2, 1, at::kCPU);
  EXPECT_TRUE(at::equal(p0, at::tensor({0, 1, 6, 7}, at::kLong)));
  EXPECT_TRUE(at::equal(p1, at::tensor({2, 3, 4, 5}, at::kLong)));
  rt::Batch b{at::arange(16, at::kLong).view({2, 8}), at::arange(16, at::kLong).view({2, 8}) + 1};
  rt::Batch s = rt::contextShard(b, 2, 1);
  EXPECT_TRUE(at::equal(s.inputs, at::tensor({2, 3, 4, 5, 10, 11, 12, 13}, at::kLong).view({2, 4})));
  EXPECT_TRUE(at::equal(s.targets, s.inputs + 1));
}

TEST(ContextParallelConfig, BadLayoutsAreRefusedNamingTheField) {
  EXPECT_EQ(refusedField([](rt::TrainConfig& c) { c.nproc = 2, c.cp = 2; }), "");
  EXPECT_EQ(refusedField([](rt::TrainConfig& c) { c.nproc = 2, c.cp = 2, c.seq = 30; }), "--seq");  // not ÷ 2·cp
  EXPECT_EQ(refusedField([](rt::TrainConfig& c) { c.nproc = 3, c.cp = 2; }), "--nproc");            // not ÷ cp
  EXPECT_EQ(refusedField([](rt::TrainConfig& c) { c.cp = 0; }), "--cp");
  EXPECT_EQ(refusedField([](rt::TrainConfig& c) { c.nproc = 2, c.cp = 2, c.local_sgd = 2; }), "--cp");
  EXPECT_EQ(refusedField([](rt::TrainConfig& c) { c.nproc = 2, c.cp = 2, c.cpu_lanes = 2; }), "--cpu-lanes");
  // Sequence parallelism inside each CP rank's T/CP tokens: 40 / 2 = 20, split over tp 2.
  EXPECT_EQ(refusedField([](rt::TrainConfig& c) { c.nproc = 4, c.cp = 2, c.tp = 2, c.seq = 40, c.sequence_parallel = true; }),
            "");
}

TEST(ContextParallelConfig, TheCommandLineRefusesSeqNotDivisibleByTwoCp) {
  CliResult r = sh(std::string("timeout 60 ") + TRAINSCOPE_CLI +
                   " run --workload tiny --seq 30 --mbs 2 --steps 1 --device cpu --nproc 2 --cp 2 -q");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--seq"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("multiple of 4"), std::string::npos) << r.output;
}

// The largest activation peak (above the step's baseline) of one rank over steps 1…N−1.
int64_t activationPeak(const std::string& db, int rank) {
  int64_t peak = 0;
  for (const auto& s : rdb::readSteps(db, rank))
    if (s.step > 0) peak = std::max(peak, s.activation_bytes);
  return peak;
}

TEST_F(ContextParallel, TwoRanksEqualOneProcessAndHoldAboutHalfTheActivations) {
  const std::string db = run("cp2", "--nproc 2 --cp 2");
  expectSameTraining(*ref_, db);
  // Each rank keeps the activations of s/CP tokens (no s x s scores either): about half of one
  // process's (0.52 measured at seq 64, mbs 4), what the memory model's "activations ÷ cp" says.
  for (int r = 0; r < 2; ++r) EXPECT_LT(activationPeak(db, r), 0.6 * activationPeak(*ref_, 0)) << "rank " << r;
}

TEST_F(ContextParallel, InBf16MatchesOneProcessInBf16) {
  // bf16 K/V blocks travel in bf16 and are computed in fp32 like the unsplit path's: the losses agree
  // to bf16's round-off of the differing summation order.
  const std::string one = run("bf16", "--precision bf16"), two = run("cp2_bf16", "--nproc 2 --cp 2 --precision bf16");
  auto a = rdb::readSteps(one), b = rdb::readSteps(two);
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) EXPECT_LE(std::abs(b[k].loss - a[k].loss) / a[k].loss, 1e-4) << "step " << k;
}

TEST_F(ContextParallel, TimesTensorParallelEqualsOneProcess) {
  expectSameTraining(*ref_, run("cp2tp2", "--nproc 4 --cp 2 --tp 2"));
}

TEST_F(ContextParallel, TimesDataParallelEqualsOneProcess) {
  expectSameTraining(*ref_, run("cp2dp2", "--nproc 4 --cp 2"));
}

TEST_F(ContextParallel, TimesTensorAndSequenceParallelEqualsOneProcess) {
  expectSameTraining(*ref_, run("cp2tp2sp", "--nproc 4 --cp 2 --tp 2 --sequence-parallel"));
}

TEST_F(ContextParallel, TimesPipelineEqualsOneProcess) { expectSameTraining(*ref_, run("cp2pp2", "--nproc 4 --cp 2 --pp 2")); }

TEST_F(ContextParallel, WithZeroOneOverDataAndContextRanksEqualsOneProcess) {
  expectSameTraining(*ref_, run("cp2dp2_zero1", "--nproc 4 --cp 2 --zero 1"));
}

TEST_F(ContextParallel, WithFullAndSelectiveCheckpointingEqualsOneProcess) {
  expectSameTraining(*ref_, run("cp2_full", "--nproc 2 --cp 2 --ckpt full"));
  expectSameTraining(*ref_, run("cp2_selective", "--nproc 2 --cp 2 --ckpt selective"));
}

TEST_F(ContextParallel, TracedRunRecordsTheRingOnTheCpGroupWithItsBytes) {
  const std::string db = tempPath("cp_traced.db");
  CliResult r = sh(std::string("timeout 300 ") + TRAINSCOPE_CLI +
                   " run --workload tiny --seq 32 --mbs 2 --gbs 8 --steps 2 --device cpu -q --overwrite"
                   " --nproc 2 --cp 2 --trace " + db);
  ASSERT_EQ(r.status, 0) << r.output;
  // One K/V block (or dK/dV accumulator): 2 x B x T/CP x C floats = 2 x 2 x 16 x 32 x 4 bytes.
  const int64_t block = 2 * 2 * 16 * 32 * 4;
  rdb::RunReader reader(db);
  int64_t sends = 0, recvs = 0;
  for (const auto& c : reader.collectives(0)) {
    if (c.group != "cp") continue;
    EXPECT_EQ(c.bytes, block) << c.op;
    EXPECT_EQ(c.group_size, 2);
    sends += c.op == "send";
    recvs += c.op == "recv";
  }
  // Per layer per micro-batch: forward 1 K/V send (cp − 1), backward 1 K/V + 2 dK/dV (cp) sends;
  // 2 layers x 4 micro-batches x 2 steps.
  EXPECT_EQ(sends, 4 * 2 * 4 * 2);
  EXPECT_EQ(recvs, sends);
  // The viewer and report pair every send of the ring with the receive that took it.
  const std::vector<rdb::Collective> rows = reader.collectives();
  const rdb::CollectiveLinks links = rdb::linkCollectives(rows, rdb::runLayout(reader.meta()));
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].group == "cp") EXPECT_GE(links.call_of[i], 0) << rows[i].rank << " " << rows[i].op << " " << rows[i].seq;
  int64_t blocks = 0;
  for (const auto& range : reader.events<rdb::Range>(0)) blocks += reader.string(range.name) == "cp_attention";
  EXPECT_EQ(blocks, 2 * 2 * 2 * 4 * 2);  // 2 ring steps, forward and backward, per layer per micro-batch
}

namespace {

// The cp group's sends of a traced run at seq 32, mbs 2, gbs 8, 2 steps: each one's
// bytes (they must all be equal) and how many there were, on rank 0.
std::pair<int64_t, int64_t> ringSends(const std::string& name, const std::string& args) {
  const std::string db = tempPath(name + ".db");
  CliResult r = sh(std::string("timeout 300 ") + TRAINSCOPE_CLI +
                   " run --seq 32 --mbs 2 --gbs 8 --steps 2 --device cpu -q --overwrite --trace " + db + " " + args);
  EXPECT_EQ(r.status, 0) << r.output;
  rdb::RunReader reader(db);
  int64_t bytes = -1, sends = 0;
  for (const auto& c : reader.collectives(0)) {
    if (c.group != "cp" || c.op != "send") continue;
    if (bytes >= 0) EXPECT_EQ(c.bytes, bytes);
    bytes = c.bytes, ++sends;
  }
  return {bytes, sends};
}

}  // namespace

TEST(ContextParallelRing, GroupedQueryRingSendsTheKvHeadsNotTheQueryHeads) {
  // tiny-llama: 4 query heads and 2 K/V heads of D = 64/4 = 16. One K/V block (or dK/dV accumulator,
  // fp32 as the blocks here): 2 · b · (s/c) · kv · D · 4 = 2 · 2 · 16 · (2 · 16) · 4 = 8192 bytes —
  // half of the 2 · 2 · 16 · (4 · 16) · 4 = 16384 that repeating each K/V head for its 2 query heads
  // sends. Under TP 2 a rank holds kv/t = 1 K/V head: 2 · 2 · 16 · 16 · 4 = 4096 bytes.
  const auto [bytes, sends] = ringSends("cp_llama", "--workload tiny-llama --nproc 2 --cp 2");
  EXPECT_EQ(bytes, 2 * 2 * (32 / 2) * (2 * 16) * 4);
  EXPECT_EQ(sends, 4 * 2 * 4 * 2);  // 1 + 3 sends per layer per micro-batch: 2 layers x 4 micro-batches x 2 steps
  const auto [tp_bytes, tp_sends] = ringSends("cp_llama_tp2", "--workload tiny-llama --nproc 4 --cp 2 --tp 2");
  EXPECT_EQ(tp_bytes, 2 * 2 * (32 / 2) * (1 * 16) * 4);
  EXPECT_EQ(tp_sends, sends);
}
