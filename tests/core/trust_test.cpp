// trust_test.cpp — the step breakdown's rules and the import's refusals, on small hand-written
// traces (issue "numbers and data you can trust, round 2"): summed over steps no category exceeds
// what ran; per-step figures are per counted step; the idle time between steps is counted; a CPU
// trace's collectives are communication; exact nanoseconds in report and Chrome export; an exported
// Chrome trace, wrong-typed fields and repeated steps are refused; a FIFO is refused, not waited on.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "kineto_events.h"
#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/rundb/chrome.h"
#include "trainscope/rundb/import.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/report.h"
#include "trainscope/rundb/store.h"
#include "trainscope/rundb/summary.h"

namespace tr = trainscope::rundb;
using nlohmann::json;
using trainscope::testing::cli;
using trainscope::testing::sh;
using trainscope::testing::tempPath;

namespace {

using namespace trainscope::testing::kineto_events;
constexpr int64_t kBase = kEventsBase;

tr::RunSummary summaryOf(const std::string& db) {
  tr::RunReader rd(db);
  return tr::summarize(rd);
}

}  // namespace

// Two steps each launch a 500 µs kernel and a 1,000 µs NCCL kernel that runs 600 µs into the next
// step: 1.0 ms of compute and 2.0 ms of communication ran, and that is what the steps add up to.
TEST(Breakdown, WorkRunningIntoTheNextStepIsCountedOnce) {
  json ev = json::array({step(0, 0, 1000), step(1, 1000, 1000)});
  ev.push_back(launch(1, 10)), ev.push_back(kernel("gemm", 1, 7, 100, 500));
  ev.push_back(launch(2, 20)), ev.push_back(kernel("ncclDevKernel_AllReduce", 2, 20, 600, 1000));
  ev.push_back(launch(3, 1010)), ev.push_back(kernel("gemm", 3, 7, 1000, 500));
  ev.push_back(launch(4, 1020)), ev.push_back(kernel("ncclDevKernel_AllReduce", 4, 20, 1600, 1000));
  const tr::RunSummary s = summaryOf(importOne(ev, "overlap"));
  ASSERT_EQ(s.ranks.size(), 1u);
  const auto& r = s.ranks[0];
  ASSERT_EQ(r.steps, 2);
  ASSERT_TRUE(r.breakdown);
  const auto& b = *r.breakdown;
  EXPECT_EQ(s.breakdown_window, "gpu");
  EXPECT_NEAR(b.compute_s * 2, 1.0e-3, 1e-12);  // was 1.5 ms
  EXPECT_NEAR(b.comm_s * 2, 2.0e-3, 1e-12);     // was 2.5 ms
  // The windows tile [100 µs, 2600 µs): everything adds up to it.
  EXPECT_NEAR((b.compute_s + b.comm_s - b.overlap_s + b.memory_s + b.idle_s) * 2, 2.5e-3, 1e-12);
  ASSERT_TRUE(r.gpu_step_s);
  EXPECT_NEAR(*r.gpu_step_s, 1.25e-3, 1e-12);
}

// Per step means per counted step: a step that launched nothing still counts. (Its host op makes it
// a step that ran: a last step with no host event at all is the one the profiler's stop cut, kept as a
// range and not counted — ImportText.)
TEST(Breakdown, PerStepFiguresAreDividedByTheCountedSteps) {
  json ev = json::array({step(0, 0, 1000), step(1, 1000, 1000)});
  ev.push_back(launch(1, 10)), ev.push_back(kernel("gemm", 1, 7, 100, 110));
  ev.push_back(op("aten::view", 1100, 5));
  const tr::RunSummary s = summaryOf(importOne(ev, "per_step"));
  const auto& b = *s.ranks.at(0).breakdown;
  EXPECT_EQ(s.ranks[0].steps, 2);
  EXPECT_NEAR(b.compute_s * 2, 0.11e-3, 1e-12);  // was 0.22 ms
}

// Kernels without correlation ids beside launches that have them: the CPU windows, not zeros.
TEST(Breakdown, KernelsWithoutCorrelationFallBackToTheCpuWindows) {
  json ev = json::array({step(0, 0, 1000), step(1, 1000, 1000)});
  ev.push_back(launch(1, 10));  // a launch whose kernel is not in the trace
  ev.push_back(kernel("gemm", -1, 7, 100, 300));
  ev.push_back(kernel("gemm", -1, 7, 1100, 300));
  const tr::RunSummary s = summaryOf(importOne(ev, "no_corr"));
  const auto& b = *s.ranks.at(0).breakdown;
  EXPECT_NEAR(b.compute_s, 0.3e-3, 1e-12);
  EXPECT_EQ(s.breakdown_window, "cpu");
  bool noted = false;
  for (const auto& n : s.notes) noted |= n.find("CPU step windows") != std::string::npos;
  EXPECT_TRUE(noted);
}

