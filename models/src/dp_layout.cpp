// dp_layout.cpp — see dp_layout.h.
#include "trainscope/models/dp_layout.h"

#include <algorithm>

#include "trainscope/models/moe.h"

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

std::vector<Slot> stageSlots(const workloads::Workload& w, const Plan& p, int64_t stage) {
  // The runtime's flat layout for every architecture (docs/architecture.md, "One architecture"):
  // GPT-2's is the case where every optional tensor exists.
  const int64_t h = w.n_embd, t = p.tp, Vp = (w.vocab_size + t - 1) / t * t;
  const bool first = stage == 0, last = stage == p.pp - 1, ln = w.norm == workloads::Norm::LayerNorm;
  const int64_t q = w.n_head * w.headSize() / t, kv = kvHeadsPerRank(w, t) * w.headSize();
  const int64_t F = w.ffnHidden() / t, F2 = w.mlp == workloads::Mlp::SwiGLU ? 2 * F : F;
  std::vector<Slot> out;
  // The tied embedding under PP is reduced with the other end's copy, outside the layout; untied,
  // the first stage holds wte and the last lm_head, each an ordinary tensor.
  if (first || (last && w.tie_embeddings)) out.push_back({"wte", {Vp / t, h}, -1, p.pp == 1 || !w.tie_embeddings});
  if (first && w.positions == workloads::Positions::Learned) out.push_back({"wpe", {w.n_positions, h}});
  int64_t pos = 0;
  for (const Range& chunk : stageLayout(w.n_layer, p.pp, stage, p.virtual_stages))
    for (int64_t l = chunk.begin; l < chunk.end; ++l, ++pos) {
      const std::string n = "h." + std::to_string(l) + ".";
      std::vector<std::pair<const char*, std::vector<int64_t>>> attention = {{"ln_1.weight", {h}}};
      if (ln) attention.push_back({"ln_1.bias", {h}});
      attention.push_back({"attn.c_attn.weight", {q + 2 * kv, h}});
      if (w.qkv_bias) attention.push_back({"attn.c_attn.bias", {q + 2 * kv}});
      attention.push_back({"attn.c_proj.weight", {h, q}});
      if (w.proj_bias) attention.push_back({"attn.c_proj.bias", {h}});
      attention.push_back({"ln_2.weight", {h}});
      if (ln) attention.push_back({"ln_2.bias", {h}});
      for (const auto& [name, shape] : attention) out.push_back({n + name, shape, pos});
      if (!w.moeLayer(l)) {
        std::vector<std::pair<const char*, std::vector<int64_t>>> mlp = {{"mlp.c_fc.weight", {F2, h}}};
        if (w.mlp_bias) mlp.push_back({"mlp.c_fc.bias", {F2}});
        mlp.push_back({"mlp.c_proj.weight", {h, F}});
        if (w.mlp_bias) mlp.push_back({"mlp.c_proj.bias", {h}});
        for (const auto& [name, shape] : mlp) out.push_back({n + name, shape, pos});
        continue;
      }
      // A MoE layer's MLP (moe.h): the router, this rank's E/ep experts and the shared expert; with
      // ep > 1 the experts are reduced over the expert-dp group (runtime/src/train/experts.h).
      static const char* kMoe[] = {"mlp.router.weight",         "mlp.experts.c_fc.weight", "mlp.experts.c_fc.bias",
                                   "mlp.experts.c_proj.weight", "mlp.experts.c_proj.bias", "mlp.shared.c_fc.weight",
                                   "mlp.shared.c_fc.bias",      "mlp.shared.c_proj.weight", "mlp.shared.c_proj.bias"};
      const auto shapes = moeMlpShapes(w, p);
      for (size_t i = 0; i < shapes.size(); ++i) {
        const bool expert = i >= 1 && i <= 4;
        if (!w.mlp_bias && i % 2 == 0 && i > 0) continue;  // the biases (Mixtral has none)
        out.push_back({n + kMoe[i], shapes[i], pos, !(expert && p.ep > 1), i >= 1});
      }
    }
  if (last) {
    out.push_back({"ln_f.weight", {h}});
    if (ln) out.push_back({"ln_f.bias", {h}});
    if (!w.tie_embeddings) out.push_back({"lm_head.weight", {Vp / t, h}});
  }
  return out;
}

}  // namespace trainscope::models
