// import_corners_test.cpp — the import's corners (issue "Trust, round 3"), each against what HTA and
// the trace's truth say: device work without a launch record after the last kernel is in the last
// step's window; a later step's work that starts first is not lost; values of the wrong type are
// left out and counted by field and kind, never coerced; MTIA traces are device traces; a trace
// that launched but recorded no device activity is not called CPU-only.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "../common/nsight_schema.h"
#include "kineto_events.h"
#include "trainscope/common/error.h"
#include "trainscope/rundb/import.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/report.h"
#include "trainscope/rundb/sqlite.h"
#include "trainscope/rundb/store.h"
#include "trainscope/rundb/summary.h"
#include "trainscope/viewer/header.h"
#include "trainscope/viewer/model.h"

namespace tr = trainscope::rundb;
namespace nsight = trainscope::testing::nsight;
using nlohmann::json;
using trainscope::testing::cli;
using trainscope::testing::tempPath;
using namespace trainscope::testing::kineto_events;

namespace {

tr::RunSummary summaryOf(const std::string& db) {
  tr::RunReader rd(db);
  return tr::summarize(rd);
}

bool hasNote(const tr::RunSummary& s, const std::string& text) {
  for (const auto& n : s.notes)
    if (n.find(text) != std::string::npos) return true;
  return false;
}

// A file written as is (the text, not a json value: numbers past int64 stay as written).
std::string writeTrace(const std::string& name, const std::string& events, const std::string& head = "") {
  const std::string in = tempPath(name + ".json");
  std::ofstream(in) << "{" << head << "\"traceEvents\": [" << events << "]}";
  return in;
}

}  // namespace

// The hidden copies: a kernel, then two copies without a launch record — the first starts as the
// kernel ends, the second as the first ends, after the step's CPU window. HTA and the truth: 0.40 ms
// of memory in the step (was 0.00: both were outside every window).
TEST(ImportCorners, CopiesWithoutALaunchAfterTheLastKernelAreInTheStep) {
  json ev = json::array({step(0, 0, 450)});
  ev.push_back(launch(1, 10)), ev.push_back(kernel("gemm", 1, 7, 100, 200));
  ev.push_back(copy(-1, 7, 300, 200)), ev.push_back(copy(-1, 7, 500, 200));
  const tr::RunSummary s = summaryOf(importOne(ev, "hidden_copies"));
  ASSERT_EQ(s.ranks.size(), 1u);
  ASSERT_TRUE(s.ranks[0].breakdown);
  const auto& b = *s.ranks[0].breakdown;
  EXPECT_EQ(s.breakdown_window, "gpu");
  EXPECT_NEAR(b.memory_s, 0.40e-3, 1e-12);
  EXPECT_NEAR(b.compute_s, 0.20e-3, 1e-12);
  EXPECT_NEAR(b.idle_s, 0, 1e-12);
  ASSERT_TRUE(s.ranks[0].gpu_step_s);
  EXPECT_NEAR(*s.ranks[0].gpu_step_s, 0.60e-3, 1e-12);  // [100, 700) µs
}

// An input copy without a launch record at the start of the step, before its first kernel: in the
// step (it was in no window: the first window began at the first launched kernel).
TEST(ImportCorners, ACopyWithoutALaunchBeforeTheFirstKernelIsInTheStep) {
  json ev = json::array({step(0, 0, 450)});
  ev.push_back(copy(-1, 7, 20, 50));
  ev.push_back(launch(1, 10)), ev.push_back(kernel("gemm", 1, 7, 100, 200));
  const tr::RunSummary s = summaryOf(importOne(ev, "early_copy"));
  const auto& r = s.ranks.at(0);
  ASSERT_TRUE(r.breakdown);
  EXPECT_NEAR(r.breakdown->memory_s, 0.05e-3, 1e-12);
  EXPECT_NEAR(r.breakdown->compute_s, 0.20e-3, 1e-12);
  EXPECT_NEAR(r.breakdown->idle_s, 0.03e-3, 1e-12);  // [70, 100)
  ASSERT_TRUE(r.gpu_step_s);
  EXPECT_NEAR(*r.gpu_step_s, 0.28e-3, 1e-12);  // [20, 300) µs
  // Before the step's CPU window it is not the step's.
  json before = json::array({step(0, 100, 450)});
  before.push_back(copy(-1, 7, 20, 50));
  before.push_back(launch(1, 110)), before.push_back(kernel("gemm", 1, 7, 200, 200));
  const auto b = *summaryOf(importOne(before, "copy_before_step")).ranks.at(0).breakdown;
  EXPECT_EQ(b.memory_s, 0);
}

