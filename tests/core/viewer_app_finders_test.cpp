// viewer_app_finders_test.cpp — what a finder finds is shown: `select` and search's `next` scroll the
// match's row into view (not only pan in time), expanding its rank; the model's placeOf/scrollToShow.
#include <gtest/gtest.h>

#include "trainscope/viewer/tracks.h"
#include "viewer_app_support.h"

namespace {

// 40 ranks of one kernel each; rank 37 also runs `late_kernel`, far below the first screen.
std::string manyRanks() {
  const std::string p = tempPath("many_ranks.db");
  if (std::filesystem::exists(p)) return p;
  db::RunStore st(p, {true, "--out", true});
  st.setMeta("world_size", "40");
  for (int r = 0; r < 40; ++r) st.putRank({r, "node0", "cuda:" + std::to_string(r % 8)});
  st.begin();
  std::vector<db::Kernel> ks;
  const auto k = st.intern("k"), late = st.intern("late_kernel");
  auto kernel = [&](int64_t a, int64_t b, db::StringId name, int64_t rank) {
    db::Kernel x{kEpoch + a, kEpoch + b, 0, 7, name, -1};
    x.rank = rank;
    ks.push_back(x);
  };
  for (int r = 0; r < 40; ++r) kernel(0, 1'000'000, k, r);
  kernel(5'000'000, 5'200'000, late, 37);
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

}  // namespace

TEST(ViewerTracks, AFindersTargetIsPlacedAndScrolledTo) {
  EXPECT_EQ(v::scrollToShow(100, 400, 150, 170, 5000), 100);           // in view: left alone
  EXPECT_FLOAT_EQ(v::scrollToShow(0, 300, 2000, 2020, 5000), 1900);    // a third down
  EXPECT_FLOAT_EQ(v::scrollToShow(0, 300, 4950, 4970, 5000), 4700);    // not past the end
}

TEST(ViewerApp, SelectAndNextScrollTheMatchsRowIntoView) {
  const std::string db = manyRanks();
  const Shot before = shoot(db, "", "finders_before");
  ASSERT_EQ(before.run.status, 0) << before.run.output;
  ASSERT_FALSE(onScreen(before.layout, 37, "stream 7 (device 0)")) << "the test needs rank 37 off screen";
  for (const std::string cmds : {"select late_kernel\nframes 8\n", "search late_kernel\nframes 8\n",
                                 "collapse 37\nsearch late_kernel\nnext\nframes 8\n"}) {
    const std::string script = tempPath("finders.txt");
    std::ofstream(script) << cmds;
    const Shot s = shoot(db, "--script " + script, "finders");
    ASSERT_EQ(s.run.status, 0) << s.run.output;
    EXPECT_TRUE(s.layout["selection"].get<bool>()) << cmds;
    EXPECT_TRUE(onScreen(s.layout, 37, "stream 7 (device 0)")) << cmds << s.layout["rows"].dump();
  }
}

// A note is marked on its event's row (its text beside it); a bookmark's flag hangs under the ruler,
// never over its labels.
TEST(ViewerApp, NotesAreMarkedOnTheTimelineAndBookmarksClearTheRuler) {
  const std::string db = tempPath("notes_marked.db");
  std::filesystem::copy_file(manyRanks(), db, std::filesystem::copy_options::overwrite_existing);
  const std::string script = tempPath("notes_marked.txt");
  std::ofstream(script) << "select late_kernel\nnote \"waits for rank 1\"\nview 0ms 8ms\nbookmark 2ms b1\nframes 8\n";
  const Shot s = shoot(db, "--script " + script, "notes_marked");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  ASSERT_EQ(s.layout["notes"].size(), 1u) << s.layout["notes"].dump();
  const auto& n = s.layout["notes"][0];
  ASSERT_TRUE(n.contains("x")) << "the note is not marked on the timeline: " << n.dump();
  const auto* r = row(s.layout, 37, "stream 7 (device 0)", 0);
  ASSERT_NE(r, nullptr);
  EXPECT_FLOAT_EQ(n["y"].get<float>(), (*r)["y0"].get<float>());
  EXPECT_NEAR(n["x"].get<float>(), xOf(s.layout, n["start_ns"].get<int64_t>()), 2.f) << n.dump();
  // The flag's colour nowhere in the ruler's label band right of the bookmark's line.
  ASSERT_EQ(s.layout["bookmarks"].size(), 1u);
  const float bx = s.layout["bookmarks"][0]["x"], y0 = s.layout["timeline"]["y0"];
  int flag_in_ruler = 0;
  for (int y = int(y0); y < int(y0) + 18; ++y)
    for (int x = int(bx) + 2; x < int(bx) + 40; ++x) {
      const uint32_t p = s.img.pixel(x, y);  // 0xAABBGGRR; the flag's text is rgb(120, 220, 255)
      flag_in_ruler += (p & 0xff) < 170 && ((p >> 8) & 0xff) > 180 && ((p >> 16) & 0xff) > 220;
    }
  EXPECT_EQ(flag_in_ruler, 0);
}
