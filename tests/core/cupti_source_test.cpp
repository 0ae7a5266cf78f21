// cupti_source_test.cpp — the CUPTI wrapper without a GPU: hand-built activity records (CUPTI's own
// structs) go through CuptiSource into the trace with the right times, names and correlation ids;
// CUPTI's drop count reaches the drop table; the real backend reports itself unavailable here.
#include <gtest/gtest.h>

#include <cupti_activity.h>

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "../common/cli.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/tracer/cupti_source.h"
#include "trainscope/tracer/range.h"
#include "trainscope/tracer/trace.h"

namespace tr = trainscope::tracer;
namespace db = trainscope::rundb;
using trainscope::testing::tempPath;

namespace {

class FakeCupti final : public tr::CuptiApi {
 public:
  bool available(std::string*) override { return true; }
  bool enable(tr::CuptiSource*, std::string*) override { return enabled = true; }
  void flush() override { ++flushes; }
  void disable() override { enabled = false; }
  uint64_t timestamp() override { return 1000; }
  std::string callbackName(int domain, uint32_t cbid) override {
    return domain == CUPTI_CB_DOMAIN_RUNTIME_API && cbid == 211 ? "cudaLaunchKernel_v7000" : "";
  }
  int64_t droppedRecords() override { return 3; }
  bool enabled = false;
  int flushes = 0;
};

// The `threads` rows of a shard: thread number → name as recorded.
std::map<int64_t, std::string> threadRows(db::RunReader& r) {
  std::map<int64_t, std::string> out;
  for (const db::ThreadName& t : r.threads())
    if (t.kind == int32_t(db::ThreadKind::Thread)) out[t.tid] = r.string(t.name);
  return out;
}

CUpti_ActivityAPI apiCall(uint32_t os_tid, uint64_t start, uint32_t correlation) {
  CUpti_ActivityAPI api;
  std::memset(&api, 0, sizeof(api));
  api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  api.cbid = 211, api.start = start, api.end = start + 10, api.threadId = os_tid, api.correlationId = correlation;
  return api;
}


}  // namespace

