// viewer_app_panels_test.cpp — trainscope-viewer's panels and working habits: statistics of the run
// and of a range (against SQL), the SQL box, table export and bad table commands, short kernel names in
// statistics, the Steps text, the study view, bookmarks and notes, scale and the dropped-file overlay.
#include <gtest/gtest.h>

#include "viewer_app_support.h"

// Statistics open on what the run has (CPU ops for a CPU run; an empty table says why), and limited
// to a selected range they are the model's range statistics, per name, with median and p99.
TEST(ViewerApp, StatisticsFollowTheRunAndTheSelectedRange) {
  v::SyntheticOptions cpu;
  cpu.kernels = false;
  const std::string cpu_db = tempPath("app_cpu.db");
  if (!std::filesystem::exists(cpu_db)) v::writeSyntheticTrace(cpu_db, cpu);
  const std::string tab = tempPath("stats_tab.txt"), kernels = tempPath("stats_kernels.txt");
  std::ofstream(tab) << "tab stats\n";
  std::ofstream(kernels) << "tab stats\nframes 2\nstats kernels\n";
  Shot s = shoot(cpu_db, "--script " + tab, "stats_cpu");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  EXPECT_EQ(s.layout["stats"]["group"], "ops") << s.layout["stats"].dump();
  EXPECT_FALSE(s.layout["stats"]["rows"].empty());
  s = shoot(cpu_db, "--script " + kernels, "stats_cpu_kernels");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  EXPECT_TRUE(s.layout["stats"]["rows"].empty());
  EXPECT_NE(s.layout["stats"]["hint"].get<std::string>().find("no kernels: a CPU run"), std::string::npos);

  const std::string db = trace();
  const v::Trace t = v::loadTrace(db);
  const auto w = t.stepWindow(1, 0);
  ASSERT_TRUE(w);
  const int64_t a = w->first - t.begin + 33'333, b = a + 2'000'000;
  const std::string ranged = tempPath("stats_range.txt");
  std::ofstream(ranged) << "range " << a << " " << b << "\nstats range\ntab stats\n";
  s = shoot(db, "--script " + ranged, "stats_range");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  const auto& st = s.layout["stats"];
  ASSERT_TRUE(st["in_range"].get<bool>()) << st.dump();
  EXPECT_EQ(st["group"], "kernels");
  const v::Statistics want = v::computeRangeStatistics(t, t.begin + a, t.begin + b);
  const auto rows = v::statRows(want, t, v::StatGroup::Kernels, v::kAllRanks, v::StatSort::Total, true);
  ASSERT_EQ(st["rows"].size(), rows.size()) << st.dump();
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& got = st["rows"][i];
    EXPECT_EQ(got["name"], t.names[rows[i]->name]);
    EXPECT_EQ(got["count"], rows[i]->count);
    EXPECT_EQ(got["total_ns"], rows[i]->total_ns);
    EXPECT_EQ(got["median_ns"], rows[i]->median_ns);
    EXPECT_EQ(got["p99_ns"], rows[i]->p99_ns);
    EXPECT_LT(got["total_ns"].get<int64_t>(), int64_t(2) * (b - a));  // clipped to the range, per rank at most 100%
  }
}

// --- the study view and working habits (issue 24, items 9 and 10) ---

