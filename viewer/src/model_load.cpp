// model_load.cpp — loadTrace's first step: the span tables into one track per CPU thread, device
// stream and stream's GPU annotations (see model_internal.h).
//
// Ranks load in parallel, one RunReader per worker (SQLite connections are independent; the file is
// opened read-only). Each chunk of a table keeps its events in its own PendingMap; the parts of a
// track are joined once, in storage order, when its lanes are built (a few sorted runs to merge, not
// a shuffle to sort), so no lock is taken per event.
#include <algorithm>
#include <array>
#include <atomic>
#include <exception>
#include <iterator>
#include <memory>
#include <thread>

#include "model_internal.h"

namespace trainscope::viewer::loader {

namespace {

// Rows read so far out of every span table's, as LoadProgress's fraction (up to 0.9: laying out
// the tracks is the rest); throws Cancelled once the caller asks.
struct Counting {
  LoadProgress* progress;
  int64_t total = 0;
  std::atomic<int64_t> done{0};
  void add(int64_t n) {
    const int64_t d = done.fetch_add(n) + n;
    if (!progress) return;
    if (progress->cancel.load()) throw Cancelled();
    progress->fraction.store(total > 0 ? std::min(0.9, 0.9 * double(d) / double(total)) : 0.9);
  }
};

// Runs f(i, worker) for i in [0, n) on `threads` threads (worker 0 is the calling one); rethrows
// the first failure after every thread has stopped.
template <class F>
void parallelFor(size_t n, int threads, F&& f) {
  std::atomic<size_t> next{0};
  std::exception_ptr failure;
  std::mutex mu;
  auto work = [&](int worker) {
    try {
      for (size_t i; (i = next.fetch_add(1)) < n;) f(i, worker);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!failure) failure = std::current_exception();
      next.store(n);
    }
  };
  std::vector<std::thread> pool;
  for (int i = 1; i < threads && size_t(i) < n; ++i) pool.emplace_back(work, i);
  work(0);
  for (auto& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

// Tables 3 and on are a device's (a = device, b = stream); gpu_annotations (6) get a track of their own.
constexpr const char* kSpanTables[] = {"ranges", "host_ops", "api_calls", "kernels", "memcpy", "memset",
                                       "gpu_annotations"};
constexpr int kGpuAnnotations = 6;
constexpr int64_t kChunkRows = 1 << 18;

// A copy's name by its MemcpyKind (0..10), then the memset's.
using CopyNames = std::array<uint32_t, 12>;
CopyNames copyNames(Names& names) {
  static const char* kCopy[] = {"memcpy", "memcpy HtoD", "memcpy DtoH", "memcpy HtoA", "memcpy AtoH", "memcpy AtoA",
                                "memcpy AtoD", "memcpy DtoA", "memcpy DtoD", "memcpy HtoH", "memcpy PtoP", "memset"};
  CopyNames copy_names{};
  for (int i = 0; i < 12; ++i) copy_names[size_t(i)] = names.text(kCopy[i]);
  return copy_names;
}

// Rows [begin, end) of one span table; workers take them in turn.
struct Chunk {
  int table;
  int64_t begin, end;
};

// Chunks of rowids over every span table; `total` gains the rows they bound.
std::vector<Chunk> spanChunks(rundb::RunReader& reader, int64_t& total) {
  std::vector<Chunk> chunks;
  for (int t = 0; t < int(std::size(kSpanTables)); ++t) {
    const int64_t bound = reader.rowBound(kSpanTables[t]);
    total += bound;
    for (int64_t b = 0; b <= bound; b += kChunkRows) chunks.push_back({t, b, std::min(bound + 1, b + kChunkRows)});
  }
  return chunks;
}

// A span row as an event of its table's kind, named (a kernel's name also says whether it is NCCL's).
Event spanEvent(rundb::RunReader& r, Names& names, int table, const rundb::SpanRow& s, const CopyNames& copy_names) {
  Event e{s.start_ns, s.end_ns, 0, EventKind::Range};
  switch (table) {
    case 0:
    case kGpuAnnotations: e.name = names.id(r, s.name), e.kind = EventKind::Range; break;
    case 1: e.name = names.id(r, s.name), e.kind = EventKind::HostOp; break;
    case 2: e.name = names.id(r, s.name), e.kind = EventKind::ApiCall; break;
    case 3:
      e.name = names.id(r, s.name);
      e.kind = names.comm(e.name) ? EventKind::CommKernel : EventKind::Kernel;
      break;
    case 4:
      e.kind = EventKind::Memcpy;
      e.extra = uint16_t(s.kind >= 0 && s.kind <= 10 ? s.kind : 0);
      e.name = copy_names[e.extra];
      break;
    case 5: e.kind = EventKind::Memset, e.name = copy_names[11]; break;
  }
  return e;
}

// One chunk of one span table into its own tracks. Rows come grouped by track, so the track is
// looked up (and grown to fit the group) only when it changes.
void loadChunk(rundb::RunReader& r, Names& names, const Chunk& c, PendingMap& tracks, const CopyNames& copy_names,
               std::vector<rundb::SpanRow>& rows) {
  rows.clear();
  r.spans(kSpanTables[c.table], c.begin, c.end, rows);
  const bool device = c.table >= 3;
  const bool corr = c.table >= 2 && c.table != kGpuAnnotations;  // API calls, kernels, copies, sets
  auto keyOf = [&](const rundb::SpanRow& s) {
    return TrackKey{s.rank, c.table == kGpuAnnotations ? 2 : device ? 1 : 0, s.a, device ? s.b : 0};
  };
  for (size_t i = 0, j; i < rows.size(); i = j) {
    const TrackKey key = keyOf(rows[i]);
    for (j = i + 1; j < rows.size() && keyOf(rows[j]) == key;) ++j;
    Pending& p = tracks[key];
    // Geometric, should a track's rows come in many groups (interleaved threads in an import).
    if (const size_t need = p.ev.size() + (j - i); need > p.ev.capacity()) p.ev.reserve(std::max(need, 2 * p.ev.capacity()));
    for (size_t k = i; k < j; ++k) {
      const rundb::SpanRow& s = rows[k];
      p.ev.push_back({spanEvent(r, names, c.table, s, copy_names), corr ? s.correlation : -1});
      p.any_corr |= corr && s.correlation >= 0;
    }
  }
}

// A thread's or a stream's track out of its parts (in storage order), each part freed as it is taken.
void buildThreadTrack(const TrackKey& k, const std::vector<Pending*>& parts, const ThreadNames& thread_names,
                      Track& t) {
  std::vector<CorrelatedEvent> ev;
  bool any_corr = false;
  if (parts.size() == 1) {
    ev = std::move(parts[0]->ev);
    any_corr = parts[0]->any_corr;
    *parts[0] = Pending{};
  } else {
    size_t n = 0;
    for (const Pending* p : parts) n += p->ev.size();
    ev.reserve(n);
    for (Pending* p : parts) {
      ev.insert(ev.end(), p->ev.begin(), p->ev.end());
      any_corr |= p->any_corr;
      *p = Pending{};  // free as we go
    }
  }
  t.kind = k.kind == 0 ? TrackKind::Thread : k.kind == 1 ? TrackKind::Stream : TrackKind::Annotations;
  t.rank = k.rank;
  t.id = k.kind == 0 ? k.a : k.b;
  t.device = k.kind == 0 ? -1 : k.a;
  t.name = thread_names.name(k);
  t.label = thread_names.label(k);
  buildLanesOf(t, std::move(ev), any_corr);
}

}  // namespace

std::vector<PendingMap> readSpans(rundb::RunReader& reader, const std::string& path, Names& names,
                                  LoadProgress* progress, int workers) {
  const CopyNames copy_names = copyNames(names);
  Counting count{progress};
  const std::vector<Chunk> chunks = spanChunks(reader, count.total);
  std::vector<PendingMap> per_chunk(chunks.size());
  std::vector<std::unique_ptr<rundb::RunReader>> readers(static_cast<size_t>(workers));
  std::vector<std::vector<rundb::SpanRow>> rows(static_cast<size_t>(workers));
  parallelFor(chunks.size(), workers, [&](size_t i, int w) {
    auto& rd = readers[size_t(w)];
    if (w > 0 && !rd) rd = std::make_unique<rundb::RunReader>(path);
    const Chunk& c = chunks[i];
    loadChunk(w > 0 ? *rd : reader, names, c, per_chunk[i], copy_names, rows[size_t(w)]);
    count.add(c.end - c.begin);
  });
  return per_chunk;
}

BuiltTracks buildThreadTracks(std::vector<PendingMap>& per_chunk, const ThreadNames& thread_names, int workers) {
  std::map<TrackKey, std::vector<Pending*>> parts;
  for (auto& m : per_chunk)
    for (auto& [k, p] : m) parts[k].push_back(&p);
  BuiltTracks built;
  for (auto& [k, v] : parts) built.push_back({k, Track{}});
  parallelFor(built.size(), workers, [&](size_t i, int) {
    buildThreadTrack(built[i].first, parts.at(built[i].first), thread_names, built[i].second);
  });
  per_chunk.clear();
  return built;
}

ThreadNames::ThreadNames(rundb::RunReader& r) {
  for (const rundb::ThreadName& t : r.threads()) {
    Entry& e = by_key_[{t.rank, t.kind, t.kind == int32_t(rundb::ThreadKind::Stream) ? t.device : -1, t.tid}];
    if (t.name != rundb::kNoString) e.name = r.string(t.name);
    if (t.sort_index) e.sort = t.sort_index;
    if (t.kind == int32_t(rundb::ThreadKind::Process) && !e.name.empty())
      process_[t.rank] += (process_[t.rank].empty() ? "" : ", ") + e.name + " (pid " + std::to_string(t.tid) + ")";
  }
}

std::string ThreadNames::name(const TrackKey& k) const {
  const Entry* e = find(k);
  return e ? e->name : std::string();
}

std::tuple<int, int64_t, int64_t, int64_t, int> ThreadNames::order(const TrackKey& k) const {
  const Entry* e = find(k);
  const int64_t id = k.kind == 0 ? k.a : k.b;
  const int64_t sort = e && e->sort ? *e->sort : id;
  if (k.kind == 0) return {0, 0, sort, id, 0};
  return {1, k.a, sort, id, k.kind == 2 ? 0 : 1};
}

std::string ThreadNames::label(const TrackKey& k) const {
  const std::string n = name(k);
  if (k.kind == 0) return n.empty() ? "thread " + std::to_string(k.a) : n;
  const std::string stream = n.empty() ? "stream " + std::to_string(k.b) : n;
  return stream + (k.kind == 2 ? " annotations" : "") + " (device " + std::to_string(k.a) + ")";
}

std::string ThreadNames::process(int64_t rank) const {
  auto it = process_.find(rank);
  return it == process_.end() ? std::string() : it->second;
}

const ThreadNames::Entry* ThreadNames::find(const TrackKey& k) const {
  const auto key = k.kind == 0 ? std::make_tuple(k.rank, int32_t(rundb::ThreadKind::Thread), int64_t(-1), k.a)
                               : std::make_tuple(k.rank, int32_t(rundb::ThreadKind::Stream), k.a, k.b);
  auto it = by_key_.find(key);
  return it == by_key_.end() ? nullptr : &it->second;
}

}  // namespace trainscope::viewer::loader
