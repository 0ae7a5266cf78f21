// moe_routing_load_test.cpp — the routing load the models price under expert parallelism (issue 32;
// docs/memory-model.md, "Routing load"): the expected hottest EP rank of random top-k routing against
// its closed forms, a hand computation and a Monte-Carlo of the routing itself; the hottest rank's
// rows at a given load, capped at capacity (token dropping), in the layer's kept tensors, its
// expert GEMMs and its all-to-all; a run database's recorded expert load read by `predict
// --moe-load` (and a --batch line's moe_load), the routing named in its output; bad input refused
// naming the flag.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "trainscope/models/moe.h"
#include "trainscope/rundb/moe_load.h"
#include "trainscope/rundb/store.h"
#include "trainscope/tuner/models.h"
#include "moe_fixture.h"

namespace tn = trainscope::tuner;
namespace db = trainscope::rundb;
namespace wl = trainscope::workloads;
using trainscope::testing::cli;
using trainscope::testing::tempPath;

namespace {

const double kPi = 3.14159265358979323846;

wl::Workload moe() { return trainscope::testing::moeTestWorkload(); }

// dp 4, ep 2, mbs 2 × seq 8: N = 16 tokens per rank, kN = 32 assignments, at routing load `load`.
tn::Plan plan(double load) { return trainscope::testing::moeTestPlan(2, load); }

// The mean over `trials` of the hottest of ep ranks' loads over the mean, T tokens each choosing k
// distinct experts of E uniformly (a partial Fisher–Yates shuffle), experts r·E/ep … on rank r.
double monteCarloHottest(int tokens, int k, int experts, int ep, int trials) {
  std::mt19937_64 gen(12345);
  std::vector<int> ids(size_t(experts), 0);
  double sum = 0;
  for (int t = 0; t < trials; ++t) {
    std::vector<int64_t> rank(size_t(ep), 0);
    for (int n = 0; n < tokens; ++n) {
      for (int e = 0; e < experts; ++e) ids[size_t(e)] = e;
      for (int j = 0; j < k; ++j) {
        std::uniform_int_distribution<int> pick(j, experts - 1);
        std::swap(ids[size_t(j)], ids[size_t(pick(gen))]);
        ++rank[size_t(ids[size_t(j)] / (experts / ep))];
      }
    }
    sum += double(*std::max_element(rank.begin(), rank.end())) / (double(tokens) * k / ep);
  }
  return sum / trials;
}

// tiny-mixtral's shape in a run database's config (what `predict --moe-load` checks), dp 2 ep 2.
std::string tinyMixtralConfig(int64_t n_embd = 64) {
  return nlohmann::json{{"n_embd", n_embd}, {"n_layer", 2}, {"n_head", 4}, {"vocab_size", 256}, {"n_positions", 128},
                        {"dp", 2}, {"ep", 2}, {"world", 2}}
      .dump();
}

// A run database with `config` and these expert_load rows (rank, step, layer, tokens per expert).
struct Routed {
  int64_t rank, step, layer;
  std::vector<int64_t> tokens;
};
std::string makeRun(const std::string& name, const std::string& config, const std::vector<Routed>& routed) {
  const std::string path = tempPath(name);
  db::RunStore store(path, db::RunStore::Options{true});
  store.setMeta("config", config);
  store.setMeta("world_size", "2");
  std::vector<db::ExpertLoad> rows;
  for (const Routed& r : routed)
    for (size_t e = 0; e < r.tokens.size(); ++e) rows.push_back({r.rank, r.step, r.layer, int64_t(e), r.tokens[e], 0, 0, 0, 0});
  if (!rows.empty()) store.appendExpertLoad(rows);
  return path;
}

// Two steps of tiny-mixtral at seq 64, mbs 4 (N = 256, kN = 512 per rank and layer). Step 0, layer 0:
// experts {0, 1} (EP rank 0) get 150 + 90 + 100 + 120 = 460, experts {2, 3} 130 + 142 + 160 + 132 =
// 564: the hottest rank 564/512 = 1.1015625 of the mean. Every other (step, layer) is balanced (1.0).
std::vector<Routed> measuredRouting() {
  return {{0, 0, 0, {150, 90, 130, 142}}, {1, 0, 0, {100, 120, 160, 132}},
          {0, 0, 1, {128, 128, 128, 128}}, {1, 0, 1, {140, 116, 128, 128}},
          {0, 1, 0, {128, 128, 128, 128}}, {1, 1, 0, {128, 128, 128, 128}},
          {0, 1, 1, {100, 156, 128, 128}}, {1, 1, 1, {128, 128, 156, 100}}};
}

const std::string kTinyMixtralEp2 =
    "predict --workload tiny-mixtral --cluster cpu-local --gpus 2 --ep 2 --seq 64 --mbs 4 --gbs 16 --precision fp32 "
    "--cpu-lanes 1";

nlohmann::json lastJson(const std::string& out) {
  const auto at = out.rfind("\n{");
  return nlohmann::json::parse(out.substr(at == std::string::npos ? 0 : at + 1));
}

}  // namespace