namespace {

// A study whose candidate ids differ from its trial ids: trial 1 is candidate 3, the recommended
// candidate #1 ran as trials 2 and 5, its runner-up #2 as trials 3 and 4.
std::string idStudy() {
  const std::string path = tempPath("ids_study.db");
  std::filesystem::remove(path);
  namespace tn = trainscope::tuner;
  tn::Study st(path, R"({"workload":"tiny","cluster":"cpu-local","memory_bytes":104857600})", false);
  std::vector<tn::Candidate> cands(3);
  for (int i = 0; i < 3; ++i) {
    cands[size_t(i)].id = i + 1;
    cands[size_t(i)].plan.dp = i + 1;
    cands[size_t(i)].predicted_step_s = 0.1 + 0.01 * i;
    cands[size_t(i)].predicted_peak = (40 + 10 * i) << 20;
  }
  st.saveCandidates(cands, {"{}", "{}", "{}"});
  const std::pair<int64_t, double> runs[] = {{3, 0.150}, {1, 0.100}, {2, 0.120}, {2, 0.124}, {1, 0.110}};
  int64_t round = 0;
  for (const auto& [cand, s] : runs) {
    tn::TrialRecord tr;
    tr.candidate = cand;
    tr.round = round++ < 3 ? 0 : 1;
    tr.steps = 11;
    tr.id = st.beginTrial(tr);
    tr.status = tn::TrialStatus::Ok;
    tr.step_s = s;
    tr.predicted_step_s = 0.1 + 0.01 * double(cand - 1);
    tr.peak_bytes = (40 + 10 * (cand - 1)) << 20;
    st.finishTrial(tr);
  }
  st.setValue("recommended", "1");
  return path;
}

}  // namespace

// The study view names candidates one way everywhere: the headline's #1 is the table's candidate #1
// (not trial 1, which is candidate 3), every point is labelled with its candidate, both plots have
// ticks with labels on both axes, the titles fit their plots, and the runner-up and margin are stated.
TEST(ViewerApp, StudyIdsTicksLabelsAndTheRunnerUp) {
  ensureDisplay();
  const std::string png = tempPath("study_ids.png"), layout = tempPath("study_ids.json");
  const auto r = sh(kViewer + " " + idStudy() + " --screenshot " + png + " --layout " + layout + " --size 1920x1080");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto l = nlohmann::json::parse(std::ifstream(layout));
  const auto& st = l["study"];
  EXPECT_EQ(st["headline_candidate"], 1);
  EXPECT_EQ(st["headline"].get<std::string>().rfind("recommended: #1 dp1 ", 0), 0u) << st["headline"];
  ASSERT_EQ(st["table"].size(), 5u);
  EXPECT_EQ(st["table"][0]["trial"], 1);
  EXPECT_EQ(st["table"][0]["candidate"], 3);
  std::set<int64_t> winner_trials;
  for (const auto& r : st["table"])
    if (r["candidate"] == st["headline_candidate"]) winner_trials.insert(r["trial"].get<int64_t>());
  EXPECT_EQ(winner_trials, (std::set<int64_t>{2, 5}));
  // Runner-up #2 (122 ms pooled, +16.2%); the noise from the two repeated candidates (5.0%) makes up
  // to 10.1%, so the margin is beyond it.
  EXPECT_EQ(st["runner_up"], 2);
  EXPECT_NEAR(st["margin"].get<double>(), (0.122 - 0.105) / 0.105, 1e-9);
  EXPECT_NEAR(st["noise"].get<double>(), 0.050361, 1e-5);
  EXPECT_FALSE(st["within_noise"].get<bool>());
  EXPECT_NE(st["argument"].get<std::string>().find("runner-up #2"), std::string::npos);
  // Every trial is a labelled point in both plots, labelled by its candidate.
  ASSERT_EQ(st["points"].size(), 10u);
  for (const auto& p : st["points"]) {
    int64_t cand = -1;
    for (const auto& r : st["table"])
      if (r["trial"] == p["trial"]) cand = r["candidate"];
    EXPECT_EQ(p["label"], "#" + std::to_string(cand));
  }
  ASSERT_EQ(st["plots"].size(), 2u);
  for (const auto& p : st["plots"]) {
    EXPECT_LE(p["title_w"].get<float>(), p["frame_w"].get<float>() - 8) << p["title"];  // wrapped, never clipped
    for (const char* axis : {"x_ticks", "y_ticks"}) {
      ASSERT_GE(p[axis].size(), 3u) << axis;
      std::set<std::string> uniq;
      for (const auto& t : p[axis]) uniq.insert(t["label"].get<std::string>());
      EXPECT_EQ(uniq.size(), p[axis].size()) << axis;
    }
  }
  EXPECT_EQ(st["plots"][0]["x_ticks"][0]["label"], "0 ms");
  EXPECT_EQ(st["plots"][0]["y_ticks"][1]["label"], "50 ms");  // 0 to 165 ms in 50 ms steps
  EXPECT_EQ(st["plots"][1]["x_ticks"][1]["label"], "50 MiB");  // memory in binary units
  // The y ticks run up the screen: a larger value is drawn higher.
  EXPECT_LT(st["plots"][0]["y_ticks"][1]["y"].get<float>(), st["plots"][0]["y_ticks"][0]["y"].get<float>());
}

