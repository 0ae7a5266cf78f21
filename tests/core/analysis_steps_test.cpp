// analysis_steps_test.cpp — why a step took its time, on hand-built runs with hand-computed numbers
// and on a real DP 2 run with an injected slow rank: waiting for a peer and the pipeline bubble split
// from communication (summary breakdown, per step, `report` text and --json, the viewer's Steps tab),
// the straggler of each step named with what it did instead, and the memory row's peak read as
// Summary defines it.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "../common/workload_files.h"
#include "trainscope/rundb/range_names.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/report.h"
#include "trainscope/rundb/store.h"
#include "trainscope/rundb/summary.h"
#include "trainscope/viewer/model.h"
#include "trainscope/viewer/step_view.h"
#include "trainscope/viewer/comm.h"
#include "trainscope/viewer/view_state.h"
#include "viewer_app_support.h"

namespace db = trainscope::rundb;
using trainscope::testing::tempPath;

namespace {

db::Collective coll(int64_t rank, const std::string& op, const std::string& group, int64_t seq, int64_t start, int64_t end) {
  db::Collective c;
  c.rank = rank, c.op = op, c.group = group, c.group_size = 2, c.seq = seq, c.bytes = 4096;
  c.start_ns = start, c.end_ns = end;
  return c;
}

// Two ranks, two steps [0, 1000) and [1000, 2000) (step 0 left out as warm-up); `config` the layout;
// `each_step(step, t0, ranges, collectives)` adds a step's rows, t0 its start.
void makeRun(const std::string& path, const std::string& config,
             const std::function<void(int, int64_t, std::vector<db::Range>&, std::vector<db::Collective>&)>& each_step) {
  db::RunStore store(path, db::RunStore::Options{true});
  store.setMeta("world_size", "2");
  store.setMeta("config", config);
  store.putStrings({{0, db::names::kForward}, {1, db::names::kBackward}, {2, "trainscope"}, {3, "slow_thing"}});
  std::vector<db::Range> ranges;
  std::vector<db::Collective> colls;
  for (int k = 0; k < 2; ++k) {
    for (int rank = 0; rank < 2; ++rank) {
      db::Step s;
      s.rank = rank, s.step = k, s.start_ns = k * 1000, s.step_time_ns = 1000, s.tokens = 100;
      store.appendStep(s);
    }
    each_step(k, k * 1000, ranges, colls);
  }
  store.begin();
  store.put(ranges);
  store.commit();
  store.appendCollectives(colls);
  store.createIndexes();
}

db::Range range(int64_t rank, db::StringId name, int64_t start, int64_t end) {
  return db::Range{start, end, name, 2, 1, 1, 0, rank};
}

}  // namespace

