// dp_layout.cpp — see dp_layout.h.
#include "trainscope/models/dp_layout.h"

#include <algorithm>

#include "trainscope/models/moe.h"
#include "trainscope/workloads/memory.h"

namespace trainscope::models {
namespace {

using runconfig::ZeroStage;

// Closes a group: its tensors laid end to end from 0 (ranges already set), padded to a multiple of
// `ranks` and split evenly.
void pad(ShardGroup& g, int64_t ranks) {
  g.ranks = ranks;
  g.shard = evenShard(g.numel, ranks);
  g.padded = g.shard * ranks;
}

void append(ShardGroup& g, size_t i, int64_t numel) {
  g.tensors.push_back(i);
  g.ranges.push_back({g.numel, g.numel + numel});
  g.numel += numel;
}

// DDP and ZeRO-2 buckets: the managed tensors in reverse flat() order (the last layers' gradients
// are ready first), a new bucket whenever the next tensor would take the current one past
// bucket_bytes of fp32 (a larger tensor is a bucket of its own).
std::vector<ShardGroup> buckets(const std::vector<Slot>& slots, int64_t bucket_bytes) {
  std::vector<ShardGroup> groups;
  int64_t cur_bytes = 0;
  for (size_t k = slots.size(); k-- > 0;) {
    if (!slots[k].managed) continue;
    const int64_t n = slots[k].numel(), bytes = n * 4;
    if (groups.empty() || (cur_bytes > 0 && cur_bytes + bytes > bucket_bytes)) {
      groups.emplace_back();
      cur_bytes = 0;
    }
    append(groups.back(), k, n);
    cur_bytes += bytes;
  }
  return groups;
}

// ZeRO-1: whole tensors to owners, largest first onto the least-loaded rank (ties: the lower rank,
// and among equal sizes flat() order); rank r's tensors in flat() order from r·S, S the largest load.
ShardGroup zeroOne(const std::vector<Slot>& slots, int64_t d) {
  std::vector<size_t> order;
  for (size_t i = 0; i < slots.size(); ++i)
    if (slots[i].managed) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return slots[a].numel() > slots[b].numel(); });
  std::vector<int64_t> load(size_t(d), 0);
  std::vector<int64_t> owner(slots.size(), -1);
  for (size_t i : order) {
    const size_t r = size_t(std::min_element(load.begin(), load.end()) - load.begin());
    owner[i] = int64_t(r);
    load[r] += slots[i].numel();
  }
  ShardGroup g;
  g.ranks = d;
  g.shard = load.empty() ? 0 : *std::max_element(load.begin(), load.end());
  g.padded = d * g.shard;
  std::vector<int64_t> offset(size_t(d), 0);
  for (size_t i = 0; i < slots.size(); ++i) {
    if (owner[i] < 0) continue;
    const int64_t at = owner[i] * g.shard + offset[size_t(owner[i])], n = slots[i].numel();
    offset[size_t(owner[i])] += n;
    g.tensors.push_back(i);
    g.ranges.push_back({at, at + n});
    g.numel += n;
  }
  return g;
}

// ZeRO-3: unit 0 the tensors of no layer (wte, wpe, ln_f), unit 1 + l layer l's, in flat() order.
std::vector<ShardGroup> units(const std::vector<Slot>& slots, int64_t d) {
  int64_t layers = 0;
  for (const auto& s : slots) layers = std::max(layers, s.layer + 1);
  std::vector<ShardGroup> groups(size_t(1 + layers));
  for (size_t i = 0; i < slots.size(); ++i) append(groups[size_t(1 + slots[i].layer)], i, slots[i].numel());
  for (auto& g : groups) pad(g, d);
  return groups;
}

}  // namespace

Range Range::intersect(const Range& o) const {
  const Range r{std::max(begin, o.begin), std::min(end, o.end)};
  return r.empty() ? Range{} : r;
}

int64_t Slot::numel() const {
  int64_t n = 1;
  for (int64_t x : shape) n *= x;
  return n;
}

Range ShardGroup::local(size_t k, int64_t rank) const {
  const Range r = ranges[k].intersect(mine(rank));
  if (r.empty()) return {};
  return {r.begin - ranges[k].begin, r.end - ranges[k].begin};
}

int64_t DpLayout::padded() const {
  int64_t n = 0;
  for (const auto& g : groups) n += g.padded;
  return n;
}