TEST(MoeRoutingLoad, ExpectedMaxOfNormalsMatchesItsClosedForms) {
  EXPECT_EQ(tn::expectedMaxOfNormals(1), 0);
  EXPECT_NEAR(tn::expectedMaxOfNormals(2), 1 / std::sqrt(kPi), 1e-9);        // E|Z|/√2
  EXPECT_NEAR(tn::expectedMaxOfNormals(3), 1.5 / std::sqrt(kPi), 1e-9);      // 3/(2√π)
  EXPECT_NEAR(tn::expectedMaxOfNormals(4), 1.0293754, 1e-5);  // tabulated (Harter 1961)
  EXPECT_NEAR(tn::expectedMaxOfNormals(8), 1.4236003, 1e-5);
}

TEST(MoeRoutingLoad, RandomTopKDefaultIsTheExpectedHottestRankByHandAndByMonteCarlo) {
  // tiny-mixtral at ep 2, seq 64 mbs 4: T = 2·256 tokens, k 2 of E 4, 2 experts a rank.
  // 1 + (1/√π)·√(2·(4 − 2)/(512·2·3)) = 1 + 0.5641896·0.0360844 = 1.0203584.
  EXPECT_NEAR(tn::moeRandomRoutingLoad(512, 2, 4, 2), 1.0203584, 1e-6);
  // The routing itself, 4000 draws: within a tenth of the excess over balance.
  const double mc2 = monteCarloHottest(512, 2, 4, 2, 4000);
  EXPECT_NEAR(mc2, tn::moeRandomRoutingLoad(512, 2, 4, 2), 0.002) << mc2;
  // ep 4, 8 experts top-2, T = 1024: 1 + 1.0293754·√(4·6/(1024·2·7)) = 1.0421178.
  EXPECT_NEAR(tn::moeRandomRoutingLoad(1024, 2, 8, 4), 1.0421178, 1e-6);
  const double mc4 = monteCarloHottest(1024, 2, 8, 4, 2000);
  EXPECT_NEAR(mc4, tn::moeRandomRoutingLoad(1024, 2, 8, 4), 0.004) << mc4;
  // No imbalance to expect: one rank, every expert chosen (k = E); never past the hard bound
  // ep·min(k, E/ep)/k (T = 1, k 1 of 2 on 2 ranks: the token's one choice is on one rank, 2×).
  EXPECT_EQ(tn::moeRandomRoutingLoad(512, 2, 4, 1), 1);
  EXPECT_EQ(tn::moeRandomRoutingLoad(512, 4, 4, 2), 1);
  EXPECT_LE(tn::moeRandomRoutingLoad(1, 1, 2, 2), 2.0);
  // The plan's default (moe_load 0) is this expectation over the EP group's ep·N tokens.
  const tn::MoeRouting r = tn::moeRouting(moe(), plan(0));
  EXPECT_TRUE(r.random_load);
  EXPECT_NEAR(r.load, tn::moeRandomRoutingLoad(32, 2, 4, 2), 1e-12);  // 1 + 0.5641896·√(4/192) = 1.0814
  EXPECT_NEAR(r.received, 32 * r.load, 1e-9);
}

