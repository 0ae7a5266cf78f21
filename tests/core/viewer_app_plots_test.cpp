// viewer_app_plots_test.cpp — counters drawn as plots: each counter's axis (a ratio from a baseline
// below its min, memory from 0), its colour, its value at a time, "0 throughout" for a counter that
// never moves; in the model (counter_plot.h) and on screen (--layout's "counters").
#include <gtest/gtest.h>

#include "trainscope/rundb/range_names.h"
#include "trainscope/viewer/counter_plot.h"
#include "trainscope/viewer/lod.h"
#include "viewer_app_support.h"

namespace {

v::CounterSeries series(std::vector<int64_t> ts, std::vector<double> values) {
  v::CounterSeries c;
  c.ts = std::move(ts);
  c.values = std::move(values);
  v::buildPyramid(c);
  return c;
}

// A run with a memory counter (100–145 MiB), a MoE imbalance between 1.20 and 1.42, dropped tokens
// all 0, and a kernel so that the run has a span.
std::string countersRun() {
  const std::string p = tempPath("counters.db");
  if (std::filesystem::exists(p)) return p;
  db::RunStore st(p, {true, "--out", true});
  st.setMeta("world_size", "1");
  st.putRank({0, "node0", "cuda:0"});
  st.begin();
  const auto mem = st.intern(trainscope::rundb::names::kMemoryCounter), imb = st.intern("moe: imbalance (max/mean)"),
             drop = st.intern("moe: dropped %");
  std::vector<db::Counter> cs;
  const double ratios[] = {1.20, 1.42, 1.31, 1.25, 1.38, 1.22, 1.40, 1.29};
  for (int i = 0; i < 8; ++i) {
    const int64_t t = kEpoch + i * 10'000'000;
    cs.push_back({t, mem, (100.0 + 45.0 * (i % 2)) * 1024 * 1024, 0});
    cs.push_back({t, imb, ratios[i], 0});
    cs.push_back({t, drop, 0.0, 0});
  }
  st.put(cs);
  st.put(db::Kernel{kEpoch, kEpoch + 80'000'000, 0, 7, st.intern("k"), -1});
  st.commit();
  st.createIndexes();
  st.close();
  return p;
}

}  // namespace

TEST(ViewerPlots, ARatioIsDrawnFromABaselineBelowItsMinMemoryFromZero) {
  const v::CounterSeries ratio = series({0, 10, 20, 30}, {1.20, 1.42, 1.31, 1.25});
  const v::CounterAxis a = v::counterAxis(ratio, "moe: imbalance (max/mean)");
  EXPECT_DOUBLE_EQ(a.min, 1.20);
  EXPECT_DOUBLE_EQ(a.max, 1.42);
  EXPECT_GT(a.lo, 1.0);  // not 0: 1.20 and 1.42 look different
  EXPECT_LT(a.lo, 1.20);
  EXPECT_DOUBLE_EQ(a.hi, 1.42);
  EXPECT_LT(a.frac(1.20), 0.2);
  EXPECT_DOUBLE_EQ(a.frac(1.42), 1.0);
  EXPECT_EQ(v::counterText(a, 1.42), "1.42");
  // Memory: bytes from 0, even when it moves in a narrow band.
  const v::CounterSeries mem = series({0, 10}, {100.0 * 1048576, 145.0 * 1048576});
  const v::CounterAxis m = v::counterAxis(mem, "memory");
  EXPECT_EQ(m.lo, 0);
  EXPECT_TRUE(m.bytes);
  EXPECT_EQ(v::counterText(m, 145.0 * 1048576), "145 MiB");
  // A counter that reaches 0 is drawn from 0; one that never leaves 0 says so.
  EXPECT_EQ(v::counterAxis(series({0, 10}, {0.0, 3.0}), "moe: dropped %").lo, 0);
  EXPECT_TRUE(v::counterAxis(series({0, 10}, {0.0, 0.0}), "moe: dropped %").all_zero);
  EXPECT_FALSE(v::counterAxis(series({0, 10}, {0.0, 3.0}), "moe: dropped %").all_zero);
  // One colour per counter.
  std::set<uint32_t> colours{v::counterColor("memory"), v::counterColor("moe: imbalance (max/mean)"),
                             v::counterColor("moe: dropped %")};
  EXPECT_EQ(colours.size(), 3u);
  EXPECT_EQ(v::counterColor("gpu util"), v::counterColor("gpu util"));
  // The value held at a time: the last sample at or before it.
  EXPECT_FALSE(v::counterValueAt(ratio, -1).has_value());
  EXPECT_DOUBLE_EQ(*v::counterValueAt(ratio, 0), 1.20);
  EXPECT_DOUBLE_EQ(*v::counterValueAt(ratio, 15), 1.42);
  EXPECT_DOUBLE_EQ(*v::counterValueAt(ratio, 1000), 1.25);
}

