// moe_load_test.cpp — the expert_load table of the run database (issue 23's "Traced" and "Routing
// facts" on the database side), on hand-made routing with hand-computed numbers:
//   rows written by RunStore read back by RunReader in (step, layer, rank, expert) order, kept by the
//   shard merge; a version-4 file reads with none;
//   the per-layer summary: every token on one expert gives max/mean = E exactly and its drops, and is
//   flagged; a balanced layer and one at the 1.5 boundary are not; drops alone flag a layer;
//   `trainscope report` prints the IMBALANCED line (text and --json), and no section for a dense run;
//   the viewer's per-rank counters "moe: imbalance (max/mean)" and "moe: dropped %" at the steps'
//   starts, for a file with no events and for a traced (merged) one.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "trainscope/rundb/merge.h"
#include "trainscope/rundb/moe_load.h"
#include "trainscope/rundb/range_names.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/report.h"
#include "trainscope/rundb/schema.h"
#include "trainscope/rundb/sqlite.h"
#include "trainscope/rundb/store.h"
#include "trainscope/tracer/trace.h"
#include "trainscope/viewer/model.h"

namespace db = trainscope::rundb;
namespace tr = trainscope::tracer;
namespace v = trainscope::viewer;
using trainscope::testing::cli;
using trainscope::testing::tempPath;

namespace {

// One rank's rows of one layer in one step: tokens (and drops) per expert 0, 1, …
std::vector<db::ExpertLoad> layerRows(int64_t rank, int64_t step, int64_t layer, const std::vector<int64_t>& tokens,
                                      const std::vector<int64_t>& dropped, int64_t capacity, double aux, double z) {
  std::vector<db::ExpertLoad> out;
  for (size_t e = 0; e < tokens.size(); ++e)
    out.push_back({rank, step, layer, int64_t(e), tokens[e], dropped.empty() ? 0 : dropped[e], capacity, aux, z});
  return out;
}

void append(std::vector<db::ExpertLoad>& to, const std::vector<db::ExpertLoad>& rows) {
  to.insert(to.end(), rows.begin(), rows.end());
}

// The routing facts of issue 23: 2 ranks, 3 steps, layer 1's router sends all 64 assignments of
// each rank to expert 2, which keeps 16 (capacity 16, one micro-batch) and drops 48. Layer 0 is
// balanced (16 per expert, capacity 20, no drops).
std::vector<db::ExpertLoad> skewedRows() {
  std::vector<db::ExpertLoad> rows;
  for (int64_t step = 0; step < 3; ++step)
    for (int64_t rank = 0; rank < 2; ++rank) {
      append(rows, layerRows(rank, step, 0, {16, 16, 16, 16}, {}, 20, 0.01, 0.0));
      append(rows, layerRows(rank, step, 1, {0, 0, 64, 0}, {0, 0, 48, 0}, 16, rank == 0 ? 0.04 : 0.02, 1e-3));
    }
  return rows;
}

// Steps of `ranks` ranks at start (step × 1000 + rank × 10) ns, then `moe` rows, in one database.
void makeRun(const std::string& path, int ranks, int steps, const std::vector<db::ExpertLoad>& moe) {
  db::RunStore store(path, db::RunStore::Options{true});
  store.setMeta("world_size", std::to_string(ranks));
  for (int rank = 0; rank < ranks; ++rank)
    for (int k = 0; k < steps; ++k) {
      db::Step s;
      s.rank = rank;
      s.step = k;
      s.start_ns = 1000 * k + 10 * rank;
      s.step_time_ns = 900;
      s.tokens = 128;
      store.appendStep(s);
    }
  if (!moe.empty()) store.appendExpertLoad(moe);
}

const v::Track* counterTrack(const v::Trace& t, int64_t rank, const std::string& label) {
  for (const auto& tr : t.tracks)
    if (tr.rank == rank && tr.kind == v::TrackKind::Counter && tr.label == label) return &tr;
  return nullptr;
}

// The labels of one rank's counter tracks, in display order.
std::vector<std::string> counterLabels(const v::Trace& t, int64_t rank) {
  std::vector<std::string> out;
  for (const auto& g : t.ranks)
    if (g.rank == rank)
      for (size_t i : g.tracks)
        if (t.tracks[i].kind == v::TrackKind::Counter) out.push_back(t.tracks[i].label);
  return out;
}

}  // namespace