// DP 2: rank 0 computes [100, 300) and enters the all-reduce at 300; rank 1 computes [100, 700) and
// arrives at 700 (rank 1 also runs "slow_thing" [400, 700) inside); both end at 900. Rank 0's
// all-reduce is 400 ns of waiting for rank 1 and 200 of transfer — before, all 600 read as "comm".
TEST(AnalysisSteps, WaitingForAPeerIsSplitFromCommunication) {
  const std::string path = tempPath("wait_split.db");
  makeRun(path, R"({"workload":"hand-built","world":2,"dp":2,"tp":1,"pp":1,"ga":1})",
          [](int k, int64_t t0, std::vector<db::Range>& r, std::vector<db::Collective>& c) {
            r.push_back(range(0, 0, t0 + 100, t0 + 300));
            r.push_back(range(1, 0, t0 + 100, t0 + 700));
            r.push_back(range(1, 3, t0 + 400, t0 + 700));
            c.push_back(coll(0, "all_reduce", "dp", k, t0 + 300, t0 + 900));
            c.push_back(coll(1, "all_reduce", "dp", k, t0 + 700, t0 + 900));
          });
  const db::Report r = db::computeReport(path);
  ASSERT_EQ(r.summary.ranks.size(), 2u);
  const db::Breakdown& b0 = *r.summary.ranks[0].breakdown;
  EXPECT_DOUBLE_EQ(b0.compute_s, 200e-9);
  EXPECT_DOUBLE_EQ(b0.comm_s, 600e-9);
  EXPECT_DOUBLE_EQ(b0.wait_s, 400e-9);
  EXPECT_DOUBLE_EQ(b0.bubble_s, 0);
  EXPECT_DOUBLE_EQ(b0.exposedCommS(), 200e-9);
  EXPECT_DOUBLE_EQ(b0.idle_s, 200e-9);
  const db::Breakdown& b1 = *r.summary.ranks[1].breakdown;
  EXPECT_DOUBLE_EQ(b1.wait_s, 0);
  EXPECT_DOUBLE_EQ(b1.exposedCommS(), 200e-9);
  // Per step, per rank: the counted step 1 only.
  ASSERT_EQ(r.summary.ranks[0].per_step.size(), 1u);
  EXPECT_EQ(r.summary.ranks[0].per_step[0].step, 1);
  EXPECT_DOUBLE_EQ(r.summary.ranks[0].per_step[0].b.wait_s, 400e-9);
  // The straggler: rank 1, last by 400 ns, doing slow_thing (400 ns) where rank 0 did none.
  ASSERT_EQ(r.summary.step_stragglers.size(), 1u);
  const db::StepStraggler& st = r.summary.step_stragglers[0];
  EXPECT_EQ(st.step, 1);
  EXPECT_EQ(st.rank, 1);
  EXPECT_EQ(st.calls, 1);
  EXPECT_EQ(st.calls_last, 1);
  EXPECT_DOUBLE_EQ(st.late_s, 400e-9);
  EXPECT_DOUBLE_EQ(st.others_wait_s, 400e-9);
  ASSERT_FALSE(st.doing.empty());
  EXPECT_EQ(st.doing[0].name, "forward");  // 600 against 200: the largest excess
  EXPECT_DOUBLE_EQ(st.doing[0].straggler_s - st.doing[0].others_s, 400e-9);
  ASSERT_GE(st.doing.size(), 2u);
  EXPECT_EQ(st.doing[1].name, "slow_thing");
  EXPECT_DOUBLE_EQ(st.doing[1].others_s, 0);

  const std::string text = db::formatReport(r);
  EXPECT_NE(text.find("straggler: rank 1, last at 1 of 1 linked collective(s)"), std::string::npos) << text;
  EXPECT_NE(text.find("instead: slow_thing"), std::string::npos) << text;
  EXPECT_NE(text.find("(wait  bubble)"), std::string::npos) << text;
  const auto j = nlohmann::json::parse(db::reportJson(r));
  ASSERT_EQ(j["steps"].size(), 1u) << j["steps"].dump();
  const auto& js = j["steps"][0];
  EXPECT_EQ(js["step"], 1);
  EXPECT_EQ(js["straggler"]["rank"], 1);
  EXPECT_DOUBLE_EQ(js["straggler"]["late_s"].get<double>(), 400e-9);
  ASSERT_EQ(js["ranks"].size(), 2u);
  EXPECT_DOUBLE_EQ(js["ranks"][0]["wait_s"].get<double>(), 400e-9);
  EXPECT_DOUBLE_EQ(js["ranks"][0]["exposed_comm_s"].get<double>(), 200e-9);
  const auto& jp = js["critical_path"]["segments"];
  ASSERT_EQ(jp.size(), 3u);
  EXPECT_DOUBLE_EQ(jp[0]["share"].get<double>(), 0.7);
  EXPECT_EQ(jp[1]["peer"], 1);
  EXPECT_NE(text.find("critical path (0.00 ms, 3 segment(s))"), std::string::npos) << text;
  EXPECT_DOUBLE_EQ(j["summary"]["ranks"][0]["breakdown"]["wait_s"].get<double>(), 400e-9);

  // The critical path of step 1: rank 1's work until it arrives (700 ns, forward covering most),
  // the all-reduce's transfer on rank 0 after rank 1's arrival (200), rank 0's tail (100).
  ASSERT_EQ(r.summary.critical_paths.size(), 1u);
  const auto& cp = r.summary.critical_paths[0];
  ASSERT_EQ(cp.segments.size(), 3u);
  EXPECT_EQ(cp.start_ns, 1000);
  EXPECT_EQ(cp.end_ns, 2000);
  const auto& g = cp.segments;
  EXPECT_EQ(g[0].rank, 1);
  EXPECT_EQ(g[0].kind, "work");
  EXPECT_EQ(g[0].name, "forward");
  EXPECT_EQ(g[0].start_ns, 1000);
  EXPECT_EQ(g[0].end_ns, 1700);
  EXPECT_EQ(g[1].rank, 0);
  EXPECT_EQ(g[1].kind, "transfer");
  EXPECT_EQ(g[1].name, "all_reduce (dp)");
  EXPECT_EQ(g[1].start_ns, 1700);
  EXPECT_EQ(g[1].end_ns, 1900);
  EXPECT_EQ(g[1].peer, 1);
  EXPECT_EQ(g[2].rank, 0);
  EXPECT_EQ(g[2].kind, "work");
  EXPECT_EQ(g[2].start_ns, 1900);
  EXPECT_EQ(g[2].end_ns, 2000);

  // The viewer: the Steps tab's rank line names the wait apart from comm, and the straggler's line.
  const std::string script = tempPath("wait_split.txt");
  std::ofstream(script) << "tab steps\nframes 2\n";
  const Shot s = shoot(path, "--script " + script, "wait_split");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  std::vector<std::string> lines;
  for (const auto& l : s.layout["steps_text"]["lines"]) lines.push_back(l["text"]);
  ASSERT_GE(lines.size(), 3u) << s.layout["steps_text"].dump();
  namespace vv = trainscope::viewer;
  EXPECT_NE(lines[0].find(vv::formatDuration(200) + " comm, " + vv::formatDuration(400) + " wait"), std::string::npos)
      << lines[0];
  EXPECT_EQ(lines[2], vv::stragglerLines(r.summary)[0]);
  EXPECT_EQ(lines[2].rfind("step 1: straggler rank 1", 0), 0u) << lines[2];
  // The critical path listed with each segment's share, and drawn over the steps rows: rank 1's
  // work, then rank 0's transfer and tail.
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[3], vv::criticalPathLines(r.summary)[0]);
  EXPECT_NE(lines[3].find("rank 1 work " + vv::formatDuration(700) + " 70.0% (forward) > rank 0 all_reduce (dp) " +
                          vv::formatDuration(200) + " 20.0% (waited for rank 1)"),
            std::string::npos)
      << lines[3];
  auto drawn = nlohmann::json::array(), tags = nlohmann::json::array();
  for (const auto& g : s.layout["critical_path"]) (g["kind"] == "straggler" ? tags : drawn).push_back(g);
  ASSERT_EQ(tags.size(), 1u) << s.layout["critical_path"].dump();  // the straggler's tag on rank 1's step 1
  EXPECT_EQ(tags[0]["rank"], 1);
  EXPECT_EQ(tags[0]["step"], 1);
  EXPECT_NEAR(tags[0]["x0"].get<float>(), xOf(s.layout, 1000), 1.0);
  ASSERT_EQ(drawn.size(), 3u) << drawn.dump();
  EXPECT_EQ(drawn[0]["rank"], 1);
  EXPECT_EQ(drawn[0]["kind"], "work");
  EXPECT_NEAR(drawn[0]["x0"].get<float>(), xOf(s.layout, 1000), 1.0);
  EXPECT_NEAR(drawn[0]["x1"].get<float>(), xOf(s.layout, 1700), 1.0);
  EXPECT_EQ(drawn[1]["rank"], 0);
  EXPECT_EQ(drawn[1]["kind"], "transfer");
  EXPECT_NEAR(drawn[2]["x1"].get<float>(), xOf(s.layout, 2000), 1.0);
  EXPECT_NE(drawn[0]["y"].get<float>(), drawn[1]["y"].get<float>());  // on each rank's own steps row

  // Details of rank 0's step 1: its breakdown, the straggler and the path with each segment's share.
  const std::string step_script = tempPath("wait_split_step.txt");
  std::ofstream(step_script) << "select \"step 1\" 0\ntab details\nframes 2\n";
  const Shot ss = shoot(path, "--script " + step_script, "wait_split_step");
  ASSERT_EQ(ss.run.status, 0) << ss.run.output;
  const auto& d = ss.layout["details"];
  ASSERT_TRUE(d.contains("critical path")) << d.dump();
  EXPECT_EQ(d["path 1"], "70.0% rank 1 work " + vv::formatDuration(700) + " (forward)");
  EXPECT_EQ(d["path 2"], "20.0% rank 0 transfer " + vv::formatDuration(200) + " (all_reduce (dp)), waited for rank 1");
  EXPECT_EQ(d["straggler"].get<std::string>().rfind("straggler rank 1", 0), 0u) << d.dump();
  const int64_t waited = d.value("rank", "") == "0" ? 400 : 0;  // rank 0 waited for rank 1
  EXPECT_NE(d["this step on this rank"].get<std::string>().find(vv::formatDuration(double(waited)) + " waiting for a peer"),
            std::string::npos)
      << d.dump();

  // Range Details: step 1's window selected, each rank's time with the wait apart — the same numbers.
  const vv::Trace t = vv::loadTrace(path);
  const auto rb = vv::rangeBreakdown(t, 1000, 2000);
  ASSERT_EQ(rb.size(), 2u);
  EXPECT_EQ(rb[0].rank, 0);
  EXPECT_DOUBLE_EQ(rb[0].b.wait_s, 400e-9);
  EXPECT_DOUBLE_EQ(rb[0].b.exposedCommS(), 200e-9);
  EXPECT_DOUBLE_EQ(rb[0].b.compute_s, 200e-9);
  EXPECT_DOUBLE_EQ(rb[1].b.wait_s, 0);
  EXPECT_DOUBLE_EQ(rb[1].b.compute_s, 600e-9);
  const std::string range_script = tempPath("wait_split_range.txt");
  std::ofstream(range_script) << "range 1us 2us\ntab details\nframes 2\n";
  const Shot rs = shoot(path, "--script " + range_script, "wait_split_range");
  ASSERT_EQ(rs.run.status, 0) << rs.run.output;
  ASSERT_EQ(rs.layout["range_breakdown"].size(), 2u) << rs.layout.dump();
  EXPECT_DOUBLE_EQ(rs.layout["range_breakdown"][0]["wait_s"].get<double>(), 400e-9);
}

