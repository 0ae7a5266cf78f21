// test_tracer.cpp — the run database as a contract: schema round trip, exact drop accounting,
// shard merge with known clock offsets, report numbers on a hand-built trace, Chrome export,
// and clear errors on truncated, corrupted or foreign files.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "trainscope/common/error.h"
#include "trainscope/tracer/chrome.h"
#include "trainscope/tracer/merge.h"
#include "trainscope/tracer/report.h"
#include "trainscope/tracer/run_store.h"
#include "trainscope/tracer/sqlite.h"
#include "trainscope/tracer/trace.h"

namespace tr = trainscope::tracer;
using trainscope::testing::sqlOne;
using trainscope::testing::tempPath;

namespace {


// A run database holding one rank's steps, as RunStore writes them.
void makeRun(const std::string& path, const std::vector<std::pair<int64_t, int64_t>>& windows, int rank = 0) {
  tr::RunStore store(path, true);
  store.setMeta("world_size", "1");
  store.setMeta("config", R"({"workload":"hand-built"})");
  for (size_t k = 0; k < windows.size(); ++k) {
    tr::StepRecord r;
    r.rank = rank;
    r.step = int64_t(k);
    r.start_ns = windows[k].first;
    r.step_time_ns = windows[k].second - windows[k].first;
    r.tokens = 1000;
    r.tokens_per_s = 1e12 / double(r.step_time_ns);
    r.peak_bytes = 1 << 20;
    store.appendStep(r);
  }
}

}  // namespace

TEST(Tracer, EveryEventKindRoundTrips) {
  const std::string shard = tempPath("roundtrip.db");
  {
    tr::Tracer t(shard, 3, tr::TraceLevel::All);
    const uint32_t n = t.intern("forward"), d = t.intern("trainscope"), k = t.intern("sgemm_kernel");
    t.record(tr::RangeEvent{100, 200, n, d, 7, 1, 0});
    t.record(tr::OpEvent{110, 150, t.intern("aten::mm"), 7, 42, t.intern("[[4,8], [8,2]]")});
    t.record(tr::KernelEvent{300, 400, 0, 7, k, 99, {128, 1, 1}, {256, 1, 1}, 64, 4096});
    t.record(tr::MemcpyEvent{500, 600, 0, 7, 100, int32_t(tr::MemcpyKind::HtoD), 1 << 20});
    t.record(tr::MemsetEvent{700, 710, 0, 7, 101, 4096, 0});
    t.record(tr::ApiEvent{290, 295, 7, t.intern("cudaLaunchKernel"), 99, int32_t(tr::ApiKind::Runtime)});
    t.record(tr::CounterEvent{800, t.intern("memory.allocated_bytes"), 12345});
    t.record(tr::CollectiveEvent{"all_reduce", "dp", 2, 5, 1024, 900, 1000, 1.0e9, 1.0e9});
    t.close();
    for (const auto& s : t.stats()) EXPECT_EQ(s.emitted, s.stored + s.dropped);
  }
  EXPECT_EQ(sqlOne(shard, "SELECT COUNT(*) FROM ranges r JOIN strings s ON s.id = r.name_id WHERE s.value='forward' "
                         "AND r.rank=3 AND r.start_ns=100 AND r.end_ns=200 AND r.tid=7 AND r.depth=1"), 1);
  EXPECT_EQ(sqlOne(shard, "SELECT seq FROM host_ops"), 42);
  EXPECT_EQ(sqlOne(shard, "SELECT COUNT(*) FROM host_ops h JOIN strings s ON s.id=h.shapes_id WHERE s.value='[[4,8], [8,2]]'"), 1);
  EXPECT_EQ(sqlOne(shard, "SELECT grid_x * block_x + registers + shared_bytes FROM kernels WHERE correlation = 99"),
            128 * 256 + 64 + 4096);
  EXPECT_EQ(sqlOne(shard, "SELECT k.start_ns FROM api_calls a JOIN kernels k ON k.correlation = a.correlation"), 300);
  EXPECT_EQ(sqlOne(shard, "SELECT kind * bytes FROM memcpy"), 1 << 20);
  EXPECT_EQ(sqlOne(shard, "SELECT bytes FROM memset"), 4096);
  EXPECT_EQ(sqlOne(shard, "SELECT CAST(value AS INTEGER) FROM counters"), 12345);
  EXPECT_EQ(sqlOne(shard, "SELECT bytes FROM collectives WHERE op='all_reduce' AND grp='dp'"), 1024);
  EXPECT_EQ(sqlOne(shard, "SELECT SUM(emitted) FROM drops"), 8);
  EXPECT_EQ(sqlOne(shard, "SELECT value FROM meta WHERE key='schema_version'"), tr::kSchemaVersion);
}