TEST(ExpertLoad, RowsRoundTripInStepLayerRankExpertOrderAndAVersion4FileHasNone) {
  const std::string path = tempPath("moe_roundtrip.db");
  std::vector<db::ExpertLoad> rows = skewedRows();
  std::reverse(rows.begin(), rows.end());  // written in any order
  makeRun(path, 2, 3, rows);
  {
    db::RunReader r(path);
    EXPECT_EQ(r.schemaVersion(), db::kSchemaVersion);  // 5 added expert_load; later versions keep it
    const std::vector<db::ExpertLoad> got = r.expertLoad();
    ASSERT_EQ(got.size(), 3u * 2 * 2 * 4);
    const db::ExpertLoad& a = got[0];  // step 0, layer 0, rank 0, expert 0
    EXPECT_EQ(a.step, 0);
    EXPECT_EQ(a.layer, 0);
    EXPECT_EQ(a.rank, 0);
    EXPECT_EQ(a.expert, 0);
    const db::ExpertLoad& b = got[4 + 4 + 2];  // step 0, layer 1, rank 0, expert 2
    EXPECT_EQ(b.layer, 1);
    EXPECT_EQ(b.rank, 0);
    EXPECT_EQ(b.expert, 2);
    EXPECT_EQ(b.tokens, 64);
    EXPECT_EQ(b.dropped, 48);
    EXPECT_EQ(b.capacity, 16);
    EXPECT_EQ(b.aux_loss, 0.04);
    EXPECT_EQ(b.z_loss, 1e-3);
    EXPECT_EQ(got.back().step, 2);
    EXPECT_EQ(got.back().rank, 1);
    EXPECT_EQ(got.back().expert, 3);
  }
  {  // a step's rows written again replace the old ones (same key), never duplicate them
    const std::string twice = tempPath("moe_twice.db");
    {
      db::RunStore store(twice, db::RunStore::Options{true});
      store.appendExpertLoad(layerRows(0, 0, 1, {1, 2, 3, 4}, {}, 0, 0, 0));
      store.appendExpertLoad(layerRows(0, 0, 1, {5, 6, 7, 8}, {}, 0, 0, 0));
    }
    const auto got = db::RunReader(twice).expertLoad();
    ASSERT_EQ(got.size(), 4u);
    EXPECT_EQ(got[2].tokens, 7);
  }
  // A version-4 file (made as one: the table dropped, the version set back) reads as a dense run.
  const std::string old = tempPath("moe_v4.db");
  makeRun(old, 2, 3, skewedRows());
  {
    db::Database d(old, db::Database::Mode::ReadWrite);
    d.exec("DROP TABLE expert_load; UPDATE meta SET value = '4' WHERE key = 'schema_version'");
  }
  db::RunReader r(old);
  EXPECT_EQ(r.schemaVersion(), 4);
  EXPECT_FALSE(r.hasTable("expert_load"));
  EXPECT_TRUE(r.expertLoad().empty());
  EXPECT_TRUE(db::computeReport(old).expert_load.empty());
}

