// viewer_comm_test.cpp — collectives linked across ranks (rundb::linkCollectives, viewer/comm.h): by
// group instance and call number (two dp instances of a TP×DP layout apart), pipeline sends paired
// with their receives through the schedule, and a loaded run's links with each member's wait,
// transfer and bandwidth in Details.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "../common/cli.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/report.h"
#include "trainscope/rundb/store.h"
#include "trainscope/viewer/comm.h"
#include "trainscope/viewer/details.h"
#include "trainscope/viewer/model.h"
#include "trainscope/viewer/ruler.h"
#include "trainscope/viewer/view_state.h"
#include "viewer_support.h"

namespace v = trainscope::viewer;
namespace db = trainscope::rundb;
using trainscope::testing::tempPath;

namespace {
db::Collective coll(int64_t rank, const std::string& op, const std::string& group, int64_t size, int64_t seq,
                    int64_t bytes, int64_t start, int64_t end) {
  db::Collective c;
  c.rank = rank, c.op = op, c.group = group, c.group_size = size, c.seq = seq, c.bytes = bytes;
  c.start_ns = start, c.end_ns = end;
  return c;
}
const db::LinkedCall* callOfRow(const db::CollectiveLinks& l, size_t row) {
  return l.call_of[row] >= 0 ? &l.calls[size_t(l.call_of[row])] : nullptr;
}
std::set<int64_t> ranksOf(const std::vector<db::Collective>& rows, const db::LinkedCall& c) {
  std::set<int64_t> out;
  for (size_t i : c.rows) out.insert(rows[i].rank);
  return out;
}
}  // namespace

// TP=2 × DP=2: rank = tp + 2·dp, so the dp groups are {0, 2} and {1, 3}, and both number their calls
// from 0 with the same op and bytes. The layout keeps the two instances apart; without it the four
// rows of seq 0 are not guessed apart (left unlinked).
TEST(ViewerComm, TwoDpInstancesOfATpTimesDpLayoutShareSeqNumbers) {
  const auto layout = db::runLayout({{"config", R"({"world":4,"dp":2,"tp":2,"pp":1,"ga":1,"pp_schedule":"1f1b"})"}});
  ASSERT_TRUE(layout);
  EXPECT_EQ(layout->coords(3).dp, 1);
  EXPECT_EQ(layout->coords(3).tp, 1);
  EXPECT_EQ(layout->coords(2).tp, 0);
  EXPECT_FALSE(db::runLayout({{"config", R"({"world":4,"dp":1,"tp":2,"pp":1})"}}));  // does not add up
  EXPECT_FALSE(db::runLayout({}));
  const std::vector<db::Collective> rows = {
      coll(0, "all_reduce", "dp", 2, 0, 1000, 100, 1000), coll(1, "all_reduce", "dp", 2, 0, 1000, 110, 1000),
      coll(2, "all_reduce", "dp", 2, 0, 1000, 400, 1000), coll(3, "all_reduce", "dp", 2, 0, 1000, 150, 1000),
      coll(0, "all_reduce", "tp", 2, 0, 8, 50, 95),       coll(1, "all_reduce", "tp", 2, 0, 8, 60, 95),
      coll(2, "all_reduce", "tp", 2, 0, 8, 70, 95),       coll(3, "all_reduce", "tp", 2, 0, 8, 90, 95)};
  const db::CollectiveLinks l = db::linkCollectives(rows, layout);
  ASSERT_EQ(l.calls.size(), 4u);
  const db::LinkedCall* dp0 = callOfRow(l, 0);
  const db::LinkedCall* dp1 = callOfRow(l, 1);
  ASSERT_TRUE(dp0 && dp1);
  EXPECT_EQ(ranksOf(rows, *dp0), (std::set<int64_t>{0, 2}));
  EXPECT_EQ(ranksOf(rows, *dp1), (std::set<int64_t>{1, 3}));
  EXPECT_EQ(dp0->skewNs(), 300);  // rank 2 arrived at 400, rank 0 at 100
  EXPECT_EQ(dp1->skewNs(), 40);   // 150 − 110
  EXPECT_EQ(ranksOf(rows, *callOfRow(l, 4)), (std::set<int64_t>{0, 1}));
  EXPECT_EQ(ranksOf(rows, *callOfRow(l, 6)), (std::set<int64_t>{2, 3}));
  EXPECT_EQ(callOfRow(l, 6)->skewNs(), 20);
  // Rank 0 waited 300 ns of its 900 for rank 2; the transfer is the 600 after rank 2 arrived, and the bus
  // bandwidth is over it: 1000 bytes / 600 ns × 2(n−1)/n (= 1 at n = 2).
  const db::CallTiming t0 = db::callTiming(rows[0], dp0);
  EXPECT_EQ(t0.wait_ns, 300);
  EXPECT_EQ(t0.transfer_ns, 600);
  EXPECT_DOUBLE_EQ(t0.busbw, 1000 / 600e-9);
  const db::CallTiming t2 = db::callTiming(rows[2], dp0);
  EXPECT_EQ(t2.wait_ns, 0);
  EXPECT_EQ(t2.transfer_ns, 600);
  // Unlinked: all of it is transfer, and the bandwidth is the row's own.
  EXPECT_EQ(db::callTiming(rows[0], nullptr).transfer_ns, 900);
  EXPECT_DOUBLE_EQ(db::callTiming(rows[0], nullptr).busbw, rows[0].busbw());
  // Without the layout: four rows share (dp, call 0, all_reduce, 1000 bytes) in groups of two.
  const db::CollectiveLinks none = db::linkCollectives(rows, std::nullopt);
  EXPECT_TRUE(none.calls.empty());
  for (int64_t c : none.call_of) EXPECT_EQ(c, -1);
  // Without it but with one instance per group name (an import's process groups): linked.
  const std::vector<db::Collective> two = {coll(0, "all_reduce", "pg0", 2, 0, 64, 10, 90),
                                           coll(1, "all_reduce", "pg0", 2, 0, 64, 30, 90)};
  const db::CollectiveLinks imported = db::linkCollectives(two, std::nullopt);
  ASSERT_EQ(imported.calls.size(), 1u);
  EXPECT_EQ(imported.calls[0].skewNs(), 20);
}

