// model.cpp — loading a run database into tracks and lanes (see model.h): the trace's own
// methods, a track's lanes, and loadTrace as its steps — the threads' and streams' tracks
// (model_load.cpp), the counters (model_counters.cpp), then each rank's group of tracks here.
#include "trainscope/viewer/model.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <thread>

#include "model_internal.h"
#include "sort_runs.h"
#include "trainscope/common/error.h"
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
           l.busy_prefix.capacity() * sizeof(int64_t) + l.comm_prefix.capacity() * sizeof(int64_t);
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

namespace {

// Sorted by start, longest first (parents before children). A lambda, so that std::sort inlines it.
const auto startsBefore = [](const Event& x, const Event& y) {
  return x.start != y.start ? x.start < y.start : x.end > y.end;
};

// Each of n sorted events' lane (at(i): the i-th event), and in `count` each lane's size. An event
// goes one lane below the events enclosing it; one that partly overlaps an event there (an async
// range, two kernels on one stream) goes to the next lane that is free.
template <class At>
std::vector<uint32_t> assignLanes(size_t n, At at, std::vector<size_t>& count) {
  std::vector<uint32_t> lane_of(n);
  std::vector<int64_t> open;      // ends of the enclosing events (a stack)
  std::vector<int64_t> lane_end;  // last end in each lane
  for (size_t i = 0; i < n; ++i) {
    const Event& e = at(i);
    const int64_t end = std::max(e.end, e.start);
    while (!open.empty() && open.back() <= e.start) open.pop_back();
    size_t d = open.size();
    while (d < lane_end.size() && lane_end[d] > e.start) ++d;
    if (d >= lane_end.size()) lane_end.resize(d + 1, INT64_MIN), count.resize(d + 1, 0);
    lane_end[d] = end;
    if (open.empty() || end <= open.back()) open.push_back(end);
    lane_of[i] = uint32_t(d);
    ++count[d];
  }
  return lane_of;
}

// t's lanes, each reserved to its exact size (no regrowth while they fill).
void reserveLanes(Track& t, const std::vector<size_t>& count, bool corr) {
  t.lanes.clear();
  t.lanes.resize(count.size());
  for (size_t d = 0; d < count.size(); ++d) {
    t.lanes[d].events.reserve(count[d]);
    if (corr) t.lanes[d].correlation.reserve(count[d]);
  }
}

}  // namespace

namespace loader {

void buildLanesOf(Track& t, std::vector<CorrelatedEvent> items, bool corr) {
  // A track arrives as a few sorted runs (one per table, in storage order): merged, not sorted.
  sortRuns(items, [](const CorrelatedEvent& a, const CorrelatedEvent& b) { return startsBefore(a.e, b.e); });
  // Pass 1: each event's lane. Pass 2: fill the lanes, in order.
  std::vector<size_t> count;
  const std::vector<uint32_t> lane_of = assignLanes(items.size(), [&](size_t i) -> const Event& { return items[i].e; }, count);
  reserveLanes(t, count, corr);
  for (size_t i = 0; i < items.size(); ++i) {
    Lane& lane = t.lanes[lane_of[i]];
    Event e = items[i].e;
    if (e.end < e.start) e.end = e.start;
    lane.events.push_back(e);
    if (corr) lane.correlation.push_back(items[i].corr);
  }
  for (auto& lane : t.lanes) buildLevels(lane);
}

}  // namespace loader

void buildLanes(Track& t, std::vector<Event> events, std::vector<int64_t> correlation) {
  const bool corr = !correlation.empty();
  std::vector<loader::CorrelatedEvent> items(events.size());
  for (size_t i = 0; i < events.size(); ++i) items[i] = {events[i], corr ? correlation[i] : -1};
  events = {}, correlation = {};
  loader::buildLanesOf(t, std::move(items), corr);
}

namespace {

using loader::BuiltTracks;
using loader::CountersByRank;
using loader::Names;
using loader::ThreadNames;

// Lays the ranks out in rank order, each a group of tracks: steps, threads, then streams with
// their annotations, collectives, counters. Steps, collectives and counters are read once for every
// rank and walked in rank order: a query or a scan per rank is O(ranks × rows), which a 50,000-rank
// file turns into minutes. trace.steps is sorted by (rank, step), collectives() by (rank, start),
// `built` by rank, so each is a cursor that only moves forward.
class RankLayout {
 public:
  RankLayout(Trace& trace, Names& names, const ThreadNames& thread_names, BuiltTracks& built,
             const std::vector<rundb::Collective>& collectives, CountersByRank& counters_of)
      : trace_(trace), names_(names), thread_names_(thread_names), built_(built), collectives_(collectives),
        counters_of_(counters_of), ref_of_row_(collectives.size(), EventRef{kNoTrack, 0, 0}) {}

