// viewer_app_test.cpp — trainscope-viewer itself, headless under Xvfb (ctest starts it: the `xvfb`
// fixture), checked on its pictures and its --layout: rows drawn where events are and empty where
// none are, the kind (and name) colours of kernels, collectives and ranges, the ruler's labels, short
// kernel names, folded blocks shaded by how busy they are, a selection's panel, zoom and pan limits,
// utilisation rows, and the bad files that must give a message and a non-zero exit rather than a crash.
// Two runs, ranks related and track control: viewer_app_runs_test.cpp. Statistics, SQL, tables, the
// study view, notes, scale and the overlay: viewer_app_panels_test.cpp. Shared helpers: viewer_app_support.h.
#include <gtest/gtest.h>

#include "viewer_app_support.h"

// Zoomed to a 1 us window 100 s into a run, the ruler reads offsets from a base shown in full, every
// label unique and exact (a double of seconds would round them all to one value).
TEST(ViewerApp, TheRulerIsExactInAMicrosecondWindowPast100s) {
  const std::string db = longRun();
  const std::string script = tempPath("ruler_zoom.txt");
  std::ofstream(script) << "view 100.3451s 100.3461s\nzoom 1000\n";  // 1 ms, then 1000x in: 1 us
  const Shot s = shoot(db, "--script " + script, "ruler_zoom");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  const auto& l = s.layout;
  const double t0 = l["view"]["t0"], t1 = l["view"]["t1"];
  EXPECT_NEAR(t1 - t0, 1000, 1);
  EXPECT_NEAR(t0, 100'345'600'000 - 500, 1);
  const auto& ruler = l["ruler"];
  ASSERT_TRUE(ruler["relative"].get<bool>()) << ruler.dump();
  const int64_t base = parseLabel(ruler["base_label"]);
  EXPECT_EQ(base, ruler["base"].get<int64_t>());
  EXPECT_GE(double(base), t0);
  std::set<std::string> labels;
  const double x0 = l["timeline"]["x0"], x1 = l["timeline"]["x1"];
  for (const auto& tk : ruler["ticks"]) {
    if (!tk["major"].get<bool>()) continue;
    const std::string label = tk["label"];
    EXPECT_TRUE(labels.insert(label).second) << "\"" << label << "\" twice: " << ruler.dump();
    const int64_t ns = base + parseLabel(label);
    EXPECT_EQ(ns, tk["ns"].get<int64_t>()) << label;
    // Drawn where that time is: the label is the time under its tick.
    EXPECT_NEAR(tk["x"].get<double>(), x0 + (double(ns) - t0) / (t1 - t0) * (x1 - x0), 0.01) << label;
  }
  EXPECT_GE(labels.size(), 5u) << ruler.dump();
  // The kernel under the window is one box across the timeline, named in full.
  bool kernel = false;
  for (const auto& b : l["boxes"])
    kernel |= b["kind"] == "kernel" && b["label"] == "ampere_sgemm_128x64_nn" && b["x0"].get<float>() <= x0;
  EXPECT_TRUE(kernel) << l["boxes"].dump();
}

// Kernels recorded with mangled (or full C++) names are drawn with short demangled names, as the
// width allows; the full name is the tooltip's and Details'.
TEST(ViewerApp, KernelBoxesShowDemangledShortNames) {
  const std::string db = longRun();
  const std::string script = tempPath("names_zoom.txt");
  std::ofstream(script) << "view 100.3995s 100.4040s\n";  // 4.5 ms: a 2 ms kernel is ~540 px wide
  const Shot s = shoot(db, "--script " + script, "names_zoom");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  std::string fill, nccl;
  for (const auto& b : s.layout["boxes"]) {
    if (b["kind"] != "kernel" && b["kind"] != "nccl kernel") continue;
    const std::string label = b["label"];
    if (label.rfind("vectorized_elementwise_kernel", 0) == 0) fill = label;
    if (label.rfind("ncclDevKernel", 0) == 0) nccl = label;
    EXPECT_NE(label.rfind("_Z", 0), 0u) << label;
    EXPECT_NE(label.rfind("void", 0), 0u) << label;
  }
  // Return type, parameters and namespaces gone; the template arguments fit. The NCCL kernel, cut by
  // the window's edge, keeps its name without parameters.
  EXPECT_EQ(fill, "vectorized_elementwise_kernel<4, FillFunctor<float>, Array<char*, 1> >") << s.layout["boxes"].dump();
  EXPECT_EQ(nccl, "ncclDevKernel_AllReduce_Sum_f32_RING_LL") << s.layout["boxes"].dump();
}

// Zoomed out, a stream 17% busy with short kernels folds into blocks that say so: coverage 0.17 in
// --layout, and on screen a block solid only in its bottom sixth, in the folded colour.
TEST(ViewerApp, FoldedBlocksShowHowBusyTheyAre) {
  const std::string db = longRun();
  const Shot s = shoot(db, "--view 100.39s:100.46s", "density");  // 70 ms: 1.7 us kernels are far below 3 px
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  const auto* stream9 = row(s.layout, 0, "stream 9 (device 0)", 0);
  ASSERT_TRUE(stream9);
  int folded = 0;
  for (const auto& b : s.layout["boxes"]) {
    if (s.layout["rows"][b["row"].get<size_t>()] != *stream9) continue;
    ASSERT_EQ(b["kind"], "folded") << b.dump();
    EXPECT_NEAR(b["coverage"].get<double>(), 0.17, 0.005) << b.dump();
    ++folded;
    const int x = int((b["x0"].get<float>() + b["x1"].get<float>()) / 2);
    const float y0 = (*stream9)["y0"], y1 = (*stream9)["y1"];
    EXPECT_EQ(s.img.pixel(x, int(y1) - 2), v::palette::kFolded);  // the busy fraction, from the bottom
    EXPECT_NE(s.img.pixel(x, int(y0) + 3), v::palette::kFolded);  // and not above it
  }
  EXPECT_GE(folded, 1);
}

TEST(ViewerApp, DrawsEventsWhereTheyAreInTheirKindColours) {
  const std::string db = trace();
  const v::Trace t = v::loadTrace(db);
  // A window inside step 1 of rank 0 with kernels, launches and ops: 0.3 ms from the step's start.
  const auto w = t.stepWindow(1, 0);
  ASSERT_TRUE(w);
  const int64_t a = w->first - t.begin, b = a + 300'000;
  const Shot s = shoot(db, "--view " + std::to_string(a) + ":" + std::to_string(b), "kinds");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  ASSERT_EQ(s.img.width, 1400);
  const auto* stream = row(s.layout, 0, "stream 7 (device 0)", 0);
  const auto* ops = row(s.layout, 0, "thread 4242", 3);
  ASSERT_TRUE(stream && ops) << s.layout.dump();
  // Pixels one row below the top edge of each lane (names are written lower down).
  auto colourAt = [&](const nlohmann::json& r, int64_t time) {
    return s.img.pixel(int(xOf(s.layout, time)), int(float(r["y0"]) + 3));
  };
  const v::Track* st = nullptr;
  for (const auto& tr : t.tracks)
    if (tr.rank == 0 && tr.kind == v::TrackKind::Stream) st = &tr;
  ASSERT_TRUE(st);
  int kernels = 0, gaps = 0;
  const auto& ev = st->lanes[0].events;
  for (size_t i = 0; i + 1 < ev.size(); ++i) {
    const int64_t ka = ev[i].start, kb = ev[i].end;
    if (ka < w->first + 20'000 || kb > w->first + 280'000) continue;
    if (ev[i].kind == v::EventKind::Kernel && kb - ka > 4'000) {  // wide enough to be drawn on its own
      EXPECT_EQ(colourAt(*stream, (ka + kb) / 2), v::nameColor(v::EventKind::Kernel, t.names[ev[i].name])) << "kernel at " << ka;
      ++kernels;
    }
    if (ev[i + 1].start - kb > 2'000) {  // an idle gap of the stream: its row stays empty there
      const uint32_t c = colourAt(*stream, (kb + ev[i + 1].start) / 2);
      EXPECT_TRUE(c == v::palette::kBackground || c == v::palette::kRowAlt) << std::hex << c;
      ++gaps;
    }
  }
  EXPECT_GT(kernels, 5);
  EXPECT_GT(gaps, 1);
  // An op (purple) and its layer range (green) in the thread's flame, each in its name's shade.
  const v::SearchResult mm = v::search(t, "aten::mm");
  for (const auto& m : mm.matches) {
    const v::Event& e = t.event(m);
    if (t.tracks[m.track].rank != 0 || e.start < w->first + 20'000 || e.end > w->first + 280'000) continue;
    EXPECT_EQ(colourAt(*ops, (e.start + e.end) / 2), v::nameColor(v::EventKind::HostOp, "aten::mm"));
    EXPECT_EQ(colourAt(*row(s.layout, 0, "thread 4242", 2), (e.start + e.end) / 2), v::nameColor(v::EventKind::Range, "layer"));
    break;
  }
}

TEST(ViewerApp, CollectivesStepsAndMemoryAtFullZoomOut) {
  const std::string db = trace();
  const v::Trace t = v::loadTrace(db);
  const Shot s = shoot(db, "", "full");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  const auto* coll = row(s.layout, 1, "collectives", 0);
  const auto* steps = row(s.layout, 1, "steps", 0);
  ASSERT_TRUE(coll && steps);
  const v::SearchResult ar = v::search(t, "all_reduce (dp)");
  int found = 0;
  for (const auto& m : ar.matches) {
    if (t.tracks[m.track].rank != 1) continue;
    const v::Event& e = t.event(m);
    const int x = int(xOf(s.layout, (e.start + e.end) / 2));
    // A collective is 120 us of a ~10 ms run: a thin bar, but drawn.
    bool red = false;
    for (int dx = -2; dx <= 2; ++dx) red |= s.img.pixel(x + dx, int(float((*coll)["y0"]) + 4)) == v::nameColor(v::EventKind::Collective, "all_reduce (dp)");
    EXPECT_TRUE(red) << "collective at x " << x;
    ++found;
    // Between collectives the row is empty.
    const uint32_t before = s.img.pixel(int(xOf(s.layout, e.start - 1'000'000)), int(float((*coll)["y0"]) + 4));
    EXPECT_TRUE(before == v::palette::kBackground || before == v::palette::kRowAlt) << std::hex << before;
  }
  EXPECT_EQ(found, 3);
  const auto w = t.stepWindow(2, 1);
  EXPECT_EQ(s.img.pixel(int(xOf(s.layout, (w->first + w->second) / 2)), int(float((*steps)["y0"]) + 3)),
            v::nameColor(v::EventKind::Step, "step 2"));
  EXPECT_EQ(s.layout["events"], t.event_count);
}

TEST(ViewerApp, ASelectionDrawsItsPanelAndScriptsDriveTheView) {
  const std::string db = trace();
  const std::string script = tempPath("select.txt");
  std::ofstream(script) << "search gemm\nnext\nzoom 2\npan 0.1\nselect ampere_sgemm_128x64_tn 7\ntab details\n";
  const Shot with = shoot(db, "--script " + script, "selected");
  ASSERT_EQ(with.run.status, 0) << with.run.output;
  EXPECT_TRUE(with.layout["selection"].get<bool>());
  const Shot without = shoot(db, "", "unselected");
  ASSERT_EQ(without.run.status, 0) << without.run.output;
  // The details panel (below panel_y0) holds many more text pixels with a selection.
  auto textPixels = [](const Shot& s) {
    int n = 0;
    const int y0 = int(s.layout["panel_y0"].get<float>()) + 30;
    for (int y = y0; y < s.img.height; ++y)
      for (int x = 0; x < s.img.width; ++x) {
        const uint32_t c = s.img.pixel(x, y);
        n += (c & 0xff) > 150 && ((c >> 8) & 0xff) > 150;
      }
    return n;
  };
  EXPECT_GT(textPixels(with), 3 * textPixels(without) + 500);
  // With nothing selected the panel holds only Details' hint line: it shrinks to it, and a selection
  // brings its share back.
  EXPECT_TRUE(without.layout["panel_hint_only"].get<bool>());
  EXPECT_FALSE(with.layout["panel_hint_only"].get<bool>());
  EXPECT_GT(without.layout["panel_y0"].get<float>(), with.layout["panel_y0"].get<float>() + 100);
  // The selected kernel is outlined in white in the stream row.
  const v::Trace t = v::loadTrace(db);
  bool white = false;
  for (const auto& r : with.layout["rows"])
    if (r["label"] == "stream 7 (device 0)")
      for (int y = int(r["y0"].get<float>()); y < int(r["y1"].get<float>()); ++y)
        for (int x = int(with.layout["timeline"]["x0"].get<float>()); x < with.img.width && !white; ++x)
          white |= with.img.pixel(x, y) == v::palette::kSelection;
  EXPECT_TRUE(white);
}

TEST(ViewerApp, BadInputGivesAMessageAndANonZeroExit) {
  ensureDisplay();
  auto run = [](const std::string& file) { return sh(kViewer + " " + file + " --screenshot " + tempPath("bad.png")); };
  auto r = run("/no/such/trace.db");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("/no/such/trace.db does not exist"), std::string::npos) << r.output;

  const std::string text = tempPath("plain.txt");
  std::ofstream(text) << "hello\n";
  r = run(text);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("not a trainscope run database"), std::string::npos) << r.output;

  const std::string cut = tempPath("cut_app.db");
  {
    std::ifstream in(trace(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(cut, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size() / 3));
  }
  r = run(cut);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(cut), std::string::npos) << r.output;

  const std::string empty = tempPath("empty_app.db");
  { trainscope::rundb::RunStore s(empty, {}); }
  r = run(empty);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("empty trace"), std::string::npos) << r.output;

  const std::string future = tempPath("future_app.db");
  std::filesystem::copy_file(trace(), future, std::filesystem::copy_options::overwrite_existing);
  {
    trainscope::rundb::Database d(future, trainscope::rundb::Database::Mode::ReadWrite);
    d.exec("UPDATE meta SET value = '99' WHERE key = 'schema_version'");
  }
  r = run(future);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("99"), std::string::npos) << r.output;

  const std::string script = tempPath("bad_script.txt");
  std::ofstream(script) << "view 0 1ms\nfly away\n";
  r = sh(kViewer + " " + trace() + " --screenshot " + tempPath("bad.png") + " --script " + script);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find(":2: unknown command \"fly\""), std::string::npos) << r.output;

  r = sh(kViewer + " " + trace() + " --screenshot " + tempPath("bad.png") + " --size 10x10");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--size"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("Backtrace"), std::string::npos);
}

