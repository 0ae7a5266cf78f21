// report.cpp — see report.h.
#include "trainscope/rundb/report.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "trainscope/common/json_text.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/step_analysis.h"

namespace trainscope::rundb {
namespace {

// The byte offset of each character of UTF-8 text (a continuation byte 10xxxxxx belongs to the
// character before it), and the text's end.
std::vector<size_t> characterStarts(const std::string& s) {
  std::vector<size_t> at;
  for (size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) at.push_back(i);
  at.push_back(s.size());
  return at;
}

// Long names (templated CUDA kernels run to hundreds of characters) keep their head and tail in the
// text table; --json keeps them whole. Counted and cut in characters, never inside one (a name in
// Japanese or with accents stays valid UTF-8).
std::string elide(const std::string& name, size_t width = 96) {
  const std::vector<size_t> at = characterStarts(name);
  const size_t chars = at.size() - 1;
  if (chars <= width) return name;
  const size_t keep = (width - 3) / 2;
  return name.substr(0, at[keep]) + "..." + name.substr(at[chars - (width - 3 - keep)]);
}

// elide's text (at most `most` characters) padded with spaces to `width` characters (printf's %-24s
// pads bytes).
std::string padded(const std::string& name, size_t width, size_t most) {
  std::string s = elide(name, most);
  const size_t chars = characterStarts(s).size() - 1;
  return chars < width ? s + std::string(width - chars, ' ') : s;
}

// Host ops by self time, with a stack per (rank, thread): ops come ordered by start, outer first.
std::vector<OpStat> hostOpsBySelfTime(RunReader& reader, const std::vector<int64_t>& ranks) {
  std::map<StringId, OpStat> by_name;
  for (int64_t rank : ranks) {
    std::vector<HostOp> ops = reader.events<HostOp>(rank);
    std::stable_sort(ops.begin(), ops.end(), [](const HostOp& a, const HostOp& b) {
      return a.tid != b.tid ? a.tid < b.tid : a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
    });
    struct Open {
      int64_t end;
      StringId name;
    };
    std::vector<Open> stack;
    int64_t tid = -1;
    for (const HostOp& op : ops) {
      if (op.tid != tid) {
        stack.clear();
        tid = op.tid;
      }
      while (!stack.empty() && stack.back().end <= op.start_ns) stack.pop_back();
      // Differences in int64 (saturated: a damaged file's times may be any int64), then seconds: exact to
      // the nanosecond, where a difference of two doubles of epoch nanoseconds steps by 256 ns.
      const double dur = double(spanNs(op.start_ns, op.end_ns)) * 1e-9;
      if (!stack.empty())
        by_name[stack.back().name].self_s -= double(spanNs(op.start_ns, std::min(op.end_ns, stack.back().end))) * 1e-9;
      OpStat& o = by_name[op.name];
      ++o.count;
      o.total_s += dur;
      o.self_s += dur;
      stack.push_back({op.end_ns, op.name});
    }
  }
  std::vector<OpStat> out;
  for (auto& [id, o] : by_name) {
    o.name = reader.string(id);
    o.mean_s = o.count ? o.total_s / double(o.count) : 0;
    out.push_back(o);
  }
  std::sort(out.begin(), out.end(), [](const OpStat& a, const OpStat& b) { return a.self_s > b.self_s; });
  return out;
}

std::vector<OpStat> kernelsByTotalTime(RunReader& reader) {
  std::map<StringId, OpStat> by_name;
  reader.forEach<Kernel>([&](const Kernel& k) {
    OpStat& o = by_name[k.name];
    ++o.count;
    o.total_s += double(spanNs(k.start_ns, k.end_ns)) * 1e-9;
  });
  std::vector<OpStat> out;
  for (auto& [id, o] : by_name) {
    o.name = reader.string(id);
    o.self_s = o.total_s;  // kernels do not nest
    o.mean_s = o.total_s / double(o.count);
    out.push_back(o);
  }
  std::sort(out.begin(), out.end(), [](const OpStat& a, const OpStat& b) { return a.total_s > b.total_s; });
  return out;
}

// Collectives by (op, group), the most time first: bandwidth over each row's transfer, skew over the
// linked calls; a row whose end is not known (cut, or a send whose receive was cut) in calls and bytes only.
std::vector<CollectiveStat> collectiveStats(RunReader& reader) {
  const std::vector<Collective> rows = reader.collectives();
  const std::optional<RunLayout> layout = runLayout(reader.meta());
  const CollectiveLinks links = linkRunCollectives(rows, reader.meta(), reader.steps());
  std::map<std::pair<std::string, std::string>, CollectiveStat> coll;
  std::map<std::pair<std::string, std::string>, std::pair<double, double>> busbw_sum;  // transfer, whole
  std::map<std::pair<std::string, std::string>, std::set<int64_t>> calls;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Collective& c = rows[i];
    const LinkedCall* call = links.call_of[i] >= 0 ? &links.calls[size_t(links.call_of[i])] : nullptr;
    const CallTiming t = callTiming(c, call);
    CollectiveStat& s = coll[{c.op, c.group}];
    s.op = c.op;
    s.group = c.group;
    ++s.count;
    if (__builtin_add_overflow(s.bytes, c.bytes, &s.bytes)) s.bytes = c.bytes > 0 ? INT64_MAX : INT64_MIN;  // a damaged file's sizes
    if (call) calls[{c.op, c.group}].insert(links.call_of[i]);
    else if (s.rows_not_linked++ == 0) s.not_linked_reason = notLinkedReason(c, links, layout);
    if (c.cut || (call && call->p2p && call->cut)) {  // its end is not known: no time, no bandwidth
      ++s.cut;
      continue;
    }
    s.total_s += c.seconds();
    s.wait_s += double(t.wait_ns) * 1e-9;
    s.transfer_s += double(t.transfer_ns) * 1e-9;
    busbw_sum[{c.op, c.group}].first += t.busbw;
    busbw_sum[{c.op, c.group}].second += c.busbw();
    s.busbw_max = std::max(s.busbw_max, t.busbw);
  }
  std::vector<CollectiveStat> out;
  for (auto& [key, s] : coll) {
    const double timed = double(std::max<int64_t>(1, s.count - s.cut));
    s.busbw_mean = busbw_sum[key].first / timed;
    s.busbw_with_wait_mean = busbw_sum[key].second / timed;
    const std::set<int64_t>& linked = calls[key];
    s.linked = int64_t(linked.size());
    for (int64_t call : linked) {
      const double skew = double(links.calls[size_t(call)].skewNs()) * 1e-9;
      s.skew_mean_s += skew / double(linked.size());
      s.skew_max_s = std::max(s.skew_max_s, skew);
    }
    out.push_back(s);
  }
  std::sort(out.begin(), out.end(), [](const CollectiveStat& a, const CollectiveStat& b) { return a.total_s > b.total_s; });
  return out;
}

}  // namespace