// Device work without a launch that starts after the counted steps (and apart from their work) is
// not theirs.
TEST(ImportCorners, ACopyWithoutALaunchAfterTheStepsIsNotTheirs) {
  json ev = json::array({step(0, 0, 450)});
  ev.push_back(launch(1, 10)), ev.push_back(kernel("gemm", 1, 7, 100, 200));
  ev.push_back(copy(-1, 7, 900, 200));
  const auto b = *summaryOf(importOne(ev, "late_copy")).ranks.at(0).breakdown;
  EXPECT_EQ(b.memory_s, 0);
  EXPECT_NEAR(b.compute_s, 0.20e-3, 1e-12);
}

// Step 0's kernel waits on its stream behind earlier work; step 1's, on another stream, runs first.
// Both ran in the counted steps: 0.1 + 0.3 ms of compute over two steps (step 1's was lost).
TEST(ImportCorners, ALaterStepsWorkThatStartsFirstIsNotLost) {
  json ev = json::array({step(0, 0, 1000), step(1, 1000, 1000)});
  ev.push_back(launch(1, 10)), ev.push_back(kernel("gemm", 1, 7, 1500, 300));
  ev.push_back(launch(2, 1010)), ev.push_back(kernel("gemm", 2, 20, 1100, 100));
  const tr::RunSummary s = summaryOf(importOne(ev, "later_first"));
  const auto& r = s.ranks.at(0);
  ASSERT_TRUE(r.breakdown);
  EXPECT_EQ(s.breakdown_window, "gpu");
  EXPECT_NEAR(r.breakdown->compute_s * 2, 0.4e-3, 1e-12);  // was 0.3 ms
  EXPECT_NEAR(r.breakdown->idle_s * 2, 0.3e-3, 1e-12);     // [1200, 1500): was in no window
  ASSERT_TRUE(r.gpu_step_s);
  EXPECT_NEAR(*r.gpu_step_s * 2, 0.7e-3, 1e-12);  // the windows tile [1100, 1800)
}

// Values of the wrong type are left out and counted by field and kind, in the import's output and the
// meta table: never coerced (a string correlation was NULL without a word, 1.5 was 1, 2^70 was
// INT64_MAX, a string pid was taken as none).
TEST(ImportCorners, WrongTypedValuesAreCountedNotCoerced) {
  const std::string events = R"J(
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0, "dur": 1000},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10, "dur": 2,
     "args": {"correlation": 1.5}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 20, "dur": 2,
     "args": {"correlation": 1180591620717411303424}},
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 100, "dur": 10,
     "args": {"device": 0, "stream": 7, "correlation": "7", "grid": [1.5, 1, 1], "registers per thread": 4294967296}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": "host", "tid": 1, "ts": 30, "dur": 5},
    {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 2.5, "ts": 40, "dur": 5, "args": [1]},
    {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler", "ts": 0, "dur": 1100})J";
  const std::string in = writeTrace("wrong_typed", events), db = tempPath("wrong_typed.db");
  const auto r = cli("import " + in + " -o " + db + " --overwrite");
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* counted : {"args.correlation: a fractional number ×1", "args.correlation: a number past int64 ×1",
                              "args.correlation: a string ×1", "args.grid: a fractional number ×1",
                              "args.registers per thread: out of range (0 to 2^31-1) ×1", "pid: a string ×1",
                              "tid: a fractional number ×1", "args: an array ×1"})
    EXPECT_NE(r.output.find(counted), std::string::npos) << counted << "\n" << r.output;
  EXPECT_EQ(r.output.find("Spans"), std::string::npos) << "Kineto's own span is not a wrong-typed event: " << r.output;
  tr::RunReader rd(db);
  const json meta = json::parse(rd.meta("import_refused_values", "{}"));
  EXPECT_EQ(meta.value("args.correlation: a string", 0), 1) << meta.dump();
  EXPECT_EQ(meta.value("pid: a string", 0), 1) << meta.dump();
  EXPECT_EQ(meta.size(), 8u) << meta.dump();
  for (const tr::ApiCall& a : rd.events<tr::ApiCall>(0)) EXPECT_EQ(a.correlation, -1);  // not 1, not INT64_MAX
  const auto kernels = rd.events<tr::Kernel>(0);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0].correlation, -1);
  EXPECT_EQ(kernels[0].grid[0], 0);       // not 1
  EXPECT_EQ(kernels[0].registers, 0);     // not INT32_MAX
  EXPECT_EQ(rd.events<tr::HostOp>(0).size(), 2u);  // the events are kept: only the values are left out
  const auto rep = cli("report " + db);
  EXPECT_NE(rep.output.find("warning: 8 value(s) of the wrong type were left out while importing"), std::string::npos)
      << rep.output;
}