TEST(ViewerApp, TrainscopeViewOpensTheViewer) {
  ensureDisplay();
  const std::string png = tempPath("via_cli.png");
  const auto r = trainscope::testing::cli("view " + trace() + " --screenshot " + png + " --view 0:1ms");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(v::readPng(png).width, 1600);
  EXPECT_EQ(trainscope::testing::cli("view /no/such.db --screenshot " + png).status, 2);
}

TEST(ViewerApp, OpensATracedRunAndAnImportedProfilerTrace) {
  ensureDisplay();
  // A real traced run of this runtime: steps, ranges, LibTorch ops, memory.
  const std::string run = tempPath("traced_run.db");
  auto r = trainscope::testing::cli("run --workload tiny --seq 16 --mbs 2 --steps 3 --trace " + run +
                                    " --trace-level ops --overwrite -q");
  ASSERT_EQ(r.status, 0) << r.output;
  const v::Trace t = v::loadTrace(run);
  ASSERT_EQ(t.ranks.size(), 1u);
  int ops = 0, ranges = 0;
  for (const auto& tr : t.tracks)
    for (const auto& l : tr.lanes)
      for (const auto& e : l.events) ops += e.kind == v::EventKind::HostOp, ranges += e.kind == v::EventKind::Range;
  EXPECT_GT(ops, 100);
  EXPECT_GT(ranges, 10);
  EXPECT_EQ(v::search(t, "forward").matches.size() >= 3, true);
  Shot s = shoot(run, "", "traced");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  EXPECT_FALSE(s.layout["rows"].empty());

  // A PyTorch-profiler trace through `trainscope import`: kernels on their stream, launched by the
  // API call with the same correlation id.
  nlohmann::json ev = nlohmann::json::array();
  ev.push_back({{"ph", "X"}, {"cat", "user_annotation"}, {"name", "ProfilerStep#1"}, {"pid", 1}, {"tid", 1}, {"ts", 0.0},
                {"dur", 900.0}});
  ev.push_back({{"ph", "X"}, {"cat", "cpu_op"}, {"name", "aten::mm"}, {"pid", 1}, {"tid", 1}, {"ts", 10.0}, {"dur", 50.0}});
  ev.push_back({{"ph", "X"}, {"cat", "cuda_runtime"}, {"name", "cudaLaunchKernel"}, {"pid", 1}, {"tid", 1}, {"ts", 20.0},
                {"dur", 5.0}, {"args", {{"correlation", 100}}}});
  ev.push_back({{"ph", "X"}, {"cat", "kernel"}, {"name", "ampere_sgemm_64x64_nn"}, {"pid", 0}, {"tid", 7}, {"ts", 30.0},
                {"dur", 400.0}, {"args", {{"device", 0}, {"stream", 7}, {"correlation", 100}}}});
  const nlohmann::json k = {{"schemaVersion", 1}, {"baseTimeNanoseconds", 1700000000000000000LL}, {"traceEvents", ev}};
  const std::string json = tempPath("kineto.json"), imported = tempPath("imported.db");
  std::ofstream(json) << k.dump();
  r = trainscope::testing::cli("import " + json + " -o " + imported + " --overwrite");
  ASSERT_EQ(r.status, 0) << r.output;
  const v::Trace it = v::loadTrace(imported);
  const v::CorrelationIndex corr(it);
  const auto kernel = v::search(it, "ampere_sgemm_64x64_nn");
  ASSERT_EQ(kernel.matches.size(), 1u);
  EXPECT_EQ(it.tracks[kernel.matches[0].track].kind, v::TrackKind::Stream);
  EXPECT_EQ(it.event(kernel.matches[0]).duration(), 400'000);
  const auto launch = corr.launchOf(kernel.matches[0]);
  ASSERT_TRUE(launch);
  EXPECT_EQ(it.name(*launch), "cudaLaunchKernel");
  s = shoot(imported, "", "imported");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
}

// A FIFO given as the file, recorded in a study as a trial's run database, or given as --script is
// refused with a message and status 2 — never opened and waited on.
TEST(ViewerApp, AFifoIsRefusedNotWaitedOn) {
  const std::string fifo = tempPath("viewer.fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string png = tempPath("fifo.png");
  auto r = guarded(fifo + " --screenshot " + png);
  ASSERT_FALSE(hung(r)) << "the viewer waited on a FIFO given as its file";
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(fifo + " is not a regular file"), std::string::npos) << r.output;

  const std::string study = tempPath("fifo_study.db");
  makeStudy(study, fifo);
  const std::string open = tempPath("fifo_open.txt");
  std::ofstream(open) << "open 1\ntab study\nframes 2\n";
  r = guarded(study + " --screenshot " + png + " --script " + open);
  ASSERT_FALSE(hung(r)) << "the viewer waited on a FIFO recorded as a trial's run database";
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(fifo + " is not a regular file"), std::string::npos) << r.output;

  r = guarded(trace() + " --screenshot " + png + " --script " + fifo);
  ASSERT_FALSE(hung(r)) << "the viewer waited on a FIFO given as --script";
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--script"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("not a regular file"), std::string::npos) << r.output;
}

