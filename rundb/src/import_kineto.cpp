// import_kineto.cpp — PyTorch profiler (Kineto) Chrome-trace JSON into the run database.
//   cpu_op → host_ops, user_annotation → ranges, gpu_user_annotation → gpu_annotations (on the
//   device stream it was recorded on), kernel → kernels, cuda_runtime/cuda_driver → api_calls,
//   gpu_memcpy → memcpy, gpu_memset → memset (and the PyTorch 1.x names: Operator, Runtime, Kernel,
//   Memcpy, Memset); "ProfilerStep#N" steps; communication records (NCCL kernels' or
//   record_param_comms' args) → collectives; the metadata events (ph "M") thread_name,
//   thread_sort_index, process_name and process_sort_index → threads; profile_memory's "[memory]"
//   allocation and free events → the rank's memory counters and each step's peak_bytes (MemoryTrack).
//
// Reading the JSON is kineto_parse.cpp's (a stream into compact records); this file turns the
// records into rows: each event once, in file order, through RunStore.
#include <algorithm>
#include <cctype>
#include <climits>
#include <map>
#include <tuple>
#include <unordered_map>

#include "import_impl.h"
#include "kineto_parse.h"
#include "trainscope/common/error.h"
#include "trainscope/rundb/range_names.h"
#include "trainscope/rundb/store.h"

