// model.cpp — loading a run database into tracks and lanes (see model.h).
//
// Ranks load in parallel, one RunReader per worker (SQLite connections are independent; the file is
// opened read-only). Each worker names events with its own small table; the tables are merged once
// at the end, so no lock is taken per event.
#include "trainscope/viewer/model.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "trainscope/common/error.h"
#include "trainscope/rundb/moe_load.h"
#include "trainscope/rundb/range_names.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/viewer/comm.h"
#include "trainscope/viewer/lod.h"

namespace trainscope::viewer {

namespace {
const char* kKindNames[kEventKinds] = {"step", "range", "op", "api", "kernel", "nccl kernel", "memcpy", "memset",
                                       "collective"};
}

const char* kindName(EventKind k) { return kKindNames[int(k)]; }

int64_t Track::events() const {
  int64_t n = int64_t(counter.ts.size());
  for (const auto& l : lanes) n += int64_t(l.events.size());
  return n;
}

int64_t Trace::correlation(const EventRef& r) const {
  const Lane& l = tracks[r.track].lanes[r.lane];
  return l.correlation.empty() ? -1 : l.correlation[r.index];
}

size_t Trace::bytes() const {
  size_t b = sizeof(Trace);
  for (const auto& n : names) b += sizeof(std::string) + n.capacity();
  for (const auto& t : tracks) {
    b += sizeof(Track) + t.label.capacity() + t.name.capacity();
    for (const auto& l : t.lanes) {
      b += sizeof(Lane) + l.events.capacity() * sizeof(Event) + l.correlation.capacity() * sizeof(int64_t) +
           l.busy_prefix.capacity() * sizeof(int64_t);
      for (const auto& lv : l.levels) b += sizeof(LodLevel) + lv.items.capacity() * sizeof(LodItem);
    }
    b += t.counter.ts.capacity() * 8 + t.counter.values.capacity() * 8;
    for (const auto& p : t.counter.pyramid) b += p.capacity() * sizeof(p[0]);
  }
  b += steps.capacity() * sizeof(rundb::Step) + comm.bytes();
  return b;
}

std::optional<int64_t> Trace::stepStart(int64_t step, int64_t rank) const {
  auto w = stepWindow(step, rank);
  return w ? std::optional<int64_t>(w->first) : std::nullopt;
}

std::optional<std::pair<int64_t, int64_t>> Trace::stepWindow(int64_t step, int64_t rank) const {
  std::optional<std::pair<int64_t, int64_t>> w;
  for (const auto& s : steps) {
    if (s.step != step || (rank >= 0 && s.rank != rank)) continue;
    const std::pair<int64_t, int64_t> x{s.start_ns, s.start_ns + s.step_time_ns};
    w = w ? std::make_pair(std::min(w->first, x.first), std::max(w->second, x.second)) : x;
  }
  return w;
}

void buildLanes(Track& t, std::vector<Event> events, std::vector<int64_t> correlation) {
  // Sorted by start, longest first (parents before children). Tracks arrive as a few sorted runs
  // (one per table and chunk), so the events are sorted in place, with their correlation ids
  // alongside — no index permutation to chase.
  struct Item {
    Event e;
    int64_t corr;
  };
  const bool corr = !correlation.empty();
  auto before = [](const Event& x, const Event& y) { return x.start != y.start ? x.start < y.start : x.end > y.end; };
  std::vector<Item> items;
  if (corr) {
    items.resize(events.size());
    for (size_t i = 0; i < events.size(); ++i) items[i] = {events[i], correlation[i]};
    if (!std::is_sorted(items.begin(), items.end(), [&](const Item& a, const Item& b) { return before(a.e, b.e); }))
      std::sort(items.begin(), items.end(), [&](const Item& a, const Item& b) { return before(a.e, b.e); });
    std::vector<Event>().swap(events);
    std::vector<int64_t>().swap(correlation);
  } else if (!std::is_sorted(events.begin(), events.end(), before)) {
    std::sort(events.begin(), events.end(), before);
  }
  const size_t n = corr ? items.size() : events.size();
  auto at = [&](size_t i) -> const Event& { return corr ? items[i].e : events[i]; };
  // Pass 1: each event's lane. Pass 2: fill lanes reserved to their exact sizes (no regrowth).
  std::vector<uint32_t> lane_of(n);
  std::vector<int64_t> open;      // ends of the enclosing events (a stack)
  std::vector<int64_t> lane_end;  // last end in each lane
  std::vector<size_t> count;
  for (size_t i = 0; i < n; ++i) {
    const Event& e = at(i);
    const int64_t end = std::max(e.end, e.start);
    while (!open.empty() && open.back() <= e.start) open.pop_back();
    size_t d = open.size();
    // Partial overlaps (an async range, two kernels on one stream): the next lane that is free.
    while (d < lane_end.size() && lane_end[d] > e.start) ++d;
    if (d >= lane_end.size()) lane_end.resize(d + 1, INT64_MIN), count.resize(d + 1, 0);
    lane_end[d] = end;
    if (open.empty() || end <= open.back()) open.push_back(end);
    lane_of[i] = uint32_t(d);
    ++count[d];
  }
  t.lanes.clear();
  t.lanes.resize(count.size());
  for (size_t d = 0; d < count.size(); ++d) {
    t.lanes[d].events.reserve(count[d]);
    if (corr) t.lanes[d].correlation.reserve(count[d]);
  }
  for (size_t i = 0; i < n; ++i) {
    Lane& lane = t.lanes[lane_of[i]];
    Event e = at(i);
    if (e.end < e.start) e.end = e.start;
    lane.events.push_back(e);
    if (corr) lane.correlation.push_back(items[i].corr);
  }
  for (auto& lane : t.lanes) buildLevels(lane);
}

namespace {

// A CPU thread, a device stream or a stream's GPU annotations, of one rank.
struct TrackKey {
  int64_t rank;
  int kind;  // 0: thread (a = tid), 1: stream (a = device, b = stream), 2: that stream's GPU annotations
  int64_t a, b;
  bool operator==(const TrackKey& o) const { return rank == o.rank && kind == o.kind && a == o.a && b == o.b; }
  bool operator<(const TrackKey& o) const {
    return std::tie(rank, kind, a, b) < std::tie(o.rank, o.kind, o.a, o.b);
  }
};
struct TrackKeyHash {
  size_t operator()(const TrackKey& k) const {
    return std::hash<int64_t>()(k.rank * 1000003 + k.kind * 7919 + k.a * 31 + k.b);
  }
};

struct Pending {
  std::vector<Event> ev;
  std::vector<int64_t> corr;
  bool any_corr = false;
};
using PendingMap = std::unordered_map<TrackKey, Pending, TrackKeyHash>;

// Names: the file's dense string table first, then names the loader makes (copies, sets, steps,
// collectives, and strings whose ids lie past the dense range).
class Names {
 public:
  explicit Names(const rundb::RunReader& r) : names_(r.denseStrings()), dense_(uint32_t(names_.size())) {
    for (uint32_t i = 0; i < dense_; ++i) by_text_.emplace(names_[i], i);
    comm_.resize(dense_);
    for (uint32_t i = 0; i < dense_; ++i) comm_[i] = rundb::isCommKernel(names_[i]);
  }
  uint32_t dense() const { return dense_; }
  bool comm(uint32_t id) const { return id < dense_ ? comm_[id] : rundb::isCommKernel(names_[id]); }
  // Thread-safe: workers meet sparse ids rarely.
  uint32_t text(const std::string& s) {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, fresh] = by_text_.emplace(s, uint32_t(names_.size()));
    if (fresh) names_.push_back(s);
    return it->second;
  }
  uint32_t id(const rundb::RunReader& r, rundb::StringId sid) { return sid < dense_ ? sid : text(r.string(sid)); }
  std::vector<std::string> take() { return std::move(names_); }
  const std::string& operator[](uint32_t i) const { return names_[i]; }

