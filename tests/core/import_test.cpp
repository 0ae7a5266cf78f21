// test_import.cpp — Kineto (PyTorch profiler) JSON, plain and gzipped, and Nsight Systems SQLite
// exports, written here by hand in each format's layout, import into a run database that report
// and export then read like a native trace.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "../common/nsight_schema.h"
#include "kineto_structure.h"
#include "trainscope/common/error.h"
#include "trainscope/rundb/chrome.h"
#include "trainscope/rundb/import.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/report.h"
#include "trainscope/rundb/schema.h"
#include "trainscope/rundb/sqlite.h"

namespace tr = trainscope::rundb;
namespace nsight = trainscope::testing::nsight;
using trainscope::testing::tempPath;

namespace {


// A Kineto trace of two profiler steps on one GPU: ts/dur in microseconds from baseTimeNanoseconds.
nlohmann::json kineto(int rank) {
  using nlohmann::json;
  json ev = json::array();
  for (int k = 0; k < 2; ++k) {
    const double t = 1000.0 * k;
    ev.push_back({{"ph", "X"}, {"cat", "user_annotation"}, {"name", "ProfilerStep#" + std::to_string(k + 5)},
                  {"pid", 1}, {"tid", 1}, {"ts", t}, {"dur", 900.0}});
    ev.push_back({{"ph", "X"}, {"cat", "cpu_op"}, {"name", "aten::mm"}, {"pid", 1}, {"tid", 1}, {"ts", t + 10},
                  {"dur", 50.0}, {"args", {{"Sequence number", 7}, {"Input Dims", {{64, 64}, {64, 64}}}}}});
    ev.push_back({{"ph", "X"}, {"cat", "cuda_runtime"}, {"name", "cudaLaunchKernel"}, {"pid", 1}, {"tid", 1},
                  {"ts", t + 20}, {"dur", 5.0}, {"args", {{"correlation", 100 + k}}}});
    ev.push_back({{"ph", "X"}, {"cat", "kernel"}, {"name", "ampere_sgemm_64x64_nn"}, {"pid", 0}, {"tid", 7},
                  {"ts", t + 30}, {"dur", 400.0},
                  {"args", {{"device", 0}, {"stream", 7}, {"correlation", 100 + k}, {"registers per thread", 96},
                            {"shared memory", 8192}, {"grid", {32, 2, 1}}, {"block", {256, 1, 1}}}}});
    ev.push_back({{"ph", "X"}, {"cat", "kernel"}, {"name", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"}, {"pid", 0},
                  {"tid", 20}, {"ts", t + 300}, {"dur", 300.0},
                  {"args", {{"device", 0}, {"stream", 20}, {"correlation", 200 + k}}}});
    ev.push_back({{"ph", "X"}, {"cat", "gpu_memcpy"}, {"name", "Memcpy HtoD (Pageable -> Device)"}, {"pid", 0},
                  {"tid", 7}, {"ts", t + 1}, {"dur", 8.0}, {"args", {{"device", 0}, {"stream", 7}, {"bytes", 4096}}}});
  }
  ev.push_back({{"ph", "i"}, {"name", "ignored instant"}, {"ts", 1.0}});
  return {{"schemaVersion", 1}, {"baseTimeNanoseconds", 1700000000000000000LL},
          {"distributedInfo", {{"rank", rank}, {"world_size", 2}}}, {"traceEvents", ev}};
}

void writeGzip(const std::string& path, const std::string& text) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, text.data(), unsigned(text.size()));
  gzclose(f);
}

}  // namespace

