// moe_test.cpp — the mixture-of-experts MLP (model/moe.h): routing, capacity drops, drop-less, the
// aux and z losses against hand computations, a per-token reference, and expert parallelism over
// two forked ranks against the single-process layer.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "model/moe.h"
#include "trainscope/common/error.h"
#include "trainscope/runtime/gpt.h"
#include "util.h"

namespace rt = trainscope::runtime;
namespace wl = trainscope::workloads;
using trainscope::testing::relErr;
using trainscope::testing::runForkedRanks;

namespace {

wl::Workload moeShape(int64_t E, int64_t k, double cf, bool shared = false) {
  wl::Workload w = wl::load("tiny-moe");
  w.n_experts = E, w.top_k = k, w.capacity_factor = cf, w.shared_expert = shared;
  wl::validate(w);
  return w;
}

rt::MoeWeights weights(const wl::Workload& w, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return rt::shardMoe(rt::initMoe(w, gen), 1, 0, at::kCPU);
}

at::Tensor randn(std::vector<int64_t> shape, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::empty(shape, at::kFloat).normal_(0.0, 1.0, gen);
}

// Expert e's MLP on one row x (C): what the layer computes, written out.
at::Tensor expertOf(const rt::MoeWeights& w, int64_t e, const at::Tensor& x) {
  at::Tensor h = at::gelu(at::matmul(w.fc_w[e], x) + w.fc_b[e], "tanh");
  return at::matmul(w.proj_w[e], h) + w.proj_b[e];
}

}  // namespace