Report computeReport(const std::string& path, int top, int skip_steps) {
  RunReader reader(path);
  Report rep;
  rep.path = path;
  rep.summary = summarize(reader, skip_steps);
  const std::vector<int64_t> ranks = reader.stepRanks();

  rep.top_ops = kernelsByTotalTime(reader);
  rep.top_ops_source = rep.top_ops.empty() ? "" : "kernels";
  if (rep.top_ops.empty()) {
    rep.top_ops = hostOpsBySelfTime(reader, ranks);
    if (!rep.top_ops.empty()) rep.top_ops_source = "host_ops";
  }
  if (rep.top_ops.size() > size_t(std::max(top, 0))) rep.top_ops.resize(size_t(std::max(top, 0)));

  rep.collectives = collectiveStats(reader);

  std::map<std::string, int64_t> dropped;
  for (const Drop& d : reader.drops()) {
    int64_t& n = dropped[d.source];
    if (__builtin_add_overflow(n, d.dropped, &n)) n = d.dropped > 0 ? INT64_MAX : INT64_MIN;  // a damaged file's counts
  }
  for (const auto& [src, n] : dropped)
    if (n > 0) rep.drops.emplace_back(src, n);

  rep.expert_load = summarizeExpertLoad(reader.expertLoad());
  rep.checkpoints = reader.checkpoints();
  rep.fp8 = summarizeFp8Scales(reader.fp8Scales());
  // Why a failed run failed (schema 8: the launcher wrote it; older files and clean runs have none).
  for (const RankInfo& k : reader.ranks())
    if (k.exit_status) rep.failure.ranks.push_back({k.rank, *k.exit_status, k.error});
  if (!rep.failure.ranks.empty()) rep.failure.first_rank = std::atoll(reader.meta("failed_rank", "-1").c_str());

  // What the import left out without dropping an event: values of the wrong type, device events of
  // categories it does not read (counted in meta by `trainscope import`).
  auto counted = [&](const char* key) {
    int64_t n = 0;
    try {
      const nlohmann::json counts = nlohmann::json::parse(reader.meta(key, "{}"));  // kept: items() refers to it
      for (const auto& item : counts.items())
        if (item.value().is_number_integer() && __builtin_add_overflow(n, item.value().get<int64_t>(), &n)) n = INT64_MAX;
    } catch (const nlohmann::json::exception&) {  // a damaged meta value: nothing to say
    }
    return n;
  };
  if (const int64_t n = counted("import_refused_values"); n > 0)
    rep.warnings.push_back(std::to_string(n) + " value(s) of the wrong type were left out while importing (read as absent; "
                           "by field in meta import_refused_values)");
  if (const int64_t n = counted("import_ignored_device_events"); n > 0)
    rep.warnings.push_back(std::to_string(n) + " device event(s) of categories the importer does not read were left out "
                           "(by category in meta import_ignored_device_events): the breakdown does not include them");

  // What the file cannot tell: ranks that took part but whose events never arrived.
  const std::string merged = reader.meta("merged_ranks");
  if (!merged.empty() || reader.meta("trace_level") != "") {
    std::vector<int64_t> have;
    std::stringstream ss(merged);
    for (std::string part; std::getline(ss, part, ',');) have.push_back(std::atoll(part.c_str()));
    std::string missing;
    for (int64_t r = 0; r < reader.worldSize(); ++r)
      if (std::find(have.begin(), have.end(), r) == have.end()) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    if (!merged.empty() && !missing.empty())
      rep.warnings.push_back("the events of rank(s) " + missing +
                             " are missing (their trace shards were not merged): their breakdown reads as idle");
  }
  return rep;
}