TEST(Import, KinetoPlainAndGzippedOnePerRank) {
  const std::string a = tempPath("rank0.json"), b = tempPath("rank1.json.gz"), out = tempPath("kineto.db");
  std::ofstream(a) << kineto(0).dump();
  writeGzip(b, kineto(1).dump());
  tr::ImportStats st = tr::importTraces({a, b}, out, false);
  EXPECT_EQ(st.files, 2);
  EXPECT_EQ(st.kernels, 2 * 4);
  EXPECT_EQ(st.host_ops, 2 * 2);
  EXPECT_EQ(st.steps, 2 * 2);
  {
    tr::RunReader rd(out);
    auto steps = rd.steps(1);
    ASSERT_EQ(steps.size(), 2u);
    EXPECT_EQ(steps[0].step, 5);
    EXPECT_EQ(steps[1].step, 6);
    // ts 30 us after the base → ns on the base clock
    auto kernels = rd.events<tr::Kernel>(0);
    ASSERT_EQ(kernels.size(), 4u);
    EXPECT_EQ(kernels[0].start_ns, 1700000000000000000LL + 30000);
    EXPECT_EQ(kernels[0].stream, 7);
    EXPECT_EQ(kernels[0].correlation, 100);
    EXPECT_EQ(kernels[0].registers, 96);
    EXPECT_EQ(kernels[0].grid[0] * kernels[0].grid[1], 64);
    int joined = 0;
    for (int rank = 0; rank < 2; ++rank)
      for (const auto& a : rd.events<tr::ApiCall>(rank))
        for (const auto& k : rd.events<tr::Kernel>(rank)) joined += a.correlation >= 0 && a.correlation == k.correlation;
    EXPECT_EQ(joined, 4);
    EXPECT_EQ(rd.events<tr::Memcpy>(0).at(0).kind, 1);  // HtoD
  }
  // report: CPU steps of 900 us. The GPU windows are placed by the launched work, the sgemms at 30
  // and 1030 us (launched by cudaLaunchKernel, correlation 100+k), reaching back to the copy without
  // a launch at [1, 9) in the first step's CPU window: [1, 1030) and [1030, 1600), the last ending
  // with the NCCL kernel that started inside it. The NCCL kernels and the copies have no launch in
  // this trace: counted apart (2 of each per rank), and where they ran: NCCL [300, 600) and
  // [1300, 1600) = 0.6 ms of comm (0.26 ms of it under the sgemms), the copies at [1, 9) and
  // [1001, 1009) 16 us of memory, and [9, 30), [600, 1001) and [1009, 1030) idle: 0.443 ms. Per
  // counted step: halves.
  tr::Report r = tr::computeReport(out);
  ASSERT_EQ(r.summary.ranks.size(), 2u);
  EXPECT_EQ(r.summary.ranks[1].steps, 2);  // imports skip no warm-up step
  EXPECT_DOUBLE_EQ(r.summary.ranks[0].step_s_mean, 0.9e-3);
  EXPECT_EQ(r.summary.breakdown_window, "gpu");
  ASSERT_TRUE(r.summary.ranks[0].gpu_step_s);
  EXPECT_NEAR(*r.summary.ranks[0].gpu_step_s, 0.7995e-3, 1e-12);
  EXPECT_EQ(r.summary.ranks[0].unattributed_events, 4);
  EXPECT_NEAR(r.summary.ranks[0].unattributed_s, 2 * 0.3e-3 + 2 * 8e-6, 1e-12);
  ASSERT_TRUE(r.summary.ranks[0].breakdown);
  EXPECT_NEAR(r.summary.ranks[0].breakdown->compute_s, 0.4e-3, 1e-12);
  EXPECT_NEAR(r.summary.ranks[0].breakdown->comm_s, 0.3e-3, 1e-12);
  EXPECT_NEAR(r.summary.ranks[0].breakdown->overlap_s, 0.13e-3, 1e-12);
  EXPECT_NEAR(r.summary.ranks[0].breakdown->memory_s, 8e-6, 1e-12);
  EXPECT_NEAR(r.summary.ranks[0].breakdown->idle_s, 0.2215e-3, 1e-12);
  EXPECT_EQ(r.top_ops_source, "kernels");
  EXPECT_EQ(r.top_ops[0].name, "ampere_sgemm_64x64_nn");
  auto ex = tr::exportChrome(out, tempPath("kineto.json"));
  EXPECT_EQ(ex.flow_pairs, 4);
}