// A time, a rank or a base time of the wrong type would change every figure: the file is refused,
// naming the field (an object `ts` dropped its event without a word; rank 1.5 was rank 1; a base past
// int64 was INT64_MAX).
TEST(ImportCorners, WrongTypedTimesAndRanksAreRefused) {
  const std::string ok = R"J({"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 1})J";
  const std::vector<std::tuple<std::string, std::string, std::string, std::string>> cases = {
      {"ts_object", ok + R"J(, {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": {"us": 3}, "dur": 1})J", "",
       "traceEvents[1].ts is an object"},
      {"dur_array", ok + R"J(, {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 3, "dur": [1]})J", "",
       "traceEvents[1].dur is an array"},
      {"name_object", ok + R"J(, {"ph": "X", "cat": "cpu_op", "name": {}, "pid": 1, "tid": 1, "ts": 3, "dur": 1})J", "",
       "traceEvents[1].name is an object"},
      {"rank_fraction", ok, R"J("distributedInfo": {"rank": 1.5}, )J", "rank is a fractional number"},
      {"rank_huge", ok, R"J("distributedInfo": {"rank": 1180591620717411303424}, )J", "rank is a number past int64"},
      {"rank_string", ok, R"J("distributedInfo": {"rank": "1"}, )J", "rank is the string"},
      {"dist_number", ok, R"J("distributedInfo": 3, )J", "distributedInfo is a number"},
      {"base_huge", ok, R"J("baseTimeNanoseconds": 1180591620717411303424, )J", "baseTimeNanoseconds is a number past int64"},
  };
  for (const auto& [name, events, head, said] : cases) {
    const auto r = cli("import " + writeTrace("refused_" + name, events, head) + " -o " + tempPath("refused_" + name + ".db") +
                       " --overwrite");
    EXPECT_EQ(r.status, 2) << name << ": " << r.output;
    EXPECT_NE(r.output.find(said), std::string::npos) << name << ": " << r.output;
  }
}

// MTIA: mtia_runtime calls launch mtia_ccp_events on the device ("dma…" ones are copies, as HTA
// reads them). It was read as a CPU-only trace. A device event of a category not read is counted.
TEST(ImportCorners, MtiaTracesAreDeviceTraces) {
  const std::string events = R"J(
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0, "dur": 1000},
    {"ph": "X", "cat": "mtia_runtime", "name": "runFunction - job_prep_and_submit_for_execution", "pid": 1, "tid": 1,
     "ts": 10, "dur": 5, "args": {"correlation": 1}},
    {"ph": "X", "cat": "mtia_runtime", "name": "runFunction - job_prep_and_submit_for_execution", "pid": 1, "tid": 1,
     "ts": 20, "dur": 5, "args": {"correlation": 2}},
    {"ph": "X", "cat": "mtia_ccp_events", "name": "fused_gemm_relu", "pid": 2, "tid": 3, "ts": 100, "dur": 300,
     "args": {"device": 0, "stream": 3, "correlation": 1}},
    {"ph": "X", "cat": "mtia_ccp_events", "name": "dma_h2d", "pid": 2, "tid": 3, "ts": 400, "dur": 100,
     "args": {"device": 0, "stream": 3, "correlation": 2}},
    {"ph": "X", "cat": "xpu_kernel", "name": "other_device_work", "pid": 2, "tid": 4, "ts": 500, "dur": 10},
    {"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 2, "tid": 3, "ts": 510, "dur": 10, "args": {"stream": 3}},
    {"ph": "X", "cat": "python_function", "name": "train.py(12): step", "pid": 1, "tid": 1, "ts": 5, "dur": 10})J";
  const std::string in = writeTrace("mtia", events), db = tempPath("mtia.db");
  const auto r = cli("import " + in + " -o " + db + " --overwrite");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("1 kernels, 2 API calls"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 memcpy"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("device events of categories not read, left out and counted (meta "
                          "import_ignored_device_events): xpu_kernel ×1\n"),
            std::string::npos)
      << r.output;
  const tr::RunSummary s = summaryOf(db);
  EXPECT_EQ(s.breakdown_source, "kernels");
  EXPECT_EQ(s.breakdown_window, "gpu");
  const auto& b = *s.ranks.at(0).breakdown;
  EXPECT_NEAR(b.compute_s, 0.3e-3, 1e-12);
  EXPECT_NEAR(b.memory_s, 0.1e-3, 1e-12);
  EXPECT_FALSE(hasNote(s, "CPU-only"));
  tr::RunReader rd(db);
  EXPECT_EQ(json::parse(rd.meta("import_ignored_device_events", "{}")), json({{"xpu_kernel", 1}}));
  const auto rep = cli("report " + db);
  EXPECT_NE(rep.output.find("warning: 1 device event(s) of categories the importer does not read were left out"),
            std::string::npos)
      << rep.output;
}