namespace {
std::string copyOfTrace(const std::string& name) {
  const std::string dir = tempPath(name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(trace(), dir + "/run.db");
  return dir + "/run.db";
}
}  // namespace

// A bookmark and a note are saved beside the run in <run>.notes.json (the run database untouched),
// and read back when the run is opened again: the bookmark drawn where its time is.
TEST(ViewerApp, BookmarksAndNotesAreSavedBesideTheRunAndReloaded) {
  const std::string db = copyOfTrace("notes_dir");
  const std::string before = slurp(db);
  const std::string script = tempPath("bookmark.txt");
  std::ofstream(script) << "bookmark 1ms \"first look\"\nselect ampere_sgemm_128x64_tn 2\nnote \"slow on rank 1?\"\n";
  const Shot s = shoot(db, "--script " + script, "bookmark");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  EXPECT_EQ(slurp(db), before);  // never written into the run
  ASSERT_TRUE(std::filesystem::exists(db + ".notes.json"));
  const auto saved = nlohmann::json::parse(slurp(db + ".notes.json"));
  ASSERT_EQ(saved["bookmarks"].size(), 1u);
  const int64_t origin = s.layout["view"]["origin"];
  EXPECT_EQ(saved["bookmarks"][0]["at_ns"], origin + 1'000'000);
  EXPECT_EQ(saved["bookmarks"][0]["label"], "first look");
  ASSERT_EQ(saved["notes"].size(), 1u);
  EXPECT_EQ(saved["notes"][0]["name"], "ampere_sgemm_128x64_tn");
  EXPECT_EQ(saved["notes"][0]["text"], "slow on rank 1?");

  const std::string view = tempPath("bookmark_view.txt");
  std::ofstream(view) << "view 0 2ms\n";
  const Shot again = shoot(db, "--script " + view, "bookmark_reloaded");
  ASSERT_EQ(again.run.status, 0) << again.run.output;
  ASSERT_EQ(again.layout["bookmarks"].size(), 1u);
  EXPECT_EQ(again.layout["bookmarks"][0]["label"], "first look");
  EXPECT_NEAR(again.layout["bookmarks"][0]["x"].get<float>(), xOf(again.layout, origin + 1'000'000), 1.0);
  EXPECT_EQ(again.layout["notes"].size(), 1u);
  EXPECT_EQ(slurp(db), before);

  // A damaged notes file is reported and left as it is (it may hold notes worth repairing).
  std::ofstream(db + ".notes.json") << "{not json";
  const std::string add = tempPath("bookmark_add.txt");
  std::ofstream(add) << "bookmark 2ms\n";
  const Shot bad = shoot(db, "--script " + add, "bookmark_bad");
  ASSERT_EQ(bad.run.status, 0) << bad.run.output;
  EXPECT_NE(bad.layout["notes_error"].get<std::string>().find(db + ".notes.json"), std::string::npos);
  EXPECT_EQ(slurp(db + ".notes.json"), "{not json");
}

// --scale 2 doubles the font and every size with it; a bad factor names the flag and exits 2.
TEST(ViewerApp, ScaleTwoDoublesTheFont) {
  const Shot one = shoot(trace(), "", "scale1");
  const Shot two = shoot(trace(), "--scale 2", "scale2");
  ASSERT_EQ(one.run.status, 0) << one.run.output;
  ASSERT_EQ(two.run.status, 0) << two.run.output;
  EXPECT_EQ(one.layout["font_size"].get<float>(), 13.0f);  // Xvfb's content scale is 1
  EXPECT_EQ(two.layout["font_size"].get<float>(), 26.0f);
  EXPECT_EQ(one.layout["scale"].get<float>(), 1.0f);
  EXPECT_EQ(two.layout["scale"].get<float>(), 2.0f);
  // Everything else scales with it: the layout is in logical pixels (window pixels / scale), so a
  // lane keeps its logical height and takes twice the window's pixels; the timeline half as many.
  ASSERT_FALSE(one.layout["rows"].empty());
  ASSERT_FALSE(two.layout["rows"].empty());
  const auto height = [](const nlohmann::json& r) { return r["y1"].get<float>() - r["y0"].get<float>(); };
  EXPECT_EQ(height(two.layout["rows"][0]), height(one.layout["rows"][0]));
  EXPECT_NEAR(two.layout["timeline"]["x1"].get<float>(), one.layout["timeline"]["x1"].get<float>() / 2, 8.0f);
  const auto r = guarded(trace() + " --scale big --screenshot " + tempPath("scale_bad.png"));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--scale"), std::string::npos) << r.output;
}

// A file dropped onto the window (the drop callback's action, from a script) replaces what is open,
// with its own notes; the shortcut overlay opens from a script as from `?` / F1.
TEST(ViewerApp, ADroppedFileReplacesTheRunAndTheOverlayOpens) {
  const std::string other = copyOfTrace("drop_dir");
  const std::string script = tempPath("drop.txt");
  std::ofstream(script) << "drop " + other + "\noverlay help\n";
  const Shot s = shoot(longRun(), "--script " + script, "dropped");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  EXPECT_EQ(s.layout["events"], v::loadTrace(other).event_count);
  EXPECT_EQ(s.layout["notes_path"], other + ".notes.json");
  EXPECT_TRUE(s.layout["overlays"]["help"].get<bool>());
}

// Range statistics as drawn are SQL over the same window: the test asks SQLite, over the run database
// file, for each kernel name's count, clipped total, min, max, lower median and nearest-rank p99, and
// the --layout table, its CSV (`csv stats`), the SQL box (`sql`) and the histogram must agree with it;
// a write typed into the SQL box is refused and the file is unchanged.
TEST(ViewerApp, RangeStatisticsEqualSqlOverTheWindowAndTablesExport) {
  const std::string db = trace();
  const v::Trace t = v::loadTrace(db);
  const auto w = t.stepWindow(1, 0);
  ASSERT_TRUE(w);
  const int64_t a = w->first - t.begin + 41'111, b = a + 3'000'000;  // relative to the trace start
  const int64_t B = t.begin + a, E = t.begin + b;
  const std::string csv = tempPath("range_stats.csv"), range_csv = tempPath("range_names.csv"),
                    sql_csv = tempPath("range_sql.csv"), script = tempPath("range_sql.txt");
  std::filesystem::remove(csv);
  const auto before = std::filesystem::file_size(db);
  std::ofstream(script) << "range " << a << " " << b << "\nstats range\nstats kernels\ntab stats\nframes 2\n"
                        << "csv stats " << csv << "\ncsv range " << range_csv << "\n"
                        << "sql \"DELETE FROM kernels\"\nframes 1\n"
                        << "sql \"SELECT count(*) AS n FROM kernels WHERE end_ns > " << B << " AND start_ns < " << E
                        << "\"\ncsv sql " << sql_csv << "\ntab stats\nframes 2\n";
  const Shot s = shoot(db, "--script " + script, "range_sql");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  // SQLite's own figures for the window.
  trainscope::rundb::Database d(db, trainscope::rundb::Database::Mode::ReadOnly);
  trainscope::rundb::Statement q(
      d, "WITH w AS (SELECT s.value AS name, MIN(k.end_ns, ?2) - MAX(k.start_ns, ?1) AS d FROM kernels k "
         "JOIN strings s ON s.id = k.name_id WHERE k.end_ns > ?1 AND k.start_ns < ?2), "
         "r AS (SELECT name, d, ROW_NUMBER() OVER (PARTITION BY name ORDER BY d) AS rn, "
         "COUNT(*) OVER (PARTITION BY name) AS n FROM w) "
         "SELECT name, COUNT(*), SUM(d), MIN(d), MAX(d), MAX(CASE WHEN rn = (n + 1) / 2 THEN d END), "
         "MAX(CASE WHEN rn = (99 * n + 99) / 100 THEN d END) FROM r GROUP BY name");
  q.bindFrom(1, B, E);
  std::map<std::string, std::array<int64_t, 6>> want;
  int64_t kernels = 0;
  while (q.step()) {
    want[q.columnText(0)] = {q.columnInt(1), q.columnInt(2), q.columnInt(3), q.columnInt(4), q.columnInt(5), q.columnInt(6)};
    kernels += q.columnInt(1);
  }
  ASSERT_GT(want.size(), 1u);
  const auto& st = s.layout["stats"];
  ASSERT_TRUE(st["in_range"].get<bool>()) << st.dump();
  EXPECT_TRUE(st["complete"].get<bool>());
  EXPECT_EQ(st["group"], "kernels");
  ASSERT_EQ(st["rows"].size(), want.size()) << st.dump();
  for (const auto& r : st["rows"]) {
    const auto it = want.find(r["name"].get<std::string>());
    ASSERT_NE(it, want.end()) << r.dump();
    EXPECT_EQ(r["rank"], v::kAllRanks);
    const std::array<int64_t, 6> got = {r["count"], r["total_ns"], r["min_ns"], r["max_ns"], r["median_ns"], r["p99_ns"]};
    EXPECT_EQ(got, it->second) << r.dump();
  }
  // The CSV the script wrote: the same rows, exact nanoseconds.
  std::ifstream in(csv);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(line.rfind("name,rank,count,total_ns,", 0), 0u) << line;
  size_t lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    const std::string name = line.substr(0, line.find(','));
    ASSERT_TRUE(want.count(name)) << line;
    EXPECT_EQ(line.rfind(name + ",all," + std::to_string(want[name][0]) + "," + std::to_string(want[name][1]) + ",", 0), 0u)
        << line;
  }
  EXPECT_EQ(lines, want.size());
  std::ifstream rn(range_csv);
  ASSERT_TRUE(std::getline(rn, line));
  EXPECT_EQ(line, "table,name,rank,count,total_ns,share_of_range_per_rank");
  // The SQL box ran the count (the write before it was refused; the file is as it was).
  ASSERT_TRUE(s.layout.contains("sql")) << s.layout.dump();
  EXPECT_EQ(s.layout["sql"]["error"], "");
  EXPECT_EQ(s.layout["sql"]["rows"][0][0], std::to_string(kernels));
  std::ifstream sq(sql_csv);
  std::string sql_text((std::istreambuf_iterator<char>(sq)), std::istreambuf_iterator<char>());
  EXPECT_EQ(sql_text, "n\n" + std::to_string(kernels) + "\n");
  EXPECT_EQ(std::filesystem::file_size(db), before);
  EXPECT_EQ(v::loadTrace(db).event_count, t.event_count);
  // The histogram beside the table: the top row's durations, every one of them.
  const auto& h = st["histogram"];
  ASSERT_TRUE(want.count(h["name"].get<std::string>())) << h.dump();
  int64_t n = 0;
  for (const auto& c : h["counts"]) n += c.get<int64_t>();
  EXPECT_EQ(n, want[h["name"].get<std::string>()][0]);
}

