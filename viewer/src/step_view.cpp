// step_view.cpp — see step_view.h.
#include "trainscope/viewer/step_view.h"

#include <algorithm>
#include <cstdio>

#include "trainscope/rundb/range_names.h"
#include "trainscope/rundb/step_analysis.h"
#include "trainscope/viewer/comm.h"
#include "trainscope/viewer/view_state.h"

namespace trainscope::viewer {

std::vector<std::string> stragglerLines(const rundb::RunSummary& s) {
  std::vector<std::string> out;
  for (const rundb::StepStraggler& st : s.step_stragglers) {
    std::string line = "step " + std::to_string(st.step) + ": ";
    if (st.rank < 0) {
      out.push_back(line + "no straggler (" + st.why_none + ")");
      continue;
    }
    line += "straggler rank " + std::to_string(st.rank) + ", last at " + std::to_string(st.calls_last) + " of " +
            std::to_string(st.calls) + " collective(s), late by " + formatDuration(st.late_s * 1e9) +
            " (the others waited " + formatDuration(st.others_wait_s * 1e9) + ")";
    if (!st.doing.empty()) {
      line += "; instead: ";
      for (size_t i = 0; i < st.doing.size() && i < 3; ++i)
        line += (i ? ", " : "") + st.doing[i].name + " " + formatDuration(st.doing[i].straggler_s * 1e9) + " (others " +
                formatDuration(st.doing[i].others_s * 1e9) + ")";
    }
    out.push_back(line);
  }
  return out;
}

std::vector<std::string> criticalPathLines(const rundb::RunSummary& s) {
  constexpr size_t kShown = 8;
  std::vector<std::string> out;
  for (const rundb::StepCriticalPath& p : s.critical_paths) {
    if (p.segments.empty()) continue;
    const double total = double(rundb::spanNs(p.start_ns, p.end_ns));
    std::string line = "step " + std::to_string(p.step) + ": critical path " + formatDuration(total) + ":";
    for (size_t i = 0; i < p.segments.size() && i < kShown; ++i) {
      const rundb::PathSegment& g = p.segments[i];
      const double len = double(rundb::spanNs(g.start_ns, g.end_ns));
      char share[32];
      std::snprintf(share, sizeof share, "%.1f%%", total > 0 ? 100 * len / total : 0.0);
      line += std::string(i ? " >" : "") + " rank " + std::to_string(g.rank) + " " +
              (g.kind == "work" ? "work" : g.name) + " " + formatDuration(len) + " " + share;
      if (g.kind == "work" && !g.name.empty()) line += " (" + g.name + ")";
      if (g.peer >= 0) line += " (waited for rank " + std::to_string(g.peer) + ")";
    }
    if (p.segments.size() > kShown) line += " > ... " + std::to_string(p.segments.size() - kShown) + " more";
    out.push_back(line);
  }
  return out;
}

Fields stepAnalysisFields(const Trace& t, const rundb::RunSummary& s, const EventRef& ref) {
  Fields f;
  if (ref.track >= t.tracks.size() || t.tracks[ref.track].kind != TrackKind::Steps) return f;
  const int64_t rank = t.tracks[ref.track].rank, start = t.event(ref).start;
  int64_t step = -1;
  for (const rundb::Step& r : t.steps)
    if (r.rank == rank && r.start_ns == start) step = r.step;
  if (step < 0) return f;
  for (const rundb::RankSummary& r : s.ranks)
    for (const rundb::StepBreakdown& p : r.per_step)
      if (r.rank == rank && p.step == step) {
        const rundb::Breakdown& b = p.b;
        f.push_back({"this step on this rank",
                     formatDuration(b.compute_s * 1e9) + " compute, " + formatDuration(b.exposedCommS() * 1e9) +
                         " exposed comm, " + formatDuration(b.wait_s * 1e9) + " waiting for a peer, " +
                         formatDuration(b.bubble_s * 1e9) + " bubble, " + formatDuration(b.idle_s * 1e9) + " idle"});
      }
  const std::string prefix = "step " + std::to_string(step) + ": ";
  for (const std::string& line : stragglerLines(s))
    if (line.rfind(prefix, 0) == 0) f.push_back({"straggler", line.substr(prefix.size())});
  for (const rundb::StepCriticalPath& p : s.critical_paths) {
    if (p.step != step || p.segments.empty()) continue;
    const double total = double(rundb::spanNs(p.start_ns, p.end_ns));
    f.push_back({"critical path", formatDuration(total) + ", " + std::to_string(p.segments.size()) + " segment(s)"});
    for (size_t i = 0; i < p.segments.size(); ++i) {
      const rundb::PathSegment& g = p.segments[i];
      const double len = double(rundb::spanNs(g.start_ns, g.end_ns));
      char share[32];
      std::snprintf(share, sizeof share, "%.1f%%", total > 0 ? 100 * len / total : 0.0);
      std::string v = share + std::string(" rank ") + std::to_string(g.rank) + " " + g.kind + " " + formatDuration(len);
      if (!g.name.empty()) v += " (" + g.name + ")";
      if (g.peer >= 0) v += ", waited for rank " + std::to_string(g.peer);
      f.push_back({"path " + std::to_string(i + 1), v});
    }
  }
  return f;
}

std::vector<RankRangeBreakdown> rangeBreakdown(const Trace& t, int64_t begin, int64_t end) {
  std::vector<RankRangeBreakdown> out;
  if (end <= begin) return out;
  std::vector<bool> compute_name(t.names.size(), false);
  for (size_t i = 0; i < t.names.size(); ++i)
    for (const char* n : rundb::names::kComputeRanges) compute_name[i] = compute_name[i] || t.names[i] == n;
  for (const RankGroup& g : t.ranks) {
    rundb::CategoryIntervals ev;
    std::vector<rundb::Interval> kernels, nccl, collectives, ops, ranges;
    for (size_t ti : g.tracks) {
      const Track& tr = t.tracks[ti];
      for (uint32_t li = 0; li < tr.lanes.size(); ++li) {
        const Lane& l = tr.lanes[li];
        // Events of a lane are sorted by start and never overlap: their ends are sorted too.
        auto first = std::partition_point(l.events.begin(), l.events.end(), [&](const Event& e) { return e.end <= begin; });
        for (auto it = first; it != l.events.end() && it->start < end; ++it) {
          const Event& e = *it;
          const rundb::Interval iv{std::max(e.start, begin), std::min(e.end, end)};
          switch (e.kind) {
            case EventKind::Kernel: kernels.push_back(iv); break;
            case EventKind::CommKernel: nccl.push_back(iv); break;
            case EventKind::Memcpy:
            case EventKind::Memset: ev.memory.push_back(iv); break;
            case EventKind::HostOp: ops.push_back(iv); break;
            case EventKind::Range:
              if (e.name < compute_name.size() && compute_name[e.name]) ranges.push_back(iv);
              break;
            case EventKind::Collective: {
              const EventRef ref{uint32_t(ti), li, uint32_t(it - l.events.begin())};
              if (const CommCall* call = t.comm.callOf(ref)) {
                const int64_t w = memberTiming(t, *call, ref).wait_ns;
                if (w > 0) (call->link.p2p ? ev.bubble : ev.wait).push_back({e.start, e.start + std::min(w, e.duration())});
              }
              collectives.push_back(iv);
              break;
            }
            default: break;
          }
        }
      }
    }
    // On a rank with kernels, communication is what NCCL's kernels ran (the CPU's calls span launches).
    if (!kernels.empty() || !nccl.empty()) {
      ev.compute = std::move(kernels);
      ev.comm = std::move(nccl);
    } else {
      ev.compute = !ranges.empty() ? std::move(ranges) : std::move(ops);
      ev.comm = std::move(collectives);
    }
    out.push_back({g.rank, rundb::breakdownOver(ev, {{begin, end}}, 1)});
  }
  return out;
}

}  // namespace trainscope::viewer