// Launches with correlation ids but no kernel, copy or set: the device's activity was not recorded —
// not a CPU-only profile, as the note said.
TEST(ImportCorners, LaunchesWithoutDeviceActivityAreNotCalledCpuOnly) {
  json ev = json::array({step(0, 0, 1000), op("aten::mm", 5, 100)});
  ev.push_back(launch(1, 10)), ev.push_back(launch(2, 20));
  const tr::RunSummary s = summaryOf(importOne(ev, "launch_only"));
  EXPECT_FALSE(hasNote(s, "CPU-only")) << s.notes.size();
  EXPECT_TRUE(hasNote(s, "rank 0: 2 launch(es) (API calls with correlation ids) but no device activity was recorded"));
  // A trace that launched nothing is still a CPU-only profile.
  const tr::RunSummary cpu = summaryOf(importOne(json::array({step(0, 0, 1000), op("aten::mm", 5, 100)}), "cpu_only"));
  EXPECT_TRUE(hasNote(cpu, "CPU-only"));
}

// An Nsight Systems export's values of the wrong type (a damaged or foreign file): counted and left
// out, as in a Kineto trace (SQLite read 1.5 as 1, text as 0, and 2^32 was cut to int32); a start or
// an end of the wrong type is refused, naming the table and column.
TEST(ImportCorners, NsightWrongTypedValuesAreCountedNotCoerced) {
  auto exportWith = [](const std::string& name, const std::string& kernel_row) {
    const std::string in = tempPath(name + ".sqlite");
    std::filesystem::remove(in);
    tr::Database d(in, tr::Database::Mode::Create);
    d.exec(std::string(nsight::kStringIds) + nsight::kKernel + nsight::kRuntime + R"SQL(
      INSERT INTO StringIds VALUES (1, 'volta_sgemm_128x64_nn'), (2, 'cudaLaunchKernel');
      INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (1100, 1150, 0, 16777216 + 5, 'x42', 2, 0, 0);
    )SQL");
    d.exec("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (" + kernel_row + ")");
    return in;
  };
  const std::string in = exportWith("nsys_typed", "1200, 1700, 'zero', 1, 7, 1.5, 99, 1, 1, 4294967296, 1, 1, 128, 1, 1, 0, 0, 2.0");
  const std::string db = tempPath("nsys_typed.db");
  const auto r = cli("import " + in + " -o " + db + " --overwrite");
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* counted : {"CUPTI_ACTIVITY_KIND_KERNEL.correlationId: a fractional number ×1",
                              "CUPTI_ACTIVITY_KIND_KERNEL.deviceId: a string ×1",
                              "CUPTI_ACTIVITY_KIND_KERNEL.gridX: out of int32 range ×1",
                              "CUPTI_ACTIVITY_KIND_RUNTIME.correlationId: a string ×1"})
    EXPECT_NE(r.output.find(counted), std::string::npos) << counted << "\n" << r.output;
  tr::RunReader rd(db);
  const auto k = rd.events<tr::Kernel>(0);
  ASSERT_EQ(k.size(), 1u);
  EXPECT_EQ(k[0].correlation, -1);  // not 1
  EXPECT_EQ(k[0].grid[0], 0);       // left out, not 2^32 cut to int32
  EXPECT_EQ(k[0].registers, 2);     // 2.0 is an integer
  EXPECT_EQ(rd.events<tr::ApiCall>(0).at(0).correlation, -1);
  EXPECT_EQ(json::parse(rd.meta("import_refused_values", "{}")).size(), 4u);
  const auto bad = cli("import " + exportWith("nsys_start", "'soon', 1700, 0, 1, 7, 42, 99, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 2") +
                       " -o " + tempPath("nsys_start.db") + " --overwrite");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find("CUPTI_ACTIVITY_KIND_KERNEL.start is a string, not an integer"), std::string::npos) << bad.output;
}

