// viewer_fit_test.cpp — issue 35's clipping, many-ranks and import-header items at the model level,
// without a window: text cut with "..." to a width (fit.h), the ruler's last label kept whole, table
// columns as wide as their widest figure, a histogram's axis labels apart, a study's memory axis over
// the trials rather than a far limit, point labels that never overprint; track control by pattern
// across 64 ranks, the compact row per rank and its busy shares (tracks.h, compact.h); the header of
// an imported trace (header.h). Widths are measured as the app's monospaced font does: 7 px a char.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "trainscope/common/error.h"
#include "trainscope/viewer/compact.h"
#include "trainscope/viewer/fit.h"
#include "trainscope/viewer/header.h"
#include "trainscope/viewer/lod.h"
#include "trainscope/viewer/model.h"
#include "trainscope/viewer/ruler.h"
#include "trainscope/viewer/tracks.h"
#include "trainscope/viewer/view_state.h"

namespace v = trainscope::viewer;

namespace {

float px7(const std::string& s) { return 7.f * float(s.size()); }

v::Event ev(int64_t a, int64_t b, v::EventKind k) {
  v::Event e;
  e.start = a, e.end = b, e.kind = k;
  return e;
}

// `ranks` ranks, each with `thread 1` (a range over [0, 800)), `stream 7 (device 0)` (a kernel over
// [0, 500)) and `collectives` (an all-reduce over [500, 750)).
v::Trace manyRanks(int ranks) {
  v::Trace t;
  for (int r = 0; r < ranks; ++r) {
    v::RankGroup g;
    g.rank = r;
    auto add = [&](v::TrackKind kind, const std::string& label, std::vector<v::Event> events) {
      v::Track tr;
      tr.kind = kind, tr.rank = r, tr.label = label;
      v::buildLanes(tr, events);
      g.tracks.push_back(t.tracks.size());
      t.tracks.push_back(std::move(tr));
    };
    add(v::TrackKind::Thread, "thread 1", {ev(0, 800, v::EventKind::Range)});
    add(v::TrackKind::Stream, "stream 7 (device 0)", {ev(0, 500, v::EventKind::Kernel)});
    add(v::TrackKind::Collectives, "collectives", {ev(500, 750, v::EventKind::Collective)});
    t.ranks.push_back(g);
  }
  t.begin = 0, t.end = 1000;
  return t;
}

}  // namespace

TEST(ViewerFit, EllipsisCutsToTheWidthAndSaysSo) {
  bool cut = true;
  EXPECT_EQ(v::ellipsize("stream 7 (device 0)", 200, px7, &cut), "stream 7 (device 0)");
  EXPECT_FALSE(cut);
  // 20 px a char would be 380 px: cut to 10 chars of 7 px (70 px) = 7 chars + "...".
  const std::string s = v::ellipsize("thread 4242 (python3 data loader)", 70, px7, &cut);
  EXPECT_TRUE(cut);
  EXPECT_EQ(s, "thread ...");
  EXPECT_LE(px7(s), 70.f);
  EXPECT_EQ(v::ellipsize("abcdef", 14, px7, &cut), "");  // not even "..." fits
  // A multi-byte character is never split: "é" is 2 bytes.
  const std::string u = v::ellipsize("ééééé", 7 * 6, px7);
  EXPECT_EQ(u.substr(u.size() - 3), "...");
  EXPECT_EQ((u.size() - 3) % 2, 0u);
}

TEST(ViewerFit, TheLastRulerLabelIsWholeAndNoLabelsOverprint) {
  // A 1400 px timeline after a 190 px gutter over 0..1 s: the last major tick sits 20 px from the edge.
  v::TimeView view;
  view.x0 = 190, view.width = 1210;
  view.t0 = 0, view.t1 = 1e9 * 1210.0 / 1190.0;
  const v::Ruler r = v::makeRuler(view);
  std::vector<float> xs, ws;
  for (const v::Tick& tk : r.ticks)
    if (tk.major) xs.push_back(view.x0 + float((tk.t - view.t0) / view.nsPerPx())), ws.push_back(px7(tk.label));
  ASSERT_GE(xs.size(), 3u);
  const float x1 = view.x0 + view.width;
  ASSERT_GT(xs.back() + 3 + ws.back(), x1) << "the old placement (3 px right of the tick) cuts the last label";
  const std::vector<float> at = v::placeTickLabels(xs, ws, view.x0, x1);
  ASSERT_GE(at.back(), 0.f) << "the last label is shown";
  for (size_t i = 0; i < at.size(); ++i) {
    if (at[i] < 0) continue;
    EXPECT_GE(at[i], view.x0);
    EXPECT_LE(at[i] + ws[i], x1) << "label " << i << " is whole";
    for (size_t j = 0; j < i; ++j)
      if (at[j] >= 0) EXPECT_LE(at[j] + ws[j], at[i]) << "labels " << j << " and " << i << " overprint";
  }
  EXPECT_FLOAT_EQ(v::tickLabelX(xs.back(), ws.back(), view.x0, x1), xs.back() - 3 - ws.back());
}

