// details.cpp — an event's full row, and the synthetic trace (see details.h).
#include "trainscope/viewer/details.h"

#include <algorithm>
#include <cstdio>
#include <optional>

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
  f.push_back({call.link.p2p ? "send -> recv" : "linked ranks",
               ranks + (call.link.p2p ? "" : " (" + num(int64_t(call.members.size())) + " of " + num(c.group_size) + ")")});
  f.push_back({"arrival skew", formatExact(call.link.skewNs()) + " (last arrival: rank " + num(m.last_rank) + ")"});
  f.push_back({"wait", formatExact(m.wait_ns) + " (" + pct(m.wait_ns, whole) + " of the call)"});
  f.push_back({"transfer", formatExact(m.transfer_ns) + (call.link.p2p ? " (to the receive's end)" : "")});
  f.push_back({"bus bandwidth (transfer)", bw(rundb::callTiming(c, &call.link).busbw)});
}

}  // namespace

Fields eventDetails(rundb::RunReader& rd, const Trace& trace, const EventRef& ref) {
  const Event& e = trace.event(ref);
  const Track& t = trace.tracks[ref.track];
  const std::string& raw = trace.names[e.name];
  const std::string name = demangle(raw);
  Fields f = {{"name", name},
              {"kind", kindName(e.kind)},
              {"rank", num(t.rank)},
              {"start", formatExact(e.start - trace.begin) + " from the start (" + num(e.start) + " ns)"},
              {"duration", formatExact(e.duration()) + (e.duration() >= 1000 ? " (" + num(e.duration()) + " ns)" : "")}};
  if (name != raw) f.insert(f.begin() + 1, {"mangled", raw});
  switch (e.kind) {
    case EventKind::Range:
      if (const auto r = find(rd.startingAt<rundb::Range>(t.rank, e.start), e)) {
        f.push_back({"domain", rd.string(r->domain)});
        f.push_back({"thread", num(r->tid)});
        f.push_back({"depth", num(r->depth)});
        f.push_back({"push/pop", r->kind == 0 ? "push/pop" : "start/end"});
      }
      break;
    case EventKind::HostOp:
      if (const auto r = find(rd.startingAt<rundb::HostOp>(t.rank, e.start), e)) {
        f.push_back({"thread", num(r->tid)});
        f.push_back({"sequence", num(r->seq)});
        if (r->shapes != rundb::kNoString) f.push_back({"input shapes", rd.string(r->shapes)});
      }
      break;
    case EventKind::ApiCall:
      if (const auto r = find(rd.startingAt<rundb::ApiCall>(t.rank, e.start), e)) {
        f.push_back({"thread", num(r->tid)});
        f.push_back({"correlation", num(r->correlation)});
        f.push_back({"api", r->kind == 0 ? "runtime" : "driver"});
      }
      break;
    case EventKind::Kernel:
    case EventKind::CommKernel:
      if (const auto r = find(rd.startingAt<rundb::Kernel>(t.rank, e.start), e)) {
        f.push_back({"device", num(r->device)});
        f.push_back({"stream", num(r->stream)});
        f.push_back({"correlation", num(r->correlation)});
        f.push_back({"grid", num(r->grid[0]) + " x " + num(r->grid[1]) + " x " + num(r->grid[2])});
        f.push_back({"block", num(r->block[0]) + " x " + num(r->block[1]) + " x " + num(r->block[2])});
        f.push_back({"registers", num(r->registers)});
        f.push_back({"shared memory", formatBytes(double(r->shared_bytes))});
        if (r->collective_seq >= 0) f.push_back({"collective seq", num(r->collective_seq)});
      }
      break;
    case EventKind::Memcpy:
      if (const auto r = find(rd.startingAt<rundb::Memcpy>(t.rank, e.start), e)) {
        f.push_back({"device", num(r->device)});
        f.push_back({"stream", num(r->stream)});
        f.push_back({"correlation", num(r->correlation)});
        f.push_back({"bytes", formatBytes(double(r->bytes)) + " (" + num(r->bytes) + ")"});
        if (e.duration() > 0) f.push_back({"bandwidth", bw(double(r->bytes) / (double(e.duration()) * 1e-9))});
      }
      break;
    case EventKind::Memset:
      if (const auto r = find(rd.startingAt<rundb::Memset>(t.rank, e.start), e)) {
        f.push_back({"device", num(r->device)});
        f.push_back({"stream", num(r->stream)});
        f.push_back({"correlation", num(r->correlation)});
        f.push_back({"bytes", formatBytes(double(r->bytes)) + " (" + num(r->bytes) + ")"});
        f.push_back({"value", num(r->value)});
      }
      break;
    case EventKind::Collective:
      for (const auto& c : rd.startingAt<rundb::Collective>(t.rank, e.start)) {
        if (c.start_ns != e.start || c.end_ns != e.end) continue;
        f.push_back({"op", c.op});
        f.push_back({"group", c.group});
        f.push_back({"group size", num(c.group_size)});
        f.push_back({"sequence", num(c.seq)});
        f.push_back({"bytes", formatBytes(double(c.bytes)) + " (" + num(c.bytes) + ")"});
        f.push_back({"algorithm bandwidth", bw(c.algbw())});
        f.push_back({"bus bandwidth", bw(c.busbw())});
        if (const CommCall* call = trace.comm.callOf(ref)) linkedFields(trace, *call, ref, c, f);
        break;
      }
      break;
    case EventKind::Step:
      for (const auto& s : trace.steps) {
        if (s.rank != t.rank || s.start_ns != e.start) continue;
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.4f", s.loss);
        f.push_back({"loss", buf});
        f.push_back({"tokens", num(s.tokens)});
        std::snprintf(buf, sizeof buf, "%.0f", s.tokens_per_s);
        f.push_back({"tokens/s", buf});
        if (s.mfu) {
          std::snprintf(buf, sizeof buf, "%.1f%%", *s.mfu * 100);
          f.push_back({"MFU", buf});
        }
        f.push_back({"peak memory", formatBytes(double(s.peak_bytes))});
        if (s.skipped) f.push_back({"skipped", "yes (non-finite gradient)"});
        break;
      }
      break;
  }
  return f;
}

