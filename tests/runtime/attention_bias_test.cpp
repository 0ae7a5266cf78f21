// attention_bias_test.cpp — what the attention core adds to its scores (issue 32): ALiBi's slopes and
// bias, sliding windows under context parallelism, and Qwen2's window on some layers only.
//   ALiBi's slopes are Press et al.'s (powers of two: 2^(-8k/n); otherwise the interleaved rule),
//     each TP rank's heads their slice of the model's
//   the fp32 CPU kernel, SDPA's path (fp64 here: the kernel takes fp32 only) and selective
//     checkpointing's recomputed core equal an explicit reference written here (softmax of
//     QKᵀ/√d − m·(t − j), masked outside the causal window): values and the gradient of qkv
//   the context-parallel ring (forked Gloo ranks, CP 2 and 3; MHA and GQA) with ALiBi and a window equals the
//     same reference at each rank's load-balanced chunks
//   training through the command line equals one process: an ALiBi decoder under TP 2 + SP with
//     selective checkpointing and under CP 2 with full checkpointing; a windowed Mistral under CP 2
//     (selective and full); a Qwen2 windowing layer 1 only under PP 2 — and each bias acts (another
//     loss than the same model without it)
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "model/attention.h"
#include "model/checkpoint.h"
#include "model/context_parallel.h"
#include "same_training.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/runtime/data.h"
#include "util.h"

namespace rt = trainscope::runtime;
using namespace trainscope::testing;

namespace {

// The reference: q (B, H, T, D), k and v (B, KV, T, D) at positions qpos (Tq) and kpos (Tk); query
// head i reads K/V head i / (H/KV); score(t, j) = q·k/√D − slope_i·(t − j), −∞ unless
// t − window < j ≤ t (window 0: j ≤ t). Written from the definitions, not from the runtime's code.
at::Tensor referenceAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& qpos,
                              const at::Tensor& kpos, const std::vector<double>& slopes, int64_t window) {
  const int64_t H = q.size(1), KV = k.size(1), D = q.size(3);
  const at::Tensor kr = k.repeat_interleave(H / KV, 1), vr = v.repeat_interleave(H / KV, 1);
  at::Tensor s = at::matmul(q, kr.transpose(-2, -1)) / std::sqrt(double(D));  // (B, H, Tq, Tk)
  const at::Tensor dist = (qpos.view({-1, 1}) - kpos.view({1, -1})).to(q.scalar_type());  // t − j
  for (int64_t h = 0; h < H && !slopes.empty(); ++h) s.select(1, h).sub_(dist * slopes[size_t(h)]);
  at::Tensor out = dist < 0;
  if (window > 0) out = out.logical_or(dist >= double(window));
  s = s.masked_fill(out, -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(s, -1), vr);
}

// qkv (B, T, (H + 2·KV)·D) split into the reference's (B, n, T, D) tensors.
std::vector<at::Tensor> heads(const at::Tensor& qkv, int64_t H, int64_t KV, int64_t D) {
  const int64_t B = qkv.size(0), T = qkv.size(1);
  auto p = qkv.split_with_sizes({H * D, KV * D, KV * D}, 2);
  return {p[0].view({B, T, H, D}).transpose(1, 2), p[1].view({B, T, KV, D}).transpose(1, 2),
          p[2].view({B, T, KV, D}).transpose(1, 2)};
}

}  // namespace