// PP 2, 1F1B, one micro-batch: stage 1's receive [10, 160) waits for stage 0's send at 100 (90 ns of
// bubble); stage 0's receive of the gradient [150, 460) waits for stage 1's send at 400 (250 ns).
// A copy that returned before the last member's range began (Gloo's rows on a loaded machine: rank 0's
// all-reduce ends at 650, rank 1's range starts at 700): rank 0 was not held up by rank 1 there, so the
// critical path stays on rank 0 and stays contiguous (before, it jumped to rank 1 at 700, after rank
// 0's next work had begun at 650: overlapping segments whose shares summed past 1).

// The straggler's tag names its step and stays inside the step's box: drawn whole at any width, a
// short step's "straggler +…" covered its "step N" and ran into the next step, where it read as that
// step's (audit 2026-12-07: a real DP 2 run, rank 0's steps 3 and 4, "stragglerstraggler +1.19 ms").
TEST(AnalysisSteps, TheStragglersTagNamesItsStepAndStaysInsideIt) {
  const std::string path = tempPath("straggler_tag.db");
  if (!std::filesystem::exists(path))
    makeRun(path, R"({"workload":"hand-built","world":2,"dp":2,"tp":1,"pp":1,"ga":1})",
            [](int k, int64_t t0, std::vector<db::Range>& r, std::vector<db::Collective>& c) {
              r.push_back(range(0, 0, t0 + 100, t0 + 300));
              r.push_back(range(1, 0, t0 + 100, t0 + 700));
              c.push_back(coll(0, "all_reduce", "dp", k, t0 + 300, t0 + 900));
              c.push_back(coll(1, "all_reduce", "dp", k, t0 + 700, t0 + 900));
            });
  // The tag drawn on rank 1's step 1 (it ends at 2000 ns) in a window `size` wide.
  auto tagOf = [&](const std::string& name, const std::string& size) {
    ensureDisplay();
    const std::string png = tempPath(name + ".png"), layout = tempPath(name + ".json");
    const auto run = sh(kViewer + " " + path + " --screenshot " + png + " --layout " + layout + " --size " + size);
    EXPECT_EQ(run.status, 0) << run.output;
    const nlohmann::json l = run.status == 0 ? nlohmann::json::parse(std::ifstream(layout)) : nlohmann::json();
    if (l.is_object())
      for (const auto& g : l["critical_path"])
        if (g["kind"] == "straggler") return std::make_pair(g, xOf(l, 2000));
    ADD_FAILURE() << l.dump();
    return std::make_pair(nlohmann::json(), 0.f);
  };
  const std::string whole = "step 1: straggler +" + trainscope::viewer::formatDuration(400);
  const auto [wide, wide_end] = tagOf("straggler_tag_wide", "1400x800");
  EXPECT_EQ(wide["label"], whole) << wide.dump();
  EXPECT_LE(wide["x1"].get<float>(), wide_end + 0.5f) << wide.dump();
  // 420 px wide: the step is about 80 px, too narrow for the whole tag: the figure is kept.
  const auto [narrow, narrow_end] = tagOf("straggler_tag_narrow", "420x300");
  EXPECT_EQ(narrow["label"], "+" + trainscope::viewer::formatDuration(400)) << narrow.dump();
  EXPECT_LE(narrow["x1"].get<float>(), narrow_end + 0.5f) << narrow.dump();
  EXPECT_GT(narrow["x1"].get<float>(), narrow["x0"].get<float>()) << narrow.dump();  // still marked
}

