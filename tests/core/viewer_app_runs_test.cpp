// viewer_app_runs_test.cpp — trainscope-viewer with more than one rank or run: two runs and a study
// open, ranks related on real DP and PP runs (a selected all-reduce linked to its copy with the skew SQL
// computes, pipeline sends' arrows, the ranks' coordinates, a collective's wait drawn apart from its
// transfer), track control (collapse, hide, pin), run B beside run A, and the per-name diff.
#include <gtest/gtest.h>

#include "viewer_app_support.h"

TEST(ViewerApp, TwoRunsAndAStudyOpen) {
  const std::string a = trace();
  const std::string b = tempPath("app_b.db");
  v::writeSyntheticTrace(b, {2, 9'000, 3, v::SyntheticOptions{}.start_ns + 3'000'000'000});
  const std::string script = tempPath("cmp.txt");
  std::ofstream(script) << "tab compare\n";
  const Shot s = shoot(a + " " + b, "--script " + script, "compare");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  int docs = 0;
  for (const auto& r : s.layout["rows"]) docs = std::max(docs, r["doc"].get<int>() + 1);
  EXPECT_EQ(docs, 2);
  // Run B is aligned at step 1: both runs' rank-0 step-1 starts land on the same x.
  // (Checked through the model: the offset the viewer applies.)
  EXPECT_EQ(v::alignmentOffset(v::loadTrace(a), v::loadTrace(b), 1) < 0, true);

  const std::string study = tempPath("app_study.db");
  {
    trainscope::tuner::Study st(study, R"({"workload":"tiny","cluster":"cpu-local","memory_bytes":1000000})", false);
    trainscope::tuner::TrialRecord tr;
    tr.candidate = 0;
    tr.steps = 3;
    tr.db_path = a;  // recorded when the trial starts, as the tuner does
    tr.id = st.beginTrial(tr);
    tr.status = trainscope::tuner::TrialStatus::Ok;
    tr.step_s = 0.2;
    tr.predicted_step_s = 0.25;
    tr.peak_bytes = 800000;
    tr.db_path = a;
    st.finishTrial(tr);
  }
  const Shot st = shoot(study, "", "study");
  ASSERT_EQ(st.run.status, 0) << st.run.output;
  EXPECT_TRUE(st.layout["rows"].empty());  // a study alone: no timeline
  // A trial's trace in one click (the button's action, from a script): its timeline replaces none.
  const std::string open = tempPath("open_trial.txt");
  std::ofstream(open) << "open 1\n";
  const Shot opened = shoot(study, "--script " + open, "study_trial");
  ASSERT_EQ(opened.run.status, 0) << opened.run.output;
  EXPECT_FALSE(opened.layout["rows"].empty());
  EXPECT_EQ(opened.layout["events"], v::loadTrace(a).event_count);
}

// --- Ranks related ---

namespace {
namespace db = trainscope::rundb;

// The layout's rows of `rank`'s collectives track that y lies in (any lane).
bool inCollectivesRow(const nlohmann::json& l, int64_t rank, float y) {
  for (const auto& r : l["rows"])
    if (r["rank"] == rank && r["label"] == "collectives" && y >= float(r["y0"]) && y <= float(r["y1"])) return true;
  return false;
}

std::vector<nlohmann::json> linksFrom(const nlohmann::json& l, const std::string& source) {
  std::vector<nlohmann::json> out;
  for (const auto& k : l["links"])
    if (k["source"] == source) out.push_back(k);
  return out;
}

int64_t sqlInt(db::Database& d, const std::string& sql, std::initializer_list<int64_t> args) {
  db::Statement q(d, sql);
  int i = 1;
  for (int64_t a : args) q.bind(i++, a);
  EXPECT_TRUE(q.step()) << sql;
  return q.columnInt(0);
}
}  // namespace

