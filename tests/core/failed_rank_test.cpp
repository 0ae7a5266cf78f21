// failed_rank_test.cpp — a traced run whose rank 0 failed first (--inject-failure 0:0: it throws at
// step 0, before it recorded an event). Rank 0 writes every rank's steps into the run database, so it
// holds none, while rank 1's trace shard holds its step 0. `report` used to print an empty table with
// exit 0, as for a clean run of no step; it now reports rank 1's step from its shard and names rank 0
// as the rank that recorded nothing; a shard reported on its own says what it is; the viewer's header
// (its model, without ImGui) names rank 0 likewise.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "trainscope/rundb/merge.h"
#include "trainscope/viewer/header.h"
#include "trainscope/viewer/model.h"

namespace db = trainscope::rundb;
using trainscope::testing::cli;
using trainscope::testing::tempPath;

TEST(FailedRank, ARunWhoseRankZeroFailedFirstReportsTheOtherRanksAndNamesRankZero) {
  const std::string run = tempPath("rank0-failed.db");
  const auto r = cli("run --workload tiny --seq 32 --mbs 2 --device cpu --steps 4 --nproc 2 --inject-failure 0:0 -q "
                     "--trace " + run);
  ASSERT_NE(r.status, 0) << r.output;
  ASSERT_NE(r.output.find("rank 0 failed first"), std::string::npos) << r.output;
  ASSERT_EQ(db::leftoverShards(run).size(), 2u) << r.output;

  const auto text = cli("report " + run);
  EXPECT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("note: rank 0 recorded nothing: its trace shard rank0-failed.db.rank0 holds no event"),
            std::string::npos) << text.output;
  EXPECT_NE(text.output.find("rank 0 writes every rank's steps into the run database"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("the step times are the step ranges the other ranks recorded in their trace shards "
                             "(rank0-failed.db.rank1)"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("no step recorded of the 4"), std::string::npos) << text.output;  // not a clean run

  const auto js = cli("report --json " + run);
  ASSERT_EQ(js.status, 0) << js.output;
  const auto j = nlohmann::json::parse(js.output)["summary"];
  ASSERT_EQ(j["ranks"].size(), 1u) << j.dump();
  EXPECT_EQ(j["ranks"][0]["rank"], 1);  // what rank 1 recorded: its step 0, ended by the failure
  EXPECT_GE(j["ranks"][0]["steps"].get<int64_t>(), 1);

  // Rank 1's shard on its own: what it is, and its step.
  const auto shard = cli("report " + db::shardPath(run, 1));
  EXPECT_EQ(shard.status, 0) << shard.output;
  EXPECT_NE(shard.output.find("rank0-failed.db.rank1 is rank 1's trace shard of a run that stopped before merging it"),
            std::string::npos) << shard.output;
  EXPECT_NE(shard.output.find("the step times are its step ranges"), std::string::npos) << shard.output;

  // The viewer's model: the header of the database names rank 0.
  const trainscope::viewer::Trace t = trainscope::viewer::loadTrace(run, nullptr, 0, false);
  const std::string header = trainscope::viewer::unmergedTraceHeader(run, t);
  EXPECT_NE(header.find("recorded nothing, failed or killed before their first event: rank 0 (rank0-failed.db.rank0)"),
            std::string::npos) << header;
}

// Why the run failed is in its database (schema 8): the launcher writes each failed rank's exit
// status and error, and which rank failed first; `report` prints them above its table. Before, the
// file kept no trace of it (the launcher's line went to stderr only).
TEST(FailedRank, TheRunDatabaseRecordsWhyRankZeroFailedAndReportShowsIt) {
  const std::string run = tempPath("rank0-failed-why.db");
  const auto r = cli("run --workload tiny --seq 32 --mbs 2 --device cpu --steps 4 --nproc 2 --inject-failure 0:1 -q "
                     "--out " + run);
  ASSERT_EQ(r.status, 1) << r.output;
  ASSERT_NE(r.output.find("rank 0 failed first: injected failure on rank 0 at step 1"), std::string::npos) << r.output;

  const auto text = cli("report " + run);
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("failed: rank 0 failed first (exit status 1: injected failure on rank 0 at step 1 "
                             "[train.cpp:"), std::string::npos) << text.output;
  const auto js = cli("report --json " + run);
  ASSERT_EQ(js.status, 0) << js.output;
  const auto f = nlohmann::json::parse(js.output)["failure"];
  ASSERT_TRUE(f.is_object()) << js.output;
  EXPECT_EQ(f["first_rank"], 0);
  ASSERT_GE(f["ranks"].size(), 1u);
  EXPECT_EQ(f["ranks"][0]["rank"], 0);
  EXPECT_EQ(f["ranks"][0]["exit_status"], 1);
  EXPECT_EQ(f["ranks"][0]["error"].get<std::string>().rfind("injected failure on rank 0 at step 1 [train.cpp:", 0), 0u)
      << f.dump();

  // One process: it records its own failure. A run that did not fail has none (null in --json).
  const std::string one = tempPath("one-failed.db");
  const auto r1 = cli("run --workload tiny --seq 32 --mbs 2 --device cpu --steps 4 --inject-failure 0:2 -q --out " + one);
  ASSERT_EQ(r1.status, 1) << r1.output;
  const auto j1 = nlohmann::json::parse(cli("report --json " + one).output)["failure"];
  EXPECT_EQ(j1["first_rank"], 0) << j1.dump();
  EXPECT_NE(j1.dump().find("injected failure on rank 0 at step 2"), std::string::npos) << j1.dump();
  const std::string ok = tempPath("not-failed.db");
  ASSERT_EQ(cli("run --workload tiny --seq 32 --mbs 2 --device cpu --steps 2 -q --out " + ok).status, 0);
  const auto clean = cli("report --json " + ok);
  EXPECT_TRUE(nlohmann::json::parse(clean.output)["failure"].is_null()) << clean.output;
  EXPECT_EQ(cli("report " + ok).output.find("failed:"), std::string::npos);
}