namespace {

// One line per MoE layer, and a line naming the expert of each flagged one (moe_load.h).
void formatExpertLoad(const std::vector<ExpertLayerLoad>& layers, std::ostream& o) {
  char line[512];
  o << "\nExpert load (per MoE layer, every step; imbalance: max/mean tokens per expert over the ranks, per step; "
       "flagged: mean imbalance > "
    << kImbalanceFlag << " or > " << kDroppedShareFlag * 100 << "% dropped)\n";
  o << "  layer  experts  steps  imbalance mean    max  dropped %    aux loss      z loss  hottest expert\n";
  for (const ExpertLayerLoad& l : layers) {
    std::snprintf(line, sizeof(line), "  %5lld %8lld %6lld %15.2f %6.2f %10.2f %11.4g %11.4g  %lld (%.1f%%)\n",
                  static_cast<long long>(l.layer), static_cast<long long>(l.experts), static_cast<long long>(l.steps),
                  l.imbalance_mean, l.imbalance_max, l.dropped_share * 100, l.aux_loss_mean, l.z_loss_mean,
                  static_cast<long long>(l.hottest_expert), l.hottest_share * 100);
    o << line;
  }
  for (const ExpertLayerLoad& l : layers) {
    if (!l.imbalanced) continue;
    std::snprintf(line, sizeof(line),
                  "  layer %lld IMBALANCED: expert %lld takes %.1f%% of tokens, %.1f%% dropped (mean imbalance %.2f)\n",
                  static_cast<long long>(l.layer), static_cast<long long>(l.hottest_expert), l.hottest_share * 100,
                  l.dropped_share * 100, l.imbalance_mean);
    o << line;
  }
}

// A step's critical path on one line per segment (at most kShown; --json has all).
void formatPath(const StepCriticalPath* p, std::ostream& o) {
  if (!p || p->segments.empty()) return;
  constexpr size_t kShown = 10;
  const double total = double(spanNs(p->start_ns, p->end_ns));
  char line[512];
  std::snprintf(line, sizeof(line), "    critical path (%.2f ms, %zu segment(s)):\n", total * 1e-6, p->segments.size());
  o << line;
  for (size_t i = 0; i < p->segments.size() && i < kShown; ++i) {
    const PathSegment& g = p->segments[i];
    const double len = double(spanNs(g.start_ns, g.end_ns));
    std::snprintf(line, sizeof(line), "      rank %-4lld %-8s %9.2f ms %5.1f%%  %s%s\n", static_cast<long long>(g.rank),
                  g.kind.c_str(), len * 1e-6, total > 0 ? 100 * len / total : 0.0, elide(g.name, 48).c_str(),
                  g.peer >= 0 ? (" (waited for rank " + std::to_string(g.peer) + ")").c_str() : "");
    o << line;
  }
  if (p->segments.size() > kShown) o << "      ... " << p->segments.size() - kShown << " more in --json\n";
}

// Per counted step: each rank's compute, exposed communication, wait for a peer, bubble and idle,
// and the step's straggler (step_analysis.h). At most kShownSteps steps in text; --json has all.
void formatSteps(const Report& r, std::ostream& o) {
  constexpr size_t kShownSteps = 8;
  std::map<int64_t, const StepStraggler*> straggler;
  for (const StepStraggler& st : r.summary.step_stragglers) straggler[st.step] = &st;
  std::map<int64_t, const StepCriticalPath*> path;
  for (const StepCriticalPath& p : r.summary.critical_paths) path[p.step] = &p;
  std::map<int64_t, std::vector<std::pair<int64_t, const StepBreakdown*>>> by_step;
  for (const auto& k : r.summary.ranks)
    for (const StepBreakdown& p : k.per_step) by_step[p.step].emplace_back(k.rank, &p);
  if (by_step.empty() && straggler.empty()) return;
  char line[512];
  o << "\nper step (ms; exposed comm: communication neither under compute nor waiting; wait: for a peer at a "
       "linked collective; bubble: at a linked pipeline send or receive)\n";
  size_t shown = 0;
  std::set<int64_t> steps;
  for (const auto& [step, v] : by_step) steps.insert(step);
  for (const auto& [step, p] : straggler) steps.insert(step);
  for (int64_t step : steps) {
    if (shown++ == kShownSteps) {
      o << "  ... " << steps.size() - kShownSteps << " more step(s) in --json\n";
      break;
    }
    o << "  step " << step << "\n";
    for (const auto& [rank, p] : by_step[step]) {
      const Breakdown& b = p->b;
      std::snprintf(line, sizeof(line),
                    "    rank %-4lld compute %9.2f  exposed comm %9.2f  wait %9.2f  bubble %9.2f  memory %8.2f  idle %9.2f\n",
                    static_cast<long long>(rank), b.compute_s * 1e3, b.exposedCommS() * 1e3, b.wait_s * 1e3,
                    b.bubble_s * 1e3, b.memory_s * 1e3, b.idle_s * 1e3);
      o << line;
    }
    formatPath(path[step], o);
    auto it = straggler.find(step);
    if (it == straggler.end()) continue;
    const StepStraggler& st = *it->second;
    if (st.rank < 0) {
      o << "    straggler: none (" << st.why_none << ")\n";
      continue;
    }
    std::snprintf(line, sizeof(line),
                  "    straggler: rank %lld, last at %lld of %lld linked collective(s), late by %.2f ms in all (the "
                  "others waited %.2f ms)\n",
                  static_cast<long long>(st.rank), static_cast<long long>(st.calls_last), static_cast<long long>(st.calls),
                  st.late_s * 1e3, st.others_wait_s * 1e3);
    o << line;
    for (const auto& d : st.doing) {
      std::snprintf(line, sizeof(line), "      instead: %s %9.2f ms (others %.2f ms)\n", padded(d.name, 24, 24).c_str(),
                    d.straggler_s * 1e3, d.others_s * 1e3);
      o << line;
    }
  }
}

}  // namespace