TEST(Tracer, EmittedEqualsStoredPlusDroppedUnderOverload) {
  const std::string shard = tempPath("overload.db");
  tr::Tracer t(shard, 0, tr::TraceLevel::All, /*capacity=*/64);
  const uint32_t n = t.intern("x");
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) t.record(tr::RangeEvent{i, i + 1, n, n, tr::threadId(), 0, 0});
    });
  for (auto& th : threads) th.join();
  t.close();
  const auto s = t.stats()[tr::kRanges];
  EXPECT_EQ(s.emitted, 80000);
  EXPECT_GT(s.dropped, 0);  // 64 slots cannot hold four threads' bursts
  EXPECT_EQ(s.emitted, s.stored + s.dropped);
  EXPECT_EQ(sqlOne(shard, "SELECT COUNT(*) FROM ranges"), s.stored);
  EXPECT_EQ(sqlOne(shard, "SELECT emitted - stored - dropped FROM drops WHERE source='ranges'"), 0);
  EXPECT_EQ(sqlOne(shard, "SELECT dropped FROM drops WHERE source='ranges'"), s.dropped);
}

TEST(Tracer, ShardsMergeOntoRankZerosClock) {
  const std::string run = tempPath("merge.db"), s0 = tempPath("merge.db.rank0"), s1 = tempPath("merge.db.rank1");
  makeRun(run, {{0, 1000}});
  {
    tr::Tracer a(s0, 0, tr::TraceLevel::Ranges);
    a.intern("padding-so-ids-differ");
    a.record(tr::RangeEvent{100, 200, a.intern("forward"), a.intern("trainscope"), 0, 0, 0});
    tr::Tracer b(s1, 1, tr::TraceLevel::Ranges);
    b.record(tr::RangeEvent{100, 200, b.intern("backward"), b.intern("trainscope"), 0, 0, 0});
    b.record(tr::RangeEvent{300, 350, b.intern("forward"), b.intern("trainscope"), 0, 0, 0});
    b.record(tr::CollectiveEvent{"all_reduce", "dp", 2, 0, 64, 400, 500, 0, 0});
  }
  // Rank 1's clock runs 1000 ns behind at the start and 3000 ns behind at the end: mean 2000.
  tr::mergeShards(run, {{s0, 0, "h0", "cpu", 11, 0, 0}, {s1, 1, "h1", "cpu", 12, 1000, 3000}});
  EXPECT_FALSE(std::filesystem::exists(s1));
  EXPECT_EQ(sqlOne(run, "SELECT r.start_ns FROM ranges r JOIN strings s ON s.id=r.name_id WHERE r.rank=1 AND s.value='backward'"), 2100);
  EXPECT_EQ(sqlOne(run, "SELECT r.end_ns FROM ranges r JOIN strings s ON s.id=r.name_id WHERE r.rank=1 AND s.value='forward'"), 2350);
  EXPECT_EQ(sqlOne(run, "SELECT r.start_ns FROM ranges r JOIN strings s ON s.id=r.name_id WHERE r.rank=0 AND s.value='forward'"), 100);
  EXPECT_EQ(sqlOne(run, "SELECT COUNT(DISTINCT value) FROM strings"), sqlOne(run, "SELECT COUNT(*) FROM strings"));
  EXPECT_EQ(sqlOne(run, "SELECT start_ns FROM collectives WHERE rank=1"), 2400);
  EXPECT_EQ(sqlOne(run, "SELECT clock_offset_ns FROM ranks WHERE rank=1"), 2000);
  EXPECT_EQ(sqlOne(run, "SELECT pid FROM ranks WHERE rank=1"), 12);
}