TEST(MoeRoutingLoad, TheHottestRanksRowsAreCappedAtCapacityInMemoryAndTime) {
  // N 16, kN = M = 32, capacity ⌈1.25·32/4⌉ = 10 per expert and routing rank: the hottest rank's two
  // experts take at most 2 ranks × 2 experts × 10 = E·c = 40 rows.
  tn::MoeRouting r = tn::moeRouting(moe(), plan(1.2));
  EXPECT_FALSE(r.random_load);
  EXPECT_DOUBLE_EQ(r.received, 1.2 * 32);  // 38.4 ≤ 40: nothing dropped
  EXPECT_DOUBLE_EQ(r.per_expert, 19.2);
  r = tn::moeRouting(moe(), plan(1.5));
  EXPECT_DOUBLE_EQ(r.received, 40);  // min(1.5·32 = 48, 40): 8 rows dropped
  EXPECT_DOUBLE_EQ(r.per_expert, 20);
  EXPECT_EQ(r.kept, 32);  // the routing rank still dispatches its own M
  wl::Workload dropless = moe();
  dropless.capacity_factor = 0;
  EXPECT_DOUBLE_EQ(tn::moeRouting(dropless, plan(1.5)).received, 48);
  EXPECT_DOUBLE_EQ(tn::moeRouting(moe(), plan(1)).received, 32);  // balanced

  // Memory: fc1's input R·C·e and GELU's in and out 2·R·F·e follow R (bf16, e = 2): 8 more rows
  // keep 8·(64·2 + 2·128·2) = 5120 bytes more; the expert outputs M·C·e do not move.
  const auto saved = [](const wl::Workload& w, double load) {
    return tn::layerOps(w, plan(load), tn::Framework::Trainscope, tn::Attention::Default, true).saved;
  };
  EXPECT_DOUBLE_EQ(saved(moe(), 1.5) - saved(moe(), 1), 8.0 * (64 * 2 + 2 * 128 * 2));
  EXPECT_DOUBLE_EQ(saved(moe(), 3.0), saved(moe(), 1.5));  // capped: no further rows
  EXPECT_DOUBLE_EQ(saved(dropless, 1.5) - saved(dropless, 1), 16.0 * (64 * 2 + 2 * 128 * 2));
  EXPECT_GT(tn::predictMemory(moe(), plan(1.5)).peak(), tn::predictMemory(moe(), plan(1)).peak());
  // Time: the hottest rank's expert GEMMs run its rows, and its all-to-all receives them.
  const auto fc1 = [](const wl::Workload& w, double load) {
    for (const auto& o : tn::layerOps(w, plan(load), tn::Framework::Trainscope, tn::Attention::Default, true).forward)
      if (o.name == "expert fc1") return o.flops();
    return 0.0;
  };
  EXPECT_DOUBLE_EQ(fc1(moe(), 1.5), 2.0 * 40 * 128 * 64);  // 2 experts × 20 rows × C→F
  EXPECT_DOUBLE_EQ(tn::moeAllToAllBytes(moe(), plan(1.5)), 40.0 * 64 * 2);
  EXPECT_DOUBLE_EQ(tn::moeAllToAllBytes(moe(), plan(1)), 32.0 * 64 * 2);
}

TEST(MoeRoutingLoad, ARunsRecordedLoadIsTheHottestEpRanksRowsOverTheMean) {
  // One EP group (dp 2, ep 2): 1.1015625 at step 0 layer 0, 1.0 at step 0 layer 1 and step 1 layer 0;
  // step 1 layer 1: experts {0, 1} 100 + 156 + 128 + 128 = 512 = the mean.
  std::vector<db::ExpertLoad> rows;
  for (const Routed& r : measuredRouting())
    for (size_t e = 0; e < r.tokens.size(); ++e) rows.push_back({r.rank, r.step, r.layer, int64_t(e), r.tokens[e], 0, 0, 0, 0});
  const db::EpRankLoad l = db::epRankLoad(rows, 2, [](int64_t) { return int64_t(0); });
  EXPECT_EQ(l.experts, 4);
  EXPECT_EQ(l.samples, 4);
  EXPECT_DOUBLE_EQ(l.hot_max, 564.0 / 512);
  EXPECT_DOUBLE_EQ(l.hot_mean, (564.0 / 512 + 3) / 4);
  // Each rank its own group (two EP groups of one routing rank): rank 0's step 0 layer 0 is 272
  // against 240 (272/256 = 1.0625), rank 1's 292 against 220; the other six are 256 each.
  const db::EpRankLoad alone = db::epRankLoad(rows, 2, [](int64_t rank) { return rank; });
  EXPECT_EQ(alone.samples, 8);
  EXPECT_DOUBLE_EQ(alone.hot_max, 292.0 / 256);  // rank 1, step 0, layer 0: 160 + 132 = 292
  EXPECT_EQ(db::epRankLoad({}, 2, [](int64_t) { return int64_t(0); }).samples, 0);
}