// An input stall: the GPU waits between one step's last kernel and the next step's first.
TEST(Breakdown, IdleBetweenStepsIsCounted) {
  json ev = json::array({step(0, 0, 1000), step(1, 1000, 1000)});
  ev.push_back(launch(1, 10)), ev.push_back(kernel("gemm", 1, 7, 100, 100));
  ev.push_back(launch(2, 1400)), ev.push_back(kernel("gemm", 2, 7, 1500, 100));
  const auto b = *summaryOf(importOne(ev, "stall")).ranks.at(0).breakdown;
  EXPECT_NEAR(b.idle_s * 2, 1.3e-3, 1e-12);  // [200, 1500): was 0
  EXPECT_NEAR(b.compute_s * 2, 0.2e-3, 1e-12);
}

// A GPU trace's record_param_comms CPU ops are calls, not transfers: no NCCL kernel ran, no comm.
TEST(Breakdown, CpuCollectiveCallsAreNotGpuCommunication) {
  json ev = json::array({step(0, 0, 1000)});
  ev.push_back(launch(1, 10)), ev.push_back(kernel("gemm", 1, 7, 100, 500));
  json comms = op("record_param_comms", 50, 240);
  comms["args"] = {{"Collective name", "allreduce"}, {"dtype", "Float"}, {"In msg nelems", 1024}, {"Group size", 2}};
  ev.push_back(comms);
  const auto b = *summaryOf(importOne(ev, "param_comms")).ranks.at(0).breakdown;
  EXPECT_EQ(b.comm_s, 0);
  EXPECT_EQ(b.overlap_s, 0);
  EXPECT_NEAR(b.compute_s, 0.5e-3, 1e-12);
}

// A CPU job's trace (as HTA's cpu_only fixture): the time in gloo:all_reduce is communication and
// the CPU ops are compute; without any CPU ops, the other annotations are.
TEST(Breakdown, ACpuOnlyTraceCountsItsGlooCollectivesAndOps) {
  json ev = json::array({step(0, 0, 1000)});
  ev.push_back(op("aten::mm", 0, 300));
  ev.push_back(annotation("gloo:all_reduce", 300, 600));
  tr::RunSummary s = summaryOf(importOne(ev, "cpu_only"));
  auto b = *s.ranks.at(0).breakdown;
  EXPECT_NEAR(b.compute_s, 0.3e-3, 1e-12);
  EXPECT_NEAR(b.comm_s, 0.6e-3, 1e-12);
  EXPECT_NEAR(b.idle_s, 0.1e-3, 1e-12);

  json bare = json::array({step(0, 0, 1000), annotation("forward_pass", 0, 250), annotation("gloo:all_reduce", 300, 600)});
  s = summaryOf(importOne(bare, "annotations_only"));
  b = *s.ranks.at(0).breakdown;
  EXPECT_EQ(s.breakdown_source, "annotations");
  EXPECT_NEAR(b.compute_s, 0.25e-3, 1e-12);
  EXPECT_NEAR(b.comm_s, 0.6e-3, 1e-12);
}

// A copy without its launch record counts where it ran (memory), in the step's window.
TEST(Breakdown, CopiesWithoutLaunchesCountWhereTheyRan) {
  json ev = json::array({step(0, 0, 1000), step(1, 1000, 1000)});
  ev.push_back(launch(1, 10)), ev.push_back(kernel("gemm", 1, 7, 100, 100));
  ev.push_back({{"ph", "X"}, {"cat", "gpu_memcpy"}, {"name", "Memcpy HtoD"}, {"pid", 0}, {"tid", 8},
                {"ts", 300}, {"dur", 50}, {"args", {{"device", 0}, {"stream", 8}, {"bytes", 4096}}}});
  ev.push_back(launch(2, 1010)), ev.push_back(kernel("gemm", 2, 7, 1100, 100));
  // and one that starts inside the last step's work and runs past its last kernel: the window grows.
  ev.push_back({{"ph", "X"}, {"cat", "gpu_memcpy"}, {"name", "Memcpy DtoH"}, {"pid", 0}, {"tid", 8},
                {"ts", 1150}, {"dur", 100}, {"args", {{"device", 0}, {"stream", 8}, {"bytes", 4096}}}});
  const tr::RunSummary s = summaryOf(importOne(ev, "copies"));
  const auto b = *s.ranks.at(0).breakdown;
  EXPECT_NEAR(b.memory_s * 2, 50e-6 + 50e-6, 1e-12);  // [300, 350) and [1200, 1250): the rest is under the kernel
  EXPECT_EQ(s.ranks[0].unattributed_events, 2);
  EXPECT_NEAR(*s.ranks[0].gpu_step_s * 2, (1250 - 100) * 1e-6, 1e-12);
}

