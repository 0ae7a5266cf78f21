// analysis_links_test.cpp — no false zeros about collectives: interleaved 1F1B sends pair with their
// receives (rundb::linkCollectives, through Megatron-LM's interleaved order), and a collective that
// cannot be linked is said to be "not linked" with the reason, in `report` (text and --json), never
// printed as a 0 ms wait or skew.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "../common/workload_files.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/report.h"
#include "trainscope/rundb/store.h"

namespace db = trainscope::rundb;
using trainscope::testing::tempPath;

namespace {

// Megatron-LM's order of one rank's units for p 2, v 2, M 4 ("F1": forward of model chunk 1), as
// interleaved_test.cpp checks the runtime runs it; each chunk takes micro-batches 0, 1, … in order.
const std::vector<std::string> kOrder[2] = {
    {"F0", "F0", "F1", "F1", "F0", "B1", "F0", "B1", "F1", "B0", "F1", "B0", "B1", "B1", "B0", "B0"},
    {"F0", "F0", "F1", "B1", "F1", "B1", "F0", "B0", "F0", "B0", "F1", "B1", "F1", "B1", "B0", "B0"}};

// What a row carries, to check a pairing: the chunk boundary, the micro-batch, the direction, the step.
using Identity = std::tuple<int64_t, int64_t, int, int64_t>;

// Both ranks' pp rows for `steps` steps of the order above, as pipeline.cpp issues them: a forward of
// global chunk c = rank + 2k receives (c > 0) then sends (c < 3); a backward receives (c < 3) then
// sends (c > 0). Times: each op 10 µs after the previous one on its rank.
std::vector<db::Collective> interleavedRows(int steps, std::vector<Identity>& identity) {
  std::vector<db::Collective> rows;
  for (int64_t rank = 0; rank < 2; ++rank) {
    int64_t seq = 0, t = 1'000'000 + rank * 3'000;
    for (int step = 0; step < steps; ++step) {
      std::map<std::string, int64_t> next_m;
      for (const std::string& u : kOrder[rank]) {
        const bool fwd = u[0] == 'F';
        const int64_t k = u[1] - '0', c = rank + 2 * k, m = next_m[u]++;
        auto add = [&](const char* op, int64_t boundary) {
          db::Collective r;
          r.rank = rank, r.op = op, r.group = "pp", r.group_size = 2, r.seq = seq++, r.bytes = 4096;
          r.start_ns = t, r.end_ns = t + 5'000;
          t += 10'000;
          rows.push_back(r);
          identity.emplace_back(boundary, m, fwd ? 0 : 1, step);
        };
        if (fwd) {
          if (c > 0) add("recv", c - 1);
          if (c < 3) add("send", c);
        } else {
          if (c < 3) add("recv", c);
          if (c > 0) add("send", c - 1);
        }
      }
    }
  }
  return rows;
}

}  // namespace

// Every send of an interleaved run (pp 2, v 2, 4 micro-batches, 2 steps) pairs with the receive that
// took its data: same boundary, micro-batch, direction and step, on the other rank. Before, the
// linker read the plain 1F1B schedule, found rank 0's second op disagreeing, and linked nothing.
TEST(AnalysisLinks, InterleavedSendsPairWithTheirReceives) {
  for (const char* config : {R"({"world":2,"dp":1,"tp":1,"pp":2,"ga":4,"pp_schedule":"1f1b","virtual_stages":2})",
                             R"({"world":2,"dp":1,"tp":1,"pp":2,"ga":4,"pp_schedule":"interleaved"})"}) {
    const auto layout = db::runLayout({{"config", config}});
    ASSERT_TRUE(layout);
    EXPECT_EQ(layout->virtual_stages, 2);
    std::vector<Identity> id;
    const std::vector<db::Collective> rows = interleavedRows(2, id);
    const db::CollectiveLinks l = db::linkCollectives(rows, layout);
    ASSERT_EQ(rows.size(), size_t(2 * 2 * 24));  // ranks × steps × 24 sends and receives
    size_t linked = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      ASSERT_GE(l.call_of[i], 0) << "row " << i << " (rank " << rows[i].rank << " " << rows[i].op << ") not linked";
      const db::LinkedCall& c = l.calls[size_t(l.call_of[i])];
      ASSERT_EQ(c.rows.size(), 2u);
      EXPECT_TRUE(c.p2p);
      const size_t s = c.rows[0], r = c.rows[1];
      EXPECT_EQ(rows[s].op, "send");
      EXPECT_EQ(rows[r].op, "recv");
      EXPECT_NE(rows[s].rank, rows[r].rank);
      EXPECT_EQ(id[s], id[r]) << "send row " << s << " paired with receive row " << r;
      ++linked;
    }
    EXPECT_EQ(linked, rows.size());
    EXPECT_TRUE(l.why.empty());
  }
}