TEST(AnalysisSteps, ACopyThatEndedBeforeTheLastArrivalKeepsThePathOnItsRank) {
  const std::string path = tempPath("early_copy.db");
  makeRun(path, R"({"workload":"hand-built","world":2,"dp":2,"tp":1,"pp":1,"ga":1})",
          [](int k, int64_t t0, std::vector<db::Range>& r, std::vector<db::Collective>& c) {
            r.push_back(range(0, 0, t0 + 100, t0 + 300));
            r.push_back(range(0, 1, t0 + 650, t0 + 1000));
            r.push_back(range(1, 0, t0 + 100, t0 + 700));
            c.push_back(coll(0, "all_reduce", "dp", k, t0 + 300, t0 + 650));
            c.push_back(coll(1, "all_reduce", "dp", k, t0 + 700, t0 + 900));
          });
  const db::Report r = db::computeReport(path);
  ASSERT_EQ(r.summary.critical_paths.size(), 1u);
  const auto& cp = r.summary.critical_paths[0];
  ASSERT_FALSE(cp.segments.empty());
  int64_t at = cp.start_ns;
  for (const auto& g : cp.segments) {
    EXPECT_EQ(g.start_ns, at) << g.kind << " " << g.name << " on rank " << g.rank;  // contiguous
    EXPECT_EQ(g.rank, 0) << g.kind << " " << g.name;
    at = g.end_ns;
  }
  EXPECT_EQ(at, cp.end_ns);
}

