// search_test.cpp — the search strategies (tuner/search.h) driven by a fake runner: scripted step
// times instead of trial processes, no study, no clock. What successive halving must do: profile
// one candidate per layer shape first, keep the fastest half, run the final stage alternately, and
// pick the fastest by pooled step time among the finalists; exhaustive measures every candidate. And
// the space it searches: ZeRO 0–3, virtual stages and CP, every rejection with its reason.
#include "trainscope/tuner/search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "trainscope/common/error.h"
#include "trainscope/tuner/models.h"
#include "trainscope/workloads/workload.h"

namespace tn = trainscope::tuner;

namespace {

// `n` valid candidates, ids 0…n-1, ranked by predicted step time (id order), on a one-node CPU
// cluster; every candidate its own layer shape unless `shapes` > 0 (then id % shapes: mbs).
struct Space {
  tn::Cluster cluster;
  std::vector<tn::Candidate> all;
};
Space space(int n, int shapes = 0) {
  Space s;
  s.cluster.name = "fake";
  s.cluster.kind = tn::ClusterKind::Cpu;
  s.cluster.nodes = 1;
  s.cluster.devices_per_node = 1;
  for (int i = 0; i < n; ++i) {
    tn::Candidate c;
    c.id = i;
    c.plan.gbs = 64;
    c.plan.seq = 64;
    c.plan.mbs = shapes > 0 ? 1 + i % shapes : 1 + i;
    c.plan.dp = 1;
    c.predicted_step_s = 0.1 + 0.01 * i;
    c.predicted_peak = 1;
    s.all.push_back(c);
  }
  return s;
}

struct SearchRun {
  std::vector<tn::TrialBatch> batches;
  std::vector<tn::TrialRecord> trials;
  std::optional<int64_t> pick;
};

// The driver's loop, with a fake runner: candidate → (round → step time); 0 is a crash.
SearchRun drive(tn::SearchStrategy& s, std::vector<tn::Candidate>& all,
                const std::function<double(int64_t id, int64_t round)>& step_s) {
  SearchRun r;
  int64_t next_id = 1;
  while (auto b = s.nextBatch(tn::StudyState{all})) {
    r.batches.push_back(*b);
    for (int64_t id : b->candidates) {
      tn::TrialRecord t;
      t.id = next_id++;
      t.candidate = id;
      t.round = b->round;
      t.steps = b->steps;
      t.step_s = step_s(id, b->round);
      t.status = t.step_s > 0 ? tn::TrialStatus::Ok : tn::TrialStatus::Crash;
      t.peak_bytes = 1;
      s.observe(t);
      r.trials.push_back(t);
    }
    EXPECT_LT(r.batches.size(), 100u) << "the search does not end";
    if (r.batches.size() >= 100) break;
  }
  r.pick = s.pick(r.trials, 1 << 20);
  return r;
}

tn::SearchOptions options(int64_t first_round, int64_t finalists = 3, int64_t final_rounds = 2) {
  tn::SearchOptions o;
  o.first_round = first_round;
  o.base_steps = 3;
  o.finalists = finalists;
  o.final_rounds = final_rounds;
  return o;
}

}  // namespace