TEST(AttentionBias, AlibiSlopesArePressEtAlsAndEachTpRankTakesItsHeads) {
  const std::vector<double> eight = rt::alibiSlopes(8, 0, 8);
  ASSERT_EQ(eight.size(), 8u);
  for (int k = 1; k <= 8; ++k) EXPECT_DOUBLE_EQ(eight[size_t(k - 1)], std::pow(2.0, -k));  // 2^(-8k/8)
  // 6 heads: 4's slopes 2^-2, 2^-4, 2^-6, 2^-8, then 8's odd-numbered ones 2^-1, 2^-3.
  const double six[] = {0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125};
  const std::vector<double> all = rt::alibiSlopes(6, 0, 6);
  for (int i = 0; i < 6; ++i) EXPECT_DOUBLE_EQ(all[size_t(i)], six[i]) << i;
  const std::vector<double> rank1 = rt::alibiSlopes(6, 3, 3);  // TP 2's second rank: heads 3, 4, 5
  for (int i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(rank1[size_t(i)], six[3 + i]) << i;
  EXPECT_DOUBLE_EQ(rt::alibiSlopes(1, 0, 1)[0], 1.0 / 256);  // one head: 2^-8
}

TEST(AttentionBias, CoresEqualAnExplicitReferenceWithAlibiAndAWindow) {
  const int64_t B = 2, T = 37, H = 6, KV = 2, D = 8;
  const std::vector<double> slopes = rt::alibiSlopes(H, 0, H);
  at::manual_seed(3);
  const at::Tensor base = at::randn({B, T, (H + 2 * KV) * D}, at::kDouble), w = at::randn({B, T, H * D}, at::kDouble);
  const at::Tensor pos = at::arange(T, at::kLong);
  for (int64_t window : {int64_t(0), int64_t(9)}) {
    at::Tensor ref_in = base.clone().requires_grad_(true);
    auto r = heads(ref_in, H, KV, D);
    at::Tensor ref = referenceAttention(r[0], r[1], r[2], pos, pos, slopes, window).transpose(1, 2).reshape({B, T, H * D});
    (ref * w).sum().backward();
    const rt::cpu_ops::ScoreBias bias{window, slopes};
    for (int path = 0; path < 3; ++path) {  // the fp32 kernel, SDPA's path (fp64), selective recomputation
      const bool fp32 = path == 0;
      at::Tensor in = (fp32 ? base.to(at::kFloat) : base.clone()).requires_grad_(true);
      at::Tensor y = path == 2 ? rt::checkpointAttention(in, H, KV, bias) : rt::detail::attentionCore(in, H, KV, bias);
      (y * (fp32 ? w.to(at::kFloat) : w)).sum().backward();
      const double tol = fp32 ? 1e-5 : 1e-10;
      EXPECT_LT(relErr(y, ref), tol) << "path " << path << " window " << window;
      EXPECT_LT(relErr(in.grad(), ref_in.grad()), tol) << "path " << path << " window " << window;
    }
  }
  // The bias acts: without slopes the output is another.
  at::Tensor plain = rt::detail::attentionCore(base.to(at::kFloat), H, KV, {});
  at::Tensor alibi = rt::detail::attentionCore(base.to(at::kFloat), H, KV, rt::cpu_ops::ScoreBias{0, slopes});
  EXPECT_GT(relErr(plain, alibi), 1e-2);
}

namespace {

// One CP rank in a forked child: its chunks of the same random q (NH heads), k and v (KV heads)
// through the ring with ALiBi and a window, against the reference over the whole sequence at the
// chunks' positions.
int biasedRingAsRank(int rank, int cp, int port, int64_t window, int64_t NH, int64_t KV) {
  at::set_num_threads(1);
  rt::RankEnv env;
  env.distributed = true;
  env.rank = env.local_rank = rank;
  env.world = env.local_world = cp;
  env.master_port = port;
  env.source = "test";
  auto comm = rt::Comm::connect(env, rt::Layout::make(cp, rank, 1, 1, cp), rt::CommOptions{});
  const int64_t B = 2, T = 2 * cp * 5, HS = 8;
  const std::vector<double> slopes = rt::alibiSlopes(NH, 0, NH);
  at::manual_seed(11);
  at::Tensor q = at::randn({B, NH, T, HS}), k = at::randn({B, KV, T, HS}), v = at::randn({B, KV, T, HS});
  at::Tensor w = at::randn({B, NH, T, HS});
  for (at::Tensor* t : {&q, &k, &v}) t->requires_grad_(true);
  const at::Tensor pos = at::arange(T, at::kLong);
  at::Tensor ref = referenceAttention(q, k, v, pos, pos, slopes, window);
  (ref * w).sum().backward();

  rt::CpContext ctx;
  ctx.group = &comm->cp();
  ctx.positions = rt::contextPositions(T, cp, rank, at::kCPU);
  auto mine = [&](const at::Tensor& t) { return t.detach().index_select(2, ctx.positions); };
  at::Tensor ql = mine(q).requires_grad_(true), kl = mine(k).requires_grad_(true), vl = mine(v).requires_grad_(true);
  at::Tensor y = rt::ringAttention(ql, kl, vl, ctx, rt::cpu_ops::ScoreBias{window, slopes});
  (y * mine(w)).sum().backward();
  const double errs[] = {relErr(y, mine(ref)), relErr(ql.grad(), mine(q.grad())), relErr(kl.grad(), mine(k.grad())),
                         relErr(vl.grad(), mine(v.grad()))};
  bool ok = true;
  for (double e : errs) ok = ok && e < 1e-5;
  if (!ok)
    std::fprintf(stderr, "rank %d of %d, window %lld, %lld/%lld heads: rel err y %.3g dq %.3g dk %.3g dv %.3g\n",
                 rank, cp, static_cast<long long>(window), static_cast<long long>(NH), static_cast<long long>(KV),
                 errs[0], errs[1], errs[2], errs[3]);
  return ok ? 0 : 1;
}

}  // namespace

// CP 2 (chunks of 5: window 7 reaches into the other rank's chunk) and CP 3 (window 4 < a chunk:
// some block pairs are wholly outside it and skipped); window 0: ALiBi alone. 3 heads of their own,
// and 4 query heads over 2 K/V heads (each query head its own slope within a K/V head's group).
TEST(AttentionBias, ContextParallelRingAppliesAlibiAndTheWindowAtTheChunksPositions) {
  for (auto [nh, kv] : {std::pair<int64_t, int64_t>{3, 3}, {4, 2}})
    for (auto [cp, window] : {std::pair<int, int64_t>{2, 7}, {3, 4}, {2, 0}})
      runForkedRanks(cp, [&, cp = cp, window = window, nh = nh, kv = kv](int rank, int port) {
        return biasedRingAsRank(rank, cp, port, window, nh, kv);
      });
}

namespace {

// One `trainscope run` of 4 steps, gbs 8, seq 32, fp32, constant LR; each name once per process.
std::string run(const std::string& name, const std::string& args) {
  static std::map<std::string, std::string> done;
  if (auto it = done.find(name); it != done.end()) return it->second;
  const std::string db = tempPath("bias_" + name + ".db");
  const std::string cmd = std::string("timeout 300 ") + TRAINSCOPE_CLI +
                          " run --seq 32 --gbs 8 --mbs 2 --steps 4 --device cpu --min-lr-ratio 1 --lr 3e-3 -q --clip 0"
                          " --overwrite --out " + db + " " + args;
  CliResult r = sh(cmd);
  EXPECT_EQ(r.status, 0) << cmd << "\n" << r.output;
  if (r.status == 0) done[name] = db;
  return db;
}

std::string writeFile(const std::string& name, const std::string& text) {
  const std::string path = tempPath(name);
  std::ofstream(path) << text;
  return path;
}

// A Llama-shaped decoder with ALiBi instead of RoPE: 6 heads (not a power of two: the interleaved
// slopes, 3 per TP rank), 2 K/V heads, RMSNorm, SwiGLU, no biases, untied head.
std::string alibiWorkload(const char* positions) {
  return writeFile(std::string("bias_") + positions + ".json",
                   std::string(R"({"name": "alibi-tiny", "n_layer": 2, "n_head": 6, "n_kv_head": 2, "n_embd": 48,
    "n_positions": 64, "vocab_size": 255, "norm": "rmsnorm", "mlp": "swiglu", "ffn_hidden": 96, "bias": false,
    "tie_embeddings": false, "positions": ")") + positions + "\"}");
}

std::string mistralWorkload(int window) {
  return writeFile("bias_mistral" + std::to_string(window) + ".json",
                   R"({"model_type": "mistral", "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 255,
    "max_position_embeddings": 64, "rope_theta": 10000.0, "rms_norm_eps": 1e-05, "hidden_act": "silu",
    "sliding_window": )" + std::to_string(window) + "}");
}

std::string qwenWorkload(int max_window_layers) {
  return writeFile("bias_qwen" + std::to_string(max_window_layers) + ".json",
                   R"({"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 255,
    "max_position_embeddings": 64, "rope_theta": 10000.0, "rms_norm_eps": 1e-06, "hidden_act": "silu",
    "tie_word_embeddings": false, "use_sliding_window": true, "sliding_window": 6, "max_window_layers": )" +
                       std::to_string(max_window_layers) + "}");
}