// Opening a study, then a trial's run database from it, leaves the folder as it was: no -wal, -shm
// or anything else beside a file the viewer shows.
TEST(ViewerApp, OpeningAStudyAndATrialCreatesNothingBesideThem) {
  const std::string dir = tempPath("viewer-ro");
  std::filesystem::create_directories(dir);
  const std::string run = dir + "/trial.db", study = dir + "/study.db";
  std::filesystem::copy_file(trace(), run, std::filesystem::copy_options::overwrite_existing);
  makeStudy(study, run);
  const auto before = listing(dir);
  ASSERT_EQ(before, (std::set<std::string>{"study.db", "trial.db"}));
  const std::string png = tempPath("ro.png"), layout = tempPath("ro.json"), open = tempPath("ro_open.txt");
  auto r = guarded(study + " --screenshot " + png);
  ASSERT_FALSE(hung(r));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(listing(dir), before);
  std::ofstream(open) << "open 1\ntab summary\n";
  r = guarded(study + " --screenshot " + png + " --layout " + layout + " --script " + open);
  ASSERT_FALSE(hung(r));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_FALSE(nlohmann::json::parse(slurp(layout))["rows"].empty());  // the trial's timeline is up
  EXPECT_EQ(listing(dir), before);
  r = guarded(run + " --screenshot " + png);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(listing(dir), before);
}