TEST(ExpertLoad, EveryTokenOnOneExpertIsImbalanceEExactlyWithItsDropsAndIsFlagged) {
  const std::vector<db::ExpertLayerLoad> layers = db::summarizeExpertLoad(skewedRows());
  ASSERT_EQ(layers.size(), 2u);
  const db::ExpertLayerLoad& skew = layers[1];
  EXPECT_EQ(skew.layer, 1);
  EXPECT_EQ(skew.experts, 4);
  EXPECT_EQ(skew.steps, 3);
  // Per step: loads {0, 0, 128, 0} summed over the ranks; max/mean = 128 / (128/4) = 4.
  EXPECT_EQ(skew.imbalance_mean, 4.0);
  EXPECT_EQ(skew.imbalance_max, 4.0);
  EXPECT_EQ(skew.tokens, 3 * 2 * 64);
  EXPECT_EQ(skew.dropped, 3 * 2 * 48);
  EXPECT_EQ(skew.dropped_share, 288.0 / 384.0);  // 0.75
  EXPECT_EQ(skew.hottest_expert, 2);
  EXPECT_EQ(skew.hottest_share, 1.0);
  EXPECT_NEAR(skew.aux_loss_mean, (0.04 + 0.02) / 2, 1e-15);  // one value per (rank, step), not per expert
  EXPECT_NEAR(skew.z_loss_mean, 1e-3, 1e-15);
  EXPECT_TRUE(skew.imbalanced);

  const db::ExpertLayerLoad& flat = layers[0];
  EXPECT_EQ(flat.imbalance_mean, 1.0);
  EXPECT_EQ(flat.imbalance_max, 1.0);
  EXPECT_EQ(flat.dropped_share, 0.0);
  EXPECT_EQ(flat.hottest_expert, 0);  // ties: the lowest id
  EXPECT_EQ(flat.hottest_share, 0.25);
  EXPECT_FALSE(flat.imbalanced);
}

TEST(ExpertLoad, TheFlagsAreStrictAndDropsAloneFlagALayer) {
  std::vector<db::ExpertLoad> rows;
  // Layer 0: step 0 balanced (1.0), step 1 {64, 32, 16, 16} → 64 / 32 = 2.0; mean 1.5, not above it.
  append(rows, layerRows(0, 0, 0, {32, 32, 32, 32}, {}, 0, 0, 0));
  append(rows, layerRows(0, 1, 0, {64, 32, 16, 16}, {}, 0, 0, 0));
  // Layer 3: balanced, but 2 of 128 assignments dropped (1.5625% > 1%).
  append(rows, layerRows(0, 0, 3, {32, 32, 32, 32}, {2, 0, 0, 0}, 30, 0, 0));
  // Layer 5: an expert with no row at all counts 0 towards the mean: E = 4 from step 1, so step 0's
  // {40, 40, 40} is 40 / 30 = 4/3; step 1 is balanced. A step that routes nothing is left out.
  append(rows, layerRows(0, 0, 5, {40, 40, 40}, {}, 0, 0, 0));
  append(rows, layerRows(0, 1, 5, {10, 10, 10, 10}, {}, 0, 0, 0));
  append(rows, layerRows(0, 2, 5, {0, 0, 0, 0}, {}, 0, 0, 0));
  const std::vector<db::ExpertLayerLoad> l = db::summarizeExpertLoad(rows);
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[0].imbalance_mean, 1.5);
  EXPECT_EQ(l[0].imbalance_max, 2.0);
  EXPECT_FALSE(l[0].imbalanced);
  EXPECT_EQ(l[1].layer, 3);
  EXPECT_EQ(l[1].imbalance_mean, 1.0);
  EXPECT_EQ(l[1].dropped_share, 2.0 / 128.0);
  EXPECT_TRUE(l[1].imbalanced);
  EXPECT_EQ(l[2].experts, 4);
  EXPECT_EQ(l[2].steps, 2);
  EXPECT_DOUBLE_EQ(l[2].imbalance_max, 4.0 / 3.0);
  EXPECT_DOUBLE_EQ(l[2].imbalance_mean, (4.0 / 3.0 + 1.0) / 2);
  EXPECT_FALSE(l[2].imbalanced);
  EXPECT_TRUE(db::summarizeExpertLoad({}).empty());
}

