// model_internal.h — what loadTrace's steps share (model.cpp, model_load.cpp, model_counters.cpp);
// not part of the viewer's interface.
//
// The loader reads in three steps: the span tables into one track per CPU thread and device stream
// (model_load.cpp), the counters incl. the MoE router's load (model_counters.cpp), then lays the
// ranks out and links the collectives (model.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/report.h"
#include "trainscope/viewer/model.h"

namespace trainscope::viewer::loader {

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

// Names: the file's dense string table first, then names the loader makes (copies, sets, steps,
// collectives, and strings whose ids lie past the dense range). Inline: id() and comm() run per event.
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

// The threads table of a file: names and order by (rank, kind, device, tid), and the rows' labels.
// A file without the table (schema version 3 and older) has no names: ids label the rows.
class ThreadNames {
 public:
  explicit ThreadNames(rundb::RunReader& r);
  // The name recorded for a built track's thread or stream ("" when none).
  std::string name(const TrackKey& k) const;
  // Threads first, then each device's streams, each stream's annotations right above it; within
  // them the profiler's sort index, else the id (Perfetto's order).
  std::tuple<int, int64_t, int64_t, int64_t, int> order(const TrackKey& k) const;
  // "thread 12345 (python3)" as recorded, else "thread <tid>" (signed: Kineto's ids may be negative);
  // "stream 7 (device 0)"; "stream 7 annotations (device 0)".
  std::string label(const TrackKey& k) const;
  std::string process(int64_t rank) const;  // "python3 (pid 1234)", "" when none

 private:
  struct Entry {
    std::string name;
    std::optional<int64_t> sort;
  };
  const Entry* find(const TrackKey& k) const;
  std::map<std::tuple<int64_t, int32_t, int64_t, int64_t>, Entry> by_key_;
  std::map<int64_t, std::string> process_;
};

// An event and its correlation id (-1 where its table has none), as the loader reads and sorts them.
struct CorrelatedEvent {
  Event e;
  int64_t corr;
};
// A track's lanes and levels out of its events in any order (sorted runs — a table's rows in storage
// order — are merged, not sorted); corr: keep the correlation ids in the lanes. model.cpp.
void buildLanesOf(Track& t, std::vector<CorrelatedEvent> items, bool corr);

// A track's events as the workers read them: one Pending per chunk of a table and track, in storage
// order (the chunks, taken in order, give each track a few sorted runs: one per table).
struct Pending {
  std::vector<CorrelatedEvent> ev;
  bool any_corr = false;
};
using PendingMap = std::unordered_map<TrackKey, Pending, TrackKeyHash>;

// A thread's or a stream's track, built (lanes and levels), ordered by key: by rank first.
using BuiltTracks = std::vector<std::pair<TrackKey, Track>>;

// model_load.cpp: every span table read in chunks by `workers` threads, each with its own reader
// (worker 0 uses `reader`); a PendingMap per chunk, returned in storage order (by table, then
// rowid). progress: the fraction up to 0.9, and cancel (throws Cancelled).
std::vector<PendingMap> readSpans(rundb::RunReader& reader, const std::string& path, Names& names,
                                  LoadProgress* progress, int workers);
// One track per thread, stream and stream's annotations out of the chunks' parts (freed as they are
// taken), named by the threads table, their lanes built in parallel.
BuiltTracks buildThreadTracks(std::vector<PendingMap>& per_chunk, const ThreadNames& thread_names, int workers);

// model_counters.cpp: counters bucketed by rank and name, samples in storage order.
using CountersByRank = std::map<int64_t, std::map<uint32_t, CounterSeries>>;
CountersByRank readCounters(rundb::RunReader& reader, Names& names);
// The MoE router's load (expert_load) as two counters per rank, one sample per step; returns the
// ranks it fed.
std::set<int64_t> addExpertLoad(rundb::RunReader& r, const std::vector<rundb::Step>& steps, Names& names,
                                CountersByRank& counters_of);
// A rank's counter tracks (taken out of counters_of), a track per name, the memory counter first.
std::vector<Track> takeCounterTracks(int64_t rank, CountersByRank& counters_of, const Names& names);

}  // namespace trainscope::viewer::loader
