// report_test.cpp — the run summary and the report on hand-built traces with hand-computed numbers:
// the step breakdown, self time of nested ops, the summary's definitions over several ranks, the
// missing-rank warning, and the Chrome export (counts, flows one-to-many, the input never replaced).
#include <gtest/gtest.h>

#include <sstream>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "trainscope/common/error.h"
#include "trainscope/rundb/chrome.h"
#include "trainscope/rundb/merge.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/report.h"
#include "trainscope/rundb/store.h"
#include "trainscope/rundb/summary.h"
#include "trainscope/tracer/trace.h"

namespace db = trainscope::rundb;
namespace tr = trainscope::tracer;
using trainscope::testing::cli;
using trainscope::testing::tempPath;

namespace {

// Steps of every rank (the same windows unless `slow` stretches one rank's), then the shards merged.
void makeTraced(const std::string& path, const std::vector<std::pair<int64_t, int64_t>>& windows,
                const std::function<void(tr::Tracer&)>& events, int world = 1,
                const std::function<void(db::Step&)>& tweak = nullptr) {
  std::vector<db::ShardInfo> shards;
  for (int rank = 0; rank < world; ++rank) {
    const std::string shard = db::shardPath(path, rank);
    tr::Tracer t(shard, rank, tr::TraceLevel::All);
    if (rank == 0 && events) events(t);
    shards.push_back({shard, rank, "h", "cpu", 1, 0, 0});
  }
  db::RunStore store(path, db::RunStore::Options{true});
  store.setMeta("world_size", std::to_string(world));
  store.setMeta("config", R"({"workload":"hand-built"})");
  for (int rank = 0; rank < world; ++rank)
    for (size_t k = 0; k < windows.size(); ++k) {
      db::Step r;
      r.rank = rank;
      r.step = int64_t(k);
      r.start_ns = windows[k].first;
      r.step_time_ns = windows[k].second - windows[k].first;
      r.tokens = 1000;
      r.model_flops = 1e6;
      r.mfu = r.model_flops / (double(r.step_time_ns) * 1e-9) / 1e15;  // a 1 PFLOP/s device
      r.peak_bytes = (rank + 1) << 20;
      if (tweak) tweak(r);
      store.appendStep(r);
    }
  db::mergeShards(store, shards);
}

// A trace that stresses the order the summary reads device rows in: rows stored out of time order and
// interleaved across ranks, equal starts, NCCL and compute kernels, copies and sets, launches missing
// or repeated (a correlation launched twice), device rows of a rank without steps.
void makeShuffledGpuTrace(const std::string& path) {
  db::RunStore store(path, db::RunStore::Options{true});
  store.setMeta("world_size", "3");
  store.setMeta("config", R"({"workload":"shuffled"})");
  store.setMeta("peak_flops", "1e12");
  uint64_t seed = 12345;
  auto next = [&](int64_t n) {  // a fixed LCG: the same trace on every platform
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return int64_t((seed >> 33) % uint64_t(n));
  };
  store.putStrings({{0, "sgemm"}, {1, "ncclDevKernel_AllReduce_Sum"}, {2, "cudaLaunchKernel"}});
  std::vector<db::Kernel> kernels;
  std::vector<db::Memcpy> copies;
  std::vector<db::Memset> sets;
  std::vector<db::ApiCall> launches;
  int64_t corr = 0;
  for (int64_t rank : {0, 1, 2, 5}) {
    for (int64_t k = 0; k < 6; ++k) {
      const int64_t t0 = k * 1'000'000 + rank * 1000;
      if (rank != 5) {
        db::Step s;
        s.rank = rank, s.step = k, s.start_ns = t0, s.step_time_ns = 900'000 + rank * 10'000 + next(50'000);
        s.tokens = 4096, s.model_flops = 1e9, s.hw_flops = 1.2e9, s.peak_bytes = (rank + 1) << 20;
        store.appendStep(s);
      }
      for (int64_t e = 0; e < 40; ++e) {
        const int64_t launch = t0 + 100 + next(800'000), start = launch + 50 + 1000 * next(3);  // equal starts
        const int64_t c = ++corr;
        const int64_t kind = next(10);
        if (kind < 6) {
          db::Kernel r;
          r.start_ns = start, r.end_ns = start + 1 + next(40'000), r.stream = 7, r.correlation = c, r.rank = rank;
          r.name = db::StringId(next(4) == 0);
          kernels.push_back(r);
        } else if (kind < 8) {
          db::Memcpy r;
          r.start_ns = start, r.end_ns = start + 1 + next(9'000), r.stream = 8, r.correlation = c, r.rank = rank;
          copies.push_back(r);
        } else {
          db::Memset r;
          r.start_ns = start, r.end_ns = start + 1 + next(5'000), r.stream = 8, r.correlation = c, r.rank = rank;
          sets.push_back(r);
        }
        const int64_t l = next(10);
        if (l == 0) continue;                                    // no launch in the trace: unattributed
        if (kind < 6 && l == 1) kernels.back().correlation = -1;  // no correlation at all
        launches.push_back({launch, launch + 20, 1, 2, c, 0, rank});
        if (l == 2) launches.push_back({launch - 5000, launch - 4000, 1, 2, c, 0, rank});  // launched twice
        if (l == 3) launches.push_back({launch + 7000, launch + 7100, 1, 2, c, 0, rank});  // and later
      }
    }
  }
  // Stored in a shuffled order: the reader may not rely on storage order.
  auto shuffle = [&](auto& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[size_t(next(int64_t(i)))]);
  };
  shuffle(kernels), shuffle(copies), shuffle(sets), shuffle(launches);
  store.begin();
  store.put(kernels), store.put(copies), store.put(sets), store.put(launches);
  store.commit();
  store.createIndexes();
  store.close();
}

}  // namespace

TEST(Report, HandBuiltTraceGivesHandComputedBreakdown) {
  const std::string run = tempPath("report.db");
  // Step 0 is skipped by the report; step 1 is the window [1000, 2000).
  makeTraced(run, {{0, 1000}, {1000, 2000}}, [](tr::Tracer& t) {
    const auto d = t.intern("trainscope");
    t.record(tr::RangeEvent{1100, 1400, t.intern("forward"), d, 0, 0, 0});
    t.record(tr::RangeEvent{1400, 1800, t.intern("backward"), d, 0, 0, 0});
    t.record(tr::RangeEvent{1150, 1250, t.intern("layer"), d, 0, 1, 0});  // nested: not counted twice
    db::Collective c;
    c.op = "all_reduce";
    c.group = "dp";
    c.group_size = 2;
    c.bytes = 1000000;
    c.start_ns = 1600;
    c.end_ns = 1900;
    t.record(c);
    t.record(tr::OpEvent{1100, 1300, t.intern("aten::mm"), 0, 1, db::kNoString});
    t.record(tr::OpEvent{1300, 1350, t.intern("aten::mm"), 0, 2, db::kNoString});
    t.record(tr::OpEvent{1400, 1420, t.intern("aten::gelu"), 0, 3, db::kNoString});
    // nested, on another thread: the backward node [1500, 1800) runs aten::mm [1550, 1700) inside
    t.record(tr::OpEvent{1500, 1800, t.intern("MmBackward0"), 1, 4, db::kNoString});
    t.record(tr::OpEvent{1550, 1700, t.intern("aten::mm"), 1, 5, db::kNoString});
  });
  db::Report r = db::computeReport(run);
  ASSERT_EQ(r.summary.ranks.size(), 1u);
  const auto& k = r.summary.ranks[0];
  EXPECT_EQ(k.steps, 1);
  EXPECT_DOUBLE_EQ(k.step_s_mean, 1000e-9);
  ASSERT_TRUE(k.breakdown);
  EXPECT_DOUBLE_EQ(k.breakdown->compute_s, 700e-9);  // [1100, 1800)
  EXPECT_DOUBLE_EQ(k.breakdown->comm_s, 300e-9);     // [1600, 1900)
  EXPECT_DOUBLE_EQ(k.breakdown->overlap_s, 200e-9);  // [1600, 1800)
  EXPECT_DOUBLE_EQ(k.breakdown->idle_s, 200e-9);     // [1000, 1100) and [1900, 2000)
  EXPECT_EQ(r.summary.breakdown_source, "ranges");
  ASSERT_EQ(r.top_ops_source, "host_ops");
  ASSERT_GE(r.top_ops.size(), 2u);
  EXPECT_EQ(r.top_ops[0].name, "aten::mm");
  EXPECT_EQ(r.top_ops[0].count, 3);
  EXPECT_DOUBLE_EQ(r.top_ops[0].total_s, 400e-9);
  EXPECT_DOUBLE_EQ(r.top_ops[0].self_s, 400e-9);
  EXPECT_EQ(r.top_ops[1].name, "MmBackward0");
  EXPECT_DOUBLE_EQ(r.top_ops[1].total_s, 300e-9);
  EXPECT_DOUBLE_EQ(r.top_ops[1].self_s, 150e-9);  // 300 minus the nested mm
  ASSERT_EQ(r.collectives.size(), 1u);
  EXPECT_EQ(r.collectives[0].bytes, 1000000);
  auto j = nlohmann::json::parse(db::reportJson(r));
  EXPECT_DOUBLE_EQ(j["summary"]["ranks"][0]["breakdown"]["idle_s"].get<double>(), 200e-9);
  EXPECT_TRUE(r.warnings.empty());
}

TEST(RunSummary, DefinitionsOverSeveralRanks) {
  const std::string run = tempPath("summary.db");
  // Three steps; rank 1 takes 50% longer on every step: the job's step time is the slower rank's.
  makeTraced(run, {{0, 100}, {100, 300}, {300, 700}}, nullptr, 2, [](db::Step& s) {
    if (s.rank == 1) s.step_time_ns = s.step_time_ns * 3 / 2;
  });
  db::RunReader reader(run);
  const db::RunSummary s = db::summarize(reader);
  EXPECT_EQ(s.world, 2);
  EXPECT_EQ(s.steps, 2);          // step 0 left out
  EXPECT_EQ(s.excluded_steps, 1);
  // T = {300, 600} ns (rank 1's); tokens/s = 2000 / 900e-9.
  EXPECT_DOUBLE_EQ(s.tokens_per_s, 2000 / 900e-9);
  EXPECT_DOUBLE_EQ(s.step_s_median, 450e-9);
  EXPECT_DOUBLE_EQ(s.step_s_p90, 300e-9 + 0.9 * 300e-9);
  // Peak per device derived from rank 0's step-0 row: 1e15. MFU = Σ flops (4 rows × 1e6) / Σ T / (2 × 1e15).
  ASSERT_TRUE(s.peak_flops);
  EXPECT_NEAR(*s.peak_flops, 1e15, 1e3);
  ASSERT_TRUE(s.mfu);
  EXPECT_NEAR(*s.mfu, 4e6 / 900e-9 / 2e15, 1e-12);
  EXPECT_EQ(s.peak_bytes, 2 << 20);
  ASSERT_EQ(s.ranks.size(), 2u);
  EXPECT_EQ(s.ranks[1].peak_bytes, 2 << 20);
  EXPECT_DOUBLE_EQ(s.ranks[1].step_s_max, 600e-9);
  EXPECT_FALSE(s.ranks[0].breakdown);  // no events at all: no breakdown, not "100% idle"
  // The same numbers from the step rows alone.
  const db::RunSummary t = db::summarizeSteps(reader.steps(), 2, "hand-built", 1e15);
  EXPECT_DOUBLE_EQ(t.tokens_per_s, s.tokens_per_s);
  EXPECT_DOUBLE_EQ(*t.mfu, *s.mfu);
  EXPECT_EQ(db::summaryJson(t), db::summaryJson(db::summarizeSteps(reader.steps(), 2, "hand-built", 1e15)));
}

// The per-rank mark is a load imbalance — compute over 1.1 × the median rank's — named as such, not
// "straggler": the straggler is each step's (step_analysis.h), and may be another rank.
TEST(RunSummary, ARankWithMoreComputeIsMarkedComputeHeavyNotStraggler) {
  const std::string run = tempPath("compute_heavy.db");
  // Rank 0 computes 700 ns of step 1; rank 1 none: the median is 350 ns, so rank 0 alone is over 1.1 ×.
  makeTraced(run, {{0, 1000}, {1000, 2000}}, [](tr::Tracer& t) {
    t.record(tr::RangeEvent{1100, 1800, t.intern("forward"), t.intern("trainscope"), 0, 0, 0});
  }, 2);
  const db::Report r = db::computeReport(run);
  ASSERT_EQ(r.summary.ranks.size(), 2u);
  EXPECT_TRUE(r.summary.ranks[0].compute_heavy);
  EXPECT_FALSE(r.summary.ranks[1].compute_heavy);
  const std::string text = db::formatReport(r);
  EXPECT_NE(text.find("<- compute > 1.1x median"), std::string::npos) << text;
  EXPECT_EQ(text.find("<- straggler"), std::string::npos) << text;
  const auto j = nlohmann::json::parse(db::summaryJson(r.summary));
  EXPECT_EQ(j["ranks"][0]["compute_heavy"], true);
  EXPECT_EQ(j["ranks"][1]["compute_heavy"], false);
  EXPECT_FALSE(j["ranks"][0].contains("straggler")) << j["ranks"][0].dump();
}

TEST(Report, WarnsWhenARanksEventsAreMissing) {
  const std::string run = tempPath("missing-rank.db");
  {
    tr::Tracer t(db::shardPath(run, 0), 0, tr::TraceLevel::Ranges);
    t.record(tr::RangeEvent{110, 190, t.intern("forward"), t.intern("trainscope"), 0, 0, 0});
  }
  db::RunStore store(run, db::RunStore::Options{true});
  store.setMeta("world_size", "2");
  for (int rank = 0; rank < 2; ++rank)
    for (int k = 0; k < 2; ++k) {
      db::Step r;
      r.rank = rank;
      r.step = k;
      r.start_ns = 100 * k;
      r.step_time_ns = 100;
      r.tokens = 10;
      store.appendStep(r);
    }
  db::mergeShards(store, {{db::shardPath(run, 0), 0, "h", "cpu", 1, 0, 0}});
  store.close();
  db::Report r = db::computeReport(run);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("rank(s) 1"), std::string::npos) << r.warnings[0];
  EXPECT_NE(db::formatReport(r).find("warning: the events of rank(s) 1 are missing"), std::string::npos);
}

TEST(Report, IntervalArithmetic) {
  auto u = db::unionOf({{5, 10}, {0, 3}, {2, 4}, {9, 12}});
  ASSERT_EQ(u.size(), 2u);
  EXPECT_EQ(u[0].begin, 0);
  EXPECT_EQ(u[0].end, 4);
  EXPECT_EQ(u[1].end, 12);
  EXPECT_EQ(db::coveredWithin(u, 3, 11), 1 + 6);
  auto i = db::intersect(u, db::unionOf({{1, 6}}));
  EXPECT_EQ(db::coveredWithin(i, 0, 100), 3 + 1);
}

TEST(ChromeExport, ParsesAndHasTheRightCounts) {
  const std::string run = tempPath("chrome.db"), out = tempPath("trace.json");
  makeTraced(run, {{0, 1000}, {1000, 2000}}, [](tr::Tracer& t) {
    t.record(tr::RangeEvent{100, 200, t.intern("forward"), t.intern("trainscope"), 0, 0, 0});
    t.record(tr::OpEvent{110, 150, t.intern("aten::mm"), 0, 1, db::kNoString});
    t.record(tr::ApiEvent{290, 295, 0, t.intern("cudaGraphLaunch"), 77, 0});
    t.record(tr::KernelEvent{300, 400, 0, 7, t.intern("k1"), 77, {1, 1, 1}, {32, 1, 1}, 16, 0});
    t.record(tr::KernelEvent{400, 450, 0, 7, t.intern("k2"), 77, {1, 1, 1}, {32, 1, 1}, 16, 0});  // same graph launch
    t.record(tr::ApiEvent{500, 505, 0, t.intern("cudaLaunchKernel"), -1, 0});         // no correlation id
    t.record(tr::KernelEvent{510, 520, 0, 7, t.intern("k3"), -1, {1, 1, 1}, {1, 1, 1}, 0, 0});
    db::Collective c;
    c.op = "all_reduce";
    c.group = "dp";
    c.group_size = 2;
    c.bytes = 64;
    c.start_ns = 400;
    c.end_ns = 500;
    t.record(c);
    t.record(tr::CounterEvent{800, t.intern("memory.allocated_bytes"), 5});
  });
  auto st = db::exportChrome(run, out);
  // steps, range, op, 2 API calls (each once), 3 kernels, collective
  EXPECT_EQ(st.complete_events, 2 + 1 + 1 + 2 + 3 + 1);
  EXPECT_EQ(st.counter_events, 1);
  EXPECT_EQ(st.flow_pairs, 2);  // one graph launch → two kernels; nothing joined on a missing id
  std::ifstream in(out);
  auto j = nlohmann::json::parse(in);
  int x = 0, flows = 0;
  std::set<std::string> lanes;
  for (const auto& e : j["traceEvents"]) {
    const std::string ph = e["ph"];
    x += ph == "X";
    flows += ph == "s" || ph == "f";
    if (ph == "M" && e["name"] == "thread_name") lanes.insert(e["args"]["name"].get<std::string>());
  }
  EXPECT_EQ(x, st.complete_events);
  EXPECT_EQ(flows, 4);
  EXPECT_EQ(lanes, (std::set<std::string>{"thread 0", "stream 7", "collectives"}));
  // Exported again over the earlier export: fine. Over the input, or over a file that is not an
  // export: refused, and the file is untouched.
  EXPECT_NO_THROW(db::exportChrome(run, out));
  const auto size = std::filesystem::file_size(run);
  EXPECT_THROW(db::exportChrome(run, run), trainscope::UserError);
  EXPECT_EQ(std::filesystem::file_size(run), size);
  auto r = cli("export " + run + " --chrome " + run);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("is the input " + run + " itself"), std::string::npos) << r.output;
  const std::string notes = tempPath("notes.json");
  std::ofstream(notes) << "{\"mine\": 1}";
  EXPECT_THROW(db::exportChrome(run, notes), trainscope::UserError);
  EXPECT_EQ(std::filesystem::file_size(notes), 11u);
  EXPECT_NO_THROW(db::exportChrome(run, notes, /*overwrite=*/true));
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(out).parent_path()))
    EXPECT_EQ(e.path().string().find(".partial."), std::string::npos) << e.path();
}

