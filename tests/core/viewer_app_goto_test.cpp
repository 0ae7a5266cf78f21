// viewer_app_goto_test.cpp — go-to for every finder, in the app under Xvfb (the model's part is
// viewer_finders_test.cpp): the Search tab lists every match, sorted, and a row, next and prev select
// the match and scroll its row into view; a SQL row jumps to its event and a query is shown as a track
// (and removed); a diff row goes to its slowest instance; a collective of a real DP 2 run names its
// wait first and the ranges it was issued and waited in (grad_sync); links between pinned tracks are
// drawn in full.
#include <gtest/gtest.h>

#include <cmath>

#include "trainscope/viewer/finders.h"
#include "viewer_app_support.h"

namespace {

// 40 ranks of one kernel each; rank r also runs `late_kernel` for (r + 1) × 10 µs at 5 ms.
std::string lateRanks() {
  const std::string p = tempPath("late_ranks.db");
  if (std::filesystem::exists(p)) return p;
  db::RunStore st(p, {true, "--out", true});
  st.setMeta("world_size", "40");
  for (int r = 0; r < 40; ++r) st.putRank({r, "node0", "cuda:" + std::to_string(r % 8)});
  st.begin();
  std::vector<db::Kernel> ks;
  const auto k = st.intern("k"), late = st.intern("late_kernel");
  for (int r = 0; r < 40; ++r) {
    db::Kernel a{kEpoch, kEpoch + 1'000'000, 0, 7, k, -1}, b{kEpoch + 5'000'000, kEpoch + 5'000'000 + (r + 1) * 10'000, 0, 7, late, -1};
    a.rank = b.rank = r;
    ks.push_back(a), ks.push_back(b);
  }
  st.put(ks);
  st.commit();
  st.createIndexes();
  st.close();
  return p;
}

bool onScreen(const nlohmann::json& l, int64_t rank, const std::string& label) {
  const auto* r = row(l, rank, label, 0);
  return r && (*r)["y0"].get<float>() >= l["timeline"]["y0"].get<float>() &&
         (*r)["y1"].get<float>() <= l["timeline"]["y1"].get<float>();
}

Shot scripted(const std::string& files, const std::string& cmds, const std::string& name) {
  const std::string script = tempPath(name + ".txt");
  std::ofstream(script) << cmds;
  return shoot(files, "--script " + script, name);
}

const std::string kStream = "stream 7 (device 0)";

// A real DP 2 run (tiny, 3 steps, ranges traced), made once per test process.
std::string dp2Run() {
  const std::string run = tempPath("goto_dp2.db");
  if (std::filesystem::exists(run)) return run;
  const auto r = trainscope::testing::cli("run --workload tiny --seq 16 --mbs 2 --steps 3 --nproc 2 --device cpu --trace " +
                                          run + " --trace-level ranges --overwrite -q");
  EXPECT_EQ(r.status, 0) << r.output;
  return run;
}

// Pixels of the link colour (rgb(80, 240, 200), antialiased) within 2 px of the segment's points
// above `band_bottom` (the part over the pinned band), from 10% to 90% of that part, and how many
// points were looked at.
std::pair<int, int> linkPixels(const v::Image& img, float x0, float y0, float x1, float y1, float band_bottom) {
  if (y1 < y0) std::swap(x0, x1), std::swap(y0, y1);  // (x0, y0): the upper end
  if (y1 > band_bottom - 1 && y1 > y0) {               // cut where it leaves the band
    const float f = (band_bottom - 1 - y0) / (y1 - y0);
    x1 = x0 + (x1 - x0) * f, y1 = band_bottom - 1;
  }
  int seen = 0, hit = 0;
  for (int i = 1; i <= 9; ++i) {
    const float f = float(i) / 10, x = x0 + (x1 - x0) * f, y = y0 + (y1 - y0) * f;
    ++seen;
    bool any = false;
    for (int dy = -2; dy <= 2 && !any; ++dy)
      for (int dx = -2; dx <= 2 && !any; ++dx) {
        const uint32_t p = img.pixel(int(std::lround(x)) + dx, int(std::lround(y)) + dy);
        const int r = int(p & 0xff), g = int((p >> 8) & 0xff), b = int((p >> 16) & 0xff);
        any = g > 180 && b > 140 && r < 150 && g > r + 60;
      }
    hit += any;
  }
  return {hit, seen};
}

}  // namespace

// Search lists all 40 matches; sorted by duration (longest first) the first row is rank 39's, `match
// 0` selects it and scrolls rank 39's row on screen; `next` walks the list's order (rank 38), not time;
// `match 35` scrolls the list so that row 35 is drawn.
TEST(ViewerApp, TheSearchResultsListIsSortedAndEveryRowGoesToItsMatch) {
  const std::string db = lateRanks();
  const Shot s = scripted(db, "search late_kernel\nmatches duration desc\nmatch 0\nframes 4\n", "goto_list");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  ASSERT_TRUE(s.layout.contains("search")) << "no results list";
  const auto& l = s.layout["search"];
  ASSERT_EQ(l["count"], 40);
  ASSERT_EQ(l["rows"].size(), 40u);
  for (size_t i = 1; i < 40; ++i)
    ASSERT_GE(l["rows"][i - 1]["duration_ns"].get<int64_t>(), l["rows"][i]["duration_ns"].get<int64_t>());
  EXPECT_EQ(l["rows"][0]["rank"], 39);
  EXPECT_EQ(l["rows"][0]["track"], kStream);
  EXPECT_EQ(l["rows"][0]["name"], "late_kernel");
  EXPECT_EQ(l["rows"][0]["duration_ns"], 400'000);
  EXPECT_EQ(l["sort"], "duration");
  EXPECT_EQ(l["index"], 0);
  EXPECT_EQ(s.layout["selected"]["rank"], 39);
  EXPECT_TRUE(onScreen(s.layout, 39, kStream)) << s.layout["rows"].dump();

  const Shot n = scripted(db, "search late_kernel\nmatches duration desc\nmatch 0\nnext\nframes 4\n", "goto_next");
  ASSERT_EQ(n.run.status, 0) << n.run.output;
  EXPECT_EQ(n.layout["search"]["index"], 1);
  EXPECT_EQ(n.layout["selected"]["rank"], 38);
  EXPECT_TRUE(onScreen(n.layout, 38, kStream));

  const Shot far = scripted(db, "search late_kernel\nmatch 35\nframes 4\n", "goto_far");
  ASSERT_EQ(far.run.status, 0) << far.run.output;
  EXPECT_EQ(far.layout["selected"]["rank"], 35);  // by start: rank order
  const auto drawn = far.layout["search"]["drawn"];
  EXPECT_LE(drawn[0].get<int64_t>(), 35) << drawn.dump();
  EXPECT_GT(drawn[1].get<int64_t>(), 35) << drawn.dump();
  EXPECT_TRUE(onScreen(far.layout, 35, kStream));
}

// A SQL row with rank and start_ns jumps to its event (selected, its row on screen); the query's rows
// are shown as a track under the ruler, one box per interval, and removed again.
TEST(ViewerApp, SqlRowsJumpToTheirEventAndAQueryIsShownAsATrack) {
  const std::string db = lateRanks();
  const std::string q = "SELECT k.rank, k.start_ns, k.end_ns, s.value AS name FROM kernels k JOIN strings s ON s.id = "
                        "k.name_id WHERE s.value = 'late_kernel' ORDER BY k.rank DESC";
  const Shot s = scripted(db, "sql \"" + q + "\"\nsqlrow 3\nsqltrack show\nview 4.9ms 5.5ms\nframes 4\n", "goto_sql");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  ASSERT_EQ(s.layout["sql"]["rows"].size(), 40u);
  EXPECT_EQ(s.layout["selected"]["rank"], 36);  // row 3, ranks descending
  EXPECT_EQ(s.layout["selected"]["name"], "late_kernel");
  EXPECT_EQ(s.layout["selected"]["start_ns"], kEpoch + 5'000'000);
  EXPECT_TRUE(onScreen(s.layout, 36, kStream));
  ASSERT_TRUE(s.layout.contains("query_track")) << s.layout["finder_status"];
  const auto& qt = s.layout["query_track"];
  EXPECT_EQ(qt["events"], 40);
  EXPECT_EQ(qt["lanes"], 40u);  // 40 intervals from one start: each nests in the longer one
  EXPECT_EQ(qt["drawn_lanes"], 8u);  // at most 8 drawn: the ranks keep their room
  EXPECT_NEAR(qt["y1"].get<float>() - qt["y0"].get<float>(), 8 * 18.f, 0.5f);
  EXPECT_GE(qt["y0"].get<float>(), s.layout["timeline"]["y0"].get<float>());
  ASSERT_FALSE(qt["boxes"].empty());
  // The longest interval (rank 39's, 400 us) drawn from 5 ms to 5.4 ms.
  const auto& top = qt["boxes"][0];
  EXPECT_NEAR(top["x0"].get<float>(), xOf(s.layout, kEpoch + 5'000'000), 1.5f);
  EXPECT_NEAR(top["x1"].get<float>(), xOf(s.layout, kEpoch + 5'400'000), 1.5f);
  // Not scrolled: the rank rows start below the query track.
  const Shot top_rows = scripted(db, "sql \"" + q + "\"\nsqltrack show\nframes 2\n", "goto_sql_track");
  ASSERT_EQ(top_rows.run.status, 0) << top_rows.run.output;
  ASSERT_TRUE(top_rows.layout.contains("query_track"));
  float first_row = 1e9f;
  for (const auto& t : top_rows.layout["tracks"]) first_row = std::min(first_row, t["y0"].get<float>());
  EXPECT_GE(first_row, top_rows.layout["query_track"]["y1"].get<float>());

  const Shot r = scripted(db, "sql \"" + q + "\"\nsqltrack show\nsqltrack remove\nframes 2\n", "goto_sql_removed");
  ASSERT_EQ(r.run.status, 0) << r.run.output;
  EXPECT_FALSE(r.layout.contains("query_track"));
  // A row that names no event says why, and the script goes on.
  const Shot bad = scripted(db, "sql \"SELECT count(*) FROM kernels\"\nsqlrow 0\nframes 2\n", "goto_sql_bad");
  ASSERT_EQ(bad.run.status, 0) << bad.run.output;
  EXPECT_NE(bad.run.output.find("rank and start_ns"), std::string::npos) << bad.run.output;
  EXPECT_FALSE(bad.layout["selection"].get<bool>());
}

// Compare: a per-name diff row goes to that name's slowest instance in the run where it took longer
// (run B here: its third rank is slower), within the aligned step's window.
TEST(ViewerApp, ADiffRowGoesToItsSlowestInstance) {
  const std::string a = trace();
  const std::string b = tempPath("goto_diff_b.db");
  if (!std::filesystem::exists(b)) v::writeSyntheticTrace(b, {3, 6'000, 3});
  const Shot s = scripted(a + " " + b, "diff step\nframes 2\ndiffrow 0\nframes 4\n", "goto_diff");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  ASSERT_FALSE(s.layout["diff"]["rows"].empty());
  const auto& d0 = s.layout["diff"]["rows"][0];
  ASSERT_GT(d0["delta_ns"].get<int64_t>(), 0) << d0.dump();  // B has a third rank: more of everything
  ASSERT_TRUE(s.layout.contains("selected")) << s.layout["finder_status"];
  const auto& sel = s.layout["selected"];
  EXPECT_EQ(sel["doc"], 1);
  EXPECT_EQ(sel["name"], d0["name"]);
  // The longest of that name in B's step 1 window, by the model.
  const v::Trace tb = v::loadTrace(b);
  const auto w = tb.stepWindow(1);
  ASSERT_TRUE(w);
  v::StatGroup g = v::StatGroup::Kernels;
  for (int k = 0; k < v::kStatGroups; ++k)
    if (d0["group"] == v::groupName(v::StatGroup(k))) g = v::StatGroup(k);
  const auto slow = v::slowestInstance(tb, g, d0["name"], *w);
  ASSERT_TRUE(slow);
  EXPECT_EQ(sel["start_ns"], tb.event(*slow).start);
  EXPECT_EQ(sel["end_ns"], tb.event(*slow).end);
  EXPECT_EQ(sel["rank"], 2);  // the slowest rank of B
}

// A real DP 2 run: an all-reduce that ended inside grad_sync (found by SQL, selected through its row):
// Details open with its wait, skew and transfer, and name the ranges it was issued and ended in.
TEST(ViewerApp, ACollectiveOfARealDpRunNamesItsWaitFirstAndGradSyncAroundIt) {
  const std::string run = dp2Run();
  const std::string q =
      "SELECT c.rank, c.start_ns, c.end_ns FROM collectives c JOIN ranges r ON r.rank = c.rank JOIN strings s ON "
      "s.id = r.name_id WHERE s.value = 'grad_sync' AND c.op = 'all_reduce' AND c.end_ns > r.start_ns AND "
      "c.end_ns <= r.end_ns ORDER BY c.start_ns LIMIT 1";
  const Shot s = scripted(run, "sql \"" + q + "\"\nsqlrow 0\ntab details\nframes 3\n", "goto_enclosing");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  ASSERT_EQ(s.layout["sql"]["rows"].size(), 1u) << "no all-reduce ended inside grad_sync: " << s.layout["sql"].dump();
  ASSERT_TRUE(s.layout.contains("selected")) << s.layout["finder_status"];
  EXPECT_EQ(s.layout["selected"]["track"], "collectives");
  const auto& order = s.layout["details_order"];
  ASSERT_GE(order.size(), 4u) << order.dump();
  EXPECT_EQ(order[0], "name");
  EXPECT_EQ(order[1], "wait");
  EXPECT_EQ(order[2], "arrival skew");
  EXPECT_EQ(order[3], "transfer");
  ASSERT_TRUE(s.layout.contains("enclosing"));
  const auto& e = s.layout["enclosing"];
  EXPECT_TRUE(e["by_time"].get<bool>());
  auto has = [](const nlohmann::json& a, const std::string& n) {
    for (const auto& x : a)
      if (x == n) return true;
    return false;
  };
  EXPECT_TRUE(has(e["at_end"], "grad_sync")) << e.dump();
  EXPECT_TRUE(has(e["at_end"], "step")) << e.dump();
  EXPECT_TRUE(has(e["at_start"], "step")) << e.dump();
  EXPECT_GE(e["at_start"].size(), 2u) << e.dump();  // inside the step, in one of its phases
}

// Links between pinned tracks are drawn in full: both ranks' collectives pinned, the selected
// all-reduce's link lies in the pinned band and its pixels are there; with one end pinned, the part
// of the link over the band is drawn too.
TEST(ViewerApp, LinksBetweenPinnedTracksAreNotClipped) {
  const std::string run = dp2Run();
  for (const std::string pins : {"pin 0 collectives\npin 1 collectives\n", "pin 1 collectives\n"}) {
    const Shot s = scripted(run, pins + "select \"all_reduce (dp)\" 2\nframes 3\n", "goto_pinned");
    ASSERT_EQ(s.run.status, 0) << s.run.output;
    const nlohmann::json* link = nullptr;
    for (const auto& k : s.layout["links"])
      if (k["source"] == "selection") link = &k;
    ASSERT_NE(link, nullptr) << s.layout["links"].dump();
    float band_bottom = 0;  // the pinned rows' bottom
    for (const auto& t : s.layout["tracks"])
      if (t["pinned"].get<bool>()) band_bottom = std::max(band_bottom, t["y1"].get<float>());
    ASSERT_GT(band_bottom, 0);
    const float x0 = (*link)["x0"], y0 = (*link)["y0"], x1 = (*link)["x1"], y1 = (*link)["y1"];
    ASSERT_TRUE(std::min(y0, y1) < band_bottom) << pins << link->dump();  // an end in the band
    const auto [hit, seen] = linkPixels(s.img, x0, y0, x1, y1, band_bottom);
    ASSERT_EQ(seen, 9) << pins;
    EXPECT_GE(hit, seen - 1) << pins << " link " << link->dump() << " band bottom " << band_bottom;
  }
}

// Real clicks (`click`: the mouse moved over the row as drawn, pressed and released through ImGui's
// IO), not the script's equivalents: a Search row selects its match and scrolls its timeline row into
// view; a row not drawn is said to be off screen and nothing is clicked.
TEST(ViewerApp, ARealClickOnASearchRowSelectsItsMatchAndScrollsToIt) {
  const std::string db = lateRanks();
  // `match 0` picks rank 39's row and scrolls the list to its top; the click then picks row 2.
  const Shot s = scripted(db, "search late_kernel\nmatches duration desc\nmatch 0\nclick search 2\nframes 2\n", "click_search");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  ASSERT_EQ(s.layout["clicks"].size(), 1u) << s.run.output;
  EXPECT_EQ(s.layout["clicks"][0]["target"], "search 2");
  EXPECT_EQ(s.layout["search"]["index"], 2);
  EXPECT_EQ(s.layout["selected"]["rank"], 37);  // longest first: ranks 39, 38, 37
  EXPECT_EQ(s.layout["selected"]["name"], "late_kernel");
  EXPECT_TRUE(onScreen(s.layout, 37, kStream)) << s.layout["rows"].dump();
  const Shot off = scripted(db, "search late_kernel\nclick search 39\nframes 2\n", "click_search_off");
  ASSERT_EQ(off.run.status, 0) << off.run.output;
  EXPECT_NE(off.run.output.find("click search 39: not on screen"), std::string::npos) << off.run.output;
  EXPECT_TRUE(off.layout["clicks"].empty());
  EXPECT_NE(off.layout["search"]["index"], 39);
}

// A real click on a SQL row with rank and start_ns jumps to its event; on a diff row, to its slowest instance.
TEST(ViewerApp, ARealClickOnASqlOrDiffRowGoesToItsEvent) {
  const std::string q = "SELECT k.rank, k.start_ns, s.value AS name FROM kernels k JOIN strings s ON s.id = k.name_id "
                        "WHERE s.value = 'late_kernel' ORDER BY k.rank DESC";
  const Shot s = scripted(lateRanks(), "sql \"" + q + "\"\nframes 2\nclick sql 3\nframes 3\n", "click_sql");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  ASSERT_EQ(s.layout["clicks"].size(), 1u) << s.run.output;
  EXPECT_EQ(s.layout["selected"]["rank"], 36);  // row 3, ranks descending
  EXPECT_EQ(s.layout["selected"]["start_ns"], kEpoch + 5'000'000);
  EXPECT_TRUE(onScreen(s.layout, 36, kStream));

  const std::string a = trace(), b = tempPath("click_diff_b.db");
  if (!std::filesystem::exists(b)) v::writeSyntheticTrace(b, {3, 6'000, 3});
  const Shot d = scripted(a + " " + b, "diff step\nframes 2\nclick diff 0\nframes 3\n", "click_diff");
  ASSERT_EQ(d.run.status, 0) << d.run.output;
  ASSERT_EQ(d.layout["clicks"].size(), 1u) << d.run.output;
  ASSERT_FALSE(d.layout["diff"]["rows"].empty());
  ASSERT_TRUE(d.layout.contains("selected")) << d.layout["finder_status"];
  EXPECT_EQ(d.layout["selected"]["doc"], 1);
  EXPECT_EQ(d.layout["selected"]["name"], d.layout["diff"]["rows"][0]["name"]);
  EXPECT_EQ(d.layout["selected"]["rank"], 2);  // the slowest rank of B (as diffrow 0 finds)
}

// The Search table's header arrow marks the list's sort whoever set it: the script's `matches` (before,
// the arrow stayed on the table's default, start), and `matches` after a real click on a header (before,
// the arrow stayed on the header clicked).
TEST(ViewerApp, TheSearchHeaderArrowMarksTheListsSortWhoeverSetIt) {
  const std::string db = lateRanks();
  const Shot m = scripted(db, "search late_kernel\nmatches duration desc\nframes 2\n", "arrow_matches");
  ASSERT_EQ(m.run.status, 0) << m.run.output;
  EXPECT_EQ(m.layout["search"]["sort"], "duration");
  EXPECT_EQ(m.layout["search"]["header"]["sort"], "duration") << m.layout["search"]["header"].dump();
  EXPECT_EQ(m.layout["search"]["header"]["descending"], true);

  const Shot h = scripted(db, "search late_kernel\nclick search header name\nframes 2\n", "arrow_click");
  ASSERT_EQ(h.run.status, 0) << h.run.output;
  ASSERT_EQ(h.layout["clicks"].size(), 1u) << h.run.output;
  EXPECT_EQ(h.layout["search"]["sort"], "name");  // the real header click sorted the list
  EXPECT_EQ(h.layout["search"]["header"]["sort"], "name");

  const Shot both = scripted(db, "search late_kernel\nclick search header name\nframes 2\nmatches duration desc\nframes 2\n",
                             "arrow_click_then_matches");
  ASSERT_EQ(both.run.status, 0) << both.run.output;
  EXPECT_EQ(both.layout["search"]["sort"], "duration");
  EXPECT_EQ(both.layout["search"]["header"]["sort"], "duration") << both.layout["search"]["header"].dump();
  EXPECT_EQ(both.layout["search"]["header"]["descending"], true);
}

// The other sortable table, Statistics, sorts by its header's own specs (so its arrow is always the
// sort's); its CSV is written in the order the table shows — before, always by total, whatever header
// was clicked. Two real clicks on "name": descending, so late_kernel (8.2 ms in all) comes before k (40 ms).
TEST(ViewerApp, TheStatisticsCsvFollowsTheSortItsHeaderShows) {
  const std::string db = lateRanks(), by_total = tempPath("stats_by_total.csv"), by_name = tempPath("stats_by_name.csv");
  auto firstRow = [](const std::string& csv) {
    std::ifstream in(csv);
    std::string header, row;
    std::getline(in, header), std::getline(in, row);
    return row.substr(0, row.find(','));
  };
  const Shot t = scripted(db, "tab stats\nframes 2\ncsv stats " + by_total + "\n", "stats_csv_total");
  ASSERT_EQ(t.run.status, 0) << t.run.output;
  EXPECT_EQ(firstRow(by_total), "k");  // the default: total, descending
  const Shot n = scripted(db, "click stats header name\nclick stats header name\nframes 2\ncsv stats " + by_name + "\n",
                          "stats_csv_name");
  ASSERT_EQ(n.run.status, 0) << n.run.output;
  ASSERT_EQ(n.layout["clicks"].size(), 2u) << n.run.output;
  EXPECT_EQ(firstRow(by_name), "late_kernel");
}