TEST(AnalysisSteps, PipelineWaitsAreTheBubbleNotCommunication) {
  const std::string path = tempPath("bubble.db");
  makeRun(path, R"({"workload":"hand-built","world":2,"dp":1,"tp":1,"pp":2,"ga":1,"pp_schedule":"1f1b"})",
          [](int k, int64_t t0, std::vector<db::Range>& r, std::vector<db::Collective>& c) {
            r.push_back(range(0, 0, t0 + 0, t0 + 100));
            r.push_back(range(0, 1, t0 + 460, t0 + 900));
            r.push_back(range(1, 0, t0 + 160, t0 + 400));
            c.push_back(coll(0, "send", "pp", 2 * k, t0 + 100, t0 + 150));
            c.push_back(coll(0, "recv", "pp", 2 * k + 1, t0 + 150, t0 + 460));
            c.push_back(coll(1, "recv", "pp", 2 * k, t0 + 10, t0 + 160));
            c.push_back(coll(1, "send", "pp", 2 * k + 1, t0 + 400, t0 + 450));
          });
  const db::Report r = db::computeReport(path);
  ASSERT_EQ(r.summary.ranks.size(), 2u);
  EXPECT_DOUBLE_EQ(r.summary.ranks[0].breakdown->bubble_s, 250e-9);
  EXPECT_DOUBLE_EQ(r.summary.ranks[0].breakdown->wait_s, 0);
  EXPECT_DOUBLE_EQ(r.summary.ranks[1].breakdown->bubble_s, 90e-9);
  const auto j = nlohmann::json::parse(db::reportJson(r));
  EXPECT_DOUBLE_EQ(j["steps"][0]["ranks"][1]["bubble_s"].get<double>(), 90e-9);
  // The critical path crosses the pipeline twice: stage 0's forward, the activation's transfer, stage
  // 1's forward, the gradient's transfer, stage 0's backward — 1000 ns, the step.
  ASSERT_EQ(r.summary.critical_paths.size(), 1u);
  const auto& g = r.summary.critical_paths[0].segments;
  ASSERT_EQ(g.size(), 5u);
  const int64_t expect[5][3] = {{0, 1000, 1100}, {1, 1100, 1160}, {1, 1160, 1400}, {0, 1400, 1460}, {0, 1460, 2000}};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(g[i].rank, expect[i][0]) << i;
    EXPECT_EQ(g[i].start_ns, expect[i][1]) << i;
    EXPECT_EQ(g[i].end_ns, expect[i][2]) << i;
    EXPECT_EQ(g[i].kind, i % 2 ? "transfer" : "work") << i;
  }
  EXPECT_EQ(g[1].name, "send -> recv (pp)");
  EXPECT_EQ(g[2].name, "forward");
  EXPECT_EQ(g[4].name, "backward");
  // No collective but sends: no straggler, and why.
  ASSERT_EQ(r.summary.step_stragglers.size(), 1u);
  EXPECT_EQ(r.summary.step_stragglers[0].rank, -1);
  EXPECT_EQ(r.summary.step_stragglers[0].why_none, "no linked collective in this step");
}

