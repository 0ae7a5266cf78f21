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