// A real DP = 2 run: the selected all-reduce is linked to the other rank's copy of the same call, with
// the skew SQL computes over the collectives table; the link is drawn from one copy's start to the
// other's; Details and `trainscope report` give the same skew; each rank's header names its coordinates.
TEST(ViewerApp, ASelectedAllReduceOfARealDpRunLinksToTheOtherRank) {
  const std::string run = tempPath("dp2_run.db");
  auto r = trainscope::testing::cli("run --workload tiny --seq 16 --mbs 2 --steps 3 --nproc 2 --device cpu --trace " +
                                    run + " --trace-level ranges --overwrite -q");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string script = tempPath("select_all_reduce.txt");
  std::ofstream(script) << "select \"all_reduce (dp)\" 2\nframes 2\n";
  Shot s = shoot(run, "--script " + script, "dp2_links");
  ASSERT_EQ(s.run.status, 0) << s.run.output;

  std::map<int64_t, std::string> header;
  for (const auto& h : s.layout["headers"]) header[h["rank"]] = h["text"];
  EXPECT_NE(header[0].find("rank 0  dp 0 tp 0 pp 0"), std::string::npos) << header[0];
  EXPECT_NE(header[1].find("rank 1  dp 1 tp 0 pp 0"), std::string::npos) << header[1];

  const auto sel = linksFrom(s.layout, "selection");
  ASSERT_EQ(sel.size(), 1u) << s.layout["links"].dump();
  const nlohmann::json& l = sel[0];
  EXPECT_EQ(l["kind"], "collective");
  const int64_t from = l["from_rank"], to = l["to_rank"], from_start = l["from_start_ns"];
  EXPECT_EQ(from + to, 1);  // rank 0 to rank 1 or back
  db::Database d(run, db::Database::Mode::ReadOnly);
  const int64_t seq = sqlInt(d, "SELECT seq FROM collectives WHERE op = 'all_reduce' AND grp = 'dp' AND rank = ?1 AND "
                                "start_ns = ?2", {from, from_start});
  const std::string of_call = " FROM collectives WHERE op = 'all_reduce' AND grp = 'dp' AND seq = ?1";
  EXPECT_EQ(sqlInt(d, "SELECT COUNT(*)" + of_call, {seq}), 2);
  const int64_t skew = sqlInt(d, "SELECT MAX(start_ns) - MIN(start_ns)" + of_call, {seq});
  EXPECT_EQ(l["skew_ns"], skew);
  const int64_t to_start = sqlInt(d, "SELECT start_ns" + of_call + " AND rank = ?2", {seq, to});
  EXPECT_EQ(l["to_start_ns"], to_start);
  // The to copy waited for the last arrival: zero if it was the last.
  EXPECT_EQ(l["wait_ns"], sqlInt(d, "SELECT MAX(start_ns)" + of_call, {seq}) - to_start);
  // Drawn from one copy's start to the other's, in the two ranks' collectives rows.
  EXPECT_NEAR(float(l["x0"]), xOf(s.layout, from_start), 1.0);
  EXPECT_NEAR(float(l["x1"]), xOf(s.layout, to_start), 1.0);
  EXPECT_TRUE(inCollectivesRow(s.layout, from, l["y0"]));
  EXPECT_TRUE(inCollectivesRow(s.layout, to, l["y1"]));
  // Details: the same skew, exactly.
  const std::string details_skew = s.layout["details"]["arrival skew"];
  EXPECT_EQ(details_skew.rfind(v::formatExact(skew), 0), 0u) << details_skew;
  // The report's largest all-reduce skew is SQL's over every call.
  const int64_t max_skew = sqlInt(d, "SELECT MAX(s) FROM (SELECT MAX(start_ns) - MIN(start_ns) AS s FROM collectives "
                                     "WHERE op = 'all_reduce' AND grp = 'dp' GROUP BY seq)", {});
  r = trainscope::testing::cli("report " + run + " --json");
  ASSERT_EQ(r.status, 0) << r.output;
  bool found = false;
  const nlohmann::json report = nlohmann::json::parse(r.output);
  for (const auto& c : report["collectives"])
    if (c["op"] == "all_reduce" && c["group"] == "dp") {
      found = true;
      EXPECT_NEAR(c["skew_max_s"].get<double>(), double(max_skew) * 1e-9, 1e-12);
      EXPECT_EQ(c["linked_calls"], sqlInt(d, "SELECT COUNT(DISTINCT seq)" + of_call.substr(0, of_call.find(" AND seq")), {}));
    }
  EXPECT_TRUE(found) << r.output;
}

