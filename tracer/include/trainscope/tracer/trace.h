// trainscope/tracer/trace.h — recording a run's events without getting in its way.
//
// Sources (source.h) and the runtime's ranges call the Tracer's record functions from any thread.
// Events go into bounded in-memory buffers; a background thread writes them to this rank's shard
// (a run database, through rundb::RunStore) in one transaction per batch. When a buffer is full the
// event is dropped and counted: the tracer never blocks or kills training. A batch that cannot be
// written (a reader holding a lock) is retried; only when retries fail is it dropped and counted. At
// close: emitted = stored + dropped for every source, exactly, and the counts go to `drops`.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "trainscope/rundb/rows.h"
#include "trainscope/tracer/range.h"
#include "trainscope/tracer/source.h"

namespace trainscope::rundb {
class RunStore;
}

namespace trainscope::tracer {

// The event rows are the run database's own.
using RangeEvent = rundb::Range;
using OpEvent = rundb::HostOp;
using KernelEvent = rundb::Kernel;
using MemcpyEvent = rundb::Memcpy;
using MemsetEvent = rundb::Memset;
using ApiEvent = rundb::ApiCall;
using CounterEvent = rundb::Counter;
using CollectiveEvent = rundb::Collective;

enum Source : int { kRanges, kOps, kKernels, kMemcpy, kMemset, kApi, kCounters, kCollectives, kSourceCount };
const char* sourceName(int s);

struct SourceStats {
  int64_t emitted = 0, stored = 0, dropped = 0;
};

class Tracer {
 public:
  // Writes to `shard_path` (created; an earlier shard there is replaced, anything else refused with
  // a UserError). capacity: events buffered in memory across sources before new ones are dropped.
  Tracer(const std::string& shard_path, int64_t rank, TraceLevel level, size_t capacity = size_t(1) << 22);
  ~Tracer();  // close()
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  TraceLevel level() const { return level_; }
  uint64_t id() const { return id_; }  // unique per Tracer in this process (for caches of interned ids)
  bool enabled(TraceLevel at_least) const { return level_ >= at_least; }
  int64_t rank() const { return rank_; }
  const std::string& path() const { return path_; }

  // Starts `s` when the level asks for it (false, with the reason, when it cannot run here); the
  // tracer owns it from then on and stops it at close.
  bool addSource(std::unique_ptr<TraceSource> s, std::string* why);

  rundb::StringId intern(std::string_view s);

  // The row's rank is set to this tracer's.
  void record(RangeEvent e);
  void record(OpEvent e);
  void record(KernelEvent e);
  void record(MemcpyEvent e);
  void record(MemsetEvent e);
  void record(ApiEvent e);
  void record(CounterEvent e);
  void record(CollectiveEvent e);

  void setMeta(const std::string& key, const std::string& value);  // written at close
  // Events a source lost before they reached the tracer (CUPTI's own drops): emitted and dropped.
  void countDropped(int source, int64_t n);
  // Blocks until every event recorded so far is in the database (not needed for correctness).
  void flush();
  // Stops the sources, flushes, writes strings, drop counts, meta and indexes, stops the writer and
  // closes the shard. Idempotent.
  void close();
  std::array<SourceStats, kSourceCount> stats() const;

  // The process-wide tracer the TRAINSCOPE_RANGE macro records into (may be null).
  static Tracer* current();
  static void setCurrent(Tracer* t);

 private:
  struct Buffers;
  template <class E>
  void push(int source, E&& e);
  void writerLoop();
  void write(Buffers& b);

  std::string path_;
  int64_t rank_;
  TraceLevel level_;
  size_t capacity_;
  std::unique_ptr<rundb::RunStore> store_;
  std::vector<std::unique_ptr<TraceSource>> sources_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<Buffers> pending_;
  size_t pending_count_ = 0;
  uint64_t batches_taken_ = 0, batches_written_ = 0;
  std::condition_variable written_cv_;
  bool stop_ = false, closed_ = false, flush_requested_ = false;
  uint64_t id_ = 0;
  std::thread writer_;
  std::array<std::atomic<int64_t>, kSourceCount> emitted_{}, stored_{}, dropped_{};
  std::mutex strings_mu_;
  std::unordered_map<std::string, rundb::StringId> strings_;
  std::vector<std::pair<rundb::StringId, std::string>> new_strings_;
  std::vector<std::pair<std::string, std::string>> meta_;
};

}  // namespace trainscope::tracer
