// trace.cpp — the Tracer: bounded buffers, a background writer through rundb::RunStore, exact drop
// accounting.
#include "trainscope/tracer/trace.h"
#include "trainscope/tracer/thread_names.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <iostream>
#include <utility>

#include "trainscope/common/error.h"
#include "trainscope/rundb/schema.h"
#include "trainscope/rundb/sqlite.h"
#include "trainscope/rundb/store.h"

namespace trainscope::tracer {

namespace {
std::atomic<Tracer*> g_current{nullptr};
constexpr int kWriteAttempts = 5;  // a batch refused by a lock is retried this many times
}  // namespace

TraceLevel parseTraceLevel(const std::string& s) {
  if (s == "off") return TraceLevel::Off;
  if (s == "steps") return TraceLevel::Steps;
  if (s == "ranges") return TraceLevel::Ranges;
  if (s == "ops") return TraceLevel::Ops;
  if (s == "all") return TraceLevel::All;
  throw UserError("--trace-level", "unknown value \"" + s + "\"", "use one of steps|ranges|ops|all");
}

const char* toString(TraceLevel l) {
  static const char* names[] = {"off", "steps", "ranges", "ops", "all"};
  return names[static_cast<int>(l)];
}

const char* sourceName(int s) {
  static const char* names[] = {"ranges", "host_ops", "kernels", "memcpy", "memset", "api_calls", "counters", "collectives"};
  return names[s];
}

struct Tracer::Buffers {
  std::vector<RangeEvent> ranges;
  std::vector<OpEvent> ops;
  std::vector<KernelEvent> kernels;
  std::vector<MemcpyEvent> memcpy;
  std::vector<MemsetEvent> memset;
  std::vector<ApiEvent> api;
  std::vector<CounterEvent> counters;
  std::vector<CollectiveEvent> collectives;
  template <class E>
  std::vector<E>& of();
  std::array<size_t, kSourceCount> sizes() const {
    return {ranges.size(), ops.size(), kernels.size(), memcpy.size(),
            memset.size(), api.size(), counters.size(), collectives.size()};
  }
};
template <> std::vector<RangeEvent>& Tracer::Buffers::of() { return ranges; }
template <> std::vector<OpEvent>& Tracer::Buffers::of() { return ops; }
template <> std::vector<KernelEvent>& Tracer::Buffers::of() { return kernels; }
template <> std::vector<MemcpyEvent>& Tracer::Buffers::of() { return memcpy; }
template <> std::vector<MemsetEvent>& Tracer::Buffers::of() { return memset; }
template <> std::vector<ApiEvent>& Tracer::Buffers::of() { return api; }
template <> std::vector<CounterEvent>& Tracer::Buffers::of() { return counters; }
template <> std::vector<CollectiveEvent>& Tracer::Buffers::of() { return collectives; }

Tracer::Tracer(const std::string& path, int64_t rank, TraceLevel level, size_t capacity)
    : path_(path), rank_(rank), level_(level), capacity_(capacity), pending_(std::make_unique<Buffers>()) {
  static std::atomic<uint64_t> next_id{1};
  id_ = next_id.fetch_add(1);
  store_ = std::make_unique<rundb::RunStore>(path, rundb::RunStore::Options{true, "--trace", true});
  writer_ = std::thread([this] { writerLoop(); });
}

Tracer::~Tracer() {
  try {
    close();
  } catch (const std::exception& e) {
    std::cerr << "warning: trainscope tracer: closing " << path_ << " failed: " << e.what() << "\n";
  }
  if (g_current.load() == this) g_current.store(nullptr);
}

Tracer* Tracer::current() { return g_current.load(std::memory_order_acquire); }
void Tracer::setCurrent(Tracer* t) { g_current.store(t, std::memory_order_release); }

bool Tracer::addSource(std::unique_ptr<TraceSource> s, std::string* why) {
  if (!enabled(s->minLevel())) return false;
  if (!s->start(*this, why)) return false;
  std::lock_guard<std::mutex> lock(mu_);
  sources_.push_back(std::move(s));
  return true;
}

rundb::StringId Tracer::intern(std::string_view s) {
  std::lock_guard<std::mutex> lock(strings_mu_);
  auto it = strings_.find(std::string(s));
  if (it != strings_.end()) return it->second;
  const auto id = static_cast<rundb::StringId>(strings_.size());
  strings_.emplace(std::string(s), id);
  new_strings_.emplace_back(id, std::string(s));
  return id;
}

template <class E>
void Tracer::push(int source, E&& e) {
  emitted_[source].fetch_add(1, std::memory_order_relaxed);
  e.rank = rank_;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || pending_count_ >= capacity_) {
      dropped_[source].fetch_add(1, std::memory_order_relaxed);
      return;
    }
    pending_->of<std::decay_t<E>>().push_back(std::forward<E>(e));
    wake = ++pending_count_ == capacity_ / 2;
  }
  if (wake) cv_.notify_one();
}

void Tracer::record(RangeEvent e) { push(kRanges, std::move(e)); }
void Tracer::record(OpEvent e) { push(kOps, std::move(e)); }
void Tracer::record(KernelEvent e) { push(kKernels, std::move(e)); }
void Tracer::record(MemcpyEvent e) { push(kMemcpy, std::move(e)); }
void Tracer::record(MemsetEvent e) { push(kMemset, std::move(e)); }
void Tracer::record(ApiEvent e) { push(kApi, std::move(e)); }
void Tracer::record(CounterEvent e) { push(kCounters, std::move(e)); }
void Tracer::record(CollectiveEvent e) { push(kCollectives, std::move(e)); }