// The screenshot and the layout are written under random names and renamed into place: a symbolic
// link planted at the target is refused (files::OutputRule), and with --overwrite replaced itself; a
// link at the old predictable temporary name (path.tmp<pid>) is left alone — the file a link points
// to is never written.
TEST(ViewerApp, ScreenshotAndLayoutNeverFollowAPlantedLink) {
  const std::string dir = tempPath("viewer-links");
  std::filesystem::create_directories(dir);
  const std::string marker = dir + "/marker.txt", png = dir + "/shot.png", layout = dir + "/rows.json";
  std::ofstream(marker) << "keep me";
  std::filesystem::create_symlink(marker, png);
  std::filesystem::create_symlink(marker, layout);
  ensureDisplay();
  // Without --overwrite: refused, naming the flag, the links and the file untouched.
  auto r = sh("timeout -s KILL 240 " + kViewer + " " + trace() + " --screenshot " + png + " --layout " + layout);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--screenshot: " + png + " is a symbolic link"), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::is_symlink(png) && std::filesystem::is_symlink(layout));
  EXPECT_EQ(slurp(marker), "keep me");
  // `exec` keeps the shell's pid, so $$ is the viewer's: links at its old temporary names too.
  r = sh("sh -c 'ln -s " + marker + " " + png + ".tmp$$; ln -s " + marker + " " + layout + ".tmp$$; exec timeout -s KILL 240 " +
         kViewer + " " + trace() + " --overwrite --screenshot " + png + " --layout " + layout + "'");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(slurp(marker), "keep me");
  EXPECT_FALSE(std::filesystem::is_symlink(png));
  EXPECT_FALSE(std::filesystem::is_symlink(layout));
  EXPECT_EQ(v::readPng(png).width, 1600);
  EXPECT_FALSE(nlohmann::json::parse(slurp(layout))["rows"].empty());
  // Nothing else was left: only the planted links at the old temporary names (untouched) remain.
  for (const auto& name : listing(dir)) {
    if (name == "marker.txt" || name == "shot.png" || name == "rows.json") continue;
    EXPECT_TRUE(std::filesystem::is_symlink(dir + "/" + name)) << name << " left behind";
  }
}

