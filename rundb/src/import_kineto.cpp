// import_kineto.cpp — PyTorch profiler (Kineto) Chrome-trace JSON into the run database.
//   cpu_op → host_ops, user_annotation → ranges, gpu_user_annotation → gpu_annotations (on the
//   device stream it was recorded on), kernel → kernels, cuda_runtime/cuda_driver → api_calls,
//   gpu_memcpy → memcpy, gpu_memset → memset (and the PyTorch 1.x names: Operator, Runtime, Kernel,
//   Memcpy, Memset); "ProfilerStep#N" steps; communication records (NCCL kernels' or
//   record_param_comms' args) → collectives; the metadata events (ph "M") thread_name,
//   thread_sort_index, process_name and process_sort_index → threads.
//
// The file is read as a stream (nlohmann's SAX interface) into compact event records — never as a
// JSON tree — so memory follows the number of events, not the file's size or its nesting. Times
// are taken from the number's decimal text, exactly: microseconds with a fractional part become
// integer nanoseconds without passing through a double (which at epoch scale steps by 256 ns).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <istream>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "import_impl.h"
#include "trainscope/common/error.h"
#include "trainscope/rundb/store.h"

namespace trainscope::rundb::importers {
namespace {

enum class Cat : uint8_t { Other, Op, Annotation, GpuAnnotation, Kernel, Runtime, Driver, Memcpy, Memset };

// Kineto's category names, and the capitalised ones PyTorch 1.x wrote (as the TensorBoard plugin
// reads them: case does not matter).
Cat category(std::string c) {
  for (char& ch : c) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  static const std::unordered_map<std::string, Cat> cats = {
      {"cpu_op", Cat::Op},          {"operator", Cat::Op},         {"user_annotation", Cat::Annotation},
      {"gpu_user_annotation", Cat::GpuAnnotation},                 {"kernel", Cat::Kernel},
      {"cuda_runtime", Cat::Runtime}, {"runtime", Cat::Runtime},   {"cuda_driver", Cat::Driver},
      {"gpu_memcpy", Cat::Memcpy},  {"memcpy", Cat::Memcpy},       {"gpu_memset", Cat::Memset},
      {"memset", Cat::Memset}};
  auto it = cats.find(c);
  return it == cats.end() ? Cat::Other : it->second;
}

// "123.4567" µs → 123457 ns, from the text: the integer part and up to three fraction digits exactly,
// the fourth rounds (half up). False when the text is not a plain decimal or leaves int64.
bool microsToNs(const std::string& s, int64_t& out) {
  size_t i = 0;
  const bool neg = i < s.size() && s[i] == '-';
  if (neg) ++i;
  __int128 v = 0;
  size_t digits = 0;
  for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i, ++digits) {
    v = v * 10 + (s[i] - '0');
    if (v > __int128(INT64_MAX)) return false;
  }
  v *= 1000;
  if (i < s.size() && s[i] == '.') {
    ++i;
    int64_t scale = 100;
    for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i, ++digits) {
      if (scale > 0) v += (s[i] - '0') * scale;
      else if (scale == 0) v += s[i] >= '5' ? 1 : 0;
      scale = scale > 0 ? scale / 10 : -1;
    }
  }
  if (digits == 0 || i != s.size()) {  // an exponent or junk: through a double, if it fits
    try {
      const long double d = std::stold(s) * 1000.0L;
      if (!(d > -9.2e18L && d < 9.2e18L)) return false;
      out = int64_t(d >= 0 ? d + 0.5L : d - 0.5L);
      return true;
    } catch (const std::exception&) {
      return false;
    }
  }
  if (v > __int128(INT64_MAX)) return false;
  out = neg ? -int64_t(v) : int64_t(v);
  return true;
}

constexpr uint32_t kNone = UINT32_MAX;

struct CommArgs {
  uint32_t op = kNone, dtype = kNone, group = kNone;
  int64_t in = -1, out = -1, group_size = -1;
};

