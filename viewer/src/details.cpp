// details.cpp — an event's full row, and the synthetic trace (see details.h).
#include "trainscope/viewer/details.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string_view>

#include "trainscope/rundb/range_names.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/store.h"
#include "trainscope/viewer/comm.h"
#include "trainscope/viewer/names.h"
#include "trainscope/viewer/view_state.h"

namespace trainscope::viewer {

namespace {

std::string num(int64_t v) { return std::to_string(v); }
std::string bw(double bytes_per_s) { return formatBytes(bytes_per_s) + "/s"; }

// The row of `e` (same start and end on the same rank), copied out of the query's result.
template <class Row>
std::optional<Row> find(const std::vector<Row>& rows, const Event& e) {
  for (const auto& r : rows)
    if (r.start_ns == e.start && r.end_ns == e.end) return r;
  return std::nullopt;
}

std::string pct(int64_t part, int64_t whole) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", whole > 0 ? 100.0 * double(part) / double(whole) : 0.0);
  return b;
}

// A linked collective: its copies, the skew of their arrivals, this copy's wait and transfer, and the
// bus bandwidth over the transfer alone (rundb::callTiming, the report's rule).
void linkedFields(const Trace& trace, const CommCall& call, const EventRef& ref, const rundb::Collective& c, Fields& f) {
  std::string ranks;  // the first eight and the last of a large group
  for (size_t i = 0; i < call.members.size(); ++i) {
    if (i == 8 && call.members.size() > 9) ranks += ", ...", i = call.members.size() - 1;
    ranks += (ranks.empty() ? "" : ", ") + num(trace.tracks[call.members[i].track].rank);
  }
  const MemberTiming m = memberTiming(trace, call, ref);
  const int64_t whole = trace.event(ref).duration();
  // This copy's wait first, then the call's skew and transfer: what a reader looks for, above the fold.
  f.push_back({"wait", formatExact(m.wait_ns) + " (" + pct(m.wait_ns, whole) + " of the call)"});
  f.push_back({"arrival skew", formatExact(call.link.skewNs()) + " (last arrival: rank " + num(m.last_rank) + ")"});
  if (c.cut || (call.link.p2p && call.link.cut)) {  // this copy, or a send's receive, the trace's end cut
    f.push_back({"transfer", c.cut ? "unknown (the trace's end cut this call)"
                                   : "unknown (the trace's end cut the receive)"});
  } else {
    f.push_back({"transfer", formatExact(m.transfer_ns) + (call.link.p2p ? " (to the receive's end)" : "")});
    f.push_back({"bus bandwidth (transfer)", bw(rundb::callTiming(c, &call.link).busbw)});
  }
  f.push_back({call.link.p2p ? "send -> recv" : "linked ranks",
               ranks + (call.link.p2p ? "" : " (" + num(int64_t(call.members.size())) + " of " + num(c.group_size) + ")")});
}

// The fields every event has: its name (and the mangled one, when demangling changed it), kind,
// rank, start and duration.
Fields commonFields(const Trace& trace, const Track& t, const Event& e) {
  const std::string& raw = trace.names[e.name];
  const std::string name = demangle(raw);
  Fields f = {{"name", name},
              {"kind", kindName(e.kind)},
              {"rank", num(t.rank)},
              {"start", formatExact(e.start - trace.begin) + " from the start (" + num(e.start) + " ns)"},
              {"duration", formatExact(e.duration()) + (e.duration() >= 1000 ? " (" + num(e.duration()) + " ns)" : "")}};
  if (name != raw) f.insert(f.begin() + 1, {"mangled", raw});
  return f;
}

// The CPU tables' own columns: a range's, a host op's, an API call's.
void rangeFields(rundb::RunReader& rd, int64_t rank, const Event& e, Fields& f) {
  const auto r = find(rd.startingAt<rundb::Range>(rank, e.start), e);
  if (!r) return;
  f.push_back({"domain", rd.string(r->domain)});
  f.push_back({"thread", num(r->tid)});
  f.push_back({"depth", num(r->depth)});
  f.push_back({"push/pop", r->kind == 0 ? "push/pop" : "start/end"});
}

void hostOpFields(rundb::RunReader& rd, int64_t rank, const Event& e, Fields& f) {
  const auto r = find(rd.startingAt<rundb::HostOp>(rank, e.start), e);
  if (!r) return;
  f.push_back({"thread", num(r->tid)});
  f.push_back({"sequence", num(r->seq)});
  if (r->shapes != rundb::kNoString) f.push_back({"input shapes", rd.string(r->shapes)});
}

void apiCallFields(rundb::RunReader& rd, int64_t rank, const Event& e, Fields& f) {
  const auto r = find(rd.startingAt<rundb::ApiCall>(rank, e.start), e);
  if (!r) return;
  f.push_back({"thread", num(r->tid)});
  f.push_back({"correlation", num(r->correlation)});
  f.push_back({"api", r->kind == 0 ? "runtime" : "driver"});
}

// The device tables' own columns: a kernel's launch, a copy's bytes and bandwidth, a set's value.
void kernelFields(rundb::RunReader& rd, int64_t rank, const Event& e, Fields& f) {
  const auto r = find(rd.startingAt<rundb::Kernel>(rank, e.start), e);
  if (!r) return;
  f.push_back({"device", num(r->device)});
  f.push_back({"stream", num(r->stream)});
  f.push_back({"correlation", num(r->correlation)});
  f.push_back({"grid", num(r->grid[0]) + " x " + num(r->grid[1]) + " x " + num(r->grid[2])});
  f.push_back({"block", num(r->block[0]) + " x " + num(r->block[1]) + " x " + num(r->block[2])});
  f.push_back({"registers", num(r->registers)});
  f.push_back({"shared memory", formatBytes(double(r->shared_bytes))});
  if (r->collective_seq >= 0) f.push_back({"collective seq", num(r->collective_seq)});
}

void memcpyFields(rundb::RunReader& rd, int64_t rank, const Event& e, Fields& f) {
  const auto r = find(rd.startingAt<rundb::Memcpy>(rank, e.start), e);
  if (!r) return;
  f.push_back({"device", num(r->device)});
  f.push_back({"stream", num(r->stream)});
  f.push_back({"correlation", num(r->correlation)});
  f.push_back({"bytes", formatBytes(double(r->bytes)) + " (" + num(r->bytes) + ")"});
  if (e.duration() > 0) f.push_back({"bandwidth", bw(double(r->bytes) / (double(e.duration()) * 1e-9))});
}

void memsetFields(rundb::RunReader& rd, int64_t rank, const Event& e, Fields& f) {
  const auto r = find(rd.startingAt<rundb::Memset>(rank, e.start), e);
  if (!r) return;
  f.push_back({"device", num(r->device)});
  f.push_back({"stream", num(r->stream)});
  f.push_back({"correlation", num(r->correlation)});
  f.push_back({"bytes", formatBytes(double(r->bytes)) + " (" + num(r->bytes) + ")"});
  f.push_back({"value", num(r->value)});
}

// A collective's row, its bandwidths, and when it is linked across ranks its copies and timing — the
// wait, skew and transfer (or why it is not linked) right under its name, before the row's columns
// and the start and duration, so that a short Details panel shows them without scrolling.
void collectiveFields(rundb::RunReader& rd, const Trace& trace, const EventRef& ref, int64_t rank, const Event& e,
                      Fields& f) {
  for (const auto& c : rd.startingAt<rundb::Collective>(rank, e.start)) {
    if (c.start_ns != e.start || c.end_ns != e.end) continue;
    Fields linked;
    if (const CommCall* call = trace.comm.callOf(ref)) linkedFields(trace, *call, ref, c, linked);
    else  // no wait or skew is known: said so, with why, never shown as 0
      linked.push_back({"linked", "not linked: " + rundb::notLinkedReason(c, trace.comm.unlinked, trace.comm.layout)});
    const size_t after_name = f.size() > 1 && f[1].first == "mangled" ? 2 : 1;
    f.insert(f.begin() + std::ptrdiff_t(after_name), linked.begin(), linked.end());
    f.push_back({"op", c.op});
    f.push_back({"group", c.group});
    f.push_back({"group size", num(c.group_size)});
    f.push_back({"sequence", num(c.seq)});
    f.push_back({"bytes", formatBytes(double(c.bytes)) + " (" + num(c.bytes) + ")"});
    if (c.cut) {  // its end is the last time the trace recorded on the rank, not the call's
      f.push_back({"cut", "the trace's end cut this call: it ends at the last event the trace recorded on this rank; "
                          "its duration and bandwidth are unknown"});
      return;
    }
    f.push_back({"algorithm bandwidth", bw(c.algbw())});
    f.push_back({"bus bandwidth", bw(c.busbw())});
    return;
  }
}

// A step's row (loaded with the trace): loss, throughput, MFU, peak memory. An imported trace's step
// has no loss or tokens, and no peak without profile_memory: "not recorded", never 0.
void stepFields(const Trace& trace, int64_t rank, const Event& e, Fields& f) {
  static const std::string none = "not recorded";
  for (const auto& s : trace.steps) {
    if (s.rank != rank || s.start_ns != e.start) continue;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.4f", s.loss);
    const bool counted = s.tokens > 0;
    // A NULL loss: a run's NaN (SQLite stores NaN as NULL), or a probe row that gave none.
    const auto source = trace.meta.find("source");
    const bool run = source == trace.meta.end() || source->second == "run";
    f.push_back({"loss", !s.loss_recorded ? (run ? std::string("NaN (not finite)") : none)
                         : counted || s.loss != 0 ? std::string(buf) : none});
    f.push_back({"tokens", counted ? num(s.tokens) : none});
    std::snprintf(buf, sizeof buf, "%.0f", s.tokens_per_s);
    f.push_back({"tokens/s", counted ? std::string(buf) : none});
    if (s.mfu) {
      std::snprintf(buf, sizeof buf, "%.1f%%", *s.mfu * 100);
      f.push_back({"MFU", buf});
    }
    f.push_back({"peak memory", s.peak_bytes > 0 ? formatBytes(double(s.peak_bytes)) : none});
    if (s.skipped) f.push_back({"skipped", "yes (non-finite gradient)"});
    return;
  }
}

// The synthetic trace's ops: per layer and pass, each op and (on a device) its kernel.
constexpr int kOps = 4;
const char* const kOpNames[kOps] = {"aten::mm", "aten::add", "aten::gelu", "aten::layer_norm"};
const char* const kKernelNames[kOps] = {"ampere_sgemm_128x64_tn", "vectorized_elementwise_kernel<add>",
                                        "vectorized_elementwise_kernel<gelu>", "layer_norm_kernel"};
const int64_t kOpNs[kOps] = {30'000, 8'000, 9'000, 12'000};
const int64_t kKernelNs[kOps] = {26'000, 5'000, 6'000, 9'000};
constexpr int64_t kTid = 4242, kStream = 7;

// One step's batched rows, written together.
struct StepRows {
  std::vector<rundb::Range> ranges;
  std::vector<rundb::HostOp> hops;
  std::vector<rundb::ApiCall> apis;
  std::vector<rundb::Kernel> ks;
};

// Writes the synthetic trace rank by rank and step by step, keeping the CPU thread's clock (t_) and
// the stream's (gpu_: a kernel starts once the launch and the previous kernel are done).
class SyntheticWriter {
 public:
  SyntheticWriter(rundb::RunStore& store, const SyntheticOptions& o) : store_(store), o_(o) {
    const int64_t per_step = std::max<int64_t>(1, o.events_per_rank / std::max(1, o.steps));
    // Events per layer and pass: the layer range, and per op: the op, (launch, kernel).
    const int64_t per_layer = 1 + kOps * (o.kernels ? 3 : 1);
    layers_ = std::max<int64_t>(1, (per_step - 12) / (2 * per_layer));
  }