// A trace of 20,000 ranks opens headless and renders: the frame culls ranks outside the visible rows
// before building anything for them, and loading reads steps, collectives and counters once for all
// ranks. (It took minutes before; it must finish well inside the test's timeout — checked by the
// guard, not by a timing assertion.)
TEST(ViewerApp, TwentyThousandRanksOpenHeadless) {
  v::SyntheticOptions o;
  o.ranks = 20'000;
  o.events_per_rank = 10;
  o.steps = 1;
  o.kernels = false;
  const std::string db = tempPath("ranks20k.db");
  v::writeSyntheticTrace(db, o);
  const std::string script = tempPath("ranks20k.txt");
  std::ofstream(script) << "tab steps\nframes 2\ntab stats\nframes 2\nstep 0\n";
  const std::string png = tempPath("ranks20k.png"), layout = tempPath("ranks20k.json");
  const auto r = guarded(db + " --screenshot " + png + " --layout " + layout + " --script " + script, 280);
  ASSERT_FALSE(hung(r)) << "20,000 ranks did not open within the guard";
  ASSERT_EQ(r.status, 0) << r.output;
  const auto l = nlohmann::json::parse(slurp(layout));
  ASSERT_FALSE(l["rows"].empty());
  EXPECT_EQ(l["rows"][0]["rank"], 0);
  EXPECT_LT(l["rows"].size(), 200u);  // the rows on screen, not one per rank
  EXPECT_EQ(v::readPng(png).width, 1600);
}

