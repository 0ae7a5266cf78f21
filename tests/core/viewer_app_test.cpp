// viewer_app_test.cpp — trainscope-viewer itself, headless under Xvfb (ctest starts it: the `xvfb`
// fixture), checked on its pictures and its --layout: rows drawn where events are and empty where
// none are, the kind (and name) colours of kernels, collectives and ranges, the ruler's labels, short
// kernel names, folded blocks shaded by how busy they are, a selection's panel, two runs, a study, and the bad
// files that must give a message and a non-zero exit rather than a crash. Ranks related, on real DP and PP
// runs: a selected all-reduce linked to its copy (skew as SQL computes it), pipeline sends' arrows, the
// ranks' coordinates, and a collective's wait drawn apart from its transfer.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "../common/ruler_label.h"
#include "trainscope/rundb/sqlite.h"
#include "trainscope/rundb/store.h"
#include "trainscope/tuner/study.h"
#include "trainscope/viewer/details.h"
#include "trainscope/viewer/image.h"
#include "trainscope/viewer/model.h"
#include "trainscope/viewer/query.h"
#include "trainscope/viewer/ruler.h"
#include "trainscope/viewer/stats.h"
#include "trainscope/viewer/diff.h"

namespace v = trainscope::viewer;
using trainscope::testing::sh;
using trainscope::testing::tempPath;

namespace {

// An X server of our own for this test process: Xvfb picks a free display and tells us which
// (-displayfd); it is stopped when the process exits. Nothing outside the test is touched.
class Xvfb {
 public:
  Xvfb() {
    int fd[2];
    if (pipe(fd) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);  // and with this test process, however it ends
      close(fd[0]);
      const std::string out = std::to_string(fd[1]);
      execlp("Xvfb", "Xvfb", "-displayfd", out.c_str(), "-screen", "0", "1920x1080x24", "-nolisten", "tcp",
             static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fd[1]);
    char buf[32] = {};
    ssize_t n = 0, got = 0;
    while (got < ssize_t(sizeof buf) - 1 && (n = read(fd[0], buf + got, sizeof buf - 1 - size_t(got))) > 0) {
      got += n;
      if (buf[got - 1] == '\n') break;
    }
    close(fd[0]);
    if (got > 0) setenv("DISPLAY", (":" + std::string(buf, size_t(got) - (buf[got - 1] == '\n'))).c_str(), 1);
  }
  ~Xvfb() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }

 private:
  pid_t pid_ = -1;
};

const std::string kViewer = TRAINSCOPE_VIEWER;

void ensureDisplay() { static Xvfb server; }