  void add(int64_t rank, const std::map<int64_t, rundb::RankInfo>& infos) {
    RankGroup g;
    g.rank = rank;
    if (auto it = infos.find(rank); it != infos.end()) g.host = it->second.host, g.device = it->second.device;
    g.process = thread_names_.process(rank);
    addSteps(g);
    addThreads(g);
    addCollectives(g);
    for (auto& t : loader::takeCounterTracks(rank, counters_of_, names_)) addTrack(g, std::move(t));
    trace_.ranks.push_back(std::move(g));
  }
  // Where each collectives row is drawn (takeCollectiveRows), for linkTrace.
  const std::vector<EventRef>& refOfRow() const { return ref_of_row_; }

 private:
  void addTrack(RankGroup& g, Track&& t) {
    g.tracks.push_back(trace_.tracks.size());
    trace_.tracks.push_back(std::move(t));
  }
  // Steps, one track ("step 3"); none when the rank has no steps.
  void addSteps(RankGroup& g) {
    std::vector<Event> steps;
    for (; step_ < trace_.steps.size() && trace_.steps[step_].rank < g.rank; ++step_) {}
    for (; step_ < trace_.steps.size() && trace_.steps[step_].rank == g.rank; ++step_) {
      const rundb::Step& s = trace_.steps[step_];
      steps.push_back({s.start_ns, s.start_ns + s.step_time_ns, names_.text("step " + std::to_string(s.step)),
                       EventKind::Step});
    }
    if (steps.empty()) return;
    Track t;
    t.kind = TrackKind::Steps;
    t.rank = g.rank;
    t.label = "steps";
    buildLanes(t, std::move(steps));
    addTrack(g, std::move(t));
  }
  // Threads, then streams with their annotations, in display order (ThreadNames::order).
  void addThreads(RankGroup& g) {
    const size_t first = built_at_;
    for (; built_at_ < built_.size() && built_[built_at_].first.rank == g.rank; ++built_at_) {}
    std::stable_sort(built_.begin() + ptrdiff_t(first), built_.begin() + ptrdiff_t(built_at_),
                     [&](const auto& x, const auto& y) { return thread_names_.order(x.first) < thread_names_.order(y.first); });
    for (size_t i = first; i < built_at_; ++i) addTrack(g, std::move(built_[i].second));
  }
  // Collectives, one track: "all_reduce (dp)"; a call the trace's end cut (rundb::Collective::cut)
  // "all_reduce (dp, cut)", so that the statistics never add its bound to the others' times. Row ids
  // ride through the lane sort (comm.h).
  void addCollectives(RankGroup& g) {
    std::vector<Event> coll;
    std::vector<int64_t> row_ids;
    for (; collective_ < collectives_.size() && collectives_[collective_].rank < g.rank; ++collective_) {}
    for (; collective_ < collectives_.size() && collectives_[collective_].rank == g.rank; ++collective_) {
      const rundb::Collective& c = collectives_[collective_];
      coll.push_back({c.start_ns, c.end_ns, names_.text(c.op + " (" + c.group + (c.cut ? ", cut" : "") + ")"),
                      EventKind::Collective});
      row_ids.push_back(int64_t(collective_));
    }
    if (coll.empty()) return;
    Track t;
    t.kind = TrackKind::Collectives;
    t.rank = g.rank;
    t.label = "collectives";
    buildLanes(t, std::move(coll), std::move(row_ids));
    takeCollectiveRows(uint32_t(trace_.tracks.size()), t, ref_of_row_);
    addTrack(g, std::move(t));
  }

