// trace.cpp — the Tracer: bounded buffers, a background SQLite writer, exact drop accounting.
#include "trainscope/tracer/trace.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <utility>

#include "trainscope/common/error.h"
#include "trainscope/tracer/schema.h"
#include "trainscope/tracer/sqlite.h"

namespace trainscope::tracer {

namespace {
std::atomic<Tracer*> g_current{nullptr};
std::atomic<uint32_t> g_next_tid{0};
thread_local int32_t t_depth = 0;
thread_local uint32_t t_tid = UINT32_MAX;
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

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

uint32_t threadId() {
  if (t_tid == UINT32_MAX) t_tid = g_next_tid.fetch_add(1);
  return t_tid;
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
};
template <> std::vector<RangeEvent>& Tracer::Buffers::of() { return ranges; }
template <> std::vector<OpEvent>& Tracer::Buffers::of() { return ops; }
template <> std::vector<KernelEvent>& Tracer::Buffers::of() { return kernels; }
template <> std::vector<MemcpyEvent>& Tracer::Buffers::of() { return memcpy; }
template <> std::vector<MemsetEvent>& Tracer::Buffers::of() { return memset; }
template <> std::vector<ApiEvent>& Tracer::Buffers::of() { return api; }
template <> std::vector<CounterEvent>& Tracer::Buffers::of() { return counters; }
template <> std::vector<CollectiveEvent>& Tracer::Buffers::of() { return collectives; }

Tracer::Tracer(const std::string& path, int rank, TraceLevel level, size_t capacity)
    : path_(path), rank_(rank), level_(level), capacity_(capacity), pending_(std::make_unique<Buffers>()) {
  static std::atomic<uint64_t> next_id{1};
  id_ = next_id.fetch_add(1);
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
  db_ = std::make_unique<Database>(path, Database::Mode::Create);
  // Large pages and cache: the shard is written in big sequential batches.
  db_->exec("PRAGMA page_size=65536; PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF; PRAGMA cache_size=-65536;");
  createSchema(*db_);
  writer_ = std::thread([this] { writerLoop(); });
}

Tracer::~Tracer() {
  try {
    close();
  } catch (const std::exception& e) {
    std::cerr << "trainscope tracer: closing " << path_ << " failed: " << e.what() << "\n";
  }
  if (g_current.load() == this) g_current.store(nullptr);
}

Tracer* Tracer::current() { return g_current.load(std::memory_order_acquire); }
void Tracer::setCurrent(Tracer* t) { g_current.store(t, std::memory_order_release); }

uint32_t Tracer::intern(std::string_view s) {
  std::lock_guard<std::mutex> lock(strings_mu_);
  auto it = strings_.find(std::string(s));
  if (it != strings_.end()) return it->second;
  const uint32_t id = static_cast<uint32_t>(strings_.size());
  strings_.emplace(std::string(s), id);
  new_strings_.emplace_back(id, std::string(s));
  return id;
}

template <class E>
void Tracer::push(int source, E&& e) {
  emitted_[source].fetch_add(1, std::memory_order_relaxed);
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

void Tracer::record(const RangeEvent& e) { push(kRanges, RangeEvent(e)); }
void Tracer::record(const OpEvent& e) { push(kOps, OpEvent(e)); }
void Tracer::record(const KernelEvent& e) { push(kKernels, KernelEvent(e)); }
void Tracer::record(const MemcpyEvent& e) { push(kMemcpy, MemcpyEvent(e)); }
void Tracer::record(const MemsetEvent& e) { push(kMemset, MemsetEvent(e)); }
void Tracer::record(const ApiEvent& e) { push(kApi, ApiEvent(e)); }
void Tracer::record(const CounterEvent& e) { push(kCounters, CounterEvent(e)); }
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

// One transaction per batch; statements prepared once per batch (cheap next to the rows).
void Tracer::write(Buffers& b) {
  std::vector<std::pair<uint32_t, std::string>> strings;
  {
    std::lock_guard<std::mutex> lock(strings_mu_);
    strings.swap(new_strings_);
  }
  const size_t total = b.ranges.size() + b.ops.size() + b.kernels.size() + b.memcpy.size() + b.memset.size() +
                       b.api.size() + b.counters.size() + b.collectives.size();
  if (strings.empty() && total == 0) return;
  try {
    Transaction tx(*db_);
    {
      Statement s(*db_, "INSERT OR REPLACE INTO strings(id, value) VALUES (?, ?)");
      for (const auto& [id, v] : strings) {
        s.bind(1, int64_t(id));
        s.bind(2, v);
        s.run();
      }
    }
    const int64_t r = rank_;
    if (!b.ranges.empty()) {
      // Ranges are the bulk of a trace: kRows rows per INSERT cut SQLite's per-statement overhead.
      constexpr int kRows = 64;
      std::string sql = "INSERT INTO ranges VALUES (?,?,?,?,?,?,?,?)";
      for (int i = 1; i < kRows; ++i) sql += ",(?,?,?,?,?,?,?,?)";
      Statement many(*db_, sql), one(*db_, "INSERT INTO ranges VALUES (?,?,?,?,?,?,?,?)");
      auto bindRange = [&](Statement& s, int base, const RangeEvent& e) {
        s.bind(base + 1, r), s.bind(base + 2, int64_t(e.tid)), s.bind(base + 3, e.start_ns), s.bind(base + 4, e.end_ns);
        s.bind(base + 5, int64_t(e.name)), s.bind(base + 6, int64_t(e.domain)), s.bind(base + 7, int64_t(e.depth));
        s.bind(base + 8, int64_t(e.kind));
      };
      size_t i = 0;
      for (; i + kRows <= b.ranges.size(); i += kRows) {
        for (int k = 0; k < kRows; ++k) bindRange(many, 8 * k, b.ranges[i + k]);
        many.run();
      }
      for (; i < b.ranges.size(); ++i) {
        bindRange(one, 0, b.ranges[i]);
        one.run();
      }
    }
    if (!b.ops.empty()) {
      Statement s(*db_, "INSERT INTO host_ops VALUES (?,?,?,?,?,?,?)");
      for (const auto& e : b.ops) {
        s.bind(1, r), s.bind(2, int64_t(e.tid)), s.bind(3, e.start_ns), s.bind(4, e.end_ns);
        s.bind(5, int64_t(e.name)), s.bind(6, e.seq);
        if (e.shapes == UINT32_MAX) s.bindNull(7);
        else s.bind(7, int64_t(e.shapes));
        s.run();
      }
    }
    if (!b.kernels.empty()) {
      Statement s(*db_, "INSERT INTO kernels VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,NULL)");
      for (const auto& e : b.kernels) {
        s.bind(1, r), s.bind(2, int64_t(e.device)), s.bind(3, int64_t(e.stream)), s.bind(4, e.start_ns);
        s.bind(5, e.end_ns), s.bind(6, e.correlation), s.bind(7, int64_t(e.name));
        for (int i = 0; i < 3; ++i) s.bind(8 + i, int64_t(e.grid[i])), s.bind(11 + i, int64_t(e.block[i]));
        s.bind(14, int64_t(e.registers)), s.bind(15, int64_t(e.shared_bytes));
        s.run();
      }
    }
    if (!b.memcpy.empty()) {
      Statement s(*db_, "INSERT INTO memcpy VALUES (?,?,?,?,?,?,?,?)");
      for (const auto& e : b.memcpy) {
        s.bind(1, r), s.bind(2, int64_t(e.device)), s.bind(3, int64_t(e.stream)), s.bind(4, e.start_ns);
        s.bind(5, e.end_ns), s.bind(6, e.correlation), s.bind(7, int64_t(e.kind)), s.bind(8, e.bytes);
        s.run();
      }
    }
    if (!b.memset.empty()) {
      Statement s(*db_, "INSERT INTO memset VALUES (?,?,?,?,?,?,?,?)");
      for (const auto& e : b.memset) {
        s.bind(1, r), s.bind(2, int64_t(e.device)), s.bind(3, int64_t(e.stream)), s.bind(4, e.start_ns);
        s.bind(5, e.end_ns), s.bind(6, e.correlation), s.bind(7, e.bytes), s.bind(8, int64_t(e.value));
        s.run();
      }
    }
    if (!b.api.empty()) {
      Statement s(*db_, "INSERT INTO api_calls VALUES (?,?,?,?,?,?,?)");
      for (const auto& e : b.api) {
        s.bind(1, r), s.bind(2, int64_t(e.tid)), s.bind(3, e.start_ns), s.bind(4, e.end_ns);
        s.bind(5, e.correlation), s.bind(6, int64_t(e.name)), s.bind(7, int64_t(e.kind));
        s.run();
      }
    }
    if (!b.counters.empty()) {
      Statement s(*db_, "INSERT INTO counters VALUES (?,?,?,?)");
      for (const auto& e : b.counters) {
        s.bind(1, r), s.bind(2, e.ts_ns), s.bind(3, int64_t(e.name)), s.bind(4, e.value);
        s.run();
      }
    }
    if (!b.collectives.empty()) {
      Statement s(*db_, "INSERT INTO collectives VALUES (?,?,?,?,?,?,?,?,?,?)");
      for (const auto& e : b.collectives) {
        s.bind(1, r), s.bind(2, e.op), s.bind(3, e.group), s.bind(4, int64_t(e.group_size)), s.bind(5, e.seq);
        s.bind(6, e.bytes), s.bind(7, e.start_ns), s.bind(8, e.end_ns), s.bind(9, e.algbw), s.bind(10, e.busbw);
        s.run();
      }
    }
    tx.commit();
    stored_[kRanges] += int64_t(b.ranges.size());
    stored_[kOps] += int64_t(b.ops.size());
    stored_[kKernels] += int64_t(b.kernels.size());
    stored_[kMemcpy] += int64_t(b.memcpy.size());
    stored_[kMemset] += int64_t(b.memset.size());
    stored_[kApi] += int64_t(b.api.size());
    stored_[kCounters] += int64_t(b.counters.size());
    stored_[kCollectives] += int64_t(b.collectives.size());
  } catch (const std::exception& e) {
    // The tracer never takes the run down: log once per failure, count the batch as dropped.
    std::cerr << "trainscope tracer: dropping " << total << " events, writing " << path_ << " failed: " << e.what()
              << "\n";
    dropped_[kRanges] += int64_t(b.ranges.size());
    dropped_[kOps] += int64_t(b.ops.size());
    dropped_[kKernels] += int64_t(b.kernels.size());
    dropped_[kMemcpy] += int64_t(b.memcpy.size());
    dropped_[kMemset] += int64_t(b.memset.size());
    dropped_[kApi] += int64_t(b.api.size());
    dropped_[kCounters] += int64_t(b.counters.size());
    dropped_[kCollectives] += int64_t(b.collectives.size());
    std::lock_guard<std::mutex> lock(strings_mu_);
    new_strings_.insert(new_strings_.begin(), strings.begin(), strings.end());
  }
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;  // from here on events are dropped (and counted)
    stop_ = true;
  }
  cv_.notify_one();
  if (writer_.joinable()) writer_.join();
  Buffers empty;
  write(empty);  // strings interned after the last batch
  Transaction tx(*db_);
  {
    Statement s(*db_, "INSERT OR REPLACE INTO drops(rank, source, emitted, stored, dropped) VALUES (?,?,?,?,?)");
    for (int i = 0; i < kSourceCount; ++i) {
      s.bind(1, int64_t(rank_));
      s.bind(2, std::string(sourceName(i)));
      s.bind(3, emitted_[i].load());
      s.bind(4, stored_[i].load());
      s.bind(5, dropped_[i].load());
      s.run();
    }
    Statement m(*db_, "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)");
    m.bind(1, std::string("schema_version"));
    m.bind(2, std::to_string(kSchemaVersion));
    m.run();
    m.bind(1, std::string("trace_level"));
    m.bind(2, std::string(toString(level_)));
    m.run();
    for (const auto& [k, v] : meta_) {
      m.bind(1, k);
      m.bind(2, v);
      m.run();
    }
  }
  tx.commit();
  createIndexes(*db_);
  db_->exec("PRAGMA wal_checkpoint(TRUNCATE);");
}

std::array<SourceStats, kSourceCount> Tracer::stats() const {
  std::array<SourceStats, kSourceCount> s;
  for (int i = 0; i < kSourceCount; ++i) s[i] = {emitted_[i].load(), stored_[i].load(), dropped_[i].load()};
  return s;
}

ScopedRange::ScopedRange(const char* name) : name_(name) {
  nvtxPush(name);
  Tracer* t = Tracer::current();
  if (t && t->enabled(TraceLevel::Ranges)) {
    tracer_ = t;
    start_ = nowNs();
  }
  ++t_depth;
}

ScopedRange::~ScopedRange() {
  --t_depth;
  nvtxPop();
  if (!tracer_) return;
  static thread_local uint64_t cached_for = 0;
  static thread_local uint32_t domain = 0;
  if (cached_for != tracer_->id()) {
    domain = tracer_->intern("trainscope");
    cached_for = tracer_->id();
  }
  tracer_->record(RangeEvent{start_, nowNs(), tracer_->intern(name_), domain, threadId(), t_depth,
                             static_cast<int32_t>(RangeKind::PushPop)});
}

}  // namespace trainscope::tracer