// Collectives: bus bandwidth over the transfer (from the last rank's arrival to the end), not the whole
// call, and the arrival skew over the calls linked across ranks — by hand. DP = 2, 16 MB all-reduces:
// call 0, rank 1 arrives 8.4 ms after rank 0 and both end at 23 ms (transfer 13.6 ms); call 1, 1 ms
// late, 1 ms of transfer. nccl-tests' factor 2(n−1)/n is 1 at n = 2.
TEST(Report, CollectiveBandwidthIsOverTheTransferAndSkewIsPerCall) {
  const std::string run = tempPath("report_skew.db");
  {
    db::RunStore store(run, db::RunStore::Options{true});
    store.setMeta("world_size", "2");
    store.setMeta("config", R"({"workload":"hand-built","world":2,"dp":2,"tp":1,"pp":1,"ga":1})");
    for (int rank = 0; rank < 2; ++rank)
      for (int k = 0; k < 2; ++k) {
        db::Step s;
        s.rank = rank, s.step = k, s.start_ns = k * 40'000'000, s.step_time_ns = 40'000'000, s.tokens = 1000;
        store.appendStep(s);
      }
    auto row = [](int64_t rank, int64_t seq, int64_t start, int64_t end) {
      db::Collective c;
      c.rank = rank, c.op = "all_reduce", c.group = "dp", c.group_size = 2, c.seq = seq, c.bytes = 16'000'000;
      c.start_ns = start, c.end_ns = end;
      return c;
    };
    store.appendCollectives({row(0, 0, 1'000'000, 23'000'000), row(1, 0, 9'400'000, 23'000'000),
                             row(0, 1, 30'000'000, 32'000'000), row(1, 1, 31'000'000, 32'000'000)});
  }
  const db::Report r = db::computeReport(run);
  ASSERT_EQ(r.collectives.size(), 1u);
  const db::CollectiveStat& c = r.collectives[0];
  EXPECT_EQ(c.count, 4);
  EXPECT_EQ(c.linked, 2);
  const double call0 = 16e6 / 13.6e-3, call1 = 16e6 / 1e-3;  // bytes/s over each transfer
  EXPECT_NEAR(c.busbw_mean, (2 * call0 + 2 * call1) / 4, 1e-6 * call1);
  EXPECT_NEAR(c.busbw_max, call1, 1e-6 * call1);
  // The whole call (the table's busbw): rank 0's calls include its wait.
  EXPECT_NEAR(c.busbw_with_wait_mean, (16e6 / 22e-3 + 16e6 / 13.6e-3 + 16e6 / 2e-3 + 16e6 / 1e-3) / 4, 1e-6 * call1);
  EXPECT_NEAR(c.skew_mean_s, (8.4e-3 + 1e-3) / 2, 1e-12);
  EXPECT_NEAR(c.skew_max_s, 8.4e-3, 1e-12);
  EXPECT_NEAR(c.wait_s, 9.4e-3, 1e-12);
  EXPECT_NEAR(c.transfer_s, 2 * 13.6e-3 + 2 * 1e-3, 1e-12);
  const auto j = nlohmann::json::parse(db::reportJson(r));
  const auto& jc = j["collectives"][0];
  EXPECT_DOUBLE_EQ(jc["busbw_mean"].get<double>(), c.busbw_mean);
  EXPECT_DOUBLE_EQ(jc["skew_max_s"].get<double>(), c.skew_max_s);
  EXPECT_EQ(jc["linked_calls"], 2);
  for (const char* key : {"op", "group", "count", "bytes", "total_s", "busbw_max", "busbw_with_wait_mean", "skew_mean_s",
                          "wait_s", "transfer_s"})
    EXPECT_TRUE(jc.contains(key)) << key;
  const std::string text = db::formatReport(r);
  EXPECT_NE(text.find("over the transfer, from the last rank's arrival to the end"), std::string::npos) << text;
  EXPECT_NE(text.find("skew mean 4.700 max 8.400 ms"), std::string::npos) << text;
  // The Chrome export's per-copy bandwidth follows the same rule, with the wait and skew beside it.
  const std::string out = tempPath("report_skew.json");
  db::exportChrome(run, out, true);
  std::stringstream json;
  json << std::ifstream(out).rdbuf();
  int seen = 0;
  const nlohmann::json exported = nlohmann::json::parse(json.str());
  for (const auto& e : exported["traceEvents"]) {
    // Rank 0's copy of the first call: 22 ms long, 8.4 of them waiting for rank 1.
    if (e.value("cat", "") != "collective" || e["dur"].get<double>() < 20000.0) continue;
    ++seen;
    EXPECT_NEAR(e["args"]["busbw_GBps"].get<double>(), call0 * 1e-9, 1e-9 * call0 * 1e-6);
    EXPECT_NEAR(e["args"]["wait_us"].get<double>(), 8400.0, 1e-6);
    EXPECT_NEAR(e["args"]["transfer_us"].get<double>(), 13600.0, 1e-6);
    EXPECT_NEAR(e["args"]["skew_us"].get<double>(), 8400.0, 1e-6);
  }
  EXPECT_EQ(seen, 1);
}

