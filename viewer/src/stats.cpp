// stats.cpp — see stats.h.
#include "trainscope/viewer/stats.h"

#include <algorithm>
#include <unordered_map>

namespace trainscope::viewer {

namespace {
const char* kGroupNames[kStatGroups] = {"kernels", "ops", "ranges", "collectives", "memory", "api"};
}

const char* groupName(StatGroup g) { return kGroupNames[int(g)]; }

StatGroup groupOf(EventKind k) {
  switch (k) {
    case EventKind::Kernel:
    case EventKind::CommKernel: return StatGroup::Kernels;
    case EventKind::HostOp: return StatGroup::Ops;
    case EventKind::ApiCall: return StatGroup::Api;
    case EventKind::Memcpy:
    case EventKind::Memset: return StatGroup::Memory;
    case EventKind::Collective: return StatGroup::Collectives;
    default: return StatGroup::Ranges;
  }
}

Statistics computeStatistics(const Trace& trace, const std::atomic<bool>* cancel) {
  // key: group (3 bits) | rank + 1 (21 bits) | name (32 bits)
  std::unordered_map<uint64_t, StatRow> rows;
  auto add = [&](StatGroup g, uint32_t name, int64_t rank, int64_t dur, int64_t self) {
    const uint64_t key = (uint64_t(g) << 53) | (uint64_t(rank + 1) & 0x1fffff) << 32 | name;
    StatRow& r = rows[key];
    r.group = g;
    r.name = name;
    r.rank = rank;
    ++r.count;
    r.total_ns += dur;
    r.self_ns += self;
    r.min_ns = std::min(r.min_ns, dur);
    r.max_ns = std::max(r.max_ns, dur);
  };
  for (const Track& t : trace.tracks) {
    for (size_t d = 0; d < t.lanes.size(); ++d) {
      if (cancel && cancel->load(std::memory_order_relaxed)) throw Cancelled();
      const auto& ev = t.lanes[d].events;
      // Children: the next lane's events inside each event, found by walking both sorted lanes.
      const std::vector<Event>* kids = d + 1 < t.lanes.size() ? &t.lanes[d + 1].events : nullptr;
      size_t k = 0;
      for (const Event& e : ev) {
        if (e.kind == EventKind::Step) continue;
        int64_t inside = 0;
        if (kids) {
          while (k < kids->size() && (*kids)[k].start < e.start) ++k;
          for (size_t j = k; j < kids->size() && (*kids)[j].start < e.end; ++j)
            if ((*kids)[j].end <= e.end) inside += (*kids)[j].duration();
        }
        const int64_t dur = e.duration();
        const int64_t self = std::max<int64_t>(0, dur - inside);
        add(groupOf(e.kind), e.name, t.rank, dur, self);
        add(groupOf(e.kind), e.name, -1, dur, self);
      }
    }
  }
  Statistics s;
  s.rows.reserve(rows.size());
  for (auto& [key, r] : rows) s.rows.push_back(r);
  return s;
}

std::vector<const StatRow*> statRows(const Statistics& s, const Trace& trace, StatGroup g, int64_t rank, StatSort by,
                                     bool descending) {
  std::vector<const StatRow*> out;
  for (const auto& r : s.rows)
    if (r.group == g && r.rank == rank) out.push_back(&r);
  auto key = [&](const StatRow* r) -> double {
    switch (by) {
      case StatSort::Total: return double(r->total_ns);
      case StatSort::Self: return double(r->self_ns);
      case StatSort::Count: return double(r->count);
      case StatSort::Mean: return r->mean_ns();
      case StatSort::Max: return double(r->max_ns);
      default: return 0;
    }
  };
  std::stable_sort(out.begin(), out.end(), [&](const StatRow* a, const StatRow* b) {
    if (by == StatSort::Name) {
      const auto& x = trace.names[a->name];
      const auto& y = trace.names[b->name];
      return descending ? y < x : x < y;
    }
    const double x = key(a), y = key(b);
    if (x != y) return descending ? x > y : x < y;
    return trace.names[a->name] < trace.names[b->name];
  });
  return out;
}

}  // namespace trainscope::viewer