 private:
  std::vector<std::string> names_;
  uint32_t dense_;
  std::unordered_map<std::string, uint32_t> by_text_;
  std::vector<char> comm_;
  std::mutex mu_;
};

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

// A counter's samples in time order (the table is read in storage order); ties keep that order.
void sortByTime(CounterSeries& c) {
  if (std::is_sorted(c.ts.begin(), c.ts.end())) return;
  std::vector<size_t> order(c.ts.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return c.ts[a] < c.ts[b]; });
  std::vector<int64_t> ts(order.size());
  std::vector<double> values(order.size());
  for (size_t i = 0; i < order.size(); ++i) ts[i] = c.ts[order[i]], values[i] = c.values[order[i]];
  c.ts = std::move(ts);
  c.values = std::move(values);
}

// Tables 3 and on are a device's (a = device, b = stream); gpu_annotations (6) get a track of their own.
constexpr const char* kSpanTables[] = {"ranges", "host_ops", "api_calls", "kernels", "memcpy", "memset",
                                       "gpu_annotations"};
constexpr int kGpuAnnotations = 6;
constexpr int64_t kChunkRows = 1 << 18;

// One chunk of one span table into a worker's tracks.
void loadChunk(rundb::RunReader& r, Names& names, int table, int64_t begin, int64_t end, PendingMap& tracks,
               const std::array<uint32_t, 12>& copy_names, std::vector<rundb::SpanRow>& rows) {
  rows.clear();
  r.spans(kSpanTables[table], begin, end, rows);
  const bool device = table >= 3;
  TrackKey last{INT64_MIN, -1, 0, 0};
  Pending* p = nullptr;
  for (const auto& s : rows) {
    const TrackKey key{s.rank, table == kGpuAnnotations ? 2 : device ? 1 : 0, s.a, device ? s.b : 0};
    if (!p || !(key == last)) p = &tracks[key], last = key;
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
    p->ev.push_back(e);
    const bool corr = table >= 2 && table != kGpuAnnotations;
    p->corr.push_back(corr ? s.correlation : -1);
    p->any_corr |= corr && s.correlation >= 0;
  }
}