TEST(ViewerFit, AColumnIsAsWideAsItsWidestFigure) {
  // Compare's B - A column held 80 px: "+468.123 ms" is 11 chars, 77 px + padding would be cut.
  const float w = v::columnWidth("B - A", {"+1.5 ms", "+468.123 ms", "-3 us"}, px7, 10);
  EXPECT_FLOAT_EQ(w, 77 + 10);
  EXPECT_FLOAT_EQ(v::columnWidth("B - A count", {"+3"}, px7, 10), 77 + 10);
}

TEST(ViewerFit, HistogramAxisLabelsAreInsideTheirPlotAndApart) {
  std::vector<double> edges;
  for (int k = 0; k <= 32; ++k) edges.push_back(1e3 * std::pow(1e4, k / 32.0));  // 1 us .. 10 ms, log-spaced
  auto fmt = [](double ns) { return v::formatDuration(ns); };
  for (float w : {120.f, 200.f, 480.f}) {
    const auto labels = v::histogramAxis(edges, w, px7, fmt);
    ASSERT_GE(labels.size(), 2u) << w;
    EXPECT_EQ(labels.front().text, fmt(edges.front()));
    EXPECT_EQ(labels.back().text, fmt(edges.back()));
    for (size_t i = 0; i < labels.size(); ++i) {
      EXPECT_GE(labels[i].label_x0, 0.f);
      EXPECT_LE(labels[i].label_x0 + labels[i].label_w, w);
      if (i) EXPECT_LT(labels[i - 1].label_x0 + labels[i - 1].label_w, labels[i].label_x0) << w;
    }
    if (w >= 480) EXPECT_EQ(labels.size(), 5u);  // every 8th edge of 32 bins
  }
}

TEST(ViewerFit, TheMemoryAxisSpansTheTrialsNotAFarLimit) {
  const double MiB = 1 << 20, GiB = double(1 << 30);
  // Every trial at <= 1.4 MiB under a 4 GiB limit: the axis ends near 1.4 MiB, the limit is said in words.
  v::MemoryAxis a = v::memoryAxis(1.4 * MiB, 4 * GiB);
  EXPECT_FALSE(a.limit_shown);
  EXPECT_NEAR(a.hi, 1.54 * MiB, 1);
  // A limit near the trials stays on the axis.
  a = v::memoryAxis(3 * GiB, 4 * GiB);
  EXPECT_TRUE(a.limit_shown);
  EXPECT_NEAR(a.hi, 4.4 * GiB, 1);
  a = v::memoryAxis(0, 1e6);  // nothing measured yet: the limit is the scale
  EXPECT_TRUE(a.limit_shown);
}

TEST(ViewerFit, LabelsThatWouldOverprintMoveOrAreLeftOut) {
  // Three points 4 px apart: the first keeps above right, the second moves below right, the third
  // goes above left; a fourth on the same spot with every place taken is left out.
  std::vector<std::vector<v::LabelBox>> places;
  for (int i = 0; i < 4; ++i) {
    const float x = 100 + (i < 3 ? 4.f * float(i) : 0.f), y = 100;
    places.push_back({{x + 6, y - 14, x + 20, y}, {x + 6, y, x + 20, y + 14}, {x - 20, y - 14, x - 6, y},
                      {x - 20, y, x - 6, y + 14}});
  }
  const std::vector<int> used = v::placeLabels(places);
  EXPECT_EQ(used, (std::vector<int>{0, 1, 2, 3}));
  places.push_back(places[0]);
  EXPECT_EQ(v::placeLabels(places).back(), -1);
}

