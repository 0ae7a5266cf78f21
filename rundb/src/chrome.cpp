// chrome.cpp — see chrome.h. Streams the JSON out table by table through the reader.
#include "trainscope/rundb/chrome.h"
#include "trainscope/common/json_text.h"
#include "trainscope/rundb/report.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <climits>
#include <fstream>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/rundb/summary.h"
#include "trainscope/rundb/reader.h"

namespace trainscope::rundb {
namespace {

constexpr const char* kHeader = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[";

// Chrome thread ids, one per (rank, kind, id), handed out in order of first use; named by kind, or
// by the name the threads table holds for that thread or stream.
class Lanes {
 public:
  enum Kind { kHost = 0, kStream = 1, kCollectives = 2, kAnnotations = 3 };
  explicit Lanes(RunReader& reader) {
    for (const ThreadName& t : reader.threads()) {
      if (t.name == kNoString || t.kind == int32_t(ThreadKind::Process)) continue;
      names_.try_emplace({t.rank, t.kind == int32_t(ThreadKind::Stream) ? kStream : kHost, t.tid}, reader.string(t.name));
    }
  }
  int64_t tid(int64_t rank, Kind kind, int64_t id) {
    auto [it, fresh] = ids_.try_emplace({rank, kind, id}, int64_t(ids_.size()) + 1);
    return it->second;
  }
  template <class F>
  void forEach(F f) const {
    for (const auto& [key, tid] : ids_) {
      const auto [rank, kind, id] = key;
      if (kind == kCollectives) {
        f(rank, tid, std::string("collectives"));
        continue;
      }
      const int named = kind == kAnnotations ? kStream : kind;
      const auto it = names_.find({rank, named, id});
      std::string name = it != names_.end() ? it->second : (named == kHost ? "thread " : "stream ") + std::to_string(id);
      f(rank, tid, kind == kAnnotations ? name + " annotations" : name);
    }
  }

 private:
  std::map<std::tuple<int64_t, int, int64_t>, int64_t> ids_;
  std::map<std::tuple<int64_t, int, int64_t>, std::string> names_;  // streams by stream id (any device)
};

// The JSON being written: events separated by commas, times relative to the first event.
class ChromeWriter {
 public:
  // Time zero at the first event: small numbers. A difference of int64 nanoseconds divided by 1000 is
  // printed as its exact decimal (to the nanosecond), which `import` reads back exactly.
  ChromeWriter(std::ostream& out, int64_t t0) : out_(out), t0_(t0) {}

  double us(int64_t ns) const { return double(spanNs(t0_, ns)) / 1000.0; }
  void emit(const nlohmann::json& e) {
    out_ << (first_ ? "\n" : ",\n") << jsonText(e);
    first_ = false;
  }
  // A complete event ("X"), from b to e.
  void complete(const std::string& name, const char* cat, int64_t pid, int64_t tid, int64_t b, int64_t e,
                nlohmann::json args = nullptr) {
    nlohmann::json j = {{"name", name}, {"cat", cat}, {"ph", "X"},        {"pid", pid},
                        {"tid", tid},   {"ts", us(b)}, {"dur", double(spanNs(b, e)) / 1000.0}};
    if (!args.is_null()) j["args"] = std::move(args);
    emit(j);
    ++stats.complete_events;
  }

  ChromeExportStats stats;

 private:
  std::ostream& out_;
  const int64_t t0_;
  bool first_ = true;
};

// Steps on tid 0 of their rank's process. Returns the ranks that hold steps.
void exportSteps(RunReader& reader, ChromeWriter& w, std::set<int64_t>& ranks) {
  for (const Step& s : reader.steps()) {
    ranks.insert(s.rank);
    int64_t step_end = 0;  // saturated: a damaged file may hold any step time
    if (__builtin_add_overflow(s.start_ns, s.step_time_ns, &step_end)) step_end = s.step_time_ns > 0 ? INT64_MAX : INT64_MIN;
    const nlohmann::json loss = s.loss_recorded ? nlohmann::json(s.loss) : nlohmann::json(nullptr);  // null: none given
    w.complete("step " + std::to_string(s.step), "step", s.rank, 0, s.start_ns, step_end, {{"loss", loss}});
  }
}

// Ranges and host ops on their threads; GPU annotations on a row of their own, handed out before the
// stream's: drawn above its kernels.
void exportHostRowsAndAnnotations(RunReader& reader, Lanes& lanes, ChromeWriter& w, std::set<int64_t>& ranks) {
  reader.forEach<Range>([&](const Range& r) {
    ranks.insert(r.rank);
    w.complete(reader.string(r.name), "range", r.rank, lanes.tid(r.rank, Lanes::kHost, r.tid), r.start_ns, r.end_ns);
  });
  reader.forEach<HostOp>([&](const HostOp& o) {
    w.complete(reader.string(o.name), "op", o.rank, lanes.tid(o.rank, Lanes::kHost, o.tid), o.start_ns, o.end_ns);
  });
  reader.forEach<GpuAnnotation>([&](const GpuAnnotation& a) {
    ranks.insert(a.rank);
    w.complete(reader.string(a.name), "gpu_annotation", a.rank, lanes.tid(a.rank, Lanes::kAnnotations, a.stream),
               a.start_ns, a.end_ns);
  });
}

// Launch → kernel flows need the kernels by (rank, correlation): one API call may launch several
// (a CUDA graph), so the map holds every kernel of a correlation id.
using Launched = std::unordered_multimap<uint64_t, std::pair<int64_t, int64_t>>;  // key → (chrome tid, start)
uint64_t launchKey(int64_t rank, int64_t corr) { return (uint64_t(rank) << 40) ^ uint64_t(corr); }

// Kernels, copies and sets on their streams' rows. Returns the kernels by launch key.
Launched exportDeviceRows(RunReader& reader, Lanes& lanes, ChromeWriter& w) {
  Launched launched;
  reader.forEach<Kernel>([&](const Kernel& k) {
    const int64_t tid = lanes.tid(k.rank, Lanes::kStream, k.stream);
    w.complete(reader.string(k.name), "kernel", k.rank, tid, k.start_ns, k.end_ns,
               {{"correlation", k.correlation},
                {"grid", {k.grid[0], k.grid[1], k.grid[2]}},
                {"block", {k.block[0], k.block[1], k.block[2]}}});
    if (k.correlation >= 0) launched.emplace(launchKey(k.rank, k.correlation), std::make_pair(tid, k.start_ns));
  });
  reader.forEach<Memcpy>([&](const Memcpy& m) {
    w.complete("memcpy", "memcpy", m.rank, lanes.tid(m.rank, Lanes::kStream, m.stream), m.start_ns, m.end_ns,
               {{"kind", m.kind}, {"bytes", m.bytes}});
  });
  reader.forEach<Memset>([&](const Memset& m) {
    w.complete("memset", "memset", m.rank, lanes.tid(m.rank, Lanes::kStream, m.stream), m.start_ns, m.end_ns,
               {{"bytes", m.bytes}});
  });
  return launched;
}

// API calls on their threads, each with a flow (an "s" and an "f" event) to every kernel it launched.
void exportApiCalls(RunReader& reader, Lanes& lanes, const Launched& launched, ChromeWriter& w) {
  int64_t flow_id = 0;
  reader.forEach<ApiCall>([&](const ApiCall& a) {
    const int64_t tid = lanes.tid(a.rank, Lanes::kHost, a.tid);
    w.complete(reader.string(a.name), "cuda_api", a.rank, tid, a.start_ns, a.end_ns, {{"correlation", a.correlation}});
    if (a.correlation < 0) return;
    auto [b, e] = launched.equal_range(launchKey(a.rank, a.correlation));
    for (auto it = b; it != e; ++it) {
      const int64_t id = ++flow_id;
      w.emit({{"name", "launch"}, {"cat", "flow"}, {"ph", "s"}, {"id", id}, {"pid", a.rank}, {"tid", tid},
              {"ts", w.us(a.start_ns)}});
      w.emit({{"name", "launch"}, {"cat", "flow"}, {"ph", "f"}, {"bp", "e"}, {"id", id}, {"pid", a.rank},
              {"tid", it->second.first}, {"ts", w.us(it->second.second)}});
      ++w.stats.flow_pairs;
    }
  });
}

// Each collective on its rank's `collectives` row, with its bus bandwidth over the transfer (the wait
// for the last member left out: linkCollectives in report.h, the report's and the viewer's rule) and,
// for a copy linked to its call, its wait, transfer and the call's skew.
void exportCollectives(RunReader& reader, Lanes& lanes, ChromeWriter& w) {
  const std::vector<Collective> collectives = reader.collectives();
  const CollectiveLinks links = linkRunCollectives(collectives, reader.meta(), reader.steps());
  for (size_t i = 0; i < collectives.size(); ++i) {
    const Collective& c = collectives[i];
    const LinkedCall* call = links.call_of[i] >= 0 ? &links.calls[size_t(links.call_of[i])] : nullptr;
    const CallTiming t = callTiming(c, call);
    nlohmann::json args = {{"bytes", c.bytes}};
    const bool recv_cut = !c.cut && call && call->p2p && call->cut;  // a send whose receive was cut
    if (c.cut) args["cut"] = "the trace's end cut this call: its end, transfer and bandwidth are unknown";
    else if (recv_cut) args["cut"] = "the trace's end cut the receive: this send's transfer and bandwidth are unknown";
    else args["busbw_GBps"] = t.busbw * 1e-9;
    if (call) {
      args["wait_us"] = double(t.wait_ns) * 1e-3;
      if (!c.cut && !recv_cut) args["transfer_us"] = double(t.transfer_ns) * 1e-3;
      args["skew_us"] = double(call->skewNs()) * 1e-3;
    }
    w.complete(c.op + " (" + c.group + ")", "collective", c.rank, lanes.tid(c.rank, Lanes::kCollectives, 0), c.start_ns,
               c.end_ns, std::move(args));
  }
}

// Counters ("C"), then the metadata ("M") naming each rank's process and each row.
void exportCountersAndNames(RunReader& reader, const Lanes& lanes, const std::set<int64_t>& ranks, ChromeWriter& w) {
  reader.forEach<Counter>([&](const Counter& c) {
    w.emit({{"name", reader.string(c.name)}, {"ph", "C"}, {"pid", c.rank}, {"ts", w.us(c.ts_ns)},
            {"args", {{"value", c.value}}}});
    ++w.stats.counter_events;
  });
  for (int64_t r : ranks)
    w.emit({{"name", "process_name"}, {"ph", "M"}, {"pid", r}, {"args", {{"name", "rank " + std::to_string(r)}}}});
  lanes.forEach([&](int64_t pid, int64_t tid, const std::string& name) {
    w.emit({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}});
  });
}

}  // namespace

// The recipe: steps → host rows → device rows → API calls with their launch flows → collectives →
// counters and names. Chrome tids are handed out in this order of first use.
ChromeExportStats exportChrome(const std::string& path, const std::string& out_path, bool overwrite) {
  RunReader reader(path);
  // Never the input (nor its -wal/-shm/-journal); an existing file only when it starts with our own
  // header (an earlier export), or with --overwrite.
  files::OutputRule rule{"--chrome", {path}, overwrite, files::startsWith(kHeader), "trainscope Chrome export"};
  files::AtomicFile file(out_path, rule);  // a random name beside it, moved into place at the end
  std::ostream& out = file.stream();
  ChromeWriter w(out, reader.firstTime().value_or(0));
  out << kHeader;
  Lanes lanes(reader);
  std::set<int64_t> ranks;
  exportSteps(reader, w, ranks);
  exportHostRowsAndAnnotations(reader, lanes, w, ranks);
  const Launched launched = exportDeviceRows(reader, lanes, w);
  exportApiCalls(reader, lanes, launched, w);
  exportCollectives(reader, lanes, w);
  exportCountersAndNames(reader, lanes, ranks, w);
  // otherData names the exporter: `import` refuses the file (its run database is the source).
  out << "\n],\"otherData\":{\"exporter\":\"trainscope\"}}\n";
  file.commit();
  return w.stats;
}

}  // namespace trainscope::rundb
