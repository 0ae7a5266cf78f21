// step_analysis.cpp — waits, bubble and the breakdown by category (see step_analysis.h).
#include "trainscope/rundb/step_analysis.h"

#include <algorithm>
#include <set>

#include "trainscope/rundb/range_names.h"
#include "trainscope/rundb/reader.h"
#include "saturating.h"

namespace trainscope::rundb {
namespace {


// |a ∖ b| within [begin, end), both merged.
int64_t coveredWithout(const std::vector<Interval>& a, const std::vector<Interval>& a_and_b, int64_t begin, int64_t end) {
  return satSub(coveredWithin(a, begin, end), coveredWithin(a_and_b, begin, end));
}

}  // namespace

std::map<int64_t, PeerWaits> peerWaits(const std::vector<Collective>& rows, const CollectiveLinks& links) {
  std::map<int64_t, PeerWaits> out;
  for (size_t i = 0; i < rows.size() && i < links.call_of.size(); ++i) {
    if (links.call_of[i] < 0) continue;
    const LinkedCall& call = links.calls[size_t(links.call_of[i])];
    const Collective& c = rows[i];
    const int64_t until = std::min(c.end_ns, call.last_start_ns);
    if (until <= c.start_ns) continue;  // it arrived last: no wait
    (call.p2p ? out[c.rank].bubble : out[c.rank].wait).push_back({c.start_ns, until});
  }
  return out;
}

namespace {

// Two sorted interval lists as one, sorted (unionOf then has nothing to sort: millions of kernels).
std::vector<Interval> merged(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::vector<Interval> out(a.size() + b.size());
  std::merge(a.begin(), a.end(), b.begin(), b.end(), out.begin(),
             [](const Interval& x, const Interval& y) { return x.begin < y.begin; });
  return out;
}

// The categories' intervals merged once, then measured over any window.
struct Merged {
  std::vector<Interval> cu, co, ov, work, any, wa, wa_cu, bu, bu_taken;
  explicit Merged(const CategoryIntervals& ev) {
    cu = unionOf(ev.compute), co = unionOf(ev.comm), ov = intersect(cu, co);
    work = unionOf(merged(cu, co));
    any = unionOf(merged(work, unionOf(ev.memory)));
    // Waiting where communication runs and compute does not; the bubble where neither does a wait.
    wa = intersect(unionOf(ev.wait), co), wa_cu = intersect(wa, cu);
    bu = intersect(unionOf(ev.bubble), co);
    bu_taken = intersect(bu, unionOf(merged(cu, wa)));
  }
  // Integer nanoseconds over [begin, end): exact, and each category is at most what ran.
  struct Ns {
    int64_t compute = 0, comm = 0, overlap = 0, memory = 0, idle = 0, wait = 0, bubble = 0;
  };
  void add(Ns& n, int64_t begin, int64_t end) const {
    n.compute = satAdd(n.compute, coveredWithin(cu, begin, end));
    n.comm = satAdd(n.comm, coveredWithin(co, begin, end));
    n.overlap = satAdd(n.overlap, coveredWithin(ov, begin, end));
    const int64_t covered = coveredWithin(any, begin, end);
    n.memory = satAdd(n.memory, satSub(covered, coveredWithin(work, begin, end)));
    n.idle = satAdd(n.idle, satSub(satSub(end, begin), covered));
    n.wait = satAdd(n.wait, coveredWithout(wa, wa_cu, begin, end));
    n.bubble = satAdd(n.bubble, coveredWithout(bu, bu_taken, begin, end));
  }
  static Breakdown seconds(const Ns& n, int64_t steps) {
    const double d = double(std::max<int64_t>(1, steps));
    Breakdown b;
    b.compute_s = double(n.compute) * 1e-9 / d;
    b.comm_s = double(n.comm) * 1e-9 / d;
    b.overlap_s = double(n.overlap) * 1e-9 / d;
    b.memory_s = double(n.memory) * 1e-9 / d;
    b.idle_s = double(n.idle) * 1e-9 / d;
    b.wait_s = double(n.wait) * 1e-9 / d;
    b.bubble_s = double(n.bubble) * 1e-9 / d;
    return b;
  }
};

}  // namespace

Breakdown breakdownOver(const CategoryIntervals& ev, const std::vector<Interval>& windows, int64_t steps) {
  return breakdownOverAndEach(ev, windows, steps, nullptr);
}

std::vector<Breakdown> breakdownEach(const CategoryIntervals& ev, const std::vector<Interval>& windows) {
  std::vector<Breakdown> out;
  breakdownOverAndEach(ev, windows, 1, &out);
  return out;
}

Breakdown breakdownOverAndEach(const CategoryIntervals& ev, const std::vector<Interval>& windows, int64_t steps,
                               std::vector<Breakdown>* each) {
  const Merged m(ev);
  Merged::Ns all;
  for (const auto& [begin, end] : windows) {
    m.add(all, begin, end);
    if (!each) continue;
    Merged::Ns n;
    m.add(n, begin, end);
    each->push_back(Merged::seconds(n, 1));
  }
  return Merged::seconds(all, steps);
}

namespace {

// Each rank's counted steps as (start, end, step), sorted by start.
struct Window {
  int64_t begin, end, step;
};
std::map<int64_t, std::vector<Window>> countedWindows(const std::vector<Step>& steps, int64_t skip) {
  std::map<int64_t, std::vector<Window>> out;
  int64_t first = INT64_MAX;
  for (const Step& r : steps) first = std::min(first, r.step);
  if (steps.empty()) return out;
  for (const Step& r : steps)
    if (r.step >= satAdd(first, skip)) out[r.rank].push_back({r.start_ns, satAdd(r.start_ns, r.step_time_ns), r.step});
  for (auto& [rank, w] : out)
    std::sort(w.begin(), w.end(), [](const Window& a, const Window& b) { return a.begin < b.begin; });
  return out;
}

const Window* windowAt(const std::vector<Window>& w, int64_t t) {
  auto it = std::partition_point(w.begin(), w.end(), [t](const Window& x) { return x.begin <= t; });
  if (it == w.begin()) return nullptr;
  --it;
  return t < it->end ? &*it : nullptr;
}

bool isStepOrComm(const std::string& n) {
  return n == names::kStep || n == names::kMicroBatch || n.rfind("ProfilerStep#", 0) == 0 || n.rfind(std::string(names::kCollective) + "/", 0) == 0 ||
         n == names::kPipelineSend || n == names::kPipelineRecv || n.rfind("gloo:", 0) == 0 || n.rfind("nccl:", 0) == 0;
}

// Time by range name within [begin, end) on one rank (ranges sorted by start).
std::map<StringId, int64_t> timeByName(const std::vector<Range>& ranges, int64_t begin, int64_t end) {
  std::map<StringId, int64_t> out;
  for (const Range& r : ranges) {
    if (r.start_ns >= end) break;
    const int64_t b = std::max(r.start_ns, begin), e = std::min(r.end_ns, end);
    if (e > b) out[r.name] = satAdd(out[r.name], satSub(e, b));
  }
  return out;
}

}  // namespace

std::vector<StepStraggler> stepStragglers(RunReader& reader, const std::vector<Collective>& rows,
                                          const CollectiveLinks& links, int64_t skip) {
  const auto windows = countedWindows(reader.steps(), skip);
  std::map<int64_t, StepStraggler> by_step;
  std::map<int64_t, std::map<int64_t, double>> late;  // step → rank → Σ late
  std::map<int64_t, std::pair<double, int64_t>> worst;  // step → (largest late, its call)
  for (const auto& [rank, w] : windows)
    for (const Window& x : w) by_step[x.step].step = x.step;
  for (size_t ci = 0; ci < links.calls.size(); ++ci) {
    const LinkedCall& call = links.calls[ci];
    if (call.p2p || call.rows.size() < 2) continue;
    const Collective& first = rows[call.rows[0]];
    auto wit = windows.find(first.rank);
    if (wit == windows.end()) continue;
    const Window* w = windowAt(wit->second, first.start_ns);
    if (!w) continue;  // a warm-up step, or between steps
    StepStraggler& s = by_step[w->step];
    ++s.calls;
    // The last arrival and the second-last (ties: no one held the call up).
    std::vector<std::pair<int64_t, int64_t>> arrivals;  // (start, rank)
    for (size_t r : call.rows) arrivals.emplace_back(rows[r].start_ns, rows[r].rank);
    std::sort(arrivals.begin(), arrivals.end());
    const auto& last = arrivals.back();
    const int64_t by = satSub(last.first, arrivals[arrivals.size() - 2].first);
    if (by <= 0) continue;
    const double by_s = double(by) * 1e-9;
    late[w->step][last.second] += by_s;
    if (by_s > worst[w->step].first) worst[w->step] = {by_s, int64_t(ci)};
  }
  std::vector<StepStraggler> out;
  for (auto& [step, s] : by_step) {
    const auto& per_rank = late[step];
    if (s.calls == 0) s.why_none = "no linked collective in this step";
    else if (per_rank.empty()) s.why_none = "every linked collective of this step had its ranks arrive together";
    if (!s.why_none.empty()) {
      out.push_back(s);
      continue;
    }
    auto best = std::max_element(per_rank.begin(), per_rank.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
    s.rank = best->first;
    s.late_s = best->second;
    for (size_t ci = 0; ci < links.calls.size(); ++ci) {  // the calls it was last at, and the others' wait
      const LinkedCall& call = links.calls[ci];
      if (call.p2p || call.rows.size() < 2) continue;
      const Collective& first = rows[call.rows[0]];
      const Window* w = windows.count(first.rank) ? windowAt(windows.at(first.rank), first.start_ns) : nullptr;
      if (!w || w->step != step) continue;
      int64_t last_rank = -1;
      for (size_t r : call.rows)
        if (rows[r].start_ns == call.last_start_ns && last_rank < 0) last_rank = rows[r].rank;
      if (last_rank != s.rank) continue;
      ++s.calls_last;
      for (size_t r : call.rows) s.others_wait_s += double(satSub(call.last_start_ns, rows[r].start_ns)) * 1e-9;
    }
    // What it was doing: at the call it was latest at, each rank from its step's start to its arrival.
    const LinkedCall& call = links.calls[size_t(worst[step].second)];
    std::map<StringId, int64_t> mine;
    std::map<StringId, double> others;
    size_t n_others = 0;
    for (size_t r : call.rows) {
      const Collective& c = rows[r];
      auto wit = windows.find(c.rank);
      const Window* w = wit == windows.end() ? nullptr : windowAt(wit->second, c.start_ns);
      if (!w) continue;
      const auto t = timeByName(reader.startingIn<Range>(c.rank, w->begin, c.start_ns), w->begin, c.start_ns);
      if (c.rank == s.rank) {
        mine = t;
      } else {
        ++n_others;
        for (const auto& [name, ns] : t) others[name] += double(ns);
      }
    }
    std::set<StringId> all;
    for (const auto& [name, ns] : mine) all.insert(name);
    for (const auto& [name, ns] : others) all.insert(name);
    for (StringId name : all) {
      const std::string& text = reader.string(name);
      if (isStepOrComm(text)) continue;
      StepStraggler::Doing d;
      d.name = text;
      d.straggler_s = double(mine.count(name) ? mine.at(name) : 0) * 1e-9;
      d.others_s = n_others ? (others.count(name) ? others.at(name) : 0.0) * 1e-9 / double(n_others) : 0.0;
      if (d.straggler_s > d.others_s) s.doing.push_back(d);
    }
    std::sort(s.doing.begin(), s.doing.end(), [](const auto& a, const auto& b) {
      return a.straggler_s - a.others_s > b.straggler_s - b.others_s;
    });
    if (s.doing.size() > 5) s.doing.resize(5);
    out.push_back(s);
  }
  return out;
}

std::vector<StepCriticalPath> criticalPaths(RunReader& reader, const std::vector<Collective>& rows,
                                            const CollectiveLinks& links, int64_t excluded_steps) {
  const auto windows = countedWindows(reader.steps(), excluded_steps);
  // Each rank's linked rows, by end.
  std::map<int64_t, std::vector<size_t>> linked;
  for (size_t i = 0; i < rows.size() && i < links.call_of.size(); ++i)
    if (links.call_of[i] >= 0) linked[rows[i].rank].push_back(i);
  for (auto& [rank, v] : linked)
    std::sort(v.begin(), v.end(), [&](size_t a, size_t b) { return rows[a].end_ns < rows[b].end_ns; });
  std::map<int64_t, std::map<int64_t, Window>> window_of;  // step → rank → its window
  for (const auto& [rank, w] : windows)
    for (const Window& x : w) window_of[x.step][rank] = x;
  // The range covering most of [a, b) on `rank` (steps, micro-batches and collectives left out).
  auto nameOf = [&](int64_t rank, int64_t w_begin, int64_t a, int64_t b) {  // ranges that start in the step
    std::map<StringId, int64_t> t = timeByName(reader.startingIn<Range>(rank, w_begin, b), a, b);
    std::string best;
    int64_t most = 0;
    for (const auto& [name, ns] : t) {
      const std::string& text = reader.string(name);
      if (ns > most && !isStepOrComm(text)) most = ns, best = text;
    }
    return best;
  };
  std::vector<StepCriticalPath> out;
  for (const auto& [step, of_rank] : window_of) {
    StepCriticalPath path;
    path.step = step;
    int64_t r = -1, t = INT64_MIN;
    for (const auto& [rank, w] : of_rank)
      if (w.end > t) r = rank, t = w.end;
    if (r < 0) continue;  // no window ends after INT64_MIN: a damaged file
    path.end_ns = t;
    std::set<size_t> visited;
    std::vector<PathSegment> back;  // latest first
    auto work = [&](int64_t rank, int64_t a, int64_t b) {
      if (b > a) back.push_back({rank, "work", nameOf(rank, of_rank.at(rank).begin, a, b), a, b, -1});
    };
    for (size_t guard = 0; guard <= rows.size() + 1; ++guard) {
      const Window& w = of_rank.at(r);
      // The latest linked row of r in this step that ends by t.
      const std::vector<size_t>& mine = linked[r];
      auto it = std::upper_bound(mine.begin(), mine.end(), t, [&](int64_t v, size_t i) { return v < rows[i].end_ns; });
      size_t found = SIZE_MAX;
      while (it != mine.begin()) {
        --it;
        if (rows[*it].start_ns < w.begin) break;  // before the step: sorted by end, so none later either
        if (!visited.count(*it)) {
          found = *it;
          break;
        }
      }
      if (found == SIZE_MAX) {
        work(r, w.begin, t);
        path.start_ns = std::min(w.begin, t);
        break;
      }
      visited.insert(found);
      const Collective& c = rows[found];
      const LinkedCall& call = links.calls[size_t(links.call_of[found])];
      work(r, c.end_ns, t);
      size_t last = found;  // the member that arrived last (the first such)
      for (size_t m : call.rows)
        if (rows[m].start_ns == call.last_start_ns) {
          last = m;
          break;
        }
      const std::string name = (call.p2p ? std::string("send -> recv") : c.op) + " (" + c.group + ")";
      const int64_t peer = rows[last].rank;
      // A copy that ended before the last arrival (a Gloo row that returned before a peer's range
      // began, or a peer's range that starts late) was not held up by it: the path stays on r.
      if (peer != r && of_rank.count(peer) && rows[last].start_ns >= of_rank.at(peer).begin &&
          call.last_start_ns <= c.end_ns) {
        back.push_back({r, "transfer", name, call.last_start_ns, std::max(call.last_start_ns, c.end_ns), peer});
        r = peer;
        t = call.last_start_ns;
      } else {
        if (c.end_ns > c.start_ns) back.push_back({r, "transfer", name, c.start_ns, c.end_ns, -1});
        t = c.start_ns;
      }
    }
    path.segments.assign(back.rbegin(), back.rend());
    if (!path.segments.empty()) path.start_ns = path.segments.front().start_ns;
    out.push_back(std::move(path));
  }
  return out;
}

}  // namespace trainscope::rundb