// A schedule the rows disagree with (the config says plain 1F1B) links nothing and says why; the
// report prints "not linked: …" for those rows, and --json gives null skew and wait with the reason.
TEST(AnalysisLinks, UnlinkedRowsAreSaidNotLinkedNeverZero) {
  std::vector<Identity> id;
  const std::vector<db::Collective> rows = interleavedRows(2, id);
  const auto plain = db::runLayout({{"config", R"({"world":2,"dp":1,"tp":1,"pp":2,"ga":4,"pp_schedule":"1f1b"})"}});
  const db::CollectiveLinks l = db::linkCollectives(rows, plain);
  for (int64_t c : l.call_of) EXPECT_EQ(c, -1);
  const std::string why = db::notLinkedReason(rows[0], l, plain);
  EXPECT_NE(why.find("disagree with the 1F1B schedule"), std::string::npos) << why;

  const std::string path = tempPath("not_linked.db");
  {
    db::RunStore store(path, db::RunStore::Options{true});
    store.setMeta("world_size", "2");
    store.setMeta("config", R"({"workload":"hand-built","world":2,"dp":1,"tp":1,"pp":2,"ga":4,"pp_schedule":"1f1b"})");
    for (int rank = 0; rank < 2; ++rank)
      for (int k = 0; k < 2; ++k) {
        db::Step s;
        s.rank = rank, s.step = k, s.start_ns = 1'000'000 + k * 400'000, s.step_time_ns = 400'000, s.tokens = 100;
        store.appendStep(s);
      }
    store.appendCollectives(rows);
  }
  const db::Report r = db::computeReport(path);
  ASSERT_FALSE(r.collectives.empty());
  for (const auto& c : r.collectives) {
    EXPECT_EQ(c.linked, 0);
    EXPECT_EQ(c.rows_not_linked, c.count);
    EXPECT_NE(c.not_linked_reason.find("disagree"), std::string::npos) << c.not_linked_reason;
  }
  const std::string text = db::formatReport(r);
  EXPECT_EQ(text.find("skew mean 0.000"), std::string::npos) << text;
  EXPECT_EQ(text.find("wait 0.00 ms"), std::string::npos) << text;
  EXPECT_NE(text.find("not linked: rank "), std::string::npos) << text;
  const auto j = nlohmann::json::parse(db::reportJson(r));
  for (const auto& c : j["collectives"]) {
    EXPECT_TRUE(c["wait_s"].is_null()) << c.dump();
    EXPECT_TRUE(c["skew_max_s"].is_null()) << c.dump();
    EXPECT_TRUE(c["not_linked_reason"].is_string()) << c.dump();
  }
}

// A real interleaved run (pp 2 × v 2, 4 micro-batches): `report --json` links every send and receive.
TEST(AnalysisLinks, ARealInterleavedRunIsLinked) {
  const std::string run = tempPath("interleaved_run.db");
  auto r = trainscope::testing::cli("run --workload " + trainscope::testing::tiny4Workload() +
                                    " --seq 16 --mbs 1 --gbs 4 --steps 2 --nproc 2 --pp 2 --virtual-stages 2 "
                                    "--device cpu --cpu-lanes 1 --trace " + run + " --trace-level ranges --overwrite -q");
  ASSERT_EQ(r.status, 0) << r.output;
  r = trainscope::testing::cli("report " + run + " --json");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  int p2p = 0;
  for (const auto& c : j["collectives"]) {
    if (c["op"] != "send" && c["op"] != "recv") continue;
    ++p2p;
    EXPECT_EQ(c["rows_not_linked"], 0) << c.dump();
    EXPECT_EQ(c["linked_calls"].get<int64_t>(), c["count"].get<int64_t>()) << c.dump();  // one send, one receive each
    EXPECT_TRUE(c["wait_s"].is_number()) << c.dump();
  }
  EXPECT_EQ(p2p, 2) << r.output;
}