namespace trainscope::rundb::importers {
namespace {

using kineto::Cat;
using kineto::CommArgs;
using kineto::Dims;
using kineto::Event;
using kineto::kNone;
using kineto::MemoryEvent;
using kineto::Meta;
using kineto::MetaKind;
using kineto::Parsed;

int32_t memcpyKind(const std::string& name) {
  static const std::pair<const char*, MemcpyKind> kinds[] = {{"HtoD", MemcpyKind::HtoD}, {"DtoH", MemcpyKind::DtoH},
                                                             {"DtoD", MemcpyKind::DtoD}, {"HtoH", MemcpyKind::HtoH},
                                                             {"PtoP", MemcpyKind::PtoP}};
  for (const auto& [k, v] : kinds)
    if (name.find(k) != std::string::npos) return int32_t(v);
  return int32_t(MemcpyKind::Unknown);
}

// c10 ScalarType names as the profiler writes them, in bytes.
int64_t dtypeBytes(const std::string& t) {
  static const std::map<std::string, int64_t> sizes = {
      {"Float", 4}, {"float", 4}, {"Double", 8}, {"Half", 2}, {"BFloat16", 2}, {"Int", 4}, {"Long", 8},
      {"Short", 2}, {"Char", 1},  {"Byte", 1},   {"Bool", 1}, {"Float8_e4m3fn", 1}, {"Float8_e5m2", 1},
      {"Float8_e4m3fnuz", 1}, {"Float8_e5m2fnuz", 1}, {"Float8_e8m0fnu", 1}, {"UInt16", 2}, {"UInt32", 4},
      {"UInt64", 8}, {"ComplexHalf", 4}, {"ComplexFloat", 8}, {"ComplexDouble", 16}};
  auto it = sizes.find(t);
  return it == sizes.end() ? 0 : it->second;
}

// "allreduce", "_allgather_base", "reduce_scatter_tensor_coalesced" … → this schema's op names.
std::string collectiveOp(std::string n) {
  for (char& c : n) c = char(std::tolower(static_cast<unsigned char>(c)));
  auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
  if (has("allreduce") || has("all_reduce")) return "all_reduce";
  if (has("reduce_scatter") || has("reducescatter")) return "reduce_scatter";
  if (has("allgather") || has("all_gather")) return "all_gather";
  if (has("broadcast")) return "broadcast";
  if (has("alltoall") || has("all_to_all")) return "all_to_all";
  if (has("barrier")) return "barrier";
  if (has("send")) return "send";
  if (has("recv")) return "recv";
  if (has("reduce")) return "reduce";
  return n;
}

// A Gloo annotation's element width from its "Input type" ("float", "c10::BFloat16"); 0 unknown.
int64_t glooWidth(std::string t) {
  if (t.rfind("c10::", 0) == 0) t = t.substr(5);
  static const std::map<std::string, std::string> c10 = {
      {"float", "Float"}, {"double", "Double"}, {"long int", "Long"}, {"int64_t", "Long"}, {"int", "Int"},
      {"short int", "Short"}, {"signed char", "Char"}, {"unsigned char", "Byte"}, {"bool", "Bool"},
      {"short unsigned int", "UInt16"}, {"unsigned int", "UInt32"}, {"long unsigned int", "UInt64"},
      {"uint64_t", "UInt64"}, {"uint32_t", "UInt32"}, {"uint16_t", "UInt16"}};
  const auto it = c10.find(t);
  return dtypeBytes(it == c10.end() ? t : it->second);
}

// The elements of the first argument of a kept "Input Dims" ("[[33088]]", "[[4,8],[]]", a c10d op's
// "[[[33088]],[],[]]"): the product of its first innermost list, -1 when there is none or it
// overflows. An empty first list is a 0-d tensor (1 element) when `tensor`, the first argument's
// "Input type" being a tensor's ("float", "TensorList"); otherwise it is an argument the profiler
// gave no shape (c10d::allgather_'s output list: type ""), -1. A scalar all-reduce (DeepSpeed's
// overflow check, a loss average: "[[]]") had been given the size of the call before it.
int64_t firstListElements(const std::string& s, bool tensor) {
  const size_t close = s.find(']'), open = close == std::string::npos ? close : s.rfind('[', close);
  if (open == std::string::npos || close == std::string::npos) return -1;
  int64_t prod = 1;
  bool any = false;
  for (size_t i = open + 1; i < close;) {
    const size_t j = s.find(',', i);
    const std::string dim = s.substr(i, std::min(j, close) - i);
    if (dim.empty() || dim.size() > 18 || dim.find_first_not_of("0123456789") != std::string::npos) return -1;
    const int64_t d = std::stoll(dim);
    if (d != 0 && prod > INT64_MAX / d) return -1;
    prod *= d, any = true;
    i = j == std::string::npos || j > close ? close : j + 1;
  }
  return any ? prod : tensor ? 1 : -1;
}

// The threads table from the metadata events. A (pid, tid) that GPU events use is a stream — named
// for the (device, stream) its kernels are stored under; any other tid of a pid that has no GPU
// events is a CPU thread. A process is named when CPU events of this file ran in it (the GPU's
// "process" is its device, and pid -1 holds Kineto's overhead). Names are trimmed (Kineto writes
// "stream 7 "); an empty one is no name.
template <class Intern>
std::vector<ThreadName> threadNames(const Parsed& p, int64_t rank, Intern intern) {
  if (p.meta.empty()) return {};
  const auto& stream_of = p.stream_of;
  const auto& gpu_pids = p.gpu_pids;
  const auto& cpu_pids = p.cpu_pids;
  std::map<std::tuple<int32_t, int64_t, int64_t>, ThreadName> rows;  // (kind, device, tid)
  for (const Meta& m : p.meta) {
    ThreadName t;
    t.rank = rank;
    if (m.kind == MetaKind::ThreadName || m.kind == MetaKind::ThreadSort) {
      if (auto it = stream_of.find({m.pid, m.tid}); it != stream_of.end())
        t.kind = int32_t(ThreadKind::Stream), t.device = it->second.first, t.tid = it->second.second;
      else if (!gpu_pids.count(m.pid))
        t.kind = int32_t(ThreadKind::Thread), t.tid = m.tid;
      else
        continue;  // a GPU row that holds no event of this file: nothing to name
    } else {
      if (!cpu_pids.count(m.pid) || gpu_pids.count(m.pid)) continue;
      t.kind = int32_t(ThreadKind::Process), t.tid = m.pid;
    }
    ThreadName& row = rows.try_emplace({t.kind, t.device, t.tid}, t).first->second;
    if (m.kind == MetaKind::ThreadSort || m.kind == MetaKind::ProcessSort) {
      if (m.sort) row.sort_index = m.sort;
      continue;
    }
    const size_t b = m.text.find_first_not_of(" \t"), e = m.text.find_last_not_of(" \t");
    if (b != std::string::npos) row.name = intern(m.text.substr(b, e - b + 1));
  }
  std::vector<ThreadName> out;
  for (auto& [key, row] : rows)
    if (row.name != kNoString || row.sort_index) out.push_back(row);
  return out;
}


// profile_memory's allocation events of one file as memory counters (docs/trace-schema.md, counters).
// Each device's level after an event is its "Total Allocated" (the profiler's allocator total), or,
// where a trace gives none, the running sum of its "Bytes" from 0. The rank's own device is the
// accelerator with the most events (the CPU when there is none): its levels are the counter the
// runtime writes (names::kMemoryCounter), and each step's peak_bytes is the most of them in the
// step's window (the level carried into the window included). Other devices keep their events
// under "memory.allocated_bytes cpu" or "… cuda:N". Events whose time leaves int64 are counted as
// dropped.
class MemoryTrack {
 public:
  MemoryTrack(const std::vector<MemoryEvent>& events, int64_t base) {
    std::map<std::pair<int32_t, int64_t>, std::vector<std::pair<int64_t, int64_t>>> by_device;  // (type, id) → (ns, level)
    std::map<std::pair<int32_t, int64_t>, int64_t> running;
    for (const MemoryEvent& m : events) {
      int64_t t = 0;
      if (m.bad_time || __builtin_add_overflow(base, m.ts, &t)) {
        ++dropped_;
        continue;
      }
      const std::pair<int32_t, int64_t> key{m.device_type, m.device_type == 0 ? -1 : m.device};
      int64_t& level = running[key];
      if (m.total_allocated >= 0) level = m.total_allocated;
      else if (__builtin_add_overflow(level, m.bytes, &level)) level = m.bytes < 0 ? INT64_MIN : INT64_MAX;
      by_device[key].emplace_back(t, level);
    }
    const std::pair<int32_t, int64_t>* own = nullptr;
    for (const auto& [key, v] : by_device)
      if (!own || (own->first == 0 && key.first != 0) ||
          ((own->first == 0) == (key.first == 0) && v.size() > by_device[*own].size()))
        own = &key;
    for (auto& [key, v] : by_device) {
      std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      if (&key == own) own_ = v;
      else others_.emplace_back(name(key), std::move(v));
    }
  }