// Zooming far out or panning far past the end stops at the trace's bounds plus a margin.
TEST(ViewerApp, ZoomAndPanAreClampedToTheTrace) {
  const v::Trace t = v::loadTrace(trace());
  const double span = double(t.end - t.begin);
  const std::string out = tempPath("zoom_out.txt"), past = tempPath("pan_past.txt");
  std::ofstream(out) << "zoom 0.0001\n";
  std::ofstream(past) << "pan 1000\n";
  const Shot a = shoot(trace(), "--script " + out, "zoom_clamped");
  const Shot b = shoot(trace(), "--script " + past, "pan_clamped");
  ASSERT_EQ(a.run.status, 0) << a.run.output;
  ASSERT_EQ(b.run.status, 0) << b.run.output;
  const double a0 = a.layout["view"]["t0"], a1 = a.layout["view"]["t1"];
  EXPECT_LE(a1 - a0, span * 1.5 + 1);  // 10,000 times out would be 10,000 spans
  EXPECT_GE(a1, span);                 // and the whole trace is still in view
  const double b0 = b.layout["view"]["t0"], b1 = b.layout["view"]["t1"];
  EXPECT_LE((b0 + b1) / 2, span * 1.25 + 1);  // a thousand widths later: the centre stops a quarter span past the end
  EXPECT_LT(b0, span);                        // some of the trace still shows
}