// A real PP = 2 run: every send on screen has an arrow to the receive that took its data — the receive
// of the other stage with the same place in that stage's receives (one peer each at PP = 2) — drawn
// from the send's start to the receive's end.
TEST(ViewerApp, PipelineSendsOfARealRunPointToTheirReceives) {
  const std::string run = tempPath("pp2_run.db");
  auto r = trainscope::testing::cli("run --workload tiny --seq 16 --mbs 1 --gbs 2 --steps 2 --nproc 2 --pp 2 --device cpu "
                                    "--trace " + run + " --trace-level ranges --overwrite -q");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string script = tempPath("pp2_step.txt");
  std::ofstream(script) << "step 1\nframes 2\n";
  Shot s = shoot(run, "--script " + script, "pp2_links");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  const auto sends = linksFrom(s.layout, "send");
  ASSERT_GE(sends.size(), 2u) << s.layout["links"].dump();
  std::set<std::pair<int64_t, int64_t>> directions;
  db::Database d(run, db::Database::Mode::ReadOnly);
  for (const auto& l : sends) {
    const int64_t from = l["from_rank"], to = l["to_rank"];
    directions.insert({from, to});
    EXPECT_EQ(l["kind"], "p2p");
    // The k-th send of `from` and the k-th receive of `to`, counted in call order.
    const int64_t k = sqlInt(d, "SELECT COUNT(*) FROM collectives WHERE op = 'send' AND rank = ?1 AND seq < (SELECT seq "
                                "FROM collectives WHERE op = 'send' AND rank = ?1 AND start_ns = ?2)",
                             {from, int64_t(l["from_start_ns"])});
    const int64_t kr = sqlInt(d, "SELECT COUNT(*) FROM collectives WHERE op = 'recv' AND rank = ?1 AND seq < (SELECT seq "
                                 "FROM collectives WHERE op = 'recv' AND rank = ?1 AND start_ns = ?2)",
                              {to, int64_t(l["to_start_ns"])});
    EXPECT_EQ(k, kr);
    const int64_t recv_end = sqlInt(d, "SELECT end_ns FROM collectives WHERE op = 'recv' AND rank = ?1 AND start_ns = ?2",
                                    {to, int64_t(l["to_start_ns"])});
    EXPECT_NEAR(float(l["x0"]), xOf(s.layout, l["from_start_ns"]), 1.0);
    EXPECT_NEAR(float(l["x1"]), xOf(s.layout, recv_end), 1.0);
  }
  EXPECT_EQ(directions, (std::set<std::pair<int64_t, int64_t>>{{0, 1}, {1, 0}}));  // activations and gradients
  std::map<int64_t, std::string> header;
  for (const auto& h : s.layout["headers"]) header[h["rank"]] = h["text"];
  EXPECT_NE(header[1].find("dp 0 tp 0 pp 1"), std::string::npos) << header[1];
}