// A run database whose kernel name is not UTF-8 (a foreign or damaged file; the fuzzer's find):
// report --json and the Chrome export write U+FFFD for it, not a JSON library's exception.
TEST(ImportCorners, NamesThatAreNotUtf8AreWrittenAsJson) {
  const std::string db = tempPath("not_utf8.db");
  std::filesystem::remove(db);
  {
    tr::RunStore store(db, tr::RunStore::Options{true});
    store.setMeta("world_size", "1");
    store.putStrings({{0, "gemm \xff\xfe"}, {1, "cudaLaunchKernel"}});
    tr::Step s;
    s.rank = 0, s.step = 0, s.start_ns = 0, s.step_time_ns = 1000;
    store.appendStep(s);
    tr::Kernel k;
    k.start_ns = 100, k.end_ns = 400, k.stream = 7, k.correlation = 1, k.name = 0, k.rank = 0;
    store.put(std::vector<tr::Kernel>{k});
    store.put(std::vector<tr::ApiCall>{tr::ApiCall{10, 20, 1, 1, 1, 0, 0}});
  }
  const auto r = cli("report --json " + db);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("gemm \xEF\xBF\xBD"), std::string::npos) << r.output;
  const auto e = cli("export " + db + " --chrome " + tempPath("not_utf8.trace.json") + " --overwrite");
  EXPECT_EQ(e.status, 0) << e.output;
}

// An Nsight Systems export names its GPUs (TARGET_INFO_GPU) and each process's CUDA devices on them
// (TARGET_INFO_CUDA_DEVICE): the import header says the models the trace's kernels and copies ran on —
// here the process saw GPUs 1 and 2 as its devices 0 and 1 (CUDA_VISIBLE_DEVICES=1,2), and another
// process's device 0 (GPU 0) is not this trace's. Without the mapping, every GPU of the export, each
// model once with its count.
TEST(ImportCorners, NsightExportsNameTheirGpuModelInTheImportHeader) {
  const int64_t tid = (int64_t(4242) << 24) | 4242;
  auto exportWith = [&](const std::string& name, bool mapping) {
    const std::string in = tempPath(name + ".sqlite"), out = tempPath(name + ".db");
    std::filesystem::remove(in);
    tr::Database d(in, tr::Database::Mode::Create);
    d.exec(std::string(nsight::kStringIds) + nsight::kKernel + nsight::kRuntime + nsight::kTargetInfoGpu +
           nsight::kTargetInfoCudaDevice + R"SQL(
      INSERT INTO StringIds VALUES (1, 'sm90_gemm'), (2, 'cudaLaunchKernel');
      INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1000, 1500, 0, 1, 7, 42, 99, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 32);
      INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1100, 1600, 1, 1, 7, 43, 99, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 32);
      INSERT INTO TARGET_INFO_GPU VALUES (0, 'NVIDIA H100 80GB HBM3', '0000:18:00.0', 85899345920, 132, 'GH100', 0),
        (1, 'NVIDIA H100 80GB HBM3', '0000:2a:00.0', 85899345920, 132, 'GH100', 0),
        (2, 'NVIDIA A10', '0000:3a:00.0', 25769803776, 72, 'GA102', 0);
    )SQL");
    d.exec("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (900, 950, 0, " + std::to_string(tid) + ", 42, 2, 0, 0)");
    if (mapping) d.exec("INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (1, 0, 4242, '', 132), (2, 1, 4242, '', 72), (0, 0, 99, '', 132)");
    tr::importTraces({in}, out, false);
    return out;
  };
  const std::string mapped = exportWith("gpu_mapped", true);
  {
    tr::RunReader rd(mapped);
    const json files = json::parse(rd.meta("import_files", "[]"));
    ASSERT_EQ(files.size(), 1u);
    EXPECT_EQ(files[0].value("gpu", ""), "NVIDIA H100 80GB HBM3, NVIDIA A10") << files.dump();
  }
  const std::string header = trainscope::viewer::importHeader(trainscope::viewer::loadTrace(mapped));
  EXPECT_NE(header.find("Nsight Systems export gpu_mapped.sqlite -> rank 0 (NVIDIA H100 80GB HBM3, NVIDIA A10)"),
            std::string::npos) << header;
  tr::RunReader all(exportWith("gpu_unmapped", false));
  EXPECT_EQ(json::parse(all.meta("import_files", "[]"))[0].value("gpu", ""),
            "2 x NVIDIA H100 80GB HBM3, NVIDIA A10");
}