void Tracer::countDropped(int source, int64_t n) {
  emitted_[source].fetch_add(n);
  dropped_[source].fetch_add(n);
}

void Tracer::setMeta(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  meta_.emplace_back(key, value);
}

void Tracer::writerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait_for(lock, std::chrono::milliseconds(100),
                 [&] { return stop_ || flush_requested_ || pending_count_ >= capacity_ / 2; });
    flush_requested_ = false;
    auto batch = std::exchange(pending_, std::make_unique<Buffers>());
    pending_count_ = 0;
    const uint64_t id = ++batches_taken_;
    const bool stopping = stop_;
    lock.unlock();
    write(*batch);
    lock.lock();
    batches_written_ = id;
    written_cv_.notify_all();
    if (stopping && pending_count_ == 0) return;
  }
}

// One transaction per batch.
void Tracer::write(Buffers& b) {
  std::vector<std::pair<rundb::StringId, std::string>> strings;
  {
    std::lock_guard<std::mutex> lock(strings_mu_);
    strings.swap(new_strings_);
  }
  const auto sizes = b.sizes();
  size_t total = 0;
  for (size_t n : sizes) total += n;
  if (strings.empty() && total == 0) return;
  std::string failure;
  for (int attempt = 0; attempt < kWriteAttempts; ++attempt) {
    try {
      store_->begin();
      store_->putStrings(strings);
      store_->put(b.ranges);
      store_->put(b.ops);
      store_->put(b.kernels);
      store_->put(b.memcpy);
      store_->put(b.memset);
      store_->put(b.api);
      store_->put(b.counters);
      store_->put(b.collectives);
      store_->commit();
      for (int s = 0; s < kSourceCount; ++s) stored_[s] += int64_t(sizes[s]);
      return;
    } catch (const rundb::SqliteError& e) {
      store_->rollback();
      failure = e.what();
      const int primary = e.code() & 0xff;
      if (primary != 5 /*SQLITE_BUSY*/ && primary != 6 /*SQLITE_LOCKED*/) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50 << attempt));
    } catch (const std::exception& e) {
      store_->rollback();
      failure = e.what();
      break;
    }
  }
  // The tracer never takes the run down: log, count the batch as dropped, keep its strings.
  std::cerr << "warning: trainscope tracer: dropping " << total << " events, writing " << path_
            << " failed: " << failure << "\n";
  for (int s = 0; s < kSourceCount; ++s) dropped_[s] += int64_t(sizes[s]);
  std::lock_guard<std::mutex> lock(strings_mu_);
  new_strings_.insert(new_strings_.begin(), strings.begin(), strings.end());
}

void Tracer::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  if (closed_) return;
  const uint64_t target = batches_taken_ + 1;  // the batch that will hold what is pending now
  flush_requested_ = true;                     // wake the writer now, not at its next tick
  cv_.notify_one();
  written_cv_.wait(lock, [&] { return batches_written_ >= target; });
}

void Tracer::close() {
  std::vector<std::unique_ptr<TraceSource>> sources;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    sources.swap(sources_);
  }
  for (auto& s : sources) s->stop();  // sources hand in what they still hold
  sources.clear();
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;  // from here on events are dropped (and counted)
    stop_ = true;
  }
  cv_.notify_one();
  if (writer_.joinable()) writer_.join();
  // The threads' names (thread_names.h: namedThreads) and this process's, as `threads` rows: native rows read
  // `thread 0 (main)`, `thread 3 (pt_autograd_0)` in the viewer, not `thread N` alone.
  std::vector<rundb::ThreadName> thread_rows;
  for (const auto& [tid, name] : namedThreads())
    thread_rows.push_back({int32_t(rundb::ThreadKind::Thread), -1, int64_t(tid),
                     intern("thread " + std::to_string(tid) + " (" + name + ")"), int64_t(tid), rank_});
  if (program_invocation_short_name && *program_invocation_short_name)
    thread_rows.push_back({int32_t(rundb::ThreadKind::Process), -1, int64_t(getpid()), intern(program_invocation_short_name),
                     std::nullopt, rank_});
  Buffers empty;
  write(empty);  // strings interned after the last batch
  std::vector<rundb::Drop> drops;
  for (int i = 0; i < kSourceCount; ++i)
    drops.push_back({rank_, sourceName(i), emitted_[i].load(), stored_[i].load(), dropped_[i].load()});
  store_->begin();
  store_->put(drops);
  store_->put(thread_rows);
  store_->setMeta("trace_level", toString(level_));
  for (const auto& [k, v] : meta_) store_->setMeta(k, v);
  store_->commit();
  store_->createIndexes();
  store_->close();
}

std::array<SourceStats, kSourceCount> Tracer::stats() const {
  std::array<SourceStats, kSourceCount> s;
  for (int i = 0; i < kSourceCount; ++i) s[i] = {emitted_[i].load(), stored_[i].load(), dropped_[i].load()};
  return s;
}

}  // namespace trainscope::tracer