TEST(Import, NsightSystemsSqliteExport) {
  const std::string in = tempPath("report.sqlite"), out = tempPath("nsys.db");
  {
    tr::Database d(in, tr::Database::Mode::Create);
    d.exec(std::string(nsight::kStringIds) + nsight::kKernel + nsight::kRuntime + nsight::kNvtx + nsight::kMemcpy + R"SQL(
      INSERT INTO StringIds VALUES (1, 'volta_sgemm_128x64_nn'), (2, 'cudaLaunchKernel'), (3, 'forward');
      INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1200, 1700, 0, 1, 7, 42, 99, 1, 1, 10, 1, 1, 128, 1, 1, 1024, 1024, 64);
      INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (1100, 1150, 0, 16777216 + 5, 42, 2, 0, 0);
      INSERT INTO NVTX_EVENTS VALUES (1000, 2000, 59, NULL, 0, 0, 'step', 5, 5, NULL, 0);
      INSERT INTO NVTX_EVENTS VALUES (1050, 1800, 59, NULL, 0, 0, NULL, 5, 5, 3, 0);
      INSERT INTO NVTX_EVENTS VALUES (1060, NULL, 34, NULL, 0, 0, 'a mark', 5, 5, NULL, 0);
      INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (1010, 1090, 0, 1, 7, 41, 99, 65536, 1);
    )SQL");
  }
  tr::ImportStats st = tr::importTraces({in}, out, false);
  EXPECT_EQ(st.kernels, 1);
  EXPECT_EQ(st.api_calls, 1);
  EXPECT_EQ(st.ranges, 2);  // the mark is not a range
  EXPECT_EQ(st.steps, 1);
  {
    tr::RunReader rd(out);
    auto k = rd.events<tr::Kernel>(0);
    ASSERT_EQ(k.size(), 1u);
    EXPECT_EQ(k[0].shared_bytes + k[0].registers, 2048 + 64);
    EXPECT_EQ(rd.events<tr::ApiCall>(0).at(0).correlation, k[0].correlation);
    int forward = 0;
    for (const auto& r : rd.events<tr::Range>(0)) forward += rd.string(r.name) == "forward";
    EXPECT_EQ(forward, 1);
  }
  tr::Report r = tr::computeReport(out);
  ASSERT_EQ(r.summary.ranks.size(), 1u);
  EXPECT_DOUBLE_EQ(r.summary.ranks[0].step_s_mean, 1000e-9);
  // The GPU window runs from the copy without a launch at the step's start (1010 ns, inside the CPU
  // window) to the launched kernel's end: 690 ns, 500 of compute, 80 of memory, 110 idle (the CPU's
  // 1000 ns beside it).
  EXPECT_DOUBLE_EQ(r.summary.ranks[0].gpu_step_s.value_or(0), 690e-9);
  EXPECT_DOUBLE_EQ(r.summary.ranks[0].breakdown->compute_s, 500e-9);
  EXPECT_DOUBLE_EQ(r.summary.ranks[0].breakdown->memory_s, 80e-9);
  EXPECT_NEAR(r.summary.ranks[0].breakdown->idle_s, 110e-9, 1e-15);
  EXPECT_EQ(r.top_ops[0].name, "volta_sgemm_128x64_nn");
}

TEST(Import, BadInputsAreUserErrors) {
  const std::string junk = tempPath("junk.json"), gz = tempPath("broken.json.gz"), foreign = tempPath("foreign.sqlite");
  std::ofstream(junk) << "{ not json";
  std::ofstream(gz, std::ios::binary) << std::string("\x1f\x8b\x08\x00garbage", 12);
  {
    tr::Database d(foreign, tr::Database::Mode::Create);
    d.exec("CREATE TABLE t(x)");
  }
  for (const auto& p : {junk, gz, foreign, std::string("/no/such/trace.json")}) {
    EXPECT_THROW(tr::importTraces({p}, tempPath("bad-import.db"), true), trainscope::UserError) << p;
  }
}

