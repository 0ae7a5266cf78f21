// viewer_app_many_test.cpp — issue 35's clipping and many-ranks items on screen (--layout): the ruler's
// labels whole and apart, a long track label cut with "..." (full on hover), table headers cut with
// "...", the histogram's axes, Compare's B - A figures inside their column, the study's memory axis
// over its trials with point labels that never overprint; 64 ranks hidden, pinned and collapsed by
// pattern, the compact row per rank, the flows switch; an imported trace's header.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <set>

#include "kineto_structure.h"
#include "trainscope/rundb/import.h"
#include "trainscope/rundb/sqlite.h"
#include "trainscope/viewer/compact.h"
#include "trainscope/viewer/names.h"
#include "viewer_app_support.h"

namespace {

const std::string kLongName = "thread 4242 (a data loader thread whose name is far too long for the label column)";

// The synthetic two-rank trace with rank 0's thread named far longer than the label column.
std::string longLabelRun() {
  const std::string p = tempPath("long_label.db");
  if (std::filesystem::exists(p)) return p;
  v::writeSyntheticTrace(p, {2, 6'000, 3});
  db::Database d(p, db::Database::Mode::ReadWrite);
  d.exec("INSERT INTO strings (id, value) VALUES ((SELECT max(id) + 1 FROM strings), '" + kLongName + "')");
  d.exec("INSERT INTO threads (rank, kind, device, tid, name_id, sort_index) VALUES (0, 0, -1, 4242, "
         "(SELECT id FROM strings WHERE value = '" + kLongName + "'), NULL)");
  return p;
}

// Drawn labels [x0, x1) never overlap, and all lie inside [lo, hi].
void expectApartAndInside(std::vector<std::pair<float, float>> spans, float lo, float hi, const std::string& what) {
  std::sort(spans.begin(), spans.end());
  for (size_t i = 0; i < spans.size(); ++i) {
    EXPECT_GE(spans[i].first, lo - 0.5f) << what;
    EXPECT_LE(spans[i].second, hi + 0.5f) << what << ": label " << i << " is cut";
    if (i) EXPECT_LE(spans[i - 1].second, spans[i].first + 0.5f) << what << ": labels overprint";
  }
}

}  // namespace

TEST(ViewerApp, ClippedTextIsCutWithAnEllipsisAndLabelsStayWhole) {
  const std::string run = longLabelRun(), script = tempPath("clip.txt");
  std::ofstream(script) << "tab stats\nframes 3\n";
  for (const char* view : {"", "--view 0:1.013s", "--view 0:37ms", "--view 0:2.5ms"}) {
    const Shot s = shoot(run, std::string(view) + " --script " + script, "clip");
    ASSERT_EQ(s.run.status, 0) << s.run.output;
    const float x0 = s.layout["timeline"]["x0"], x1 = s.layout["timeline"]["x1"];
    std::vector<std::pair<float, float>> spans;
    for (const auto& tk : s.layout["ruler"]["ticks"])
      if (tk.contains("label_x0") && tk["label_x0"].get<float>() >= 0) spans.push_back({tk["label_x0"], tk["label_x1"]});
    EXPECT_GE(spans.size(), 2u) << view;
    expectApartAndInside(spans, x0, x1, std::string("ruler ") + view);
  }
  const Shot s = shoot(run, "--script " + script, "clip");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  // The label column: the long name cut with "...", the others whole.
  bool found = false;
  for (const auto& l : s.layout["track_labels"]) {
    const std::string label = l["label"], shown = l["shown"];
    if (label == kLongName) {
      found = true;
      ASSERT_GT(shown.size(), 3u);
      EXPECT_EQ(shown.substr(shown.size() - 3), "...");
      EXPECT_EQ(label.rfind(shown.substr(0, shown.size() - 3), 0), 0u) << shown;
    } else {
      EXPECT_EQ(shown, label);
    }
  }
  EXPECT_TRUE(found) << s.layout["track_labels"].dump();
  // Table headers: whole, or cut with "..." (never clipped mid-letter).
  int headers = 0;
  for (const auto& h : s.layout["table_headers"]) {
    const std::string full = h["full"], shown = h["shown"];
    ++headers;
    if (shown != full) EXPECT_EQ(shown.substr(shown.size() - 3), "...") << full;
  }
  EXPECT_GE(headers, 11);  // the Statistics table's
  // The histogram has axes: counts from 0 to its tallest bin, durations at labelled ticks inside it.
  const auto& h = s.layout["stats"]["histogram"];
  ASSERT_TRUE(h.contains("axes")) << h.dump();
  int64_t most = 0;
  for (const auto& c : h["counts"]) most = std::max<int64_t>(most, c.get<int64_t>());
  EXPECT_EQ(h["axes"]["y_lo"], "0");
  EXPECT_EQ(h["axes"]["y_hi"], std::to_string(most));
  std::vector<std::pair<float, float>> xs;
  for (const auto& a : h["axes"]["x"]) xs.push_back({a["label_x0"], a["label_x0"].get<float>() + a["label_w"].get<float>()});
  EXPECT_GE(xs.size(), 2u);
  expectApartAndInside(xs, 0, h["axes"]["w"], "histogram axis");
}

TEST(ViewerApp, ComparesFiguresFitTheirColumnsAndNamesAreShortened) {
  const std::string a = trace(), b = tempPath("diff_b.db");
  if (!std::filesystem::exists(b)) v::writeSyntheticTrace(b, {2, 9'000, 3, v::SyntheticOptions{}.start_ns + 3'000'000'000});
  const std::string script = tempPath("diff_fit.txt");
  std::ofstream(script) << "step 1\ndiff step\nframes 3\n";
  const Shot s = shoot(a + " " + b, "--script " + script + " --scale 1.5", "diff_fit");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  const auto& d = s.layout["diff"];
  ASSERT_GT(d["deltas_shown"].size(), 0u) << d.dump();
  for (const auto& c : d["deltas_shown"]) EXPECT_LE(c["w"].get<float>(), c["room"].get<float>() + 0.5f) << c.dump();
  ASSERT_EQ(d["names_shown"].size(), d["deltas_shown"].size());
  for (size_t i = 0; i < d["names_shown"].size(); ++i) {
    const std::string name = d["rows"][i]["name"], shown = d["names_shown"][i];
    EXPECT_EQ(shown.rfind(v::nameForms(name).back().substr(0, std::min<size_t>(4, shown.size())), 0), 0u) << name;
  }
}

TEST(ViewerApp, TheStudysMemoryAxisSpansItsTrialsAndItsLabelsNeverOverprint) {
  const std::string path = tempPath("far_limit.study.db");
  std::filesystem::remove(path);
  {
    trainscope::tuner::Study st(path, R"({"workload":"tiny","cluster":"cpu-local","memory_bytes":4294967296})", false);
    for (int i = 0; i < 6; ++i) {  // six candidates, every one at 1.2-1.4 MiB and 200-205 ms: labels crowd
      trainscope::tuner::TrialRecord tr;
      tr.candidate = i;
      tr.steps = 3;
      tr.db_path = trace();
      tr.id = st.beginTrial(tr);
      tr.status = trainscope::tuner::TrialStatus::Ok;
      tr.step_s = 0.200 + 0.001 * i;
      tr.predicted_step_s = 0.2;
      tr.peak_bytes = int64_t((1.2 + 0.04 * i) * 1024 * 1024);
      st.finishTrial(tr);
    }
  }
  const Shot s = shoot(path, "", "far_limit");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  const auto& st = s.layout["study"];
  const std::string note = st["memory_limit_note"];
  EXPECT_EQ(note.rfind("limit ", 0), 0u) << st.dump();
  EXPECT_NE(note.find("off this scale"), std::string::npos);
  // The memory axis ends in MiB, near the trials, not at 4 GiB.
  ASSERT_EQ(st["plots"].size(), 2u);
  const std::string top = st["plots"][1]["x_ticks"].back()["label"];
  EXPECT_NE(top.find("MiB"), std::string::npos) << top;
  for (int plot = 0; plot < 2; ++plot) {
    std::vector<nlohmann::json> drawn;
    for (const auto& p : st["points"])
      if (p["plot"] == plot && p["drawn"].get<bool>()) drawn.push_back(p);
    EXPECT_GE(drawn.size(), 2u);
    for (size_t i = 0; i < drawn.size(); ++i)
      for (size_t j = 0; j < i; ++j) {
        const auto &p = drawn[i], &q = drawn[j];
        const bool meet = p["label_x0"].get<float>() < q["label_x0"].get<float>() + q["label_w"].get<float>() &&
                          q["label_x0"].get<float>() < p["label_x0"].get<float>() + p["label_w"].get<float>() &&
                          p["label_y0"].get<float>() < q["label_y0"].get<float>() + q["label_h"].get<float>() &&
                          q["label_y0"].get<float>() < p["label_y0"].get<float>() + p["label_h"].get<float>();
        EXPECT_FALSE(meet) << p.dump() << " over " << q.dump();
      }
  }
}

TEST(ViewerApp, SixtyFourRanksByPatternCompactAndTheFlowsSwitch) {
  const std::string run = tempPath("ranks64.db");
  if (!std::filesystem::exists(run)) v::writeSyntheticTrace(run, {64, 400, 2});
  const std::string script = tempPath("ranks64.txt");
  std::ofstream(script) << "compact on\nflows none\nframes 2\n";
  Shot s = shoot(run, "--script " + script, "ranks64_compact");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  EXPECT_TRUE(s.layout["compact"].get<bool>());
  EXPECT_EQ(s.layout["flows"], "none");
  EXPECT_TRUE(s.layout["links"].empty());
  const auto& rows = s.layout["compact_rows"];
  EXPECT_GE(rows.size(), 24u) << "thin rows: many ranks on one screen";
  double busy = 0;
  for (const auto& r : rows) {
    EXPECT_LE(r["y1"].get<float>() - r["y0"].get<float>(), 16.f);
    EXPECT_GE(r["busy"].get<double>(), 0.0);
    EXPECT_LE(r["busy"].get<double>(), 1.0);
    busy += r["busy"].get<double>();
  }
  EXPECT_GT(busy, 0.0);

  std::ofstream(script) << "hide \"*\" \"thread*\"\npin \"*\" \"stream*\"\ncollapse \"1?\"\nframes 2\n";
  s = shoot(run, "--script " + script, "ranks64_patterns");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  int pinned = 0, threads = 0, collapsed = 0, headers = 0;
  for (const auto& t : s.layout["tracks"]) {
    const std::string label = t["label"];
    threads += label.rfind("thread", 0) == 0;
    pinned += t["pinned"].get<bool>();
    if (t["kind"] == "header") {
      ++headers;
      const int64_t rank = t["rank"];
      EXPECT_EQ(t["collapsed"].get<bool>(), rank >= 10 && rank <= 19) << rank;
      collapsed += t["collapsed"].get<bool>();
    }
  }
  EXPECT_EQ(threads, 0);
  EXPECT_GE(pinned, 1);
  EXPECT_GE(headers, 1);
}

TEST(ViewerApp, AnImportedTraceSaysWhereItCameFrom) {
  const std::string in = tempPath("header_kineto.json"), path = tempPath("header_kineto.db");
  std::ofstream(in) << trainscope::testing::kinetoStructureTrace();
  trainscope::rundb::importTraces({in}, path, true);
  const Shot s = shoot(path, "", "import_header");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  ASSERT_EQ(s.layout["import_headers"].size(), 1u) << s.layout.dump();
  const std::string h = s.layout["import_headers"][0];
  EXPECT_NE(h.find("PyTorch profiler trace header_kineto.json -> rank 3 (NVIDIA H100 80GB HBM3)"), std::string::npos) << h;
  EXPECT_NE(h.find("rank 3 python3 (pid 4242)"), std::string::npos) << h;  // the process the trace named
  EXPECT_NE(h.find(" · span "), std::string::npos) << h;
  // A native run has none.
  const Shot n = shoot(trace(), "", "native_header");
  ASSERT_EQ(n.run.status, 0) << n.run.output;
  EXPECT_TRUE(n.layout["import_headers"].empty());
}

// A real DP 2 run (its all-reduces linked across the ranks): with the selected all-reduce, `flows all`
// draws its link, `flows selected` too, `flows none` nothing; the compact rows show the waiting the
// linked all-reduces hold (the ranks never arrive together).
TEST(ViewerApp, TheFlowsSwitchAndCompactWaitsOnARealDpRun) {
  const std::string run = tempPath("dp2_flows.db");
  auto r = trainscope::testing::cli("run --workload tiny --seq 16 --mbs 2 --steps 3 --nproc 2 --device cpu --trace " +
                                    run + " --trace-level ranges --overwrite -q");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string script = tempPath("flows.txt");
  size_t links[3] = {};
  const char* modes[] = {"all", "selected", "none"};
  for (int m = 0; m < 3; ++m) {
    std::ofstream(script) << "select \"all_reduce (dp)\" 2\nflows " << modes[m] << "\nframes 2\n";
    const Shot s = shoot(run, "--script " + script, std::string("flows_") + modes[m]);
    ASSERT_EQ(s.run.status, 0) << s.run.output;
    EXPECT_EQ(s.layout["flows"], modes[m]);
    links[m] = s.layout["links"].size();
  }
  EXPECT_GE(links[0], 1u);
  EXPECT_GE(links[1], 1u);
  EXPECT_EQ(links[2], 0u);
  std::ofstream(script) << "compact on\nframes 2\n";
  const Shot c = shoot(run, "--script " + script, "flows_compact");
  ASSERT_EQ(c.run.status, 0) << c.run.output;
  ASSERT_EQ(c.layout["compact_rows"].size(), 2u) << c.layout["compact_rows"].dump();
  double wait = 0;
  for (const auto& row : c.layout["compact_rows"]) {
    EXPECT_LE(row["wait"].get<double>(), row["busy"].get<double>() + 1e-9);
    wait += row["wait"].get<double>();
  }
  EXPECT_GT(wait, 0.0);
}

// A real PP 2 run, stage 1 slowed at each step's start: stage 0 spends most of the step blocked at its
// pipeline receives, inside its forward and backward ranges. Its compact row must be drawn mostly as
// waiting, not as compute (before, compute was stacked first and the enclosing ranges hid the wait:
// the row read blue, "busy computing", while its layout said 0.89 waiting). Its waits are at pipeline
// receives, drawn in their own colour (before, the collectives' orange; the Steps tab calls them bubble).
TEST(ViewerApp, ACompactRowBlockedOnItsPeerIsDrawnWaitingNotComputing) {
  const std::string run = tempPath("pp2_compact_drawn.db");
  const auto r = trainscope::testing::slowStagePipelineRun(run, 8);
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string script = tempPath("compact_drawn.txt");
  std::ofstream(script) << "compact on\nstep 2\nframes 2\n";
  const Shot c = shoot(run, "--script " + script, "compact_drawn");
  ASSERT_EQ(c.run.status, 0) << c.run.output;
  ASSERT_EQ(c.layout["compact_rows"].size(), 2u) << c.layout["compact_rows"].dump();
  for (const auto& row : c.layout["compact_rows"]) {
    const double compute = row["drawn_compute"].get<double>(), wait = row["drawn_wait"].get<double>();
    EXPECT_LE(compute + wait, 1.0 + 1e-6) << row.dump();
    EXPECT_LE(wait, row["wait"].get<double>() + 1e-6) << row.dump();
    // PP 2: the waits are at sends and receives (a few at the run's world collectives, drawn orange).
    const double pipe = row.value("drawn_pipeline_wait", -1.0);
    EXPECT_GE(pipe, 0.0) << row.dump();
    EXPECT_LE(pipe, wait + 1e-6) << row.dump();
    if (row["rank"] == 0) {
      EXPECT_GT(pipe, 0.9 * wait) << row.dump();  // the stage blocked on its peer: at its receives
      EXPECT_GT(wait, 0.5) << row.dump();  // stage 0 waits for the slowed stage most of the step
      EXPECT_LT(compute, 0.5) << row.dump();
    }
  }
  // The legend: the pipeline's waits have a colour of their own, unlike the collectives' waits.
  const auto& legend = c.layout.value("compact_legend", nlohmann::json::array());
  ASSERT_EQ(legend.size(), 4u) << c.layout.dump();
  std::set<uint32_t> colours;
  for (const auto& p : legend) colours.insert(p["colour"].get<uint32_t>());
  EXPECT_EQ(colours.size(), 4u) << legend.dump();
  EXPECT_EQ(legend[1]["name"], "waiting at collectives");
  EXPECT_EQ(legend[2]["name"], "waiting at pipeline sends/receives");
}

// A real PP 2 run, stage 1 slowed at each step's start (the test knob), so that stage 0 waits at its
// pipeline receives: the compact row of each rank shows as waiting exactly what its linked calls
// waited for their partner or last member — the pipeline's sends and receives included (before,
// only the collectives' waits, and this run's are mostly at receives).
TEST(ViewerManyRanks, CompactRowsShowTheWaitsAtPipelineSendsOfARealPp2Run) {
  const std::string run = tempPath("pp2_compact.db");
  const auto r = trainscope::testing::slowStagePipelineRun(run, 2);
  ASSERT_EQ(r.status, 0) << r.output;
  const v::Trace t = v::loadTrace(run);
  ASSERT_EQ(t.ranks.size(), 2u);
  for (const v::RankGroup& g : t.ranks) {
    // What the rank's linked calls waited (overlapping waits once), and of it at sends and receives.
    std::vector<std::pair<int64_t, int64_t>> spans, p2p_spans;
    int64_t p2p = 0;
    for (const v::CommCall& call : t.comm.calls)
      for (const v::EventRef& m : call.members) {
        const v::Event& e = t.event(m);
        const int64_t until = std::min(e.end, call.link.last_start_ns);
        if (t.tracks[m.track].rank != g.rank || until <= e.start) continue;
        spans.push_back({e.start, until});
        if (call.link.p2p) p2p += until - e.start, p2p_spans.push_back({e.start, until});
      }
    auto unionNs = [](std::vector<std::pair<int64_t, int64_t>> s) {
      std::sort(s.begin(), s.end());
      int64_t sum = 0, reach = INT64_MIN;
      for (const auto& [a, b] : s) {
        sum += std::max<int64_t>(0, b - std::max(a, reach));
        reach = std::max(reach, b);
      }
      return sum;
    };
    const int64_t all = unionNs(spans), pipe = unionNs(p2p_spans);
    const size_t columns = 4000;
    const v::CompactColumns c = v::compactColumns(t, g, t.begin, t.end, columns);
    double shown = 0, shown_pipe = 0;
    for (size_t i = 0; i < columns; ++i) {
      EXPECT_LE(c.wait[i], c.comm[i]);
      EXPECT_LE(c.pipeline[i], c.wait[i]);  // the waits at sends and receives are a part of the wait
      shown += double(c.wait[i]), shown_pipe += double(c.pipeline[i]);
    }
    shown *= double(t.end - t.begin) / double(columns);
    shown_pipe *= double(t.end - t.begin) / double(columns);
    EXPECT_NEAR(shown, double(all), 0.01 * double(all) + 1e3) << "rank " << g.rank << ", p2p " << p2p;
    EXPECT_NEAR(shown_pipe, double(pipe), 0.01 * double(pipe) + 1e3) << "rank " << g.rank;
    if (g.rank == 0) EXPECT_GT(p2p, all / 2) << "stage 0 waits mostly at its receives";
  }
}