// PyTorch 2.x's CPU trace of a DDP job on Gloo (torch 2.11, torch.profiler with record_shapes) holds
// no record_param_comms: each transfer is a "gloo:all_reduce" annotation on a Gloo worker thread,
// sized by args "Input Dims" and "Input type". They are the collectives (0 were imported before),
// numbered per rank so that the ranks' calls link; a file with record_param_comms keeps those alone.
TEST(ImportCorners, GlooAnnotationsOfAPyTorch2CpuTraceAreItsCollectives) {
  auto gloo = [](const std::string& type, const std::string& dims, double ts, double dur) {
    json a = annotation("gloo:all_reduce", ts, dur);
    a["tid"] = 7;
    a["args"] = json::parse(R"({"External id": 1025, "Record function id": 0, "Concrete Inputs": [""], "Input type": [")" +
                            type + R"("], "Input Strides": [[1]], "Input Dims": )" + dims + R"(, "Ev Idx": 0})");
    return a;
  };
  std::vector<std::string> files;
  for (int r = 0; r < 2; ++r) {
    json call = op("c10d::allreduce_", 100, 10);
    call["args"] = json::parse(R"({"Input type": ["TensorList", "", "Scalar"], "Input Dims": [[[33088]], [], []]})");
    const json ev = json::array({step(0, 0, 1000), op("aten::mm", 0, 90), call,
                                 gloo("float", "[[33088]]", 120, 300 + 50 * r), gloo("c10::BFloat16", "[[4, 8]]", 500, 100)});
    const std::string in = tempPath("gloo2x_rank" + std::to_string(r) + ".json");
    std::ofstream(in) << json{{"baseTimeNanoseconds", kEventsBase},
                              {"distributedInfo", json::parse(R"({"backend": "gloo", "rank": )" + std::to_string(r) +
                                                              R"(, "world_size": 2, "pg_config": [{"pg_name": "0", "pg_size": 2}]})")},
                              {"traceEvents", ev}}
                             .dump();
    files.push_back(in);
  }
  const std::string db = tempPath("gloo2x.db");
  tr::importTraces(files, db, true);
  tr::RunReader rd(db);
  for (int r = 0; r < 2; ++r) {
    const auto c = rd.collectives(r);
    ASSERT_EQ(c.size(), 2u) << "rank " << r;
    EXPECT_EQ(c[0].op, "all_reduce");
    EXPECT_EQ(c[0].bytes, 33088 * 4);
    EXPECT_EQ(c[0].group_size, 2);
    EXPECT_EQ(c[0].seq, 0);
    EXPECT_EQ(c[0].end_ns - c[0].start_ns, (300 + 50 * r) * 1000);
    EXPECT_EQ(c[1].bytes, 4 * 8 * 2);  // BFloat16
    EXPECT_EQ(c[1].seq, 1);
  }
  // The comm time is as before (the rows cover the annotations' time): c10d::allreduce_ 10 us + 300 + 100.
  const auto b = *summaryOf(db).ranks.at(0).breakdown;
  EXPECT_NEAR(b.comm_s, 0.41e-3, 1e-12);

  // With record_param_comms in the file (older PyTorch), those are the collectives, not both.
  json rpc = op("record_param_comms", 120, 300);
  rpc["args"] = {{"Collective name", "allreduce"}, {"dtype", "Float"}, {"In msg nelems", 1024}, {"Group size", 2}};
  const std::string both = importOne(json::array({step(0, 0, 1000), rpc, gloo("float", "[[33088]]", 120, 300)}), "gloo_and_rpc");
  const auto c = tr::RunReader(both).collectives(0);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].bytes, 1024 * 4);
}

