// viewer_finders_test.cpp — go-to for every finder, the model's part (finders.h, no ImGui): the
// search results list sorted and walked by next / prev, SQL rows naming their event, a query's rows
// as a track, a name's slowest instance, a collective's enclosing ranges by its rank's threads (its
// own `collectives` track holds none), and a collective's wait and skew first in Details.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "../common/cli.h"
#include "trainscope/common/error.h"
#include "trainscope/rundb/range_names.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/store.h"
#include "trainscope/viewer/details.h"
#include "trainscope/viewer/finders.h"
#include "trainscope/viewer/model.h"
#include "trainscope/viewer/query.h"
#include "trainscope/viewer/sql.h"
#include "viewer_support.h"

namespace v = trainscope::viewer;
namespace db = trainscope::rundb;
using trainscope::testing::tempPath;

namespace {

std::vector<std::string> names(const v::Trace& t, const std::vector<v::EventRef>& refs) {
  std::vector<std::string> out;
  for (const auto& r : refs) out.push_back(t.name(r));
  return out;
}

// Two ranks of DP 2: rank 0's all-reduce is issued in backward and waited for in grad_sync; rank 1
// arrives 8.4 ms later, inside grad_sync. Each rank's thread: step > backward, step > grad_sync.
std::string linkedRun() {
  const std::string path = tempPath("finders_linked.db");
  if (std::filesystem::exists(path)) return path;
  db::RunStore s(path, db::RunStore::Options{true});
  s.setMeta("world_size", "2");
  s.setMeta("config", R"({"world":2,"dp":2,"tp":1,"pp":1,"ga":1,"pp_schedule":"1f1b"})");
  s.putStrings({{0, db::names::kStep}, {1, db::names::kBackward}, {2, db::names::kGradSync}, {3, "trainscope"}});
  std::vector<db::Range> ranges;
  for (int64_t r = 0; r < 2; ++r) {
    ranges.push_back({0, 40'000'000, 0, 3, 10, 0, 0, r});
    ranges.push_back({100'000, 5'000'000, 1, 3, 10, 1, 0, r});
    ranges.push_back({5'000'000, 39'000'000, 2, 3, 10, 1, 0, r});
  }
  s.begin();
  s.put(ranges);
  s.commit();
  db::Collective c;
  c.op = "all_reduce", c.group = "dp", c.group_size = 2, c.seq = 0, c.bytes = 16 << 20;
  c.rank = 0, c.start_ns = 1'000'000, c.end_ns = 23'000'000;
  db::Collective c1 = c;
  c1.rank = 1, c1.start_ns = 9'400'000;
  s.appendCollectives({c, c1});
  s.createIndexes();
  s.close();
  return path;
}

const v::Track* track(const v::Trace& t, int64_t rank, v::TrackKind k) { return findTrack(t, rank, k); }
uint32_t indexOf(const v::Trace& t, const v::Track* tr) { return uint32_t(tr - t.tracks.data()); }

}  // namespace

// The list: by start it is the matches' own order; by duration (descending) each row is no shorter
// than the next; by name and by rank non-decreasing, ties in start order. Next / prev walk the list
// in its order and wrap; the first step goes to the first (next) or the last (prev) row.
TEST(ViewerFinders, TheResultsListSortsAndNextPrevWalkIt) {
  const v::Trace t = v::loadTrace(synthetic("finders_list.db", {2, 4'000, 2}));
  const v::SearchResult s = v::search(t, "aten::");
  ASSERT_GT(s.matches.size(), 20u);
  const v::MatchList by_start = v::sortMatches(t, s, v::MatchColumn::Start, false);
  for (size_t i = 0; i < by_start.order.size(); ++i) ASSERT_EQ(by_start.order[i], i);
  const v::MatchList by_dur = v::sortMatches(t, s, v::MatchColumn::Duration, true);
  ASSERT_EQ(by_dur.order.size(), s.matches.size());
  for (size_t i = 1; i < by_dur.order.size(); ++i)
    ASSERT_GE(t.event(s.matches[by_dur.order[i - 1]]).duration(), t.event(s.matches[by_dur.order[i]]).duration());
  // The longest aten op is an aten::mm of rank 1 (the synthetic trace's slower rank).
  const v::MatchRow top = v::matchRow(t, s.matches[by_dur.order[0]]);
  EXPECT_EQ(top.name, "aten::mm");
  EXPECT_EQ(top.rank, 1);
  EXPECT_EQ(top.duration_ns, t.event(s.matches[by_dur.order[0]]).duration());
  EXPECT_EQ(top.start_ns, t.event(s.matches[by_dur.order[0]]).start - t.begin);
  const v::MatchList by_name = v::sortMatches(t, s, v::MatchColumn::Name, false);
  for (size_t i = 1; i < by_name.order.size(); ++i) {
    const auto &a = s.matches[by_name.order[i - 1]], &b = s.matches[by_name.order[i]];
    ASSERT_LE(t.name(a), t.name(b));
    if (t.name(a) == t.name(b)) ASSERT_LT(by_name.order[i - 1], by_name.order[i]);  // stable: start order
  }
  const v::MatchList by_rank = v::sortMatches(t, s, v::MatchColumn::Rank, true);
  EXPECT_EQ(t.tracks[s.matches[by_rank.order.front()].track].rank, 1);
  EXPECT_EQ(t.tracks[s.matches[by_rank.order.back()].track].rank, 0);
  // Walking: next from nothing is row 0, prev from nothing the last; both wrap.
  const int64_t n = int64_t(by_dur.order.size());
  EXPECT_EQ(v::stepInList(by_dur, -1, +1), 0);
  EXPECT_EQ(v::stepInList(by_dur, -1, -1), n - 1);
  EXPECT_EQ(v::stepInList(by_dur, 0, +1), 1);
  EXPECT_EQ(v::stepInList(by_dur, n - 1, +1), 0);
  EXPECT_EQ(v::stepInList(by_dur, 0, -1), n - 1);
  EXPECT_EQ(v::stepInList(v::MatchList{}, 3, +1), -1);
  EXPECT_EQ(v::positionOf(by_dur, by_dur.order[7]), 7);
  EXPECT_EQ(v::parseMatchColumn("duration"), v::MatchColumn::Duration);
  EXPECT_FALSE(v::parseMatchColumn("size"));
}

// A result row with rank and start_ns (and end_ns) names its event: a kernel, a step, a collective
// named by its op; a row without those columns, or naming no event, says why.
TEST(ViewerFinders, SqlRowsNameTheirEvent) {
  const std::string path = synthetic("finders_sql.db", {2, 4'000, 3});
  const v::Trace t = v::loadTrace(path);
  const v::QueryResult k = v::runQuery(path,
                                       "SELECT k.rank, k.start_ns, k.end_ns, s.value AS name FROM kernels k JOIN strings s "
                                       "ON s.id = k.name_id ORDER BY k.end_ns - k.start_ns DESC LIMIT 5");
  ASSERT_TRUE(k.error.empty()) << k.error;
  ASSERT_EQ(k.table.rows.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    const auto r = v::sqlRowEvent(t, k.table, i);
    ASSERT_TRUE(r) << i;
    EXPECT_EQ(std::to_string(t.tracks[r->track].rank), k.table.rows[i][0]);
    EXPECT_EQ(std::to_string(t.event(*r).start), k.table.rows[i][1]);
    EXPECT_EQ(std::to_string(t.event(*r).end), k.table.rows[i][2]);
    EXPECT_EQ(t.name(*r), k.table.rows[i][3]);
  }
  const v::QueryResult st = v::runQuery(path, "SELECT rank, start_ns FROM steps WHERE step = 2 AND rank = 1");
  const auto step = v::sqlRowEvent(t, st.table, 0);
  ASSERT_TRUE(step);
  EXPECT_EQ(t.event(*step).kind, v::EventKind::Step);
  const v::QueryResult co = v::runQuery(path, "SELECT rank, op AS name, start_ns, end_ns FROM collectives WHERE seq = 1");
  ASSERT_EQ(co.table.rows.size(), 2u);
  const auto coll = v::sqlRowEvent(t, co.table, 1);
  ASSERT_TRUE(coll);
  EXPECT_EQ(t.event(*coll).kind, v::EventKind::Collective);
  std::string why;
  const v::QueryResult none = v::runQuery(path, "SELECT count(*) AS n FROM kernels");
  EXPECT_FALSE(v::sqlRowEvent(t, none.table, 0, &why));
  EXPECT_NE(why.find("rank and start_ns"), std::string::npos) << why;
  const v::QueryResult nowhere = v::runQuery(path, "SELECT 0 AS rank, 12 AS start_ns");
  EXPECT_FALSE(v::sqlRowEvent(t, nowhere.table, 0, &why));
  EXPECT_NE(why.find("no event starting at 12 ns"), std::string::npos) << why;
}

// A query's rows become a track: one interval per row with a start and an end (or a duration),
// named by the `name` column, nested into lanes that never overlap; without the columns, an error.
TEST(ViewerFinders, AQueryBecomesATrack) {
  const std::string path = synthetic("finders_sql.db", {2, 4'000, 3});
  const std::string q = "SELECT s.value AS name, r.start_ns, r.end_ns FROM ranges r JOIN strings s ON s.id = r.name_id "
                        "WHERE s.value IN ('forward', 'backward', 'step')";
  const v::QueryResult res = v::runQuery(path, q);
  ASSERT_TRUE(res.error.empty()) << res.error;
  ASSERT_EQ(res.table.rows.size(), 2u * 3 * 3);  // 2 ranks × 3 steps × (step, forward, backward)
  const v::QueryTrack track = v::queryTrack(res.table, q);
  ASSERT_TRUE(track.ok()) << track.error;
  EXPECT_EQ(track.track.events(), 18);
  EXPECT_EQ(track.skipped, 0);
  EXPECT_GE(track.track.lanes.size(), 2u);  // forward and backward under step
  std::map<std::string, int> per_name;
  for (const auto& l : track.track.lanes)
    for (size_t i = 0; i < l.events.size(); ++i) {
      ++per_name[track.names[l.events[i].name]];
      if (i) ASSERT_LE(l.events[i - 1].end, l.events[i].start);
    }
  EXPECT_EQ(per_name, (std::map<std::string, int>{{"backward", 6}, {"forward", 6}, {"step", 6}}));
  const v::QueryResult dur = v::runQuery(path, "SELECT start_ns, step_time_ns AS dur_ns FROM steps");
  const v::QueryTrack steps = v::queryTrack(dur.table, "steps");
  ASSERT_TRUE(steps.ok()) << steps.error;
  EXPECT_EQ(steps.track.events(), 6);
  EXPECT_EQ(steps.names[0], "row 0");
  const v::QueryTrack bad = v::queryTrack(v::runQuery(path, "SELECT start_ns FROM kernels").table, "x");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.error.find("end_ns"), std::string::npos) << bad.error;
}

// A diff row's name at its slowest: the longest event of that table and name, over the run or
// among those overlapping a window; brute force agrees.
TEST(ViewerFinders, TheSlowestInstanceOfANameIsTheLongest) {
  const v::Trace t = v::loadTrace(synthetic("finders_list.db", {2, 4'000, 2}));
  auto brute = [&](std::optional<std::pair<int64_t, int64_t>> w) {
    int64_t best = -1;
    for (const auto& tr : t.tracks)
      for (const auto& l : tr.lanes)
        for (const auto& e : l.events)
          if (t.names[e.name] == "aten::mm" && e.kind == v::EventKind::HostOp &&
              (!w || (e.end > w->first && e.start < w->second)))
            best = std::max(best, e.duration());
    return best;
  };
  const auto r = v::slowestInstance(t, v::StatGroup::Ops, "aten::mm");
  ASSERT_TRUE(r);
  EXPECT_EQ(t.name(*r), "aten::mm");
  EXPECT_EQ(t.event(*r).duration(), brute(std::nullopt));
  EXPECT_EQ(t.tracks[r->track].rank, 1);  // the slower rank
  const auto w = t.stepWindow(1, 0);
  ASSERT_TRUE(w);
  const auto in = v::slowestInstance(t, v::StatGroup::Ops, "aten::mm", *w);
  ASSERT_TRUE(in);
  EXPECT_EQ(t.event(*in).duration(), brute(*w));
  EXPECT_TRUE(t.event(*in).end > w->first && t.event(*in).start < w->second);
  EXPECT_FALSE(v::slowestInstance(t, v::StatGroup::Kernels, "aten::mm"));  // an op, not a kernel
  EXPECT_FALSE(v::slowestInstance(t, v::StatGroup::Ops, "no such op"));
}

// A collective's row sits on its rank's `collectives` track, where nothing encloses it: the flame
// parents (query.h's enclosing) are empty. enclosingOf finds the ranges of the rank's thread: rank
// 0's all-reduce was issued in step > backward and ended in step > grad_sync; rank 1's both in grad_sync.
TEST(ViewerFinders, ACollectiveIsEnclosedByTheRangesWhereItWasIssuedAndEnded) {
  const v::Trace t = v::loadTrace(linkedRun());
  const v::Track* c0 = track(t, 0, v::TrackKind::Collectives);
  const v::Track* c1 = track(t, 1, v::TrackKind::Collectives);
  ASSERT_TRUE(c0 && c1);
  const v::EventRef r0{indexOf(t, c0), 0, 0}, r1{indexOf(t, c1), 0, 0};
  EXPECT_TRUE(v::enclosing(t, r0).empty());  // why Details said nothing before
  const v::Enclosing e0 = v::enclosingOf(t, r0);
  EXPECT_TRUE(e0.by_time);
  EXPECT_EQ(names(t, e0.at_start), (std::vector<std::string>{"step", "backward"}));
  EXPECT_EQ(names(t, e0.at_end), (std::vector<std::string>{"step", "grad_sync"}));
  const v::Enclosing e1 = v::enclosingOf(t, r1);
  EXPECT_EQ(names(t, e1.at_start), (std::vector<std::string>{"step", "grad_sync"}));
  EXPECT_EQ(names(t, e1.at_end), (std::vector<std::string>{"step", "grad_sync"}));
  // A thread's own event keeps its flame parents.
  const v::Track* th = track(t, 0, v::TrackKind::Thread);
  ASSERT_TRUE(th);
  const v::EventRef grad{indexOf(t, th), 1, 1};
  ASSERT_EQ(t.name(grad), "grad_sync");
  const v::Enclosing eg = v::enclosingOf(t, grad);
  EXPECT_FALSE(eg.by_time);
  EXPECT_EQ(names(t, eg.at_start), (std::vector<std::string>{"step"}));
}

// Details of a linked collective: this copy's wait, the arrival skew and the transfer right under its
// name, before the kind, start, duration and the row's columns; of an unlinked one, why it is not.
TEST(ViewerFinders, ACollectivesWaitAndSkewComeFirstInDetails) {
  const std::string path = linkedRun();
  const v::Trace t = v::loadTrace(path);
  db::RunReader reader(path);
  const v::EventRef r0{indexOf(t, track(t, 0, v::TrackKind::Collectives)), 0, 0};
  const v::Fields f = v::eventDetails(reader, t, r0);
  ASSERT_GE(f.size(), 6u);
  EXPECT_EQ(f[0].first, "name");
  EXPECT_EQ(f[1].first, "wait");
  EXPECT_EQ(f[1].second, v::formatExact(8'400'000) + " (38.2% of the call)");
  EXPECT_EQ(f[2].first, "arrival skew");
  EXPECT_EQ(f[3].first, "transfer");
  auto at = [&](const std::string& k) {
    for (size_t i = 0; i < f.size(); ++i)
      if (f[i].first == k) return i;
    return f.size();
  };
  EXPECT_LT(at("linked ranks"), at("kind"));
  EXPECT_LT(at("bus bandwidth (transfer)"), at("start"));
  EXPECT_LT(at("transfer"), at("op"));
  // Unlinked (the synthetic trace has no layout): the reason comes first.
  const std::string syn = synthetic("finders_sql.db", {2, 4'000, 3});
  const v::Trace s = v::loadTrace(syn);
  db::RunReader rs(syn);
  const v::Fields g = v::eventDetails(rs, s, {indexOf(s, track(s, 0, v::TrackKind::Collectives)), 0, 0});
  ASSERT_GE(g.size(), 2u);
  EXPECT_TRUE(g[1].first == "linked" || g[1].first == "wait") << g[1].first;
  if (g[1].first == "linked") EXPECT_EQ(g[1].second.rfind("not linked: ", 0), 0u) << g[1].second;
}

// A script's `click`: a table a script can click and a row number, or the table, `header` and a column;
// anything else is refused at parse time, naming --script, the line and the form.
TEST(ViewerFinders, ClickCommandsAreCheckedWhenTheScriptIsRead) {
  const auto cmds = v::parseFinderScript("search k\nclick search 3\nclick sql 0\nclick diff 2\nclick search header duration\n",
                                         "s.txt", v::parseScript);
  ASSERT_EQ(cmds.size(), 5u);
  EXPECT_EQ(cmds[1].op, "click");
  EXPECT_EQ(cmds[1].args, (std::vector<std::string>{"search", "3"}));
  EXPECT_EQ(cmds[4].args, (std::vector<std::string>{"search", "header", "duration"}));
  for (const char* bad : {"click\n", "click stats 0\n", "click search\n", "click search -1\n", "click search x\n",
                          "click search head name\n", "click sql 1 2 3\n"}) {
    try {
      v::parseFinderScript(bad, "s.txt", v::parseScript);
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const trainscope::UserError& e) {
      EXPECT_NE(std::string(e.what()).find("s.txt:1: click takes"), std::string::npos) << e.what();
    }
  }
}
