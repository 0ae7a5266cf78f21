// tracer_test.cpp — the Tracer as the run database's producer: every event kind round-trips through
// the shard (read back with RunReader), drop accounting is exact under overload, sources start only at
// their level and are stopped (and flushed) before the shard closes.
#include <gtest/gtest.h>

#include <unistd.h>

#include <map>
#include <thread>

#include "../common/cli.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/schema.h"
#include "trainscope/tracer/trace.h"
#include "trainscope/tracer/thread_names.h"

namespace db = trainscope::rundb;
namespace tr = trainscope::tracer;
using trainscope::testing::tempPath;

TEST(Tracer, EveryEventKindRoundTrips) {
  const std::string shard = tempPath("roundtrip.db");
  {
    tr::Tracer t(shard, 3, tr::TraceLevel::All);
    const auto n = t.intern("forward"), d = t.intern("trainscope"), k = t.intern("sgemm_kernel");
    t.record(tr::RangeEvent{100, 200, n, d, 7, 1, 0});
    t.record(tr::OpEvent{110, 150, t.intern("aten::mm"), 7, 42, t.intern("[[4,8], [8,2]]")});
    t.record(tr::KernelEvent{300, 400, 0, 7, k, 99, {128, 1, 1}, {256, 1, 1}, 64, 4096});
    t.record(tr::MemcpyEvent{500, 600, 0, 7, 100, int32_t(db::MemcpyKind::HtoD), 1 << 20});
    t.record(tr::MemsetEvent{700, 710, 0, 7, 101, 4096, 0});
    t.record(tr::ApiEvent{290, 295, 7, t.intern("cudaLaunchKernel"), 99, int32_t(db::ApiKind::Runtime)});
    t.record(tr::CounterEvent{800, t.intern("memory.allocated_bytes"), 12345});
    db::Collective c;
    c.op = "all_reduce";
    c.group = "dp";
    c.group_size = 2;
    c.seq = 5;
    c.bytes = 1024;
    c.start_ns = 900;
    c.end_ns = 1000;
    t.record(c);
    t.close();
    for (const auto& s : t.stats()) EXPECT_EQ(s.emitted, s.stored + s.dropped);
  }
  db::RunReader r(shard);
  EXPECT_EQ(r.schemaVersion(), db::kSchemaVersion);
  auto ranges = r.events<db::Range>(3);
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(r.string(ranges[0].name), "forward");
  EXPECT_EQ(ranges[0].start_ns, 100);
  EXPECT_EQ(ranges[0].end_ns, 200);
  EXPECT_EQ(ranges[0].tid, 7);
  EXPECT_EQ(ranges[0].depth, 1);
  auto ops = r.events<db::HostOp>(3);
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].seq, 42);
  EXPECT_EQ(r.string(ops[0].shapes), "[[4,8], [8,2]]");
  auto kernels = r.events<db::Kernel>(3);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0].grid[0] * kernels[0].block[0] + kernels[0].registers + kernels[0].shared_bytes,
            128 * 256 + 64 + 4096);
  EXPECT_EQ(kernels[0].correlation, 99);
  EXPECT_EQ(kernels[0].collective_seq, -1);
  auto api = r.events<db::ApiCall>(3);
  ASSERT_EQ(api.size(), 1u);
  EXPECT_EQ(api[0].correlation, kernels[0].correlation);
  EXPECT_EQ(r.events<db::Memcpy>(3).at(0).bytes, 1 << 20);
  EXPECT_EQ(r.events<db::Memcpy>(3).at(0).kind, int32_t(db::MemcpyKind::HtoD));
  EXPECT_EQ(r.events<db::Memset>(3).at(0).bytes, 4096);
  EXPECT_EQ(r.events<db::Counter>(3).at(0).value, 12345);
  auto colls = r.collectives(3);
  ASSERT_EQ(colls.size(), 1u);
  EXPECT_EQ(colls[0].bytes, 1024);
  EXPECT_DOUBLE_EQ(colls[0].busbw(), 1024 / 100e-9);  // 2(n-1)/n = 1 at n = 2
  int64_t emitted = 0;
  for (const auto& d : r.drops()) emitted += d.emitted;
  EXPECT_EQ(emitted, 8);
  // A time window returns the events overlapping it, sorted.
  EXPECT_EQ(r.events<db::Range>(3, 150, 160).size(), 1u);
  EXPECT_EQ(r.events<db::Range>(3, 201, 300).size(), 0u);
  EXPECT_EQ(r.events<db::Range>(2).size(), 0u);
}

TEST(Tracer, EmittedEqualsStoredPlusDroppedUnderOverload) {
  const std::string shard = tempPath("overload.db");
  tr::Tracer t(shard, 0, tr::TraceLevel::All, /*capacity=*/64);
  const auto n = t.intern("x");
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
  db::RunReader r(shard);
  EXPECT_EQ(int64_t(r.events<db::Range>(0).size()), s.stored);
  for (const auto& d : r.drops()) {
    EXPECT_EQ(d.emitted, d.stored + d.dropped) << d.source;
    if (d.source == "ranges") EXPECT_EQ(d.dropped, s.dropped);
  }
}