TEST(Cupti, HandBuiltRecordsLandWithCorrelationAndShiftedTimes) {
  const std::string shard = tempPath("cupti.db");
  {
    tr::Tracer t(shard, 0, tr::TraceLevel::All);
    auto fake = std::make_unique<FakeCupti>();
    FakeCupti* f = fake.get();
    tr::CuptiSource src(std::move(fake));
    std::string why;
    ASSERT_TRUE(src.start(t, &why)) << why;
    EXPECT_TRUE(f->enabled);
    src.setClockOffset(5000);  // CUPTI time + 5000 ns = tracer time

    CUpti_ActivityKernel10 k;
    std::memset(&k, 0, sizeof(k));
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.start = 2000, k.end = 2600, k.deviceId = 0, k.streamId = 13, k.correlationId = 77;
    k.gridX = 108, k.gridY = 1, k.gridZ = 1, k.blockX = 256, k.blockY = 1, k.blockZ = 1;
    k.registersPerThread = 128, k.staticSharedMemory = 1024, k.dynamicSharedMemory = 48 * 1024;
    k.name = "sm90_xmma_gemm_bf16bf16_bf16f32";
    src.handleRecord(&k);

    CUpti_ActivityAPI api;
    std::memset(&api, 0, sizeof(api));
    api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    api.cbid = 211, api.start = 1500, api.end = 1550, api.threadId = 9, api.correlationId = 77;
    src.handleRecord(&api);

    CUpti_ActivityMemcpy6 m;
    std::memset(&m, 0, sizeof(m));
    m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, m.bytes = 1 << 20, m.start = 100, m.end = 180, m.streamId = 13;
    m.correlationId = 76;
    src.handleRecord(&m);

    CUpti_ActivityMemset4 s;
    std::memset(&s, 0, sizeof(s));
    s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
    s.bytes = 4096, s.value = 0, s.start = 190, s.end = 195, s.streamId = 13, s.correlationId = 75;
    src.handleRecord(&s);

    CUpti_Activity other;
    other.kind = CUPTI_ACTIVITY_KIND_OVERHEAD;  // not a kind we store: ignored
    src.handleRecord(&other);
    EXPECT_EQ(src.recordsHandled(), 4);
    src.stop();
    EXPECT_EQ(f->flushes, 1);
    t.close();
  }
  db::RunReader r(shard);
  auto k = r.events<db::Kernel>(0);
  ASSERT_EQ(k.size(), 1u);
  EXPECT_EQ(k[0].start_ns, 7000);
  EXPECT_EQ(k[0].correlation, 77);
  EXPECT_EQ(k[0].shared_bytes, 1024 + 48 * 1024);
  EXPECT_EQ(k[0].grid[0] * k[0].block[0], 108 * 256);
  EXPECT_EQ(r.string(k[0].name), "sm90_xmma_gemm_bf16bf16_bf16f32");
  auto a = r.events<db::ApiCall>(0);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(k[0].start_ns - a[0].end_ns, 450);
  EXPECT_EQ(a[0].correlation, 77);
  EXPECT_EQ(r.string(a[0].name), "cudaLaunchKernel_v7000");
  // OS thread 9 is none of this process's: a row of its own, named for what it is.
  EXPECT_EQ(threadRows(r)[a[0].tid], "thread " + std::to_string(a[0].tid) + " (cuda api, os tid 9)");
  EXPECT_EQ(a[0].kind, 0);
  EXPECT_EQ(r.events<db::Memcpy>(0).at(0).kind, 1);
  EXPECT_EQ(r.events<db::Memset>(0).at(0).bytes, 4096);
  for (const auto& d : r.drops()) {
    EXPECT_EQ(d.emitted, d.stored + d.dropped) << d.source;
    if (d.source == "kernels") EXPECT_EQ(d.dropped, 3);
  }
}

TEST(Cupti, NvtxMarkersBecomeRangesAndOurOwnAreNotDoubled) {
  const std::string shard = tempPath("markers.db");
  {
    tr::Tracer t(shard, 0, tr::TraceLevel::All);
    tr::CuptiSource src(std::make_unique<FakeCupti>());
    std::string why;
    ASSERT_TRUE(src.start(t, &why));
    src.setClockOffset(0);
    auto marker = [&](uint32_t id, uint64_t ts, int flags, const char* name, const char* domain) {
      CUpti_ActivityMarker2 m;
      std::memset(&m, 0, sizeof(m));
      m.kind = CUPTI_ACTIVITY_KIND_MARKER;
      m.flags = CUpti_ActivityFlag(flags);
      m.timestamp = ts;
      m.id = id;
      m.name = name;
      m.domain = domain;
      m.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
      m.objectId.pt.threadId = 4242;
      src.handleRecord(&m);
    };
    marker(1, 100, CUPTI_ACTIVITY_FLAG_MARKER_START, "nccl:all_reduce", nullptr);
    marker(2, 120, CUPTI_ACTIVITY_FLAG_MARKER_START, "forward", nullptr);  // the runtime's own: skipped
    marker(3, 130, CUPTI_ACTIVITY_FLAG_MARKER_START, "dataloader", "torch");
    marker(2, 150, CUPTI_ACTIVITY_FLAG_MARKER_END, nullptr, nullptr);
    marker(3, 160, CUPTI_ACTIVITY_FLAG_MARKER_END, nullptr, nullptr);
    marker(1, 400, CUPTI_ACTIVITY_FLAG_MARKER_END, nullptr, nullptr);
    src.stop();
    t.close();
  }
  db::RunReader r(shard);
  auto ranges = r.events<db::Range>(0);
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(r.string(ranges[0].name), "nccl:all_reduce");
  EXPECT_EQ(r.string(ranges[0].domain), "nvtx/default");
  EXPECT_EQ(ranges[0].end_ns - ranges[0].start_ns, 300);
  EXPECT_EQ(threadRows(r)[ranges[0].tid], "thread " + std::to_string(ranges[0].tid) + " (cuda api, os tid 4242)");
  EXPECT_EQ(r.string(ranges[1].domain), "nvtx/torch");
}