  // The most allocated on the rank's device from start_ns to end_ns (0: no events).
  int64_t peak(int64_t start_ns, int64_t end_ns) const {
    auto it = std::upper_bound(own_.begin(), own_.end(), start_ns, [](int64_t t, const auto& s) { return t < s.first; });
    int64_t most = it == own_.begin() ? 0 : std::prev(it)->second;  // held when the window opened
    for (; it != own_.end() && it->first <= end_ns; ++it) most = std::max(most, it->second);
    return std::max<int64_t>(most, 0);
  }

  int64_t dropped() const { return dropped_; }

  // The counters' rows; returns how many.
  int64_t write(RunStore& store, int64_t rank) const {
    std::vector<Counter> rows;
    auto add = [&](const std::string& counter, const std::vector<std::pair<int64_t, int64_t>>& v) {
      const StringId id = store.intern(counter);
      for (const auto& [t, level] : v) rows.push_back(Counter{t, id, double(level), rank});
    };
    if (!own_.empty()) add(names::kMemoryCounter, own_);
    for (const auto& [counter, v] : others_) add(counter, v);
    if (!rows.empty()) store.put(rows);
    return int64_t(rows.size());
  }

 private:
  static std::string name(const std::pair<int32_t, int64_t>& key) {
    const std::string id = std::to_string(key.second);
    return std::string(names::kMemoryCounter) + " " +
           (key.first == 0 ? std::string("cpu") : key.first == 1 ? "cuda:" + id : "device type " + std::to_string(key.first) + ":" + id);
  }
  std::vector<std::pair<int64_t, int64_t>> own_;
  std::vector<std::pair<std::string, std::vector<std::pair<int64_t, int64_t>>>> others_;
  int64_t dropped_ = 0;
};

// UserError for a parsed file that is not a Kineto trace, or is our own export.
void checkKineto(const Parsed& p, const std::string& path) {
  if (!p.has_trace_events)
    throw UserError("import", path + " has no traceEvents array", "pass a PyTorch profiler (Kineto) trace");
  if (p.trainscope_export)
    throw UserError("import", path + " is a Chrome trace that trainscope exported from a run database: it is for "
                                     "Perfetto, and holds less than the database it came from",
                    "use the run database that `trainscope export --chrome` read (report, view, export)");
}

// Who recorded a parsed file: its distributedInfo.rank, its processes and its span on the run's clock.
TraceOrigin originOf(const Parsed& p, const std::string& path) {
  TraceOrigin o;
  o.rank = p.rank;
  o.pids = p.cpu_pids;
  const int64_t base = p.base.value_or(0);
  for (const Event& e : p.events) {
    int64_t b = 0, en = 0;
    if (e.cat == Cat::Other || e.bad_time || e.dur < 0 || __builtin_add_overflow(base, e.ts, &b) ||
        __builtin_add_overflow(b, e.dur, &en))
      continue;
    o.begin_ns = std::min(o.begin_ns, b), o.end_ns = std::max(o.end_ns, en);
    if ((e.cat == Cat::Annotation || e.cat == Cat::Op) && e.name != kNone)
      if (const int64_t k = stepNumber(p.names[e.name], path); k >= 0) o.steps.insert(k);
  }
  return o;
}

// The rank `rank_of` gives, checked: UserError for a rank out of range.
int64_t checkedRank(int64_t rank, const std::string& path) {
  if (rank < 0 || rank > INT32_MAX)
    throw UserError("import", path + ": distributedInfo.rank " + std::to_string(rank) + " is out of range (0 to 2^31-1)",
                    "check the trace file");
  return rank;
}

// One parsed file written as one rank's rows: each event once, in file order (write), then what
// spans the events (finish). Strings are interned into the store on first use only.
class KinetoWriter {
 public:
  KinetoWriter(RunStore& store, ImportStats& st, Parsed& p, const std::string& path, int64_t rank, StepRows& steps,
               KinetoShared& shared)
      : store_(store), st_(st), p_(p), path_(path), rank_(rank), base_(p.base.value_or(0)),
        unnamed_(p.intern("")),  // before `ids_` is sized: events without a name use it
        ids_(p.names.size(), kNoString), domain_(store.intern("kineto")), step_rows_(steps), shared_(shared),
        memory_(p.memory, base_) {
    // Communication records: the NCCL kernels' args when the kernels carry them (GPU time), else the
    // record_param_comms CPU ops (a CPU job's Gloo collectives, or an older PyTorch).
    // Neither (PyTorch 2.x's CPU traces of a Gloo job): the "gloo:<op>" annotations the Gloo worker
    // threads record around each transfer, their size from args "Input Dims" and "Input type".
    bool op_comms = false;
    for (const Event& e : p.events) {
      kernel_comms_ |= e.cat == Cat::Kernel && e.comm >= 0;
      op_comms |= e.cat == Cat::Op && e.comm >= 0 && e.name != kNone && p.names[e.name] == "record_param_comms";
    }
    gloo_comms_ = !kernel_comms_ && !op_comms;
    st_.device_clocked_collectives |= kernel_comms_;
    if (gloo_comms_) indexGlooCalls();
    // The last time this file recorded as it happened: the latest end of an event the profiler's stop
    // did not cut (a cut event's end is the stop's, not its own).
    for (const Event& e : p.events) {
      int64_t end = 0;
      if (e.cat != Cat::Other && !e.unfinished && !e.bad_time && e.dur >= 0 && !__builtin_add_overflow(e.ts, e.dur, &end))
        last_recorded_ = std::max(last_recorded_, end);
    }
    findStopStub();
  }

