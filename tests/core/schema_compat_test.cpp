// schema_compat_test.cpp — a run database of an older schema reads as it did: a schema 6 file (before
// collectives.cut, version 7) opened by the reader, the report and the viewer model, with every
// collective complete and its stored bandwidth, and nothing written into it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "kineto_events.h"
#include "trainscope/rundb/import.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/report.h"
#include "trainscope/rundb/sqlite.h"
#include "trainscope/viewer/model.h"

namespace tr = trainscope::rundb;
namespace v = trainscope::viewer;
using nlohmann::json;
using trainscope::testing::tempPath;
using namespace trainscope::testing::kineto_events;

namespace {

// The c10d call that issues a Gloo all-reduce of 4,160 floats, at `ts` µs.
json allreduceCall(double ts) {
  json call = op("c10d::allreduce_", ts, 10);
  call["args"] = json::parse(R"({"Input type": ["TensorList", "", "Scalar"], "Input Dims": [[[4160]], [], []]})");
  return call;
}

// Rank 0 of a 2-rank Gloo job with these events, imported into a fresh database `name`.db.
std::string importRank0(const json& ev, const std::string& name) {
  const std::string in = tempPath(name + "_rank0.json"), db = tempPath(name + ".db");
  std::ofstream(in) << json{{"baseTimeNanoseconds", kEventsBase},
                            {"distributedInfo", {{"backend", "gloo"}, {"rank", 0}, {"world_size", 2}}},
                            {"traceEvents", ev}}
                           .dump();
  std::filesystem::remove(db);
  tr::importTraces({in}, db, true);
  return db;
}

}  // namespace

TEST(SchemaCompat, ASchema6DatabaseReadsItsCollectivesAsComplete) {
  // Two complete Gloo all-reduces of 16,640 bytes on rank 0 (2 ranks), imported at schema 7 ...
  json ev = json::array();
  for (int k = 0; k < 2; ++k) {
    ev.push_back(allreduceCall(100 + 1000 * k));
    json g = annotation("gloo:all_reduce", 120 + 1000 * k, 300);
    g["tid"] = 7;
    g["args"] = json::parse(R"({"Input type": ["float"], "Input Dims": [[4160]]})");
    ev.push_back(g);
  }
  const std::string db = importRank0(ev, "schema6");
  // ... then made a schema 6 file: no `cut` column, version 6 in meta.
  {
    tr::Database d(db, tr::Database::Mode::ReadWrite);
    d.exec("ALTER TABLE collectives DROP COLUMN cut; UPDATE meta SET value = '6' WHERE key = 'schema_version';");
  }
  const auto size = std::filesystem::file_size(db);
  {
    tr::RunReader rd(db);
    const auto rows = rd.collectives(0);
    ASSERT_EQ(rows.size(), 2u);
    for (const auto& c : rows) {
      EXPECT_FALSE(c.cut);
      EXPECT_EQ(c.bytes, 16640);
      EXPECT_EQ(c.end_ns - c.start_ns, 300000);
      EXPECT_NEAR(c.algbw(), 16640 / 300e-6, 1);
    }
  }
  const tr::Report rep = tr::computeReport(db, 15, 0);
  ASSERT_EQ(rep.collectives.size(), 1u);
  EXPECT_EQ(rep.collectives[0].count, 2);
  EXPECT_EQ(rep.collectives[0].cut, 0);
  EXPECT_NEAR(rep.collectives[0].total_s, 600e-6, 1e-12);
  EXPECT_NEAR(rep.collectives[0].busbw_with_wait_mean, 16640 / 300e-6, 1);
  EXPECT_EQ(tr::formatReport(rep).find("cut by the trace's end"), std::string::npos);
  EXPECT_EQ(json::parse(tr::reportJson(rep))["collectives"][0]["cut_rows"], 0);
  const v::Trace t = v::loadTrace(db);
  ASSERT_EQ(t.ranks.size(), 1u);
  EXPECT_EQ(std::filesystem::file_size(db), size) << "reading wrote into the older file";
  tr::Database d(db, tr::Database::Mode::ReadOnly);
  tr::Statement s(d, "SELECT value FROM meta WHERE key = 'schema_version'");
  ASSERT_TRUE(s.step());
  EXPECT_EQ(s.columnText(0), "6");
}

// An op whose every row the trace's end cut: its calls and bytes, no time or bandwidth — "-" in the
// text and null in the JSON, never 0 (a measurement it is not).
TEST(SchemaCompat, AnOpEveryRowOfWhichIsCutPrintsNoTimeOrBandwidth) {
  json ev = json::array({allreduceCall(100), op("aten::add", 400, 10)});
  json cut = annotation("gloo:all_reduce", 120, 5000);
  cut["tid"] = 8;
  cut["args"] = json::parse(R"({"External id": 1026, "finished": false, "Ev Idx": 220})");
  ev.push_back(cut);
  const std::string db = importRank0(ev, "all_cut");
  const tr::Report rep = tr::computeReport(db, 15, 0);
  ASSERT_EQ(rep.collectives.size(), 1u);
  EXPECT_EQ(rep.collectives[0].count, 1);
  EXPECT_EQ(rep.collectives[0].cut, 1);
  const std::string text = tr::formatReport(rep);
  const auto at = text.find("  all_reduce");
  ASSERT_NE(at, std::string::npos) << text;
  const std::string row = text.substr(at, text.find('\n', at) - at);
  EXPECT_NE(row.find("busbw -"), std::string::npos) << row;
  EXPECT_EQ(row.find("0.000"), std::string::npos) << row;
  const json j = json::parse(tr::reportJson(rep))["collectives"][0];
  EXPECT_TRUE(j["total_s"].is_null());
  EXPECT_TRUE(j["busbw_mean"].is_null());
  EXPECT_EQ(j["count"], 1);  // its bytes: the width of no complete all_reduce on this rank is known (0)
  EXPECT_EQ(j["cut_rows"], 1);
}
