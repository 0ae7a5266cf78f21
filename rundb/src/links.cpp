// links.cpp — collectives linked across ranks (see report.h): the run's layout, the call numbers of
// collectives, pipeline sends paired through the schedule (GPipe, 1F1B, interleaved 1F1B), the
// context-parallel ring, each row's wait and transfer, and why a row is not linked.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "trainscope/rundb/report.h"

namespace trainscope::rundb {
namespace {

bool isP2p(const std::string& op) { return op == "send" || op == "recv"; }

// The instance of `group` that `rank` is in, as a number its members share; nullopt for a group the
// layout does not define. parallel.h: tp (same cp, dp, pp), dp (same tp, cp, pp), pp and embedding
// (same tp, cp, dp), cp (same tp, dp, pp), dp_cp (same tp, pp).
std::optional<int64_t> instanceOf(const RunLayout& l, const std::string& group, int64_t rank) {
  if (rank < 0 || rank >= l.world) return std::nullopt;  // not a rank of this layout (a damaged row)
  const RunLayout::Coords c = l.coords(rank);
  if (group == "tp") return c.cp + l.cp * (c.dp + l.dp * c.pp);
  if (group == "dp") return c.tp + l.tp * (c.cp + l.cp * c.pp);
  if (group == "pp" || group == "embedding") return c.tp + l.tp * (c.cp + l.cp * c.dp);
  if (group == "cp") return c.tp + l.tp * (c.dp + l.dp * c.pp);
  if (group == "dp_cp") return c.tp + l.tp * c.pp;
  if (group == "world") return 0;
  // Expert parallelism: ep consecutive DP ranks (runtime Layout::epGroup), and the ranks holding the
  // same experts (expertDpGroup). Their all-to-alls carry per-rank splits: bytes differ by rank.
  if ((group == "ep" || group == "expert_dp") && l.ep > 1 && l.dp % l.ep == 0) {
    const int64_t block = group == "ep" ? c.dp / l.ep : c.dp % l.ep;
    return c.tp + l.tp * (c.cp + l.cp * (c.pp + l.pp * block));
  }
  return std::nullopt;
}

// One stage's sends and receives in a step, in the order runPipeline (pipeline.cpp) issues them:
// forward m receives from the previous stage and sends to the next; backward m the reverse. Each
// carries the chunk boundary it crosses (global chunk c to c + 1) and its direction, so a send and its
// receive name the same (step, boundary, micro-batch, direction).
struct P2pOp {
  bool send;
  int64_t peer;      // the other stage (interleaved: the last stage feeds stage 0's next chunk)
  int64_t m;         // micro-batch
  int64_t boundary;  // between global chunks boundary and boundary + 1
  int dir;           // 0: activation (forward), 1: its gradient (backward)
};
std::vector<P2pOp> stageSchedule(int64_t stage, int64_t stages, int64_t M, bool gpipe) {
  std::vector<P2pOp> ops;
  const bool first = stage == 0, last = stage == stages - 1;
  auto fwd = [&](int64_t m) {
    if (!first) ops.push_back({false, stage - 1, m, stage - 1, 0});
    if (!last) ops.push_back({true, stage + 1, m, stage, 0});
  };
  auto bwd = [&](int64_t m) {
    if (!last) ops.push_back({false, stage + 1, m, stage, 1});
    if (!first) ops.push_back({true, stage - 1, m, stage - 1, 1});
  };
  if (gpipe) {
    for (int64_t m = 0; m < M; ++m) fwd(m);
    for (int64_t m = 0; m < M; ++m) bwd(m);
  } else {  // 1F1B: warm-up forwards, then one forward and one backward, then the remaining backwards
    const int64_t warmup = std::min(stages - stage - 1, M);
    int64_t f = 0, b = 0;
    for (; f < warmup; ++f) fwd(f);
    while (f < M) fwd(f++), bwd(b++);
    while (b < M) bwd(b++);
  }
  return ops;
}

// Interleaved 1F1B (--virtual-stages v): the units in Megatron-LM's order, as
// runtime::interleavedOrder (pipeline.cpp) runs them — groups of p micro-batches through chunk 0, 1,
// …, v − 1 forward and v − 1, …, 0 backward, 2(p − s − 1) + (v − 1)p warm-up forwards — each unit's
// receive then send on the ring of stages (stage s holds global chunks s, s + p, …).
std::vector<P2pOp> interleavedSchedule(int64_t stage, int64_t p, int64_t v, int64_t M) {
  const int64_t total = v * M, group = p * v, chunks = p * v;
  const int64_t warmup = std::min<int64_t>(2 * (p - stage - 1) + (v - 1) * p, total);
  const int64_t next = (stage + 1) % p, prev = (stage + p - 1) % p;
  std::vector<P2pOp> ops;
  auto unit = [&](int64_t i, bool forward) {
    const int64_t k0 = (i % group) / p, k = forward ? k0 : v - 1 - k0, m = (i / group) * p + i % p;
    const int64_t c = stage + k * p;  // the global chunk
    if (forward) {
      if (c > 0) ops.push_back({false, prev, m, c - 1, 0});
      if (c < chunks - 1) ops.push_back({true, next, m, c, 0});
    } else {
      if (c < chunks - 1) ops.push_back({false, next, m, c, 1});
      if (c > 0) ops.push_back({true, prev, m, c - 1, 1});
    }
  };
  for (int64_t i = 0; i < warmup; ++i) unit(i, true);
  for (int64_t i = 0; i + warmup < total; ++i) unit(i + warmup, true), unit(i, false);
  for (int64_t i = total - warmup; i < total; ++i) unit(i, false);
  return ops;
}

LinkedCall makeCall(const std::vector<Collective>& rows, std::vector<size_t> members, bool p2p) {
  LinkedCall c;
  c.p2p = p2p;
  if (!p2p)
    std::sort(members.begin(), members.end(), [&](size_t a, size_t b) { return rows[a].rank < rows[b].rank; });
  c.first_start_ns = c.last_start_ns = rows[members[0]].start_ns;
  c.end_ns = rows[members[0]].end_ns;
  for (size_t i : members) {
    c.first_start_ns = std::min(c.first_start_ns, rows[i].start_ns);
    c.last_start_ns = std::max(c.last_start_ns, rows[i].start_ns);
    c.end_ns = std::max(c.end_ns, rows[i].end_ns);
    c.cut = c.cut || rows[i].cut;
  }
  if (p2p) c.end_ns = rows[members[1]].end_ns;  // the receive's
  c.rows = std::move(members);
  return c;
}

// Pipeline sends paired with their receives (see linkCollectives). Each rank's k-th send or receive
// on `pp` is operation k mod L of its stage's schedule (L a step's operations) in step k / L. A rank
// whose rows disagree with the schedule is left unlinked, and `why` says where.
void linkP2p(const std::vector<Collective>& rows, const RunLayout& l,
             const std::map<std::pair<int64_t, std::string>, std::vector<size_t>>& by_rank_group, CollectiveLinks& out) {
  // sender, receiver, step, chunk boundary, micro-batch, direction
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int>;
  std::map<Key, size_t> sends, recvs;
  const std::string name = l.virtual_stages > 1 ? "interleaved 1F1B (v " + std::to_string(l.virtual_stages) + ")"
                                                : l.gpipe ? "GPipe" : "1F1B";
  for (const auto& [rank_group, list] : by_rank_group) {
    if (rank_group.second != "pp") continue;
    const int64_t rank = rank_group.first;
    if (rank < 0 || rank >= l.world) continue;
    const RunLayout::Coords c = l.coords(rank);
    if (l.micro_batches > (int64_t(1) << 16) || l.virtual_stages > (int64_t(1) << 8)) continue;  // a damaged config
    const std::vector<P2pOp> schedule = l.virtual_stages > 1
                                            ? interleavedSchedule(c.pp, l.pp, l.virtual_stages, l.micro_batches)
                                            : stageSchedule(c.pp, l.pp, l.micro_batches, l.gpipe);
    if (schedule.empty()) continue;
    std::map<Key, size_t> mine_sends, mine_recvs;
    bool agrees = true;
    size_t k = 0;
    for (size_t i : list) {
      if (!isP2p(rows[i].op)) continue;
      const P2pOp& op = schedule[k % schedule.size()];
      const int64_t step = int64_t(k / schedule.size());
      ++k;
      if (op.send != (rows[i].op == "send") || rows[i].group_size != l.pp) {
        agrees = false;  // not the schedule this layout runs (dropped rows, another runtime): no guesses
        if (!out.why.count("pp"))
          out.why["pp"] = "rank " + std::to_string(rank) + "'s sends and receives on pp disagree with the " + name +
                          " schedule of " + std::to_string(l.micro_batches) + " micro-batch(es) that meta.config names (from its send or "
                          "receive #" + std::to_string(k) + ": a dropped row, or another runtime's schedule)";
        break;
      }
      const int64_t peer = l.rankOf({c.dp, c.tp, op.peer, c.cp});
      if (op.send) mine_sends[{rank, peer, step, op.boundary, op.m, op.dir}] = i;
      else mine_recvs[{peer, rank, step, op.boundary, op.m, op.dir}] = i;
    }
    if (!agrees) continue;
    sends.insert(mine_sends.begin(), mine_sends.end());
    recvs.insert(mine_recvs.begin(), mine_recvs.end());
  }
  for (const auto& [key, s] : sends) {
    auto r = recvs.find(key);
    if (r == recvs.end() || rows[s].bytes != rows[r->second].bytes) continue;
    out.call_of[s] = out.call_of[r->second] = int64_t(out.calls.size());
    out.calls.push_back(makeCall(rows, {s, r->second}, true));
  }
}

// Context parallelism's ring (context_parallel.cpp): every rank of a `cp` group issues the same
// sequence of shifts, each a send to the next rank of the ring and a receive from the previous one,
// so rank i's k-th send is rank i+1's k-th receive.
void linkRing(const std::vector<Collective>& rows, const RunLayout& l,
              const std::map<std::pair<int64_t, std::string>, std::vector<size_t>>& by_rank_group, CollectiveLinks& out) {
  using Key = std::tuple<int64_t, int64_t, int64_t>;  // sender, receiver, shift number
  std::map<Key, size_t> sends, recvs;
  for (const auto& [rank_group, list] : by_rank_group) {
    if (rank_group.second != "cp" || rank_group.first < 0 || rank_group.first >= l.world) continue;
    const int64_t rank = rank_group.first;
    RunLayout::Coords next = l.coords(rank), prev = next;
    next.cp = (next.cp + 1) % l.cp;
    prev.cp = (prev.cp + l.cp - 1) % l.cp;
    int64_t k_send = 0, k_recv = 0;
    for (size_t i : list) {
      if (!isP2p(rows[i].op) || rows[i].group_size != l.cp) continue;
      if (rows[i].op == "send") sends[{rank, l.rankOf(next), k_send++}] = i;
      else recvs[{l.rankOf(prev), rank, k_recv++}] = i;
    }
  }
  for (const auto& [key, s] : sends) {
    auto r = recvs.find(key);
    if (r == recvs.end() || rows[s].bytes != rows[r->second].bytes) continue;
    out.call_of[s] = out.call_of[r->second] = int64_t(out.calls.size());
    out.calls.push_back(makeCall(rows, {s, r->second}, true));
  }
}

}  // namespace

std::optional<RunLayout> runLayout(const std::map<std::string, std::string>& meta) {
  auto it = meta.find("config");
  if (it == meta.end()) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  auto count = [&](const char* key, int64_t fallback) {
    auto v = j.find(key);
    return v != j.end() && v->is_number_integer() ? v->get<int64_t>() : fallback;
  };
  RunLayout l;
  l.world = count("world", count("nproc", 1));
  l.tp = count("tp", 1);
  l.pp = count("pp", 1);
  l.cp = count("cp", 1);
  l.ep = count("ep", 1);
  l.micro_batches = count("ga", 1);
  const auto schedule = j.find("pp_schedule");
  const std::string schedule_name = schedule != j.end() && schedule->is_string() ? schedule->get<std::string>() : "";
  l.gpipe = schedule_name == "gpipe";
  // Interleaved 1F1B: `virtual_stages` model chunks per stage (the schedule "interleaved" alone: 2).
  l.virtual_stages = l.gpipe ? 1 : count("virtual_stages", 1);
  if (schedule_name == "interleaved" && l.virtual_stages < 2) l.virtual_stages = 2;
  constexpr int64_t kMost = int64_t(1) << 20;  // keeps dp·tp·pp within int64 (a damaged config)
  for (int64_t v : {l.world, l.tp, l.pp, l.cp, l.ep, l.micro_batches, l.virtual_stages})
    if (v < 1 || v > kMost) return std::nullopt;
  if (l.tp * l.pp * l.cp > kMost) return std::nullopt;  // keeps dp·cp·tp·pp within int64
  l.dp = count("dp", l.world / (l.tp * l.pp * l.cp));
  if (l.dp < 1 || l.dp > kMost) return std::nullopt;
  if (l.dp * l.tp * l.pp * l.cp != l.world) return std::nullopt;
  return l;
}

namespace {

// Each row's step on its rank: the step whose [start, start + time) holds the row's start, -1 for
// none (before the first step, between steps, no steps at all).
std::vector<int64_t> stepOfRows(const std::vector<Collective>& rows, const std::vector<Step>& steps) {
  std::map<int64_t, std::vector<const Step*>> of_rank;
  for (const Step& s : steps) of_rank[s.rank].push_back(&s);
  for (auto& [rank, list] : of_rank)
    std::sort(list.begin(), list.end(), [](const Step* a, const Step* b) { return a->start_ns < b->start_ns; });
  std::vector<int64_t> out(rows.size(), -1);
  for (size_t i = 0; i < rows.size(); ++i) {
    auto it = of_rank.find(rows[i].rank);
    if (it == of_rank.end()) continue;
    const auto& list = it->second;
    auto after = std::upper_bound(list.begin(), list.end(), rows[i].start_ns,
                                  [](int64_t t, const Step* s) { return t < s->start_ns; });
    if (after == list.begin()) continue;
    const Step& s = **std::prev(after);
    if (rows[i].start_ns - s.start_ns < s.step_time_ns) out[i] = s.step;
  }
  return out;
}

}  // namespace

CollectiveLinks linkRunCollectives(const std::vector<Collective>& rows, const std::map<std::string, std::string>& meta,
                                   const std::vector<Step>& steps) {
  const auto clock = meta.find("collectives_clock");
  const bool device_clock = clock != meta.end() && clock->second == "device";
  return linkCollectives(rows, runLayout(meta), device_clock ? std::vector<Step>{} : steps);
}

CollectiveLinks linkCollectives(const std::vector<Collective>& rows, const std::optional<RunLayout>& layout,
                                const std::vector<Step>& steps) {
  CollectiveLinks out;
  out.call_of.assign(rows.size(), -1);
  // Each rank's calls on each group, in call order.
  std::map<std::pair<int64_t, std::string>, std::vector<size_t>> by_rank_group;
  for (size_t i = 0; i < rows.size(); ++i) by_rank_group[{rows[i].rank, rows[i].group}].push_back(i);
  for (auto& [k, list] : by_rank_group)
    std::stable_sort(list.begin(), list.end(), [&](size_t a, size_t b) { return rows[a].seq < rows[b].seq; });

  // Collectives: (group, instance, call number[, step, op, bytes]) → the copies. Without the layout's
  // instance (an import's process groups) the calls are numbered within each step the rows' ranks
  // recorded: a trace whose ranks' files hold different steps (two profiling cycles), or whose
  // numbering one rank's extra calls shifted (subgroups the trace does not name), links nothing
  // across steps.
  using Key = std::tuple<std::string, int64_t, int64_t, int64_t, std::string, int64_t>;
  const std::vector<int64_t> step_of = layout ? std::vector<int64_t>(rows.size(), -1) : stepOfRows(rows, steps);
  std::map<Key, std::vector<size_t>> copies;
  for (const auto& [rank_group, list] : by_rank_group) {
    const std::optional<int64_t> instance = layout ? instanceOf(*layout, rank_group.second, rank_group.first) : std::nullopt;
    int64_t number = 0;
    std::map<int64_t, int64_t> number_in_step;
    for (size_t i : list) {
      const Collective& c = rows[i];
      if (isP2p(c.op)) continue;
      if (instance) copies[{c.group, *instance, number++, -1, "", -1}].push_back(i);
      else copies[{c.group, -1, number_in_step[step_of[i]]++, step_of[i], c.op, c.bytes}].push_back(i);
    }
  }
  for (auto& [key, members] : copies) {
    const bool by_layout = std::get<1>(key) >= 0;
    const int64_t size = rows[members[0]].group_size;
    std::set<int64_t> ranks;
    bool same = true;
    for (size_t i : members) {
      ranks.insert(rows[i].rank);
      same &= rows[i].op == rows[members[0]].op && rows[i].group_size == size;
    }
    // Distinct ranks of one op; all of the group unless the layout says which ranks they are (a copy
    // can be missing: a dropped row).
    if (members.size() < 2 || !same || ranks.size() != members.size() || int64_t(members.size()) > size ||
        (!by_layout && int64_t(members.size()) != size))
      continue;
    for (size_t i : members) out.call_of[i] = int64_t(out.calls.size());
    out.calls.push_back(makeCall(rows, std::move(members), false));
  }
  if (layout && layout->pp > 1) linkP2p(rows, *layout, by_rank_group, out);
  if (layout && layout->cp > 1) linkRing(rows, *layout, by_rank_group, out);
  return out;
}

std::string notLinkedReason(const Collective& row, const CollectiveLinks& links, const std::optional<RunLayout>& layout) {
  if (row.group_size < 2) return "a group of one rank: no peer to wait for";
  const bool p2p = isP2p(row.op);
  if (!layout)
    return p2p ? "the file names no parallel layout (meta.config: world, dp, tp, pp, ga, pp_schedule), which sends and "
                 "receives pair through"
               : "the file names no parallel layout (meta.config), and not all " + std::to_string(row.group_size) +
                     " copies of this call were found with the same op and bytes in the same step";
  if (auto it = links.why.find(row.group); it != links.why.end()) return it->second;
  if (p2p && row.group != "pp" && row.group != "cp")
    return "sends and receives on group '" + row.group + "' follow no schedule the linker knows (pp and cp only)";
  if (p2p) return "its " + std::string(row.op == "send" ? "receive" : "send") + " on the peer was not found with the same bytes (a dropped row)";
  if (!instanceOf(*layout, row.group, row.rank))
    return "group '" + row.group + "' is not one the layout defines, and not all " + std::to_string(row.group_size) +
           " copies were found with the same op and bytes";
  return "a copy of this call on another rank of its group is missing or differs in op (a dropped row)";
}

CallTiming callTiming(const Collective& c, const LinkedCall* call) {
  CallTiming t;
  if (!call) {
    t.transfer_ns = std::max<int64_t>(0, spanNs(c.start_ns, c.end_ns));
    t.busbw = c.busbw();
    return t;
  }
  const LinkedCall& l = *call;
  t.wait_ns = spanNs(c.start_ns, l.last_start_ns);
  if (c.cut || (l.p2p && l.cut)) return t;  // its end (a send's: the receive's) is not known: no transfer or busbw
  // nccl-tests' rule (Collective::busbw) over the transfer alone: the row as if it began at the last arrival.
  Collective transfer = c;
  transfer.start_ns = l.last_start_ns;
  transfer.end_ns = l.p2p ? l.end_ns : c.end_ns;
  t.transfer_ns = std::max<int64_t>(0, spanNs(transfer.start_ns, transfer.end_ns));
  t.busbw = t.transfer_ns > 0 ? transfer.busbw() : 0;
  return t;
}

}  // namespace trainscope::rundb