std::string trace() {
  const std::string p = tempPath("app.db");
  if (!std::filesystem::exists(p)) v::writeSyntheticTrace(p, {2, 6'000, 3});
  return p;
}

struct Shot {
  trainscope::testing::CliResult run;
  v::Image img;
  nlohmann::json layout;
};

Shot shoot(const std::string& files, const std::string& extra, const std::string& name) {
  ensureDisplay();
  Shot s;
  const std::string png = tempPath(name + ".png"), layout = tempPath(name + ".json");
  s.run = sh(kViewer + " " + files + " --screenshot " + png + " --layout " + layout + " --size 1400x800 " + extra);
  if (s.run.status == 0) {
    s.img = v::readPng(png);
    s.layout = nlohmann::json::parse(std::ifstream(layout));
  }
  return s;
}

// The screen x of an absolute time, from the layout the viewer reported.
float xOf(const nlohmann::json& l, int64_t t) {
  const double t0 = l["view"]["t0"], t1 = l["view"]["t1"];
  const double x0 = l["timeline"]["x0"], x1 = l["timeline"]["x1"];
  const int64_t origin = l["view"]["origin"];
  return float(x0 + (double(t - origin) - t0) / (t1 - t0) * (x1 - x0));
}

const nlohmann::json* row(const nlohmann::json& l, int64_t rank, const std::string& label, int lane) {
  for (const auto& r : l["rows"])
    if (r["rank"] == rank && r["label"] == label && r["lane"] == lane) return &r;
  return nullptr;
}

// The viewer under a guard: a run that would hang (a FIFO opened, a loop that never ends) is stopped
// after `limit` seconds and reported as status 124, which the tests treat as a failure.
trainscope::testing::CliResult guarded(const std::string& args, int limit = 240) {
  ensureDisplay();
  return sh("timeout -s KILL " + std::to_string(limit) + " " + kViewer + " " + args);
}
bool hung(const trainscope::testing::CliResult& r) { return r.status == 124 || r.status == 128 + SIGKILL; }

std::set<std::string> listing(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A study with one finished trial whose run database is `trial_db`.
void makeStudy(const std::string& path, const std::string& trial_db) {
  trainscope::tuner::Study st(path, R"({"workload":"tiny","cluster":"cpu-local","memory_bytes":1000000})", false);
  trainscope::tuner::TrialRecord tr;
  tr.candidate = 0;
  tr.steps = 3;
  tr.db_path = trial_db;
  tr.id = st.beginTrial(tr);
  tr.status = trainscope::tuner::TrialStatus::Ok;
  tr.step_s = 0.2;
  tr.predicted_step_s = 0.25;
  tr.peak_bytes = 800000;
  st.finishTrial(tr);
}

int64_t parseLabel(const std::string& s) { return trainscope::testing::parseRulerLabel(s); }

constexpr int64_t kEpoch = 1'700'000'000'000'000'000;

// A run of one rank and 101 s: a kernel at the start, kernels with real CUDA names 100.345 s in, one
// at the end, and a second stream 17% busy with short kernels (1.7 us every 10 us for 50 ms).
std::string longRun() {
  const std::string p = tempPath("long_run.db");
  if (std::filesystem::exists(p)) return p;
  trainscope::rundb::RunStore st(p, {true, "--out", true});
  st.setMeta("world_size", "1");
  st.putRank({0, "node0", "cuda:0"});
  st.begin();
  std::vector<trainscope::rundb::Kernel> ks;
  auto kernel = [&](int64_t a, int64_t b, int64_t stream, const std::string& name) {
    trainscope::rundb::Kernel k{kEpoch + a, kEpoch + b, 0, stream, st.intern(name), -1};
    ks.push_back(k);
  };
  kernel(0, 5'000, 7, "ampere_sgemm_128x64_nn");
  // 100.345 100 s .. 100.346 200 s: one kernel that fills a 1 us window at 100.345 12 s.
  kernel(100'345'100'000, 100'346'200'000, 7, "ampere_sgemm_128x64_nn");
  const int64_t at = 100'400'000'000;
  kernel(at, at + 2'000'000, 7,
         "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_");
  kernel(at + 2'500'000, at + 4'500'000, 7, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)");
  for (int64_t t = 0; t < 50'000'000; t += 10'000) kernel(at + t, at + t + 1'700, 9, "elementwise_kernel");
  kernel(101'000'000'000, 101'000'005'000, 7, "ampere_sgemm_128x64_nn");
  st.put(ks);
  st.commit();
  st.createIndexes();
  st.close();
  return p;
}

}  // namespace

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
// link planted at the target (or at the old predictable temporary name, path.tmp<pid>) is replaced
// or left alone — the file it points to is never written.
TEST(ViewerApp, ScreenshotAndLayoutNeverFollowAPlantedLink) {
  const std::string dir = tempPath("viewer-links");
  std::filesystem::create_directories(dir);
  const std::string marker = dir + "/marker.txt", png = dir + "/shot.png", layout = dir + "/rows.json";
  std::ofstream(marker) << "keep me";
  std::filesystem::create_symlink(marker, png);
  std::filesystem::create_symlink(marker, layout);
  ensureDisplay();
  // `exec` keeps the shell's pid, so $$ is the viewer's: links at its old temporary names too.
  const auto r = sh("sh -c 'ln -s " + marker + " " + png + ".tmp$$; ln -s " + marker + " " + layout + ".tmp$$; exec timeout -s KILL 240 " +
                    kViewer + " " + trace() + " --screenshot " + png + " --layout " + layout + "'");
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
  ASSERT_EQ(st["lines"].size(), 2u) << st.dump();  // one per rank
  const float panel_x1 = st["panel_x1"];
  EXPECT_GT(panel_x1, 1800);
  RecordProperty("panel_x1", std::to_string(panel_x1));
  for (const auto& line : st["lines"]) {
    const std::string text = line["text"];
    EXPECT_EQ(text.rfind("CPU step ", 0), 0u) << text;
    EXPECT_EQ(text.substr(text.size() - 5), " idle") << text;
    EXPECT_LE(line["x0"].get<float>() + line["w"].get<float>(), panel_x1) << text << " in " << st.dump();
    RecordProperty("line_end_" + std::to_string(int(line["x0"].get<float>() + line["w"].get<float>())), text);
  }
}