void writeSyntheticTrace(const std::string& path, const SyntheticOptions& o) {
  rundb::RunStore store(path, {true, "synthetic", true});
  store.setMeta("workload", "synthetic");
  store.setMeta("world_size", std::to_string(o.ranks));
  store.setMeta("device", o.kernels ? "cuda" : "cpu");
  const int64_t per_step = std::max<int64_t>(1, o.events_per_rank / std::max(1, o.steps));
  const int kOps = 4;
  // Events per layer and pass: the layer range, and per op: the op, (launch, kernel).
  const int64_t per_layer = 1 + kOps * (o.kernels ? 3 : 1);
  const int64_t layers = std::max<int64_t>(1, (per_step - 12) / (2 * per_layer));
  const char* ops[kOps] = {"aten::mm", "aten::add", "aten::gelu", "aten::layer_norm"};
  const char* kernels[kOps] = {"ampere_sgemm_128x64_tn", "vectorized_elementwise_kernel<add>",
                               "vectorized_elementwise_kernel<gelu>", "layer_norm_kernel"};
  const int64_t op_ns[kOps] = {30'000, 8'000, 9'000, 12'000};
  const int64_t kernel_ns[kOps] = {26'000, 5'000, 6'000, 9'000};
  const int64_t tid = 4242, stream = 7;
  int64_t corr = 1;
  for (int r = 0; r < o.ranks; ++r) {
    rundb::RankInfo info;
    info.rank = r;
    info.host = "node0";
    info.device = o.kernels ? "cuda:" + std::to_string(r) : "cpu";
    store.putRank(info);
    const double slow = 1.0 + 0.06 * r;  // later ranks a little slower: a straggler to find
    int64_t t = o.start_ns;
    int64_t gpu = t;
    for (int s = 0; s < o.steps; ++s) {
      store.begin();
      std::vector<rundb::Range> ranges;
      std::vector<rundb::HostOp> hops;
      std::vector<rundb::ApiCall> apis;
      std::vector<rundb::Kernel> ks;
      const int64_t step_start = t;
      ranges.push_back({});  // the step range, closed at the end
      t += 2'000;
      if (o.kernels) {
        store.put(rundb::Memcpy{t, t + 40'000, 0, stream, -1, int(rundb::MemcpyKind::HtoD), 1 << 20, r});
        store.put(rundb::Memset{t + 40'000, t + 42'000, 0, stream, -1, 4096, 0, r});
        gpu = std::max(gpu, t + 42'000);
      }
      for (const char* pass : {rundb::names::kForward, rundb::names::kBackward}) {
        const int64_t pass_start = t;
        t += 1'000;
        for (int64_t l = 0; l < layers; ++l) {
          const int64_t layer_start = t;
          t += 500;
          for (int k = 0; k < kOps; ++k) {
            const int64_t d = int64_t(double(op_ns[k]) * slow);
            hops.push_back({t, t + d, store.intern(ops[k]), tid, -1, rundb::kNoString, r});
            if (o.kernels) {
              const int64_t a = t + d / 4;
              apis.push_back({a, a + 4'000, tid, store.intern("cudaLaunchKernel"), corr, 0, r});
              const int64_t ks0 = std::max(a + 5'000, gpu);
              gpu = ks0 + int64_t(double(kernel_ns[k]) * slow);
              rundb::Kernel kr{ks0, gpu, 0, stream, store.intern(kernels[k]), corr};
              kr.grid = {128, 1, 1};
              kr.block = {256, 1, 1};
              kr.registers = 64;
              kr.rank = r;
              ks.push_back(kr);
              ++corr;
            }
            t += d + 300;
          }
          ranges.push_back({layer_start, t, store.intern(rundb::names::kLayer), store.intern("trainscope"), tid, 2, 0, r});
          t += 500;
        }
        ranges.push_back({pass_start, t, store.intern(pass), store.intern("trainscope"), tid, 1, 0, r});
      }
      // Gradient all-reduce: a collective and its NCCL kernel.
      const int64_t sync = std::max(t, gpu);
      const int64_t sync_end = sync + 120'000;
      ranges.push_back({t, sync_end, store.intern(rundb::names::kGradSync), store.intern("trainscope"), tid, 1, 0, r});
      if (o.kernels) {
        rundb::Kernel nk{sync, sync_end, 0, stream, store.intern("ncclDevKernel_AllReduce_Sum_f32_RING_LL"), -1};
        nk.rank = r;
        ks.push_back(nk);
        gpu = sync_end;
      }
      rundb::Collective c;
      c.op = "all_reduce";
      c.group = "dp";
      c.rank = r;
      c.group_size = o.ranks;
      c.seq = s;
      c.bytes = 64 << 20;
      c.start_ns = sync;
      c.end_ns = sync_end;
      store.put(c);
      t = sync_end + 1'000;
      const int64_t opt = t;
      t += 50'000;
      ranges.push_back({opt, t, store.intern(rundb::names::kOptimizer), store.intern("trainscope"), tid, 1, 0, r});
      t += 1'000;
      ranges[0] = {step_start, t, store.intern(rundb::names::kStep), store.intern("trainscope"), tid, 0, 0, r};
      store.put(rundb::Counter{step_start, store.intern(rundb::names::kMemoryCounter), double(1 << 30), r});
      store.put(rundb::Counter{(step_start + t) / 2, store.intern(rundb::names::kMemoryCounter), double(3 << 29), r});
      store.put(ranges);
      store.put(hops);
      if (o.kernels) {
        store.put(apis);
        store.put(ks);
      }
      store.commit();
      rundb::Step st;
      st.rank = r;
      st.step = s;
      st.loss = 4.0 - 0.1 * s;
      st.tokens = 8192;
      st.start_ns = step_start;
      st.step_time_ns = t - step_start;
      st.tokens_per_s = double(st.tokens) / (double(st.step_time_ns) * 1e-9);
      st.peak_bytes = int64_t(3) << 29;
      store.appendStep(st);
      t += 2'000;
    }
  }
  store.createIndexes();
  store.close();
}

}  // namespace trainscope::viewer