TEST(Import, TwoFilesClaimingOneRankAreRefused) {
  const std::string a = tempPath("same0.json"), b = tempPath("same1.json");
  std::ofstream(a) << kineto(0).dump();
  std::ofstream(b) << kineto(0).dump();
  const std::string out = tempPath("same.db");
  try {
    tr::importTraces({a, b}, out, false);
    FAIL() << "accepted";
  } catch (const trainscope::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("claims rank 0"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_FALSE(std::filesystem::exists(out + ".partial"));
}

TEST(Import, MultiMemberGzipAndADirectoryInput) {
  const std::string gz = tempPath("multi.json.gz"), out = tempPath("multi.db");
  const std::string text = kineto(0).dump();
  writeGzip(gz, text.substr(0, text.size() / 2));
  {  // a second gzip member appended: valid gzip, the JSON continues in it
    const std::string tail = tempPath("tail.gz");
    writeGzip(tail, text.substr(text.size() / 2));
    std::ifstream in(tail, std::ios::binary);
    std::ofstream(gz, std::ios::binary | std::ios::app) << in.rdbuf();
  }
  EXPECT_EQ(tr::importTraces({gz}, out, false).kernels, 4);
  const std::string dir = tempPath("a-dir");
  std::filesystem::create_directories(dir);
  auto r = trainscope::testing::cli("import " + dir + " -o " + tempPath("dir.db"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(dir + " is a directory"), std::string::npos) << r.output;
}

TEST(Import, AFileWithNothingRecognisedIsAnErrorAndLongNamesAreElidedInText) {
  const std::string empty = tempPath("nothing.json");
  std::ofstream(empty) << R"({"traceEvents": [{"ph": "i", "name": "x", "ts": 1}]})";
  auto r = trainscope::testing::cli("import " + empty + " -o " + tempPath("nothing.db"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("nothing was recognised"), std::string::npos) << r.output;
  // A 400-character kernel name: one line of the text table, whole in --json.
  nlohmann::json j = kineto(0);
  const std::string longname = "void cutlass::Kernel<" + std::string(380, 'T') + ">";
  j["traceEvents"].push_back({{"ph", "X"}, {"cat", "kernel"}, {"name", longname}, {"pid", 0}, {"tid", 7},
                              {"ts", 50.0}, {"dur", 5000.0}, {"args", {{"stream", 7}, {"correlation", 5}}}});
  const std::string in = tempPath("longname.json"), out = tempPath("longname.db");
  std::ofstream(in) << j.dump();
  tr::importTraces({in}, out, false);
  const auto rep = tr::computeReport(out);
  const std::string text = tr::formatReport(rep);
  EXPECT_EQ(text.find(longname), std::string::npos);
  EXPECT_NE(text.find("void cutlass::Kernel<TTT"), std::string::npos);
  for (std::stringstream ss(text); !ss.eof();) {
    std::string line;
    std::getline(ss, line);
    EXPECT_LT(line.size(), 200u) << line.substr(0, 60);
  }
  EXPECT_NE(tr::reportJson(rep).find(longname), std::string::npos);
}

namespace {
// A Kineto file from event lines written as text (so that numbers keep their exact decimals).
std::string kinetoText(const std::vector<std::string>& events, const std::string& head = "") {
  std::string t = "{" + head + "\"schemaVersion\": 1, \"traceEvents\": [\n";
  for (size_t i = 0; i < events.size(); ++i) t += events[i] + (i + 1 < events.size() ? ",\n" : "\n");
  return t + "]}";
}
std::string X(const std::string& cat, const std::string& name, const std::string& ts, const std::string& dur,
              int tid, const std::string& args = "{}") {
  return "{\"ph\": \"X\", \"cat\": \"" + cat + "\", \"name\": \"" + name + "\", \"pid\": 1, \"tid\": " +
         std::to_string(tid) + ", \"ts\": " + ts + ", \"dur\": " + dur + ", \"args\": " + args + "}";
}
std::string importOne(const std::string& name, const std::string& text) {
  const std::string in = tempPath(name + ".json"), out = tempPath(name + ".db");
  std::ofstream(in) << text;
  tr::importTraces({in}, out, true);
  return out;
}
}  // namespace

TEST(ImportFidelity, GpuWorkRunningPastTheCpuStepBelongsToTheStepThatLaunchedIt) {
  // Two CPU steps of 100 us. Step 1 launches two kernels at 10 and 20 us; the GPU lags: they run
  // [60, 150) and [150, 230) — past the CPU step's end (100), into step 2's CPU window. Step 2
  // launches one kernel at 120 us that runs [230, 260). A kernel with no launch runs [300, 310).
  const std::vector<std::string> ev = {
      X("user_annotation", "ProfilerStep#1", "0", "100", 1), X("user_annotation", "ProfilerStep#2", "100", "100", 1),
      X("cuda_runtime", "cudaLaunchKernel", "10", "2", 1, R"({"correlation": 1})"),
      X("cuda_runtime", "cudaLaunchKernel", "20", "2", 1, R"({"correlation": 2})"),
      X("cuda_runtime", "cudaLaunchKernel", "120", "2", 1, R"({"correlation": 3})"),
      X("kernel", "gemm_a", "60", "90", 7, R"({"device": 0, "stream": 7, "correlation": 1})"),
      X("kernel", "gemm_b", "150", "80", 7, R"({"device": 0, "stream": 7, "correlation": 2})"),
      X("kernel", "gemm_c", "230", "30", 7, R"({"device": 0, "stream": 7, "correlation": 3})"),
      X("kernel", "orphan", "300", "10", 7, R"({"device": 0, "stream": 7})")};
  const std::string db = importOne("lag", kinetoText(ev));
  tr::RunReader rd(db);
  const tr::RunSummary s = tr::summarize(rd);
  ASSERT_EQ(s.ranks.size(), 1u);
  const auto& r = s.ranks[0];
  EXPECT_EQ(s.breakdown_window, "gpu");
  EXPECT_DOUBLE_EQ(r.step_s_mean, 100e-6);                  // the CPU's step time, as recorded
  EXPECT_NEAR(r.gpu_step_s.value_or(0), (170e-6 + 30e-6) / 2, 1e-12);  // step 1: [60, 230); step 2: [230, 260)
  ASSERT_TRUE(r.breakdown);
  // Every launched kernel's time is in a step: (90 + 80 + 30) / 2 per step; none idle.
  EXPECT_NEAR(r.breakdown->compute_s, 100e-6, 1e-12);
  EXPECT_NEAR(r.breakdown->idle_s, 0, 1e-12);
  EXPECT_EQ(r.unattributed_events, 1);
  EXPECT_NEAR(r.unattributed_s, 10e-6, 1e-12);
  bool noted = false;
  for (const auto& n : s.notes) noted |= n.find("no launch in the trace") != std::string::npos;
  EXPECT_TRUE(noted);
  const std::string text = tr::formatReport(tr::computeReport(db));
  EXPECT_NE(text.find("GPU ms"), std::string::npos) << text;
}

TEST(ImportFidelity, CopiesAndSetsAreMemoryTimeAndTheCategoriesAddUpToTheWindow) {
  // One step; launched: a copy [0, 40), a kernel [40, 100), a set [100, 110), an idle gap, a kernel
  // [150, 200). Window [0, 200): compute 110, memory 50, idle 40.
  const std::vector<std::string> ev = {
      X("user_annotation", "ProfilerStep#0", "0", "50", 1),
      X("cuda_runtime", "cudaMemcpyAsync", "0", "1", 1, R"({"correlation": 1})"),
      X("cuda_runtime", "cudaLaunchKernel", "2", "1", 1, R"({"correlation": 2})"),
      X("cuda_runtime", "cudaMemsetAsync", "4", "1", 1, R"({"correlation": 3})"),
      X("cuda_runtime", "cudaLaunchKernel", "6", "1", 1, R"({"correlation": 4})"),
      X("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", "0", "40", 7,
        R"({"device": 0, "stream": 7, "correlation": 1, "bytes": 1048576})"),
      X("kernel", "k1", "40", "60", 7, R"({"device": 0, "stream": 7, "correlation": 2})"),
      X("gpu_memset", "Memset (Device)", "100", "10", 7, R"({"device": 0, "stream": 7, "correlation": 3, "bytes": 64})"),
      X("kernel", "k2", "150", "50", 7, R"({"device": 0, "stream": 7, "correlation": 4})")};
  tr::RunReader rd(importOne("copies", kinetoText(ev)));
  const auto b = tr::summarize(rd).ranks.at(0).breakdown.value();
  EXPECT_NEAR(b.compute_s, 110e-6, 1e-12);
  EXPECT_NEAR(b.memory_s, 50e-6, 1e-12);
  EXPECT_NEAR(b.idle_s, 40e-6, 1e-12);
  EXPECT_NEAR(b.compute_s + b.comm_s - b.overlap_s + b.memory_s + b.idle_s, 200e-6, 1e-12);
}

TEST(ImportFidelity, ACpuOnlyTraceIsBrokenDownFromItsOpsWithANoteAndItsGlooCollectives) {
  // PyTorch 1.x names ("Operator"), and record_param_comms for a Gloo all-reduce of 1 Mi floats.
  const std::vector<std::string> ev = {
      X("Operator", "ProfilerStep#3", "0", "1000", 1), X("Operator", "aten::mm", "100", "300", 1),
      X("cpu_op", "record_param_comms", "500", "200", 1,
        R"({"Collective name": "allreduce", "In msg nelems": 1048576, "Out msg nelems": 1048576, "Group size": 4,
            "dtype": "Float", "Process Group Description": "default_pg"})")};
  const std::string db = importOne("cpuonly", kinetoText(ev, R"("distributedInfo": {"rank": 2, "world_size": 4}, )"));
  tr::RunReader rd(db);
  EXPECT_EQ(rd.steps(2).size(), 1u);  // ProfilerStep#3 as an Operator is a step
  EXPECT_EQ(rd.steps(2)[0].step, 3);
  const auto coll = rd.collectives(2);
  ASSERT_EQ(coll.size(), 1u);
  EXPECT_EQ(coll[0].op, "all_reduce");
  EXPECT_EQ(coll[0].group, "default_pg");
  EXPECT_EQ(coll[0].group_size, 4);
  EXPECT_EQ(coll[0].bytes, 4 << 20);
  EXPECT_NEAR(coll[0].busbw(), double(4 << 20) / 200e-6 * 2 * 3 / 4, 1.0);
  const tr::RunSummary s = tr::summarize(rd);
  EXPECT_EQ(s.breakdown_source, "host_ops");
  ASSERT_EQ(s.notes.size(), 1u);
  EXPECT_NE(s.notes[0].find("no GPU events"), std::string::npos);
  const auto b = s.ranks.at(0).breakdown.value();
  EXPECT_NEAR(b.compute_s, 300e-6, 1e-12);  // aten::mm; record_param_comms is the collective: comm
  EXPECT_NEAR(b.comm_s, 200e-6, 1e-12);
  EXPECT_NEAR(b.idle_s, 500e-6, 1e-12);
  const std::string text = tr::formatReport(tr::computeReport(db));
  EXPECT_NE(text.find("note: no GPU events"), std::string::npos) << text;
}

TEST(ImportFidelity, NcclKernelsCarryTheirMessageSizesIntoCollectives) {
  const std::vector<std::string> ev = {
      X("user_annotation", "ProfilerStep#0", "0", "1000", 1),
      X("cuda_runtime", "cudaLaunchKernel", "10", "5", 1, R"({"correlation": 9})"),
      X("cpu_op", "record_param_comms", "8", "10", 1,
        R"({"Collective name": "allreduce", "In msg nelems": 1048576, "Group size": 8, "dtype": "BFloat16"})"),
      X("kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "20", "100", 20,
        R"({"device": 0, "stream": 20, "correlation": 9, "Collective name": "allreduce", "In msg nelems": 1048576,
            "Out msg nelems": 1048576, "Group size": 8, "dtype": "BFloat16", "Process Group Name": "0"})"),
      X("kernel", "ncclDevKernel_AllGather_RING_LL", "200", "50", 20,
        R"({"device": 0, "stream": 20, "Collective name": "_allgather_base", "In msg nelems": 1024,
            "Out msg nelems": 8192, "Group size": 8, "dtype": "Float", "Process Group Name": "0"})")};
  tr::RunReader rd(importOne("nccl", kinetoText(ev)));
  const auto c = rd.collectives(0);
  ASSERT_EQ(c.size(), 2u);  // the kernels' records (GPU time); the CPU op's is not counted twice
  EXPECT_EQ(c[0].op, "all_reduce");
  EXPECT_EQ(c[0].bytes, 2 << 20);
  EXPECT_EQ(c[0].group_size, 8);
  EXPECT_EQ(c[0].start_ns, 20'000);
  EXPECT_EQ(c[0].end_ns, 120'000);
  EXPECT_NEAR(c[0].busbw(), double(2 << 20) / 100e-6 * 2 * 7 / 8, 1.0);
  EXPECT_EQ(c[1].op, "all_gather");
  EXPECT_EQ(c[1].bytes, 8192 * 4);  // all-gather: the output buffer
  EXPECT_EQ(c[1].seq, 1);
}

TEST(ImportFidelity, FractionalMicrosecondsAtEpochScaleAreExactToTheNanosecond) {
  const std::vector<std::string> ev = {
      X("cpu_op", "aten::add", "1700000000123456.789", "0.001", 1),
      X("cpu_op", "aten::mul", "1700000000123457.7895", "12.3456", 1),  // the 4th decimal rounds
      X("cpu_op", "aten::sub", "1700000000123460", "1e1", 1)};          // an exponent still parses
  tr::RunReader rd(importOne("exact", kinetoText(ev)));
  const auto ops = rd.events<tr::HostOp>(0);
  ASSERT_EQ(ops.size(), 3u);
  EXPECT_EQ(ops[0].start_ns, 1700000000123456789);
  EXPECT_EQ(ops[0].end_ns, 1700000000123456790);
  EXPECT_EQ(ops[1].start_ns, 1700000000123457790);
  EXPECT_EQ(ops[1].end_ns, 1700000000123457790 + 12346);
  EXPECT_EQ(ops[2].end_ns - ops[2].start_ns, 10'000);
}

TEST(ImportFidelity, MalformedInputsGiveTheRightResultOrAClearError) {
  using trainscope::testing::cli;
  // Deeply nested args: read as a stream, no recursion — imported, the nesting ignored.
  std::string deep = "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::deep\", \"tid\": 1, \"ts\": 1, \"dur\": 2, \"args\": {\"x\": ";
  for (int i = 0; i < 200000; ++i) deep += "[";
  for (int i = 0; i < 200000; ++i) deep += "]";
  deep += "}}";
  const std::string deep_in = tempPath("deep.json");
  std::ofstream(deep_in) << kinetoText({deep});
  auto r = cli("import " + deep_in + " -o " + tempPath("deep.db") + " --overwrite");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("1 host ops"), std::string::npos) << r.output;
  // Negative durations and times past int64 ns: dropped and counted, and said.
  const std::string odd_in = tempPath("odd.json");
  std::ofstream(odd_in) << kinetoText({X("cpu_op", "good", "10", "5", 1), X("cpu_op", "negative", "20", "-5", 1),
                                       X("cpu_op", "huge", "1e300", "5", 1), X("cpu_op", "overflows", "9223372036854775", "5", 1)});
  const std::string odd_db = tempPath("odd.db");
  r = cli("import " + odd_in + " -o " + odd_db + " --overwrite");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("dropped and counted (drops table): 2 event(s) whose time does not fit int64 nanoseconds, 1 with "
                          "a negative duration"),
            std::string::npos)
      << r.output;
  tr::RunReader rd(odd_db);
  EXPECT_EQ(rd.events<tr::HostOp>(0).size(), 1u);
  ASSERT_EQ(rd.drops().size(), 1u);
  EXPECT_EQ(rd.drops()[0].dropped, 3);
  r = cli("report " + odd_db);
  EXPECT_NE(r.output.find("3 import events were left out while importing"), std::string::npos) << r.output;
  // A rank past 2^31: refused, not truncated.
  const std::string big_in = tempPath("bigrank.json");
  std::ofstream(big_in) << kinetoText({X("cpu_op", "a", "1", "1", 1)}, R"("distributedInfo": {"rank": 3000000000}, )");
  r = cli("import " + big_in + " -o " + tempPath("bigrank.db") + " --overwrite");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("distributedInfo.rank 3000000000 is out of range"), std::string::npos) << r.output;
  // Truncated JSON: the byte where it stopped.
  const std::string cut_in = tempPath("cut.json");
  std::ofstream(cut_in) << kinetoText({X("cpu_op", "a", "1", "1", 1)}).substr(0, 60);
  r = cli("import " + cut_in + " -o " + tempPath("cut.db") + " --overwrite");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("is not valid JSON (at byte"), std::string::npos) << r.output;
}

TEST(ImportFidelity, AHugeStepNumberIsAClearErrorAndBigThreadIdsStayThreadsInTheChromeExport) {
  using trainscope::testing::cli;
  const std::string huge = tempPath("hugestep.json");
  std::ofstream(huge) << kinetoText({X("user_annotation", "ProfilerStep#99999999999999999999999", "1", "5", 1)});
  auto r = cli("import " + huge + " -o " + tempPath("hugestep.db") + " --overwrite");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("step number of \"ProfilerStep#99999999999999999999999\" is out of range"), std::string::npos)
      << r.output;
  // OS thread ids past 999,999 (real traces have them) are threads, not streams.
  const std::string db = importOne("bigtid", kinetoText({X("cpu_op", "aten::mm", "1", "5", 1234567),
                                                         X("kernel", "k", "2", "3", 7, R"({"device": 0, "stream": 7})")}));
  const std::string json = tempPath("bigtid.trace.json");
  tr::exportChrome(db, json, true);
  const auto j = nlohmann::json::parse(std::ifstream(json));
  std::set<std::string> lanes;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name") lanes.insert(e["args"]["name"].get<std::string>());
  EXPECT_TRUE(lanes.count("thread 1234567")) << j.dump();
  EXPECT_TRUE(lanes.count("stream 7"));
}

// A rank-3 trace as torch.profiler writes it (kineto_structure.h): the metadata events name its
// threads, streams and process in `threads`; gpu_user_annotation lands on its device stream in
// `gpu_annotations`, not on a CPU thread; a tid written negative or as its unsigned 32-bit form is one
// thread; only rank 3 exists.
TEST(ImportStructure, KinetoNamesThreadsStreamsAndTheProcessAndKeepsGpuAnnotationsOnTheirStream) {
  const std::string in = tempPath("structure.json"), out = tempPath("structure.db");
  std::ofstream(in) << trainscope::testing::kinetoStructureTrace();
  const tr::ImportStats st = tr::importTraces({in}, out, false);
  EXPECT_EQ(st.gpu_annotations, 2);
  EXPECT_EQ(st.ranges, 1);  // ProfilerStep#7 on the CPU
  EXPECT_EQ(st.threads, 5);
  tr::RunReader rd(out);
  EXPECT_EQ(rd.schemaVersion(), tr::kSchemaVersion);  // imports are written at this build's version
  // Only rank 3: steps, the ranks table and every event table.
  EXPECT_EQ(rd.stepRanks(), std::vector<int64_t>{3});
  ASSERT_EQ(rd.ranks().size(), 1u);
  EXPECT_EQ(rd.ranks()[0].rank, 3);
  EXPECT_TRUE(rd.events<tr::HostOp>(0).empty());
  EXPECT_EQ(rd.steps(3).at(0).step, 7);
  // The threads table, by (rank, kind, device, tid).
  struct Row {
    int kind;
    int64_t device, tid;
    std::string name;
    std::optional<int64_t> sort;
    bool operator==(const Row& o) const {
      return std::tie(kind, device, tid, name, sort) == std::tie(o.kind, o.device, o.tid, o.name, o.sort);
    }
  };
  std::vector<Row> rows;
  for (const tr::ThreadName& t : rd.threads()) {
    EXPECT_EQ(t.rank, 3);
    rows.push_back({t.kind, t.device, t.tid, t.name == tr::kNoString ? "" : rd.string(t.name), t.sort_index});
  }
  const int thread = int(tr::ThreadKind::Thread), stream = int(tr::ThreadKind::Stream),
            process = int(tr::ThreadKind::Process);
  const std::vector<Row> want = {{thread, -1, -77, "thread 77 (pt_autograd_0)", 5000},
                                 {thread, -1, 4242, "thread 4242 (python3)", 4242},
                                 {stream, 0, 7, "stream 7", 7},
                                 {stream, 0, 20, "stream 20", 20},
                                 {process, -1, 4242, "python3", 4242}};
  EXPECT_TRUE(rows == want) << rows.size() << " rows";
  for (size_t i = 0; i < rows.size() && i < want.size(); ++i)
    EXPECT_TRUE(rows[i] == want[i]) << i << ": " << rows[i].kind << " " << rows[i].tid << " \"" << rows[i].name << "\"";
  // GPU annotations: on device 0, stream 7, at the file's exact times; none among the CPU's ranges.
  const auto ann = rd.events<tr::GpuAnnotation>(3);
  ASSERT_EQ(ann.size(), 2u);
  for (const auto& a : ann) {
    EXPECT_EQ(a.device, 0);
    EXPECT_EQ(a.stream, 7);
    EXPECT_EQ(a.start_ns, trainscope::testing::kStructureBase + 99'999);
    EXPECT_EQ(rd.string(a.domain), "kineto");
  }
  std::set<std::string> ann_names;
  for (const auto& a : ann) ann_names.insert(rd.string(a.name));
  EXPECT_EQ(ann_names, (std::set<std::string>{"ProfilerStep#7", "forward"}));
  const auto ranges = rd.events<tr::Range>(3);
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0].tid, 4242);
  // Negative tids are kept as Kineto wrote them; 4294967291 is the same thread as -5.
  std::set<int64_t> tids;
  for (const auto& o : rd.events<tr::HostOp>(3)) tids.insert(o.tid);
  EXPECT_EQ(tids, (std::set<int64_t>{-77, -5, 4242}));
  // The Chrome export names its rows by the recorded names; the annotations have their own row.
  const std::string json = tempPath("structure.trace.json");
  tr::exportChrome(out, json, true);
  const auto j = nlohmann::json::parse(std::ifstream(json));
  std::set<std::string> lanes, cats;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") lanes.insert(e["args"]["name"].get<std::string>());
    if (e["ph"] == "X") cats.insert(e["cat"].get<std::string>());
  }
  EXPECT_EQ(lanes, (std::set<std::string>{"thread 4242 (python3)", "thread 77 (pt_autograd_0)", "thread -5",
                                          "stream 7", "stream 7 annotations", "stream 20"}));
  EXPECT_TRUE(cats.count("gpu_annotation"));
}