  Trace& trace_;
  Names& names_;
  const ThreadNames& thread_names_;
  BuiltTracks& built_;
  const std::vector<rundb::Collective>& collectives_;
  CountersByRank& counters_of_;
  std::vector<EventRef> ref_of_row_;
  size_t step_ = 0, built_at_ = 0, collective_ = 0;  // the first row of a rank not laid out yet
};

// Ranks: steps, the ranks table and whatever the events name; for a native run also every rank
// below the world size (one whose events were lost shows empty). Not for an import: its world_size
// counts the files, and its ranks are what the files said (one file of rank 3 is rank 3 alone, not
// ranks 0 to 3).
std::set<int64_t> rankSet(rundb::RunReader& reader, const Trace& trace, const std::map<int64_t, rundb::RankInfo>& infos,
                          const BuiltTracks& built) {
  std::set<int64_t> rank_set;
  const int64_t world = reader.worldSize();
  if (reader.meta("source") != "import")
    for (int64_t r = 0; r < std::min<int64_t>(world, 1 << 16); ++r) rank_set.insert(r);
  for (const auto& s : trace.steps) rank_set.insert(s.rank);
  for (const auto& [r, info] : infos) rank_set.insert(r);
  for (const auto& [k, t] : built) rank_set.insert(k.rank);
  return rank_set;
}

// The span of everything in the trace, and its event count.
void measureSpan(Trace& trace) {
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
}

// The device work of every rank out of a loaded trace's streams and threads (rundb::DeviceWork), in
// lane order; summarize orders it.
std::map<int64_t, rundb::DeviceWork> deviceWork(const Trace& t, const std::atomic<bool>* cancel) {
  std::map<int64_t, rundb::DeviceWork> out;
  for (const Track& tr : t.tracks) {
    if (tr.kind != TrackKind::Stream && tr.kind != TrackKind::Thread) continue;
    if (cancel && cancel->load()) throw Cancelled();
    rundb::DeviceWork& w = out[tr.rank];
    for (const Lane& l : tr.lanes) {
      if (l.correlation.empty() && tr.kind == TrackKind::Thread) continue;  // no launches
      for (size_t i = 0; i < l.events.size(); ++i) {
        const Event& e = l.events[i];
        const int64_t corr = l.correlation.empty() ? -1 : l.correlation[i];
        switch (e.kind) {
          case EventKind::Kernel:
          case EventKind::CommKernel: w.kernels.push_back({{e.start, e.end, corr}, e.kind == EventKind::CommKernel}); break;
          case EventKind::Memcpy: w.memcpy.push_back({e.start, e.end, corr}); break;
          case EventKind::Memset: w.memset.push_back({e.start, e.end, corr}); break;
          case EventKind::ApiCall:
            if (corr >= 0) w.launches.emplace_back(corr, e.start);
            break;
          default: break;
        }
      }
    }
  }
  return out;
}

// A load's clock: TRAINSCOPE_VIEWER_TIMING=1 prints each phase on stderr, seconds since the start.
class Phases {
 public:
  void operator()(const char* what) const {
    if (std::getenv("TRAINSCOPE_VIEWER_TIMING")) std::fprintf(stderr, "[load] %s at %.3f s\n", what, seconds());
  }
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }

 private:
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

// loadTrace, step by step; errors as they come (loadTrace names the file's damage).
Trace readTrace(const std::string& path, LoadProgress* progress, int threads, bool summary, const Phases& phase) {
  rundb::RunReader reader(path);  // throws UserError for what is not a run database
  Trace trace;
  trace.path = path;
  trace.schema_version = reader.schemaVersion();
  trace.meta = reader.meta();
  trace.steps = reader.steps();
  trace.drops = reader.drops();
  trace.checkpoints = reader.checkpoints();
  std::map<int64_t, rundb::RankInfo> infos;
  for (const auto& info : reader.ranks()) infos[info.rank] = info;

  // The threads' and streams' tracks, read and built in parallel.
  Names names(reader);
  const int workers = threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<loader::PendingMap> per_chunk = loader::readSpans(reader, path, names, progress, workers);
  phase("spans read");
  const ThreadNames thread_names(reader);
  BuiltTracks built = loader::buildThreadTracks(per_chunk, thread_names, workers);
  phase("lanes built");

  // Each rank's group: its steps, threads and streams, collectives and counters (the MoE load's too).
  std::set<int64_t> ranks = rankSet(reader, trace, infos, built);
  const std::vector<rundb::Collective> collectives = reader.collectives();
  CountersByRank counters_of = loader::readCounters(reader, names);
  for (int64_t r : loader::addExpertLoad(reader, trace.steps, names, counters_of)) ranks.insert(r);
  RankLayout layout(trace, names, thread_names, built, collectives, counters_of);
  for (int64_t rank : ranks) layout.add(rank, infos);
  trace.names = names.take();
  phase("ranks laid out");
  linkTrace(trace, collectives, layout.refOfRow());
  phase("collectives linked");

  measureSpan(trace);
  phase("tracks laid out");
  // The numbers `report` prints, the device work taken from the lanes just built.
  if (summary && !trace.steps.empty()) trace.summary = rundb::summarize(reader, 1, deviceWork(trace, nullptr));
  phase("summary");
  if (progress) progress->fraction.store(1.0);
  trace.load_seconds = phase.seconds();
  return trace;
}

}  // namespace

Trace loadTrace(const std::string& path, LoadProgress* progress, int threads, bool summary) {
  const Phases phase;
  try {
    return readTrace(path, progress, threads, summary, phase);
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

std::optional<rundb::RunSummary> loadSummary(const std::string& path, const std::atomic<bool>* cancel,
                                             const Trace* loaded) {
  try {
    if (cancel && cancel->load()) throw Cancelled();
    rundb::RunReader reader(path);
    reader.interruptWhen(cancel);
    if (reader.stepRanks().empty()) return std::nullopt;
    if (loaded) return rundb::summarize(reader, 1, deviceWork(*loaded, cancel), cancel);  // its own work stops too
    return rundb::summarize(reader);
  } catch (const Cancelled&) {
    throw;
  } catch (const rundb::SummaryCancelled&) {
    throw Cancelled();
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