TEST(Tracer, MergeTiesNcclKernelsToTheirCollectivesInOrder) {
  const std::string run = tempPath("nccl.db"), shard = tempPath("nccl.db.rank0");
  makeRun(run, {{0, 1000}});
  {
    tr::Tracer t(shard, 0, tr::TraceLevel::All);
    const uint32_t nccl = t.intern("ncclDevKernel_AllReduce_Sum_f32_RING_LL"), gemm = t.intern("sm90_gemm");
    t.record(tr::KernelEvent{100, 200, 0, 1, gemm, 1, {1, 1, 1}, {1, 1, 1}, 0, 0});
    t.record(tr::KernelEvent{310, 390, 0, 9, nccl, 2, {1, 1, 1}, {1, 1, 1}, 0, 0});
    t.record(tr::KernelEvent{610, 690, 0, 9, nccl, 3, {1, 1, 1}, {1, 1, 1}, 0, 0});
    t.record(tr::CollectiveEvent{"all_reduce", "dp", 2, 7, 64, 300, 400, 0, 0});
    t.record(tr::CollectiveEvent{"barrier", "world", 2, 0, 0, 450, 460, 0, 0});
    t.record(tr::CollectiveEvent{"all_reduce", "dp", 2, 8, 64, 600, 700, 0, 0});
  }
  tr::mergeShards(run, {{shard, 0, "h", "cuda:0", 1, 0, 0}});
  EXPECT_EQ(sqlOne(run, "SELECT collective_seq FROM kernels WHERE correlation = 2"), 7);
  EXPECT_EQ(sqlOne(run, "SELECT collective_seq FROM kernels WHERE correlation = 3"), 8);
  EXPECT_EQ(sqlOne(run, "SELECT COUNT(*) FROM kernels WHERE correlation = 1 AND collective_seq IS NULL"), 1);
}

TEST(Report, HandBuiltTraceGivesHandComputedBreakdown) {
  const std::string run = tempPath("report.db"), shard = tempPath("report.db.rank0");
  // Step 0 is skipped by the report; step 1 is the window [1000, 2000).
  makeRun(run, {{0, 1000}, {1000, 2000}});
  {
    tr::Tracer t(shard, 0, tr::TraceLevel::Ops);
    const uint32_t d = t.intern("trainscope");
    t.record(tr::RangeEvent{1100, 1400, t.intern("forward"), d, 0, 0, 0});
    t.record(tr::RangeEvent{1400, 1800, t.intern("backward"), d, 0, 0, 0});
    t.record(tr::RangeEvent{1150, 1250, t.intern("layer"), d, 0, 1, 0});  // nested: not counted twice
    t.record(tr::CollectiveEvent{"all_reduce", "dp", 2, 0, 1000000, 1600, 1900, 0, 0});
    t.record(tr::OpEvent{1100, 1300, t.intern("aten::mm"), 0, 1, UINT32_MAX});
    t.record(tr::OpEvent{1300, 1350, t.intern("aten::mm"), 0, 2, UINT32_MAX});
    t.record(tr::OpEvent{1400, 1420, t.intern("aten::gelu"), 0, 3, UINT32_MAX});
    // nested, on another thread: the backward node [1500, 1800) runs aten::mm [1550, 1700) inside
    t.record(tr::OpEvent{1500, 1800, t.intern("MmBackward0"), 1, 4, UINT32_MAX});
    t.record(tr::OpEvent{1550, 1700, t.intern("aten::mm"), 1, 5, UINT32_MAX});
  }
  tr::mergeShards(run, {{shard, 0, "h", "cpu", 1, 0, 0}});
  tr::Report r = tr::computeReport(run);
  ASSERT_EQ(r.ranks.size(), 1u);
  const auto& k = r.ranks[0];
  EXPECT_EQ(k.steps, 1);
  EXPECT_DOUBLE_EQ(k.step_ms_mean, 1000e-6);
  EXPECT_DOUBLE_EQ(k.compute_ms, 700e-6);  // [1100, 1800)
  EXPECT_DOUBLE_EQ(k.comm_ms, 300e-6);     // [1600, 1900)
  EXPECT_DOUBLE_EQ(k.overlap_ms, 200e-6);  // [1600, 1800)
  EXPECT_DOUBLE_EQ(k.idle_ms, 200e-6);     // [1000, 1100) and [1900, 2000)
  ASSERT_EQ(r.top_ops_source, "host_ops");
  ASSERT_GE(r.top_ops.size(), 2u);
  EXPECT_EQ(r.top_ops[0].name, "aten::mm");
  EXPECT_EQ(r.top_ops[0].count, 3);
  EXPECT_DOUBLE_EQ(r.top_ops[0].total_ms, 400e-6);
  EXPECT_DOUBLE_EQ(r.top_ops[0].self_ms, 400e-6);
  EXPECT_EQ(r.top_ops[1].name, "MmBackward0");
  EXPECT_DOUBLE_EQ(r.top_ops[1].total_ms, 300e-6);
  EXPECT_DOUBLE_EQ(r.top_ops[1].self_ms, 150e-6);  // 300 minus the nested mm
  ASSERT_EQ(r.collectives.size(), 1u);
  EXPECT_EQ(r.collectives[0].bytes, 1000000);
  auto j = nlohmann::json::parse(tr::reportJson(r));
  EXPECT_DOUBLE_EQ(j["ranks"][0]["idle_ms"].get<double>(), 200e-6);
}