  // The step the profiler's stop cut as it began. A loop that calls p.step() at the end of each
  // iteration begins ProfilerStep#N+1 there; when the profile exits (or a schedule's cycle is cut
  // short) right after, that step spans only the time to the stop: no op, annotation or API call of
  // the host starts or ends inside it. It is kept as a range, not as a step (its microseconds were
  // one more step time, pulling the mean and median down).
  void findStopStub() {
    const Event* last = nullptr;
    auto isStep = [&](const Event& e) {
      return (e.cat == Cat::Annotation || e.cat == Cat::Op) && e.name != kNone && stepNumber(p_.names[e.name], path_) >= 0;
    };
    for (const Event& e : p_.events)
      if (isStep(e) && !e.bad_time && e.dur >= 0 && (last == nullptr || e.ts > last->ts)) last = &e;
    if (last == nullptr || last->dur > INT64_MAX - last->ts) return;
    const int64_t k = stepNumber(p_.names[last->name], path_);
    for (const Event& e : p_.events)  // the stop cuts the latest step: a number met again is refused as ever
      if (isStep(e) && &e != last && stepNumber(p_.names[e.name], path_) >= k && e.ts != last->ts) return;
    const int64_t b = last->ts, en = last->ts + last->dur;
    for (const Event& e : p_.events) {
      const bool host = e.cat == Cat::Op || e.cat == Cat::Annotation || e.cat == Cat::Runtime || e.cat == Cat::Driver;
      if (!host || e.bad_time || e.dur < 0 || isStep(e) || e.dur > INT64_MAX - e.ts) continue;
      if ((e.ts >= b && e.ts < en) || (e.ts + e.dur > b && e.ts + e.dur < en)) return;  // work in it
    }
    stub_ts_ = b;
    stub_step_ = k;
  }
  // Whether a ProfilerStep#k event starting at ts is the stub above (its range is kept, not its step).
  bool isStopStub(int64_t k, int64_t ts) {
    if (k != stub_step_ || ts != base_ + stub_ts_) return false;
    st_.stop_stubs[path_] = k;
    return true;
  }