struct Event {
  int64_t ts = 0, dur = 0;  // ns on the file's clock (before baseTimeNanoseconds)
  int64_t tid = 0, correlation = -1, device = -1, stream = -1, seq = -1, bytes = 0;  // device -1: none given
  uint32_t name = kNone, shapes = kNone;
  int32_t comm = -1;        // into Parsed::comms
  int32_t dims = -1;        // into Parsed::dims
  Cat cat = Cat::Other;
  bool complete = false, has_ts = false, has_dur = false, bad_time = false;
  int64_t deviceId() const { return device >= 0 ? device : 0; }
};

bool onDevice(Cat c) { return c == Cat::Kernel || c == Cat::Memcpy || c == Cat::Memset || c == Cat::GpuAnnotation; }

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

struct Parsed {
  std::vector<Event> events;
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
  std::optional<int64_t> rank, base;
  uint32_t intern(const std::string& s) {
    auto [it, fresh] = ids.emplace(s, uint32_t(names.size()));
    if (fresh) names.push_back(s);
    return it->second;
  }
};

// The SAX handler: a stack of where we are; every value is read where it belongs or skipped.
class Reader : public nlohmann::json::json_sax_t {
 public:
  Reader(Parsed& p, const std::string& path) : p_(p), path_(path) {}

  bool null() override { return value(nullptr, nullptr, nullptr); }
  bool boolean(bool) override { return value(nullptr, nullptr, nullptr); }
  bool number_integer(number_integer_t v) override {
    const std::string s = std::to_string(v);
    const int64_t x = v;
    return value(&x, &s, nullptr);
  }
  bool number_unsigned(number_unsigned_t v) override {
    const std::string s = std::to_string(v);
    const int64_t x = v > uint64_t(INT64_MAX) ? INT64_MAX : int64_t(v);
    return value(&x, &s, nullptr);
  }
  bool number_float(number_float_t v, const string_t& s) override {
    const int64_t x = (v >= -9.2e18 && v <= 9.2e18) ? int64_t(v) : (v < 0 ? INT64_MIN : INT64_MAX);
    return value(&x, &s, nullptr);
  }
  bool string(string_t& s) override { return value(nullptr, nullptr, &s); }
  bool binary(binary_t&) override { return value(nullptr, nullptr, nullptr); }

  bool start_object(std::size_t) override {
    Ctx next = Ctx::Skip;
    const Ctx at = top();
    if (stack_.empty()) next = Ctx::Root;
    else if (at == Ctx::Events) next = Ctx::Event, p_.events.emplace_back(), meta_ = MetaCapture{};
    else if (at == Ctx::Root && key_ == "distributedInfo") next = Ctx::Dist;
    else if (at == Ctx::Root && key_ == "otherData") next = Ctx::OtherData;
    else if (at == Ctx::Event && key_ == "args") next = Ctx::Args;
    capture('{');
    stack_.push_back(next);
    return true;
  }
  bool end_object() override {
    if (top() == Ctx::Event) finishEvent();
    stack_.pop_back();
    capture('}');
    return true;
  }
  bool start_array(std::size_t) override {
    Ctx next = Ctx::Skip;
    const Ctx at = top();
    if (at == Ctx::Root && key_ == "traceEvents") next = Ctx::Events, p_.has_trace_events = true;
    else if (at == Ctx::Args && (key_ == "grid" || key_ == "block")) next = Ctx::DimArray, dim_i_ = 0, dim_key_ = key_;
    else if (at == Ctx::Args && key_ == "Input Dims") next = Ctx::Capture, shapes_.clear(), capture_depth_ = stack_.size();
    capture('[');
    stack_.push_back(next);
    return true;
  }
  bool end_array() override {
    const Ctx at = top();
    stack_.pop_back();
    capture(']');
    if (at == Ctx::Capture && stack_.size() == capture_depth_) {
      p_.events.back().shapes = p_.intern(shapes_);
      capture_depth_ = 0;
    }
    return true;
  }
  bool key(string_t& k) override {
    key_ = k;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::json::exception& e) override {
    throw UserError("import", path_ + " is not valid JSON (at byte " + std::to_string(position) + ": " + e.what() + ")",
                    "pass a PyTorch profiler trace (.json or .json.gz)");
  }

 private:
  enum class Ctx : uint8_t { Root, Events, Event, Args, Dist, OtherData, DimArray, Capture, Skip };