  void rank(int r) {
    rundb::RankInfo info;
    info.rank = r;
    info.host = "node0";
    info.device = o_.kernels ? "cuda:" + std::to_string(r) : "cpu";
    store_.putRank(info);
    r_ = r;
    slow_ = 1.0 + 0.06 * r;  // later ranks a little slower: a straggler to find
    t_ = o_.start_ns;
    gpu_ = t_;
    for (int s = 0; s < o_.steps; ++s) step(s);
  }

 private:
  // step > (a copy and a set) > forward, backward > gradient sync > optimizer; the memory counter,
  // and the step's row.
  void step(int s) {
    store_.begin();
    StepRows rows;
    const int64_t step_start = t_;
    rows.ranges.push_back({});  // the step range, closed at the end
    t_ += 2'000;
    if (o_.kernels) {
      store_.put(rundb::Memcpy{t_, t_ + 40'000, 0, kStream, -1, int(rundb::MemcpyKind::HtoD), 1 << 20, r_});
      store_.put(rundb::Memset{t_ + 40'000, t_ + 42'000, 0, kStream, -1, 4096, 0, r_});
      gpu_ = std::max(gpu_, t_ + 42'000);
    }
    for (const char* name : {rundb::names::kForward, rundb::names::kBackward}) pass(name, rows);
    gradSync(s, rows);
    const int64_t opt = t_;
    t_ += 50'000;
    rows.ranges.push_back({opt, t_, intern(rundb::names::kOptimizer), intern("trainscope"), kTid, 1, 0, r_});
    t_ += 1'000;
    rows.ranges[0] = {step_start, t_, intern(rundb::names::kStep), intern("trainscope"), kTid, 0, 0, r_};
    store_.put(rundb::Counter{step_start, intern(rundb::names::kMemoryCounter), double(1 << 30), r_});
    store_.put(rundb::Counter{(step_start + t_) / 2, intern(rundb::names::kMemoryCounter), double(3 << 29), r_});
    store_.put(rows.ranges);
    store_.put(rows.hops);
    if (o_.kernels) {
      store_.put(rows.apis);
      store_.put(rows.ks);
    }
    store_.commit();
    putStep(s, step_start);
    t_ += 2'000;
  }

  // A pass's range over its layers' ranges, each over kOps ops.
  void pass(const char* name, StepRows& rows) {
    const int64_t pass_start = t_;
    t_ += 1'000;
    for (int64_t l = 0; l < layers_; ++l) {
      const int64_t layer_start = t_;
      t_ += 500;
      for (int k = 0; k < kOps; ++k) op(k, rows);
      rows.ranges.push_back({layer_start, t_, intern(rundb::names::kLayer), intern("trainscope"), kTid, 2, 0, r_});
      t_ += 500;
    }
    rows.ranges.push_back({pass_start, t_, intern(name), intern("trainscope"), kTid, 1, 0, r_});
  }

  // An op, and on a device its launch and kernel (linked by a correlation id).
  void op(int k, StepRows& rows) {
    const int64_t d = int64_t(double(kOpNs[k]) * slow_);
    rows.hops.push_back({t_, t_ + d, intern(kOpNames[k]), kTid, -1, rundb::kNoString, r_});
    if (o_.kernels) {
      const int64_t a = t_ + d / 4;
      rows.apis.push_back({a, a + 4'000, kTid, intern("cudaLaunchKernel"), corr_, 0, r_});
      const int64_t ks0 = std::max(a + 5'000, gpu_);
      gpu_ = ks0 + int64_t(double(kKernelNs[k]) * slow_);
      rundb::Kernel kr{ks0, gpu_, 0, kStream, intern(kKernelNames[k]), corr_};
      kr.grid = {128, 1, 1};
      kr.block = {256, 1, 1};
      kr.registers = 64;
      kr.rank = r_;
      rows.ks.push_back(kr);
      ++corr_;
    }
    t_ += d + 300;
  }

  // Gradient all-reduce: its range, a collective and its NCCL kernel, once the stream is done.
  void gradSync(int s, StepRows& rows) {
    const int64_t sync = std::max(t_, gpu_);
    const int64_t sync_end = sync + 120'000;
    rows.ranges.push_back({t_, sync_end, intern(rundb::names::kGradSync), intern("trainscope"), kTid, 1, 0, r_});
    if (o_.kernels) {
      rundb::Kernel nk{sync, sync_end, 0, kStream, intern("ncclDevKernel_AllReduce_Sum_f32_RING_LL"), -1};
      nk.rank = r_;
      rows.ks.push_back(nk);
      gpu_ = sync_end;
    }
    rundb::Collective c;
    c.op = "all_reduce";
    c.group = "dp";
    c.rank = r_;
    c.group_size = o_.ranks;
    c.seq = s;
    c.bytes = 64 << 20;
    c.start_ns = sync;
    c.end_ns = sync_end;
    store_.put(c);
    t_ = sync_end + 1'000;
  }

  void putStep(int s, int64_t step_start) {
    rundb::Step st;
    st.rank = r_;
    st.step = s;
    st.loss = 4.0 - 0.1 * s;
    st.tokens = 8192;
    st.start_ns = step_start;
    st.step_time_ns = t_ - step_start;
    st.tokens_per_s = double(st.tokens) / (double(st.step_time_ns) * 1e-9);
    st.peak_bytes = int64_t(3) << 29;
    store_.appendStep(st);
  }

  rundb::StringId intern(std::string_view s) { return store_.intern(s); }

  rundb::RunStore& store_;
  const SyntheticOptions& o_;
  int64_t layers_ = 1;
  int r_ = 0;
  double slow_ = 1.0;
  int64_t t_ = 0, gpu_ = 0;
  int64_t corr_ = 1;  // across ranks, as a tracer's would be
};

}  // namespace

Fields eventDetails(rundb::RunReader& rd, const Trace& trace, const EventRef& ref) {
  const Event& e = trace.event(ref);
  const int64_t rank = trace.tracks[ref.track].rank;
  Fields f = commonFields(trace, trace.tracks[ref.track], e);
  switch (e.kind) {
    case EventKind::Range: rangeFields(rd, rank, e, f); break;
    case EventKind::HostOp: hostOpFields(rd, rank, e, f); break;
    case EventKind::ApiCall: apiCallFields(rd, rank, e, f); break;
    case EventKind::Kernel:
    case EventKind::CommKernel: kernelFields(rd, rank, e, f); break;
    case EventKind::Memcpy: memcpyFields(rd, rank, e, f); break;
    case EventKind::Memset: memsetFields(rd, rank, e, f); break;
    case EventKind::Collective: collectiveFields(rd, trace, ref, rank, e, f); break;
    case EventKind::Step: stepFields(trace, rank, e, f); break;
  }
  return f;
}

void writeSyntheticTrace(const std::string& path, const SyntheticOptions& o) {
  rundb::RunStore store(path, {true, "synthetic", true});
  store.setMeta("workload", "synthetic");
  store.setMeta("world_size", std::to_string(o.ranks));
  store.setMeta("device", o.kernels ? "cuda" : "cpu");
  SyntheticWriter writer(store, o);
  for (int r = 0; r < o.ranks; ++r) writer.rank(r);
  store.createIndexes();
  store.close();
}

Fields launchFields(const Trace& trace, const CorrelationIndex& correlation, const EventRef& ref) {
  const Event& e = trace.event(ref);
  const auto latency = [](const Event& api, const Event& work) {
    const int64_t ns = work.start - (api.start + api.duration());
    return (ns < 0 ? "-" : "") + formatExact(ns < 0 ? -ns : ns) + (ns < 0 ? " (the work began before its launch returned)" : "");
  };
  if (e.kind == EventKind::ApiCall) {
    const auto launched = correlation.launchedBy(ref);
    if (launched.empty()) return {};
    EventRef first = launched.front();
    for (const EventRef& r : launched)
      if (trace.event(r).start < trace.event(first).start) first = r;
    return {{"launch latency", latency(e, trace.event(first)) + " to " + demangle(trace.name(first))}};
  }
  if (e.kind != EventKind::Kernel && e.kind != EventKind::CommKernel && e.kind != EventKind::Memcpy &&
      e.kind != EventKind::Memset)
    return {};
  const auto api = correlation.launchOf(ref);
  if (!api) return {};
  return {{"launched by", trace.name(*api)}, {"launch latency", latency(trace.event(*api), e)}};
}

Fields checkpointFields(const std::vector<rundb::Checkpoint>& rows, size_t most) {
  Fields f;
  if (rows.empty()) return f;
  double bytes = 0, seconds = 0;
  for (const rundb::Checkpoint& c : rows) bytes += double(c.bytes), seconds += c.seconds;
  char b[256];
  std::snprintf(b, sizeof b, "%zu written (run --save): %.1f MiB in %.3f s in all", rows.size(), bytes / (1 << 20),
                seconds);
  f.push_back({"checkpoints", b});
  for (size_t i = rows.size() > most ? rows.size() - most : 0; i < rows.size(); ++i) {
    const rundb::Checkpoint& c = rows[i];
    std::snprintf(b, sizeof b, "%.1f MiB in %.3f s (%.1f MB/s)  ", double(c.bytes) / (1 << 20), c.seconds,
                  c.seconds > 0 ? double(c.bytes) / c.seconds * 1e-6 : 0.0);
    f.push_back({"checkpoint after step " + std::to_string(c.step), b + c.path});
  }
  return f;
}

}  // namespace trainscope::viewer
