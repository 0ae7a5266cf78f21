// kineto_parse.cpp — see kineto_parse.h. The file is read as a stream (nlohmann's SAX interface) into
// compact event records — never as a JSON tree — so memory follows the number of events, not the
// file's size or its nesting. Times are taken from the number's decimal text, exactly: microseconds
// with a fractional part become integer nanoseconds without passing through a double (which at epoch
// scale steps by 256 ns).
#include "kineto_parse.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <tuple>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/json_text.h"

namespace trainscope::rundb::importers::kineto {
namespace {

// Kineto's category names, and the capitalised ones PyTorch 1.x wrote (as the TensorBoard plugin
// reads them: case does not matter).
Cat category(std::string c) {
  for (char& ch : c) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  static const std::unordered_map<std::string, Cat> cats = {
      {"cpu_op", Cat::Op},          {"operator", Cat::Op},         {"user_annotation", Cat::Annotation},
      {"gpu_user_annotation", Cat::GpuAnnotation},                 {"kernel", Cat::Kernel},
      {"cuda_runtime", Cat::Runtime}, {"runtime", Cat::Runtime},   {"cuda_driver", Cat::Driver},
      {"gpu_memcpy", Cat::Memcpy},  {"memcpy", Cat::Memcpy},       {"gpu_memset", Cat::Memset},
      {"memset", Cat::Memset},
      // MTIA (HTA reads them as a GPU's): the device's events (its "dma…" ones are copies) and the
      // runtime calls that launch them.
      {"mtia_ccp_events", Cat::Kernel}, {"mtia_runtime", Cat::Runtime}};
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

// The SAX handler: a stack of where we are; every value is read where it belongs or skipped.
class Reader : public nlohmann::json::json_sax_t {
 public:
  Reader(Parsed& p, const std::string& path) : p_(p), path_(path) {}

  bool null() override { return value(nullptr, nullptr, nullptr); }
  bool boolean(bool v) override {
    if (top() == Ctx::Args && arg_ == Arg::Finished) {  // "finished": false — the profiler stopped inside it
      p_.events.back().unfinished = !v;
      return true;
    }
    return value(nullptr, nullptr, nullptr);
  }
  bool number_integer(number_integer_t v) override {
    const std::string s = std::to_string(v);
    const int64_t x = v;
    num_kind_ = Num::Int;
    return value(&x, &s, nullptr);
  }
  bool number_unsigned(number_unsigned_t v) override {
    const std::string s = std::to_string(v);
    const int64_t x = v > uint64_t(INT64_MAX) ? INT64_MAX : int64_t(v);
    num_kind_ = v > uint64_t(INT64_MAX) ? Num::TooBig : Num::Int;
    return value(&x, &s, nullptr);
  }
  // A float is an integer where one is required only when it is one exactly (2.0, 1e3); `x` is
  // what a time's or a capture's reader may look at, never what an integer field takes.
  bool number_float(number_float_t v, const string_t& s) override {
    const bool fits = std::isfinite(v) && v >= -9.2e18 && v <= 9.2e18;
    const int64_t x = fits ? int64_t(v) : (v < 0 ? INT64_MIN : INT64_MAX);
    num_kind_ = !fits ? Num::TooBig : std::floor(v) == v ? Num::Int : Num::Fraction;
    return value(&x, &s, nullptr);
  }
  bool string(string_t& s) override { return value(nullptr, nullptr, &s); }
  bool binary(binary_t&) override { return value(nullptr, nullptr, nullptr); }

  bool start_object(std::size_t) override {
    Ctx next = Ctx::Skip;
    const Ctx at = top();
    if (!stack_.empty() && !(at == Ctx::Events || (at == Ctx::Root && (key_ == "distributedInfo" || key_ == "otherData")) ||
                             (at == Ctx::Event && key_ == "args") || at == Ctx::DevProps))
      structured("an object");
    if (stack_.empty()) next = Ctx::Root;
    else if (at == Ctx::DevProps) next = Ctx::DevProp;
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
    if (stack_.size() == 1) finishParse();
    stack_.pop_back();
    capture('}');
    return true;
  }
  bool start_array(std::size_t) override {
    Ctx next = Ctx::Skip;
    const Ctx at = top();
    if (at != Ctx::Capture && !(at == Ctx::Root && key_ == "traceEvents") &&
        !(at == Ctx::Args && (key_ == "grid" || key_ == "block" || key_ == "Input Dims" || key_ == "Input type")))
      structured("an array");
    if (at == Ctx::Root && key_ == "traceEvents") next = Ctx::Events, p_.has_trace_events = true;
    else if (at == Ctx::Root && key_ == "deviceProperties") next = Ctx::DevProps;
    else if (at == Ctx::Args && (key_ == "grid" || key_ == "block")) next = Ctx::DimArray, dim_i_ = 0, dim_key_ = key_;
    else if (at == Ctx::Args && key_ == "Input Dims") next = Ctx::Capture, shapes_.clear(), capture_depth_ = stack_.size();
    else if (at == Ctx::Args && key_ == "Input type") next = Ctx::TypeArray, type_i_ = 0;
    else if (at == Ctx::Capture) next = Ctx::Capture;  // an input's dims inside Input Dims: kept (were dropped: "[[],[]]")
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
    if (top() == Ctx::Args) arg_ = argOf(k);  // one look-up per args key
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::json::exception& e) override {
    throw UserError("import", path_ + " is not valid JSON (at byte " + std::to_string(position) + ": " + jsonErrorText(e.what()) + ")",
                    "pass a PyTorch profiler trace (.json or .json.gz)");
  }

 private:
  static bool onDevice(Cat c) {
    return c == Cat::Kernel || c == Cat::Memcpy || c == Cat::Memset || c == Cat::GpuAnnotation;
  }
  // DevProps: the root's deviceProperties array; DevProp: one device in it (its "name" is the GPU model).
  // TypeArray: an event's args."Input type" (its first entry is kept).
  enum class Ctx : uint8_t { Root, Events, Event, Args, Dist, OtherData, DimArray, Capture, Skip, DevProps, DevProp, TypeArray };

  // A field of the wrong type is refused, naming the event and the field: dropping the event would
  // change every figure without a word.
  [[noreturn]] void wrongType(const char* expected, const int64_t* num, const std::string* str) const {
    wrongType(expected, str ? "the string \"" + str->substr(0, 40) + "\"" : num ? kindOf(num, str) : "null or a boolean");
  }
  [[noreturn]] void wrongType(const char* expected, const std::string& got) const {
    const std::string where = top() == Ctx::Event || top() == Ctx::Args
                                  ? "traceEvents[" + std::to_string(p_.events.size() - 1) + "]." + key_
                                  : key_;
    throw UserError("import", path_ + ": " + where + " is " + got + ", not " + expected,
                    "a Kineto trace has numbers for ts, dur, tid and pid and strings for ph, cat and name: "
                    "re-export the trace from the profiler");
  }
  Ctx top() const { return stack_.empty() ? Ctx::Skip : stack_.back(); }

  // What a value is, as a count's key says it: "a string", "a fractional number", …
  std::string kindOf(const int64_t* num, const std::string* str) const {
    if (str) return "a string";
    if (!num) return "null or a boolean";
    return num_kind_ == Num::Fraction ? "a fractional number" : num_kind_ == Num::TooBig ? "a number past int64" : "a number";
  }
  // A value of the wrong type in the event being read: counted (by field and kind) once the event is
  // kept, and left out — the field reads as absent.
  void refuse(const std::string& field, const std::string& kind) { meta_.refused.push_back(field + ": " + kind); }
  // An integer field's value; none (refused) for another type, a fraction or a number past int64.
  std::optional<int64_t> integer(const std::string& field, const int64_t* num, const std::string* str) {
    if (num && num_kind_ == Num::Int) return *num;
    refuse(field, kindOf(num, str));
    return std::nullopt;
  }
  // An int32 field of a kernel (registers, shared memory, a grid or block dimension): 0 to 2^31-1.
  std::optional<int32_t> count32(const std::string& field, const int64_t* num, const std::string* str) {
    const std::optional<int64_t> v = integer(field, num, str);
    if (!v) return std::nullopt;
    if (*v < 0 || *v > INT32_MAX) {
      refuse(field, "out of range (0 to 2^31-1)");
      return std::nullopt;
    }
    return int32_t(*v);
  }
  // The args keys this reader takes: integers (the int32 ones of a kernel apart), text, and arrays.
  enum class Arg : uint8_t {
    Other, Correlation, Device, Stream, Seq, Bytes, InNelems, OutNelems, GroupSize, SortIndex,  // integers
    TotalAllocated, DeviceType,                                                                  // integers
    Registers, Shared,                                                                           // int32
    Collective, Dtype, GroupDesc, GroupName, Name,                                               // text
    Grid, Block, InputDims,                                                                      // arrays
    Finished                                                                                     // a boolean
  };
  static Arg argOf(const std::string& k) {
    static const std::unordered_map<std::string, Arg> keys = {
        {"correlation", Arg::Correlation}, {"device", Arg::Device}, {"stream", Arg::Stream},
        {"Sequence number", Arg::Seq}, {"bytes", Arg::Bytes}, {"In msg nelems", Arg::InNelems},
        {"Out msg nelems", Arg::OutNelems}, {"Group size", Arg::GroupSize}, {"sort_index", Arg::SortIndex},
        {"registers per thread", Arg::Registers}, {"shared memory", Arg::Shared}, {"Collective name", Arg::Collective},
        {"dtype", Arg::Dtype}, {"Process Group Description", Arg::GroupDesc}, {"Process Group Name", Arg::GroupName},
        {"name", Arg::Name}, {"grid", Arg::Grid}, {"block", Arg::Block}, {"Input Dims", Arg::InputDims},
        // a [memory] event's (profile_memory=True): its size, the allocator's total after it, its device
        {"Bytes", Arg::Bytes}, {"Total Allocated", Arg::TotalAllocated}, {"Device Id", Arg::Device},
        {"Device Type", Arg::DeviceType},
        // an event the profiler's stop cut (written with "finished": false, its end the stop's time)
        {"finished", Arg::Finished}};
    const auto it = keys.find(k);
    return it == keys.end() ? Arg::Other : it->second;
  }
  static bool intArg(Arg a) { return a >= Arg::Correlation && a <= Arg::DeviceType; }
  static bool textArg(Arg a) { return a >= Arg::Collective && a <= Arg::GroupName; }
  // An object or an array where a field this reader reads holds a scalar: refused like any other type.
  void structured(const char* got) {
    const Ctx at = top();
    if (at == Ctx::Events) ++p_.refused[std::string("traceEvents[]: ") + got];
    if (at == Ctx::DimArray) refuse("args." + dim_key_, got), ++dim_i_;
    if (at == Ctx::Root && key_ == "baseTimeNanoseconds") wrongType("an integer", got);
    if (at == Ctx::Root && key_ == "distributedInfo") wrongType("an object", got);
    if (at == Ctx::Dist && key_ == "rank") wrongType("an integer", got);
    if (at == Ctx::Event) {
      if (key_ == "ts" || key_ == "dur") wrongType("a number", got);
      if (key_ == "ph" || key_ == "cat" || key_ == "name") wrongType("a string", got);
      if (key_ == "pid" || key_ == "tid" || key_ == "args") refuse(key_, got);
    }
    if (at == Ctx::Args && arg_ != Arg::Other && arg_ != Arg::Name) refuse("args." + key_, got);
    if (at == Ctx::Args && arg_ == Arg::Name) meta_.bad_name = got;
  }

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
      captureValue(num_text ? *num_text : str ? jsonText(nlohmann::json(*str)) : "null");
      return true;
    }
    if (at == Ctx::DevProp && key_ == "name" && str) {  // the GPU model, for the import header
      p_.gpus.push_back(*str);
      return true;
    }
    if (at == Ctx::Root && key_ == "baseTimeNanoseconds") {
      if (!num || !num_text || num_text->find_first_of(".eE") != std::string::npos || num_kind_ != Num::Int)
        wrongType("an integer within int64", num, str);
      p_.base = *num;
    }
    if (at == Ctx::Root && key_ == "distributedInfo") wrongType("an object", num, str);
    if (at == Ctx::Dist && key_ == "rank") {
      if (!num || num_kind_ != Num::Int) wrongType("an integer", num, str);
      p_.rank = *num;
    }
    if (at == Ctx::Dist && key_ == "world_size" && num && num_kind_ == Num::Int && *num > 0) p_.world_size = *num;
    if (at == Ctx::TypeArray) {
      if (type_i_++ == 0 && str) p_.events.back().input_type = p_.intern(*str);
      return true;
    }
    if (at == Ctx::OtherData && key_ == "exporter" && str && *str == "trainscope") p_.trainscope_export = true;
    if (at == Ctx::Events) ++p_.refused["traceEvents[]: " + kindOf(num, str)];  // an event that is not an object
    if (at == Ctx::Event) eventField(p_.events.back(), num, num_text, str);
    if (at == Ctx::Args) argField(p_.events.back(), num, str);
    if (at == Ctx::DimArray) {
      const std::string field = "args." + dim_key_;
      if (dim_i_ >= 3) {
        refuse(field, "more than 3 dimensions");
      } else if (const std::optional<int32_t> v = count32(field, num, str)) {
        Dims& d = dimsOf(p_.events.back());
        (dim_key_ == "grid" ? d.grid : d.block)[dim_i_] = *v;
      }
      ++dim_i_;
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
      meta_.cat_text = e.cat == Cat::Other ? *str : std::string();
      meta_.mtia_ccp = e.cat == Cat::Kernel && *str == "mtia_ccp_events";
      if (*str == "step") p_.trainscope_export = true;  // our Chrome export's step rows (older exports)
    } else if (key_ == "name") e.name = p_.intern(*str);
    else if (key_ == "tid" || key_ == "pid") {
      const std::optional<int64_t> v = processOrThreadId(num, num_text, str);
      if (!v) refuse(key_, kindOf(num, str));
      if (key_ == "pid" && v) meta_.pid = *v, meta_.has_pid = true;
      if (key_ == "tid") e.tid = v.value_or(0), meta_.has_tid = v.has_value();
    } else if (key_ == "args") {
      refuse("args", kindOf(num, str));
    } else if (key_ == "ts" || key_ == "dur") {
      int64_t ns = 0;
      if (!microsToNs(*num_text, ns)) e.bad_time = true;
      (key_ == "ts" ? e.ts : e.dur) = ns;
      (key_ == "ts" ? e.has_ts : e.has_dur) = true;
    }
  }

