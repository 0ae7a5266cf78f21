// viewer_test.cpp — the viewer's model without a window: level of detail against a brute-force pass
// (with the busy time of folded blocks), colours by kind and name, lane building, hit testing, the
// counter pyramid, loading a generated trace (layout, counts, exact epoch-scale times, correlation,
// flame parents), search, range totals, statistics (of a range, against SQL) and run comparison. The
// files the model is handed (bad files, studies, WAL, FIFOs, many ranks, imported traces):
// viewer_files_test.cpp. The time view, ruler and names:
// viewer_view_test.cpp. Collectives linked across ranks (by group instance and call number, pipeline
// sends to their receives) and their wait, transfer and bandwidth: the ViewerComm tests.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "../common/cli.h"
#include "viewer_support.h"
#include "trainscope/common/error.h"
#include "trainscope/rundb/import.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/sqlite.h"
#include "trainscope/rundb/store.h"
#include "trainscope/tuner/study.h"
#include "trainscope/viewer/comm.h"
#include "trainscope/viewer/details.h"
#include "trainscope/viewer/image.h"
#include "trainscope/viewer/lod.h"
#include "trainscope/viewer/model.h"
#include "trainscope/viewer/names.h"
#include "trainscope/viewer/query.h"
#include "trainscope/viewer/ruler.h"
#include "trainscope/viewer/stats.h"
#include "trainscope/viewer/view_state.h"

namespace v = trainscope::viewer;
namespace db = trainscope::rundb;
using trainscope::testing::tempPath;

namespace {

// The rule of lod.h applied directly to the events overlapping [b, e).
std::vector<v::DrawItem> bruteForce(const v::Lane& lane, int64_t b, int64_t e, int64_t t) {
  std::vector<v::DrawItem> out;
  bool open = false, open_small = false;
  v::DrawItem cur;
  for (uint32_t i = 0; i < lane.events.size(); ++i) {
    const v::Event& ev = lane.events[i];
    if (ev.end <= b || ev.start >= e) continue;
    const bool small = ev.duration() < t;
    if (open && open_small && small && ev.start - cur.end < t) {
      cur.end = std::max(cur.end, ev.end);
      ++cur.count;
      cur.busy += ev.duration();
      continue;
    }
    if (open) out.push_back(cur);
    cur = {ev.start, ev.end, 1, i, ev.duration()};
    open = true;
    open_small = small;
  }
  if (open) out.push_back(cur);
  return out;
}

v::Lane randomLane(std::mt19937_64& rng, size_t n) {
  v::Lane lane;
  int64_t t = 1'700'000'000'000'000'000;
  std::uniform_real_distribution<double> lg(0, 7);  // 1 ns .. 10 ms, log-uniform
  for (size_t i = 0; i < n; ++i) {
    t += int64_t(std::pow(10.0, lg(rng)) * (rng() % 4 == 0 ? 1 : 0.01));
    const int64_t d = std::max<int64_t>(1, int64_t(std::pow(10.0, lg(rng))));
    lane.events.push_back({t, t + d, uint32_t(i % 7), v::EventKind::Kernel});
    t += d;
  }
  v::buildLevels(lane);
  return lane;
}
}  // namespace

TEST(ViewerLod, FoldedItemsMatchBruteForceAtEveryZoom) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 6; ++round) {
    const v::Lane lane = randomLane(rng, 20'000);
    ASSERT_FALSE(lane.levels.empty());
    const int64_t b0 = lane.events.front().start, e0 = lane.events.back().end;
    for (int q = 0; q < 60; ++q) {
      // Windows from the whole lane down to a few events, thresholds from 1 ns to a tenth of it.
      const double frac = std::pow(10.0, -double(rng() % 60) / 10.0);
      const int64_t w = std::max<int64_t>(10, int64_t(double(e0 - b0) * frac));
      const int64_t b = b0 - w / 10 + int64_t(rng() % uint64_t(std::max<int64_t>(1, e0 - b0)));
      const int64_t e = b + w;
      const int64_t t = std::max<int64_t>(1, w / int64_t(1 + rng() % 4000));
      std::vector<v::DrawItem> got;
      v::visibleItems(lane, b, e, t, got);
      const auto want = bruteForce(lane, b, e, t);
      ASSERT_EQ(got.size(), want.size()) << "window " << w << " threshold " << t;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].start, want[i].start);
        EXPECT_EQ(got[i].end, want[i].end);
        EXPECT_EQ(got[i].count, want[i].count);
        EXPECT_EQ(got[i].busy, want[i].busy);  // the time its events cover, exactly
        if (want[i].count == 1) EXPECT_EQ(got[i].index, want[i].index);
      }
    }
  }
}

