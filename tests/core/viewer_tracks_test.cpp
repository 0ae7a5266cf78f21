// viewer_tracks_test.cpp — the timeline's track control and row layout without a window (tracks.h):
// collapsed ranks, hidden, pinned and moved tracks, empty tracks taking no rows, flames as deep as the
// window needs, runs A and B interleaved rank by rank, the rows the app hit-tests through, the box
// under the mouse as drawn (lod.h, hitItem), run B's alignment at a step or the message saying why it
// cannot be aligned, and the script commands that drive all of it.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "../common/cli.h"
#include "trainscope/common/error.h"
#include "trainscope/viewer/details.h"
#include "trainscope/viewer/lod.h"
#include "trainscope/viewer/model.h"
#include "trainscope/viewer/query.h"
#include "trainscope/viewer/tracks.h"
#include "trainscope/viewer/view_state.h"

namespace v = trainscope::viewer;
using trainscope::testing::tempPath;

namespace {

v::Event ev(int64_t a, int64_t b, v::EventKind k = v::EventKind::Range) {
  v::Event e;
  e.start = a, e.end = b, e.kind = k;
  return e;
}

// Two ranks by hand. Rank r: `steps` (one step), `thread 1` — a flame 3 deep over [0, 100) and one
// level deep over [200, 300) —, `thread 2` with no events at all, `stream 7` with one kernel at
// [500, 600), and `memory` (a counter from 0).
v::Trace handTrace(int ranks = 2) {
  v::Trace t;
  for (int r = 0; r < ranks; ++r) {
    v::RankGroup g;
    g.rank = r;
    auto add = [&](v::TrackKind kind, const std::string& label, std::vector<v::Event> events) {
      v::Track tr;
      tr.kind = kind, tr.rank = r, tr.label = label;
      if (kind == v::TrackKind::Counter) {
        tr.counter.ts = {0, 400};
        tr.counter.values = {1, 2};
        v::buildPyramid(tr.counter);
      } else if (!events.empty()) {
        v::buildLanes(tr, events);
      }
      g.tracks.push_back(t.tracks.size());
      t.tracks.push_back(std::move(tr));
    };
    add(v::TrackKind::Steps, "steps", {ev(0, 1000, v::EventKind::Step)});
    add(v::TrackKind::Thread, "thread 1", {ev(0, 100), ev(10, 90), ev(20, 80), ev(200, 300)});
    add(v::TrackKind::Thread, "thread 2", {});
    add(v::TrackKind::Stream, "stream 7", {ev(500, 600, v::EventKind::Kernel)});
    add(v::TrackKind::Counter, "memory", {});
    t.ranks.push_back(g);
  }
  t.begin = 0, t.end = 1000;
  return t;
}

const v::LayoutMetrics kM{22, 18, 36};

std::vector<std::string> labels(const v::Trace& t, const std::vector<v::LayoutRow>& rows) {
  std::vector<std::string> out;
  for (const auto& r : rows)
    out.push_back((r.kind == v::RowKind::Header ? "#" + std::to_string(t.ranks[r.group].rank)
                                                 : t.tracks[r.track].label) +
                  (r.doc ? "@B" : ""));
  return out;
}

}  // namespace