// The summary reads device rows in one pass over each table (storage order) instead of per rank
// through the time index (a seek per row): the numbers must not move. The expected JSON is what the
// per-rank indexed reading (commit da5d867) printed for this trace; every field, bit for bit.
TEST(RunSummary, OnePassReadingGivesTheIndexedReadingsNumbers) {
  const std::string path = tempPath("shuffled_gpu.db");
  std::filesystem::remove(path);
  makeShuffledGpuTrace(path);
  db::RunReader reader(path);
  const std::string expected =
      R"({"breakdown_source":"kernels","breakdown_window":"gpu","excluded_steps":1,"hfu":1.2664634977779898,"mfu":1.0553862481483247,"notes":["rank 0: 42 device event(s) have no launch in the trace: they do not place a step's window, and count where they ran","rank 1: 38 device event(s) have no launch in the trace: they do not place a step's window, and count where they ran","rank 2: 35 device event(s) have no launch in the trace: they do not place a step's window, and count where they ran"],"peak_bytes":3145728,"peak_flops":1000000000000.0,"ranks":[{"breakdown":{"comm_s":9.37172e-05,"compute_s":0.0003020388,"idle_s":0.000551275,"memory_s":3.38532e-05,"overlap_s":2.31722e-05},"gpu_step_time_mean_s":0.000957712,"peak_bytes":1048576,"rank":0,"step_time_max_s":0.0009204220000000001,"step_time_mean_s":0.0009111338,"step_time_median_s":0.0009122770000000001,"step_time_min_s":0.0009023490000000001,"step_time_p90_s":0.000917198,"steps":5,"compute_heavy":false,"unattributed_device_events":42,"unattributed_device_s":0.000753524},{"breakdown":{"comm_s":0.00017397200000000002,"compute_s":0.0002891822,"idle_s":0.000513882,"memory_s":2.23078e-05,"overlap_s":4.44682e-05},"gpu_step_time_mean_s":0.0009548758,"peak_bytes":2097152,"rank":1,"step_time_max_s":0.000944079,"step_time_mean_s":0.000928062,"step_time_median_s":0.0009318120000000001,"step_time_min_s":0.0009113290000000001,"step_time_p90_s":0.0009412878,"steps":5,"compute_heavy":false,"unattributed_device_events":38,"unattributed_device_s":0.0007284579999999999},{"breakdown":{"comm_s":8.92144e-05,"compute_s":0.0002806048,"idle_s":0.0005873346000000001,"memory_s":2.2764600000000002e-05,"overlap_s":2.7053200000000004e-05},"gpu_step_time_mean_s":0.0009528652000000001,"peak_bytes":3145728,"rank":2,"step_time_max_s":0.0009680800000000001,"step_time_mean_s":0.000945173,"step_time_median_s":0.000941105,"step_time_min_s":0.0009323420000000001,"step_time_p90_s":0.0009594872,"steps":5,"compute_heavy":false,"unattributed_device_events":35,"unattributed_device_s":0.0005348089999999999}],"step_time_mean_s":0.0009475204000000001,"step_time_median_s":0.000944079,"step_time_p90_s":0.0009594872,"steps":5,"tokens_per_s":4322862.072415538,"workload":"shuffled","world":3})";
  // The fields added since (the breakdown's wait and bubble, each step's own) leave these untouched.
  nlohmann::json got = nlohmann::json::parse(db::summaryJson(db::summarize(reader)));
  for (auto& k : got["ranks"]) {
    k.erase("per_step");
    for (const char* added : {"wait_s", "bubble_s", "exposed_comm_s"}) k["breakdown"].erase(added);
  }
  EXPECT_EQ(got, nlohmann::json::parse(expected));
}