  // A pid or a tid as the profiler meant it. Kineto writes them as int32: one written unsigned
  // (4294967291 for -5; no Linux id reaches 2^31) reads as the negative number, and so does one past
  // int64 (up to 2^64-1: its two's complement). Older traces name GPU rows "stream 7": the stream
  // number. Other text ("Spans"), a fraction or a number past 2^64 is none.
  std::optional<int64_t> processOrThreadId(const int64_t* num, const std::string* num_text,
                                           const std::string* str) const {
    if (str) {
      static const std::string prefix = "stream ";
      if (str->size() > prefix.size() && str->size() <= prefix.size() + 9 && str->compare(0, prefix.size(), prefix) == 0 &&
          str->find_first_not_of("0123456789", prefix.size()) == std::string::npos)
        return std::stoll(str->substr(prefix.size()));
      return std::nullopt;
    }
    if (!num || !num_text || num_kind_ == Num::Fraction) return std::nullopt;
    if (num_kind_ == Num::TooBig) {  // past int64: its two's complement, up to 2^64-1
      const bool digits = !num_text->empty() && num_text->find_first_not_of("0123456789") == std::string::npos;
      errno = 0;
      const unsigned long long u = digits ? std::strtoull(num_text->c_str(), nullptr, 10) : 0;
      if (!digits || errno != 0) return std::nullopt;
      return int64_t(u);
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
    const Arg a = arg_;
    if (a == Arg::Other) return;
    const std::string& k = key_;
    if (a == Arg::Finished) {  // a boolean (boolean()); anything else is refused and reads as finished
      refuse("args." + k, kindOf(num, str));
      return;
    }
    if (a == Arg::Stream) meta_.stream_arg = true;
    if (a == Arg::Registers || a == Arg::Shared) {
      if (const std::optional<int32_t> v = count32("args." + k, num, str))
        (a == Arg::Shared ? dimsOf(e).shared : dimsOf(e).registers) = *v;
    } else if (intArg(a)) {
      const std::optional<int64_t> v = integer("args." + k, num, str);
      if (!v) return;
      switch (a) {
        case Arg::Correlation: e.correlation = *v; break;
        case Arg::Device: e.device = *v; break;
        case Arg::Stream: e.stream = *v; break;
        case Arg::Seq: e.seq = *v; break;
        case Arg::Bytes: e.bytes = *v; break;
        case Arg::InNelems: commOf(e).in = *v; break;
        case Arg::OutNelems: commOf(e).out = *v; break;
        case Arg::GroupSize: commOf(e).group_size = *v; break;
        case Arg::TotalAllocated: e.total_allocated = *v; break;
        case Arg::DeviceType:
          if (*v >= 0 && *v <= INT32_MAX) e.device_type = int32_t(*v);
          else refuse("args." + k, "out of range (0 to 2^31-1)");
          break;
        default: meta_.sort = *v; break;  // sort_index: metadata events
      }
    } else if (!str) {  // text (or an array's key) holding a scalar of another type
      if (a == Arg::Name) meta_.bad_name = kindOf(num, str);  // counted when the event names a thread or a process
      else refuse("args." + k, kindOf(num, str));
    } else if (a == Arg::Name) {
      meta_.text = *str;  // metadata events: the thread's or the process's name
    } else if (a == Arg::Collective) {
      commOf(e).op = p_.intern(*str);
    } else if (a == Arg::Dtype) {
      commOf(e).dtype = p_.intern(*str);
    } else if (a == Arg::GroupDesc || (a == Arg::GroupName && commOf(e).group == kNone)) {
      commOf(e).group = p_.intern(*str);
    } else if (a == Arg::Grid || a == Arg::Block || a == Arg::InputDims) {
      refuse("args." + k, "a string");
    }
  }

  // Only complete events with a time are kept; the rest give their slot back. Metadata events that
  // name or order a thread or a process are kept apart (the fields may come in any order).
  void finishEvent() {
    Event& e = p_.events.back();
    bool kept = false;
    if (meta_.mtia_ccp && e.name != kNone && p_.names[e.name].rfind("dma", 0) == 0) e.cat = Cat::Memcpy;  // as HTA
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
      if (auto it = kinds.find(p_.names[e.name]); it != kinds.end()) {
        p_.meta.push_back(Meta{it->second, meta_.pid, e.tid, std::move(meta_.text), meta_.sort});
        kept = true;
        if (!meta_.bad_name.empty()) refuse("args.name", meta_.bad_name);
      }
    }
    // An event of a category not read: counted when it ran on a device (a stream, or a GPU's pid),
    // once the file is read. cuda_sync marks a wait, not work (HTA leaves it out as well).
    if (e.cat == Cat::Other && e.complete && e.has_ts && e.has_dur && !meta_.cat_text.empty() && meta_.cat_text != "cuda_sync")
      ++other_[std::make_tuple(meta_.cat_text, meta_.has_pid, meta_.pid, meta_.stream_arg)];
    static const std::string memory_name = "[memory]";
    if (!e.complete && !meta_.is_meta && e.has_ts && e.name != kNone && p_.names[e.name] == memory_name) {
      // profile_memory's allocation or free (ph "i"): kept apart, its time checked when written
      p_.memory.push_back(MemoryEvent{e.ts, e.total_allocated, e.bytes, e.device, std::max(e.device_type, 0), e.bad_time});
      kept = true;
      p_.events.pop_back();
    } else if (!e.complete || !e.has_ts || !e.has_dur || (e.cat == Cat::Other && e.comm < 0)) {
      p_.events.pop_back();
    } else {
      kept = true;
    }
    if (kept)
      for (const std::string& r : meta_.refused) ++p_.refused[r];
  }