TEST(ViewerLod, FoldedBlocksKnowHowBusyTheyAre) {
  // A stream 17% busy: 1.7 us kernels every 10 us for 100 ms. Zoomed out (3 px = 250 us) it folds
  // into one block whose coverage is 0.17, not a solid bar; zoomed in, blocks keep the same share.
  v::Lane lane;
  for (int64_t t = 0; t < 100'000'000; t += 10'000) lane.events.push_back({t, t + 1'700, 0, v::EventKind::Kernel});
  v::buildLevels(lane);
  std::vector<v::DrawItem> items;
  v::visibleItems(lane, -1'000'000, 101'000'000, 250'000, items);
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].count, 10'000u);
  EXPECT_EQ(items[0].busy, 10'000 * 1'700);
  EXPECT_NEAR(items[0].coverage(), 0.17, 0.0001);
  for (int64_t b : {12'345'678, 50'000'001}) {  // windows that cut blocks, at the levels' thresholds
    items.clear();
    v::visibleItems(lane, b, b + 3'000'000, 16'000, items);
    ASSERT_FALSE(items.empty());
    for (const auto& it : items) {
      EXPECT_EQ(it.busy, int64_t(it.count) * 1'700);
      if (it.count > 10) EXPECT_NEAR(it.coverage(), 0.17, 0.001);
    }
  }
  for (uint32_t a : {0u, 5u, 16u, 17u, 9'000u})
    for (uint32_t n : {0u, 1u, 15u, 16u, 33u, 1'000u})
      EXPECT_EQ(v::busyBetween(lane, a, a + n), int64_t(n) * 1'700) << a << " + " << n;
}

TEST(ViewerLod, ColoursByKindAndNameAndFoldedBlocksApart) {
  std::mt19937_64 rng(3);
  for (int k = 0; k < v::kEventKinds; ++k) {
    const v::EventKind kind = v::EventKind(k);
    const v::Hsv base = v::toHsv(v::kindColor(kind));
    std::set<uint32_t> shades;
    for (int i = 0; i < 300; ++i) {
      const std::string name = "kernel_" + std::to_string(rng());
      const uint32_t c = v::nameColor(kind, name);
      EXPECT_EQ(c, v::nameColor(kind, name));  // stable
      shades.insert(c);
      const v::Hsv h = v::toHsv(c);
      // The kind's hue within the shift (grey API calls: grey), the name's brightness within 12%.
      const double dh = std::fabs(std::remainder(h.h - base.h, 360.0));
      if (base.s > 0) EXPECT_LE(dh, v::kNameHueShift + 1.5) << v::kindName(kind);
      else EXPECT_LT(h.s, 0.02);
      EXPECT_NEAR(h.v, base.v, base.v * 0.13) << v::kindName(kind);
      // Never mistaken for a folded block: 25 degrees of hue away, or plainly unsaturated.
      const double from_folded = std::fabs(std::remainder(h.h - v::toHsv(v::palette::kFolded).h, 360.0));
      EXPECT_TRUE(from_folded >= 25 || h.s < 0.1) << v::kindName(kind) << " " << std::hex << c;
    }
    EXPECT_GT(shades.size(), 25u) << v::kindName(kind);  // names get shades of their own (grey: 33 levels)
  }
}

TEST(ViewerLod, AFrameWalksWhatIsOnScreenNotTheTrace) {
  // One million back-to-back 1 µs kernels; at a 1000 px view of all of it, a few items come back.
  v::Lane lane;
  for (int64_t i = 0; i < 1'000'000; ++i) lane.events.push_back({i * 1500, i * 1500 + 1000, 0, v::EventKind::Kernel});
  v::buildLevels(lane);
  std::vector<v::DrawItem> out;
  const int64_t span = lane.events.back().end;
  v::visibleItems(lane, 0, span, span / 1000 * 3, out);
  EXPECT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].count, 1'000'000u);
  // Zoomed to 100 µs: every event on its own.
  out.clear();
  v::visibleItems(lane, 750'000'000, 750'100'000, 300, out);
  EXPECT_EQ(out.size(), 67u);
  for (const auto& it : out) EXPECT_EQ(it.count, 1u);
}

TEST(ViewerModel, LanesNestRangesAndSeparateOverlaps) {
  v::Track t;
  std::vector<v::Event> ev = {{0, 100, 0, v::EventKind::Range},  {10, 40, 1, v::EventKind::HostOp},
                              {50, 90, 2, v::EventKind::HostOp}, {12, 20, 3, v::EventKind::ApiCall},
                              {95, 130, 4, v::EventKind::Range},  // overlaps the first partly
                              {200, 210, 5, v::EventKind::Range}};
  v::buildLanes(t, ev);
  ASSERT_EQ(t.lanes.size(), 3u);
  EXPECT_EQ(t.lanes[0].events.size(), 2u);  // [0,100) and [200,210)
  EXPECT_EQ(t.lanes[1].events.size(), 3u);  // the two ops and the partial overlap, bumped down
  EXPECT_EQ(t.lanes[2].events.size(), 1u);  // the API call inside the first op
  for (const auto& l : t.lanes)
    for (size_t i = 1; i < l.events.size(); ++i) EXPECT_LE(l.events[i - 1].end, l.events[i].start);
}

TEST(ViewerModel, HitTestingReturnsTheEventUnderThePoint) {
  v::Lane lane;
  lane.events = {{100, 200, 0, v::EventKind::Kernel}, {300, 400, 1, v::EventKind::Kernel}, {410, 420, 2, v::EventKind::Kernel}};
  EXPECT_EQ(v::hitLane(lane, 150, 0), 0u);
  EXPECT_EQ(v::hitLane(lane, 300, 0), 1u);
  EXPECT_EQ(v::hitLane(lane, 405, 10), 1u);   // 5 from the end of #1, 5 from #2: the first nearest
  EXPECT_EQ(v::hitLane(lane, 408, 10), 2u);
  EXPECT_FALSE(v::hitLane(lane, 250, 10));   // 50 from either
  EXPECT_FALSE(v::hitLane(lane, 50, 10));
  EXPECT_FALSE(v::hitLane(lane, 1000, 10));
}

TEST(ViewerModel, CounterMaxMatchesBruteForce) {
  std::mt19937_64 rng(3);
  v::Track t;
  for (int i = 0; i < 70'000; ++i) {
    t.counter.ts.push_back(i * 10);
    t.counter.values.push_back(double(rng() % 1'000'000));
  }
  auto& c = t.counter;
  v::buildPyramid(c);
  for (int q = 0; q < 500; ++q) {
    size_t a = rng() % c.values.size(), b = rng() % c.values.size();
    if (a > b) std::swap(a, b);
    double want = 0;
    for (size_t i = a; i < b; ++i) want = i == a ? c.values[i] : std::max(want, c.values[i]);
    EXPECT_EQ(v::counterMax(c, a, b), want) << a << ".." << b;
  }
}

TEST(ViewerModel, LoadsAGeneratedTraceWithItsLayoutCountsAndExactTimes) {
  const std::string path = synthetic("v_layout.db", {2, 6'000, 3});
  const v::Trace t = v::loadTrace(path);
  ASSERT_EQ(t.ranks.size(), 2u);
  // Every rank: steps, one CPU thread, one stream, collectives, memory — in that order.
  for (const auto& g : t.ranks) {
    std::vector<v::TrackKind> kinds;
    for (size_t i : g.tracks) kinds.push_back(t.tracks[i].kind);
    EXPECT_EQ(kinds, (std::vector<v::TrackKind>{v::TrackKind::Steps, v::TrackKind::Thread, v::TrackKind::Stream,
                                                v::TrackKind::Collectives, v::TrackKind::Counter}));
    EXPECT_EQ(t.tracks[g.tracks[4]].label, "memory");
    EXPECT_EQ(g.device, "cuda:" + std::to_string(g.rank));
  }
  // Counts equal the database's rows.
  db::RunReader r(path);
  int64_t rows = int64_t(r.steps().size()) + int64_t(r.collectives().size());
  r.forEach<db::Range>([&](const db::Range&) { ++rows; });
  r.forEach<db::HostOp>([&](const db::HostOp&) { ++rows; });
  r.forEach<db::ApiCall>([&](const db::ApiCall&) { ++rows; });
  r.forEach<db::Kernel>([&](const db::Kernel&) { ++rows; });
  r.forEach<db::Memcpy>([&](const db::Memcpy&) { ++rows; });
  r.forEach<db::Memset>([&](const db::Memset&) { ++rows; });
  r.forEach<db::Counter>([&](const db::Counter&) { ++rows; });
  EXPECT_EQ(t.event_count, rows);
  // Times are the file's integers, to the nanosecond, at an epoch-scale clock.
  const auto kernels = r.events<db::Kernel>(1);
  const v::Track* stream = findTrack(t, 1, v::TrackKind::Stream);
  ASSERT_NE(stream, nullptr);
  std::vector<int64_t> starts;
  for (const auto& l : stream->lanes)
    for (const auto& e : l.events)
      if (e.kind == v::EventKind::Kernel || e.kind == v::EventKind::CommKernel) starts.push_back(e.start);
  std::sort(starts.begin(), starts.end());
  ASSERT_EQ(starts.size(), kernels.size());
  for (size_t i = 0; i < kernels.size(); ++i) ASSERT_EQ(starts[i], kernels[i].start_ns);
  EXPECT_EQ(t.begin, v::SyntheticOptions{}.start_ns);
  // NCCL's kernels are told apart from compute.
  int comm = 0;
  for (const auto& l : stream->lanes)
    for (const auto& e : l.events) comm += e.kind == v::EventKind::CommKernel;
  EXPECT_EQ(comm, 3);
  EXPECT_GT(t.bytes(), size_t(t.event_count) * 24);
  EXPECT_LT(t.bytes(), size_t(t.event_count) * 80);
}

TEST(ViewerModel, CorrelationFlameParentsAndDetails) {
  const std::string path = synthetic("v_layout.db", {2, 6'000, 3});
  const v::Trace t = v::loadTrace(path, nullptr, 1);
  const v::CorrelationIndex corr(t);
  const v::SearchResult sg = v::search(t, "ampere_sgemm");
  ASSERT_FALSE(sg.matches.empty());
  const v::EventRef k = sg.matches[5];
  const auto launch = corr.launchOf(k);
  ASSERT_TRUE(launch);
  EXPECT_EQ(t.name(*launch), "cudaLaunchKernel");
  EXPECT_EQ(t.correlation(*launch), t.correlation(k));
  EXPECT_LE(t.event(*launch).start, t.event(k).start);  // launched before it ran
  ASSERT_EQ(corr.launchedBy(*launch).size(), 1u);
  EXPECT_EQ(corr.launchedBy(*launch)[0], k);
  // The launch sits in aten::mm, in a layer, in forward or backward, in the step.
  std::vector<std::string> parents;
  for (const auto& p : v::enclosing(t, *launch)) parents.push_back(t.name(p));
  ASSERT_EQ(parents.size(), 4u);
  EXPECT_EQ(parents[0], "step");
  EXPECT_TRUE(parents[1] == "forward" || parents[1] == "backward");
  EXPECT_EQ(parents[2], "layer");
  EXPECT_EQ(parents[3], "aten::mm");
  // Details come from the row: every kernel field.
  db::RunReader r(path);
  std::map<std::string, std::string> f;
  for (const auto& [key, value] : v::eventDetails(r, t, k)) f[key] = value;
  EXPECT_EQ(f["name"], "ampere_sgemm_128x64_tn");
  // Launch latency: the kernel's start less its launch call's end, both ways round.
  std::map<std::string, std::string> lf;
  for (const auto& [key, value] : v::launchFields(t, corr, k)) lf[key] = value;
  EXPECT_EQ(lf["launched by"], "cudaLaunchKernel");
  const v::Event& api = t.event(*launch);
  const int64_t latency = t.event(k).start - (api.start + api.duration());
  ASSERT_GE(latency, 0);
  EXPECT_EQ(lf["launch latency"], v::formatExact(latency));
  const v::Fields from_api = v::launchFields(t, corr, *launch);
  ASSERT_EQ(from_api.size(), 1u);
  EXPECT_EQ(from_api[0].second, v::formatExact(latency) + " to ampere_sgemm_128x64_tn");
  EXPECT_TRUE(v::launchFields(t, corr, v::search(t, "aten::mm").matches.at(0)).empty());  // no partner
  EXPECT_EQ(f["grid"], "128 x 1 x 1");
  EXPECT_EQ(f["block"], "256 x 1 x 1");
  EXPECT_EQ(f["registers"], "64");
  EXPECT_EQ(f["correlation"], std::to_string(t.correlation(k)));
  // A collective shows its bytes and bus bandwidth (all-reduce over 2: factor 2(n-1)/n = 1).
  const v::SearchResult ar = v::search(t, "all_reduce (dp)");
  ASSERT_EQ(ar.matches.size(), 6u);
  f.clear();
  for (const auto& [key, value] : v::eventDetails(r, t, ar.matches[0])) f[key] = value;
  EXPECT_EQ(f["bytes"], "64 MiB (67108864)");
  EXPECT_EQ(f["algorithm bandwidth"], f["bus bandwidth"]);
}

TEST(ViewerModel, SearchRangeTotalsStatisticsAndComparison) {
  const std::string path = synthetic("v_layout.db", {2, 6'000, 3});
  const v::Trace t = v::loadTrace(path);
  db::RunReader r(path);
  // Search: every aten::mm op, case-insensitive, in time order; next/previous wrap.
  int64_t mm = 0;
  const auto id = r.find("aten::mm");
  r.forEach<db::HostOp>([&](const db::HostOp& h) { mm += h.name == *id; });
  const v::SearchResult s = v::search(t, "ATEN::MM");
  EXPECT_EQ(int64_t(s.matches.size()), mm);
  for (size_t i = 1; i < s.matches.size(); ++i) EXPECT_LE(t.event(s.matches[i - 1]).start, t.event(s.matches[i]).start);
  EXPECT_EQ(v::nextMatch(t, s, t.end + 1, +1), 0);
  EXPECT_EQ(v::nextMatch(t, s, t.begin - 1, -1), int64_t(s.matches.size()) - 1);
  // Range totals over rank 0's step 1: kernels busy = the union of its kernels clipped to the window.
  const auto w = t.stepWindow(1, 0);
  ASSERT_TRUE(w);
  const auto tot = v::rangeTotals(t, w->first, w->second, 0);
  std::vector<db::Interval> k;
  for (const auto& x : r.events<db::Kernel>(0, w->first, w->second))
    if (!db::isCommKernel(r.string(x.name))) k.push_back({std::max(x.start_ns, w->first), std::min(x.end_ns, w->second)});
  EXPECT_EQ(tot[int(v::EventKind::Kernel)].busy_ns, db::coveredWithin(db::unionOf(k), w->first, w->second));
  EXPECT_EQ(tot[int(v::EventKind::Step)].count, 1);
  EXPECT_EQ(tot[int(v::EventKind::Memcpy)].count, 1);
  // Statistics: totals are sums of durations; a layer's self time is what its ops leave; the
  // all-ranks row is the sum of the rank rows.
  const v::Statistics st = v::computeStatistics(t);
  int64_t mm_total = 0, layer_total = 0, ops_in_layers = 0;
  r.forEach<db::HostOp>([&](const db::HostOp& h) { ops_in_layers += h.end_ns - h.start_ns, mm_total += h.name == *id ? h.end_ns - h.start_ns : 0; });
  r.forEach<db::Range>([&](const db::Range& x) { layer_total += r.string(x.name) == "layer" ? x.end_ns - x.start_ns : 0; });
  auto row = [&](v::StatGroup g, const std::string& name, int64_t rank) -> const v::StatRow* {
    for (const auto* x : v::statRows(st, t, g, rank, v::StatSort::Total, true))
      if (t.names[x->name] == name) return x;
    return nullptr;
  };
  ASSERT_TRUE(row(v::StatGroup::Ops, "aten::mm", -1));
  EXPECT_EQ(row(v::StatGroup::Ops, "aten::mm", -1)->total_ns, mm_total);
  EXPECT_EQ(row(v::StatGroup::Ops, "aten::mm", 0)->total_ns + row(v::StatGroup::Ops, "aten::mm", 1)->total_ns, mm_total);
  const v::StatRow* layer = row(v::StatGroup::Ranges, "layer", -1);
  ASSERT_TRUE(layer);
  EXPECT_EQ(layer->total_ns, layer_total);
  EXPECT_EQ(layer->self_ns, layer_total - ops_in_layers);  // every op sits in a layer
  const auto sorted = v::statRows(st, t, v::StatGroup::Kernels, -1, v::StatSort::Total, true);
  for (size_t i = 1; i < sorted.size(); ++i) EXPECT_GE(sorted[i - 1]->total_ns, sorted[i]->total_ns);
  // Two runs: per-step times (the slowest rank's) and the offset that aligns a step.
  const std::string slow = synthetic("v_slow.db", {2, 9'000, 3, v::SyntheticOptions{}.start_ns + 5'000'000'000});
  const v::Trace b = v::loadTrace(slow);
  const auto d = v::compareSteps(t, b);
  ASSERT_EQ(d.size(), 3u);
  for (const auto& x : d) EXPECT_GT(x.b_s, x.a_s);  // more layers per step
  EXPECT_EQ(v::alignmentOffset(t, b, 1), *t.stepStart(1) - *b.stepStart(1));
}

namespace {
struct SqlStat {
  int64_t count, total, min, max, median, p99;
};
// Per (name, rank) — rank -1: over all ranks — the events of `table` overlapping [b, e), their time
// clipped to it: count, total, min, max, lower median and nearest-rank p99, computed by SQLite.
std::map<std::pair<std::string, int64_t>, SqlStat> sqlStats(const std::string& path, const std::string& table, int64_t b,
                                                             int64_t e, bool per_rank) {
  db::Database d(path, db::Database::Mode::ReadOnly);
  const std::string rank = per_rank ? "rank" : "-1";
  db::Statement q(d, "WITH w AS (SELECT s.value AS name, t.rank AS rank, MIN(t.end_ns, ?2) - MAX(t.start_ns, ?1) AS d "
                     "FROM " + table + " t JOIN strings s ON s.id = t.name_id WHERE t.end_ns > ?1 AND t.start_ns < ?2), "
                     "r AS (SELECT name, " + rank + " AS rank, d, ROW_NUMBER() OVER (PARTITION BY name, " + rank +
                     " ORDER BY d) AS rn, COUNT(*) OVER (PARTITION BY name, " + rank + ") AS n FROM w) "
                     "SELECT name, rank, COUNT(*), SUM(d), MIN(d), MAX(d), MAX(CASE WHEN rn = (n + 1) / 2 THEN d END), "
                     "MAX(CASE WHEN rn = (99 * n + 99) / 100 THEN d END) FROM r GROUP BY name, rank");
  q.bindFrom(1, b, e);
  std::map<std::pair<std::string, int64_t>, SqlStat> out;
  while (q.step())
    out[{q.columnText(0), q.columnInt(1)}] = {q.columnInt(2), q.columnInt(3), q.columnInt(4),
                                              q.columnInt(5), q.columnInt(6), q.columnInt(7)};
  return out;
}
}  // namespace

// Statistics limited to a range are SQL over the same window: per name, per rank and over all ranks.
TEST(ViewerModel, RangeStatisticsEqualSqlOverTheWindow) {
  const std::string path = synthetic("v_layout.db", {2, 6'000, 3});
  const v::Trace t = v::loadTrace(path);
  const auto w0 = t.stepWindow(1, 0), w1 = t.stepWindow(1, 1);
  ASSERT_TRUE(w0 && w1);
  // Odd edges, cutting kernels, ops and ranges on both ranks; then the whole run as a range.
  for (auto [b, e] : {std::pair{w0->first + 123'457, w1->second - 77'771}, std::pair{t.begin, t.end}}) {
    const v::Statistics st = v::computeRangeStatistics(t, b, e);
    EXPECT_TRUE(st.in_range);
    for (auto [group, table] : {std::pair{v::StatGroup::Kernels, "kernels"}, std::pair{v::StatGroup::Ops, "host_ops"},
                                std::pair{v::StatGroup::Ranges, "ranges"}}) {
      for (bool per_rank : {true, false}) {
        const auto want = sqlStats(path, table, b, e, per_rank);
        ASSERT_FALSE(want.empty()) << table;
        size_t rows = 0;
        for (const v::StatRow* r : v::statRows(st, t, group, per_rank ? v::kEachRank : v::kAllRanks, v::StatSort::Name, false)) {
          const auto it = want.find({t.names[r->name], r->rank});
          ASSERT_NE(it, want.end()) << t.names[r->name] << " rank " << r->rank;
          const SqlStat& x = it->second;
          const std::string what = std::string(table) + " " + t.names[r->name] + " rank " + std::to_string(r->rank);
          EXPECT_EQ(r->count, x.count) << what;
          EXPECT_EQ(r->total_ns, x.total) << what;
          EXPECT_EQ(r->min_ns, x.min) << what;
          EXPECT_EQ(r->max_ns, x.max) << what;
          EXPECT_EQ(r->median_ns, x.median) << what;
          EXPECT_EQ(r->p99_ns, x.p99) << what;
          ++rows;
        }
        EXPECT_EQ(rows, want.size()) << table;
      }
    }
  }
  // Shares per rank: the "step" range covers a window inside both ranks' step 1 wholly, so each rank
  // holds it 100% of the window and so does the row over both ranks (not 200%).
  const int64_t b = std::max(w0->first, w1->first) + 1'000, e = std::min(w0->second, w1->second) - 1'000;
  const v::Statistics st = v::computeRangeStatistics(t, b, e);
  int step_rows = 0;
  for (int64_t rank : {v::kAllRanks, v::kEachRank})
    for (const v::StatRow* r : v::statRows(st, t, v::StatGroup::Ranges, rank, v::StatSort::Total, true))
      if (t.names[r->name] == "step") {
        EXPECT_DOUBLE_EQ(st.shareOfRangePerRank(*r), 1.0);
        ++step_rows;
      }
  EXPECT_EQ(step_rows, 3);  // over both ranks, and each rank's
  const auto tot = v::rangeTotals(t, b, e);
  const v::KindTotal& ranges = tot[int(v::EventKind::Range)];
  EXPECT_EQ(ranges.ranks, 2);
  EXPECT_EQ(ranges.busy_ns, 2 * (e - b));  // each rank's union: all of the window
  EXPECT_EQ(ranges.max_rank_busy_ns, e - b);
  // The whole-run statistics have the same percentiles as the whole run taken as a range.
  const v::Statistics all = v::computeStatistics(t), whole = v::computeRangeStatistics(t, t.begin, t.end + 1);
  auto find = [&](const v::Statistics& s, v::StatGroup g, const std::string& name) -> const v::StatRow* {
    for (const v::StatRow* r : v::statRows(s, t, g, v::kAllRanks, v::StatSort::Total, true))
      if (t.names[r->name] == name) return r;
    return nullptr;
  };
  const v::StatRow* mm = find(all, v::StatGroup::Ops, "aten::mm");
  ASSERT_TRUE(mm && find(whole, v::StatGroup::Ops, "aten::mm"));
  EXPECT_EQ(mm->median_ns, find(whole, v::StatGroup::Ops, "aten::mm")->median_ns);
  EXPECT_EQ(mm->p99_ns, find(whole, v::StatGroup::Ops, "aten::mm")->p99_ns);
  EXPECT_LE(mm->min_ns, mm->median_ns);
  EXPECT_LE(mm->median_ns, mm->p99_ns);
  EXPECT_LE(mm->p99_ns, mm->max_ns);
}

// The table the Statistics tab opens on follows what the run has: kernels for a GPU run, CPU ops for a
// CPU run, whose empty kernels table says why it is empty and where to look.
TEST(ViewerModel, StatisticsOpenOnWhatTheRunHas) {
  v::SyntheticOptions cpu;
  cpu.kernels = false;
  const v::Trace c = v::loadTrace(synthetic("v_cpu.db", cpu));
  const v::Statistics cs = v::computeStatistics(c);
  EXPECT_EQ(v::defaultGroup(cs), v::StatGroup::Ops);
  EXPECT_EQ(cs.events[size_t(v::StatGroup::Kernels)], 0);
  const std::string hint = v::emptyHint(cs, v::StatGroup::Kernels);
  EXPECT_NE(hint.find("no kernels: a CPU run"), std::string::npos) << hint;
  EXPECT_NE(hint.find("See ops, ranges"), std::string::npos) << hint;
  EXPECT_EQ(v::emptyHint(cs, v::StatGroup::Ops), "");
  const v::Statistics gs = v::computeStatistics(v::loadTrace(synthetic("v_layout.db", {2, 6'000, 3})));
  EXPECT_EQ(v::defaultGroup(gs), v::StatGroup::Kernels);
  EXPECT_EQ(v::emptyHint(gs, v::StatGroup::Kernels), "");
  // A range with nothing of a table in it says so.
  const auto w = c.stepWindow(1, 0);
  ASSERT_TRUE(w);
  const v::Statistics rs = v::computeRangeStatistics(c, w->first, w->first + 10);
  EXPECT_NE(v::emptyHint(rs, v::StatGroup::Kernels).find("The selected range has no kernels"), std::string::npos);
}

// A run that saved checkpoints (`run --save`): the model loads them and the summary panel's fields
// say how many, their bytes and seconds, and each one's size, rate and folder; a run without: none.
TEST(ViewerModel, CheckpointsOfARunAreInTheSummaryFields) {
  const std::string path = synthetic("v_checkpoints.db", {1, 2'000, 3});
  EXPECT_TRUE(v::checkpointFields(v::loadTrace(path).checkpoints).empty());
  {  // the rows `run --save` writes (runtime/src/state/checkpoint_dir.cpp through RunStore::appendCheckpoint)
    trainscope::rundb::Database db(path, trainscope::rundb::Database::Mode::ReadWrite);
    db.exec("INSERT INTO checkpoints (step, seconds, bytes, path) VALUES (1, 0.25, 1048576, '/ck/a'), "
            "(3, 0.5, 3145728, '/ck/b')");
  }
  const v::Trace t = v::loadTrace(path);
  ASSERT_EQ(t.checkpoints.size(), 2u);
  const v::Fields f = v::checkpointFields(t.checkpoints);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0], (std::pair<std::string, std::string>{"checkpoints", "2 written (run --save): 4.0 MiB in 0.750 s in all"}));
  EXPECT_EQ(f[2], (std::pair<std::string, std::string>{"checkpoint after step 3", "3.0 MiB in 0.500 s (6.3 MB/s)  /ck/b"}));
  EXPECT_EQ(v::checkpointFields(t.checkpoints, 1).size(), 2u);  // the last one only
}