// The bias acts: over the 4 steps the losses part by more than 5× the equivalence tolerance (1e-5).
// (At initialisation attention is nearly uniform, so the first step's losses differ least.)
void expectDifferentLoss(const std::string& a_db, const std::string& b_db) {
  const auto a = trainscope::rundb::readSteps(a_db), b = trainscope::rundb::readSteps(b_db);
  ASSERT_TRUE(!a.empty() && a.size() == b.size());
  double most = 0;
  for (size_t k = 0; k < a.size(); ++k) most = std::max(most, std::abs(a[k].loss - b[k].loss) / std::abs(b[k].loss));
  EXPECT_GT(most, 5e-5);
}

}  // namespace

TEST(AttentionBiasTraining, AlibiUnderTensorAndContextParallelEqualsOneProcess) {
  const std::string w = "--workload " + alibiWorkload("alibi");
  const std::string one = run("alibi_ref", w);
  expectSameTraining(one, run("alibi_tp2sp", w + " --nproc 2 --tp 2 --sequence-parallel --ckpt selective"));
  expectSameTraining(one, run("alibi_cp2", w + " --nproc 2 --cp 2 --ckpt full"));
  expectDifferentLoss(one, run("alibi_none", "--workload " + alibiWorkload("none")));
}

TEST(AttentionBiasTraining, SlidingWindowUnderContextParallelEqualsOneProcess) {
  // Window 6 at seq 32 under CP 2: chunks of 8, so the window crosses chunk and rank boundaries.
  const std::string w = "--workload " + mistralWorkload(6);
  const std::string one = run("window_ref", w);
  expectSameTraining(one, run("window_cp2", w + " --nproc 2 --cp 2 --ckpt selective"));
  expectSameTraining(one, run("window_cp2_full", w + " --nproc 2 --cp 2 --ckpt full"));
  expectDifferentLoss(one, run("window_none", "--workload " + mistralWorkload(64)));
}

TEST(AttentionBiasTraining, QwenWindowOnLaterLayersOnlyUnderPipelineEqualsOneProcess) {
  // max_window_layers 1: layer 0 full, layer 1 windowed — on the second pipeline stage under PP 2.
  const std::string w = "--workload " + qwenWorkload(1);
  const std::string one = run("qwen_ref", w);
  expectSameTraining(one, run("qwen_pp2", w + " --nproc 2 --pp 2"));
  expectSameTraining(one, run("qwen_tp2_full", w + " --nproc 2 --tp 2 --ckpt full"));
  expectDifferentLoss(one, run("qwen_all", "--workload " + qwenWorkload(0)));   // every layer windowed
  expectDifferentLoss(one, run("qwen_none", "--workload " + qwenWorkload(2)));  // none
}