namespace {
// A source that records one counter sample when started and one more when stopped.
class FakeSource final : public tr::TraceSource {
 public:
  FakeSource(tr::TraceLevel level, int* stops) : level_(level), stops_(stops) {}
  const char* name() const override { return "fake"; }
  tr::TraceLevel minLevel() const override { return level_; }
  bool start(tr::Tracer& t, std::string*) override {
    t_ = &t;
    t.record(tr::CounterEvent{1, t.intern("fake"), 1});
    return true;
  }
  void stop() override {
    if (!t_) return;
    t_->record(tr::CounterEvent{2, t_->intern("fake"), 2});
    t_ = nullptr;
    ++*stops_;
  }

 private:
  tr::TraceLevel level_;
  int* stops_;
  tr::Tracer* t_ = nullptr;
};
}  // namespace

TEST(Tracer, SourcesStartAtTheirLevelAndAreFlushedBeforeClose) {
  const std::string shard = tempPath("sources.db");
  int stops = 0;
  {
    tr::Tracer t(shard, 0, tr::TraceLevel::Ranges);
    std::string why;
    EXPECT_FALSE(t.addSource(std::make_unique<FakeSource>(tr::TraceLevel::Ops, &stops), &why));  // above the level
    EXPECT_TRUE(t.addSource(std::make_unique<FakeSource>(tr::TraceLevel::Ranges, &stops), &why));
  }
  EXPECT_EQ(stops, 1);
  db::RunReader r(shard);
  EXPECT_EQ(r.events<db::Counter>(0).size(), 2u);  // the sample taken while stopping is in the shard
  EXPECT_EQ(r.meta("trace_level"), "ranges");
}

// Native runs name their threads (issue 35): the main thread is `main`, a thread named by nameThread
// keeps that name, and one with no name of its own gets no row (the viewer labels it `thread N`);
// the process is named too. The rows are the ones imports write, so the viewer's track labels read
// `thread 0 (main)` for a native run as `thread 4242 (python3)` for an import.
TEST(Tracer, NamesItsThreadsAndProcessInTheShard) {
  const std::string shard = tempPath("thread_names.db");
  uint32_t main_id = 0, loader_id = 0, plain_id = 0;
  {
    tr::Tracer t(shard, 2, tr::TraceLevel::Ranges);
    const auto n = t.intern("forward"), d = t.intern("trainscope");
    main_id = tr::threadId();
    t.record(tr::RangeEvent{100, 200, n, d, main_id, 0, 0});
    std::thread([&] {
      tr::nameThread("data loader");
      loader_id = tr::threadId();
      t.record(tr::RangeEvent{110, 120, n, d, loader_id, 0, 0});
    }).join();
    std::thread([&] {
      plain_id = tr::threadId();
      t.record(tr::RangeEvent{130, 140, n, d, plain_id, 0, 0});
    }).join();
    t.close();
  }
  db::RunReader r(shard);
  std::map<int64_t, std::string> names;
  int processes = 0;
  for (const db::ThreadName& row : r.threads()) {
    EXPECT_EQ(row.rank, 2);
    if (row.kind == int32_t(db::ThreadKind::Thread)) names[row.tid] = r.string(row.name);
    if (row.kind == int32_t(db::ThreadKind::Process)) {
      ++processes;
      EXPECT_EQ(row.tid, int64_t(getpid()));
      EXPECT_FALSE(r.string(row.name).empty());
    }
  }
  EXPECT_EQ(names[main_id], "thread " + std::to_string(main_id) + " (main)");
  EXPECT_EQ(names[loader_id], "thread " + std::to_string(loader_id) + " (data loader)");
  EXPECT_EQ(names.count(plain_id), 0u);
  EXPECT_EQ(processes, 1);
}

// A real native run (trainscope run --cpu-lanes 2, traced at the ops level): its run database names
// the main thread and both core lanes, and the lanes' names are on the threads whose ops they ran.
TEST(Tracer, ANativeRunNamesItsMainThreadAndItsCpuLanes) {
  const std::string run = tempPath("named_threads_run.db");
  const auto r = trainscope::testing::cli("run --workload tiny --seq 16 --mbs 2 --steps 2 --device cpu --cpu-lanes 2 "
                                          "--trace " + run + " --trace-level ops --overwrite -q");
  ASSERT_EQ(r.status, 0) << r.output;
  db::RunReader rd(run);
  std::map<std::string, int64_t> tid_of;  // the name in parentheses → the thread number
  for (const db::ThreadName& t : rd.threads())
    if (t.rank == 0 && t.kind == int32_t(db::ThreadKind::Thread)) {
      const std::string n = rd.string(t.name);
      EXPECT_EQ(n.rfind("thread " + std::to_string(t.tid) + " (", 0), 0u) << n;
      tid_of[n.substr(n.find('(') + 1, n.size() - n.find('(') - 2)] = t.tid;
    }
  ASSERT_TRUE(tid_of.count("main")) << r.output;
  ASSERT_TRUE(tid_of.count("cpu lane 0"));
  ASSERT_TRUE(tid_of.count("cpu lane 1"));
  std::map<int64_t, int64_t> ops_on;
  for (const db::HostOp& o : rd.events<db::HostOp>(0)) ++ops_on[o.tid];
  EXPECT_GT(ops_on[tid_of["cpu lane 0"]], 0);
  EXPECT_GT(ops_on[tid_of["cpu lane 1"]], 0);
}