// Nsight Systems names its threads (ThreadNames) and processes (PROCESSES): recorded for the tids the
// events take (globalTid & 0xFFFFFF), and for the processes whose threads recorded events.
TEST(ImportStructure, NsightSystemsThreadAndProcessNames) {
  const std::string in = tempPath("names.sqlite"), out = tempPath("names.db");
  const int64_t main_thread = (int64_t(4242) << 24) | 4242, worker = (int64_t(4242) << 24) | 4250;
  {
    tr::Database d(in, tr::Database::Mode::Create);
    d.exec(std::string(nsight::kStringIds) + nsight::kNvtx + nsight::kThreadNames + nsight::kProcesses + R"SQL(
      INSERT INTO StringIds VALUES (1, 'python3'), (2, 'pt_autograd_0'), (3, 'nsys-launcher');
    )SQL");
    d.exec("INSERT INTO NVTX_EVENTS VALUES (1000, 2000, 59, NULL, 0, 0, 'step', " + std::to_string(main_thread) +
           ", NULL, NULL, 0), (1100, 1500, 59, NULL, 0, 0, 'backward', " + std::to_string(worker) + ", NULL, NULL, 0)");
    d.exec("INSERT INTO ThreadNames VALUES (1, 0, " + std::to_string(main_thread) + "), (2, 0, " + std::to_string(worker) +
           "), (3, 0, " + std::to_string((int64_t(99) << 24) | 99) + ")");
    d.exec("INSERT INTO PROCESSES VALUES (" + std::to_string(int64_t(4242) << 24) + ", 4242, 'python3'), (" +
           std::to_string(int64_t(99) << 24) + ", 99, 'nsys-launcher')");
  }
  tr::importTraces({in}, out, false);
  tr::RunReader rd(out);
  std::vector<std::tuple<int, int64_t, std::string>> rows;
  for (const tr::ThreadName& t : rd.threads()) rows.emplace_back(t.kind, t.tid, rd.string(t.name));
  const int thread = int(tr::ThreadKind::Thread), process = int(tr::ThreadKind::Process);
  EXPECT_EQ(rows, (std::vector<std::tuple<int, int64_t, std::string>>{{thread, 99, "nsys-launcher"},
                                                                       {thread, 4242, "python3"},
                                                                       {thread, 4250, "pt_autograd_0"},
                                                                       {process, 4242, "python3"}}));
  std::set<int64_t> range_tids;
  for (const auto& r : rd.events<tr::Range>(0)) range_tids.insert(r.tid);
  EXPECT_EQ(range_tids, (std::set<int64_t>{4242, 4250}));  // the tids the names are recorded under
}
