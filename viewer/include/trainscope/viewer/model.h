// trainscope/viewer/model.h — the viewer's data model: a run database loaded into per-track sorted
// arrays that a frame can draw in time proportional to what is on screen.
//
// What it is: loading (through rundb::RunReader, on any thread, with progress and cancel), the
// track layout (a group per rank: steps, one flame per CPU thread, one row per device stream with
// its GPU annotations above it, collectives, counters — the recorded ones, then a MoE run's
// "moe: imbalance (max/mean)" and "moe: dropped %" from expert_load, one sample per step at its
// start; threads and streams named and ordered as the profiler named them), and the per-lane level-of-detail pyramids (lod.h). Queries — hit testing,
// search, range totals, statistics — are in query.h and stats.h.
// What it is not: anything that draws. No ImGui, no OpenGL here; the app (viewer/app/) only draws
// what these types say.
//
// Memory: an Event is 24 bytes; a lane adds its correlation ids (8 bytes per event, kernel, copy
// and API lanes only) and its LOD levels (Trace::bytes() counts all of it).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trainscope/rundb/report.h"
#include "trainscope/rundb/rows.h"
#include "trainscope/rundb/summary.h"

namespace trainscope::viewer {

// What an event is; decides its colour and which statistics it feeds.
enum class EventKind : uint8_t { Step, Range, HostOp, ApiCall, Kernel, CommKernel, Memcpy, Memset, Collective };
inline constexpr int kEventKinds = 9;
const char* kindName(EventKind k);

struct Event {
  int64_t start = 0, end = 0;  // ns, rank 0's clock
  uint32_t name = 0;           // index into Trace::names
  EventKind kind = EventKind::Range;
  uint8_t reserved = 0;
  uint16_t extra = 0;          // memcpy: MemcpyKind
  int64_t duration() const { return end - start; }
};
static_assert(sizeof(Event) == 24, "Event is the unit of the viewer's memory budget");

// A run of events [first, last) of one lane folded into one block at some threshold (lod.h).
struct LodItem {
  int64_t start = 0, end = 0;
  uint32_t first = 0, last = 0;
};

struct LodLevel {
  int64_t threshold = 0;         // ns: events narrower than this, closer than this, are folded
  std::vector<LodItem> items;
};

// One row of a track: events sorted by start and never overlapping each other.
struct Lane {
  std::vector<Event> events;
  std::vector<int64_t> correlation;  // parallel to events for kernels, copies and API calls; else empty
  std::vector<LodLevel> levels;      // ascending thresholds; only levels that fold at least 2:1
  std::vector<int64_t> busy_prefix;  // [k]: the summed durations of events [0, 16k) (lod.h, busyBetween)
  std::vector<int64_t> comm_prefix;  // the same of its NCCL kernels (CommKernel) alone; empty: it has none
};

// Annotations: the GPU annotations (rundb::GpuAnnotation) of one stream, placed right above it.
enum class TrackKind { Steps, Thread, Stream, Collectives, Counter, Annotations };

// A counter as a step function, with a min/max pyramid for drawing it at any zoom.
struct CounterSeries {
  std::vector<int64_t> ts;
  std::vector<double> values;
  std::vector<std::vector<std::pair<double, double>>> pyramid;  // level k: min/max of blocks of 16^(k+1)
  double max_value = 0;
  double min_value = 0;  // the smallest value (buildPyramid)
};

struct Track {
  TrackKind kind = TrackKind::Thread;
  int64_t rank = 0;
  int64_t id = 0;       // thread id, stream id (streams, annotations)
  int64_t device = -1;  // streams, annotations
  // The row's label: a thread's or a stream's recorded name (the threads table), else its id —
  // "thread 1234", "thread -5", "stream 7 (device 0)", "stream 7 annotations (device 0)",
  // "collectives", "memory".
  std::string label;
  std::string name;     // the name the profiler gave the thread or stream ("" when none)
  std::vector<Lane> lanes;
  CounterSeries counter;  // TrackKind::Counter only
  int64_t events() const;
};

struct RankGroup {
  int64_t rank = 0;
  std::string host, device;
  std::string process;  // the rank's named processes, "python3 (pid 1234)" ("" when none recorded)
  std::vector<size_t> tracks;  // indices into Trace::tracks, in display order
};

// Where one event lives.
struct EventRef {
  uint32_t track = 0, lane = 0, index = 0;
  bool operator==(const EventRef& o) const { return track == o.track && lane == o.lane && index == o.index; }
  bool operator!=(const EventRef& o) const { return !(*this == o); }
};

// Collectives linked across ranks (rundb::linkCollectives; comm.h): one call's copies on its member
// ranks, or a pipeline send and the receive that took its data.
struct CommCall {
  rundb::LinkedCall link;         // first and last arrival, skew, p2p, the receive's end (link.rows: cleared)
  std::vector<EventRef> members;  // by rank; p2p: {send, recv}
};
struct CommIndex {
  std::optional<rundb::RunLayout> layout;  // meta.config's, when it adds up (rundb::runLayout)
  std::vector<CommCall> calls;
  std::map<uint32_t, std::vector<std::vector<int32_t>>> call_of;  // collectives track → [lane][event] → call (-1: none)
  rundb::CollectiveLinks unlinked;  // the linker's reasons (why, by group) for rows it left unlinked (notLinkedReason)
  const CommCall* callOf(const EventRef& r) const;  // nullptr: not a linked collective
  size_t bytes() const;
};

struct Trace {
  std::string path;
  int schema_version = 0;
  std::map<std::string, std::string> meta;
  std::vector<std::string> names;
  std::vector<Track> tracks;
  std::vector<RankGroup> ranks;
  std::vector<rundb::Step> steps;           // every rank, by (rank, step)
  std::optional<rundb::RunSummary> summary; // none when the file has no steps
  std::vector<rundb::Drop> drops;
  std::vector<rundb::Checkpoint> checkpoints;  // `run --save`: step, seconds, bytes (none without it)
  CommIndex comm;                           // collectives linked across ranks
  int64_t begin = 0, end = 0;               // the span of everything in the file (ns)
  int64_t event_count = 0;
  double load_seconds = 0;