TEST(ViewerTracks, RowsFollowTheWindowAndEmptyThreadsTakeNone) {
  const v::Trace t = handTrace(1);
  // The whole trace: the flame is 3 deep; `thread 2` (no events) takes no row.
  v::TrackLayout l = v::layoutTracks({{&t, 0, 1000}}, {}, kM);
  EXPECT_EQ(labels(t, l.rows), (std::vector<std::string>{"#0", "steps", "thread 1", "stream 7", "memory"}));
  EXPECT_EQ(l.rows[2].lanes, 3u);
  EXPECT_FLOAT_EQ(l.total_h, 22 + 18 + 3 * 18 + 18 + 36);
  // Rows are stacked without gaps, each at the previous one's bottom.
  for (size_t i = 1; i < l.rows.size(); ++i) EXPECT_FLOAT_EQ(l.rows[i].y0, l.rows[i - 1].y1());
  // A window holding only the flame's one-deep part: one lane, not the whole trace's three.
  l = v::layoutTracks({{&t, 200, 300}}, {}, kM);
  EXPECT_EQ(l.rows[2].lanes, 1u);
  EXPECT_FLOAT_EQ(l.total_h, 22 + 18 + 18 + 18 + 36);
  // A window with none of its events keeps one lane ... unless empty tracks in the window are hidden.
  l = v::layoutTracks({{&t, 120, 180}}, {}, kM);
  EXPECT_EQ(labels(t, l.rows), (std::vector<std::string>{"#0", "steps", "thread 1", "stream 7", "memory"}));
  EXPECT_EQ(l.rows[2].lanes, 1u);
  v::TrackControl c;
  c.hide_empty_in_window = true;
  l = v::layoutTracks({{&t, 120, 180}}, c, kM);
  EXPECT_EQ(labels(t, l.rows), (std::vector<std::string>{"#0", "steps", "memory"}));
  EXPECT_EQ(v::fittedLanes(t.tracks[1], 0, 50), 3u);
  EXPECT_EQ(v::fittedLanes(t.tracks[1], 95, 99), 1u);  // only the outermost event reaches past 90
  EXPECT_EQ(v::fittedLanes(t.tracks[1], 100, 200), 0u);  // ends are exclusive
}

TEST(ViewerTracks, CollapseHidePinAndMove) {
  const v::Trace t = handTrace(2);
  v::TrackControl c;
  const uint64_t v0 = c.version;
  c.setCollapsed(0, true);
  EXPECT_GT(c.version, v0);  // a cached layout sees the change
  v::TrackLayout l = v::layoutTracks({{&t, 0, 1000}}, c, kM);
  EXPECT_EQ(labels(t, l.rows), (std::vector<std::string>{"#0", "#1", "steps", "thread 1", "stream 7", "memory"}));
  EXPECT_TRUE(l.rows[0].collapsed);
  EXPECT_FLOAT_EQ(l.rows[1].y0, 22);  // rank 1 right under rank 0's header
  c.setCollapsed(0, false);
  c.setHidden({1, "stream 7"}, true);
  c.setPinned({1, "memory"}, true);
  l = v::layoutTracks({{&t, 0, 1000}}, c, kM);
  EXPECT_EQ(labels(t, l.rows), (std::vector<std::string>{"#0", "steps", "thread 1", "stream 7", "memory", "#1", "steps",
                                                         "thread 1"}));
  ASSERT_EQ(l.pinned.size(), 1u);
  EXPECT_EQ(t.tracks[l.pinned[0].track].rank, 1);
  EXPECT_FLOAT_EQ(l.pinned_h, 36);
  c.showAll(1);
  c.setPinned({1, "memory"}, false);
  // Moves: rank 0's stream to the top, and past the end (clamped).
  EXPECT_TRUE(c.move(t, {0, "stream 7"}, -5));
  EXPECT_TRUE(c.move(t, {0, "steps"}, +10));
  EXPECT_FALSE(c.move(t, {0, "no such track"}, 1));
  l = v::layoutTracks({{&t, 0, 1000}}, c, kM);
  EXPECT_EQ(labels(t, l.rows), (std::vector<std::string>{"#0", "stream 7", "thread 1", "memory", "steps", "#1", "steps",
                                                         "thread 1", "stream 7", "memory"}));
}