// The threads table of a file: names and order by (rank, kind, device, tid), and the rows' labels.
// A file without the table (schema version 3 and older) has no names: ids label the rows.
class ThreadNames {
 public:
  explicit ThreadNames(rundb::RunReader& r) {
    for (const rundb::ThreadName& t : r.threads()) {
      Entry& e = by_key_[{t.rank, t.kind, t.kind == int32_t(rundb::ThreadKind::Stream) ? t.device : -1, t.tid}];
      if (t.name != rundb::kNoString) e.name = r.string(t.name);
      if (t.sort_index) e.sort = t.sort_index;
      if (t.kind == int32_t(rundb::ThreadKind::Process) && !e.name.empty())
        process_[t.rank] += (process_[t.rank].empty() ? "" : ", ") + e.name + " (pid " + std::to_string(t.tid) + ")";
    }
  }
  // The name recorded for a built track's thread or stream ("" when none).
  std::string name(const TrackKey& k) const {
    const Entry* e = find(k);
    return e ? e->name : std::string();
  }
  // Threads first, then each device's streams, each stream's annotations right above it; within
  // them the profiler's sort index, else the id (Perfetto's order).
  std::tuple<int, int64_t, int64_t, int64_t, int> order(const TrackKey& k) const {
    const Entry* e = find(k);
    const int64_t id = k.kind == 0 ? k.a : k.b;
    const int64_t sort = e && e->sort ? *e->sort : id;
    if (k.kind == 0) return {0, 0, sort, id, 0};
    return {1, k.a, sort, id, k.kind == 2 ? 0 : 1};
  }
  // "thread 12345 (python3)" as recorded, else "thread <tid>" (signed: Kineto's ids may be negative);
  // "stream 7 (device 0)"; "stream 7 annotations (device 0)".
  std::string label(const TrackKey& k) const {
    const std::string n = name(k);
    if (k.kind == 0) return n.empty() ? "thread " + std::to_string(k.a) : n;
    const std::string stream = n.empty() ? "stream " + std::to_string(k.b) : n;
    return stream + (k.kind == 2 ? " annotations" : "") + " (device " + std::to_string(k.a) + ")";
  }
  std::string process(int64_t rank) const {
    auto it = process_.find(rank);
    return it == process_.end() ? std::string() : it->second;
  }

 private:
  struct Entry {
    std::string name;
    std::optional<int64_t> sort;
  };
  const Entry* find(const TrackKey& k) const {
    const auto key = k.kind == 0 ? std::make_tuple(k.rank, int32_t(rundb::ThreadKind::Thread), int64_t(-1), k.a)
                                 : std::make_tuple(k.rank, int32_t(rundb::ThreadKind::Stream), k.a, k.b);
    auto it = by_key_.find(key);
    return it == by_key_.end() ? nullptr : &it->second;
  }
  std::map<std::tuple<int64_t, int32_t, int64_t, int64_t>, Entry> by_key_;
  std::map<int64_t, std::string> process_;
};

using CountersByRank = std::map<int64_t, std::map<uint32_t, CounterSeries>>;

