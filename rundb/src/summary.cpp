// summary.cpp — the run summary (definitions in summary.h).
#include "trainscope/rundb/summary.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "trainscope/common/json_text.h"
#include "trainscope/rundb/merge.h"
#include "trainscope/rundb/range_names.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/step_analysis.h"
#include "interval_minus.h"
#include "rank_records.h"
#include "saturating.h"

namespace trainscope::rundb {

namespace {

// The steps counted: those with step >= skip, unless that would leave none.
int64_t effectiveSkip(const std::vector<Step>& steps, int64_t skip) {
  std::set<int64_t> ids;
  for (const Step& s : steps) ids.insert(s.step);
  if (ids.empty()) return 0;
  int64_t left = 0;
  for (int64_t k : ids) left += k >= satAdd(*ids.begin(), skip);
  return left > 0 ? skip : 0;
}

std::optional<double> derivedPeak(const std::vector<Step>& steps) {
  for (const Step& s : steps)
    if (s.mfu && *s.mfu > 0 && s.step_time_ns > 0 && s.model_flops > 0)
      return s.model_flops / (double(s.step_time_ns) * 1e-9) / *s.mfu;
  return std::nullopt;
}

// Global figures and per-rank step statistics from the step rows.
RunSummary fromSteps(const std::vector<Step>& steps, int64_t world, const std::string& workload,
                     std::optional<double> peak, int64_t skip) {
  RunSummary s;
  s.workload = workload;
  s.world = world;
  s.excluded_steps = effectiveSkip(steps, skip);
  s.peak_flops = peak ? peak : derivedPeak(steps);
  int64_t first = INT64_MAX;
  for (const Step& r : steps) first = std::min(first, r.step);
  struct PerStep {
    int64_t time_ns = 0, tokens = 0;
    double model = 0, hw = 0;
  };
  std::map<int64_t, PerStep> per_step;
  std::map<int64_t, RankSummary> per_rank;
  std::map<int64_t, std::vector<double>> rank_times;
  for (const Step& r : steps) {
    RankSummary& rs = per_rank[r.rank];
    rs.rank = r.rank;
    if (r.step < satAdd(first, s.excluded_steps)) continue;
    PerStep& p = per_step[r.step];
    p.time_ns = std::max(p.time_ns, r.step_time_ns);
    p.tokens = std::max(p.tokens, r.tokens);
    p.model += r.model_flops;
    p.hw += r.hw_flops;
    rank_times[r.rank].push_back(double(r.step_time_ns) * 1e-9);
    rs.peak_bytes = std::max(rs.peak_bytes, r.peak_bytes);
  }
  double time = 0, tokens = 0, model = 0, hw = 0;
  std::vector<double> times;
  for (const auto& [k, p] : per_step) {
    time += double(p.time_ns) * 1e-9;
    tokens += double(p.tokens);
    model += p.model;
    hw += p.hw;
    times.push_back(double(p.time_ns) * 1e-9);
  }
  s.steps = int64_t(per_step.size());
  if (time > 0) {
    s.tokens_per_s = tokens / time;
    s.step_s_mean = time / double(times.size());
    s.step_s_median = percentile(times, 0.5);
    s.step_s_p90 = percentile(times, 0.9);
    if (s.peak_flops && *s.peak_flops > 0) {
      s.mfu = model / time / (double(world) * *s.peak_flops);
      s.hfu = hw / time / (double(world) * *s.peak_flops);
    }
  }
  for (auto& [rank, rs] : per_rank) {
    const auto& t = rank_times[rank];
    rs.steps = int64_t(t.size());
    if (!t.empty()) {
      double sum = 0;
      for (double x : t) sum += x;
      rs.step_s_mean = sum / double(t.size());
      rs.step_s_median = percentile(t, 0.5);
      rs.step_s_p90 = percentile(t, 0.9);
      rs.step_s_min = *std::min_element(t.begin(), t.end());
      rs.step_s_max = *std::max_element(t.begin(), t.end());
    }
    s.peak_bytes = std::max(s.peak_bytes, rs.peak_bytes);
    s.ranks.push_back(rs);
  }
  return s;
}

}  // namespace

RunSummary summarizeSteps(const std::vector<Step>& steps, int64_t world, const std::string& workload,
                          std::optional<double> peak_flops, int64_t skip) {
  return fromSteps(steps, world, workload, peak_flops, skip);
}

namespace {

// A collective seen from the CPU: Gloo's and NCCL's record_function annotations ("gloo:all_reduce",
// "nccl:all_reduce") and c10d's ops, as a CPU-only profiler trace holds them.
bool isCollectiveAnnotation(const std::string& n) {
  return n.rfind("gloo:", 0) == 0 || n.rfind("nccl:", 0) == 0 || n.rfind("c10d::", 0) == 0 ||
         n == "record_param_comms" || n.rfind(std::string(names::kCollective) + "/", 0) == 0;
}

// What one rank's trace says it did, as intervals by category, and the device events with their
// correlation ids (to tie them to the steps that launched them).
struct RankEvents : CategoryIntervals {
  using Device = DeviceWork::Item;
  std::vector<Device> device;
  std::string source;  // "kernels", "ranges", "host_ops", "annotations" or ""
};

// The device rows of every counted rank and their launches, read in one pass over each table in
// storage order. Reading them per rank through the (rank, start) index costs a B-tree seek
// per row and every column: 3 M kernels took seconds, the viewer's Steps tab waited for it.
// Kernels, copies and sets each by start (ties: storage order); launches sorted.
using DeviceRows = DeviceWork;

// The order the breakdown reads a rank's rows in (above), from storage order or a caller's.
// Throws SummaryCancelled once *cancel is true (the pass's own work between its file queries).
void stopIfCancelled(const std::atomic<bool>* cancel) {
  if (cancel && cancel->load(std::memory_order_relaxed)) throw SummaryCancelled();
}

void orderDevices(std::map<int64_t, DeviceRows>& out, const std::atomic<bool>* cancel = nullptr) {
  // The order the index gave (start, then storage order): the unattributed time is summed in it.
  // Files are mostly stored in time order already: checking is cheaper than sorting.
  auto byStart = [](auto& v, auto start) {
    auto less = [&](const auto& a, const auto& b) { return start(a) < start(b); };
    if (!std::is_sorted(v.begin(), v.end(), less)) std::stable_sort(v.begin(), v.end(), less);
  };
  auto deviceStart = [](const RankEvents::Device& x) { return x.start; };
  for (auto& [rank, d] : out) {
    stopIfCancelled(cancel);
    byStart(d.kernels, [](const DeviceRows::Kernel& k) { return k.d.start; });
    byStart(d.memcpy, deviceStart);
    byStart(d.memset, deviceStart);
    // A correlation launched twice (a foreign file): the earliest call, as the first in time order.
    if (!std::is_sorted(d.launches.begin(), d.launches.end())) std::sort(d.launches.begin(), d.launches.end());
    d.launches.erase(std::unique(d.launches.begin(), d.launches.end(),
                                 [](const auto& a, const auto& b) { return a.first == b.first; }),
                     d.launches.end());
  }
}

std::map<int64_t, DeviceRows> readDevices(RunReader& reader, const std::vector<RankSummary>& ranks) {
  std::map<int64_t, DeviceRows> out;
  for (const RankSummary& rs : ranks) out[rs.rank];
  std::unordered_map<StringId, bool> comm_name;  // isCommKernel by name id: a few names, millions of rows
  auto rowsOf = [&](int64_t rank) -> DeviceRows* {
    auto it = out.find(rank);
    return it == out.end() ? nullptr : &it->second;  // a rank without steps: not summarised
  };
  // Room for an even share per rank: the usual trace fills it without the doubling's slack. The
  // largest rowid bounds the rows; capped, since a foreign file's rowids may be sparse.
  auto reserve = [&](const char* table, auto member) {
    const int64_t rows = std::clamp<int64_t>(reader.rowBound(table), 0, int64_t(1) << 23);
    const size_t share = size_t(rows) / std::max<size_t>(1, out.size()) + 1;
    for (auto& [rank, d] : out) (d.*member).reserve(share);
  };
  // Each table in storage order through spans(): the columns used and no others, off the mapped
  // file, in chunks of rowids (the rows of one chunk held at a time).
  std::vector<SpanRow> rows;
  auto eachRow = [&](const char* table, auto f) {
    const int64_t bound = reader.rowBound(table);
    constexpr int64_t kChunk = int64_t(1) << 18;
    for (int64_t b = 0; b <= bound; b += kChunk) {
      rows.clear();
      reader.spans(table, b, std::min(bound + 1, b + kChunk), rows);
      for (const SpanRow& r : rows)
        if (DeviceRows* d = rowsOf(r.rank)) f(r, *d);
    }
  };
  reserve("kernels", &DeviceRows::kernels);
  eachRow("kernels", [&](const SpanRow& k, DeviceRows& d) {
    auto [c, fresh] = comm_name.emplace(k.name, false);
    if (fresh) c->second = isCommKernel(reader.string(k.name));
    d.kernels.push_back({{k.start_ns, k.end_ns, k.correlation}, c->second});
  });
  eachRow("memcpy", [&](const SpanRow& m, DeviceRows& d) { d.memcpy.push_back({m.start_ns, m.end_ns, m.correlation}); });
  eachRow("memset", [&](const SpanRow& m, DeviceRows& d) { d.memset.push_back({m.start_ns, m.end_ns, m.correlation}); });
  reserve("api_calls", &DeviceRows::launches);
  eachRow("api_calls", [&](const SpanRow& a, DeviceRows& d) {
    if (a.correlation >= 0) d.launches.emplace_back(a.correlation, a.start_ns);
  });
  orderDevices(out);
  return out;
}

RankEvents readRank(RunReader& reader, int64_t rank, const std::set<StringId>& compute_names, DeviceRows& dev) {
  RankEvents ev;
  const bool kernels = !dev.kernels.empty();
  ev.device.reserve(dev.kernels.size() + dev.memcpy.size() + dev.memset.size());
  ev.compute.reserve(dev.kernels.size());
  ev.memory.reserve(dev.memcpy.size() + dev.memset.size());
  for (const DeviceRows::Kernel& k : dev.kernels) {
    (k.comm ? ev.comm : ev.compute).push_back({k.d.start, k.d.end});
    ev.device.push_back(k.d);
  }
  for (const auto* v : {&dev.memcpy, &dev.memset})
    for (const RankEvents::Device& m : *v) {
      ev.memory.push_back({m.start, m.end});
      ev.device.push_back(m);
    }
  dev.kernels = {}, dev.memcpy = {}, dev.memset = {};  // copied: free them as we go
  if (!ev.device.empty()) {
    // A GPU trace: communication is what NCCL's kernels ran. The CPU's collective calls (our
    // collectives rows, record_param_comms) span the launch, not the transfer: not counted.
    if (kernels) ev.source = "kernels";
    return ev;
  }
  // A CPU trace: compute is the runtime's compute ranges, else the CPU ops, else the annotations
  // that are neither steps nor collectives; communication is the collectives and the collective
  // annotations.
  std::vector<Interval> annotations;
  for (const Range& r : reader.events<Range>(rank)) {
    if (compute_names.count(r.name)) {
      ev.compute.push_back({r.start_ns, r.end_ns});
      continue;
    }
    const std::string& n = reader.string(r.name);
    if (isCollectiveAnnotation(n)) ev.comm.push_back({r.start_ns, r.end_ns});
    else if (n.rfind("ProfilerStep#", 0) != 0 && n != names::kStep) annotations.push_back({r.start_ns, r.end_ns});
  }
  if (!ev.compute.empty()) ev.source = "ranges";
  if (ev.compute.empty()) {
    // Per thread: its ops less the collective calls among them, which the ops around them enclose
    // (DDP's c10d::allreduce_ under the AccumulateGrad whose hook issued it): a thread blocked in a
    // collective call is communicating, not computing.
    std::map<int64_t, std::pair<std::vector<Interval>, std::vector<Interval>>> of_thread;  // ops, collectives
    for (const HostOp& h : reader.events<HostOp>(rank)) {
      auto& [ops, calls] = of_thread[h.tid];
      if (isCollectiveAnnotation(reader.string(h.name))) {
        ev.comm.push_back({h.start_ns, h.end_ns});
        calls.push_back({h.start_ns, h.end_ns});
      } else {
        ops.push_back({h.start_ns, h.end_ns});
      }
    }
    for (auto& [tid, ops_calls] : of_thread)
      for (const Interval& i : intervalMinus(unionOf(std::move(ops_calls.first)), unionOf(std::move(ops_calls.second))))
        ev.compute.push_back(i);
    if (!ev.compute.empty()) ev.source = "host_ops";
  }
  if (ev.compute.empty() && !annotations.empty()) {
    ev.compute = std::move(annotations);
    ev.source = "annotations";
  }
  for (const Collective& c : reader.collectives(rank)) ev.comm.push_back({c.start_ns, c.end_ns});
  return ev;
}

// The GPU windows of the counted steps (definitions in summary.h): each device event belongs to
// the step whose CPU window holds its launch (device work without a launch record: see below); the windows tile the steps' first device events in
// time order — each from one first start to the next (the last to the end of the last device event
// of any counted step) — so they never overlap and leave no gap, even where a later step's work
// starts first (another stream). Empty when no device event could be tied to a counted step.
std::vector<Interval> gpuWindows(const std::vector<std::pair<int64_t, int64_t>>& launch, RankSummary& rs,
                                 const std::vector<Interval>& cw, const RankEvents& ev, bool& no_launches) {
  if (launch.empty()) {
    no_launches = true;
    return {};
  }
  std::vector<int64_t> first(cw.size(), INT64_MAX);
  int64_t last_end = INT64_MIN;
  std::vector<const RankEvents::Device*> unattributed;
  for (const RankEvents::Device& d : ev.device) {
    auto it = std::lower_bound(launch.begin(), launch.end(), std::pair<int64_t, int64_t>(d.correlation, INT64_MIN));
    if (d.correlation < 0 || it == launch.end() || it->first != d.correlation) {
      ++rs.unattributed_events;
      rs.unattributed_s += double(satSub(d.end, d.start)) * 1e-9;
      unattributed.push_back(&d);
      continue;
    }
    const int64_t t = it->second;
    auto w = std::partition_point(cw.begin(), cw.end(), [t](const Interval& x) { return x.begin <= t; });
    if (w == cw.begin()) continue;
    --w;
    if (t >= w->end) continue;  // launched between steps, or in a warm-up step: not counted
    int64_t& f = first[size_t(w - cw.begin())];
    f = std::min(f, d.start);
    last_end = std::max(last_end, d.end);
  }
  std::vector<int64_t> starts;
  for (int64_t f : first)
    if (f != INT64_MAX) starts.push_back(f);
  std::sort(starts.begin(), starts.end());
  // The last window also takes in device work without a launch record (a copy after the last
  // kernel) that starts inside the counted steps' span — before the last counted step's CPU window
  // ends, or before (or as) the work already in the windows ends — repeated in time order until the
  // span stops growing: it ran in those steps.
  if (!starts.empty() && !cw.empty()) {
    std::sort(unattributed.begin(), unattributed.end(),
              [](const RankEvents::Device* a, const RankEvents::Device* b) { return a->start < b->start; });
    int64_t cpu_end = INT64_MIN;
    for (const Interval& w : cw) cpu_end = std::max(cpu_end, w.end);
    for (const RankEvents::Device* d : unattributed)
      if (d->start >= starts.front() && (d->start < cpu_end || d->start <= last_end)) last_end = std::max(last_end, d->end);
    // And the first window reaches back to such work that starts inside the first counted step's CPU
    // window, before its first launched work (an input copy at the step's start): it ran in that step.
    for (const RankEvents::Device* d : unattributed)
      if (d->start >= cw.front().begin && d->start < starts.front()) {
        starts.front() = d->start;  // the earliest: `unattributed` is in time order
        last_end = std::max(last_end, d->end);
        break;
      }
  }
  std::vector<Interval> windows;
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t end = i + 1 < starts.size() ? starts[i + 1] : std::max(last_end, starts[i]);
    if (starts[i] < end) windows.push_back({starts[i], end});
  }
  return windows;
}

// The workload's name from the run's config ("" when it has none or it does not parse).
std::string workloadName(RunReader& reader) {
  try {
    return nlohmann::json::parse(reader.meta("config", "{}")).value("workload", "");
  } catch (const std::exception&) {
    return "";
  }
}

// A run whose database holds fewer steps than its config asked for was stopped (SIGINT, SIGTERM, a
// failure, kill -9) or is still being written: the summary says so, as its figures cover only those.
void noteUnfinishedRun(RunReader& reader, const std::vector<Step>& steps, RunSummary& s) {
  if (reader.meta("source") == "import") return;
  int64_t asked = 0;
  try {
    const nlohmann::json c = nlohmann::json::parse(reader.meta("config", "{}"));
    if (!c.is_object() || !c.contains("steps") || !c["steps"].is_number_integer()) return;
    asked = c["steps"].get<int64_t>();
  } catch (const std::exception&) {
    return;
  }
  int64_t last = -1;
  for (const Step& r : steps) last = std::max(last, r.step);
  if (last + 1 >= asked) return;
  s.notes.push_back((last < 0 ? std::string("no step recorded") : "steps up to " + std::to_string(last) + " recorded") +
                    " of the " + std::to_string(asked) +
                    " the run was started for: it was stopped or killed, or is still being written; the figures "
                    "cover the recorded steps only");
}

// A traced run that stopped before merging its ranks' shards (killed, or still running) holds steps
// alone: the summary names the files its events are in (the viewer's header says the same).
void noteUnmergedShards(RunReader& reader, RunSummary& s) {
  const std::string note = unmergedEventsNote(reader.path(), reader.meta("trace_level"), reader.meta("source"), "report");
  if (!note.empty()) s.notes.push_back(note);
}

// Each rank's counted steps' CPU windows, sorted by start (the first `excluded` steps left out).
std::map<int64_t, std::vector<Interval>> countedCpuWindows(const std::vector<Step>& steps, int64_t excluded) {
  std::map<int64_t, std::vector<Interval>> cpu_windows;
  int64_t first = INT64_MAX;
  for (const Step& r : steps) first = std::min(first, r.step);
  for (const Step& r : steps)
    if (r.step >= satAdd(first, excluded))
      cpu_windows[r.rank].push_back({r.start_ns, satAdd(r.start_ns, r.step_time_ns)});
  for (auto& [rank, w] : cpu_windows)
    std::sort(w.begin(), w.end(), [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  return cpu_windows;
}

// Whether the run holds any table a breakdown is made of (none: a summary of the steps only).
bool hasBreakdownEvents(RunReader& reader) {
  return reader.hasEvents("kernels") || reader.hasEvents("ranges") || reader.hasEvents("collectives") ||
         reader.hasEvents("host_ops") || reader.hasEvents("memcpy") || reader.hasEvents("memset");
}

// What the ranks' breakdowns found that the summary's notes explain.
struct BreakdownFindings {
  bool no_launches = false, unmatched = false, host_ops = false, annotations = false;
  std::vector<std::pair<int64_t, size_t>> launches_only;  // (rank, launches) of ranks that launched, but no device work is in the trace
};

// The run's breakdown source is the best any rank had: kernels > ranges > host_ops > annotations.
void raiseSource(std::string& current, const std::string& src) {
  static const std::map<std::string, int> order = {{"", 0}, {"annotations", 1}, {"host_ops", 2}, {"ranges", 3}, {"kernels", 4}};
  if (order.at(src) > order.at(current)) current = src;
}

// One rank's breakdown: over its GPU windows when its device events can be tied to counted steps,
// else over its CPU step windows `cw`.
void breakdownRank(RunReader& reader, RankSummary& rs, const std::vector<Interval>& cw, const std::vector<int64_t>& steps_of,
                   const std::set<StringId>& compute_names, DeviceRows& dev, PeerWaits waits, RunSummary& s,
                   BreakdownFindings& found) {
  RankEvents ev = readRank(reader, rs.rank, compute_names, dev);
  ev.wait = std::move(waits.wait);
  ev.bubble = std::move(waits.bubble);
  raiseSource(s.breakdown_source, ev.source);
  found.host_ops |= ev.source == "host_ops";
  found.annotations |= ev.source == "annotations";
  if (ev.device.empty() && !dev.launches.empty()) found.launches_only.emplace_back(rs.rank, dev.launches.size());
  std::vector<Interval> windows = cw;
  if (!ev.device.empty()) {
    bool none = false;
    std::vector<Interval> gpu = gpuWindows(dev.launches, rs, cw, ev, none);
    found.no_launches |= none;
    if (!gpu.empty()) {
      int64_t span = 0;
      for (const Interval& g : gpu) span = satAdd(span, satSub(g.end, g.begin));
      rs.gpu_step_s = double(span) * 1e-9 / double(std::max<int64_t>(1, rs.steps));
      windows = std::move(gpu);
      s.breakdown_window = "gpu";
    } else if (!none) {
      found.unmatched = true;
    }
  }
  // Each step's own too, where the windows are one per counted step (in order: cw is sorted by
  // start); the intervals merged once for both.
  const bool per_step = windows.size() == cw.size() && steps_of.size() == cw.size();
  std::vector<Breakdown> each;
  rs.breakdown = breakdownOverAndEach(ev, windows, rs.steps, per_step ? &each : nullptr);
  for (size_t k = 0; k < each.size(); ++k) rs.per_step.push_back({steps_of[k], windows[k].begin, windows[k].end, each[k]});
}

void addBreakdownNotes(RunSummary& s, const BreakdownFindings& found) {
  // Launches without device events are not a CPU-only profile: the device's activity was not recorded.
  if (found.host_ops)
    s.notes.push_back(found.launches_only.empty()
                          ? "no GPU events in this trace: compute is the time in CPU ops (a CPU-only profile)"
                          : "no GPU events in this trace: compute is the time in CPU ops");
  for (const auto& [rank, n] : found.launches_only)
    s.notes.push_back("rank " + std::to_string(rank) + ": " + std::to_string(n) +
                      " launch(es) (API calls with correlation ids) but no device activity was recorded (no kernels, "
                      "copies or sets): the breakdown is of CPU time; profile with the device's activity "
                      "(ProfilerActivity.CUDA) to see the GPU's");
  if (found.annotations)
    s.notes.push_back("no GPU events and no CPU ops in this trace: compute is the time in its annotations "
                      "(other than steps and collectives)");
  if (found.no_launches)
    s.notes.push_back("the device events have no launch records (API calls with correlation ids): the breakdown "
                      "uses the CPU step windows, and GPU work that runs past a step is counted in the next");
  if (found.unmatched)
    s.notes.push_back("no device event's correlation id matches a launch inside a counted step: the breakdown uses "
                      "the CPU step windows");
  for (const RankSummary& rs : s.ranks)
    if (rs.unattributed_events > 0) {
      s.notes.push_back("rank " + std::to_string(rs.rank) + ": " + std::to_string(rs.unattributed_events) +
                        " device event(s) have no launch in the trace: they do not place a step's window, and "
                        "count where they ran");
    }
}

// A rank's device work given by the caller: of the counted ranks only (each present), in the order
// the breakdown reads.
std::map<int64_t, DeviceRows> givenDevices(std::map<int64_t, DeviceWork> given, const std::vector<RankSummary>& ranks,
                                           const std::atomic<bool>* cancel) {
  std::map<int64_t, DeviceRows> out;
  for (const RankSummary& rs : ranks) {
    auto it = given.find(rs.rank);
    out[rs.rank] = it == given.end() ? DeviceRows{} : std::move(it->second);
  }
  orderDevices(out, cancel);
  return out;
}

// The recipe: step statistics → counted CPU windows → per rank, its events and breakdown → notes →
// stragglers (compute more than 10% over the ranks' median).
RunSummary summarizeWith(RunReader& reader, int64_t skip, std::optional<std::map<int64_t, DeviceWork>> given,
                         const std::atomic<bool>* cancel = nullptr) {
  stopIfCancelled(cancel);
  if (reader.meta("source") == "import") skip = 0;  // no warm-up step of ours to leave out
  const std::string workload = workloadName(reader);
  std::optional<double> peak;
  if (!reader.meta("peak_flops").empty()) peak = std::atof(reader.meta("peak_flops").c_str());
  std::vector<Step> steps = reader.steps();
  // No step: rank 0 (which writes them) failed or was killed first; what the other ranks recorded.
  std::vector<std::string> rank_notes;
  std::vector<Step> recorded = steps.empty() ? detail::stepsOfRankRecords(reader, rank_notes) : std::vector<Step>{};
  RunSummary s = fromSteps(recorded.empty() ? steps : recorded, reader.worldSize(), workload, peak,
                           recorded.empty() ? skip : 0);
  noteUnfinishedRun(reader, steps, s);
  s.notes.insert(s.notes.end(), rank_notes.begin(), rank_notes.end());
  if (!recorded.empty()) steps = std::move(recorded);

  // Breakdown per rank over its own counted steps' windows (definitions in summary.h).
  std::map<int64_t, std::vector<Interval>> cpu_windows = countedCpuWindows(steps, s.excluded_steps);
  std::set<StringId> compute_names;
  for (const char* n : names::kComputeRanges)
    if (auto id = reader.find(n)) compute_names.insert(*id);
  if (!hasBreakdownEvents(reader)) {
    noteUnmergedShards(reader, s);
    return s;
  }
  std::vector<double> compute_per_rank;
  BreakdownFindings found;
  std::map<int64_t, DeviceRows> devices =
      given ? givenDevices(std::move(*given), s.ranks, cancel) : readDevices(reader, s.ranks);
  stopIfCancelled(cancel);
  // Waits for peers and the pipeline bubble, from the collectives linked across ranks.
  const std::vector<Collective> collectives = reader.collectives();
  const CollectiveLinks links = linkRunCollectives(collectives, reader.meta(), steps);
  stopIfCancelled(cancel);
  std::map<int64_t, PeerWaits> waits = peerWaits(collectives, links);
  stopIfCancelled(cancel);
  s.step_stragglers = stepStragglers(reader, collectives, links, s.excluded_steps);
  stopIfCancelled(cancel);
  s.critical_paths = criticalPaths(reader, collectives, links, s.excluded_steps);
  // The step number of each counted CPU window, in the windows' order.
  std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> starts;  // rank → (start, step)
  int64_t first = INT64_MAX;
  for (const Step& r : steps) first = std::min(first, r.step);
  for (const Step& r : steps)
    if (r.step >= satAdd(first, s.excluded_steps)) starts[r.rank].emplace_back(r.start_ns, r.step);
  for (RankSummary& rs : s.ranks) {
    stopIfCancelled(cancel);
    std::vector<std::pair<int64_t, int64_t>>& st = starts[rs.rank];
    std::stable_sort(st.begin(), st.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<int64_t> steps_of;
    for (const auto& p : st) steps_of.push_back(p.second);
    breakdownRank(reader, rs, cpu_windows[rs.rank], steps_of, compute_names, devices[rs.rank], std::move(waits[rs.rank]), s,
                  found);
    compute_per_rank.push_back(rs.breakdown->compute_s);
  }
  if (s.breakdown_window.empty()) s.breakdown_window = "cpu";
  addBreakdownNotes(s, found);
  if (s.ranks.size() > 1) {
    const double med = percentile(compute_per_rank, 0.5);
    for (auto& rs : s.ranks) rs.compute_heavy = med > 0 && rs.breakdown && rs.breakdown->compute_s > 1.10 * med;
  }
  return s;
}

}  // namespace

RunSummary summarize(RunReader& reader, int64_t skip) { return summarizeWith(reader, skip, std::nullopt); }

RunSummary summarize(RunReader& reader, int64_t skip, std::map<int64_t, DeviceWork> device_work,
                     const std::atomic<bool>* cancel) {
  return summarizeWith(reader, skip, std::move(device_work), cancel);
}

std::string summaryJson(const RunSummary& s) {
  auto opt = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  nlohmann::json j = {{"workload", s.workload},         {"world", s.world},
                      {"steps", s.steps},               {"excluded_steps", s.excluded_steps},
                      {"tokens_per_s", s.tokens_per_s}, {"step_time_mean_s", s.step_s_mean},
                      {"step_time_median_s", s.step_s_median}, {"step_time_p90_s", s.step_s_p90},
                      {"mfu", opt(s.mfu)},              {"hfu", opt(s.hfu)},
                      {"peak_flops", opt(s.peak_flops)}, {"peak_bytes", s.peak_bytes},
                      {"breakdown_source", s.breakdown_source}, {"breakdown_window", s.breakdown_window},
                      {"notes", s.notes}};
  j["ranks"] = nlohmann::json::array();
  for (const RankSummary& r : s.ranks) {
    nlohmann::json k = {{"rank", r.rank},
                        {"steps", r.steps},
                        {"step_time_mean_s", r.step_s_mean},
                        {"step_time_median_s", r.step_s_median},
                        {"step_time_p90_s", r.step_s_p90},
                        {"step_time_min_s", r.step_s_min},
                        {"step_time_max_s", r.step_s_max},
                        {"peak_bytes", r.peak_bytes},
                        {"compute_heavy", r.compute_heavy}};
    if (r.breakdown)
      k["breakdown"] = {{"compute_s", r.breakdown->compute_s}, {"comm_s", r.breakdown->comm_s},
                        {"overlap_s", r.breakdown->overlap_s}, {"memory_s", r.breakdown->memory_s},
                        {"idle_s", r.breakdown->idle_s}, {"wait_s", r.breakdown->wait_s},
                        {"bubble_s", r.breakdown->bubble_s}, {"exposed_comm_s", r.breakdown->exposedCommS()}};
    if (!r.per_step.empty()) {
      k["per_step"] = nlohmann::json::array();
      for (const StepBreakdown& p : r.per_step)
        k["per_step"].push_back({{"step", p.step}, {"start_ns", p.start_ns}, {"end_ns", p.end_ns},
                                 {"compute_s", p.b.compute_s}, {"comm_s", p.b.comm_s}, {"overlap_s", p.b.overlap_s},
                                 {"exposed_comm_s", p.b.exposedCommS()}, {"wait_s", p.b.wait_s},
                                 {"bubble_s", p.b.bubble_s}, {"memory_s", p.b.memory_s}, {"idle_s", p.b.idle_s}});
    }
    k["gpu_step_time_mean_s"] = r.gpu_step_s ? nlohmann::json(*r.gpu_step_s) : nlohmann::json(nullptr);
    k["unattributed_device_events"] = r.unattributed_events;
    k["unattributed_device_s"] = r.unattributed_s;
    j["ranks"].push_back(k);
  }
  return jsonText(j);
}

}  // namespace trainscope::rundb