TEST(ViewerTracks, RunBIsInterleavedRankByRankAndRowsAreFoundByY) {
  const v::Trace a = handTrace(2), b = handTrace(3);
  v::TrackControl c;
  c.setCollapsed(1, true);  // one key for both runs' rank 1
  const v::TrackLayout l = v::layoutTracks({{&a, 0, 1000}, {&b, 0, 1000}}, c, kM);
  std::vector<std::string> heads;
  for (const auto& r : l.rows)
    if (r.kind == v::RowKind::Header) heads.push_back((r.doc ? "B" : "A") + std::to_string(r.group));
  EXPECT_EQ(heads, (std::vector<std::string>{"A0", "B0", "A1", "B1", "B2"}));
  // B's rank 0 starts right where A's rank 0 ends: on screen beside it, not below every rank of A.
  const float group = 22 + 18 + 54 + 18 + 36;
  EXPECT_FLOAT_EQ(l.rows[5].y0, group);
  EXPECT_EQ(l.rows[5].doc, 1u);
  // Hit testing by y: inside a row, at a boundary (the lower row), and past the end.
  for (const auto& r : l.rows) {
    EXPECT_EQ(l.rowAt(r.y0), &r);
    EXPECT_EQ(l.rowAt(r.y1() - 0.01f), &r);
  }
  EXPECT_EQ(l.rowAt(l.total_h + 1), nullptr);
  EXPECT_EQ(l.rowAt(-1), nullptr);
  EXPECT_EQ(l.firstBelow(0), 0u);
  EXPECT_EQ(l.firstBelow(group + 1), 5u);
  EXPECT_EQ(l.firstBelow(l.total_h), l.rows.size());
}

// The app hit-tests through hitItem: the box as drawn under time t, folded or single. It agrees with
// a brute-force pass over the drawn boxes (the nearest within the tolerance) at every time.
TEST(ViewerTracks, TheBoxUnderTheMouseIsTheOneDrawn) {
  v::Lane lane;
  // Ten 10-ns events 20 ns apart (they fold at a 30 ns threshold), then a wide one.
  for (int i = 0; i < 10; ++i) lane.events.push_back(ev(1000 + 20 * i, 1010 + 20 * i));
  lane.events.push_back(ev(2000, 3000));
  v::buildLevels(lane);
  std::vector<v::DrawItem> items;
  v::visibleItems(lane, 0, 4000, 30, items);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].count, 10u);
  EXPECT_EQ(v::hitItem(lane, items, 1015, 30), 0u);  // in a gap inside the folded block
  EXPECT_EQ(v::hitItem(lane, items, 2500, 30), 1u);
  EXPECT_EQ(v::hitItem(lane, items, 3020, 30), 1u);  // within the tolerance past its end
  EXPECT_FALSE(v::hitItem(lane, items, 1600, 30));   // 400 ns from anything
  EXPECT_FALSE(v::hitItem(lane, items, 5000, 30));
  // Zoomed in: every event its own box.
  std::mt19937 rng(7);
  for (int64_t threshold : {1, 30, 200}) {
    items.clear();
    v::visibleItems(lane, 900, 3100, threshold, items);
    for (int k = 0; k < 400; ++k) {
      const int64_t at = 900 + int64_t(rng() % 2200);
      const auto hit = v::hitItem(lane, items, at, threshold);
      std::optional<size_t> brute;  // the drawn item nearest `at` within the tolerance (the first of a tie)
      int64_t best = threshold + 1;
      for (size_t i = 0; i < items.size(); ++i) {
        const int64_t d = at < items[i].start ? items[i].start - at : at > items[i].end ? at - items[i].end : 0;
        if (d < best) best = d, brute = i;
      }
      EXPECT_EQ(hit, brute) << "t " << at << " threshold " << threshold;
    }
  }
}

