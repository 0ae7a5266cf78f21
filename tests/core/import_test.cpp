// test_import.cpp — Kineto (PyTorch profiler) JSON, plain and gzipped, and Nsight Systems SQLite
// exports, written here by hand in each format's layout, import into a run database that report
// and export then read like a native trace.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "trainscope/common/error.h"
#include "trainscope/rundb/chrome.h"
#include "trainscope/rundb/import.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/report.h"
#include "trainscope/rundb/sqlite.h"

namespace tr = trainscope::rundb;
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
  // report: steps of 900 us; compute = the sgemm [30, 430), comm = the NCCL kernel [300, 600)
  tr::Report r = tr::computeReport(out);
  ASSERT_EQ(r.summary.ranks.size(), 2u);
  EXPECT_EQ(r.summary.ranks[1].steps, 2);  // imports skip no warm-up step
  EXPECT_DOUBLE_EQ(r.summary.ranks[0].step_s_mean, 0.9e-3);
  ASSERT_TRUE(r.summary.ranks[0].breakdown);
  EXPECT_NEAR(r.summary.ranks[0].breakdown->compute_s, 0.4e-3, 1e-12);
  EXPECT_NEAR(r.summary.ranks[0].breakdown->comm_s, 0.3e-3, 1e-12);
  EXPECT_NEAR(r.summary.ranks[0].breakdown->overlap_s, 0.13e-3, 1e-12);
  EXPECT_EQ(r.top_ops_source, "kernels");
  EXPECT_EQ(r.top_ops[0].name, "ampere_sgemm_64x64_nn");
  auto ex = tr::exportChrome(out, tempPath("kineto.json"));
  EXPECT_EQ(ex.flow_pairs, 4);
}

TEST(Import, NsightSystemsSqliteExport) {
  const std::string in = tempPath("report.sqlite"), out = tempPath("nsys.db");
  {
    tr::Database d(in, tr::Database::Mode::Create);
    d.exec(R"SQL(
      CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
      CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER, contextId INTEGER,
        streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER, shortName INTEGER,
        gridX INTEGER, gridY INTEGER, gridZ INTEGER, blockX INTEGER, blockY INTEGER, blockZ INTEGER,
        staticSharedMemory INTEGER, dynamicSharedMemory INTEGER, registersPerThread INTEGER);
      CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, eventClass INTEGER, globalTid INTEGER,
        correlationId INTEGER, nameId INTEGER, returnValue INTEGER, callchainId INTEGER);
      CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, rangeId INTEGER, category INTEGER,
        color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, domainId INTEGER);
      CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER, end INTEGER, deviceId INTEGER, contextId INTEGER,
        streamId INTEGER, correlationId INTEGER, globalPid INTEGER, bytes INTEGER, copyKind INTEGER);
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
  EXPECT_DOUBLE_EQ(r.summary.ranks[0].breakdown->compute_s, 500e-9);
  EXPECT_DOUBLE_EQ(r.summary.ranks[0].breakdown->idle_s, 500e-9);
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
  EXPECT_NE(r.output.find(dir + " is not a regular file"), std::string::npos) << r.output;
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