  const Event& event(const EventRef& r) const { return tracks[r.track].lanes[r.lane].events[r.index]; }
  const std::string& name(const EventRef& r) const { return names[event(r).name]; }
  int64_t correlation(const EventRef& r) const;  // -1 when none
  size_t bytes() const;                          // memory the model holds
  // Start time of `step` on `rank` (the earliest rank when rank < 0); nullopt when absent.
  std::optional<int64_t> stepStart(int64_t step, int64_t rank = -1) const;
  std::optional<std::pair<int64_t, int64_t>> stepWindow(int64_t step, int64_t rank = -1) const;
};

struct LoadProgress {
  std::atomic<double> fraction{0};   // 0..1
  std::atomic<bool> cancel{false};   // set by the caller to stop loading (load throws Cancelled)
};

struct Cancelled : std::exception {
  const char* what() const noexcept override { return "loading cancelled"; }
};

// Loads a run database. Throws UserError naming the file for what RunReader refuses (missing, not a
// run database, damaged, unknown schema version). An empty trace loads (event_count 0).
// threads: readers working in parallel on chunks of the tables (0: the machine's cores).
// The text beside a counter row. The memory row names the rank's peak as Summary and `report` define
// it (the step rows' allocator peak over the counted steps, rundb::summarizeSteps) with the sampled
// curve's max beside it, so that the two never disagree silently; other counters: their max.
std::string counterLabel(const Trace& t, const Track& counter);

// summary: also compute Trace::summary (a second pass over the events; the app does it after the
// timeline is up, with loadSummary).
Trace loadTrace(const std::string& path, LoadProgress* progress = nullptr, int threads = 0, bool summary = true);
// The run summary (nullopt: no steps). cancel: once true, its queries stop and it throws Cancelled.
// loaded: the file's trace, already loaded — its lanes give the kernels, copies, sets and launches
// the summary would otherwise read from the file a second time (rundb::DeviceWork).
std::optional<rundb::RunSummary> loadSummary(const std::string& path, const std::atomic<bool>* cancel = nullptr,
                                             const Trace* loaded = nullptr);

// Builds the lanes and levels of one track from unsorted events (used by loadTrace and by tests).
// Events are sorted by (start, longest first); each goes to its nesting depth, or the next lane
// where it does not overlap.
void buildLanes(Track& t, std::vector<Event> events, std::vector<int64_t> correlation = {});

}  // namespace trainscope::viewer
