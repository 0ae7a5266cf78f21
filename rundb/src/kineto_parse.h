// kineto_parse.h — a PyTorch profiler (Kineto) Chrome trace read into compact event records, for
// import_kineto.cpp (internal to rundb). Reading is kept apart from writing: the parser knows JSON
// and Kineto's fields, the importer knows the run database's rows.
#pragma once

#include <cstdint>
#include <istream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace trainscope::rundb::importers::kineto {

// What an event is, from its "cat" (Other: kept only for its communication args).
enum class Cat : uint8_t { Other, Op, Annotation, GpuAnnotation, Kernel, Runtime, Driver, Memcpy, Memset };

constexpr uint32_t kNone = UINT32_MAX;

struct CommArgs {
  uint32_t op = kNone, dtype = kNone, group = kNone;
  int64_t in = -1, out = -1, group_size = -1;
};

struct Event {
  int64_t ts = 0, dur = 0;  // ns on the file's clock (before baseTimeNanoseconds)
  int64_t tid = 0, correlation = -1, device = -1, stream = -1, seq = -1, bytes = 0;  // device -1: none given
  uint32_t name = kNone, shapes = kNone;
  uint32_t input_type = kNone;  // args."Input type"[0] ("float", "c10::BFloat16"): a Gloo annotation's dtype
  // A [memory] instant event's args (PyTorch's profile_memory): "Total Allocated" (-1: not given) and
  // "Device Type" (c10::DeviceType: 0 CPU, 1 CUDA; -1: not given); its "Bytes" (negative for a free)
  // is `bytes` and its "Device Id" `device`.
  int64_t total_allocated = -1;
  int32_t device_type = -1;
  int32_t comm = -1;        // into Parsed::comms
  int32_t dims = -1;        // into Parsed::dims
  Cat cat = Cat::Other;
  bool complete = false, has_ts = false, has_dur = false, bad_time = false;
  bool unfinished = false;  // args "finished": false: the profiler stopped inside it; its end is the stop's
  int64_t deviceId() const { return device >= 0 ? device : 0; }
};

// A metadata event (ph "M") that names or orders a thread (a stream on a GPU pid) or a process.
enum class MetaKind : uint8_t { ThreadName, ThreadSort, ProcessName, ProcessSort };
struct Meta {
  MetaKind kind;
  int64_t pid, tid;
  std::string text;                // args.name
  std::optional<int64_t> sort;     // args.sort_index
};

struct Dims {
  int32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  int32_t registers = 0, shared = 0;
};

// One allocation or free the profiler recorded with profile_memory=True (a "[memory]" instant event,
// ph "i"): kept apart from the events, which are spans.
struct MemoryEvent {
  int64_t ts = 0;                // ns on the file's clock
  int64_t total_allocated = -1;  // the allocator's bytes after it; -1: not given
  int64_t bytes = 0;             // allocated (+) or freed (-)
  int64_t device = -1;           // Device Id (-1: the CPU)
  int32_t device_type = 0;       // c10::DeviceType (0 CPU, 1 CUDA, …)
  bool bad_time = false;
};

struct Parsed {
  std::vector<Event> events;
  std::vector<MemoryEvent> memory;  // in file order
  std::vector<CommArgs> comms;
  std::vector<Dims> dims;
  std::vector<std::string> names;
  std::unordered_map<std::string, uint32_t> ids;
  std::vector<Meta> meta;
  // Which pids hold GPU rows and which CPU events (the pid is not kept per event): a GPU event's
  // (pid, tid) → the (device, stream) it is stored under.
  std::map<std::pair<int64_t, int64_t>, std::pair<int64_t, int64_t>> stream_of;
  std::set<int64_t> gpu_pids, cpu_pids;
  bool has_trace_events = false;
  bool trainscope_export = false;  // otherData.exporter "trainscope", or events of our "step" category
  // Values of the wrong type in the events read ("args.correlation: a string" → how many): each is
  // left out (the field reads as absent), never coerced (1.5 → 1, 2^70 → INT64_MAX, "7" → none).
  std::map<std::string, int64_t> refused;
  // Device events of categories this reader does not read (category → how many): left out, counted.
  std::map<std::string, int64_t> ignored_device;
  std::optional<int64_t> rank, base;
  std::optional<int64_t> world_size;  // distributedInfo.world_size: a Gloo annotation's group size
  std::vector<std::string> gpus;  // deviceProperties[].name: the GPU models the trace was taken on
  uint32_t intern(const std::string& s) {
    auto [it, fresh] = ids.emplace(s, uint32_t(names.size()));
    if (fresh) names.push_back(s);
    return it->second;
  }
};

// Streams `in` (nlohmann's SAX interface) into a Parsed. UserError naming `path` for JSON that does not
// parse or a field of the wrong type.
Parsed parseKineto(std::istream& in, const std::string& path);

}  // namespace trainscope::rundb::importers::kineto