TEST(ViewerManyRanks, PatternsHidePinAndCollapseAcrossSixtyFourRanks) {
  EXPECT_TRUE(v::globMatch("stream *", "stream 7 (device 0)"));
  EXPECT_TRUE(v::globMatch("*", "collectives"));
  EXPECT_TRUE(v::globMatch("1?", "12"));
  EXPECT_FALSE(v::globMatch("1?", "1"));
  EXPECT_FALSE(v::globMatch("1?", "112"));
  EXPECT_TRUE(v::globMatch("*col*s", "collectives"));
  EXPECT_FALSE(v::globMatch("thread", "thread 1"));
  const v::Trace t = manyRanks(64);
  v::TrackControl c;
  EXPECT_EQ(v::setHiddenMatching(c, t, "*", "stream *", true), 64u);
  EXPECT_EQ(v::setPinnedMatching(c, t, "*", "collectives", true), 64u);
  EXPECT_EQ(v::setCollapsedMatching(c, t, "1?", true), 10u);
  const v::TrackLayout l = v::layoutTracks({{&t, 0, 1000}}, c, v::LayoutMetrics{22, 18, 36});
  EXPECT_EQ(l.pinned.size(), 64u);
  size_t threads = 0, streams = 0, collapsed = 0;
  for (const v::LayoutRow& r : l.rows) {
    if (r.kind == v::RowKind::Header) collapsed += r.collapsed;
    else threads += t.tracks[r.track].label == "thread 1", streams += t.tracks[r.track].kind == v::TrackKind::Stream;
  }
  EXPECT_EQ(streams, 0u);
  EXPECT_EQ(collapsed, 10u);
  EXPECT_EQ(threads, 64u - 10u);
  // Undone by the same patterns.
  v::setHiddenMatching(c, t, "*", "stream *", false);
  EXPECT_TRUE(c.hidden.empty());
  EXPECT_EQ(v::setCollapsedMatching(c, t, "*", false), 64u);
  EXPECT_TRUE(c.collapsed.empty());
}

TEST(ViewerManyRanks, CompactModeIsOneThinRowPerRankWithItsBusyShares) {
  const v::Trace t = manyRanks(64);
  v::TrackControl c;
  c.compact = true;
  v::setPinnedMatching(c, t, "3", "collectives", true);  // a pinned track stays in the band
  v::LayoutMetrics m{22, 18, 36};
  m.compact_h = 10;
  const v::TrackLayout l = v::layoutTracks({{&t, 0, 1000}}, c, m);
  ASSERT_EQ(l.rows.size(), 64u);
  for (const v::LayoutRow& r : l.rows) {
    EXPECT_EQ(r.kind, v::RowKind::Header);
    EXPECT_TRUE(r.compact);
    EXPECT_FLOAT_EQ(r.h, 10);
  }
  EXPECT_FLOAT_EQ(l.total_h, 640);
  EXPECT_EQ(l.pinned.size(), 1u);
  // Four columns over [0, 1000): the kernel [0, 500) keeps the first two busy, the all-reduce
  // [500, 750) the third; the fourth is idle.
  const v::CompactColumns cc = v::compactColumns(t, t.ranks[5], 0, 1000, 4);
  EXPECT_EQ(cc.compute, (std::vector<float>{1, 1, 0, 0}));
  EXPECT_EQ(cc.comm, (std::vector<float>{0, 0, 1, 0}));
  EXPECT_EQ(cc.wait, (std::vector<float>{0, 0, 0, 0}));  // not linked: no wait is claimed
  // Linked, with its last peer arriving at 600: [500, 600) of the third column's 250 is waiting.
  v::Trace linked = manyRanks(2);
  const uint32_t coll = uint32_t(linked.ranks[0].tracks[2]);
  v::CommCall call;
  call.link.first_start_ns = 500, call.link.last_start_ns = 600;
  linked.comm.calls.push_back(call);
  linked.comm.call_of[coll] = {{0}};
  const v::CompactColumns lw = v::compactColumns(linked, linked.ranks[0], 0, 1000, 4);
  EXPECT_EQ(lw.comm, (std::vector<float>{0, 0, 1, 0}));
  EXPECT_FLOAT_EQ(lw.wait[2], 0.4f);
  EXPECT_EQ(lw.wait[0] + lw.wait[1] + lw.wait[3], 0.f);
  // A rank with no stream (a CPU run): its threads' outermost lane is its compute.
  v::Trace cpu = manyRanks(1);
  cpu.ranks[0].tracks.erase(cpu.ranks[0].tracks.begin() + 1);
  const v::CompactColumns c2 = v::compactColumns(cpu, cpu.ranks[0], 0, 1000, 5);
  EXPECT_EQ(c2.compute, (std::vector<float>{1, 1, 1, 1, 0}));
}