// The MoE router's load (expert_load) as two counters per rank, one sample per step at the step's
// start (its `steps` row, on rank 0's clock in a traced run; else the earliest rank's): counters
// like the recorded ones, so that an untraced run shows them as well. Returns the ranks it fed.
std::set<int64_t> addExpertLoad(rundb::RunReader& r, const std::vector<rundb::Step>& steps, Names& names,
                                CountersByRank& counters_of) {
  const std::vector<rundb::RankStepLoad> load = rundb::rankStepLoad(r.expertLoad());
  std::set<int64_t> ranks;
  if (load.empty()) return ranks;  // a dense run: no names, no tracks
  constexpr int64_t kEarliest = INT64_MIN;  // in place of a rank: the earliest rank's start of the step
  std::map<std::pair<int64_t, int64_t>, int64_t> start;  // (rank, step) → start_ns
  for (const rundb::Step& s : steps) {
    start[{s.rank, s.step}] = s.start_ns;
    auto [it, fresh] = start.emplace(std::make_pair(kEarliest, s.step), s.start_ns);
    if (!fresh) it->second = std::min(it->second, s.start_ns);
  }
  const uint32_t imbalance = names.text("moe: imbalance (max/mean)"), dropped = names.text("moe: dropped %");
  for (const rundb::RankStepLoad& l : load) {
    auto at = start.find({l.rank, l.step});
    if (at == start.end()) at = start.find({kEarliest, l.step});
    if (at == start.end()) continue;  // no step row to draw it at
    for (auto [name, value] : {std::pair{imbalance, l.imbalance}, std::pair{dropped, l.dropped_pct}}) {
      CounterSeries& c = counters_of[l.rank][name];
      c.ts.push_back(at->second);
      c.values.push_back(value);
    }
    ranks.insert(l.rank);
  }
  return ranks;
}

}  // namespace