TEST(Search, HalvingKeepsTheFastestRunsTheFinalStageAndPicksTheFastestPooled) {
  Space sp = space(12, 4);  // 4 shapes of 3 candidates each
  auto s = tn::makeSearch("halving", sp.all, sp.cluster, options(8));
  ASSERT_EQ(s->profiles(), (std::vector<int64_t>{0, 1, 2, 3}));  // the best-predicted of each shape
  // Scripted: candidate 6 is the fastest, 5 a close second that wins its first final trial by noise.
  const std::map<int64_t, double> base = {{0, 0.30}, {1, 0.25}, {2, 0.20}, {3, 0.40}, {4, 0.50},  {5, 0.11},
                                          {6, 0.10}, {7, 0.35}, {8, 0.45}, {9, 0.60}, {10, 0.70}, {11, 0.80}};
  const SearchRun r = drive(*s, sp.all, [&](int64_t id, int64_t round) {
    if (id == 5 && round == 2) return 0.095;
    return base.at(id);
  });
  // Round 0: the 4 profiles, then the 4 best-predicted others; the faster half (4) runs round 1
  // twice as long; halving 4 would leave 2 ≤ 3 finalists, so the best 3 run the final stage: two
  // more rounds each, alternately, at four times round 0's length.
  ASSERT_EQ(r.batches.size(), 5u);
  EXPECT_EQ(r.batches[0].stage, tn::SearchStage::Profile);
  EXPECT_EQ(r.batches[1].candidates, (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(r.batches[1].round, 0);
  EXPECT_EQ(r.batches[2].round, 1);
  EXPECT_EQ(r.batches[2].steps, 6);
  EXPECT_EQ(r.batches[2].candidates, (std::vector<int64_t>{6, 5, 2, 1}));  // fastest first
  EXPECT_EQ(r.batches[3].stage, tn::SearchStage::Final);
  EXPECT_EQ(r.batches[3].candidates, (std::vector<int64_t>{6, 5, 2}));
  EXPECT_EQ(r.batches[3].steps, 12);
  EXPECT_EQ(r.batches[4].candidates, (std::vector<int64_t>{2, 5, 6}));  // the opposite order
  EXPECT_EQ(r.batches[4].steps, 12);
  // 5 won one final trial, but 6 is faster over all its trials.
  ASSERT_TRUE(r.pick);
  EXPECT_EQ(*r.pick, 6);
  EXPECT_EQ(s->planned(), int64_t(r.trials.size()));
}

TEST(Search, HalvingNeverPicksACandidateWhoseTrialFailedOrThatRanOverMemory) {
  Space sp = space(8);
  auto s = tn::makeSearch("halving", sp.all, sp.cluster, options(8));
  // 0 is fastest but crashes in the final stage; 1 is next.
  const SearchRun r = drive(*s, sp.all, [&](int64_t id, int64_t round) {
    if (id == 0 && round >= 2) return 0.0;
    return 0.1 + 0.01 * double(id);
  });
  ASSERT_TRUE(r.pick);
  EXPECT_EQ(*r.pick, 1);
  // The same trials, with 1 over the memory limit: 2.
  std::vector<tn::TrialRecord> over = r.trials;
  for (auto& t : over)
    if (t.candidate == 1) t.peak_bytes = 2 << 20;
  EXPECT_EQ(s->pick(over, 1 << 20), std::optional<int64_t>(2));
}

TEST(Search, PlainHalvingGoesDownToOne) {
  Space sp = space(8);
  auto s = tn::makeSearch("halving", sp.all, sp.cluster, options(8, 3, 0));
  const SearchRun r = drive(*s, sp.all, [](int64_t id, int64_t) { return 0.1 + 0.01 * double(7 - id); });
  std::vector<size_t> sizes;
  for (const auto& b : r.batches) sizes.push_back(b.candidates.size());
  EXPECT_EQ(sizes, (std::vector<size_t>{8, 4, 2, 1}));
  EXPECT_EQ(*r.pick, 7);
  EXPECT_EQ(r.batches.back().steps, 3 * 8);
}

TEST(Search, AMeasuredShapeThatBeatsTheSurvivorsIsPromotedAfterRoundZero) {
  Space sp = space(10, 2);  // 2 shapes; 6 candidates in round 0
  auto s = tn::makeSearch("halving", sp.all, sp.cluster, options(6));
  std::vector<tn::Candidate>& all = sp.all;
  // Round 0 by hand, then candidate 9 (never run, its shape measured) re-ranked as the fastest.
  auto b = s->nextBatch(tn::StudyState{all});
  ASSERT_TRUE(b);
  std::vector<int64_t> round0 = b->candidates;
  const auto observe = [&](const tn::TrialBatch& batch) {
    for (int64_t id : batch.candidates) {
      tn::TrialRecord t;
      t.candidate = id;
      t.round = batch.round;
      t.steps = batch.steps;
      t.step_s = 0.2 + 0.01 * double(id);
      t.status = tn::TrialStatus::Ok;
      s->observe(t);
    }
  };
  observe(*b);
  b = s->nextBatch(tn::StudyState{all});
  ASSERT_TRUE(b);
  round0.insert(round0.end(), b->candidates.begin(), b->candidates.end());
  EXPECT_EQ(round0.size(), 6u);
  EXPECT_FALSE(std::count(round0.begin(), round0.end(), 9));
  observe(*b);
  for (auto& c : all) c.time_measured = true;
  all[9].predicted_step_s = 0.05;
  b = s->nextBatch(tn::StudyState{all});
  ASSERT_TRUE(b);
  EXPECT_EQ(b->round, 1);
  EXPECT_TRUE(std::count(b->candidates.begin(), b->candidates.end(), 9)) << "9 was not promoted";
}

TEST(Search, ExhaustiveMeasuresEveryCandidateOnceProfilesFirst) {
  Space sp = space(10, 3);
  auto s = tn::makeSearch("exhaustive", sp.all, sp.cluster, options(8));
  const SearchRun r = drive(*s, sp.all, [](int64_t id, int64_t) { return 0.1 + 0.01 * double((id * 7) % 10); });
  ASSERT_EQ(r.batches.size(), 2u);
  EXPECT_EQ(r.batches[0].stage, tn::SearchStage::Profile);
  EXPECT_EQ(r.batches[0].candidates, (std::vector<int64_t>{0, 1, 2}));
  std::set<int64_t> ran;
  for (const auto& t : r.trials) {
    EXPECT_EQ(t.round, 0);
    EXPECT_EQ(t.steps, 12);
    EXPECT_TRUE(ran.insert(t.candidate).second) << t.candidate << " ran twice";
  }
  EXPECT_EQ(ran.size(), 10u);
  EXPECT_EQ(*r.pick, 0);  // (0 × 7) % 10 = 0: the fastest
  EXPECT_EQ(s->planned(), 10);
}

TEST(Search, AnUnknownStrategyIsRefusedNamingTheFlag) {
  Space sp = space(2);
  try {
    tn::makeSearch("bayesian", sp.all, sp.cluster, options(8));
    FAIL() << "accepted";
  } catch (const trainscope::UserError& e) {
    EXPECT_EQ(e.field(), "--search");
  }
}

// The space (space.h): ZeRO 0–3, virtual pipeline stages and context parallelism, each rejection with
// its reason — what the runtime refuses in resolve()'s own words, so that a knob joins the space the
// day the runtime runs it.
namespace {

struct CpuSpace {
  trainscope::workloads::Workload w = trainscope::workloads::load("small-cpu");  // 4 layers, 4 heads, seq ≤ 256
  tn::Cluster c = tn::loadCluster("cpu-local");                                 // 2 ranks
  std::vector<tn::Candidate> all;
  explicit CpuSpace(int64_t seq = 128, int64_t gbs = 8) {
    tn::SpaceOptions o;
    o.gbs = gbs;
    o.seq = seq;
    o.mbs = {1, 2};
    o.ckpt = {trainscope::runconfig::Checkpointing::None};
    o.cp = {1, 2};
    o.virtual_stages = {1, 2, 4};
    all = tn::enumerateSpace(w, c, o);
  }
};

// What resolve() says of the plan's config ("" when it runs it).
std::string resolveSays(const trainscope::workloads::Workload& w, const tn::Plan& p) {
  trainscope::runconfig::TrainConfig c = tn::runConfigOf(w, p);
  c.oversubscribe = true;
  try {
    trainscope::runconfig::resolve(c);
  } catch (const trainscope::UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Space, EnumeratesZeroStagesVirtualStagesAndContextParallelism) {
  namespace rt = trainscope::runconfig;
  const CpuSpace s;
  std::set<int> zeros;
  std::set<int64_t> vs, cps;
  for (const auto& cand : s.all) {
    const tn::Plan& p = cand.plan;
    zeros.insert(rt::stageNumber(p.zero));
    vs.insert(p.virtual_stages);
    cps.insert(p.cp);
    EXPECT_LE(p.world(), 2) << p.describe();
    // Knobs that do nothing for the layout are not candidates of their own.
    EXPECT_FALSE(rt::shardsOptimizer(p.zero) && p.dp == 1) << p.describe();
    EXPECT_FALSE(p.virtual_stages > 1 && (p.pp == 1 || p.pp_schedule == rt::PipelineSchedule::GPipe)) << p.describe();
  }
  EXPECT_EQ(zeros, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(vs, (std::set<int64_t>{1, 2, 4}));
  EXPECT_EQ(cps, (std::set<int64_t>{1, 2}));
}

TEST(Space, EveryRejectionSaysWhyAndTheRuntimesRefusalIsItsOwnError) {
  const CpuSpace s;
  int64_t refused = 0, layers = 0;
  for (const auto& cand : s.all) {
    const tn::Plan& p = cand.plan;
    const std::string invalid = tn::whyInvalid(s.w, p), runtime = resolveSays(s.w, p);
    if (!invalid.empty()) {
      EXPECT_EQ(cand.rejected, invalid);
      layers += p.virtual_stages == 4;  // 4 layers cannot be 2 stages × 4 chunks
    } else if (!runtime.empty()) {
      EXPECT_EQ(cand.rejected, "the runtime refuses it: " + runtime) << p.describe();
      ++refused;
    } else if (!cand.rejected.empty()) {
      EXPECT_EQ(cand.rejected.rfind("predicted memory", 0), 0u) << cand.rejected;
    } else {
      EXPECT_GT(cand.predicted_step_s, 0) << p.describe();
    }
  }
  EXPECT_GT(layers, 0);
  // Until the runtime runs every new knob, some candidates are its refusals; once it does, none is.
  EXPECT_GE(refused, 0);
  // A sequence that two chunks per CP rank do not split: every cp 2 candidate says so.
  const CpuSpace odd(126);
  int64_t cp2 = 0;
  for (const auto& cand : odd.all)
    if (cand.plan.cp == 2) {
      ++cp2;
      EXPECT_EQ(cand.rejected, "context parallelism needs seq=126 divisible by 2 x cp=4");
    }
  EXPECT_GT(cp2, 0);
  // Micro-batches not in groups of pp: interleaving refused with the count.
  const CpuSpace three(128, 6);
  for (const auto& cand : three.all)
    if (cand.plan.virtual_stages == 2 && cand.plan.mbs == 2)
      EXPECT_EQ(cand.rejected, "interleaving needs the micro-batches per step (ga=3) divisible by pp=2");
}

TEST(Space, ATrialRunsWhatItsCandidateDescribes) {
  const CpuSpace s;
  for (const auto& cand : s.all) {
    const trainscope::runconfig::TrainConfig c = tn::runConfigOf(s.w, cand.plan);
    EXPECT_EQ(c.cp, cand.plan.cp);
    EXPECT_EQ(c.virtual_stages, cand.plan.virtual_stages);
    EXPECT_EQ(c.zero, cand.plan.zero);
    EXPECT_EQ(c.nproc, cand.plan.world());
  }
}

// ZeRO-3 hybrid sharding (Plan::zero_shard_size, --zero-shard-size): shards over N, not d; the time adds the
// replicas' all-reduce of the fp32 gradient shard; the plan refuses what the runtime refuses.
TEST(HybridSharding, ShardsOverTheGroupAndAllReducesAcrossReplicas) {
  namespace rt = trainscope::runconfig;
  const auto w = trainscope::workloads::load("small-cpu");
  tn::Plan full;
  full.dp = 4, full.mbs = 1, full.gbs = 4, full.seq = 64;
  full.zero = rt::ZeroStage::Parameters;
  tn::Plan hybrid = full;
  hybrid.zero_shard_size = 2;
  EXPECT_EQ(tn::whyInvalid(w, hybrid), "");
  EXPECT_NE(hybrid.describe().find(" hybrid2"), std::string::npos) << hybrid.describe();
  const auto a = tn::predictMemory(w, full).stages[0], b = tn::predictMemory(w, hybrid).stages[0];
  // Each shard is ⌈n/2⌉ in place of ⌈n/4⌉: twice the parameters, gradients and optimizer state.
  EXPECT_NEAR(double(b.params), 2.0 * double(a.params), 8.0);
  EXPECT_NEAR(double(b.grads), 2.0 * double(a.grads), 8.0);
  EXPECT_NEAR(double(b.optimizer), 2.0 * double(a.optimizer), 16.0);
  const tn::Cluster c = tn::loadCluster("cpu-local");
  EXPECT_GT(tn::predictTime(w, hybrid, c).dp_comm_s, 0);
  // Refusals, as the runtime's.
  tn::Plan bad = hybrid;
  bad.zero_shard_size = 3;
  EXPECT_EQ(tn::whyInvalid(w, bad), "zero_shard=3 does not divide dp=4");
  bad = hybrid;
  bad.zero = rt::ZeroStage::Gradients;
  EXPECT_EQ(tn::whyInvalid(w, bad), "hybrid sharding (zero_shard) needs ZeRO-3");
}

TEST(HybridSharding, TheSpaceTriesShardGroupsOfZero3AsTheRuntimeTakesThem) {
  namespace rt = trainscope::runconfig;
  const auto w = trainscope::workloads::load("small-cpu");
  tn::SpaceOptions o;
  o.gbs = 8, o.seq = 128, o.mbs = {1};
  o.ckpt = {rt::Checkpointing::None};
  o.cp = {1};
  o.virtual_stages = {1};
  o.zero = {rt::ZeroStage::Gradients, rt::ZeroStage::Parameters};
  o.worlds = {4};
  int64_t hybrid = 0;
  for (const auto& cand : tn::enumerateSpace(w, tn::loadCluster("cpu-local"), o)) {
    const tn::Plan& p = cand.plan;
    if (p.zero_shard_size == 0) continue;
    ++hybrid;
    // Only ZeRO-3, a proper divisor of dp; the trial's config carries it, and resolve() has its say.
    EXPECT_EQ(p.zero, rt::ZeroStage::Parameters) << p.describe();
    EXPECT_EQ(p.dp % p.zero_shard_size, 0) << p.describe();
    EXPECT_LT(p.zero_shard_size, p.dp) << p.describe();
    EXPECT_EQ(tn::runConfigOf(w, p).zero_shard_size, p.zero_shard_size);
    const std::string says = resolveSays(w, p);
    if (!says.empty() && tn::whyInvalid(w, p).empty()) EXPECT_EQ(cand.rejected, "the runtime refuses it: " + says);
  }
  EXPECT_GT(hybrid, 0);  // dp 4: groups of 2
}

TEST(HybridSharding, TheCpuTimeAddsTheReplicasAllReduceOfTheGradientShard) {
  namespace rt = trainscope::runconfig;
  const auto w = trainscope::workloads::load("small-cpu");
  const tn::Cluster c = tn::loadCluster("cpu-local");
  tn::Plan p;
  p.dp = 4, p.mbs = 1, p.gbs = 8, p.seq = 64;  // M = 2
  p.zero = rt::ZeroStage::Parameters, p.zero_shard_size = 2;
  // By hand (α–β, nccl-tests' bus factors; nothing hides on a CPU): per micro-batch the fp32 gradients
  // reduce-scattered and the weights gathered twice in bf16, over the n = 2 of a shard group; once a
  // step the fp32 gradient shard (4Ψ/2 bytes) all-reduced over the R = 2 replicas.
  const tn::NetworkTier& tier = p.world() <= c.devices_per_node ? c.intra_node : c.inter_node;
  auto coll = [&](double bytes, double n, double factor) {
    return tier.latency * 2.0 * (n - 1) + bytes * factor / std::max(tier.bandwidth * tier.efficiency, 1.0);
  };
  const double psi = double(w.parameterCount()), M = 2;
  const double expected = M * coll(4 * psi, 2, 0.5) + 2 * M * coll(2 * psi, 2, 0.5) + coll(4 * psi / 2, 2, 1.0);
  tn::TimeOptions o;
  o.dp_overlap = 0;
  const tn::TimePrediction t = tn::predictTime(w, p, c, o);
  EXPECT_NEAR(t.dp_comm_s, expected, 1e-12 * expected);
  EXPECT_NEAR(t.zero_gather_s, 2 * M * coll(2 * psi, 2, 0.5), 1e-12 * expected);
}