TEST(Moe, AuxAndZLossMatchAHandComputationOnATinyCase) {
  // E = 2 experts, k = 1, C = 32 (tiny-moe), N = 4 tokens. Router: expert 0 scores x·u, expert 1
  // scores 0, with u the first unit vector; tokens' first features 2, 1, -1, 0.5.
  const wl::Workload w = moeShape(2, 1, 0);
  rt::MoeWeights m = weights(w, 1);
  m.router_w.detach().zero_();  // the leaf's storage, outside autograd
  m.router_w.detach()[0][0] = 1.0;
  at::Tensor x = at::zeros({1, 4, 32});
  const double s[4] = {2, 1, -1, 0.5};
  for (int n = 0; n < 4; ++n) x[0][n][0] = s[n];
  rt::MoeSpec spec = rt::MoeSpec::of(w);
  spec.aux_loss_coeff = 0.1, spec.z_loss_coeff = 0.01;
  rt::ExpertLoad load;
  at::Tensor y = rt::moeForward(m, x, spec, nullptr, &load);
  // p0 = sigmoid(s): tokens 0, 1, 3 pick expert 0, token 2 expert 1: f = (3/4, 1/4).
  double P0 = 0, z = 0;
  for (double v : s) {
    P0 += 1 / (1 + std::exp(-v)) / 4;
    const double lse = std::log(std::exp(v) + 1);
    z += lse * lse / 4;
  }
  const double aux = 0.1 * 2 * (0.75 * P0 + 0.25 * (1 - P0));
  EXPECT_NEAR(load.aux_loss, aux, 1e-6);
  EXPECT_NEAR(load.z_loss, 0.01 * z, 1e-6);
  EXPECT_EQ(load.tokens, (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(load.dropped, 0);
  EXPECT_NEAR(load.imbalance(), 1.5, 1e-12);
  // The losses' gradient rides on the output: with a zero upstream gradient the router's gradient is
  // d(aux + z)/dW exactly. By hand for row 0, column 0: d/ds of the per-token terms.
  (y * 0).sum().backward();
  double d = 0;
  for (double v : s) {
    const double p = 1 / (1 + std::exp(-v)), dp = p * (1 - p);
    d += (0.1 * 2 * (0.75 - 0.25) * dp / 4 + 0.01 * 2 * std::log(std::exp(v) + 1) * p / 4) * v;
  }
  EXPECT_NEAR(m.router_w.grad()[0][0].item<double>(), d, 1e-6);
}

TEST(Moe, ARouterSendingEveryTokenToOneExpertDropsWhatExceedsTheCapacity) {
  // Every token's features positive and the router's row 0 positive, the others 0: all 16 tokens
  // choose expert 0. Capacity ceil(1.0 · 16 · 1 / 4) = 4: the first 4 tokens in token order are
  // kept, 12 dropped (their MLP output is exactly zero: the residual only).
  const wl::Workload w = moeShape(4, 1, 1.0);
  rt::MoeWeights m = weights(w, 2);
  m.router_w.detach().zero_();
  m.router_w.detach()[0].fill_(1.0);
  at::Tensor x = randn({2, 8, 32}, 3).abs() + 0.1;
  rt::ExpertLoad load;
  at::Tensor y = rt::moeForward(m, x, rt::MoeSpec::of(w), nullptr, &load).reshape({16, 32});
  EXPECT_EQ(load.tokens, (std::vector<int64_t>{16, 0, 0, 0}));
  EXPECT_EQ(load.capacity, 4);
  EXPECT_EQ(load.dropped, 12);
  EXPECT_DOUBLE_EQ(load.imbalance(), 4.0);  // max / mean = 16 / 4
  at::Tensor x2 = x.reshape({16, 32});
  at::Tensor probs = at::softmax(at::matmul(x2, m.router_w.t()), 1);
  for (int64_t n = 0; n < 16; ++n) {
    if (n < 4) EXPECT_LT(relErr(y[n], probs[n][0] * expertOf(m, 0, x2[n])), 1e-5) << n;
    else EXPECT_EQ(y[n].abs().max().item<float>(), 0.0f) << n;
  }
}

TEST(Moe, DropLessKeepsEveryAssignment) {
  const wl::Workload w = moeShape(4, 1, 0);
  rt::MoeWeights m = weights(w, 2);
  m.router_w.detach().zero_();
  m.router_w.detach()[0].fill_(1.0);
  at::Tensor x = randn({2, 8, 32}, 3).abs() + 0.1;
  rt::ExpertLoad load;
  at::Tensor y = rt::moeForward(m, x, rt::MoeSpec::of(w), nullptr, &load).reshape({16, 32});
  EXPECT_EQ(load.capacity, 0);
  EXPECT_EQ(load.dropped, 0);
  at::Tensor x2 = x.reshape({16, 32});
  at::Tensor probs = at::softmax(at::matmul(x2, m.router_w.t()), 1);
  for (int64_t n = 0; n < 16; ++n) EXPECT_LT(relErr(y[n], probs[n][0] * expertOf(m, 0, x2[n])), 1e-5) << n;
}

TEST(Moe, TopTwoWithSharedExpertMatchesAPerTokenReference) {
  // Random router, k = 2 renormalised gates, a shared expert; drop-less.
  const wl::Workload w = moeShape(4, 2, 0, /*shared=*/true);
  rt::MoeWeights m = weights(w, 5);
  at::Tensor x = randn({2, 8, 32}, 6);
  at::Tensor y = rt::moeForward(m, x, rt::MoeSpec::of(w)).reshape({16, 32});
  at::Tensor x2 = x.reshape({16, 32});
  at::Tensor probs = at::softmax(at::matmul(x2, m.router_w.t()), 1);
  for (int64_t n = 0; n < 16; ++n) {
    auto [p, e] = probs[n].topk(2);
    const int64_t e0 = e[0].item<int64_t>(), e1 = e[1].item<int64_t>();
    at::Tensor g = p / p.sum();
    at::Tensor h = at::gelu(at::matmul(m.shared_fc_w, x2[n]) + m.shared_fc_b, "tanh");
    at::Tensor want = g[0] * expertOf(m, e0, x2[n]) + g[1] * expertOf(m, e1, x2[n]) +
                      at::matmul(m.shared_proj_w, h) + m.shared_proj_b;
    EXPECT_LT(relErr(y[n], want), 1e-5) << n;
  }
}

TEST(Moe, TopTwoCapacityDropsExactlyEachExpertsExcess) {
  // Capacity ceil(0.5 · 16 · 2 / 4) = 4 per expert, 32 assignments for 16 slots: each expert keeps
  // 4 and drops the rest of what it was routed.
  const wl::Workload w = moeShape(4, 2, 0.5);
  rt::MoeWeights m = weights(w, 7);
  at::Tensor x = randn({2, 8, 32}, 8);
  rt::ExpertLoad load;
  rt::moeForward(m, x, rt::MoeSpec::of(w), nullptr, &load);
  EXPECT_EQ(load.capacity, 4);
  EXPECT_EQ(load.assignments, 32);
  int64_t over = 0;  // what capacity must drop at least: each expert's excess over 4
  for (int64_t t : load.tokens) over += std::max<int64_t>(0, t - 4);
  EXPECT_EQ(load.dropped, over);
  EXPECT_GE(load.dropped, 16);  // 32 assignments, 16 slots
}

// ---- expert parallelism over two forked ranks ---------------------------------------------------

namespace {


// One rank of EP 2 (the 2-rank world's dp group is the ep group): the layer on this rank's tokens
// with its two experts against the single-process layer with all four on the same tokens, forward
// and backward. Returns "" or what differs.
std::string expertParallelAsRank(int rank, int port, double cf) {
  at::set_num_threads(1);  // the parent's intra-op pool does not survive fork()
  auto comm = trainscope::testing::connectForkedRank(rank, port);
  const wl::Workload w = moeShape(4, 2, cf);
  rt::MoeSpec spec = rt::MoeSpec::of(w);
  spec.aux_loss_coeff = 0.1, spec.z_loss_coeff = 0.01;
  at::Generator gen = at::detail::createCPUGenerator(11);
  const rt::MoeWeights full = rt::initMoe(w, gen);
  // This rank's tokens and upstream gradient; the reference runs both ranks' halves, each on its
  // own copy of the weights so that the router's gradient of each half stays apart.
  std::vector<at::Tensor> xs, dys;
  for (int q = 0; q < 2; ++q) {
    xs.push_back(randn({2, 8, 32}, 100 + q).requires_grad_(true));
    dys.push_back(randn({2, 8, 32}, 200 + q));
  }
  std::vector<rt::MoeWeights> ref;
  std::vector<at::Tensor> ref_y, ref_x;
  std::vector<rt::ExpertLoad> ref_load(2);
  for (int q = 0; q < 2; ++q) {
    ref.push_back(rt::shardMoe(full, 1, 0, at::kCPU));
    at::Tensor x = xs[size_t(q)].detach().clone().requires_grad_(true);
    at::Tensor y = rt::moeForward(ref.back(), x, spec, nullptr, &ref_load[size_t(q)]);
    (y * dys[size_t(q)]).sum().backward();
    ref_y.push_back(y.detach());
    ref_x.push_back(x.grad());
  }
  rt::MoeWeights mine = rt::shardMoe(full, 2, rank, at::kCPU);
  rt::ExpertLoad load;
  comm->log().take();
  at::Tensor x = xs[size_t(rank)];
  at::Tensor y = rt::moeForward(mine, x, spec, &comm->dp(), &load);
  (y * dys[size_t(rank)]).sum().backward();

  std::string bad;
  auto check = [&](const char* what, const at::Tensor& got, const at::Tensor& want) {
    const double e = relErr(got, want);
    if (!(e < 1e-5)) bad += std::string(what) + " differs by " + std::to_string(e) + "; ";
  };
  check("output", y, ref_y[size_t(rank)]);
  check("input gradient", x.grad(), ref_x[size_t(rank)]);
  check("router gradient", mine.router_w.grad(), ref[size_t(rank)].router_w.grad());
  // This rank's experts saw both ranks' tokens: their gradients sum the two halves'.
  auto mineOf = [&](const at::Tensor& g0, const at::Tensor& g1) { return (g0 + g1).narrow(0, rank * 2, 2); };
  check("c_fc weight gradient", mine.fc_w.grad(), mineOf(ref[0].fc_w.grad(), ref[1].fc_w.grad()));
  check("c_fc bias gradient", mine.fc_b.grad(), mineOf(ref[0].fc_b.grad(), ref[1].fc_b.grad()));
  check("c_proj weight gradient", mine.proj_w.grad(), mineOf(ref[0].proj_w.grad(), ref[1].proj_w.grad()));
  check("c_proj bias gradient", mine.proj_b.grad(), mineOf(ref[0].proj_b.grad(), ref[1].proj_b.grad()));
  if (load.tokens != ref_load[size_t(rank)].tokens || load.dropped != ref_load[size_t(rank)].dropped)
    bad += "expert load differs; ";
  // Two all-to-alls forward and two backward, each recorded with its bytes: 2·(M + R)·C·4 in all
  // (docs/architecture.md, "Mixture of experts"), M this rank's kept assignments, R those it received.
  int a2a = 0;
  int64_t bytes = 0;
  for (const auto& c : comm->log().take())
    if (c.op == "all_to_all" && c.group_size == 2) ++a2a, bytes += c.bytes;
  if (a2a != 4) bad += std::to_string(a2a) + " all_to_all records, not 4; ";
  if (cf == 0) {  // drop-less: M = N·k, R = both ranks' assignments to this rank's experts
    int64_t R = 0;
    for (int q = 0; q < 2; ++q) R += ref_load[size_t(q)].tokens[size_t(2 * rank)] + ref_load[size_t(q)].tokens[size_t(2 * rank + 1)];
    const int64_t want = 2 * (16 * 2 + R) * 32 * 4;
    if (bytes != want) bad += "all_to_all bytes " + std::to_string(bytes) + ", not " + std::to_string(want) + "; ";
  }
  if (cf > 0 && load.dropped == 0) bad += "no assignment dropped at capacity factor " + std::to_string(cf) + "; ";
  return bad;
}

void runTwoRanks(double cf) {
  runForkedRanks(2, [&](int rank, int port) {
    const std::string bad = expertParallelAsRank(rank, port, cf);
    if (!bad.empty()) std::fprintf(stderr, "rank %d: %s\n", rank, bad.c_str());
    return bad.empty() ? 0 : 1;
  });
}

}  // namespace

TEST(MoeExpertParallel, TwoRanksDropLessEqualTheSingleProcessLayerForwardAndBackward) { runTwoRanks(0.0); }

TEST(MoeExpertParallel, TwoRanksWithTokenDroppingEqualTheSingleProcessLayer) { runTwoRanks(0.5); }

TEST(Moe, AnEpThatDoesNotDivideTheExpertsIsAUserErrorNamingIt) {
  const wl::Workload w = moeShape(4, 1, 0);
  at::Generator gen = at::detail::createCPUGenerator(1);
  try {
    rt::shardMoe(rt::initMoe(w, gen), 3, 0, at::kCPU);
    FAIL() << "no error";
  } catch (const trainscope::UserError& e) {
    EXPECT_EQ(e.field(), "--ep");
    EXPECT_NE(std::string(e.what()).find("divides n_experts"), std::string::npos) << e.what();
  }
}

TEST(Moe, TheGptHoldsTheMoeLayersTheWorkloadNames) {
  // small-cpu-moe: a MoE MLP in layers 0 and 2 (moe_every 2); the model holds exactly the workload's
  // total parameter count, and the flat list reads back into the same blocks.
  const wl::Workload w = wl::load("small-cpu-moe");
  rt::GptWeights g = rt::initGpt(w, 1, at::kCPU);
  ASSERT_EQ(g.blocks.size(), 4u);
  for (size_t l = 0; l < 4; ++l) EXPECT_EQ(g.blocks[l].isMoe(), l % 2 == 0) << l;
  EXPECT_EQ(g.blocks[2].moe.layer, 2);
  EXPECT_EQ(g.blocks[0].moe.fc_w.sizes(), (at::IntArrayRef{8, 1024, 256}));
  int64_t n = 0;
  for (const auto& t : g.flat()) n += t.numel();
  EXPECT_EQ(n, w.parameterCount());
  const rt::StageSpec st = rt::StageSpec::whole(4).withModel(w);
  const auto info = rt::GptWeights::info(st);
  ASSERT_EQ(info.size(), g.flat().size());
  EXPECT_EQ(info[2 + 8].name, "h.0.mlp.router.weight");
  EXPECT_TRUE(info[2 + 9].expert);
  EXPECT_FALSE(info[2 + 8].expert);
  rt::GptWeights back = rt::GptWeights::fromFlat(g.flat(), st);
  EXPECT_TRUE(back.blocks[0].isMoe());
  EXPECT_FALSE(back.blocks[1].isMoe());
  EXPECT_TRUE(back.blocks[2].moe.router_w.is_same(g.blocks[2].moe.router_w));
  // ep 2: rank 1 keeps experts 4..7 of each MoE layer, and nothing of the dense MLPs changes.
  rt::GptWeights r1 = rt::shardGpt(g, st, 1, 0, at::kCPU, 2, 1);
  EXPECT_TRUE(at::equal(r1.blocks[0].moe.fc_w, g.blocks[0].moe.fc_w.narrow(0, 4, 4)));
  EXPECT_TRUE(at::equal(r1.blocks[1].fc_w, g.blocks[1].fc_w));
}
