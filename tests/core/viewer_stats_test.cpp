// viewer_stats_test.cpp — the viewer's statistics beyond the one-shot table: the incremental pass
// (identical to the one-shot one, partial snapshots on the way, cancelled at once), the histogram of
// one name's durations, the per-name diff of two runs, CSV of the tables, and the read-only SQL box
// (queries run, every kind of write refused, the file unchanged).
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "../common/cli.h"
#include "trainscope/rundb/sqlite.h"
#include "trainscope/viewer/details.h"
#include "trainscope/viewer/diff.h"
#include "trainscope/viewer/model.h"
#include "trainscope/viewer/sql.h"
#include "trainscope/viewer/stats.h"
#include "trainscope/viewer/table.h"

namespace v = trainscope::viewer;
namespace db = trainscope::rundb;
using trainscope::testing::tempPath;

namespace {

std::string synthetic(const std::string& name, v::SyntheticOptions o = {}) {
  const std::string path = tempPath(name);
  if (!std::filesystem::exists(path)) v::writeSyntheticTrace(path, o);
  return path;
}

void expectSameRows(const v::Statistics& a, const v::Statistics& b) {
  ASSERT_EQ(a.rows.size(), b.rows.size());
  for (size_t i = 0; i < a.rows.size(); ++i) {
    const v::StatRow &x = a.rows[i], &y = b.rows[i];
    EXPECT_EQ(int(x.group), int(y.group));
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.rank, y.rank);
    EXPECT_EQ(x.count, y.count);
    EXPECT_EQ(x.total_ns, y.total_ns);
    EXPECT_EQ(x.self_ns, y.self_ns);
    EXPECT_EQ(x.min_ns, y.min_ns);
    EXPECT_EQ(x.max_ns, y.max_ns);
    EXPECT_EQ(x.median_ns, y.median_ns);
    EXPECT_EQ(x.p99_ns, y.p99_ns);
  }
  EXPECT_EQ(a.events, b.events);
}

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

