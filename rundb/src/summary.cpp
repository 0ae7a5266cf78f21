// summary.cpp — the run summary (definitions in summary.h).
#include "trainscope/rundb/summary.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "trainscope/rundb/range_names.h"
#include "trainscope/rundb/reader.h"

namespace trainscope::rundb {
namespace {

// Saturating int64 arithmetic for times and step numbers read from a file: a damaged or foreign one
// may hold any values, and a window wider than int64 nanoseconds (292 years) is clamped, not overflowed.
int64_t satAdd(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? (b > 0 ? INT64_MAX : INT64_MIN) : r;
}
int64_t satSub(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_sub_overflow(a, b, &r) ? (b < 0 ? INT64_MAX : INT64_MIN) : r;
}

}  // namespace

std::vector<Interval> unionOf(std::vector<Interval> v) {
  std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  std::vector<Interval> out;
  for (const auto& i : v) {
    if (i.end <= i.begin) continue;
    if (!out.empty() && i.begin <= out.back().end) out.back().end = std::max(out.back().end, i.end);
    else out.push_back(i);
  }
  return out;
}

int64_t coveredWithin(const std::vector<Interval>& m, int64_t b, int64_t e) {
  int64_t total = 0;
  auto it = std::lower_bound(m.begin(), m.end(), b, [](const Interval& i, int64_t t) { return i.end <= t; });
  for (; it != m.end() && it->begin < e; ++it)
    total = satAdd(total, satSub(std::min(e, it->end), std::max(b, it->begin)));
  return total;
}

std::vector<Interval> intersect(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::vector<Interval> out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].begin, b[j].begin), hi = std::min(a[i].end, b[j].end);
    if (lo < hi) out.push_back({lo, hi});
    (a[i].end < b[j].end) ? ++i : ++j;
  }
  return out;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double idx = p * double(v.size() - 1);
  const size_t lo = size_t(std::floor(idx)), hi = size_t(std::ceil(idx));
  return v[lo] + (v[hi] - v[lo]) * (idx - double(lo));
}

bool isCommKernel(const std::string& name) {
  return name.rfind("nccl", 0) == 0 || name.find("ncclDevKernel") != std::string::npos ||
         name.find("ncclKernel") != std::string::npos;
}

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