// The memory row and Summary read one definition: the allocator's peak over the counted steps (step
// 0's 160 MiB is the warm-up's), with the sampled curve's max (135 MiB) named as such. Before, the
// row said "max 135 MiB" where Summary said 145 MiB.
TEST(AnalysisSteps, TheMemoryRowsPeakIsSummarys) {
  const std::string path = tempPath("memory_peak.db");
  {
    db::RunStore store(path, db::RunStore::Options{true});
    store.setMeta("world_size", "1");
    store.setMeta("config", R"({"workload":"hand-built"})");
    store.putStrings({{0, db::names::kMemoryCounter}});
    const int64_t peaks[3] = {160, 145, 120};
    store.begin();
    for (int k = 0; k < 3; ++k) {
      db::Step s;
      s.rank = 0, s.step = k, s.start_ns = 1'000'000 + k * 1000, s.step_time_ns = 1000, s.tokens = 100;
      s.peak_bytes = peaks[k] << 20;
      store.appendStep(s);
      store.put(db::Counter{1'000'000 + k * 1000 + 10, 0, double((130 + k * 2) << 20), 0});
      store.put(db::Counter{1'000'000 + k * 1000 + 500, 0, double(100 << 20), 0});
    }
    store.commit();
    store.createIndexes();
  }
  const trainscope::viewer::Trace t = trainscope::viewer::loadTrace(path);
  const db::Report r = db::computeReport(path);
  EXPECT_EQ(r.summary.peak_bytes, int64_t(145) << 20);
  const trainscope::viewer::Track* memory = nullptr;
  for (const auto& tr : t.tracks)
    if (tr.label == "memory") memory = &tr;
  ASSERT_NE(memory, nullptr);
  const std::string label = trainscope::viewer::counterLabel(t, *memory);
  namespace vv = trainscope::viewer;
  EXPECT_EQ(label, "peak " + vv::formatBytes(double(int64_t(145) << 20)) + " (allocator, counted steps; sampled max " +
                       vv::formatBytes(double(134 << 20)) + ")");
}