// A pass run in small pieces publishes partial snapshots and ends exactly where the one-shot pass does.
TEST(ViewerStats, TheIncrementalPassEqualsTheOneShotPass) {
  const v::Trace t = v::loadTrace(synthetic("vs_a.db", {2, 6'000, 3}));
  for (bool clip : {false, true}) {
    const auto w = t.stepWindow(1);
    ASSERT_TRUE(w);
    const int64_t b = clip ? w->first + 12'345 : 0, e = clip ? w->second - 6'789 : 0;
    const v::Statistics one = clip ? v::computeRangeStatistics(t, b, e) : v::computeStatistics(t);
    v::StatisticsPass pass(t, clip, b, e);
    int pieces = 0;
    double last = -1;
    int64_t last_events = -1;
    while (!pass.run(1'000)) {
      ++pieces;
      const v::Statistics s = pass.snapshot();
      EXPECT_FALSE(s.complete);
      EXPECT_GT(s.fraction, last);  // progress, piece by piece
      EXPECT_LT(s.fraction, 1.0);
      last = s.fraction;
      int64_t seen = 0;
      for (int64_t n : s.events) seen += n;
      EXPECT_GE(seen, last_events);  // counts only grow
      last_events = seen;
      for (int g = 0; g < v::kStatGroups; ++g) EXPECT_LE(s.events[size_t(g)], one.events[size_t(g)]);
    }
    EXPECT_GT(pieces, 10) << "the budget splits the pass";
    const v::Statistics done = pass.snapshot();
    EXPECT_TRUE(done.complete);
    EXPECT_EQ(done.fraction, 1.0);
    expectSameRows(done, one);
  }
}

// Cancelling stops the pass at the next lane: run() throws, however much is left.
TEST(ViewerStats, TheIncrementalPassStopsWhenCancelled) {
  const v::Trace t = v::loadTrace(synthetic("vs_a.db", {2, 6'000, 3}));
  std::atomic<bool> cancel{false};
  v::StatisticsPass pass(t);
  EXPECT_FALSE(pass.run(500, &cancel));
  const double before = pass.fraction();
  cancel.store(true);
  EXPECT_THROW(pass.run(INT64_MAX / 4, &cancel), v::Cancelled);
  EXPECT_FALSE(pass.done());
  EXPECT_EQ(pass.fraction(), before);  // not one more lane counted
  EXPECT_THROW(v::computeStatistics(t, &cancel), v::Cancelled);
}

// The histogram holds every duration of the name once, in log-spaced bins from its min to its max.
TEST(ViewerStats, HistogramBinsAreLogSpacedAndHoldEveryDuration) {
  const v::Trace t = v::loadTrace(synthetic("vs_a.db", {2, 6'000, 3}));
  const v::Statistics st = v::computeStatistics(t);
  const auto rows = v::statRows(st, t, v::StatGroup::Kernels, v::kAllRanks, v::StatSort::Total, true);
  ASSERT_FALSE(rows.empty());
  for (const v::StatRow* r : rows) {
    const v::Histogram h = v::durationHistogram(t, st, r->group, r->name, r->rank, 20);
    const size_t bins = r->max_ns > std::max<int64_t>(1, r->min_ns) ? 20 : 1;  // all equal: one bin
    ASSERT_EQ(h.counts.size(), bins);
    ASSERT_EQ(h.edges.size(), bins + 1);
    EXPECT_EQ(h.total(), r->count) << t.names[r->name];
    EXPECT_DOUBLE_EQ(h.edges.front(), double(std::max<int64_t>(1, r->min_ns)));
    EXPECT_DOUBLE_EQ(h.edges.back(), double(r->max_ns));
    if (r->max_ns > r->min_ns * 2) {  // equal ratios between edges: log spacing
      const double q = h.edges[1] / h.edges[0];
      for (size_t k = 1; k + 1 < h.edges.size(); ++k) EXPECT_NEAR(h.edges[k + 1] / h.edges[k], q, 1e-9 * q);
    }
    EXPECT_GT(h.counts.front(), 0);  // the shortest is in the first bin, the longest in the last
    EXPECT_GT(h.counts.back(), 0);
  }
  // Per rank, and limited to a range: the same rule over that rank's clipped durations.
  const auto w = t.stepWindow(1);
  const v::Statistics rs = v::computeRangeStatistics(t, w->first + 5'000, w->second - 5'000);
  for (const v::StatRow* r : v::statRows(rs, t, v::StatGroup::Ops, v::kEachRank, v::StatSort::Total, true))
    EXPECT_EQ(v::durationHistogram(t, rs, r->group, r->name, r->rank).total(), r->count) << t.names[r->name];
  // Hand-made durations: 1, 10, 100, 1000 ns in 3 bins of a decade each.
  v::Trace m;
  m.names = {"k"};
  v::Track tr;
  std::vector<v::Event> ev;
  int64_t at = 0;
  for (int64_t d : {1, 10, 10, 100, 1000}) {
    ev.push_back({at, at + d, 0, v::EventKind::Kernel});
    at += 2'000;
  }
  v::buildLanes(tr, ev);
  m.tracks.push_back(tr);
  const v::Histogram h = v::durationHistogram(m, v::computeStatistics(m), v::StatGroup::Kernels, 0, v::kAllRanks, 3);
  EXPECT_EQ(h.counts, (std::vector<int64_t>{1, 2, 2}));  // [1,10) [10,100) [100,1000]
}

// The per-name diff: a run against itself differs nowhere; against a longer run, every difference is
// the two runs' statistics subtracted, largest first; a step one run lacks is said, not guessed.
TEST(ViewerStats, RunDiffPerNameIsBMinusASortedByMagnitude) {
  const v::Trace a = v::loadTrace(synthetic("vs_a.db", {2, 6'000, 3}));
  const v::Trace b = v::loadTrace(synthetic("vs_b.db", {2, 9'000, 4}));
  const v::RunDiff same = v::diffRuns(a, a, int64_t(1));
  ASSERT_TRUE(same.error.empty()) << same.error;
  ASSERT_FALSE(same.rows.empty());
  for (const auto& r : same.rows) {
    EXPECT_EQ(r.delta_ns(), 0) << r.name;
    EXPECT_EQ(r.a_count, r.b_count);
  }
  for (std::optional<int64_t> step : {std::optional<int64_t>(1), std::optional<int64_t>()}) {
    const v::RunDiff d = v::diffRuns(a, b, step);
    ASSERT_TRUE(d.error.empty()) << d.error;
    const v::Statistics sa = step ? v::computeRangeStatistics(a, a.stepWindow(*step)->first, a.stepWindow(*step)->second)
                                  : v::computeStatistics(a);
    const v::Statistics sb = step ? v::computeRangeStatistics(b, b.stepWindow(*step)->first, b.stepWindow(*step)->second)
                                  : v::computeStatistics(b);
    auto total = [](const v::Statistics& s, const v::Trace& t, v::StatGroup g, const std::string& n) {
      std::pair<int64_t, int64_t> out{0, 0};
      for (const auto& r : s.rows)
        if (r.rank == v::kAllRanks && r.group == g && t.names[r.name] == n) out = {r.count, r.total_ns};
      return out;
    };
    bool some_change = false;
    for (size_t i = 0; i < d.rows.size(); ++i) {
      const v::DiffRow& r = d.rows[i];
      const auto [ac, an] = total(sa, a, r.group, r.name);
      const auto [bc, bn] = total(sb, b, r.group, r.name);
      EXPECT_EQ(r.a_count, ac) << r.name;
      EXPECT_EQ(r.a_ns, an) << r.name;
      EXPECT_EQ(r.b_count, bc) << r.name;
      EXPECT_EQ(r.b_ns, bn) << r.name;
      if (i) EXPECT_GE(std::abs(d.rows[i - 1].delta_ns()), std::abs(r.delta_ns()));
      some_change |= r.delta_ns() != 0;
    }
    EXPECT_TRUE(some_change);
    // Every name of either run is in the table once.
    size_t names = 0;
    for (const auto& r : sa.rows) names += r.rank == v::kAllRanks;
    EXPECT_GE(d.rows.size(), names);
  }
  const v::RunDiff missing = v::diffRuns(a, b, int64_t(3));  // a has steps 0-2
  EXPECT_TRUE(missing.rows.empty());
  EXPECT_NE(missing.error.find("step 3 is not in run A"), std::string::npos) << missing.error;
  EXPECT_NE(missing.error.find("whole runs"), std::string::npos) << missing.error;
}

TEST(ViewerStats, TablesAsCsvAreExactAndQuoted) {
  EXPECT_EQ(v::csvField("plain"), "plain");
  EXPECT_EQ(v::csvField("a,b"), "\"a,b\"");
  EXPECT_EQ(v::csvField("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(v::csvField("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(v::toCsv({{"x", "y"}, {{"1", "a,b"}, {"2", ""}}}), "x,y\n1,\"a,b\"\n2,\n");
  const v::Trace t = v::loadTrace(synthetic("vs_a.db", {2, 6'000, 3}));
  const v::Statistics st = v::computeStatistics(t);
  const v::Table tab = v::statsTable(st, t, v::StatGroup::Ops, v::kEachRank);
  const auto rows = v::statRows(st, t, v::StatGroup::Ops, v::kEachRank, v::StatSort::Total, true);
  ASSERT_EQ(tab.rows.size(), rows.size());
  ASSERT_EQ(tab.columns[3], "total_ns");
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(tab.rows[i][0], t.names[rows[i]->name]);
    EXPECT_EQ(tab.rows[i][1], std::to_string(rows[i]->rank));
    EXPECT_EQ(tab.rows[i][3], std::to_string(rows[i]->total_ns));
    EXPECT_EQ(tab.rows[i][7], std::to_string(rows[i]->p99_ns));
  }
  const std::string csv = v::toCsv(tab);
  EXPECT_EQ(size_t(std::count(csv.begin(), csv.end(), '\n')), rows.size() + 1);
  const auto w = t.stepWindow(1);
  const v::Table rt = v::statsTable(v::computeRangeStatistics(t, w->first, w->second), t, v::StatGroup::Ranges, v::kAllRanks);
  EXPECT_EQ(rt.columns.back(), "share_of_range_per_rank");
}

// The SQL box reads; it never writes, whatever it is given, and the file stays as it was.
TEST(ViewerStats, SqlBoxRunsQueriesAndRefusesEveryWrite) {
  const std::string path = synthetic("vs_sql.db", {2, 3'000, 2});
  const std::string before = slurp(path);
  const auto listing = [&] {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path()))
      if (e.path().filename().string().rfind("vs_sql", 0) == 0) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  };
  const auto files = listing();
  v::QueryResult r = v::runQuery(path, "SELECT s.value AS name, count(*) AS n FROM kernels k JOIN strings s ON s.id = k.name_id "
                                        "GROUP BY s.value ORDER BY n DESC, name");
  ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.table.columns, (std::vector<std::string>{"name", "n"}));
  ASSERT_FALSE(r.table.rows.empty());
  {
    db::Database d(path, db::Database::Mode::ReadOnly);
    db::Statement q(d, "SELECT count(*) FROM kernels");
    q.step();
    int64_t sum = 0;
    for (const auto& row : r.table.rows) sum += std::stoll(row[1]);
    EXPECT_EQ(sum, q.columnInt(0));
  }
  r = v::runQuery(path, "SELECT 1 AS one, NULL AS missing; -- a trailing comment");
  ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.table.rows, (std::vector<std::vector<std::string>>{{"1", "NULL"}}));
  r = v::runQuery(path, "SELECT id FROM strings", 3);
  EXPECT_TRUE(r.truncated);
  EXPECT_EQ(r.table.rows.size(), 3u);
  r = v::runQuery(path, "SELEKT nonsense");
  EXPECT_NE(r.error, "");
  r = v::runQuery(path, "SELECT * FROM no_such_table");
  EXPECT_NE(r.error.find("no_such_table"), std::string::npos) << r.error;
  EXPECT_NE(v::runQuery(path, "  ").error.find("no query"), std::string::npos);
  const std::string attach = tempPath("vs_sql_attached.db");
  for (const std::string& w : std::vector<std::string>{"DELETE FROM kernels", "INSERT INTO strings(id, value) VALUES (999999, 'x')", "UPDATE kernels SET name_id = 0",
        "DROP TABLE kernels", "CREATE TABLE t(x)", "CREATE TEMP TABLE t(x)", "PRAGMA user_version = 7",
        "ATTACH '" + attach + "' AS other", "VACUUM INTO '" + attach + "'", "SELECT 1; DELETE FROM kernels",
        "WITH x AS (SELECT 1) DELETE FROM kernels", "/* hidden */ delete from kernels", "REPLACE INTO strings VALUES (1, 'x')"}) {
    r = v::runQuery(path, w);
    EXPECT_FALSE(r.error.empty()) << w;
    EXPECT_TRUE(r.table.rows.empty()) << w;
  }
  EXPECT_NE(v::runQuery(path, "DELETE FROM kernels").error.find("read-only"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(attach));
  EXPECT_EQ(slurp(path), before);  // not a byte changed
  EXPECT_EQ(listing(), files);     // and nothing created beside it
  // A query stopped from another thread says so.
  std::atomic<bool> cancel{true};
  r = v::runQuery(path, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n", 10, &cancel);
  EXPECT_EQ(r.error, "cancelled");
}