TEST(ViewerTracks, RunBAlignsAtAStepOrSaysWhyItCannot) {
  const std::string pa = tempPath("tracks_a.db"), pb = tempPath("tracks_b.db");
  v::writeSyntheticTrace(pa, {2, 2'000, 4});
  v::writeSyntheticTrace(pb, {2, 3'000, 4, v::SyntheticOptions{}.start_ns + 5'000'000'000});
  const v::Trace a = v::loadTrace(pa), b = v::loadTrace(pb);
  for (int64_t step = 1; step < 4; ++step) {
    const v::Alignment al = v::alignAtStep(a, b, step);
    EXPECT_TRUE(al.ok);
    EXPECT_EQ(al.offset, *a.stepStart(step) - *b.stepStart(step));
    EXPECT_TRUE(al.message.empty());
  }
  EXPECT_NE(v::alignAtStep(a, b, 1).offset, v::alignAtStep(a, b, 3).offset);  // B's steps are longer
  // A step one run lacks: no offset, and the message names the run, the step and the steps it has.
  const v::Alignment past = v::alignAtStep(a, b, 9);
  EXPECT_FALSE(past.ok);
  EXPECT_NE(past.message.find("run A has no step 9 (its steps are 0-3)"), std::string::npos) << past.message;
  EXPECT_NE(past.message.find("run B has no step 9"), std::string::npos) << past.message;
  EXPECT_EQ(past.offset, a.begin - b.begin);
  // A run without steps (an imported profiler trace): said so.
  v::Trace imported = handTrace(1);
  imported.begin = b.begin;
  const v::Alignment none = v::alignAtStep(a, imported, 1);
  EXPECT_FALSE(none.ok);
  EXPECT_NE(none.message.find("run B has no steps"), std::string::npos) << none.message;
  // [ and ]: from the step holding the time, clamped to the trace's steps; none without steps.
  const int64_t in2 = *a.stepStart(2) + 1;
  EXPECT_EQ(v::neighbourStep(a, in2, +1), 3);
  EXPECT_EQ(v::neighbourStep(a, in2, -1), 1);
  EXPECT_EQ(v::neighbourStep(a, a.end, +1), 3);
  EXPECT_EQ(v::neighbourStep(a, a.begin - 1, -1), 0);
  EXPECT_FALSE(v::neighbourStep(imported, 0, +1));
}

TEST(ViewerTracks, TrackScriptCommandsParseAndNameTheBadLine) {
  const auto s = v::parseScript(
      "collapse 1\nexpand 1\nhide 0 \"thread 4242\"\nshow 0\npin 0 memory\nunpin 0 memory\nmove 0 steps -2\n"
      "empty hide\nsplit 0.2\n",
      "t.txt");
  ASSERT_EQ(s.size(), 9u);
  EXPECT_EQ(s[2].args[1], "thread 4242");
  EXPECT_EQ(s[6].args[2], "-2");
  auto bad = [](const std::string& text, const std::string& says) {
    try {
      v::parseScript(text, "t.txt");
      ADD_FAILURE() << text;
    } catch (const trainscope::UserError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  bad("view 0 1ms\nsplit 0.95\n", "t.txt:2: split 0.95 is outside 0.1-0.9");
  bad("collapse one\n", "t.txt:1: \"one\" is not a number");
  bad("move 0 steps\n", "move takes 3 argument(s)");
  bad("empty maybe\n", "empty takes hide or show");
}

// Zooming a trace of many ranks lays out again only the groups in the band around the screen; the
// others keep the heights they had and draw nothing. A change of the control lays out everything.
TEST(ViewerTracks, OnlyTheGroupsInTheBandAreLaidOutAgain) {
  const v::Trace t = handTrace(4);
  v::TrackControl c;
  const v::TrackLayout whole = v::layoutTracks({{&t, 0, 1000}}, c, kM);  // every flame 3 deep: 148 px a group
  ASSERT_EQ(whole.group_h.size(), 4u);
  EXPECT_FLOAT_EQ(whole.group_h[0], 148);
  // The window of the one-deep flame, with a band over the second group only.
  const v::TrackLayout banded = v::layoutTracks({{&t, 200, 300}}, c, kM, &whole, {150, 200});
  EXPECT_EQ(banded.group_h, (std::vector<float>{148, 112, 148, 148}));  // only group 1 refitted (2 lanes fewer)
  for (const auto& r : banded.rows) EXPECT_EQ(r.group, 1u);
  EXPECT_FLOAT_EQ(banded.total_h, 148 * 3 + 112);
  EXPECT_EQ(banded.rowAt(10), nullptr);  // group 0 draws nothing: it is off the band
  ASSERT_NE(banded.rowAt(149), nullptr);
  EXPECT_EQ(banded.rowAt(149)->kind, v::RowKind::Header);
  // A changed control (or no previous layout) lays out everything for the window.
  c.setCollapsed(3, true);
  const v::TrackLayout all = v::layoutTracks({{&t, 200, 300}}, c, kM, &banded, {150, 200});
  EXPECT_EQ(all.group_h, (std::vector<float>{112, 112, 112, 22}));
}

// The per-stream utilisation row: a stream 17% busy (1.7 us kernels every 10 us for 100 ms) reads
// 0.17 on average over 1,400 pixel columns and never full; each column equals a brute-force clip of
// the events to it; a kernel filling a column reads 1, overlapping kernels (two lanes) are capped at 1.
TEST(ViewerTracks, TheUtilisationRowIsEachColumnsBusyFraction) {
  std::vector<v::Event> events;
  for (int64_t t = 0; t < 100'000'000; t += 10'000) events.push_back(ev(t, t + 1'700, v::EventKind::Kernel));
  v::Track s;
  s.kind = v::TrackKind::Stream;
  v::buildLanes(s, events);
  const std::vector<float> cols = v::busyColumns(s, 0, 100'000'000, 1400);
  ASSERT_EQ(cols.size(), 1400u);
  double sum = 0;
  for (float f : cols) {
    sum += f;
    EXPECT_GT(f, 0.1f);  // a column is 71.4 us: 7 or 8 kernels, some cut by its edges
    EXPECT_LT(f, 0.3f);
  }
  EXPECT_NEAR(sum / 1400, 0.17, 0.001);
  // Every column against a brute-force pass over the events, in an odd window that cuts kernels.
  const int64_t b = 12'345'678, e = 12'845'679;
  const std::vector<float> zoom = v::busyColumns(s, b, e, 333);
  for (size_t c = 0; c < zoom.size(); ++c) {
    const int64_t a0 = b + int64_t(double(e - b) * double(c) / 333), a1 = b + int64_t(double(e - b) * double(c + 1) / 333);
    int64_t busy = 0;
    for (const v::Event& x : events) busy += std::max<int64_t>(0, std::min(x.end, a1) - std::max(x.start, a0));
    ASSERT_NEAR(zoom[c], double(busy) / double(a1 - a0), 1e-6) << c;
  }
  // Zoomed into one kernel: full inside it, empty outside, the edge column by its share.
  const std::vector<float> one = v::busyColumns(s, 9'000, 11'000, 4);  // kernel at [10'000, 11'700)
  EXPECT_EQ(one, (std::vector<float>{0.f, 0.f, 1.f, 1.f}));
  EXPECT_FLOAT_EQ(v::busyColumns(s, 10'500, 12'500, 2)[0], 1.f);
  EXPECT_FLOAT_EQ(v::busyColumns(s, 10'500, 12'500, 2)[1], 0.2f);  // [11'500, 12'500): 200 ns busy
  // Two overlapping kernels (two lanes) keep a column busy once, not twice.
  v::Track two;
  two.kind = v::TrackKind::Stream;
  v::buildLanes(two, {ev(0, 1000, v::EventKind::Kernel), ev(500, 1500, v::EventKind::Kernel)});
  ASSERT_EQ(two.lanes.size(), 2u);
  EXPECT_EQ(v::busyColumns(two, 0, 1000, 2), (std::vector<float>{1.f, 1.f}));
  EXPECT_TRUE(v::busyColumns(two, 0, 0, 5) == std::vector<float>(5, 0.f));  // an empty window
}

// With util_h, a stream's row has the utilisation row under its lanes; other tracks do not.
TEST(ViewerTracks, AStreamRowHoldsItsUtilisationRowUnderItsLanes) {
  const v::Trace t = handTrace(1);
  v::LayoutMetrics m = kM;
  m.util_h = 4;
  const v::TrackLayout l = v::layoutTracks({{&t, 0, 1000}}, v::TrackControl{}, m);
  const v::TrackLayout plain = v::layoutTracks({{&t, 0, 1000}}, v::TrackControl{}, kM);
  EXPECT_FLOAT_EQ(l.total_h, plain.total_h + 4);
  int streams = 0;
  for (const auto& r : l.rows) {
    if (r.kind != v::RowKind::Track) continue;
    const bool stream = t.tracks[r.track].kind == v::TrackKind::Stream;
    streams += stream;
    EXPECT_FLOAT_EQ(r.util_h, stream ? 4.f : 0.f) << t.tracks[r.track].label;
    if (stream) EXPECT_FLOAT_EQ(r.h, m.lane_h * float(r.lanes) + 4);
  }
  EXPECT_EQ(streams, 1);
}