TEST(Report, IntervalArithmetic) {
  auto u = tr::unionOf({{5, 10}, {0, 3}, {2, 4}, {9, 12}});
  ASSERT_EQ(u.size(), 2u);
  EXPECT_EQ(u[0].begin, 0);
  EXPECT_EQ(u[0].end, 4);
  EXPECT_EQ(u[1].end, 12);
  EXPECT_EQ(tr::coveredWithin(u, 3, 11), 1 + 6);
  auto i = tr::intersect(u, tr::unionOf({{1, 6}}));
  EXPECT_EQ(tr::coveredWithin(i, 0, 100), 3 + 1);
}

TEST(ChromeExport, ParsesAndHasTheRightCounts) {
  const std::string run = tempPath("chrome.db"), shard = tempPath("chrome.db.rank0"), out = tempPath("trace.json");
  makeRun(run, {{0, 1000}, {1000, 2000}});
  {
    tr::Tracer t(shard, 0, tr::TraceLevel::All);
    t.record(tr::RangeEvent{100, 200, t.intern("forward"), t.intern("trainscope"), 0, 0, 0});
    t.record(tr::OpEvent{110, 150, t.intern("aten::mm"), 0, 1, UINT32_MAX});
    t.record(tr::ApiEvent{290, 295, 0, t.intern("cudaLaunchKernel"), 77, 0});
    t.record(tr::KernelEvent{300, 400, 0, 7, t.intern("k"), 77, {1, 1, 1}, {32, 1, 1}, 16, 0});
    t.record(tr::CollectiveEvent{"all_reduce", "dp", 2, 0, 64, 400, 500, 0, 0});
    t.record(tr::CounterEvent{800, t.intern("memory.allocated_bytes"), 5});
  }
  tr::mergeShards(run, {{shard, 0, "h", "cpu", 1, 0, 0}});
  auto st = tr::exportChrome(run, out);
  EXPECT_EQ(st.complete_events, 2 /*steps*/ + 1 + 1 + 1 /*api*/ + 1 /*kernel*/ + 1 /*collective*/);
  EXPECT_EQ(st.counter_events, 1);
  EXPECT_EQ(st.flow_pairs, 1);
  std::ifstream in(out);
  auto j = nlohmann::json::parse(in);
  int x = 0, flows = 0, meta = 0;
  for (const auto& e : j["traceEvents"]) {
    const std::string ph = e["ph"];
    x += ph == "X";
    flows += ph == "s" || ph == "f";
    meta += ph == "M";
  }
  EXPECT_EQ(x, st.complete_events);
  EXPECT_EQ(flows, 2);
  EXPECT_GE(meta, 1 + 3);  // process name, host thread, stream 7, collectives row
}

