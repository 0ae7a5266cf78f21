// trainscope/tracer/trace.h — recording a run's events without getting in its way.
//
// Producers (the runtime's ranges, LibTorch op callbacks, collectives, memory counters, CUPTI) call
// the Tracer's record* functions from any thread. Events go into bounded in-memory buffers; a
// background thread writes them to this rank's SQLite shard in one transaction per batch with
// prepared statements (WAL). When a buffer is full the event is dropped and counted: the tracer
// never blocks or kills training. At close: emitted = stored + dropped for every source, exactly,
// and the counts are written to `drops`.
//
// TRAINSCOPE_RANGE(name) opens a range for the enclosing scope: recorded here when the level is
// ranges or above, and mirrored to NVTX in CUDA builds (so Nsight Systems sees the same ranges).
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

namespace trainscope::tracer {

enum class TraceLevel { Off = 0, Steps = 1, Ranges = 2, Ops = 3, All = 4 };
TraceLevel parseTraceLevel(const std::string& s);  // throws UserError("--trace-level", ...)
const char* toString(TraceLevel l);

int64_t nowNs();         // CLOCK_REALTIME, ns
uint32_t threadId();     // small per-process thread number (0 = first thread seen)

struct RangeEvent { int64_t start_ns, end_ns; uint32_t name, domain, tid; int32_t depth, kind; };
struct OpEvent { int64_t start_ns, end_ns; uint32_t name, tid; int64_t seq; uint32_t shapes; };
struct KernelEvent {
  int64_t start_ns, end_ns;
  uint32_t device, stream, name;
  int64_t correlation;
  int32_t grid[3], block[3], registers, shared_bytes;
};
struct MemcpyEvent { int64_t start_ns, end_ns; uint32_t device, stream; int64_t correlation; int32_t kind; int64_t bytes; };
struct MemsetEvent { int64_t start_ns, end_ns; uint32_t device, stream; int64_t correlation; int64_t bytes; int32_t value; };
struct ApiEvent { int64_t start_ns, end_ns; uint32_t tid, name; int64_t correlation; int32_t kind; };
struct CounterEvent { int64_t ts_ns; uint32_t name; double value; };
struct CollectiveEvent {
  std::string op, group;
  int32_t group_size;
  int64_t seq, bytes, start_ns, end_ns;
  double algbw, busbw;
};

enum Source : int { kRanges, kOps, kKernels, kMemcpy, kMemset, kApi, kCounters, kCollectives, kSourceCount };
const char* sourceName(int s);

struct SourceStats {
  int64_t emitted = 0, stored = 0, dropped = 0;
};

class Database;

class Tracer {
 public:
  // Writes to `shard_path` (created; an existing file is replaced). capacity: events buffered in
  // memory across sources before new ones are dropped.
  Tracer(const std::string& shard_path, int rank, TraceLevel level, size_t capacity = size_t(1) << 22);
  ~Tracer();  // close()
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  TraceLevel level() const { return level_; }
  uint64_t id() const { return id_; }  // unique per Tracer in this process (for caches of interned ids)
  bool enabled(TraceLevel at_least) const { return level_ >= at_least; }
  int rank() const { return rank_; }
  const std::string& path() const { return path_; }

  uint32_t intern(std::string_view s);

  void record(const RangeEvent& e);
  void record(const OpEvent& e);
  void record(const KernelEvent& e);
  void record(const MemcpyEvent& e);
  void record(const MemsetEvent& e);
  void record(const ApiEvent& e);
  void record(const CounterEvent& e);
  void record(CollectiveEvent e);

  void setMeta(const std::string& key, const std::string& value);  // written at close
  // Events a source lost before they reached the tracer (CUPTI's own drops): emitted and dropped.
  void countDropped(int source, int64_t n);
  // Blocks until every event recorded so far is in the database (not needed for correctness).
  void flush();
  // Flushes, writes strings, drop counts, meta and indexes, and stops the writer. Idempotent.
  void close();
  std::array<SourceStats, kSourceCount> stats() const;

  // The process-wide tracer the TRAINSCOPE_RANGE macro and the op callbacks use (may be null).
  static Tracer* current();
  static void setCurrent(Tracer* t);

 private:
  struct Buffers;
  template <class E>
  void push(int source, E&& e);
  void writerLoop();
  void write(Buffers& b);

  std::string path_;
  int rank_;
  TraceLevel level_;
  size_t capacity_;
  std::unique_ptr<Database> db_;
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
  std::unordered_map<std::string, uint32_t> strings_;
  std::vector<std::pair<uint32_t, std::string>> new_strings_;
  std::vector<std::pair<std::string, std::string>> meta_;
};

// RAII range on the current tracer (and NVTX in CUDA builds).
class ScopedRange {
 public:
  explicit ScopedRange(const char* name);
  ~ScopedRange();
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;

 private:
  const char* name_;
  int64_t start_ = 0;
  Tracer* tracer_ = nullptr;
};

// NVTX push/pop (nvtx.cpp; no-ops without CUDA).
void nvtxPush(const char* name);
void nvtxPop();

}  // namespace trainscope::tracer

#define TRAINSCOPE_CONCAT_INNER(a, b) a##b
#define TRAINSCOPE_CONCAT(a, b) TRAINSCOPE_CONCAT_INNER(a, b)
#ifndef TRAINSCOPE_DISABLE_RANGES
#define TRAINSCOPE_RANGE(name) ::trainscope::tracer::ScopedRange TRAINSCOPE_CONCAT(trainscope_range_, __LINE__)(name)
#else
#define TRAINSCOPE_RANGE(name) ((void)0)
#endif