  // For a gloo: annotation without its args (the profiler stopped while a worker thread was still
  // inside it: "finished": false), the size of the c10d::<op> call on the calling thread that issued
  // it, the latest of that op to start before it, and the element width of that op's complete
  // annotations on this rank.
  void indexGlooCalls() {
    for (const Event& e : p_.events) {
      if (e.name == kNone || e.shapes == kNone) continue;
      const std::string& name = p_.names[e.name];
      if (e.cat == Cat::Op && name.rfind("c10d::", 0) == 0) {
        // all-gather's first argument is its output (_allgather_base_, all_gather_into_tensor): the
        // size the bytes rule wants; a list form's output has no shape ("", -1) and is not indexed.
        if (const int64_t n = firstListElements(p_.names[e.shapes], isTensorType(e.input_type)); n > 0)
          calls_[collectiveOp(name.substr(6))].emplace_back(e.ts, n);
      } else if (e.cat == Cat::Annotation && name.rfind("gloo:", 0) == 0 && e.input_type != kNone) {
        if (const int64_t w = glooWidth(p_.names[e.input_type]); w > 0) gloo_width_.emplace(collectiveOp(name.substr(5)), w);
      }
    }
    for (auto& [op, v] : calls_) std::sort(v.begin(), v.end());
  }
  // Whether an event's first "Input type" names a tensor ("float", "TensorList"; not "" or "Scalar").
  bool isTensorType(uint32_t type) const {
    if (type == kNone) return false;
    const std::string& t = p_.names[type];
    return !t.empty() && t != "Scalar" && t != "ScalarList" && t != "GenericList";
  }
  int64_t calledElements(const std::string& op, int64_t ts) const {
    const auto it = calls_.find(op);
    if (it == calls_.end()) return -1;
    const auto& v = it->second;
    auto at = std::upper_bound(v.begin(), v.end(), std::make_pair(ts, INT64_MAX));
    return at == v.begin() ? -1 : std::prev(at)->second;
  }

  void write(const Event& e) {
    int64_t b = 0, en = 0;
    if (e.bad_time || __builtin_add_overflow(base_, e.ts, &b) || __builtin_add_overflow(b, e.dur, &en)) {
      ++dropped_time_;
      return;
    }
    if (e.dur < 0) {
      ++dropped_negative_;
      return;
    }
    const uint32_t n = e.name == kNone ? unnamed_ : e.name;
    const std::string& name = p_.names[n];
    // The trace's extent: a cut event's end is the profiler's stop, not a time it recorded.
    if (e.cat != Cat::Other) t_min_ = std::min(t_min_, b), t_max_ = std::max(t_max_, e.unfinished ? b : en);
    putRow(e, b, en, name, id(n));
    const bool comm_source = kernel_comms_ ? e.cat == Cat::Kernel : (e.cat == Cat::Op && name == "record_param_comms");
    if (e.comm >= 0 && comm_source) putCollective(p_.comms[size_t(e.comm)], b, cutEnd(e, b, en));
    if (gloo_comms_ && e.cat == Cat::Annotation && name.rfind("gloo:", 0) == 0) putGloo(e, name, b, cutEnd(e, b, en));
  }