// torch 2.11's Gloo runs a process group's work on two worker threads, and a trace lists its events
// thread by thread: a real 2-rank trace's calls (broadcast 20 B, all_reduce 64 KiB, all_gather …) came
// numbered in file order, so rank 0's 6th call was linked to rank 1's broadcast. They are numbered
// in the order they started, and each rank's k-th call is the same call.
TEST(ImportCorners, GlooCallsOnTwoWorkerThreadsAreNumberedInTheOrderTheyStarted) {
  // (op, elements, start µs) of five calls in program order; rank r runs call k on thread 7 + (k + r) % 2.
  const std::vector<std::tuple<std::string, int, double>> calls = {
      {"broadcast", 5, 100}, {"all_reduce", 16576, 200}, {"all_gather", 6, 300}, {"all_reduce", 3, 400}, {"broadcast", 1, 500}};
  std::vector<std::string> files;
  for (int r = 0; r < 2; ++r) {
    json ev = json::array({step(0, 0, 1000)});
    for (int thread = 0; thread < 2; ++thread)  // the file: one thread's events, then the other's
      for (size_t k = 0; k < calls.size(); ++k) {
        if (int((k + size_t(r)) % 2) != thread) continue;
        const auto& [name, n, ts] = calls[k];
        json a = annotation("gloo:" + name, ts + r, 50);
        a["tid"] = 7 + thread;
        a["args"] = json{{"Input type", json::array({"int"})}, {"Input Dims", json::array({json::array({n})})}};
        ev.push_back(a);
      }
    const std::string in = tempPath("gloo_threads_rank" + std::to_string(r) + ".json");
    std::ofstream(in) << json{{"baseTimeNanoseconds", kEventsBase},
                              {"distributedInfo", {{"backend", "gloo"}, {"rank", r}, {"world_size", 2}}},
                              {"traceEvents", ev}}
                             .dump();
    files.push_back(in);
  }
  const std::string db = tempPath("gloo_threads.db");
  tr::importTraces(files, db, true);
  tr::RunReader rd(db);
  for (int r = 0; r < 2; ++r) {
    auto c = rd.collectives(r);
    ASSERT_EQ(c.size(), calls.size()) << "rank " << r;
    std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) { return a.seq < b.seq; });
    for (size_t k = 0; k < calls.size(); ++k) {
      EXPECT_EQ(c[k].seq, int64_t(k));
      EXPECT_EQ(c[k].op, std::get<0>(calls[k])) << "rank " << r << " call " << k;
      // all-gather's bytes are its output, group_size (2) times each rank's input (docs/trace-schema.md).
      EXPECT_EQ(c[k].bytes, std::get<1>(calls[k]) * 4 * (std::get<0>(calls[k]) == "all_gather" ? 2 : 1))
          << "rank " << r << " call " << k;
    }
  }
}

// A profiler stopped while a Gloo worker thread was still inside its annotation writes it with
// "finished": false and no args (seen in the probe's 2-rank DDP traces on a loaded machine). Its size
// is the c10d call's that issued it (the latest c10d::allreduce_ to start before it, on the calling
// thread) at the width of the rank's complete all_reduce annotations; before, it was stored with 0 bytes.
TEST(ImportCorners, AGlooAnnotationTheTracesEndCutTakesItsSizeFromItsC10dCall) {
  json ev = json::array({step(0, 0, 2000)});
  for (int k = 0; k < 2; ++k) {
    json call = op("c10d::allreduce_", 100 + 1000 * k, 10);
    call["args"] = json::parse(R"({"Input type": ["TensorList", "", "Scalar"], "Input Dims": [[[4160]], [], []]})");
    ev.push_back(call);
  }
  json done = annotation("gloo:all_reduce", 120, 300);
  done["tid"] = 7;
  done["args"] = json::parse(R"({"Input type": ["float"], "Input Dims": [[4160]]})");
  json cut = annotation("gloo:all_reduce", 1120, 600);
  cut["tid"] = 8;
  cut["args"] = json::parse(R"({"External id": 1026, "finished": false, "Ev Idx": 220})");
  ev.push_back(done);
  ev.push_back(cut);
  const std::string in = tempPath("gloo_cut_rank0.json");
  std::ofstream(in) << json{{"baseTimeNanoseconds", kEventsBase},
                            {"distributedInfo", {{"backend", "gloo"}, {"rank", 0}, {"world_size", 2}}},
                            {"traceEvents", ev}}
                           .dump();
  const std::string db = tempPath("gloo_cut.db");
  tr::importTraces({in}, db, true);
  tr::RunReader rd(db);
  const auto c = rd.collectives(0);
  ASSERT_EQ(c.size(), 2u);
  for (const auto& x : c) EXPECT_EQ(x.bytes, 4160 * 4) << "seq " << x.seq;
}