// The ruler as drawn at 1 ms and 100 us windows past 100 s (the 1 us one is above): every major
// label unique and the time under its tick. Each window is a script's first command, run three
// times: the initial fit never overwrites it (it did in 2 of 12 runs before).
TEST(ViewerApp, TheRulerIsExactAt1msAnd100usAndTheFirstCommandHolds) {
  const std::string db = longRun();
  for (auto [window, span] : {std::pair{"view 100.3451s 100.3461s\n", 1e6}, std::pair{"view 100.3451s 100.3452s\n", 1e5}})
    for (int run = 0; run < 3; ++run) {
      const std::string script = tempPath("ruler_first.txt");
      std::ofstream(script) << window;
      const Shot s = shoot(db, "--script " + script, "ruler_first");
      ASSERT_EQ(s.run.status, 0) << s.run.output;
      const auto& l = s.layout;
      const double t0 = l["view"]["t0"], t1 = l["view"]["t1"];
      EXPECT_NEAR(t0, 100'345'100'000, 1) << window << " run " << run;
      EXPECT_NEAR(t1 - t0, span, 1) << window << " run " << run;
      const auto& ruler = l["ruler"];
      const int64_t base = ruler["relative"].get<bool>() ? parseLabel(ruler["base_label"]) : 0;
      std::set<std::string> labels;
      const double x0 = l["timeline"]["x0"], x1 = l["timeline"]["x1"];
      for (const auto& tk : ruler["ticks"]) {
        if (!tk["major"].get<bool>()) continue;
        const std::string label = tk["label"];
        EXPECT_TRUE(labels.insert(label).second) << "\"" << label << "\" twice: " << ruler.dump();
        const int64_t ns = base + parseLabel(label);
        EXPECT_EQ(ns, tk["ns"].get<int64_t>()) << label;
        EXPECT_NEAR(tk["x"].get<double>(), x0 + (double(ns) - t0) / (t1 - t0) * (x1 - x0), 0.01) << label;
      }
      EXPECT_GE(labels.size(), 3u) << ruler.dump();
    }
}

// Under each stream, its utilisation row: zoomed out over a stream 17% busy (1.7 us kernels every
// 10 us for 50 ms), each pixel column reads about 0.17 (the mean 0.17) in --layout, nothing before
// the kernels start, and on screen a bar one pixel high of the row's five in the folded colour.
TEST(ViewerApp, EachStreamHasAUtilisationRow) {
  const std::string db = longRun();
  const Shot s = shoot(db, "--view 100.39s:100.46s", "utilisation");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  const nlohmann::json* u = nullptr;
  for (const auto& e : s.layout["utilisation"])
    if (e["rank"] == 0 && e["label"] == "stream 9 (device 0)") u = &e;
  ASSERT_TRUE(u) << s.layout["utilisation"].dump().substr(0, 400);
  const auto* lane = row(s.layout, 0, "stream 9 (device 0)", 0);
  ASSERT_TRUE(lane);
  EXPECT_FLOAT_EQ((*u)["y0"].get<float>(), (*lane)["y1"].get<float>());  // right under the stream's lanes
  const float x0 = (*u)["x0"], busy0 = xOf(s.layout, kEpoch + 100'400'000'000), busy1 = xOf(s.layout, kEpoch + 100'450'000'000);
  const auto cols = (*u)["columns"].get<std::vector<float>>();
  double sum = 0;
  int n = 0;
  for (size_t i = 0; i < cols.size(); ++i) {
    const float x = x0 + float(i) + 0.5f;
    if (x < busy0 - 2) EXPECT_EQ(cols[i], 0.f) << i;  // before the first kernel
    if (x < busy0 + 2 || x > busy1 - 2) continue;
    EXPECT_GT(cols[i], 0.1f) << i;
    EXPECT_LT(cols[i], 0.3f) << i;
    sum += cols[i], ++n;
  }
  ASSERT_GT(n, 500);
  EXPECT_NEAR(sum / n, 0.17, 0.005);
  RecordProperty("busy_columns", n);
  RecordProperty("busy_mean", std::to_string(sum / n));
  const int x = int((busy0 + busy1) / 2), y1 = int((*u)["y1"].get<float>());
  EXPECT_EQ(s.img.pixel(x, y1 - 1), v::palette::kFolded);      // the busy share, from the bottom
  EXPECT_NE(s.img.pixel(x, y1 - 4), v::palette::kFolded);      // and the row's top left empty
  // The rank's other stream is there too; threads and collectives have no such row.
  bool stream7 = false;
  for (const auto& e : s.layout["utilisation"]) {
    stream7 |= e["label"] == "stream 7 (device 0)";
    EXPECT_EQ(e["label"].get<std::string>().rfind("stream", 0), 0u) << e["label"];
  }
  EXPECT_TRUE(stream7);
}