  // A field of the wrong type is refused, naming the event and the field: dropping the event would
  // change every figure without a word.
  [[noreturn]] void wrongType(const char* expected, const int64_t* num, const std::string* str) const {
    const std::string got = str ? "the string \"" + str->substr(0, 40) + "\"" : num ? "a number" : "null or a boolean";
    const std::string where = top() == Ctx::Event || top() == Ctx::Args
                                  ? "traceEvents[" + std::to_string(p_.events.size() - 1) + "]." + key_
                                  : key_;
    throw UserError("import", path_ + ": " + where + " is " + got + ", not " + expected,
                    "a Kineto trace has numbers for ts, dur, tid and pid and strings for ph, cat and name: "
                    "re-export the trace from the profiler");
  }
  Ctx top() const { return stack_.empty() ? Ctx::Skip : stack_.back(); }

  // Input shapes are kept as compact JSON text, written as they stream by.
  void capture(char c) {
    if (!capture_depth_) return;
    if ((c == '[' || c == '{') && !shapes_.empty() && shapes_.back() != '[' && shapes_.back() != '{') shapes_ += ',';
    shapes_ += c;
  }
  void captureValue(const std::string& text) {
    if (!shapes_.empty() && shapes_.back() != '[' && shapes_.back() != '{') shapes_ += ',';
    shapes_ += text;
  }

  bool value(const int64_t* num, const std::string* num_text, const std::string* str) {
    const Ctx at = top();
    if (at == Ctx::Capture) {
      captureValue(num_text ? *num_text : str ? nlohmann::json(*str).dump() : "null");
      return true;
    }
    if (at == Ctx::Root && key_ == "baseTimeNanoseconds") {
      if (!num || !num_text || num_text->find_first_of(".eE") != std::string::npos) wrongType("an integer", num, str);
      p_.base = *num;
    }
    if (at == Ctx::Dist && key_ == "rank") {
      if (!num) wrongType("a number", num, str);
      p_.rank = *num;
    }
    if (at == Ctx::OtherData && key_ == "exporter" && str && *str == "trainscope") p_.trainscope_export = true;
    if (at == Ctx::Event) eventField(p_.events.back(), num, num_text, str);
    if (at == Ctx::Args) argField(p_.events.back(), num, str);
    if (at == Ctx::DimArray && num && dim_i_ < 3) {
      Event& e = p_.events.back();
      Dims& d = dimsOf(e);
      (dim_key_ == "grid" ? d.grid : d.block)[dim_i_++] = int32_t(std::clamp<int64_t>(*num, INT32_MIN, INT32_MAX));
    }
    return true;
  }

  void eventField(Event& e, const int64_t* num, const std::string* num_text, const std::string* str) {
    const bool text_field = key_ == "ph" || key_ == "cat" || key_ == "name";
    if (text_field && !str) wrongType("a string", num, str);
    if ((key_ == "ts" || key_ == "dur") && !num_text) wrongType("a number", num, str);
    if (key_ == "ph") e.complete = *str == "X", meta_.is_meta = *str == "M";
    else if (key_ == "cat") {
      e.cat = category(*str);
      if (*str == "step") p_.trainscope_export = true;  // our Chrome export's step rows (older exports)
    } else if (key_ == "name") e.name = p_.intern(*str);
    else if (key_ == "tid" || key_ == "pid") {
      const std::optional<int64_t> v = processOrThreadId(num, num_text, str);
      if (key_ == "pid" && v) meta_.pid = *v, meta_.has_pid = true;
      if (key_ == "tid") e.tid = v.value_or(0), meta_.has_tid = v.has_value();
    } else if (key_ == "ts" || key_ == "dur") {
      int64_t ns = 0;
      if (!microsToNs(*num_text, ns)) e.bad_time = true;
      (key_ == "ts" ? e.ts : e.dur) = ns;
      (key_ == "ts" ? e.has_ts : e.has_dur) = true;
    }
  }