// The same cut annotation's time (the shape of a real one: rank 0 of the probe's 2-rank DDP trace on a
// loaded machine, its last all_reduce of 4160 floats written with "finished": false and a duration that
// runs to the profiler's stop, 6.04 ms where the rank's other all_reduce took 1.1 ms). Its end is not
// the call's: the row is marked cut and ends at the last event the rank's trace recorded as finished
// (the main thread's copy_bucket_to_grad, 5.61 ms), and every sum or fit of collective time leaves it
// out while its bytes still count: the report's total is the complete call's 0.3 ms (was 0.3 + 5.0 ms),
// its busbw that call's alone, and the α–β fit takes the complete rows only.
TEST(ImportCorners, AGlooAnnotationTheTracesEndCutIsMarkedCutAndLeftOutOfCollectiveTime) {
  json ev = json::array();  // as the probe's trace: no ProfilerStep, the whole trace is one step
  for (int k = 0; k < 2; ++k) {
    json call = op("c10d::allreduce_", 100 + 1000 * k, 10);
    call["args"] = json::parse(R"({"Input type": ["TensorList", "", "Scalar"], "Input Dims": [[[4160]], [], []]})");
    ev.push_back(call);
  }
  ev.push_back(op("torch.distributed.ddp.reducer::copy_bucket_to_grad", 5600, 10));  // the rank's last finished event
  json done = annotation("gloo:all_reduce", 120, 300);
  done["tid"] = 7;
  done["args"] = json::parse(R"({"Input type": ["float"], "Input Dims": [[4160]]})");
  json cut = annotation("gloo:all_reduce", 1120, 5000);  // to the profiler's stop, 6120 µs
  cut["tid"] = 8;
  cut["args"] = json::parse(R"({"External id": 1026, "finished": false, "Ev Idx": 220})");
  ev.push_back(done);
  ev.push_back(cut);
  const std::string in = tempPath("gloo_cut_time_rank0.json");
  std::ofstream(in) << json{{"baseTimeNanoseconds", kEventsBase},
                            {"distributedInfo", {{"backend", "gloo"}, {"rank", 0}, {"world_size", 2}}},
                            {"traceEvents", ev}}
                           .dump();
  const std::string db = tempPath("gloo_cut_time.db");
  tr::importTraces({in}, db, true);
  std::vector<tr::Collective> rows;
  {
    tr::RunReader rd(db);
    rows = rd.collectives(0);
  }
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_FALSE(rows[0].cut);
  EXPECT_EQ(rows[0].end_ns - rows[0].start_ns, 300000);
  EXPECT_TRUE(rows[1].cut);
  EXPECT_EQ(rows[1].start_ns, kEventsBase + 1120000);
  EXPECT_EQ(rows[1].end_ns, kEventsBase + 5610000);  // not the stop's 6120 µs
  for (const auto& c : rows) EXPECT_EQ(c.bytes, 4160 * 4);
  EXPECT_EQ(rows[1].algbw(), 0.0);
  {  // the one step runs from the first event to the last end the trace recorded, not to the stop
    tr::RunReader rd(db);
    const auto steps = rd.steps(0);
    ASSERT_EQ(steps.size(), 1u);
    EXPECT_EQ(steps[0].start_ns, kEventsBase + 100000);
    EXPECT_EQ(steps[0].step_time_ns, 5510000);
  }
  {  // stored: cut 1 and no bandwidth (NULL) for the cut row; the complete one's bandwidth as before
    tr::Database d(db, tr::Database::Mode::ReadOnly);
    tr::Statement s(d, "SELECT cut, algbw IS NULL, busbw FROM collectives ORDER BY start_ns");
    ASSERT_TRUE(s.step());
    EXPECT_EQ(s.columnInt(0), 0);
    EXPECT_EQ(s.columnInt(1), 0);
    EXPECT_NEAR(s.columnDouble(2), 16640 / 300e-6, 1);  // all_reduce over 2 ranks: factor 1
    ASSERT_TRUE(s.step());
    EXPECT_EQ(s.columnInt(0), 1);
    EXPECT_EQ(s.columnInt(1), 1);
  }
  const tr::Report rep = tr::computeReport(db, 15, 0);
  ASSERT_EQ(rep.collectives.size(), 1u);
  const tr::CollectiveStat& st = rep.collectives[0];
  EXPECT_EQ(st.count, 2);
  EXPECT_EQ(st.cut, 1);
  EXPECT_EQ(st.bytes, 2 * 16640);
  EXPECT_NEAR(st.total_s, 300e-6, 1e-12);
  EXPECT_NEAR(st.busbw_with_wait_mean, 16640 / 300e-6, 1);
  EXPECT_NE(tr::formatReport(rep).find("1 call(s) cut by the trace's end: in calls and bytes, not in time or busbw"),
            std::string::npos);
  EXPECT_EQ(json::parse(tr::reportJson(rep))["collectives"][0]["cut_rows"], 1);
}