// A real DP 2 run whose rank 1 does 300 ms of extra work at the start of every step
// (TRAINSCOPE_TEST_SLOW_RANK, runtime/src/train/test_slow_rank.h): the collectives make both ranks'
// steps equally long, yet every counted step names rank 1 as the straggler, doing test/slow_rank.
TEST(AnalysisSteps, AnInjectedSlowRankOfARealDpRunIsNamed) {
  const std::string run = tempPath("slow_rank.db");
  const auto r = trainscope::testing::sh("TRAINSCOPE_TEST_SLOW_RANK=1:300 " + std::string(TRAINSCOPE_CLI) +
                                         " run --workload tiny --seq 16 --mbs 2 --steps 3 --nproc 2 --device cpu "
                                         "--cpu-lanes 1 --trace " + run + " --trace-level ranges --overwrite -q");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto rep = trainscope::testing::cli("report " + run + " --json");
  ASSERT_EQ(rep.status, 0) << rep.output;
  const nlohmann::json j = nlohmann::json::parse(rep.output);
  ASSERT_EQ(j["steps"].size(), 2u) << j["steps"].dump();  // steps 1 and 2 (step 0: warm-up)
  for (const auto& st : j["steps"]) {
    ASSERT_TRUE(st["straggler"].is_object()) << st.dump();
    EXPECT_EQ(st["straggler"]["rank"], 1) << st.dump();
    EXPECT_GT(st["straggler"]["late_s"].get<double>(), 0) << st.dump();
    ASSERT_FALSE(st["straggler"]["doing"].empty()) << st.dump();
    const auto& top = st["straggler"]["doing"][0];
    EXPECT_EQ(top["name"], "test/slow_rank") << st.dump();
    EXPECT_GE(top["straggler_s"].get<double>(), 0.3) << st.dump();  // the injected work, at least
    EXPECT_EQ(top["others_s"].get<double>(), 0) << st.dump();
    // Rank 0 waited at the collectives; the wait is not its communication.
    EXPECT_GT(st["ranks"][0]["wait_s"].get<double>(), 0) << st.dump();
  }
  // The critical path of each step runs through rank 1's injected work, and its shares add up.
  for (const auto& st : j["steps"]) {
    const auto& seg = st["critical_path"]["segments"];
    double share = 0;
    bool slow = false;
    int64_t at = st["critical_path"]["start_ns"];
    for (const auto& g : seg) {
      share += g["share"].get<double>();
      EXPECT_EQ(g["start_ns"].get<int64_t>(), at) << seg.dump();  // contiguous
      at = g["end_ns"];
      slow |= g["rank"] == 1 && g["kind"] == "work" && g["name"] == "test/slow_rank";
    }
    EXPECT_EQ(at, st["critical_path"]["end_ns"].get<int64_t>());
    EXPECT_NEAR(share, 1.0, 1e-9);
    EXPECT_TRUE(slow) << seg.dump();
  }
  const auto text = trainscope::testing::cli("report " + run);
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("straggler: rank 1,"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("instead: test/slow_rank"), std::string::npos) << text.output;
}

// A real PP 2 run (1F1B, 2 micro-batches): each counted step's critical path crosses both stages over
// linked sends, is contiguous from its start to the step's end, and its shares add up to 1.
TEST(AnalysisSteps, TheCriticalPathOfARealPipelineRunCrossesBothStages) {
  const std::string run = tempPath("pp2_path.db");
  // Stage 1 does 200 ms of extra work at each step's start, so stage 0 waits on its gradients at any
  // load (without it, a stage 0 descheduled on a busy machine finds them arrived, and its own work is
  // rightly the whole path).
  auto r = trainscope::testing::slowStagePipelineRun(run, 2);
  ASSERT_EQ(r.status, 0) << r.output;
  r = trainscope::testing::cli("report " + run + " --json");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j["steps"].size(), 2u) << j["steps"].dump();
  for (const auto& st : j["steps"]) {
    const auto& p = st["critical_path"];
    std::set<int64_t> ranks;
    double share = 0;
    int64_t at = p["start_ns"];
    int sends = 0;
    bool slow = false;
    for (const auto& g : p["segments"]) {
      ranks.insert(g["rank"].get<int64_t>());
      share += g["share"].get<double>();
      EXPECT_EQ(g["start_ns"].get<int64_t>(), at) << p.dump();
      at = g["end_ns"];
      sends += g["name"] == "send -> recv (pp)";
      slow |= g["rank"] == 1 && g["name"] == "test/slow_rank";
    }
    EXPECT_EQ(at, p["end_ns"].get<int64_t>());
    EXPECT_NEAR(share, 1.0, 1e-9);
    EXPECT_TRUE(slow) << "the slowed stage's extra work sets the step: " << p.dump();
    // The step ends with whichever stage finishes last: stage 0's last backward (it waits for stage 1's
    // gradients) or, when a busy machine deschedules stage 1 after its last send, stage 1's own
    // optimizer step — then its own chain is rightly the whole path. Where it ends on stage 0, the path
    // must cross from stage 1 over a send.
    if (p["segments"].back()["rank"] == 0) {
      EXPECT_EQ(ranks, (std::set<int64_t>{0, 1})) << p.dump();
      EXPECT_GE(sends, 1) << p.dump();
    }
    // Every rank's step breakdown is there, with the bubble of its receives.
    ASSERT_EQ(st["ranks"].size(), 2u);
    for (const auto& k : st["ranks"]) EXPECT_TRUE(k["bubble_s"].is_number());
  }
}