  // A pid or a tid as the profiler meant it. Kineto writes them as int32: one written unsigned
  // (4294967291 for -5; no Linux id reaches 2^31) reads as the negative number, and so does one past
  // int64. Older traces name GPU rows "stream 7": the stream number. Other text ("Spans") is none.
  static std::optional<int64_t> processOrThreadId(const int64_t* num, const std::string* num_text,
                                                  const std::string* str) {
    if (str) {
      static const std::string prefix = "stream ";
      if (str->size() > prefix.size() && str->size() <= prefix.size() + 9 && str->compare(0, prefix.size(), prefix) == 0 &&
          str->find_first_not_of("0123456789", prefix.size()) == std::string::npos)
        return std::stoll(str->substr(prefix.size()));
      return std::nullopt;
    }
    if (!num || !num_text) return std::nullopt;
    const bool integer = !num_text->empty() && num_text->find_first_not_of("0123456789-") == std::string::npos;
    if (integer && num_text->front() != '-' && *num == INT64_MAX) {  // past int64: its two's complement
      errno = 0;
      const unsigned long long u = std::strtoull(num_text->c_str(), nullptr, 10);
      if (errno == 0) return int64_t(u);
    }
    if (*num >= (int64_t(1) << 31) && *num < (int64_t(1) << 32)) return *num - (int64_t(1) << 32);
    return *num;
  }

  Dims& dimsOf(Event& e) {
    if (e.dims < 0) e.dims = int32_t(p_.dims.size()), p_.dims.emplace_back();
    return p_.dims[size_t(e.dims)];
  }
  CommArgs& commOf(Event& e) {
    if (e.comm < 0) e.comm = int32_t(p_.comms.size()), p_.comms.emplace_back();
    return p_.comms[size_t(e.comm)];
  }

  void argField(Event& e, const int64_t* num, const std::string* str) {
    const std::string& k = key_;
    if (num) {
      if (k == "correlation") e.correlation = *num;
      else if (k == "device") e.device = *num;
      else if (k == "stream") e.stream = *num;
      else if (k == "Sequence number") e.seq = *num;
      else if (k == "bytes") e.bytes = *num;
      else if (k == "registers per thread") dimsOf(e).registers = int32_t(std::clamp<int64_t>(*num, 0, INT32_MAX));
      else if (k == "shared memory") dimsOf(e).shared = int32_t(std::clamp<int64_t>(*num, 0, INT32_MAX));
      else if (k == "In msg nelems") commOf(e).in = *num;
      else if (k == "Out msg nelems") commOf(e).out = *num;
      else if (k == "Group size") commOf(e).group_size = *num;
      else if (k == "sort_index") meta_.sort = *num;  // metadata events
    } else if (str) {
      if (k == "name") meta_.text = *str;  // metadata events: the thread's or the process's name
      if (k == "Collective name") commOf(e).op = p_.intern(*str);
      else if (k == "dtype") commOf(e).dtype = p_.intern(*str);
      else if (k == "Process Group Description" || (k == "Process Group Name" && commOf(e).group == kNone))
        commOf(e).group = p_.intern(*str);
    }
  }

  // Only complete events with a time are kept; the rest give their slot back. Metadata events that
  // name or order a thread or a process are kept apart (the fields may come in any order).
  void finishEvent() {
    Event& e = p_.events.back();
    if (meta_.has_pid && onDevice(e.cat)) {  // Kineto's pid of a GPU event is its device
      if (e.device < 0) e.device = meta_.pid;
      p_.gpu_pids.insert(meta_.pid);
      p_.stream_of.try_emplace({meta_.pid, e.tid}, e.deviceId(), e.stream >= 0 ? e.stream : e.tid);
    } else if (meta_.has_pid && e.cat != Cat::Other) {
      p_.cpu_pids.insert(meta_.pid);
    }
    if (meta_.is_meta && meta_.has_pid && meta_.has_tid && e.name != kNone) {
      static const std::unordered_map<std::string, MetaKind> kinds = {
          {"thread_name", MetaKind::ThreadName}, {"thread_sort_index", MetaKind::ThreadSort},
          {"process_name", MetaKind::ProcessName}, {"process_sort_index", MetaKind::ProcessSort}};
      if (auto it = kinds.find(p_.names[e.name]); it != kinds.end())
        p_.meta.push_back(Meta{it->second, meta_.pid, e.tid, std::move(meta_.text), meta_.sort});
    }
    if (!e.complete || !e.has_ts || !e.has_dur || (e.cat == Cat::Other && e.comm < 0)) p_.events.pop_back();
  }