// PP = 3, one micro-batch, 1F1B (pipeline.cpp): stage 0 sends then receives; stage 1 receives from 0,
// sends to 2, receives from 2, sends to 0; stage 2 receives, then sends. Sends and receives take the
// group's seq numbers, so the loss broadcast after them is seq 2 on stages 0 and 2 and seq 4 on stage 1:
// still one call. A rank whose rows do not follow the schedule (a receive dropped) is not paired.
TEST(ViewerComm, PipelineSendsPairWithTheirReceivesThroughTheSchedule) {
  const auto layout = db::runLayout({{"config", R"({"world":3,"dp":1,"tp":1,"pp":3,"ga":1,"pp_schedule":"1f1b"})"}});
  ASSERT_TRUE(layout);
  const std::vector<db::Collective> rows = {
      coll(0, "send", "pp", 3, 0, 64, 0, 500),      coll(0, "recv", "pp", 3, 1, 64, 100, 900),   // 0, 1
      coll(0, "broadcast", "pp", 3, 2, 4, 1000, 1100),                                           // 2
      coll(1, "recv", "pp", 3, 0, 64, 50, 200),     coll(1, "send", "pp", 3, 1, 64, 210, 600),   // 3, 4
      coll(1, "recv", "pp", 3, 2, 64, 220, 700),    coll(1, "send", "pp", 3, 3, 64, 710, 890),   // 5, 6
      coll(1, "broadcast", "pp", 3, 4, 4, 1020, 1100),                                           // 7
      coll(2, "recv", "pp", 3, 0, 64, 300, 400),    coll(2, "send", "pp", 3, 1, 64, 410, 650),   // 8, 9
      coll(2, "broadcast", "pp", 3, 2, 4, 1050, 1100)};                                          // 10
  const db::CollectiveLinks l = db::linkCollectives(rows, layout);
  auto pairOf = [&](size_t send) -> std::pair<size_t, size_t> {
    const db::LinkedCall* c = callOfRow(l, send);
    if (!c || !c->p2p) return {SIZE_MAX, SIZE_MAX};
    return {c->rows[0], c->rows[1]};
  };
  EXPECT_EQ(pairOf(0), (std::pair<size_t, size_t>{0, 3}));  // stage 0 → 1, forward
  EXPECT_EQ(pairOf(4), (std::pair<size_t, size_t>{4, 8}));  // stage 1 → 2, forward
  EXPECT_EQ(pairOf(9), (std::pair<size_t, size_t>{9, 5}));  // stage 2 → 1, backward
  EXPECT_EQ(pairOf(6), (std::pair<size_t, size_t>{6, 1}));  // stage 1 → 0, backward
  // Stage 1's receive from 2 waited 190 ns for the send (issued at 410); the transfer ran to its end.
  const db::LinkedCall* back = callOfRow(l, 5);
  EXPECT_EQ(back->skewNs(), 190);
  EXPECT_EQ(db::callTiming(rows[5], back).wait_ns, 190);
  EXPECT_EQ(db::callTiming(rows[5], back).transfer_ns, 290);
  // A send's own end is only an upper bound: its transfer is the receive's (900 − 710).
  EXPECT_EQ(db::callTiming(rows[6], callOfRow(l, 6)).transfer_ns, 190);
  EXPECT_EQ(db::callTiming(rows[1], callOfRow(l, 1)).wait_ns, 610);
  {  // The trace's end cut that receive: the send's transfer (to the receive's end) is not known.
    std::vector<db::Collective> cut = rows;
    cut[1].cut = true;
    const db::CollectiveLinks lc = db::linkCollectives(cut, layout);
    const db::LinkedCall* c = callOfRow(lc, 6);
    ASSERT_TRUE(c && c->p2p && c->cut);
    EXPECT_EQ(db::callTiming(cut[6], c).transfer_ns, 0);
    EXPECT_EQ(db::callTiming(cut[6], c).busbw, 0.0);
    EXPECT_EQ(db::callTiming(cut[6], c).wait_ns, 0);
    EXPECT_FALSE(callOfRow(lc, 4)->cut);  // the other pairs are whole
  }
  // The broadcast: call 0 of the pp group's collectives on every stage.
  const db::LinkedCall* bc = callOfRow(l, 7);
  ASSERT_TRUE(bc);
  EXPECT_EQ(ranksOf(rows, *bc), (std::set<int64_t>{0, 1, 2}));
  EXPECT_EQ(bc->skewNs(), 50);
  EXPECT_EQ(l.calls.size(), 5u);

  // Stage 1's first receive dropped: its rows no longer follow the schedule, so none of them pairs.
  std::vector<db::Collective> dropped = rows;
  dropped.erase(dropped.begin() + 3);
  const db::CollectiveLinks d = db::linkCollectives(dropped, layout);
  for (size_t i = 0; i < dropped.size(); ++i)
    if (dropped[i].rank == 1 && dropped[i].op != "broadcast") EXPECT_EQ(d.call_of[i], -1) << i;
  EXPECT_EQ(d.calls.size(), 1u);  // the broadcast
}