// Report and Chrome export keep nanoseconds at epoch scale (a double of epoch ns steps by 256 ns).
TEST(Breakdown, ReportAndChromeExportAreExactToTheNanosecond) {
  json ev = json::array({step(0, 0, 5000)});
  ev.push_back(launch(1, 1)), ev.push_back(kernel("gemm", 1, 7, 10.001, 1234.567));
  ev.push_back(op("aten::mm", 2.003, 7.001));
  const std::string db = importOne(ev, "exact");
  const tr::Report r = tr::computeReport(db, 15, 0);
  ASSERT_FALSE(r.top_ops.empty());
  EXPECT_EQ(std::llround(r.top_ops[0].total_s * 1e9), 1234567);
  const std::string out = tempPath("exact.chrome.json");
  tr::exportChrome(db, out, false);
  std::ifstream f(out);
  const json j = json::parse(f);
  tr::RunReader rd(db);
  std::set<int64_t> durations;
  for (const auto& k : rd.events<tr::Kernel>(0)) durations.insert(k.end_ns - k.start_ns);
  for (const auto& h : rd.events<tr::HostOp>(0)) durations.insert(h.end_ns - h.start_ns);
  int checked = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e.value("ph", "") != "X" || (e["cat"] != "kernel" && e["cat"] != "op")) continue;
    // The decimal text of dur is the exact microseconds.
    const std::string text = e["dur"].dump();
    EXPECT_TRUE(durations.count(std::llround(std::stod(text) * 1000))) << text;
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

// An exported Chrome trace holds less than its database: import refuses it, naming what to use.
TEST(ImportRefuses, ItsOwnChromeExport) {
  json ev = json::array({step(0, 0, 1000), op("aten::mm", 1, 10)});
  const std::string db = importOne(ev, "round_trip");
  const std::string out = tempPath("round_trip.chrome.json");
  tr::exportChrome(db, out, false);
  try {
    tr::importTraces({out}, tempPath("round_trip2.db"), true);
    FAIL() << "imported a trainscope Chrome export";
  } catch (const trainscope::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("trainscope exported"), std::string::npos) << e.what();
  }
  const auto r = cli("import " + out + " -o " + tempPath("round_trip3.db"));
  EXPECT_EQ(r.status, 2) << r.output;
}