// CUPTI names an API call's thread by its OS id (gettid): a thread that records ranges gets its calls
// on its own row (the tracer's number for it, its name), a thread that never recorded gets a number
// and its OS name, and takes that number when it records later; an id of no thread here is named
// "cuda api, os tid N". Every API call's thread has a `threads` row (before: raw OS ids, unnamed).
TEST(Cupti, ApiCallsSitOnTheirHostThreadsRowAndEveryApiThreadIsNamed) {
  const std::string shard = tempPath("cupti_threads.db");
  uint32_t worker_number = 0, worker_later = 0;
  int64_t own = 0;
  {
    tr::Tracer t(shard, 0, tr::TraceLevel::All);
    tr::CuptiSource src(std::make_unique<FakeCupti>());
    std::string why;
    ASSERT_TRUE(src.start(t, &why));
    src.setClockOffset(0);
    own = tr::threadId();  // this thread has recorded (its number is taken)
    // A worker that makes CUDA calls but has not recorded when CUPTI hands in its records.
    std::mutex mu;
    std::condition_variable cv;
    int64_t worker_os = -1;
    bool go_on = false;
    std::thread worker([&] {
      pthread_setname_np(pthread_self(), "dataloader_w0");
      {
        std::lock_guard<std::mutex> lock(mu);
        worker_os = int64_t(syscall(SYS_gettid));
      }
      cv.notify_all();
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return go_on; });
      lock.unlock();
      worker_later = tr::threadId();  // it records now: the number its CUDA calls were given
    });
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return worker_os >= 0; });
    }
    CUpti_ActivityAPI mine = apiCall(uint32_t(syscall(SYS_gettid)), 100, 1);
    CUpti_ActivityAPI theirs = apiCall(uint32_t(worker_os), 200, 2), again = apiCall(uint32_t(worker_os), 300, 3);
    CUpti_ActivityAPI gone = apiCall(7, 400, 4);  // no thread of this process has OS id 7
    for (CUpti_ActivityAPI* a : {&mine, &theirs, &again, &gone}) src.handleRecord(a);
    {
      std::lock_guard<std::mutex> lock(mu);
      go_on = true;
    }
    cv.notify_all();
    worker.join();
    src.stop();
    t.close();
  }
  db::RunReader r(shard);
  std::map<int64_t, int64_t> tid_of;  // correlation → the row's thread
  for (const auto& a : r.events<db::ApiCall>(0)) tid_of[a.correlation] = a.tid;
  ASSERT_EQ(tid_of.size(), 4u);
  EXPECT_EQ(tid_of[1], own);
  worker_number = uint32_t(tid_of[2]);
  EXPECT_EQ(tid_of[3], worker_number);  // one row per thread
  EXPECT_EQ(worker_later, worker_number);
  EXPECT_NE(tid_of[4], own);
  EXPECT_NE(tid_of[4], worker_number);
  const auto names = threadRows(r);
  ASSERT_TRUE(names.count(tid_of[2]) && names.count(tid_of[4])) << names.size();
  EXPECT_EQ(names.at(tid_of[2]), "thread " + std::to_string(worker_number) + " (dataloader_w0)");
  EXPECT_EQ(names.at(tid_of[4]), "thread " + std::to_string(tid_of[4]) + " (cuda api, os tid 7)");
}

TEST(Cupti, RealBackendWithoutADriverSaysWhyInsteadOfFailing) {
  std::string why;
  auto api = tr::makeCuptiApi();
  if (api->available(&why)) GTEST_SKIP() << "a GPU with CUPTI is present";
  EXPECT_FALSE(why.empty());
}