// Loaded from a run database: each collective's event knows its call, the ranks' headers their
// coordinates, and Details the skew, this copy's wait and transfer, and the bandwidth over the transfer.
TEST(ViewerComm, ALoadedRunLinksItsCollectivesAndDetailsShowTheWait) {
  const std::string path = tempPath("v_comm.db");
  {
    db::RunStore s(path, db::RunStore::Options{true});
    s.setMeta("world_size", "2");
    s.setMeta("config", R"({"world":2,"dp":2,"tp":1,"pp":1,"ga":1,"pp_schedule":"1f1b"})");
    // Rank 1 arrives 8.4 ms after rank 0 at a 22 ms all-reduce: 38% of rank 0's call is the wait.
    s.appendCollectives({coll(0, "all_reduce", "dp", 2, 0, 16 << 20, 1'000'000, 23'000'000),
                         coll(1, "all_reduce", "dp", 2, 0, 16 << 20, 9'400'000, 23'000'000),
                         coll(0, "all_reduce", "dp", 2, 1, 16 << 20, 30'000'000, 31'000'000)});  // rank 1's dropped
  }
  const v::Trace t = v::loadTrace(path);
  ASSERT_TRUE(t.comm.layout);
  EXPECT_EQ(v::rankCoordinates(t, 1), "dp 1 tp 0 pp 0");
  const v::Track* c0 = findTrack(t, 0, v::TrackKind::Collectives);
  const v::Track* c1 = findTrack(t, 1, v::TrackKind::Collectives);
  ASSERT_TRUE(c0 && c1);
  const uint32_t t0 = uint32_t(c0 - t.tracks.data()), t1 = uint32_t(c1 - t.tracks.data());
  const v::EventRef r0{t0, 0, 0}, r1{t1, 0, 0}, lone{t0, 0, 1};
  ASSERT_EQ(t.comm.calls.size(), 1u);
  const v::CommCall* call = t.comm.callOf(r0);
  ASSERT_TRUE(call);
  EXPECT_EQ(call, t.comm.callOf(r1));
  EXPECT_FALSE(t.comm.callOf(lone));
  EXPECT_EQ(call->members, (std::vector<v::EventRef>{r0, r1}));
  EXPECT_EQ(call->link.skewNs(), 8'400'000);
  const v::MemberTiming m = v::memberTiming(t, *call, r0);
  EXPECT_EQ(m.wait_ns, 8'400'000);
  EXPECT_EQ(m.transfer_ns, 13'600'000);
  EXPECT_EQ(m.last_rank, 1);
  db::RunReader reader(path);
  std::map<std::string, std::string> f;
  for (const auto& [key, value] : v::eventDetails(reader, t, r0)) f[key] = value;
  EXPECT_EQ(f["linked ranks"], "0, 1 (2 of 2)");
  EXPECT_EQ(f["arrival skew"], v::formatExact(8'400'000) + " (last arrival: rank 1)");
  EXPECT_EQ(f["wait"], v::formatExact(8'400'000) + " (38.2% of the call)");
  EXPECT_EQ(f["transfer"], v::formatExact(13'600'000));
  // 16 MiB over the 13.6 ms transfer, factor 1 at n = 2; over the whole 22 ms call it reads lower.
  EXPECT_EQ(f["bus bandwidth (transfer)"], v::formatBytes(double(16 << 20) / 13.6e-3) + "/s");
  EXPECT_EQ(f["bus bandwidth"], v::formatBytes(double(16 << 20) / 22e-3) + "/s");
  f.clear();
  for (const auto& [key, value] : v::eventDetails(reader, t, lone)) f[key] = value;
  EXPECT_EQ(f.count("arrival skew"), 0u);
}

// An imported rank-3 Kineto trace (kineto_structure.h) shows rank 3 alone, its rows labelled with the
// names the profiler recorded (a negative tid without a name as itself), threads in the profiler's
// sort order, and the GPU annotations as a row of their own right above their stream's kernels.