Trace loadTrace(const std::string& path, LoadProgress* progress, int threads, bool summary) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    rundb::RunReader reader(path);  // throws UserError for what is not a run database
    Trace trace;
    trace.path = path;
    trace.schema_version = reader.schemaVersion();
    trace.meta = reader.meta();
    trace.steps = reader.steps();
    trace.drops = reader.drops();
    std::map<int64_t, rundb::RankInfo> infos;
    for (const auto& info : reader.ranks()) infos[info.rank] = info;

    Names names(reader);
    std::array<uint32_t, 12> copy_names{};
    static const char* kCopy[] = {"memcpy", "memcpy HtoD", "memcpy DtoH", "memcpy HtoA", "memcpy AtoH", "memcpy AtoA",
                                  "memcpy AtoD", "memcpy DtoA", "memcpy DtoD", "memcpy HtoH", "memcpy PtoP", "memset"};
    for (int i = 0; i < 12; ++i) copy_names[size_t(i)] = names.text(kCopy[i]);

    // Chunks of rowids over every span table; workers take them in turn, each with its own reader.
    struct Chunk {
      int table;
      int64_t begin, end;
    };
    std::vector<Chunk> chunks;
    Counting count{progress};
    for (int t = 0; t < int(std::size(kSpanTables)); ++t) {
      const int64_t bound = reader.rowBound(kSpanTables[t]);
      count.total += bound;
      for (int64_t b = 0; b <= bound; b += kChunkRows) chunks.push_back({t, b, std::min(bound + 1, b + kChunkRows)});
    }
    const int n = threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()));
    std::vector<PendingMap> per_worker(static_cast<size_t>(n));
    std::vector<std::unique_ptr<rundb::RunReader>> readers(static_cast<size_t>(n));
    std::vector<std::vector<rundb::SpanRow>> rows(static_cast<size_t>(n));
    parallelFor(chunks.size(), n, [&](size_t i, int w) {
      auto& rd = readers[size_t(w)];
      if (w > 0 && !rd) rd = std::make_unique<rundb::RunReader>(path);
      const Chunk& c = chunks[i];
      loadChunk(w > 0 ? *rd : reader, names, c.table, c.begin, c.end, per_worker[size_t(w)], copy_names, rows[size_t(w)]);
      count.add(c.end - c.begin);
    });

    auto phase = [&](const char* what) {
      if (std::getenv("TRAINSCOPE_VIEWER_TIMING"))
        std::fprintf(stderr, "[load] %s at %.3f s\n", what, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    };
    phase("spans read");
    // Gather each track's parts (in worker order; buildLanes sorts) and build lanes in parallel.
    std::map<TrackKey, std::vector<Pending*>> parts;
    for (auto& m : per_worker)
      for (auto& [k, p] : m) parts[k].push_back(&p);
    const ThreadNames thread_names(reader);
    std::vector<std::pair<TrackKey, Track>> built;
    for (auto& [k, v] : parts) built.push_back({k, Track{}});
    parallelFor(built.size(), n, [&](size_t i, int) {
      const TrackKey& k = built[i].first;
      Track& t = built[i].second;
      std::vector<Event> ev;
      std::vector<int64_t> corr;
      bool any_corr = false;
      for (Pending* p : parts[k]) {
        ev.insert(ev.end(), p->ev.begin(), p->ev.end());
        corr.insert(corr.end(), p->corr.begin(), p->corr.end());
        any_corr |= p->any_corr;
        *p = Pending{};  // free as we go
      }
      t.kind = k.kind == 0 ? TrackKind::Thread : k.kind == 1 ? TrackKind::Stream : TrackKind::Annotations;
      t.rank = k.rank;
      t.id = k.kind == 0 ? k.a : k.b;
      t.device = k.kind == 0 ? -1 : k.a;
      t.name = thread_names.name(k);
      t.label = thread_names.label(k);
      if (!any_corr) corr.clear();
      buildLanes(t, std::move(ev), std::move(corr));
    });
    per_worker.clear();
    readers.clear();
    phase("lanes built");

    // Ranks: steps, the ranks table and whatever the events name; for a native run also every rank
    // below the world size (one whose events were lost shows empty). Not for an import: its
    // world_size counts the files, and its ranks are what the files said (one file of rank 3 is rank
    // 3 alone, not ranks 0 to 3).
    std::set<int64_t> rank_set;
    const int64_t world = reader.worldSize();
    if (reader.meta("source") != "import")
      for (int64_t r = 0; r < std::min<int64_t>(world, 1 << 16); ++r) rank_set.insert(r);
    for (const auto& s : trace.steps) rank_set.insert(s.rank);
    for (const auto& [r, info] : infos) rank_set.insert(r);
    for (const auto& [k, t] : built) rank_set.insert(k.rank);

    // Steps, collectives and counters are read once for every rank and walked in rank order: a
    // query or a scan per rank is O(ranks × rows), which a 50,000-rank file turns into minutes.
    // trace.steps is sorted by (rank, step) and collectives() by (rank, start); counters are
    // bucketed by rank and name in one pass over the table.
    const std::vector<rundb::Collective> collectives = reader.collectives();
    std::vector<EventRef> ref_of_row(collectives.size(), EventRef{kNoTrack, 0, 0});  // where each row is drawn
    CountersByRank counters_of;
    reader.forEach<rundb::Counter>([&](const rundb::Counter& x) {
      CounterSeries& c = counters_of[x.rank][names.id(reader, x.name)];
      c.ts.push_back(x.ts_ns);
      c.values.push_back(x.value);
    });
    for (int64_t r : addExpertLoad(reader, trace.steps, names, counters_of)) rank_set.insert(r);
    size_t b = 0, si = 0, ci = 0;
    for (int64_t rank : rank_set) {
      RankGroup g;
      g.rank = rank;
      if (auto it = infos.find(rank); it != infos.end()) g.host = it->second.host, g.device = it->second.device;
      g.process = thread_names.process(rank);
      auto add = [&](Track&& t) {
        g.tracks.push_back(trace.tracks.size());
        trace.tracks.push_back(std::move(t));
      };
      auto addEvents = [&](TrackKind kind, const char* label, std::vector<Event> ev) {  // a track unless empty
        if (ev.empty()) return;
        Track t;
        t.kind = kind;
        t.rank = rank;
        t.label = label;
        buildLanes(t, std::move(ev));
        add(std::move(t));
      };
      // Steps.
      std::vector<Event> steps;
      for (; si < trace.steps.size() && trace.steps[si].rank < rank; ++si) {}
      for (; si < trace.steps.size() && trace.steps[si].rank == rank; ++si) {
        const rundb::Step& s = trace.steps[si];
        steps.push_back({s.start_ns, s.start_ns + s.step_time_ns, names.text("step " + std::to_string(s.step)), EventKind::Step});
      }
      addEvents(TrackKind::Steps, "steps", std::move(steps));
      // Threads, then streams with their annotations (`built` is ordered by rank), in display order.
      const size_t first_built = b;
      for (; b < built.size() && built[b].first.rank == rank; ++b) {}
      std::stable_sort(built.begin() + ptrdiff_t(first_built), built.begin() + ptrdiff_t(b),
                       [&](const auto& x, const auto& y) { return thread_names.order(x.first) < thread_names.order(y.first); });
      for (size_t i = first_built; i < b; ++i) add(std::move(built[i].second));
      // Collectives, one track: "all_reduce (dp)". Row ids ride through the lane sort (comm.h).
      std::vector<Event> coll;
      std::vector<int64_t> row_ids;
      for (; ci < collectives.size() && collectives[ci].rank < rank; ++ci) {}
      for (; ci < collectives.size() && collectives[ci].rank == rank; ++ci) {
        const rundb::Collective& c = collectives[ci];
        coll.push_back({c.start_ns, c.end_ns, names.text(c.op + " (" + c.group + ")"), EventKind::Collective});
        row_ids.push_back(int64_t(ci));
      }
      if (!coll.empty()) {
        Track t;
        t.kind = TrackKind::Collectives;
        t.rank = rank;
        t.label = "collectives";
        buildLanes(t, std::move(coll), std::move(row_ids));
        takeCollectiveRows(uint32_t(trace.tracks.size()), t, ref_of_row);
        add(std::move(t));
      }
      // Counters, a track per name, the memory counter first.
      std::vector<Track> counter_tracks;
      if (auto found = counters_of.find(rank); found != counters_of.end()) {
        for (auto& [name, c] : found->second) {
          Track t;
          t.kind = TrackKind::Counter;
          t.rank = rank;
          t.label = names[name] == rundb::names::kMemoryCounter ? "memory" : names[name];
          t.counter = std::move(c);
          sortByTime(t.counter);
          buildPyramid(t.counter);
          if (t.label == "memory") counter_tracks.insert(counter_tracks.begin(), std::move(t));
          else counter_tracks.push_back(std::move(t));
        }
        counters_of.erase(found);
      }
      for (auto& t : counter_tracks) add(std::move(t));
      trace.ranks.push_back(std::move(g));
    }
    trace.names = names.take();
    phase("ranks laid out");
    linkTrace(trace, collectives, ref_of_row);
    phase("collectives linked");

    // The span and the count.
    bool any = false;
    auto widen = [&](int64_t a, int64_t e) {
      if (!any) trace.begin = a, trace.end = e, any = true;
      trace.begin = std::min(trace.begin, a);
      trace.end = std::max(trace.end, e);
    };
    for (const auto& t : trace.tracks) {
      trace.event_count += t.events();
      for (const auto& l : t.lanes)
        if (!l.events.empty()) widen(l.events.front().start, l.events.back().end);  // lanes never overlap
      if (!t.counter.ts.empty()) widen(t.counter.ts.front(), t.counter.ts.back());
    }
    if (!any) trace.begin = 0, trace.end = 1'000'000;
    if (trace.end <= trace.begin) trace.end = trace.begin + 1000;

    phase("tracks laid out");
    if (summary && !trace.steps.empty()) trace.summary = rundb::summarize(reader);  // the numbers `report` prints
    phase("summary");
    if (progress) progress->fraction.store(1.0);
    trace.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return trace;
  } catch (const UserError&) {
    throw;
  } catch (const Cancelled&) {
    throw;
  } catch (const std::exception& e) {
    // A file that opened as a run database and failed while being read: damaged or truncated.
    throw UserError("database", path + " could not be read to the end (" + e.what() + ")",
                    "the file is damaged or truncated; trace or import it again");
  }
}

std::optional<rundb::RunSummary> loadSummary(const std::string& path, const std::atomic<bool>* cancel) {
  try {
    if (cancel && cancel->load()) throw Cancelled();
    rundb::RunReader reader(path);
    reader.interruptWhen(cancel);
    if (reader.stepRanks().empty()) return std::nullopt;
    return rundb::summarize(reader);
  } catch (const Cancelled&) {
    throw;
  } catch (const UserError&) {
    if (cancel && cancel->load()) throw Cancelled();  // an interrupted query, reported as a read error
    throw;
  } catch (const std::exception& e) {
    if (cancel && cancel->load()) throw Cancelled();
    throw UserError("database", path + " could not be read to the end (" + e.what() + ")",
                    "the file is damaged or truncated; trace or import it again");
  }
}

}  // namespace trainscope::viewer