// The part of a collective spent waiting for the last rank is drawn lighter and hatched, the transfer
// solid: rank 1 arrives 0.8 ms into rank 0's 2 ms all-reduce.
TEST(ViewerApp, ACollectivesWaitIsDrawnApartFromItsTransfer) {
  const std::string path = tempPath("wait.db");
  const int64_t t0 = 1'700'000'000'000'000'000;
  {
    db::RunStore store(path, db::RunStore::Options{true});
    store.setMeta("world_size", "2");
    store.setMeta("config", R"({"world":2,"dp":2,"tp":1,"pp":1,"ga":1})");
    auto row = [&](int64_t rank, int64_t start) {
      db::Collective c;
      c.rank = rank, c.op = "all_reduce", c.group = "dp", c.group_size = 2, c.seq = 0, c.bytes = 1 << 20;
      c.start_ns = t0 + start, c.end_ns = t0 + 2'000'000;
      return c;
    };
    store.appendCollectives({row(0, 0), row(1, 800'000)});
  }
  Shot s = shoot(path, "--view 0:2.5ms", "wait_hatch");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  const uint32_t solid = v::nameColor(v::EventKind::Collective, "all_reduce (dp)");
  int checked = 0;
  for (const auto& b : s.layout["boxes"]) {
    if (b["kind"] != "collective") continue;
    const auto& row = s.layout["rows"][size_t(b["row"])];
    const int64_t rank = row["rank"];
    const float x0 = b["x0"], x1 = b["x1"], wait_x1 = b["wait_x1"];
    const int y = int((float(row["y0"]) + float(row["y1"])) / 2);
    auto solidShare = [&](float a, float e) {  // the share of pixels of [a, e) at y in the solid colour
      int n = 0, same = 0;
      for (int x = int(a); x < int(e); ++x, ++n) same += s.img.pixel(x, y) == solid;
      return n ? double(same) / n : -1.0;
    };
    const float label_end = x0 + 150;  // the name is written over the box's start
    if (rank == 0) {
      EXPECT_NEAR(wait_x1, xOf(s.layout, t0 + 800'000), 1.0);
      EXPECT_EQ(solidShare(label_end, wait_x1 - 3), 0.0);  // lighter and hatched throughout
      std::set<uint32_t> colours;
      for (int x = int(label_end); x < int(wait_x1) - 3; ++x) colours.insert(s.img.pixel(x, y));
      EXPECT_GE(colours.size(), 2u);  // the hatching
      EXPECT_GT(solidShare(wait_x1 + 3, x1 - 3), 0.95);
    } else {
      EXPECT_EQ(wait_x1, x0);  // the last to arrive: no wait
      EXPECT_GT(solidShare(label_end, x1 - 3), 0.95);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

// --- Track control and two runs on the timeline (tracks.h) ---

namespace {

Shot shootAt(const std::string& files, const std::string& script_text, const std::string& name, const std::string& size) {
  ensureDisplay();
  const std::string script = tempPath(name + ".txt");
  std::ofstream(script) << script_text;
  Shot s;
  const std::string png = tempPath(name + ".png"), layout = tempPath(name + ".json");
  s.run = sh(kViewer + " " + files + " --screenshot " + png + " --layout " + layout + " --size " + size + " --script " +
             script);
  if (s.run.status == 0) {
    s.img = v::readPng(png);
    s.layout = nlohmann::json::parse(std::ifstream(layout));
  }
  return s;
}

// The x of run `doc`'s rank-0 step box that starts nearest `x` (the steps row), or -1e9.
float stepBoxX(const nlohmann::json& l, int doc, float x) {
  float best = -1e9f;
  for (const auto& b : l["boxes"]) {
    const auto& r = l["rows"][b["row"].get<size_t>()];
    if (r["doc"] != doc || r["rank"] != 0 || r["label"] != "steps" || b["kind"] != "step") continue;
    if (std::abs(float(b["x0"]) - x) < std::abs(best - x)) best = b["x0"];
  }
  return best;
}

}  // namespace

// A collapsed rank is its header alone: rank 1 follows right under it; hidden and pinned tracks, and
// the split, as the script set them.
TEST(ViewerApp, ACollapsedRankIsItsHeaderAlone) {
  const std::string db = trace();
  const Shot s = shootAt(db, "collapse 0\npin 1 memory\nhide 1 collectives\nsplit 0.2\n", "collapsed", "1400x800");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  std::map<int64_t, nlohmann::json> header;
  for (const auto& h : s.layout["headers"]) header[h["rank"]] = h;
  ASSERT_TRUE(header.count(0) && header.count(1)) << s.layout["headers"].dump();
  EXPECT_TRUE(header[0]["collapsed"].get<bool>());
  EXPECT_FALSE(header[1]["collapsed"].get<bool>());
  EXPECT_FLOAT_EQ(float(header[1]["y"]), float(header[0]["y"]) + 22);
  for (const auto& r : s.layout["rows"]) {
    EXPECT_NE(r["rank"], 0) << "a row of the collapsed rank: " << r.dump();
    EXPECT_NE(r["label"], "collectives") << "a hidden track drawn: " << r.dump();
  }
  // On screen: right under rank 0's header is rank 1's header, not rank 0's steps.
  const int x = int(float(s.layout["timeline"]["x0"]) + 50);
  EXPECT_EQ(s.img.pixel(x, int(float(header[0]["y"]) + 23)), s.img.pixel(x, int(float(header[1]["y"]) + 1)));
  // The pinned memory counter sits in a band above the ranks, the panel takes a fifth of the window.
  bool pinned = false;
  for (const auto& t : s.layout["tracks"])
    if (t["pinned"].get<bool>() && t["rank"] == 1 && t["label"] == "memory") {
      pinned = true;
      EXPECT_LT(float(t["y1"]), float(header[0]["y"]) + 1);
    }
  EXPECT_TRUE(pinned) << s.layout["tracks"].dump();
  EXPECT_GT(float(s.layout["panel_y0"]), 800 * 0.72f);
}

// Two runs at 1920x1080: run B's rank 0 is drawn right under run A's, on screen, lined up at the step
// in view — and re-lined up when `[` moves to the previous step (B's steps are longer than A's, so the
// offset changes).
TEST(ViewerApp, RunBIsBesideRunAAt1080pAndFollowsTheStep) {
  const std::string a = trace();
  const std::string b = tempPath("beside_b.db");
  v::writeSyntheticTrace(b, {2, 9'000, 3, v::SyntheticOptions{}.start_ns + 3'000'000'000});
  const v::Trace ta = v::loadTrace(a), tb = v::loadTrace(b);
  const Shot at2 = shootAt(a + " " + b, "step 2\n", "beside2", "1920x1080");
  const Shot at1 = shootAt(a + " " + b, "step 2\n[\n", "beside1", "1920x1080");
  for (const Shot* s : {&at2, &at1}) {
    ASSERT_EQ(s->run.status, 0) << s->run.output;
    ASSERT_EQ(s->img.height, 1080);
    // B's rank-0 header is on screen, below A's rank 0 and above A's rank 1.
    std::map<std::pair<int, int64_t>, float> head;
    for (const auto& h : s->layout["headers"]) head[std::make_pair(h["doc"].get<int>(), h["rank"].get<int64_t>())] = h["y"];
    const auto a0 = std::make_pair(0, int64_t(0)), b0 = std::make_pair(1, int64_t(0)), a1 = std::make_pair(0, int64_t(1));
    ASSERT_TRUE(head.count(b0)) << s->layout["headers"].dump();
    EXPECT_GT(head[b0], head[a0]);
    if (head.count(a1)) EXPECT_LT(head[b0], head[a1]);
    EXPECT_LT(head[b0] + 100, float(s->layout["timeline"]["y1"]));
    EXPECT_TRUE(s->layout["alignment"]["ok"].get<bool>());
  }
  EXPECT_EQ(at2.layout["alignment"]["step"], 2);
  EXPECT_EQ(at2.layout["alignment"]["offset_ns"], *ta.stepStart(2) - *tb.stepStart(2));
  EXPECT_EQ(at1.layout["alignment"]["step"], 1);
  EXPECT_EQ(at1.layout["alignment"]["offset_ns"], *ta.stepStart(1) - *tb.stepStart(1));
  EXPECT_NE(at1.layout["alignment"]["offset_ns"], at2.layout["alignment"]["offset_ns"]);
  // On screen: A's and B's step 1 boxes start at the same x (A's rank 0 starts the step first).
  const float xa = xOf(at1.layout, *ta.stepStart(1, 0));
  EXPECT_NEAR(stepBoxX(at1.layout, 0, xa), xa, 1.5f);
  const float xb = stepBoxX(at1.layout, 1, xa);
  EXPECT_NEAR(xb, xOf(at1.layout, *tb.stepStart(1, 0) + *ta.stepStart(1) - *tb.stepStart(1)), 1.5f);
}

// A run without steps cannot be lined up at one: the timeline says so, in words, over the rows.
TEST(ViewerApp, ImpossibleAlignmentIsSaidOnScreen) {
  const Shot s = shootAt(trace() + " " + longRun(), "step 1\n", "no_align", "1400x800");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  const auto& al = s.layout["alignment"];
  EXPECT_FALSE(al["ok"].get<bool>());
  EXPECT_TRUE(al["drawn"].get<bool>());
  EXPECT_NE(al["message"].get<std::string>().find("Cannot align run B with run A at step 1: run B has no steps"),
            std::string::npos)
      << al.dump();
  // The message's red box is where the rows begin, at the right.
  const int x1 = int(float(s.layout["timeline"]["x1"])), y0 = int(float(s.layout["timeline"]["y0"])) + 20;
  int red = 0;
  for (int y = y0; y < y0 + 30; ++y)
    for (int x = x1 - 250; x < x1 - 50; ++x) {
      const uint32_t p = s.img.pixel(x, y);
      red += (p & 0xff) > 100 && ((p >> 8) & 0xff) < 60 && ((p >> 16) & 0xff) < 60;
    }
  EXPECT_GT(red, 1000);
}

// Two runs: the Compare tab's per-name diff over the aligned step is B − A of each run's statistics
// over that step, written by `csv diff`; a step run A lacks is said, not guessed.
TEST(ViewerApp, ThePerNameDiffOfTwoRuns) {
  const std::string a = trace(), b = tempPath("diff_b.db");
  if (!std::filesystem::exists(b)) v::writeSyntheticTrace(b, {2, 9'000, 3, v::SyntheticOptions{}.start_ns + 3'000'000'000});
  const std::string csv = tempPath("diff.csv"), script = tempPath("diff.txt");
  std::ofstream(script) << "step 1\ndiff step\nframes 2\ncsv diff " << csv << "\n";
  const Shot s = shoot(a + " " + b, "--script " + script, "diff_step");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  const v::Trace ta = v::loadTrace(a), tb = v::loadTrace(b);
  const v::RunDiff want = v::diffRuns(ta, tb, int64_t(1));
  const auto& got = s.layout["diff"];
  ASSERT_EQ(got["step"], 1) << got.dump();
  ASSERT_EQ(got["rows"].size(), want.rows.size());
  bool changed = false;
  for (size_t i = 0; i < want.rows.size(); ++i) {
    EXPECT_EQ(got["rows"][i]["name"], want.rows[i].name);
    EXPECT_EQ(got["rows"][i]["delta_ns"], want.rows[i].delta_ns());
    EXPECT_EQ(got["rows"][i]["a_count"], want.rows[i].a_count);
    changed |= want.rows[i].delta_ns() != 0;
  }
  EXPECT_TRUE(changed);  // B has more layers per step
  std::ifstream in(csv);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(line, "group,name,a_count,b_count,a_ns,b_ns,delta_ns");
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_NE(line.find("," + std::to_string(want.rows[0].delta_ns())), std::string::npos) << line;
  std::ofstream(script) << "step 9\ndiff step\nframes 2\n";
  const Shot m = shoot(a + " " + b, "--script " + script, "diff_missing");
  ASSERT_EQ(m.run.status, 0) << m.run.output;
  EXPECT_NE(m.layout["diff"]["error"].get<std::string>().find("step 9 is not in run A"), std::string::npos)
      << m.layout["diff"].dump();
}

// A selected kernel on a pinned track is outlined in the pinned band, where its row is drawn (the
// overlays are drawn in the scrolled rows' child, whose clip used to hide the band).
TEST(ViewerApp, ASelectionOnAPinnedTrackIsOutlinedInTheBand) {
  const std::string script =
      "pin 0 \"stream 7 (device 0)\"\npin 1 \"stream 7 (device 0)\"\nselect ampere_sgemm_128x64_tn 7\n";
  const Shot s = shootAt(trace(), script, "pinned_selection", "1400x800");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  ASSERT_TRUE(s.layout["selection"].get<bool>());
  int bands = 0, white = 0;
  for (const auto& t : s.layout["tracks"]) {
    if (!t["pinned"].get<bool>() || t["label"] != "stream 7 (device 0)") continue;
    ++bands;
    for (int y = int(t["y0"].get<float>()); y < int(t["y1"].get<float>()); ++y)
      for (int x = int(s.layout["timeline"]["x0"].get<float>()); x < s.img.width; ++x)
        white += s.img.pixel(x, y) == v::palette::kSelection;
  }
  EXPECT_EQ(bands, 2) << s.layout["tracks"].dump();
  EXPECT_GT(white, 8);  // the outline's edges, 2 px thick
}

// A study opens alone: given with a run (either order) or a second study, the viewer used to exit 0
// showing the run with the study's tab beside it, so `view A.db STUDY.db` meant as a comparison
// compared nothing and said nothing (audit 2026-12-07). Now: the study named and exit 2; and
// dropped together, the open prompt says so and what was open stays.
TEST(ViewerApp, AStudyGivenWithAnotherFileIsRefusedWithTheStudyNamed) {
  const std::string run = trace();
  const std::string study = tempPath("mixed_study.db");
  if (!std::filesystem::exists(study)) makeStudy(study, run);
  for (const std::string files : {study + " " + run, run + " " + study, study + " " + study}) {
    const auto r = guarded(files + " --screenshot " + tempPath("mixed.png"));
    EXPECT_EQ(r.status, 2) << files << ": " << r.output;
    EXPECT_NE(r.output.find(study + " is a tuner study, which opens alone"), std::string::npos) << r.output;
  }
  const std::string script = tempPath("mixed_drop.txt");
  std::ofstream(script) << "drop " << run << " " << study << "\n";
  const Shot s = shoot(run, "--script " + script, "mixed_drop");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  EXPECT_NE(s.layout["open_error"].get<std::string>().find("is a tuner study"), std::string::npos) << s.layout["open_error"];
  EXPECT_EQ(s.layout["events"], v::loadTrace(run).event_count);  // the run stays open
}