  // A collective's end: its own, or for one the profiler's stop cut ("finished": false, its end the
  // stop's) the last time the file recorded an event that finished, within [start, the stop]: the
  // call is marked cut (Collective::cut) and counts in bytes, never in time.
  std::pair<int64_t, bool> cutEnd(const Event& e, int64_t b, int64_t en) const {
    if (!e.unfinished) return {en, false};
    int64_t last = 0;
    if (last_recorded_ == INT64_MIN || __builtin_add_overflow(base_, last_recorded_, &last)) return {b, true};
    return {std::clamp(last, b, en), true};
  }

  // The collectives and drop counts (kept for finishKineto: the rank may have more files), a step for
  // a trace without ProfilerStep, the threads and the rank.
  void finish() {
    auto& kept = shared_.collectives[rank_];
    kept.insert(kept.end(), std::make_move_iterator(collectives_.begin()), std::make_move_iterator(collectives_.end()));
    putDrops();
    if (steps_seen_ == 0 && stub_step_ < 0 && t_min_ < t_max_) {  // no ProfilerStep: the whole trace is one step
      steps_seen_ = step_rows_.add(rank_, 0, t_min_, t_max_, memory_.peak(t_min_, t_max_)) ? 1 : 0;
    }
    st_.steps += steps_seen_;
    st_.memory_samples += memory_.write(store_, rank_);
    std::vector<ThreadName> names = threadNames(p_, rank_, [&](const std::string& s) { return store_.intern(s); });
    // A thread another file of this rank (an earlier profiling cycle) named is named once.
    names.erase(std::remove_if(names.begin(), names.end(), [&](const ThreadName& t) {
                  return !shared_.threads.emplace(t.rank, t.kind, t.device, t.tid).second;
                }), names.end());
    if (!names.empty()) store_.put(names);
    st_.threads += int64_t(names.size());
    store_.putRank(RankInfo{rank_, "", "kineto", 0, 0, std::nullopt, std::nullopt});
  }

 private:
  StringId id(uint32_t n) {
    if (ids_[n] == kNoString) ids_[n] = store_.intern(p_.names[n]);
    return ids_[n];
  }

  // The event's row, by its kind, from b to en on the run's clock.
  void putRow(const Event& e, int64_t b, int64_t en, const std::string& name, StringId name_id) {
    const int64_t stream = e.stream >= 0 ? e.stream : e.tid;
    switch (e.cat) {
      case Cat::Op: putOp(e, b, en, name, name_id); break;
      case Cat::Annotation: putAnnotation(e, b, en, name, name_id); break;
      case Cat::GpuAnnotation:  // on the GPU's pid and the stream's tid: the GPU part of the rank
        store_.put(GpuAnnotation{b, en, e.deviceId(), stream, name_id, domain_, rank_});
        ++st_.gpu_annotations;
        break;
      case Cat::Kernel: putKernel(e, b, en, stream, name_id); break;
      case Cat::Runtime:
      case Cat::Driver:
        store_.put(ApiCall{b, en, e.tid, name_id, e.correlation,
                           int32_t(e.cat == Cat::Driver ? ApiKind::Driver : ApiKind::Runtime), rank_});
        ++st_.api_calls;
        break;
      case Cat::Memcpy:
        store_.put(Memcpy{b, en, e.deviceId(), stream, e.correlation, memcpyKind(name), e.bytes, rank_});
        ++st_.memcpy;
        break;
      case Cat::Memset:
        store_.put(Memset{b, en, e.deviceId(), stream, e.correlation, e.bytes, 0, rank_});
        ++st_.memset;
        break;
      case Cat::Other: break;
    }
  }