// A damaged database whose collective sizes and drop counts sum past int64: the report saturates
// (the sums wrapped to negative numbers; undefined behaviour, found by the reader fuzzer).
TEST(Report, SumsOfADamagedFilesSizesSaturate) {
  const std::string path = tempPath("sizes_past_int64.db");
  std::filesystem::remove(path);
  {
    db::RunStore store(path, db::RunStore::Options{true});
    store.setMeta("world_size", "1");
    db::Step s;
    s.rank = 0, s.step = 0, s.start_ns = 0, s.step_time_ns = 1000;
    store.appendStep(s);
    std::vector<db::Collective> rows(2);
    for (int i = 0; i < 2; ++i) {
      rows[size_t(i)].op = "all_reduce", rows[size_t(i)].group = "world", rows[size_t(i)].seq = i;
      rows[size_t(i)].bytes = int64_t(3) << 61, rows[size_t(i)].start_ns = 100 * i, rows[size_t(i)].end_ns = 100 * i + 50;
    }
    store.put(rows);
    db::Drop d;
    d.source = "tracer", d.dropped = int64_t(3) << 61;
    db::Drop d1 = d;
    d1.rank = 1;  // one row per (rank, source): two ranks' counts are summed
    store.put(std::vector<db::Drop>{d, d1});
  }
  const db::Report r = db::computeReport(path);
  ASSERT_EQ(r.collectives.size(), 1u);
  EXPECT_EQ(r.collectives[0].bytes, INT64_MAX);
  ASSERT_EQ(r.drops.size(), 1u);
  EXPECT_EQ(r.drops[0].second, INT64_MAX);
}