  // The event's pid (numeric: Kineto also writes "Spans", "Traces", ""), and what a metadata event
  // carries, gathered while its object is read.
  struct MetaCapture {
    int64_t pid = 0;
    bool has_pid = false, is_meta = false, has_tid = false;
    std::string text;
    std::optional<int64_t> sort;
  };

  Parsed& p_;
  const std::string& path_;
  MetaCapture meta_;
  std::vector<Ctx> stack_;
  std::string key_, dim_key_, shapes_;
  size_t capture_depth_ = 0;
  int dim_i_ = 0;
};

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
      {"ComplexFloat", 8}, {"ComplexDouble", 16}};
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

}  // namespace

int64_t importKineto(RunStore& store, ImportStats& st, std::istream& in, const std::string& path,
                     int64_t default_rank) {
  Parsed p;
  Reader reader(p, path);
  nlohmann::json::sax_parse(in, &reader, nlohmann::json::input_format_t::json, /*strict=*/true);
  if (!p.has_trace_events)
    throw UserError("import", path + " has no traceEvents array", "pass a PyTorch profiler (Kineto) trace");
  if (p.trainscope_export)
    throw UserError("import", path + " is a Chrome trace that trainscope exported from a run database: it is for "
                                     "Perfetto, and holds less than the database it came from",
                    "use the run database that `trainscope export --chrome` read (report, view, export)");
  const int64_t rank = p.rank.value_or(default_rank);
  if (rank < 0 || rank > INT32_MAX)
    throw UserError("import", path + ": distributedInfo.rank " + std::to_string(rank) + " is out of range (0 to 2^31-1)",
                    "check the trace file");
  const int64_t base = p.base.value_or(0);

  const uint32_t unnamed = p.intern("");  // before `ids` is sized: events without a name use it
  std::vector<StringId> ids(p.names.size(), kNoString);
  auto id = [&](uint32_t n) {
    if (ids[n] == kNoString) ids[n] = store.intern(p.names[n]);
    return ids[n];
  };
  const StringId domain = store.intern("kineto");
  // Communication records: the NCCL kernels' args when the kernels carry them (GPU time), else the
  // record_param_comms CPU ops (a CPU job's Gloo collectives, or an older PyTorch).
  bool kernel_comms = false;
  for (const Event& e : p.events) kernel_comms |= e.cat == Cat::Kernel && e.comm >= 0;
  std::map<std::string, int64_t> seq_by_group;
  std::vector<Collective> collectives;

  int64_t steps_seen = 0, t_min = INT64_MAX, t_max = INT64_MIN, dropped_time = 0, dropped_negative = 0;
  StepRows step_rows(store, path);
  for (const Event& e : p.events) {
    int64_t b = 0, en = 0;
    if (e.bad_time || __builtin_add_overflow(base, e.ts, &b) || __builtin_add_overflow(b, e.dur, &en)) {
      ++dropped_time;
      continue;
    }
    if (e.dur < 0) {
      ++dropped_negative;
      continue;
    }
    const std::string& name = p.names[e.name == kNone ? unnamed : e.name];
    const StringId name_id = id(e.name == kNone ? unnamed : e.name);
    if (e.cat != Cat::Other) t_min = std::min(t_min, b), t_max = std::max(t_max, en);
    const int64_t stream = e.stream >= 0 ? e.stream : e.tid;
    switch (e.cat) {
      case Cat::Op: {
        const int64_t k = stepNumber(name, path);  // PyTorch 1.x wrote ProfilerStep#N as an op
        if (k >= 0) {
          if (!step_rows.add(rank, k, b, en)) break;  // the same step as an annotation: kept once
          ++steps_seen;
          store.put(Range{b, en, name_id, domain, e.tid, 0, int32_t(RangeKind::StartEnd), rank});
          ++st.ranges;
          break;
        }
        store.put(HostOp{b, en, name_id, e.tid, e.seq, e.shapes == kNone ? kNoString : id(e.shapes), rank});
        ++st.host_ops;
        break;
      }
      case Cat::Annotation: {
        const int64_t k = stepNumber(name, path);
        if (k >= 0) {
          if (!step_rows.add(rank, k, b, en)) break;  // the same step as an op: kept once
          ++steps_seen;
        }
        store.put(Range{b, en, name_id, domain, e.tid, 0, int32_t(RangeKind::StartEnd), rank});
        ++st.ranges;
        break;
      }
      case Cat::GpuAnnotation:  // on the GPU's pid and the stream's tid: the GPU part of the rank
        store.put(GpuAnnotation{b, en, e.deviceId(), stream, name_id, domain, rank});
        ++st.gpu_annotations;
        break;
      case Cat::Kernel: {
        Kernel k{b, en, e.deviceId(), stream, name_id, e.correlation};
        if (e.dims >= 0) {
          const Dims& d = p.dims[size_t(e.dims)];
          for (int i = 0; i < 3; ++i) k.grid[size_t(i)] = d.grid[i], k.block[size_t(i)] = d.block[i];
          k.registers = d.registers;
          k.shared_bytes = d.shared;
        }
        k.rank = rank;
        store.put(k);
        ++st.kernels;
        break;
      }
      case Cat::Runtime:
      case Cat::Driver:
        store.put(ApiCall{b, en, e.tid, name_id, e.correlation,
                          int32_t(e.cat == Cat::Driver ? ApiKind::Driver : ApiKind::Runtime), rank});
        ++st.api_calls;
        break;
      case Cat::Memcpy:
        store.put(Memcpy{b, en, e.deviceId(), stream, e.correlation, memcpyKind(name), e.bytes, rank});
        ++st.memcpy;
        break;
      case Cat::Memset:
        store.put(Memset{b, en, e.deviceId(), stream, e.correlation, e.bytes, 0, rank});
        ++st.memset;
        break;
      case Cat::Other: break;
    }
    const bool comm_source = kernel_comms ? e.cat == Cat::Kernel : (e.cat == Cat::Op && name == "record_param_comms");
    if (e.comm >= 0 && comm_source) {
      const CommArgs& c = p.comms[size_t(e.comm)];
      if (c.op == kNone) continue;
      Collective row;
      row.op = collectiveOp(p.names[c.op]);
      row.group = c.group == kNone ? "default" : p.names[c.group];
      row.rank = rank;
      row.group_size = std::max<int64_t>(1, c.group_size);
      row.seq = seq_by_group[row.group]++;
      // The buffer the bus-bandwidth rule is stated for: all-gather's output, everything else's input.
      const int64_t nelems = row.op == "all_gather" ? (c.out >= 0 ? c.out : c.in) : (c.in >= 0 ? c.in : c.out);
      const int64_t width = c.dtype == kNone ? 0 : dtypeBytes(p.names[c.dtype]);
      row.bytes = nelems > 0 && width > 0 && nelems <= INT64_MAX / width ? nelems * width : 0;
      row.start_ns = b;
      row.end_ns = en;
      collectives.push_back(row);
    }
  }
  if (!collectives.empty()) store.put(collectives);
  st.collectives += int64_t(collectives.size());
  st.dropped_out_of_range += dropped_time;
  st.dropped_negative += dropped_negative;
  if (dropped_time + dropped_negative > 0) {
    Drop d;
    d.rank = rank;
    d.source = "import";
    d.emitted = int64_t(p.events.size());
    d.stored = d.emitted - dropped_time - dropped_negative;
    d.dropped = dropped_time + dropped_negative;
    store.put(std::vector<Drop>{d});
  }
  if (steps_seen == 0 && t_min < t_max) {  // no ProfilerStep: the whole trace is one step
    store.appendStep(importedStep(rank, 0, t_min, t_max, path));
    steps_seen = 1;
  }
  st.steps += steps_seen;
  const std::vector<ThreadName> names = threadNames(p, rank, [&](const std::string& s) { return store.intern(s); });
  if (!names.empty()) store.put(names);
  st.threads += int64_t(names.size());
  store.putRank(RankInfo{rank, "", "kineto", 0, 0, std::nullopt, std::nullopt});
  return rank;
}

}  // namespace trainscope::rundb::importers