DpLayout dpLayout(const std::vector<Slot>& slots, runconfig::ZeroStage stage, int64_t d, int64_t bucket_bytes) {
  DpLayout l;
  l.stage = stage;
  l.ranks = d;
  switch (stage) {
    case ZeroStage::None:
      l.groups = buckets(slots, bucket_bytes);
      for (auto& g : l.groups) pad(g, 1);
      break;
    case ZeroStage::OptimizerStates: l.groups.push_back(zeroOne(slots, d)); break;
    case ZeroStage::Gradients:
      l.groups = buckets(slots, bucket_bytes);
      for (auto& g : l.groups) pad(g, d);
      break;
    case ZeroStage::Parameters: l.groups = units(slots, d); break;
  }
  l.group_of.assign(slots.size(), -1);
  l.index_of.assign(slots.size(), 0);
  for (size_t g = 0; g < l.groups.size(); ++g)
    for (size_t k = 0; k < l.groups[g].tensors.size(); ++k) {
      l.group_of[l.groups[g].tensors[k]] = int(g);
      l.index_of[l.groups[g].tensors[k]] = k;
    }
  return l;
}

std::vector<Range> stageLayout(int64_t n_layer, int64_t pp, int64_t stage, int64_t virtual_stages) {
  const int64_t v = std::max<int64_t>(1, virtual_stages), chunks = pp * v, base = n_layer / chunks,
                extra = n_layer % chunks;
  std::vector<Range> out;
  for (int64_t c = stage; c < chunks; c += pp) {
    const int64_t begin = c * base + std::min(c, extra);
    out.push_back({begin, begin + base + (c < extra ? 1 : 0)});
  }
  return out;
}

// From workloads::parameterTensors (the runtime's flat order and names, whole), each tensor this
// stage holds, cut as shardGpt cuts it.
std::vector<Slot> stageSlots(const workloads::Workload& w, const Plan& p, int64_t stage) {
  const int64_t t = p.tp, Vp = (w.vocab_size + t - 1) / t * t, D = w.headSize();
  const int64_t ep = std::max<int64_t>(1, p.ep);
  const bool first = stage == 0, last = stage == p.pp - 1;
  // Position of each global layer among this stage's layers (chunk order is layer order).
  std::vector<int64_t> pos_of(size_t(w.n_layer), -1);
  int64_t pos = 0;
  for (const Range& chunk : stageLayout(w.n_layer, p.pp, stage, p.virtual_stages))
    for (int64_t l = chunk.begin; l < chunk.end; ++l) pos_of[size_t(l)] = pos++;
  auto has = [](const std::string& n, const char* part) { return n.find(part) != std::string::npos; };
  std::vector<Slot> out;
  for (const workloads::ParamTensor& pt : workloads::parameterTensors(w)) {
    const std::string& n = pt.name;
    std::vector<int64_t> shape = pt.shape;
    if (n == "wte" || n == "lm_head.weight") {
      const bool here = n == "wte" ? first || (last && w.tie_embeddings) : last;
      // The tied embedding under PP is reduced with the other end's copy, outside the layout.
      if (here) out.push_back({n, {Vp / t, w.n_embd}, -1, n != "wte" || p.pp == 1 || !w.tie_embeddings});
      continue;
    }
    if (n == "wpe" || n.rfind("ln_f.", 0) == 0) {
      if (n == "wpe" ? first : last) out.push_back({n, shape, -1});
      continue;
    }
    const int64_t layer = std::stoll(n.substr(2, n.find('.', 2) - 2));  // "h.<layer>."
    if (pos_of[size_t(layer)] < 0) continue;
    Slot s{n, shape, pos_of[size_t(layer)]};
    if (has(n, ".mlp.experts.") || has(n, ".mlp.router.") || has(n, ".mlp.shared")) {
      // A MoE layer's MLP (TP-replicated): the router, this rank's E/ep experts and the shared
      // expert (and its gate, ".mlp.shared_gate."); with ep > 1 the experts are reduced over the expert-dp group (runtime experts.h).
      const bool expert = has(n, ".mlp.experts.");
      if (expert) s.shape[0] /= ep;
      s.managed = !(expert && ep > 1);
      s.expert_mlp = !has(n, ".mlp.router.");
    } else if (has(n, "attn.c_attn.")) {
      // [q; k; v]: q heads split; K/V split when tp <= KV, else the one replicated K/V head.
      s.shape[0] = w.n_head * D / t + 2 * kvHeadsPerRank(w, t) * D;
    } else if (has(n, "mlp.c_fc.")) {
      s.shape[0] /= t;  // [gate; up] each split by rows: the same count
    } else if (has(n, "c_proj.weight")) {
      s.shape[1] /= t;  // row-parallel: input columns split
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace trainscope::models