TEST(ExpertLoad, ReportPrintsTheImbalancedLineAndNothingForADenseRun) {
  const std::string moe = tempPath("moe_report.db"), dense = tempPath("moe_dense.db");
  makeRun(moe, 2, 3, skewedRows());
  makeRun(dense, 2, 3, {});
  const std::string text = db::formatReport(db::computeReport(moe));
  EXPECT_NE(text.find("Expert load"), std::string::npos) << text;
  EXPECT_NE(text.find("layer 1 IMBALANCED: expert 2 takes 100.0% of tokens, 75.0% dropped"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("layer 0 IMBALANCED"), std::string::npos) << text;
  const std::string plain = db::formatReport(db::computeReport(dense));
  EXPECT_EQ(plain.find("Expert load"), std::string::npos) << plain;
  EXPECT_EQ(plain.find("IMBALANCED"), std::string::npos) << plain;

  // The command line, as a user runs it: the same line, and the same figures in --json.
  auto r = cli("report " + moe);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("IMBALANCED: expert 2 takes 100.0% of tokens, 75.0% dropped"), std::string::npos)
      << r.output;
  r = cli("report --json " + moe);
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j.at("expert_load").size(), 2u);
  const nlohmann::json& l1 = j["expert_load"][1];
  EXPECT_EQ(l1.at("layer"), 1);
  EXPECT_EQ(l1.at("imbalance_mean").get<double>(), 4.0);
  EXPECT_EQ(l1.at("dropped_share").get<double>(), 0.75);
  EXPECT_EQ(l1.at("hottest_expert"), 2);
  EXPECT_EQ(l1.at("imbalanced"), true);
  EXPECT_EQ(j["expert_load"][0].at("imbalanced"), false);
  r = cli("report --json " + dense);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(nlohmann::json::parse(r.output).at("expert_load").empty());
}

namespace {

// Two ranks, steps 0 and 1, layers 0 and 2 of 4 experts, with per-rank figures worked by hand:
//   rank 0 step 0: layer 0 {16,16,16,16} → 1.0; layer 2 {40,8,8,8}, 20 of them dropped → 40/16 = 2.5;
//                  imbalance 2.5, dropped 20 / 128 = 15.625%
//   rank 1 step 0: layer 0 {32,32,0,0} → 32/16 = 2.0; layer 2 balanced → 2.0, 0%
//   step 1: every layer balanced; rank 0 drops 4 of its 128 → 1.0, 3.125%; rank 1 → 1.0, 0%
std::vector<db::ExpertLoad> perRankRows() {
  std::vector<db::ExpertLoad> rows;
  append(rows, layerRows(0, 0, 0, {16, 16, 16, 16}, {}, 20, 0, 0));
  append(rows, layerRows(0, 0, 2, {40, 8, 8, 8}, {20, 0, 0, 0}, 20, 0, 0));
  append(rows, layerRows(1, 0, 0, {32, 32, 0, 0}, {}, 0, 0, 0));
  append(rows, layerRows(1, 0, 2, {16, 16, 16, 16}, {}, 0, 0, 0));
  for (int64_t rank = 0; rank < 2; ++rank) {
    append(rows, layerRows(rank, 1, 0, {16, 16, 16, 16}, {}, 20, 0, 0));
    append(rows, layerRows(rank, 1, 2, {16, 16, 16, 16}, {0, 0, 0, rank == 0 ? 4 : 0}, 20, 0, 0));
  }
  return rows;
}

void expectMoeCounters(const v::Trace& t, int64_t rank, const std::vector<int64_t>& ts,
                       const std::vector<double>& imbalance, const std::vector<double>& dropped) {
  const v::Track* imb = counterTrack(t, rank, "moe: imbalance (max/mean)");
  const v::Track* drop = counterTrack(t, rank, "moe: dropped %");
  ASSERT_NE(imb, nullptr) << "rank " << rank;
  ASSERT_NE(drop, nullptr) << "rank " << rank;
  EXPECT_EQ(imb->counter.ts, ts);
  EXPECT_EQ(imb->counter.values, imbalance);
  EXPECT_EQ(drop->counter.ts, ts);
  EXPECT_EQ(drop->counter.values, dropped);
  EXPECT_EQ(imb->counter.max_value, *std::max_element(imbalance.begin(), imbalance.end()));
}

}  // namespace

TEST(ExpertLoad, RankStepFiguresAreTheRanksOwnWorstLayerAndItsDrops) {
  const std::vector<db::RankStepLoad> l = db::rankStepLoad(perRankRows());
  ASSERT_EQ(l.size(), 4u);
  EXPECT_EQ(l[0].rank, 0);
  EXPECT_EQ(l[0].step, 0);
  EXPECT_EQ(l[0].imbalance, 2.5);
  EXPECT_EQ(l[0].dropped_pct, 15.625);
  EXPECT_EQ(l[1].step, 1);
  EXPECT_EQ(l[1].imbalance, 1.0);
  EXPECT_EQ(l[1].dropped_pct, 3.125);
  EXPECT_EQ(l[2].rank, 1);
  EXPECT_EQ(l[2].imbalance, 2.0);
  EXPECT_EQ(l[2].dropped_pct, 0.0);
}

