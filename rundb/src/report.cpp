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

namespace trainscope::rundb {
namespace {

// Long names (templated CUDA kernels run to hundreds of characters) keep their head and tail in the
// text table; --json keeps them whole.
std::string elide(const std::string& name, size_t width = 96) {
  if (name.size() <= width) return name;
  const size_t keep = (width - 3) / 2;
  return name.substr(0, keep) + "..." + name.substr(name.size() - (width - 3 - keep));
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
// forward m receives from the previous stage and sends to the next; backward m the reverse.
struct P2pOp {
  bool send;
  int64_t peer;  // +1: the next stage, -1: the previous one
  int64_t m;     // micro-batch
};
std::vector<P2pOp> stageSchedule(int64_t stage, int64_t stages, int64_t M, bool gpipe) {
  std::vector<P2pOp> ops;
  const bool first = stage == 0, last = stage == stages - 1;
  auto fwd = [&](int64_t m) {
    if (!first) ops.push_back({false, -1, m});
    if (!last) ops.push_back({true, +1, m});
  };
  auto bwd = [&](int64_t m) {
    if (!last) ops.push_back({false, +1, m});
    if (!first) ops.push_back({true, -1, m});
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
  }
  if (p2p) c.end_ns = rows[members[1]].end_ns;  // the receive's
  c.rows = std::move(members);
  return c;
}

// Pipeline sends paired with their receives (see linkCollectives). Each rank's k-th send or receive
// on `pp` is operation k mod L of its stage's schedule (L a step's operations) in step k / L.
void linkP2p(const std::vector<Collective>& rows, const RunLayout& l,
             const std::map<std::pair<int64_t, std::string>, std::vector<size_t>>& by_rank_group, CollectiveLinks& out) {
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t>;  // sender, receiver, step, micro-batch
  std::map<Key, size_t> sends, recvs;
  for (const auto& [rank_group, list] : by_rank_group) {
    if (rank_group.second != "pp") continue;
    const int64_t rank = rank_group.first;
    if (rank < 0 || rank >= l.world) continue;
    const RunLayout::Coords c = l.coords(rank);
    if (l.micro_batches > (int64_t(1) << 16)) continue;  // a damaged config: no schedule this long ran
    const std::vector<P2pOp> schedule = stageSchedule(c.pp, l.pp, l.micro_batches, l.gpipe);
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
        break;
      }
      const int64_t peer = l.rankOf({c.dp, c.tp, c.pp + op.peer, c.cp});
      if (op.send) mine_sends[{rank, peer, step, op.m}] = i;
      else mine_recvs[{peer, rank, step, op.m}] = i;
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
  l.gpipe = schedule != j.end() && schedule->is_string() && schedule->get<std::string>() == "gpipe";
  constexpr int64_t kMost = int64_t(1) << 20;  // keeps dp·tp·pp within int64 (a damaged config)
  for (int64_t v : {l.world, l.tp, l.pp, l.cp, l.ep, l.micro_batches})
    if (v < 1 || v > kMost) return std::nullopt;
  if (l.tp * l.pp * l.cp > kMost) return std::nullopt;  // keeps dp·cp·tp·pp within int64
  l.dp = count("dp", l.world / (l.tp * l.pp * l.cp));
  if (l.dp < 1 || l.dp > kMost) return std::nullopt;
  if (l.dp * l.tp * l.pp * l.cp != l.world) return std::nullopt;
  return l;
}

CollectiveLinks linkCollectives(const std::vector<Collective>& rows, const std::optional<RunLayout>& layout) {
  CollectiveLinks out;
  out.call_of.assign(rows.size(), -1);
  // Each rank's calls on each group, in call order.
  std::map<std::pair<int64_t, std::string>, std::vector<size_t>> by_rank_group;
  for (size_t i = 0; i < rows.size(); ++i) by_rank_group[{rows[i].rank, rows[i].group}].push_back(i);
  for (auto& [k, list] : by_rank_group)
    std::stable_sort(list.begin(), list.end(), [&](size_t a, size_t b) { return rows[a].seq < rows[b].seq; });

  // Collectives: (group, instance, call number[, op, bytes]) → the copies.
  using Key = std::tuple<std::string, int64_t, int64_t, std::string, int64_t>;
  std::map<Key, std::vector<size_t>> copies;
  for (const auto& [rank_group, list] : by_rank_group) {
    const std::optional<int64_t> instance = layout ? instanceOf(*layout, rank_group.second, rank_group.first) : std::nullopt;
    int64_t number = 0;
    for (size_t i : list) {
      const Collective& c = rows[i];
      if (isP2p(c.op)) continue;
      if (instance) copies[{c.group, *instance, number++, "", -1}].push_back(i);
      else copies[{c.group, -1, number++, c.op, c.bytes}].push_back(i);
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

CallTiming callTiming(const Collective& c, const LinkedCall* call) {
  CallTiming t;
  if (!call) {
    t.transfer_ns = std::max<int64_t>(0, spanNs(c.start_ns, c.end_ns));
    t.busbw = c.busbw();
    return t;
  }
  const LinkedCall& l = *call;
  t.wait_ns = spanNs(c.start_ns, l.last_start_ns);
  // nccl-tests' rule (Collective::busbw) over the transfer alone: the row as if it began at the last arrival.
  Collective transfer = c;
  transfer.start_ns = l.last_start_ns;
  transfer.end_ns = l.p2p ? l.end_ns : c.end_ns;
  t.transfer_ns = std::max<int64_t>(0, spanNs(transfer.start_ns, transfer.end_ns));
  t.busbw = t.transfer_ns > 0 ? transfer.busbw() : 0;
  return t;
}

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

  // Collectives by (op, group): bandwidth over each row's transfer, skew over the linked calls.
  const std::vector<Collective> rows = reader.collectives();
  const CollectiveLinks links = linkCollectives(rows, runLayout(reader.meta()));
  std::map<std::pair<std::string, std::string>, CollectiveStat> coll;
  std::map<std::pair<std::string, std::string>, std::pair<double, double>> busbw_sum;  // transfer, whole
  std::map<std::pair<std::string, std::string>, std::set<int64_t>> calls;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Collective& c = rows[i];
    const CallTiming t = callTiming(c, links.call_of[i] >= 0 ? &links.calls[size_t(links.call_of[i])] : nullptr);
    CollectiveStat& s = coll[{c.op, c.group}];
    s.op = c.op;
    s.group = c.group;
    ++s.count;
    if (__builtin_add_overflow(s.bytes, c.bytes, &s.bytes)) s.bytes = c.bytes > 0 ? INT64_MAX : INT64_MIN;  // a damaged file's sizes
    s.total_s += c.seconds();
    s.wait_s += double(t.wait_ns) * 1e-9;
    s.transfer_s += double(t.transfer_ns) * 1e-9;
    busbw_sum[{c.op, c.group}].first += t.busbw;
    busbw_sum[{c.op, c.group}].second += c.busbw();
    s.busbw_max = std::max(s.busbw_max, t.busbw);
    if (links.call_of[i] >= 0) calls[{c.op, c.group}].insert(links.call_of[i]);
  }
  for (auto& [key, s] : coll) {
    s.busbw_mean = busbw_sum[key].first / double(s.count);
    s.busbw_with_wait_mean = busbw_sum[key].second / double(s.count);
    const std::set<int64_t>& linked = calls[key];
    s.linked = int64_t(linked.size());
    for (int64_t call : linked) {
      const double skew = double(links.calls[size_t(call)].skewNs()) * 1e-9;
      s.skew_mean_s += skew / double(linked.size());
      s.skew_max_s = std::max(s.skew_max_s, skew);
    }
    rep.collectives.push_back(s);
  }
  std::sort(rep.collectives.begin(), rep.collectives.end(),
            [](const CollectiveStat& a, const CollectiveStat& b) { return a.total_s > b.total_s; });

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

}  // namespace

std::string formatReport(const Report& r) {
  const RunSummary& s = r.summary;
  std::ostringstream o;
  char line[512];
  o << "trainscope report: " << r.path << (s.workload.empty() ? "" : " (" + s.workload + ")") << ", " << s.world
    << " rank(s)\n";
  std::snprintf(line, sizeof(line), "throughput %.0f tokens/s over %lld step(s); step time median %.2f ms, p90 %.2f ms",
                s.tokens_per_s, static_cast<long long>(s.steps), s.step_s_median * 1e3, s.step_s_p90 * 1e3);
  o << line;
  if (s.mfu) {
    std::snprintf(line, sizeof(line), "; MFU %.2f%%, HFU %.2f%%", *s.mfu * 100, *s.hfu * 100);
    o << line;
  }
  std::snprintf(line, sizeof(line), "; peak memory %.2f MiB\n\n", double(s.peak_bytes) / (1 << 20));
  o << line;
  const bool gpu = s.breakdown_window == "gpu";
  o << "rank  steps   mean ms  median ms   p90 ms" << (gpu ? "    GPU ms" : "")
    << "   compute ms   comm ms  overlap ms  memory ms   idle ms  peak MiB\n";
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
    std::snprintf(line, sizeof(line), "%4lld %6lld %9.2f %10.2f %8.2f%s %12s %9s %11s %10s %9s %9.1f%s\n",
                  static_cast<long long>(k.rank), static_cast<long long>(k.steps), k.step_s_mean * 1e3,
                  k.step_s_median * 1e3, k.step_s_p90 * 1e3, gpu_cell, cell(b.compute_s).c_str(), cell(b.comm_s).c_str(),
                  cell(b.overlap_s).c_str(), cell(b.memory_s).c_str(), cell(b.idle_s).c_str(),
                  double(k.peak_bytes) / (1 << 20), k.straggler ? "  <- straggler" : "");
    o << line;
  }
  o << "(per counted step, over each step's " << (gpu ? "GPU window: its launches' device work" : "CPU window")
    << (s.breakdown_source.empty() ? "" : "; compute from " + s.breakdown_source) << ")\n";
  for (const auto& n : s.notes) o << "note: " << n << "\n";
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
  if (!r.collectives.empty()) {
    o << "\ncollectives (busbw: nccl-tests' rule over the transfer, from the last rank's arrival to the end, the "
         "wait for it left out; skew: last arrival - first, over the calls linked across ranks)\n";
    for (const auto& c : r.collectives) {
      std::snprintf(line, sizeof(line),
                    "  %-15s %-10s %7lld calls %10.1f MiB %10.2f ms  busbw mean %.3f max %.3f GB/s (whole call %.3f)"
                    "  skew mean %.3f max %.3f ms  wait %.2f ms\n",
                    c.op.c_str(), c.group.c_str(), static_cast<long long>(c.count), double(c.bytes) / (1 << 20),
                    c.total_s * 1e3, c.busbw_mean * 1e-9, c.busbw_max * 1e-9, c.busbw_with_wait_mean * 1e-9,
                    c.skew_mean_s * 1e3, c.skew_max_s * 1e3, c.wait_s * 1e3);
      o << line;
    }
  }
  if (!r.expert_load.empty()) formatExpertLoad(r.expert_load, o);
  if (!r.checkpoints.empty()) {
    o << "\ncheckpoints (run --save):\n";
    for (const Checkpoint& c : r.checkpoints) {
      char line[256];
      std::snprintf(line, sizeof(line), "  after step %lld: %.1f MiB in %.3f s (%.1f MB/s)  %s\n",
                    static_cast<long long>(c.step), double(c.bytes) / (1 << 20), c.seconds,
                    c.seconds > 0 ? double(c.bytes) / c.seconds * 1e-6 : 0.0, c.path.c_str());
      o << line;
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
  for (const auto& c : r.collectives)
    j["collectives"].push_back({{"op", c.op}, {"group", c.group}, {"count", c.count}, {"bytes", c.bytes},
                                {"total_s", c.total_s}, {"busbw_mean", c.busbw_mean}, {"busbw_max", c.busbw_max},
                                {"busbw_with_wait_mean", c.busbw_with_wait_mean}, {"linked_calls", c.linked},
                                {"skew_mean_s", c.skew_mean_s}, {"skew_max_s", c.skew_max_s}, {"wait_s", c.wait_s},
                                {"transfer_s", c.transfer_s}});
  j["dropped"] = nlohmann::json::object();
  for (const auto& [src, n] : r.drops) j["dropped"][src] = n;
  j["warnings"] = r.warnings;
  j["checkpoints"] = nlohmann::json::array();
  for (const Checkpoint& c : r.checkpoints)
    j["checkpoints"].push_back({{"step", c.step}, {"seconds", c.seconds}, {"bytes", c.bytes}, {"path", c.path}});
  j["fp8"] = nlohmann::json::array();
  for (const auto& f : r.fp8)
    j["fp8"].push_back({{"role", f.role}, {"linears", f.linears}, {"steps", f.steps}, {"rows", f.rows},
                        {"last_amax_min", f.last_amax_min}, {"last_amax_max", f.last_amax_max},
                        {"scale_min", f.scale_min}, {"scale_max", f.scale_max}, {"saturated", f.saturated}});
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
