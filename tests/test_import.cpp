// test_import.cpp — Kineto (PyTorch profiler) JSON, plain and gzipped, and Nsight Systems SQLite
// exports, written here by hand in each format's layout, import into a run database that report
// and export then read like a native trace.
#include <gtest/gtest.h>
#include <zlib.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "trainscope/common/error.h"
#include "trainscope/tracer/chrome.h"
#include "trainscope/tracer/import.h"
#include "trainscope/tracer/report.h"
#include "trainscope/tracer/sqlite.h"

namespace tr = trainscope::tracer;
using trainscope::testing::sqlOne;
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
  EXPECT_EQ(sqlOne(out, "SELECT COUNT(*) FROM steps WHERE rank = 1 AND step IN (5, 6)"), 2);
  // ts 30 us after the base → ns on the base clock
  EXPECT_EQ(sqlOne(out, "SELECT MIN(start_ns) FROM kernels WHERE rank = 0 AND stream = 7"), 1700000000000000000LL + 30000);
  EXPECT_EQ(sqlOne(out, "SELECT COUNT(*) FROM api_calls a JOIN kernels k ON k.rank = a.rank AND k.correlation = a.correlation"), 4);
  EXPECT_EQ(sqlOne(out, "SELECT registers FROM kernels WHERE correlation = 100 AND rank = 0"), 96);
  EXPECT_EQ(sqlOne(out, "SELECT grid_x * grid_y FROM kernels WHERE correlation = 100 AND rank = 0"), 64);
  EXPECT_EQ(sqlOne(out, "SELECT kind FROM memcpy LIMIT 1"), 1);  // HtoD
  // report: steps of 900 us; compute = the sgemm [30, 430), comm = the NCCL kernel [300, 600)
  tr::Report r = tr::computeReport(out);
  ASSERT_EQ(r.ranks.size(), 2u);
  EXPECT_EQ(r.ranks[1].steps, 2);
  EXPECT_DOUBLE_EQ(r.ranks[0].step_ms_mean, 0.9);
  EXPECT_NEAR(r.ranks[0].compute_ms, 0.4, 1e-9);
  EXPECT_NEAR(r.ranks[0].comm_ms, 0.3, 1e-9);
  EXPECT_NEAR(r.ranks[0].overlap_ms, 0.13, 1e-9);
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
  EXPECT_EQ(sqlOne(out, "SELECT shared_bytes + registers FROM kernels"), 2048 + 64);
  EXPECT_EQ(sqlOne(out, "SELECT COUNT(*) FROM api_calls a JOIN kernels k ON k.correlation = a.correlation"), 1);
  EXPECT_EQ(sqlOne(out, "SELECT COUNT(*) FROM ranges r JOIN strings s ON s.id = r.name_id WHERE s.value = 'forward'"), 1);
  tr::Report r = tr::computeReport(out);
  ASSERT_EQ(r.ranks.size(), 1u);
  EXPECT_DOUBLE_EQ(r.ranks[0].step_ms_mean, 1000e-6);
  EXPECT_DOUBLE_EQ(r.ranks[0].compute_ms, 500e-6);
  EXPECT_DOUBLE_EQ(r.ranks[0].idle_ms, 500e-6);
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