TEST(ExpertLoad, TheViewerDrawsTwoCountersPerRankAtTheStepsStartsWithoutAnyEvents) {
  const std::string path = tempPath("moe_viewer.db");
  makeRun(path, 2, 2, perRankRows());
  const v::Trace t = v::loadTrace(path, nullptr, 1);
  ASSERT_EQ(t.ranks.size(), 2u);
  expectMoeCounters(t, 0, {0, 1000}, {2.5, 1.0}, {15.625, 3.125});
  expectMoeCounters(t, 1, {10, 1010}, {2.0, 1.0}, {0.0, 0.0});
  EXPECT_EQ(counterLabels(t, 1), (std::vector<std::string>{"moe: imbalance (max/mean)", "moe: dropped %"}));
  // A rank without its own steps rows takes the earliest rank's step start.
  const std::string only0 = tempPath("moe_viewer_rank0_steps.db");
  {
    db::RunStore store(only0, db::RunStore::Options{true});
    store.setMeta("world_size", "2");
    for (int k = 0; k < 2; ++k) {
      db::Step s;
      s.step = k;
      s.start_ns = 5000 + 1000 * k;
      s.step_time_ns = 900;
      store.appendStep(s);
    }
    store.appendExpertLoad(perRankRows());
  }
  expectMoeCounters(v::loadTrace(only0, nullptr, 1), 1, {5000, 6000}, {2.0, 1.0}, {0.0, 0.0});
  // A dense run gets no such tracks.
  const std::string dense = tempPath("moe_viewer_dense.db");
  makeRun(dense, 2, 2, {});
  const v::Trace d = v::loadTrace(dense, nullptr, 1);
  EXPECT_TRUE(counterLabels(d, 0).empty());
  EXPECT_TRUE(counterLabels(d, 1).empty());
}

TEST(ExpertLoad, ATracedRunKeepsItsRowsThroughTheMergeAndShowsThemBesideItsCounters) {
  const std::string path = tempPath("moe_traced.db");
  std::vector<db::ShardInfo> shards;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string shard = db::shardPath(path, rank);
    {
      tr::Tracer t(shard, rank, tr::TraceLevel::All);
      t.record(tr::RangeEvent{100, 800, t.intern("forward"), t.intern("trainscope"), 0, 0, 0});
      t.record(tr::CounterEvent{150, t.intern(db::names::kMemoryCounter), 4096.0 * (rank + 1)});
    }
    // Rank 1's clock offset is 100 ns: the merge moves its events and its steps onto rank 0's clock.
    shards.push_back({shard, rank, "h", "cpu", 1, rank * 100, rank * 100});
  }
  {
    db::RunStore store(path, db::RunStore::Options{true});
    store.setMeta("world_size", "2");
    for (int rank = 0; rank < 2; ++rank)
      for (int k = 0; k < 2; ++k) {
        db::Step s;
        s.rank = rank;
        s.step = k;
        s.start_ns = 1000 * k + 10 * rank;
        s.step_time_ns = 900;
        store.appendStep(s);
      }
    store.appendExpertLoad(perRankRows());
    db::mergeShards(store, shards);
  }
  EXPECT_EQ(db::RunReader(path).expertLoad().size(), perRankRows().size());
  const v::Trace t = v::loadTrace(path, nullptr, 1);
  expectMoeCounters(t, 0, {0, 1000}, {2.5, 1.0}, {15.625, 3.125});
  expectMoeCounters(t, 1, {110, 1110}, {2.0, 1.0}, {0.0, 0.0});  // rank 1's steps on rank 0's clock
  EXPECT_EQ(counterLabels(t, 1), (std::vector<std::string>{"memory", "moe: imbalance (max/mean)", "moe: dropped %"}));
}