TEST(RunDatabaseErrors, TruncatedCorruptedAndForeignFilesGiveClearErrors) {
  const std::string good = tempPath("good.db");
  makeRun(good, {{0, 1000}, {1000, 2000}});
  // foreign: a valid SQLite database that is not ours
  const std::string foreign = tempPath("foreign.db");
  {
    tr::Database d(foreign, tr::Database::Mode::Create);
    d.exec("CREATE TABLE t(x)");
  }
  // corrupted: not SQLite at all
  const std::string garbage = tempPath("garbage.db");
  std::ofstream(garbage) << std::string(8192, 'x');
  // truncated: the first 1000 bytes of a real one
  const std::string truncated = tempPath("truncated.db");
  {
    std::ifstream in(good, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(truncated, std::ios::binary) << bytes.substr(0, 1000);
  }
  for (const auto& p : {foreign, garbage, truncated}) {
    try {
      tr::computeReport(p);
      FAIL() << p << " was accepted";
    } catch (const trainscope::UserError& e) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    } catch (const tr::SqliteError& e) {
      EXPECT_NE(std::string(e.what()).size(), 0u);
    }
  }
  // The command line: exit 2, a message, no crash.
  for (const auto& p : {foreign, garbage, truncated, std::string("/no/such.db")}) {
    FILE* f = popen((std::string(TRAINSCOPE_CLI) + " report " + p + " 2>&1").c_str(), "r");
    std::string outp;
    char buf[512];
    while (fgets(buf, sizeof(buf), f)) outp += buf;
    const int st = pclose(f);
    EXPECT_TRUE(WIFEXITED(st)) << p;
    EXPECT_EQ(WEXITSTATUS(st), 2) << p << ": " << outp;
    EXPECT_NE(outp.find("error:"), std::string::npos) << outp;
  }
}

TEST(TraceEndToEnd, TwoRankRunMergesBothRanksWithExactDropCounts) {
  const std::string db = tempPath("e2e.db");
  const std::string cmd = std::string("timeout 300 ") + TRAINSCOPE_CLI +
                          " run --workload tiny --seq 32 --mbs 2 --gbs 8 --steps 3 --device cpu --nproc 2 -q "
                          "--trace " + db + " --trace-level ops 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  char buf[512];
  std::string outp;
  while (fgets(buf, sizeof(buf), f)) outp += buf;
  ASSERT_EQ(pclose(f), 0) << outp;
  for (int r = 0; r < 2; ++r) {
    EXPECT_GT(sqlOne(db, "SELECT COUNT(*) FROM ranges WHERE rank=" + std::to_string(r)), 0);
    EXPECT_GT(sqlOne(db, "SELECT COUNT(*) FROM host_ops WHERE rank=" + std::to_string(r)), 0);
    EXPECT_GT(sqlOne(db, "SELECT COUNT(*) FROM collectives WHERE rank=" + std::to_string(r) + " AND op='all_reduce'"), 0);
    EXPECT_EQ(sqlOne(db, "SELECT COUNT(*) FROM ranks WHERE rank=" + std::to_string(r)), 1);
  }
  EXPECT_EQ(sqlOne(db, "SELECT SUM(emitted - stored - dropped) FROM drops"), 0);
  EXPECT_EQ(sqlOne(db, "SELECT COUNT(*) FROM drops"), 2 * tr::kSourceCount);
  // every range name the runtime emits is one of the constants
  EXPECT_EQ(sqlOne(db, "SELECT COUNT(*) FROM ranges r JOIN strings s ON s.id=r.name_id WHERE s.value='step'"), 2 * 3);
  EXPECT_GT(sqlOne(db, "SELECT COUNT(*) FROM counters"), 0);
  EXPECT_FALSE(std::filesystem::exists(db + ".rank1"));
  tr::Report rep = tr::computeReport(db);
  ASSERT_EQ(rep.ranks.size(), 2u);
  EXPECT_GT(rep.ranks[0].compute_ms, 0);
  EXPECT_GT(rep.ranks[0].comm_ms, 0);
}