namespace {

// A run database of steps first..last (1 ms apart) with these meta values; no events.
std::string stepsOnlyRun(const std::string& name, const std::map<std::string, std::string>& meta, int64_t first,
                         int64_t last) {
  const std::string path = tempPath(name);
  db::RunStore store(path, db::RunStore::Options{true});
  for (const auto& [key, value] : meta) store.setMeta(key, value);
  for (int64_t k = first; k <= last; ++k) {
    db::Step r;
    r.step = k, r.start_ns = k * 1'000'000, r.step_time_ns = 900'000, r.tokens = 100;
    store.appendStep(r);
  }
  return path;
}

std::vector<std::string> summaryNotes(const std::string& path) {
  db::RunReader reader(path);
  return db::summarize(reader).notes;
}

}  // namespace

// A run stopped, killed or still running holds fewer steps than its config asked for: the summary (and
// so `report`, `report --json` and `run --json`) says so in a note rather than presenting the steps it
// has as the whole run. A finished run, a resumed one (steps from its checkpoint on) and an imported
// trace (no config of ours) have no such note.
TEST(Report, ARunThatEndedEarlyIsNotedAsSuch) {
  auto make = [](const std::string& name, const std::string& config, int64_t first, int64_t last, bool imported) {
    std::map<std::string, std::string> meta = {{"config", config}};
    if (imported) meta["source"] = "import";
    return stepsOnlyRun(name, meta, first, last);
  };
  const auto notes = summaryNotes;
  const auto killed = notes(make("ended-early.db", R"({"workload":"tiny","steps":2000})", 0, 20, false));
  ASSERT_EQ(killed.size(), 1u);
  EXPECT_NE(killed[0].find("steps up to 20 recorded of the 2000"), std::string::npos) << killed[0];
  EXPECT_NE(killed[0].find("still being written"), std::string::npos) << killed[0];
  const auto none = notes(make("ended-none.db", R"({"workload":"tiny","steps":5})", 0, -1, false));
  ASSERT_EQ(none.size(), 1u);
  EXPECT_NE(none[0].find("no step recorded of the 5"), std::string::npos) << none[0];
  EXPECT_TRUE(notes(make("ended-done.db", R"({"workload":"tiny","steps":21})", 0, 20, false)).empty());
  EXPECT_TRUE(notes(make("ended-resumed.db", R"({"workload":"tiny","steps":18})", 12, 17, false)).empty());
  EXPECT_TRUE(notes(make("ended-import.db", R"({"workload":"tiny","steps":2000})", 0, 3, true)).empty());
  // The text report prints it.
  const auto text = cli("report " + tempPath("ended-early.db"));
  EXPECT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("note: steps up to 20 recorded of the 2000"), std::string::npos) << text.output;
}