// Rows the trace's end cut: said, with what they count in.
static std::string cutNote(const CollectiveStat& c) {
  if (c.cut == 0) return "";
  return "; " + std::to_string(c.cut) + " call(s) cut by the trace's end: in calls and bytes, not in time or busbw";
}

// The collectives' table: busbw, skew and wait over the linked calls; rows not linked say why.
void formatCollectives(const std::vector<CollectiveStat>& collectives, std::ostream& o) {
  char line[512];
  o << "\ncollectives (busbw: nccl-tests' rule over the transfer, from the last rank's arrival to the end, the "
       "wait for it left out; skew: last arrival - first, over the calls linked across ranks)\n";
  for (const auto& c : collectives) {
    // Every row cut by the trace's end: bytes and calls known, no time or bandwidth — never printed as 0.
    if (c.count > 0 && c.cut == c.count) {
      std::snprintf(line, sizeof(line), "  %-15s %s %7lld calls %10.1f MiB          -  busbw -", c.op.c_str(),
                    padded(c.group, 10, 48).c_str(), static_cast<long long>(c.count), double(c.bytes) / (1 << 20));
      o << line << cutNote(c) << "\n";
      continue;
    }
    // Rows no call took have no known wait or skew: said so, never printed as 0.
    if (c.linked == 0) {
      std::snprintf(line, sizeof(line), "  %-15s %s %7lld calls %10.1f MiB %10.2f ms  busbw %.3f GB/s (whole call)  not linked: ",
                    c.op.c_str(), padded(c.group, 10, 48).c_str(), static_cast<long long>(c.count), double(c.bytes) / (1 << 20),
                    c.total_s * 1e3, c.busbw_with_wait_mean * 1e-9);
      o << line << c.not_linked_reason << cutNote(c) << "\n";
      continue;
    }
    std::snprintf(line, sizeof(line),
                  "  %-15s %s %7lld calls %10.1f MiB %10.2f ms  busbw mean %.3f max %.3f GB/s (whole call %.3f)"
                  "  skew mean %.3f max %.3f ms  wait %.2f ms",
                  c.op.c_str(), padded(c.group, 10, 48).c_str(), static_cast<long long>(c.count), double(c.bytes) / (1 << 20),
                  c.total_s * 1e3, c.busbw_mean * 1e-9, c.busbw_max * 1e-9, c.busbw_with_wait_mean * 1e-9,
                  c.skew_mean_s * 1e3, c.skew_max_s * 1e3, c.wait_s * 1e3);
    o << line;
    if (c.rows_not_linked > 0)
      o << " (over the linked rows; " << c.rows_not_linked << " row(s) not linked: " << c.not_linked_reason << ")";
    o << cutNote(c) << "\n";
  }
}