RunSummary summarize(RunReader& reader, int64_t skip) {
  if (reader.meta("source") == "import") skip = 0;  // no warm-up step of ours to leave out
  std::string workload;
  try {
    workload = nlohmann::json::parse(reader.meta("config", "{}")).value("workload", "");
  } catch (const std::exception&) {
  }
  std::optional<double> peak;
  if (!reader.meta("peak_flops").empty()) peak = std::atof(reader.meta("peak_flops").c_str());
  const std::vector<Step> steps = reader.steps();
  RunSummary s = fromSteps(steps, reader.worldSize(), workload, peak, skip);

  // Breakdown per rank over its own counted steps' windows (definitions in summary.h).
  std::map<int64_t, std::vector<Interval>> cpu_windows;
  int64_t first = INT64_MAX;
  for (const Step& r : steps) first = std::min(first, r.step);
  for (const Step& r : steps)
    if (r.step >= satAdd(first, s.excluded_steps))
      cpu_windows[r.rank].push_back({r.start_ns, satAdd(r.start_ns, r.step_time_ns)});
  for (auto& [rank, w] : cpu_windows)
    std::sort(w.begin(), w.end(), [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  std::set<StringId> compute_names;
  for (const char* n : names::kComputeRanges)
    if (auto id = reader.find(n)) compute_names.insert(*id);
  const bool any_events = reader.hasEvents("kernels") || reader.hasEvents("ranges") || reader.hasEvents("collectives") ||
                          reader.hasEvents("host_ops") || reader.hasEvents("memcpy") || reader.hasEvents("memset");
  if (!any_events) return s;
  std::vector<double> compute_per_rank;
  bool cpu_fallback_note = false, host_ops_note = false;
  for (RankSummary& rs : s.ranks) {
    const auto& cw = cpu_windows[rs.rank];
    std::vector<Interval> compute, comm, memory;
    // Device events with their correlation, to find their step.
    struct Device {
      int64_t start, end, correlation;
    };
    std::vector<Device> device;
    for (const Kernel& k : reader.events<Kernel>(rs.rank)) {
      (isCommKernel(reader.string(k.name)) ? comm : compute).push_back({k.start_ns, k.end_ns});
      device.push_back({k.start_ns, k.end_ns, k.correlation});
    }
    for (const Memcpy& m : reader.events<Memcpy>(rs.rank)) {
      memory.push_back({m.start_ns, m.end_ns});
      device.push_back({m.start_ns, m.end_ns, m.correlation});
    }
    for (const Memset& m : reader.events<Memset>(rs.rank)) {
      memory.push_back({m.start_ns, m.end_ns});
      device.push_back({m.start_ns, m.end_ns, m.correlation});
    }
    if (!compute.empty()) {
      s.breakdown_source = "kernels";
    } else if (device.empty()) {
      for (const Range& r : reader.events<Range>(rs.rank))
        if (compute_names.count(r.name)) compute.push_back({r.start_ns, r.end_ns});
      if (!compute.empty() && s.breakdown_source.empty()) s.breakdown_source = "ranges";
      if (compute.empty()) {  // a trace of CPU ops only (a CPU job's profiler trace)
        for (const HostOp& h : reader.events<HostOp>(rs.rank)) compute.push_back({h.start_ns, h.end_ns});
        if (!compute.empty()) {
          if (s.breakdown_source.empty()) s.breakdown_source = "host_ops";
          host_ops_note = true;
        }
      }
    }
    for (const Collective& c : reader.collectives(rs.rank)) comm.push_back({c.start_ns, c.end_ns});

    // The windows: each step's GPU work, found through the launches; else the CPU windows.
    std::vector<Interval> windows = cw;
    if (!device.empty()) {
      std::unordered_map<int64_t, int64_t> launch;  // correlation → launch time
      for (const ApiCall& a : reader.events<ApiCall>(rs.rank))
        if (a.correlation >= 0) launch.emplace(a.correlation, a.start_ns);
      if (launch.empty()) {
        cpu_fallback_note = true;
      } else {
        std::vector<Interval> gpu(cw.size(), Interval{INT64_MAX, INT64_MIN});
        for (const Device& d : device) {
          auto it = d.correlation >= 0 ? launch.find(d.correlation) : launch.end();
          if (it == launch.end()) {
            ++rs.unattributed_events;
            rs.unattributed_s += double(satSub(d.end, d.start)) * 1e-9;
            continue;
          }
          const int64_t t = it->second;
          auto w = std::partition_point(cw.begin(), cw.end(), [t](const Interval& x) { return x.begin <= t; });
          if (w == cw.begin()) continue;
          --w;
          if (t >= w->end) continue;  // launched between steps, or in a warm-up step: not counted
          Interval& g = gpu[size_t(w - cw.begin())];
          g.begin = std::min(g.begin, d.start);
          g.end = std::max(g.end, d.end);
        }
        windows.clear();
        double sum = 0;
        for (const Interval& g : gpu)
          if (g.begin < g.end) windows.push_back(g), sum += double(satSub(g.end, g.begin)) * 1e-9;
        if (!windows.empty()) rs.gpu_step_s = sum / double(windows.size());
        s.breakdown_window = "gpu";
      }
    }
    if (s.breakdown_window.empty()) s.breakdown_window = "cpu";

    const auto cu = unionOf(compute), co = unionOf(comm), ov = intersect(cu, co);
    std::vector<Interval> busy = cu;
    busy.insert(busy.end(), co.begin(), co.end());
    const auto work = unionOf(busy);
    std::vector<Interval> everything = work;
    const auto me = unionOf(memory);
    everything.insert(everything.end(), me.begin(), me.end());
    const auto any = unionOf(everything);
    Breakdown b;
    for (const auto& [begin, end] : windows) {
      b.compute_s += double(coveredWithin(cu, begin, end));
      b.comm_s += double(coveredWithin(co, begin, end));
      b.overlap_s += double(coveredWithin(ov, begin, end));
      const double covered = double(coveredWithin(any, begin, end));
      b.memory_s += covered - double(coveredWithin(work, begin, end));
      b.idle_s += double(satSub(end, begin)) - covered;
    }
    const double n = windows.empty() ? 1.0 : double(windows.size());
    for (double* v : {&b.compute_s, &b.comm_s, &b.overlap_s, &b.memory_s, &b.idle_s}) *v *= 1e-9 / n;
    rs.breakdown = b;
    compute_per_rank.push_back(b.compute_s);
  }
  if (host_ops_note)
    s.notes.push_back("no GPU events in this trace: compute is the time in CPU ops (a CPU-only profile)");
  if (cpu_fallback_note)
    s.notes.push_back("the device events have no launch records (API calls with correlation ids): the breakdown "
                      "uses the CPU step windows, and GPU work that runs past a step is counted in the next");
  for (const RankSummary& rs : s.ranks)
    if (rs.unattributed_events > 0) {
      s.notes.push_back("rank " + std::to_string(rs.rank) + ": " + std::to_string(rs.unattributed_events) +
                        " device event(s) have no launch in the trace; counted apart, not in any step");
    }
  if (s.ranks.size() > 1) {
    const double med = percentile(compute_per_rank, 0.5);
    for (auto& rs : s.ranks) rs.straggler = med > 0 && rs.breakdown && rs.breakdown->compute_s > 1.10 * med;
  }
  return s;
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
                        {"straggler", r.straggler}};
    if (r.breakdown)
      k["breakdown"] = {{"compute_s", r.breakdown->compute_s}, {"comm_s", r.breakdown->comm_s},
                        {"overlap_s", r.breakdown->overlap_s}, {"memory_s", r.breakdown->memory_s},
                        {"idle_s", r.breakdown->idle_s}};
    k["gpu_step_time_mean_s"] = r.gpu_step_s ? nlohmann::json(*r.gpu_step_s) : nlohmann::json(nullptr);
    k["unattributed_device_events"] = r.unattributed_events;
    k["unattributed_device_s"] = r.unattributed_s;
    j["ranks"].push_back(k);
  }
  return j.dump();
}

}  // namespace trainscope::rundb