// A write in the SQL box is refused on screen, in words.
TEST(ViewerApp, TheSqlBoxRefusesAWrite) {
  const std::string script = tempPath("sql_write.txt");
  std::ofstream(script) << "sql \"DROP TABLE kernels\"\nframes 2\n";
  const Shot s = shoot(trace(), "--script " + script, "sql_write");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  EXPECT_NE(s.layout["sql"]["error"].get<std::string>().find("read-only"), std::string::npos) << s.layout["sql"].dump();
  EXPECT_TRUE(s.layout["sql"]["rows"].empty());
}

// The table commands check their arguments before anything runs: a bad one names the line and exits 2.
TEST(ViewerApp, BadTableCommandsAreRefusedWithTheirLine) {
  const std::string script = tempPath("bad_csv.txt");
  for (const std::string& bad : {std::string("csv nonsense /tmp/x.csv"), std::string("csv stats"),
                                 std::string("diff sideways"), std::string("sql")}) {
    std::ofstream(script) << "tab stats\n" << bad << "\n";
    const Shot s = shoot(trace(), "--script " + script, "bad_csv");
    EXPECT_EQ(s.run.status, 2) << bad << ": " << s.run.output;
    EXPECT_NE(s.run.output.find("bad_csv.txt:2"), std::string::npos) << s.run.output;
  }
}