// A failed run: the rank that failed first and its error, then each other rank's end, before the table.
static void formatFailure(const RunFailure& f, std::ostream& o) {
  if (f.ranks.empty()) return;
  auto end = [](const RankFailure& k) {
    return "exit status " + std::to_string(k.exit_status) + (k.error.empty() ? "" : ": " + k.error);
  };
  for (const RankFailure& k : f.ranks)
    if (k.rank == f.first_rank) o << "failed: rank " << k.rank << " failed first (" << end(k) << ")\n";
  for (const RankFailure& k : f.ranks)
    if (k.rank != f.first_rank) o << "  then rank " << k.rank << " (" << end(k) << ")\n";
  o << "\n";
}

std::string formatReport(const Report& r) {
  const RunSummary& s = r.summary;
  std::ostringstream o;
  char line[512];
  o << "trainscope report: " << r.path << (s.workload.empty() ? "" : " (" + s.workload + ")") << ", " << s.world
    << " rank(s)\n";
  // A run without token counts (an imported trace: the profiler records none) or without memory
  // events (a trace taken without profile_memory) says so: "0 tokens/s" and "0.00 MiB" read as
  // measurements.
  if (s.tokens_per_s > 0)
    std::snprintf(line, sizeof(line), "throughput %.0f tokens/s over %lld step(s)", s.tokens_per_s, static_cast<long long>(s.steps));
  else
    std::snprintf(line, sizeof(line), "throughput not recorded (no token counts) over %lld step(s)", static_cast<long long>(s.steps));
  o << line;
  std::snprintf(line, sizeof(line), "; step time median %.2f ms, p90 %.2f ms", s.step_s_median * 1e3, s.step_s_p90 * 1e3);
  o << line;
  if (s.mfu) {
    std::snprintf(line, sizeof(line), "; MFU %.2f%%, HFU %.2f%%", *s.mfu * 100, *s.hfu * 100);
    o << line;
  }
  if (s.peak_bytes > 0) std::snprintf(line, sizeof(line), "; peak memory %.2f MiB\n\n", double(s.peak_bytes) / (1 << 20));
  else std::snprintf(line, sizeof(line), "; peak memory not recorded\n\n");
  o << line;
  formatFailure(r.failure, o);
  const bool gpu = s.breakdown_window == "gpu";
  o << "rank  steps   mean ms  median ms   p90 ms" << (gpu ? "    GPU ms" : "")
    << "   compute ms   comm ms  (wait  bubble)  overlap ms  memory ms   idle ms  peak MiB\n";
  for (const auto& k : s.ranks) {
    const Breakdown b = k.breakdown.value_or(Breakdown{});
    auto cell = [&](double v) {
      char c[32];
      if (k.breakdown) std::snprintf(c, sizeof(c), "%.2f", v * 1e3);
      else std::snprintf(c, sizeof(c), "-");
      return std::string(c);
    };
    char gpu_cell[32] = "";
    if (gpu && k.gpu_step_s) std::snprintf(gpu_cell, sizeof(gpu_cell), " %9.2f", *k.gpu_step_s * 1e3);
    else if (gpu) std::snprintf(gpu_cell, sizeof(gpu_cell), " %9s", "-");
    char peak_cell[32] = "        -";  // no memory recorded on this rank
    if (k.peak_bytes > 0) std::snprintf(peak_cell, sizeof(peak_cell), "%9.1f", double(k.peak_bytes) / (1 << 20));
    std::snprintf(line, sizeof(line), "%4lld %6lld %9.2f %10.2f %8.2f%s %12s %9s %7s %7s %11s %10s %9s %s%s\n",
                  static_cast<long long>(k.rank), static_cast<long long>(k.steps), k.step_s_mean * 1e3,
                  k.step_s_median * 1e3, k.step_s_p90 * 1e3, gpu_cell, cell(b.compute_s).c_str(), cell(b.comm_s).c_str(),
                  cell(b.wait_s).c_str(), cell(b.bubble_s).c_str(), cell(b.overlap_s).c_str(), cell(b.memory_s).c_str(), cell(b.idle_s).c_str(),
                  peak_cell, k.compute_heavy ? "  <- compute > 1.1x median" : "");
    o << line;
  }
  o << "(per counted step, over each step's " << (gpu ? "GPU window: its launches' device work" : "CPU window")
    << (s.breakdown_source.empty() ? "" : "; compute from " + s.breakdown_source)
    << ";\n wait: comm spent waiting for a peer at a linked collective, bubble: at a linked pipeline send or receive)\n";
  for (const auto& n : s.notes) o << "note: " << n << "\n";
  formatSteps(r, o);
  if (!r.top_ops.empty()) {
    o << "\ntop " << r.top_ops.size() << " " << r.top_ops_source
      << (r.top_ops_source == "kernels" ? " by total time\n" : " by self time (total includes nested ops)\n");
    o << "     self ms    total ms    calls   mean us  name\n";
    for (const auto& op : r.top_ops) {
      std::snprintf(line, sizeof(line), "  %10.2f  %10.2f %8lld %9.2f  %s\n", op.self_s * 1e3, op.total_s * 1e3,
                    static_cast<long long>(op.count), op.mean_s * 1e6, elide(op.name).c_str());
      o << line;
    }
  }
  if (!r.collectives.empty()) formatCollectives(r.collectives, o);
  if (!r.expert_load.empty()) formatExpertLoad(r.expert_load, o);
  if (!r.checkpoints.empty()) {
    o << "\ncheckpoints (run --save):\n";
    for (const Checkpoint& c : r.checkpoints) {
      char line[256];
      std::snprintf(line, sizeof(line), "  after step %lld: %.1f MiB in %.3f s (%.1f MB/s)  ",
                    static_cast<long long>(c.step), double(c.bytes) / (1 << 20), c.seconds,
                    c.seconds > 0 ? double(c.bytes) / c.seconds * 1e-6 : 0.0);
      o << line << c.path << "\n";  // a path of any length, whole
    }
  }
  if (!r.fp8.empty()) {
    o << "\nfp8 scaling (delayed, per tensor; saturated: values clipped to the format's max by a stale scale)\n";
    for (const auto& f : r.fp8) {
      std::snprintf(line, sizeof(line),
                    "  %-11s %s  %3lld linears %5lld steps  last-step amax %.4g..%.4g  scale %.4g..%.4g  saturated "
                    "%lld of %lld\n",
                    f.role.c_str(), f.role == "grad_output" ? "E5M2" : "E4M3", static_cast<long long>(f.linears),
                    static_cast<long long>(f.steps), f.last_amax_min, f.last_amax_max, f.scale_min, f.scale_max,
                    static_cast<long long>(f.saturated), static_cast<long long>(f.rows));
      o << line;
    }
  }
  for (const auto& [src, n] : r.drops)
    o << "\nwarning: " << n << " " << src
      << (src == "import" ? " events were left out while importing (a time outside int64 nanoseconds, or a negative "
                            "duration)\n"
                          : " events were dropped while tracing\n");
  for (const auto& w : r.warnings) o << "\nwarning: " << w << "\n";
  return o.str();
}