// NCCL kernels on a stream are communication, not compute: a stream with a GEMM over [0, 500) and an
// all-reduce kernel over [500, 750) on one lane keeps the compact row's compute to the GEMM and its comm
// to the all-reduce (before, both were compute); on a lane of alternating 10 ns kernels the two halves
// are told apart exactly, the edge events clipped to the window.
TEST(ViewerManyRanks, CompactRowsCountNcclKernelsAsCommunication) {
  v::Trace t;
  v::RankGroup g;
  v::Track stream;
  stream.kind = v::TrackKind::Stream, stream.label = "stream 7 (device 0)";
  v::buildLanes(stream, {ev(0, 500, v::EventKind::Kernel), ev(500, 750, v::EventKind::CommKernel)});
  ASSERT_EQ(stream.lanes.size(), 1u);
  g.tracks.push_back(0);
  t.tracks.push_back(std::move(stream));
  t.ranks.push_back(g);
  t.begin = 0, t.end = 1000;
  const v::CompactColumns c = v::compactColumns(t, t.ranks[0], 0, 1000, 4);
  EXPECT_EQ(c.compute, (std::vector<float>{1, 1, 0, 0}));
  EXPECT_EQ(c.comm, (std::vector<float>{0, 0, 1, 0}));
  EXPECT_EQ(c.wait, (std::vector<float>{0, 0, 0, 0}));
  // 40 events of 10 ns, GEMMs and NCCL kernels in turn (the prefix's 16-event strides crossed).
  std::vector<v::Event> dense;
  for (int i = 0; i < 40; ++i) dense.push_back(ev(10 * i, 10 * i + 10, i % 2 ? v::EventKind::CommKernel : v::EventKind::Kernel));
  v::buildLanes(t.tracks[0], dense);
  ASSERT_EQ(t.tracks[0].lanes.size(), 1u);
  const v::CompactColumns d = v::compactColumns(t, t.ranks[0], 5, 395, 1);  // 195 ns of each in 390
  EXPECT_FLOAT_EQ(d.compute[0], 0.5f);
  EXPECT_FLOAT_EQ(d.comm[0], 0.5f);
  EXPECT_EQ(v::commBusyIn(t.tracks[0].lanes[0], 5, 395), 195);
  // [15, 386): NCCL kernel 1 clipped to [15, 20), kernels 3 … 37 whole; event 38, cut, is a GEMM.
  EXPECT_EQ(v::commBusyIn(t.tracks[0].lanes[0], 15, 386), 5 + 18 * 10);
}

TEST(ViewerManyRanks, ScriptsTakeRankAndLabelPatternsCompactAndFlows) {
  const auto cmds = v::parseScript("hide \"*\" \"stream *\"\ncollapse \"1?\"\npin * collectives\ncompact on\nflows none\n"
                                   "flows selected\n", "s.txt");
  ASSERT_EQ(cmds.size(), 6u);
  EXPECT_EQ(cmds[0].args, (std::vector<std::string>{"*", "stream *"}));
  EXPECT_TRUE(v::isPattern(cmds[1].args[0]));
  EXPECT_THROW(v::parseScript("compact maybe\n", "s.txt"), trainscope::UserError);
  EXPECT_THROW(v::parseScript("flows some\n", "s.txt"), trainscope::UserError);
  EXPECT_THROW(v::parseScript("move * collectives 1\n", "s.txt"), trainscope::UserError);
  EXPECT_THROW(v::parseScript("hide x collectives\n", "s.txt"), trainscope::UserError);  // not a rank nor a pattern
}

TEST(ViewerImport, AnImportedTracesHeaderSaysWhatItIs) {
  v::Trace t = manyRanks(2);
  EXPECT_EQ(v::importHeader(t), "") << "a native run has none";
  t.meta["source"] = "import";
  t.meta["import_files"] =
      R"([{"file":"/data/rank0.json","format":"kineto","rank":0,"gpu":"NVIDIA H100 80GB HBM3"},)"
      R"({"file":"x/r1.sqlite","format":"nsys","rank":1}])";
  t.ranks[0].process = "python3 (pid 42)";
  t.begin = 0, t.end = 12'500'000;
  std::string h = v::importHeader(t);
  EXPECT_NE(h.find("PyTorch profiler trace rank0.json -> rank 0 (NVIDIA H100 80GB HBM3)"), std::string::npos) << h;
  EXPECT_NE(h.find("Nsight Systems export r1.sqlite -> rank 1"), std::string::npos) << h;
  EXPECT_NE(h.find("ranks 0, 1"), std::string::npos) << h;
  EXPECT_NE(h.find("span " + v::formatDuration(12.5e6)), std::string::npos) << h;
  EXPECT_NE(h.find("processes: rank 0 python3 (pid 42)"), std::string::npos) << h;
  EXPECT_NE(h.find("nothing dropped"), std::string::npos) << h;
  t.drops.push_back({0, "import", 10, 7, 3});
  t.meta["import_refused_values"] = R"({"args.correlation: a string": 2})";
  h = v::importHeader(t);
  EXPECT_NE(h.find("dropped 3 events"), std::string::npos) << h;
  EXPECT_NE(h.find("2 values refused"), std::string::npos) << h;
}