  void putOp(const Event& e, int64_t b, int64_t en, const std::string& name, StringId name_id) {
    const int64_t k = stepNumber(name, path_);  // PyTorch 1.x wrote ProfilerStep#N as an op
    if (k >= 0) {
      if (isStopStub(k, b)) return putRange(e, b, en, name_id);
      if (!step_rows_.add(rank_, k, b, en, memory_.peak(b, en))) return;  // the same step as an annotation: kept once
      ++steps_seen_;
      putRange(e, b, en, name_id);
      return;
    }
    store_.put(HostOp{b, en, name_id, e.tid, e.seq, e.shapes == kNone ? kNoString : id(e.shapes), rank_});
    ++st_.host_ops;
  }

  void putAnnotation(const Event& e, int64_t b, int64_t en, const std::string& name, StringId name_id) {
    const int64_t k = stepNumber(name, path_);
    if (k >= 0 && !isStopStub(k, b)) {
      if (!step_rows_.add(rank_, k, b, en, memory_.peak(b, en))) return;  // the same step as an op: kept once
      ++steps_seen_;
    }
    putRange(e, b, en, name_id);
  }

  void putRange(const Event& e, int64_t b, int64_t en, StringId name_id) {
    store_.put(Range{b, en, name_id, domain_, e.tid, 0, int32_t(RangeKind::StartEnd), rank_});
    ++st_.ranges;
  }

  void putKernel(const Event& e, int64_t b, int64_t en, int64_t stream, StringId name_id) {
    Kernel k{b, en, e.deviceId(), stream, name_id, e.correlation};
    if (e.dims >= 0) {
      const Dims& d = p_.dims[size_t(e.dims)];
      for (int i = 0; i < 3; ++i) k.grid[size_t(i)] = d.grid[i], k.block[size_t(i)] = d.block[i];
      k.registers = d.registers;
      k.shared_bytes = d.shared;
    }
    k.rank = rank_;
    store_.put(k);
    ++st_.kernels;
  }

  // A "gloo:all_reduce" annotation as a collective: the op from its name, the elements of its first
  // input ("Input Dims" [[33088]]), the dtype from "Input type" ("float", "c10::BFloat16"), the group
  // the trace's world (distributedInfo.world_size; Gloo annotations name no group).
  void putGloo(const Event& e, const std::string& name, int64_t b, std::pair<int64_t, bool> end) {
    Collective row;
    row.op = collectiveOp(name.substr(5));
    row.group = "default";
    row.rank = rank_;
    row.group_size = std::max<int64_t>(1, p_.world_size.value_or(1));
    int64_t width = e.input_type == kNone ? 0 : glooWidth(p_.names[e.input_type]);
    int64_t n = e.shapes == kNone ? -1 : firstListElements(p_.names[e.shapes], width > 0);
    // The annotation's input is this rank's part of an all-gather; the bytes rule counts the output,
    // group_size parts (half the bytes were stored on 2 ranks: FSDP's and ZeRO's parameter gathers).
    if (n > 0 && row.op == "all_gather") n = n <= INT64_MAX / row.group_size ? n * row.group_size : -1;
    if (n < 0 || width == 0) {  // an annotation the trace's end cut ("finished": false) has no args
      // Its width from the op's last complete call — only when it names no type: a type this table
      // does not know leaves the bytes unknown (0), never another dtype's.
      const auto w = gloo_width_.find(row.op);
      if (width == 0 && e.input_type == kNone && w != gloo_width_.end()) width = w->second;
      if (n < 0) n = calledElements(row.op, e.ts);  // all-gather: its call's output
    }
    row.bytes = n > 0 && width > 0 && n <= INT64_MAX / width ? n * width : 0;
    row.start_ns = b;
    std::tie(row.end_ns, row.cut) = end;
    collectives_.push_back(std::move(row));
  }

  // A communication record's collective, numbered in its group's order; kept for one write at the end.
  void putCollective(const CommArgs& c, int64_t b, std::pair<int64_t, bool> end) {
    if (c.op == kNone) return;
    Collective row;
    row.op = collectiveOp(p_.names[c.op]);
    row.group = c.group == kNone ? "default" : p_.names[c.group];
    row.rank = rank_;
    row.group_size = std::max<int64_t>(1, c.group_size);
    // The buffer the bus-bandwidth rule is stated for: all-gather's output, everything else's input.
    const int64_t nelems = row.op == "all_gather" ? (c.out >= 0 ? c.out : c.in) : (c.in >= 0 ? c.in : c.out);
    const int64_t width = c.dtype == kNone ? 0 : dtypeBytes(p_.names[c.dtype]);
    row.bytes = nelems > 0 && width > 0 && nelems <= INT64_MAX / width ? nelems * width : 0;
    row.start_ns = b;
    std::tie(row.end_ns, row.cut) = end;
    collectives_.push_back(std::move(row));
  }