TEST(MoeRoutingLoad, PredictPricesARunsMeasuredLoadAndSaysWhichRoutingItPriced) {
  const std::string run = makeRun("measured-routing.db", tinyMixtralConfig(), measuredRouting());
  const auto random = cli(kTinyMixtralEp2 + " --json");
  ASSERT_EQ(random.status, 0) << random.output;
  const auto measured = cli(kTinyMixtralEp2 + " --moe-load " + run + " --json");
  ASSERT_EQ(measured.status, 0) << measured.output;
  const nlohmann::json a = lastJson(random.output)["moe_routing"], b = lastJson(measured.output)["moe_routing"];
  EXPECT_EQ(a["source"], "random");
  EXPECT_NEAR(a["load"].get<double>(), 1.0203584, 1e-6);
  EXPECT_EQ(b["source"], "measured");
  EXPECT_DOUBLE_EQ(b["load"].get<double>(), 564.0 / 512);
  EXPECT_DOUBLE_EQ(b["received_rows"].get<double>(), 564);  // drop-less: 1.1015625·512
  EXPECT_NE(b["text"].get<std::string>().find(run), std::string::npos) << b;
  EXPECT_GT(lastJson(measured.output)["peak_bytes"].get<double>(), lastJson(random.output)["peak_bytes"].get<double>());
  const auto text = cli(kTinyMixtralEp2 + " --moe-load " + run);
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("routing: top-2 of 4 experts as measured in " + run + " (its hottest EP rank), hottest EP rank 1.102x"),
            std::string::npos) << text.output;
  const auto plain = cli(kTinyMixtralEp2);
  EXPECT_NE(plain.output.find("routing: random top-2 of 4 experts (the expected hottest of 2 EP ranks), hottest EP rank 1.020x"),
            std::string::npos) << plain.output;
  // A --batch line takes it as `moe_load`, priced alike; a bad one fails its line naming the flag.
  const std::string lines = tempPath("moe-load.jsonl");
  std::ofstream(lines) << nlohmann::json{{"moe_load", run}}.dump() << "\n{}\n"
                       << nlohmann::json{{"moe_load", tempPath("nowhere.db")}}.dump() << "\n";
  const auto batch = cli(kTinyMixtralEp2 + " --batch " + lines);
  EXPECT_EQ(batch.status, 2) << batch.output;  // the third line fails
  std::istringstream out(batch.output);
  std::vector<nlohmann::json> got;
  for (std::string l; std::getline(out, l);)
    if (!l.empty() && l[0] == '{') got.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(got.size(), 3u) << batch.output;
  EXPECT_DOUBLE_EQ(got[0]["moe_routing"]["load"].get<double>(), 564.0 / 512);
  EXPECT_EQ(got[0]["peak_bytes"], lastJson(measured.output)["peak_bytes"]);
  EXPECT_EQ(got[1]["moe_routing"]["source"], "random");
  EXPECT_NE(got[2]["error"].get<std::string>().find("--batch line 3: --moe-load"), std::string::npos) << got[2];
}

TEST(MoeRoutingLoad, BadMoeLoadInputIsRefusedNamingTheFlag) {
  const auto refused = [](const std::string& args, const std::string& says) {
    const auto r = cli(kTinyMixtralEp2 + " " + args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("--moe-load"), std::string::npos) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(says), std::string::npos) << args << "\n" << r.output;
    EXPECT_EQ(r.output.find("terminate"), std::string::npos) << r.output;
  };
  refused("--moe-load " + tempPath("missing.db"), "does not exist");
  const std::string text = tempPath("not-a-db.txt");
  std::ofstream(text) << "hello\n";
  refused("--moe-load " + text, "not a trainscope run database");
  refused("--moe-load " + makeRun("dense.db", tinyMixtralConfig(), {}), "records no expert load");
  refused("--moe-load " + makeRun("other-model.db", tinyMixtralConfig(128), measuredRouting()),
          "is not a trainscope run of tiny-mixtral");
  refused("--moe-load " + makeRun("eight-experts.db", tinyMixtralConfig(),
                                  {{0, 0, 0, {64, 64, 64, 64, 64, 64, 64, 64}}, {1, 0, 0, {64, 64, 64, 64, 64, 64, 64, 64}}}),
          "has 8 experts, tiny-mixtral 4");
  const std::string run = makeRun("for-dense.db", tinyMixtralConfig(), measuredRouting());
  const auto dense = cli("predict --workload tiny-llama --cluster cpu-local --gpus 1 --moe-load " + run);
  EXPECT_EQ(dense.status, 2) << dense.output;
  EXPECT_NE(dense.output.find("--moe-load: tiny-llama has no experts"), std::string::npos) << dense.output;
}