// A real interleaved run (pp 2 × v 2) on screen: its pipeline sends have arrows to their receives,
// both ways (before, none: the linker read plain 1F1B and linked nothing).
TEST(AnalysisSteps, ARealInterleavedRunsSendsHaveArrows) {
  const std::string run = tempPath("interleaved_arrows.db");
  auto r = trainscope::testing::cli("run --workload " + trainscope::testing::tiny4Workload() +
                                    " --seq 16 --mbs 1 --gbs 4 --steps 2 --nproc 2 --pp 2 --virtual-stages 2 "
                                    "--device cpu --cpu-lanes 1 --trace " + run + " --trace-level ranges --overwrite -q");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string script = tempPath("interleaved_arrows.txt");
  std::ofstream(script) << "step 1\nframes 2\n";
  const Shot s = shoot(run, "--script " + script, "interleaved_arrows");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  std::set<std::pair<int64_t, int64_t>> directions;
  for (const auto& l : s.layout["links"])
    if (l["source"] == "send") directions.insert({l["from_rank"].get<int64_t>(), l["to_rank"].get<int64_t>()});
  EXPECT_EQ(directions, (std::set<std::pair<int64_t, int64_t>>{{0, 1}, {1, 0}})) << s.layout["links"].dump();
}

// Details of a send the linker could not pair (rows that disagree with the schedule the config
// names) say it is not linked and why — no wait or skew field, never a 0.
TEST(AnalysisSteps, DetailsOfAnUnlinkedCollectiveSayWhy) {
  const std::string path = tempPath("unlinked_details.db");
  makeRun(path, R"({"workload":"hand-built","world":2,"dp":1,"tp":1,"pp":2,"ga":1,"pp_schedule":"1f1b"})",
          [](int k, int64_t t0, std::vector<db::Range>&, std::vector<db::Collective>& c) {
            // Stage 1 receives twice where 1F1B has it receive, then send: it does not follow.
            c.push_back(coll(0, "send", "pp", 2 * k, t0 + 100, t0 + 150));
            c.push_back(coll(0, "recv", "pp", 2 * k + 1, t0 + 150, t0 + 460));
            c.push_back(coll(1, "recv", "pp", 2 * k, t0 + 10, t0 + 160));
            c.push_back(coll(1, "recv", "pp", 2 * k + 1, t0 + 400, t0 + 450));
          });
  const std::string script = tempPath("unlinked_details.txt");
  std::ofstream(script) << "select \"send (pp)\" 1\nframes 2\n";
  const Shot s = shoot(path, "--script " + script, "unlinked_details");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  const auto& d = s.layout["details"];
  ASSERT_TRUE(d.contains("linked")) << d.dump();
  const std::string linked = d["linked"];
  EXPECT_EQ(linked.rfind("not linked: rank 1's sends and receives on pp disagree with the 1F1B schedule", 0), 0u) << linked;
  EXPECT_FALSE(d.contains("wait")) << d.dump();
  EXPECT_FALSE(d.contains("arrival skew")) << d.dump();
}