// A traced run killed before it merged its ranks' shards holds steps alone: report names the shards
// its events are in (as the viewer's header does); an untraced run ("off") or a steps-level one says nothing.
TEST(Report, AKilledTracedRunNamesTheShardsHoldingItsEvents) {
  auto make = [](const std::string& name, const std::string& level) {
    return stepsOnlyRun(name, {{"config", R"({"workload":"tiny","steps":2})"}, {"trace_level", level}}, 0, 1);
  };
  const auto notes = summaryNotes;
  const std::string killed = make("killed-traced.db", "ranges");
  auto n = notes(killed);
  ASSERT_EQ(n.size(), 1u);
  EXPECT_NE(n[0].find("traced at level ranges, but its events are not merged into it"), std::string::npos) << n[0];
  EXPECT_NE(n[0].find("no shard of its ranks (killed-traced.db.rank0, ...) is beside it"), std::string::npos) << n[0];
  for (int64_t r = 0; r < 2; ++r) db::RunStore(db::shardPath(killed, r), db::RunStore::Options{}).close();
  n = notes(killed);
  ASSERT_EQ(n.size(), 1u);
  EXPECT_NE(n[0].find("the events recorded are in killed-traced.db.rank0, killed-traced.db.rank1 (report each on its own)"), std::string::npos) << n[0];
  const auto text = cli("report " + killed);
  EXPECT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("note: traced at level ranges"), std::string::npos) << text.output;
  EXPECT_TRUE(notes(make("untraced.db", "off")).empty());
  EXPECT_TRUE(notes(make("steps-level.db", "steps")).empty());
}