  // What only the whole file tells: which of the unread categories' events ran on a GPU's pid.
  void finishParse() {
    for (const auto& [key, n] : other_) {
      const auto& [cat, has_pid, pid, stream] = key;
      if (stream || (has_pid && p_.gpu_pids.count(pid))) p_.ignored_device[cat] += n;
    }
    other_.clear();
  }

  // The event's pid (numeric: Kineto also writes "Spans", "Traces", ""), and what a metadata event
  // carries, gathered while its object is read.
  struct MetaCapture {
    int64_t pid = 0;
    bool has_pid = false, is_meta = false, has_tid = false;
    std::string text;
    std::optional<int64_t> sort;
    std::vector<std::string> refused;  // "field: kind" of the values left out
    std::string bad_name;              // args.name of the wrong type (a metadata event's name)
    std::string cat_text;              // a category not read
    bool mtia_ccp = false, stream_arg = false;
  };
  enum class Num : uint8_t { Int, Fraction, TooBig };

  Parsed& p_;
  const std::string& path_;
  MetaCapture meta_;
  Num num_kind_ = Num::Int;  // the number being read
  Arg arg_ = Arg::Other;     // the args key being read
  std::map<std::tuple<std::string, bool, int64_t, bool>, int64_t> other_;  // (category, has pid, pid, stream arg)
  std::vector<Ctx> stack_;
  std::string key_, dim_key_, shapes_;
  int type_i_ = 0;  // the entry of args."Input type" being read
  size_t capture_depth_ = 0;
  int dim_i_ = 0;
};

}  // namespace

Parsed parseKineto(std::istream& in, const std::string& path) {
  Parsed p;
  Reader reader(p, path);
  nlohmann::json::sax_parse(in, &reader, nlohmann::json::input_format_t::json, /*strict=*/true);
  return p;
}

}  // namespace trainscope::rundb::importers::kineto