  // Events left out (a time past int64, or a negative duration) are counted, and added to the rank's
  // drop row (finishKineto writes it).
  void putDrops() {
    const int64_t dropped_time = dropped_time_ + memory_.dropped();
    st_.dropped_out_of_range += dropped_time;
    st_.dropped_negative += dropped_negative_;
    if (dropped_time + dropped_negative_ == 0) return;
    Drop& d = shared_.drops[rank_];
    d.rank = rank_;
    d.source = "import";
    d.emitted += int64_t(p_.events.size() + p_.memory.size());
    d.stored += int64_t(p_.events.size() + p_.memory.size()) - dropped_time - dropped_negative_;
    d.dropped += dropped_time + dropped_negative_;
  }

  RunStore& store_;
  ImportStats& st_;
  const Parsed& p_;
  const std::string& path_;
  const int64_t rank_, base_;
  const uint32_t unnamed_;
  std::vector<StringId> ids_;  // the file's names → the store's, interned on first use
  const StringId domain_;
  StepRows& step_rows_;
  KinetoShared& shared_;
  const MemoryTrack memory_;
  bool kernel_comms_ = false;
  bool gloo_comms_ = false;  // no other communication record in the file: the gloo: annotations
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> calls_;  // op → (start, elements) of c10d calls
  std::map<std::string, int64_t> gloo_width_;                              // op → element width seen
  std::vector<Collective> collectives_;
  int64_t last_recorded_ = INT64_MIN;  // file clock: the latest end of an event the stop did not cut
  int64_t stub_step_ = -1, stub_ts_ = 0;  // findStopStub: the step the stop cut, on the file's clock
  int64_t steps_seen_ = 0, t_min_ = INT64_MAX, t_max_ = INT64_MIN, dropped_time_ = 0, dropped_negative_ = 0;
};

}  // namespace

// The recipe: parse → check → the rank → each event's row (and collective) → collectives, drops,
// steps, threads and processes, the rank.
int64_t importKineto(RunStore& store, ImportStats& st, std::istream& in, const std::string& path, const RankOf& rank_of,
                     StepRows& steps, KinetoShared& shared) {
  Parsed p = kineto::parseKineto(in, path);
  checkKineto(p, path);
  const int64_t rank = checkedRank(rank_of(originOf(p, path)), path);
  for (const auto& [what, n] : p.refused) st.refused_values[what] += n;
  for (const auto& [cat, n] : p.ignored_device) st.ignored_device_events[cat] += n;
  if (const std::string g = gpuModels(p.gpus); !g.empty()) st.gpus[rank] = g;
  steps.file(path);
  KinetoWriter w(store, st, p, path, rank, steps, shared);
  for (const Event& e : p.events) w.write(e);
  w.finish();
  return rank;
}

void finishKineto(RunStore& store, ImportStats& st, KinetoShared& shared) {
  for (auto& [rank, rows] : shared.collectives) {
    // Each group's calls numbered in the order they started, not the files': a file lists its events
    // thread by thread, and Gloo runs a process group's work on two worker threads (torch 2.11), so
    // file order interleaves them and the ranks' calls would be linked to the wrong peers; and a
    // rank's profiling cycles may be several files, passed in any order.
    std::stable_sort(rows.begin(), rows.end(), [](const Collective& a, const Collective& b) { return a.start_ns < b.start_ns; });
    std::map<std::string, int64_t> seq_by_group;
    for (Collective& c : rows) c.seq = seq_by_group[c.group]++;
    if (!rows.empty()) store.put(rows);
    st.collectives += int64_t(rows.size());
  }
  for (const auto& [rank, d] : shared.drops) store.put(std::vector<Drop>{d});
  shared = KinetoShared{};
}

}  // namespace trainscope::rundb::importers