// The Statistics table names kernels by their demangled short names (the name as recorded, mangled,
// stays the row's name): no `_Z…`, no return type, no parameter list.
TEST(ViewerApp, StatisticsShowDemangledShortKernelNames) {
  const std::string db = longRun();
  const std::string script = tempPath("stats_names.txt");
  std::ofstream(script) << "tab stats\nstats kernels\nframes 2\n";
  ensureDisplay();
  const std::string png = tempPath("stats_names.png"), layout = tempPath("stats_names.json");
  const auto run = sh(kViewer + " " + db + " --screenshot " + png + " --layout " + layout + " --size 1920x1080 --script " + script);
  ASSERT_EQ(run.status, 0) << run.output;
  const nlohmann::json stats = nlohmann::json::parse(std::ifstream(layout))["stats"];
  ASSERT_EQ(stats["group"], "kernels") << stats.dump();
  std::map<std::string, std::string> label_of;  // the recorded name → the label drawn
  for (const auto& r : stats["rows"]) {
    const std::string label = r["label"];
    label_of[r["name"]] = label;
    EXPECT_NE(label.rfind("_Z", 0), 0u) << label;
    EXPECT_NE(label.rfind("void", 0), 0u) << label;
    EXPECT_EQ(label.find('('), std::string::npos) << label;
  }
  ASSERT_EQ(label_of.size(), 4u) << stats.dump();
  const std::string fill = label_of["_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_"];
  EXPECT_EQ(fill.rfind("vectorized_elementwise_kernel", 0), 0u) << fill;
  EXPECT_EQ(fill.find("at::native"), std::string::npos) << fill;
  EXPECT_EQ(label_of["ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"],
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL");
  EXPECT_EQ(label_of["elementwise_kernel"], "elementwise_kernel");
  RecordProperty("fill_label_1920", fill);
  // At 1400 px the histogram gives way so that the name column still holds these names.
  const Shot narrow = shoot(db, "--script " + script, "stats_names_1400");
  ASSERT_EQ(narrow.run.status, 0) << narrow.run.output;
  std::set<std::string> labels;
  for (const auto& r : narrow.layout["stats"]["rows"]) labels.insert(r["label"].get<std::string>());
  EXPECT_TRUE(labels.count("ncclDevKernel_AllReduce_Sum_f32_RING_LL")) << narrow.layout["stats"].dump();
  EXPECT_TRUE(labels.count("elementwise_kernel")) << narrow.layout["stats"].dump();
}

// At 1920 px the Steps tab's line for each rank fits beside its bar, the idle figure last: the text
// as --layout reports it ends before the panel's right edge.
TEST(ViewerApp, TheStepsTextIsNotClippedAt1920px) {
  const std::string script = tempPath("steps_text.txt");
  std::ofstream(script) << "tab steps\nframes 2\n";
  ensureDisplay();
  const std::string png = tempPath("steps_text.png"), layout = tempPath("steps_text.json");
  const auto r = sh(kViewer + " " + trace() + " --screenshot " + png + " --layout " + layout +
                    " --size 1920x1080 --script " + script);
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json l = nlohmann::json::parse(std::ifstream(layout));
  const auto& st = l["steps_text"];
  int per_rank = 0;  // the rank lines (the stragglers' per step follow them)
  for (const auto& line : st["lines"]) per_rank += line["text"].get<std::string>().rfind("CPU step ", 0) == 0;
  ASSERT_EQ(per_rank, 2) << st.dump();  // one per rank
  const float panel_x1 = st["panel_x1"];
  EXPECT_GT(panel_x1, 1800);
  RecordProperty("panel_x1", std::to_string(panel_x1));
  for (const auto& line : st["lines"]) {
    const std::string text = line["text"];
    if (text.rfind("CPU step ", 0) == 0) EXPECT_EQ(text.substr(text.size() - 5), " idle") << text;
    else EXPECT_EQ(text.rfind("step ", 0), 0u) << text;
    EXPECT_LE(line["x0"].get<float>() + line["w"].get<float>(), panel_x1) << text << " in " << st.dump();
    RecordProperty("line_end_" + std::to_string(int(line["x0"].get<float>() + line["w"].get<float>())), text);
  }
}

// Two CUTLASS GEMMs (Kernel2<A>, Kernel<B>) and two `gemm`s of different namespaces: each reads as
// itself in Statistics and on the timeline, none as "Kernel", no two alike.
TEST(ViewerApp, NamesThatCollideAreToldApart) {
  const std::string db = tempPath("collide.db");
  if (!std::filesystem::exists(db)) {
    trainscope::rundb::RunStore st(db, {true, "--out", true});
    st.setMeta("world_size", "1");
    st.putRank({0, "node0", "cuda:0"});
    st.begin();
    std::vector<trainscope::rundb::Kernel> ks;
    const std::vector<std::string> names = {"_ZN7cutlass7Kernel2I50cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4EEvNT_6ParamsE",
                                            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x128_64x3_tn_align4>(Params)",
                                            "void a::gemm<float>(int)", "void b::gemm<float>(int)"};
    for (size_t i = 0; i < names.size(); ++i)
      ks.push_back({kEpoch + int64_t(i) * 1'000'000, kEpoch + int64_t(i) * 1'000'000 + 900'000, 0, 7, st.intern(names[i]), -1});
    st.put(ks);
    st.commit();
    st.createIndexes();
    st.close();
  }
  const std::string script = tempPath("collide.txt");
  std::ofstream(script) << "tab stats\nstats kernels\nframes 2\n";
  const Shot s = shoot(db, "--script " + script, "collide");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  std::set<std::string> labels;
  for (const auto& r : s.layout["stats"]["rows"]) labels.insert(r["label"].get<std::string>());
  EXPECT_EQ(labels.size(), 4u) << s.layout["stats"].dump();
  for (const char* vague : {"Kernel", "Kernel2", "gemm"}) EXPECT_FALSE(labels.count(vague)) << s.layout["stats"].dump();
  EXPECT_EQ(std::count_if(labels.begin(), labels.end(),
                          [](const std::string& l) { return l.find("cutlass_80_tensorop_s1688gemm_64x64") != std::string::npos; }),
            1) << s.layout["stats"].dump();
  std::set<std::string> boxes;
  for (const auto& b : s.layout["boxes"])
    if (b["kind"] == "kernel") boxes.insert(b["label"].get<std::string>());
  EXPECT_EQ(boxes.size(), 4u) << s.layout["boxes"].dump();
  for (const char* vague : {"Kernel", "Kernel2", "gemm"}) EXPECT_FALSE(boxes.count(vague)) << s.layout["boxes"].dump();
}