// Fields of the wrong type are named, with exit 2 — never a silently dropped event.
TEST(ImportRefuses, WrongTypedFields) {
  const std::vector<std::pair<std::string, json>> cases = {
      {"ts", json{{"ph", "X"}, {"cat", "cpu_op"}, {"name", "a"}, {"ts", "12"}, {"dur", 1}}},
      {"dur", json{{"ph", "X"}, {"cat", "cpu_op"}, {"name", "a"}, {"ts", 12}, {"dur", nullptr}}},
      {"cat", json{{"ph", "X"}, {"cat", 3}, {"name", "a"}, {"ts", 12}, {"dur", 1}}},
      {"ph", json{{"ph", 88}, {"cat", "cpu_op"}, {"name", "a"}, {"ts", 12}, {"dur", 1}}},
  };
  for (const auto& [field, event] : cases) {
    const std::string in = tempPath("typed_" + field + ".json");
    std::ofstream(in) << json{{"traceEvents", json::array({op("ok", 0, 1), event})}}.dump();
    const auto r = cli("import " + in + " -o " + tempPath("typed_" + field + ".db") + " --overwrite");
    EXPECT_EQ(r.status, 2) << field << ": " << r.output;
    EXPECT_NE(r.output.find("traceEvents[1]." + field), std::string::npos) << r.output;
  }
  const std::string base = tempPath("typed_base.json");
  std::ofstream(base) << json{{"baseTimeNanoseconds", "1700000000000000000"}, {"traceEvents", json::array({op("ok", 0, 1)})}}.dump();
  const auto r = cli("import " + base + " -o " + tempPath("typed_base.db"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("baseTimeNanoseconds"), std::string::npos) << r.output;
}

// A step number met twice with another window is refused; the same window twice is one step.
TEST(ImportRefuses, ARepeatedStepWithAnotherWindow) {
  json twice = json::array({step(3, 0, 100), step(3, 500, 100)});
  EXPECT_THROW(importOne(twice, "repeated"), trainscope::UserError);
  json same = json::array({step(3, 0, 100), op("ProfilerStep#3", 0, 100), op("aten::mm", 10, 10)});
  tr::RunReader rd(importOne(same, "same_window"));
  EXPECT_EQ(rd.steps(0).size(), 1u);
}

// A FIFO is refused before anything opens it (opening one for reading blocks until a writer comes).
TEST(ImportRefuses, AFifoWithoutWaitingOnIt) {
  const std::string fifo = tempPath("trace.fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const auto r = cli("import " + fifo + " -o " + tempPath("fifo.db"));  // would block forever before
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("not a regular file"), std::string::npos) << r.output;
}

// Invalid UTF-8 in one name costs that name's bytes, not the file; a long run of blanks between two
// tokens is not held in memory (the import runs under an address-space limit below its size).
TEST(Import, InvalidUtf8AndLongBlankRunsAreRead) {
  const std::string in = tempPath("utf8.json");
  std::ofstream(in) << R"({"traceEvents":[{"ph":"X","cat":"cpu_op","name":"aten::)" << "\xff\xfe" << "mm\xe2\x82"
                    << R"(","ts":1,"dur":2},{"ph":"X","cat":"cpu_op","name":"caf)" << "\xc3\xa9"
                    << R"(","ts":4,"dur":2}]})";
  const std::string db = tempPath("utf8.db");
  tr::importTraces({in}, db, true);
  tr::RunReader rd(db);
  std::set<std::string> names;
  for (const auto& h : rd.events<tr::HostOp>(0)) names.insert(rd.string(h.name));
  EXPECT_TRUE(names.count("aten::??mm?")) << *names.begin();
  EXPECT_TRUE(names.count("caf\xc3\xa9"));

  const std::string blanks = tempPath("blanks.json.gz");
  gzFile z = gzopen(blanks.c_str(), "wb1");
  const std::string head = R"({"traceEvents":[{"ph":"X","cat":"cpu_op","name":"a","ts":1,"dur":2},)";
  gzwrite(z, head.data(), unsigned(head.size()));
  const std::string chunk(1 << 20, ' ');
  for (int i = 0; i < 768; ++i) gzwrite(z, chunk.data(), unsigned(chunk.size()));  // 768 MiB of blanks
  const std::string tail = R"({"ph":"X","cat":"cpu_op","name":"b","ts":4,"dur":2}]})";
  gzwrite(z, tail.data(), unsigned(tail.size()));
  gzclose(z);
  const auto r = sh("ulimit -v 524288; " TRAINSCOPE_CLI " import " + blanks + " -o " + tempPath("blanks.db"));
  EXPECT_EQ(r.status, 0) << r.output;
}

// A run database is put at its path only once complete: an empty file (left by an older run killed
// while creating one) is replaced with overwrite and refused without; nothing else is left beside it.
TEST(RunStoreCreate, AppearsCompleteAndReplacesAnEmptyFileOnlyWithOverwrite) {
  namespace fs = std::filesystem;
  const std::string dir = tempPath("store_dir");
  fs::create_directories(dir);
  const std::string path = dir + "/run.db";
  std::ofstream(path).close();  // empty
  EXPECT_THROW(tr::RunStore(path, tr::RunStore::Options{false, "--out", false}), trainscope::UserError);
  {
    tr::RunStore store(path, tr::RunStore::Options{true, "--out", false});
    EXPECT_EQ(tr::inspectPath(path).kind, tr::PathCheck::Kind::RunDatabase);  // complete from the start
  }
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    ++files;
    EXPECT_EQ(e.path().filename(), "run.db");
  }
  EXPECT_EQ(files, 1);
}

// The import's work file has a random name: a file planted at the old fixed name is never touched.
TEST(RunStoreCreate, ImportNeverRemovesAFileAtItsOldWorkName) {
  const std::string out = tempPath("planted.db");
  std::ofstream(out + ".partial") << "someone else's";
  importOne(json::array({step(0, 0, 10), op("a", 1, 2)}), "planted");
  std::ifstream f(out + ".partial");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "someone else's");
}