TEST(ViewerApp, CountersArePlotsWithAnAxisAColourAndZeroSaid) {
  const Shot s = shoot(countersRun(), "", "counters");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  std::map<std::string, nlohmann::json> by_label;
  for (const auto& c : s.layout["counters"]) by_label[c["label"].get<std::string>()] = c;
  ASSERT_EQ(by_label.size(), 3u) << s.layout["counters"].dump();
  const auto& imb = by_label["moe: imbalance (max/mean)"];
  EXPECT_GT(imb["lo"].get<double>(), 1.0) << imb.dump();
  EXPECT_EQ(imb["hi_text"], "1.42") << imb.dump();
  EXPECT_EQ(by_label["memory"]["lo"].get<double>(), 0) << by_label["memory"].dump();
  EXPECT_EQ(by_label["memory"]["hi_text"], "145 MiB") << by_label["memory"].dump();
  EXPECT_EQ(by_label["moe: dropped %"]["note"], "0 throughout") << by_label["moe: dropped %"].dump();
  std::set<uint32_t> colours;
  for (const auto& [label, c] : by_label) colours.insert(c["colour"].get<uint32_t>());
  EXPECT_EQ(colours.size(), 3u);
  // On screen: the imbalance row holds short bars at 1.20 and full ones at 1.42 (not a flat band),
  // in its own colour.
  const auto& row = imb;
  const float y0 = row["y0"], y1 = row["y1"];
  const float x0 = s.layout["timeline"]["x0"], x1 = s.layout["timeline"]["x1"];
  const uint32_t want = row["colour"];
  std::set<int> heights;
  for (int x = int(x0) + 60; x < int(x1) - 4; x += 7) {
    int h = 0;
    for (int y = int(y0); y < int(y1); ++y) {
      if ((s.img.pixel(x, y) | 0xff000000u) == want) ++h;
    }
    if (h > 0) heights.insert(h);
  }
  ASSERT_FALSE(heights.empty());
  EXPECT_GT(*heights.rbegin() - *heights.begin(), 15) << "the 1.20–1.42 band looks flat";
}

// The memory row's caption (its peak as Summary gives it) stays in the label column: drawn whole, the
// 60-character "peak … (allocator, counted steps; sampled max …)" ran 250 px into the timeline, over
// the plot and its axis's "0 B" (audit 2026-12-07: every real run's memory row read "c0unted"). Cut,
// it keeps the figure ("peak 145 MiB") and gives the whole line on hover.
TEST(ViewerApp, TheMemoryRowsPeakCaptionStaysInTheLabelColumn) {
  const std::string p = tempPath("memory_caption.db");
  if (!std::filesystem::exists(p)) {
    db::RunStore st(p, {true, "--out", true});
    st.setMeta("world_size", "1");
    st.putRank({0, "node0", "cpu"});
    st.begin();
    const auto mem = st.intern(trainscope::rundb::names::kMemoryCounter);
    std::vector<db::Counter> cs;
    for (int i = 0; i < 8; ++i) cs.push_back({kEpoch + i * 10'000'000, mem, (100.0 + 45.0 * (i % 2)) * 1048576, 0});
    st.put(cs);
    st.put(db::Kernel{kEpoch, kEpoch + 80'000'000, 0, 7, st.intern("k"), -1});
    st.commit();
    for (int i = 0; i < 4; ++i) {
      db::Step s;
      s.step = i;
      s.start_ns = kEpoch + i * 20'000'000;
      s.step_time_ns = 20'000'000;
      s.tokens = 64;
      s.peak_bytes = int64_t(150) << 20;
      st.appendStep(s);
    }
    st.createIndexes();
    st.close();
  }
  const Shot s = shoot(p, "", "memory_caption");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  const nlohmann::json* memory = nullptr;
  for (const auto& c : s.layout["counters"])
    if (c["label"] == "memory") memory = &c;
  ASSERT_NE(memory, nullptr) << s.layout["counters"].dump();
  EXPECT_EQ((*memory)["caption"], "peak 150 MiB (allocator, counted steps; sampled max 145 MiB)") << memory->dump();
  EXPECT_EQ((*memory)["caption_shown"], "peak 150 MiB") << memory->dump();
  EXPECT_LE((*memory)["caption_x1"].get<float>(), s.layout["timeline"]["x0"].get<float>()) << memory->dump();
}