std::string reportJson(const Report& r) {
  nlohmann::json j = {{"path", r.path}, {"summary", nlohmann::json::parse(summaryJson(r.summary))},
                      {"top_ops_source", r.top_ops_source}};
  j["top_ops"] = nlohmann::json::array();
  for (const auto& o : r.top_ops)
    j["top_ops"].push_back({{"name", o.name}, {"count", o.count}, {"total_s", o.total_s}, {"self_s", o.self_s},
                            {"mean_s", o.mean_s}});
  j["collectives"] = nlohmann::json::array();
  for (const auto& c : r.collectives) {
    // Nothing linked: skew and wait are unknown (null) and not_linked_reason says why.
    auto known = [&](double v) { return c.linked > 0 ? nlohmann::json(v) : nlohmann::json(nullptr); };
    // Every row cut by the trace's end: no time or bandwidth is known (null), only calls and bytes.
    const bool timed = c.cut < c.count;
    auto ended = [&](double v) { return timed ? nlohmann::json(v) : nlohmann::json(nullptr); };
    j["collectives"].push_back({{"op", c.op}, {"group", c.group}, {"count", c.count}, {"bytes", c.bytes},
                                {"total_s", ended(c.total_s)}, {"busbw_mean", ended(c.busbw_mean)},
                                {"busbw_max", ended(c.busbw_max)},
                                {"busbw_with_wait_mean", ended(c.busbw_with_wait_mean)}, {"linked_calls", c.linked},
                                {"skew_mean_s", known(c.skew_mean_s)}, {"skew_max_s", known(c.skew_max_s)},
                                {"wait_s", timed ? known(c.wait_s) : nlohmann::json(nullptr)},
                                {"transfer_s", ended(c.transfer_s)},
                                {"rows_not_linked", c.rows_not_linked}, {"cut_rows", c.cut},
                                {"not_linked_reason", c.rows_not_linked > 0 ? nlohmann::json(c.not_linked_reason)
                                                                            : nlohmann::json(nullptr)}});
  }
  j["dropped"] = nlohmann::json::object();
  for (const auto& [src, n] : r.drops) j["dropped"][src] = n;
  j["warnings"] = r.warnings;
  j["failure"] = nullptr;  // a failed run: the rank that failed first, and each failed rank's end
  if (!r.failure.ranks.empty()) {
    nlohmann::json ranks = nlohmann::json::array();
    for (const RankFailure& k : r.failure.ranks)
      ranks.push_back({{"rank", k.rank}, {"exit_status", k.exit_status},
                       {"error", k.error.empty() ? nlohmann::json(nullptr) : nlohmann::json(k.error)}});
    j["failure"] = {{"first_rank", r.failure.first_rank >= 0 ? nlohmann::json(r.failure.first_rank) : nlohmann::json(nullptr)},
                    {"ranks", ranks}};
  }
  j["checkpoints"] = nlohmann::json::array();
  for (const Checkpoint& c : r.checkpoints)
    j["checkpoints"].push_back({{"step", c.step}, {"seconds", c.seconds}, {"bytes", c.bytes}, {"path", c.path}});
  j["fp8"] = nlohmann::json::array();
  for (const auto& f : r.fp8)
    j["fp8"].push_back({{"role", f.role}, {"linears", f.linears}, {"steps", f.steps}, {"rows", f.rows},
                        {"last_amax_min", f.last_amax_min}, {"last_amax_max", f.last_amax_max},
                        {"scale_min", f.scale_min}, {"scale_max", f.scale_max}, {"saturated", f.saturated}});
  // Per counted step: each rank's breakdown (summary.ranks[].per_step) and the straggler.
  std::map<int64_t, nlohmann::json> steps;
  for (const auto& k : r.summary.ranks)
    for (const StepBreakdown& p : k.per_step) {
      nlohmann::json& st = steps[p.step];
      st["step"] = p.step;
      st["ranks"].push_back({{"rank", k.rank}, {"start_ns", p.start_ns}, {"end_ns", p.end_ns}, {"compute_s", p.b.compute_s},
                             {"exposed_comm_s", p.b.exposedCommS()}, {"wait_s", p.b.wait_s}, {"bubble_s", p.b.bubble_s},
                             {"overlap_s", p.b.overlap_s}, {"memory_s", p.b.memory_s}, {"idle_s", p.b.idle_s}});
    }
  for (const StepStraggler& s : r.summary.step_stragglers) {
    nlohmann::json& st = steps[s.step];
    st["step"] = s.step;
    if (!st.contains("ranks")) st["ranks"] = nlohmann::json::array();
    if (s.rank < 0) {
      st["straggler"] = nullptr;
      st["straggler_none"] = s.why_none;
      continue;
    }
    nlohmann::json doing = nlohmann::json::array();
    for (const auto& d : s.doing) doing.push_back({{"name", d.name}, {"straggler_s", d.straggler_s}, {"others_s", d.others_s}});
    st["straggler"] = {{"rank", s.rank}, {"calls", s.calls}, {"calls_last", s.calls_last}, {"late_s", s.late_s},
                       {"others_wait_s", s.others_wait_s}, {"doing", doing}};
  }
  for (const StepCriticalPath& p : r.summary.critical_paths) {
    nlohmann::json& st = steps[p.step];
    st["step"] = p.step;
    if (!st.contains("ranks")) st["ranks"] = nlohmann::json::array();
    const double total = double(spanNs(p.start_ns, p.end_ns));
    nlohmann::json seg = nlohmann::json::array();
    for (const PathSegment& g : p.segments) {
      const double len = double(spanNs(g.start_ns, g.end_ns));
      seg.push_back({{"rank", g.rank}, {"kind", g.kind}, {"name", g.name}, {"start_ns", g.start_ns}, {"end_ns", g.end_ns},
                     {"s", len * 1e-9}, {"share", total > 0 ? len / total : 0.0},
                     {"peer", g.peer >= 0 ? nlohmann::json(g.peer) : nlohmann::json(nullptr)}});
    }
    st["critical_path"] = {{"start_ns", p.start_ns}, {"end_ns", p.end_ns}, {"s", total * 1e-9}, {"segments", seg}};
  }
  j["steps"] = nlohmann::json::array();
  for (auto& [step, st] : steps) j["steps"].push_back(std::move(st));
  j["expert_load"] = nlohmann::json::array();
  for (const auto& l : r.expert_load)
    j["expert_load"].push_back({{"layer", l.layer}, {"experts", l.experts}, {"steps", l.steps},
                                {"imbalance_mean", l.imbalance_mean}, {"imbalance_max", l.imbalance_max},
                                {"tokens", l.tokens}, {"dropped", l.dropped}, {"dropped_share", l.dropped_share},
                                {"aux_loss_mean", l.aux_loss_mean}, {"z_loss_mean", l.z_loss_mean},
                                {"hottest_expert", l.hottest_expert}, {"hottest_share", l.hottest_share},
                                {"imbalanced", l.imbalanced}});
  return jsonText(j);
}

}  // namespace trainscope::rundb
