// weights.cpp — the GPT weights: the flat layout (arch-contract: GptWeights::flat for every
// architecture), what each tensor is (info), initialisation and the tensor/expert-parallel shards.
// The block's tensors follow its BlockArch: GPT-2 is the case where every optional one exists.
#include "trainscope/runtime/gpt.h"

#include <ATen/ATen.h>

#include <cmath>
#include <tuple>

#include "model/moe.h"
#include "model/tensor_parallel.h"
#include "trainscope/models/dp_layout.h"

namespace trainscope::runtime {

BlockArch BlockArch::of(const workloads::Workload& w) {
  BlockArch a;
  a.rms_norm = w.norm == workloads::Norm::RMSNorm;
  a.norm_eps = w.norm_eps;
  a.qkv_bias = w.qkv_bias;
  a.proj_bias = w.proj_bias;
  a.mlp_bias = w.mlp_bias;
  a.rope = w.positions == workloads::Positions::Rope;
  a.rope_theta = w.rope_theta;
  a.rope_scaling = w.rope_scaling;
  a.swiglu = w.mlp == workloads::Mlp::SwiGLU;
  a.n_head = w.n_head;
  a.n_kv_head = w.kvHeads();
  a.head_dim = w.headSize();
  a.window = w.sliding_window;
  a.window_from_layer = w.sliding_window > 0 ? w.window_from_layer : 0;
  a.alibi = w.positions == workloads::Positions::Alibi;
  return a;
}

std::vector<at::Tensor> BlockWeights::flat() const {
  std::vector<at::Tensor> v;
  for (const at::Tensor* t : {&ln1_w, &ln1_b, &qkv_w, &qkv_b, &proj_w, &proj_b, &ln2_w, &ln2_b})
    if (t->defined()) v.push_back(*t);
  if (!isMoe()) {
    for (const at::Tensor* t : {&fc_w, &fc_b, &fcproj_w, &fcproj_b})
      if (t->defined()) v.push_back(*t);
    return v;
  }
  std::vector<at::Tensor> m = moe.flat();
  v.insert(v.end(), m.begin(), m.end());
  return v;
}

BlockWeights BlockWeights::fromFlat(const at::Tensor* f, const BlockKind& kind) {
  const BlockArch& a = kind.arch;
  const bool norm_b = !a.rms_norm, mb = a.mlp_bias;
  BlockWeights b;
  b.arch = a;
  auto take = [&](at::Tensor& t, bool present) {
    if (present) t = *f++;
  };
  take(b.ln1_w, true), take(b.ln1_b, norm_b), take(b.qkv_w, true), take(b.qkv_b, a.qkv_bias);
  take(b.proj_w, true), take(b.proj_b, a.proj_bias), take(b.ln2_w, true), take(b.ln2_b, norm_b);
  if (!kind.moe) {
    take(b.fc_w, true), take(b.fc_b, mb), take(b.fcproj_w, true), take(b.fcproj_b, mb);
    return b;
  }
  MoeWeights& m = b.moe;
  take(m.router_w, true), take(m.fc_w, true), take(m.fc_b, mb), take(m.proj_w, true), take(m.proj_b, mb);
  if (kind.shared_expert)
    take(m.shared_fc_w, true), take(m.shared_fc_b, mb), take(m.shared_proj_w, true), take(m.shared_proj_b, mb);
  take(m.shared_gate_w, kind.shared_expert && kind.shared_gate);
  m.layer = kind.layer;
  m.swiglu = a.swiglu;
  return b;
}

std::vector<at::Tensor> MoeWeights::flat() const {
  std::vector<at::Tensor> v;
  for (const at::Tensor* t : {&router_w, &fc_w, &fc_b, &proj_w, &proj_b, &shared_fc_w, &shared_fc_b, &shared_proj_w,
                              &shared_proj_b, &shared_gate_w})
    if (t->defined()) v.push_back(*t);
  return v;
}

StageSpec StageSpec::withModel(const workloads::Workload& w) const {
  StageSpec s = *this;
  s.moe_layers.assign(size_t(w.n_layer), false);
  for (int64_t l = 0; l < w.n_layer; ++l) s.moe_layers[size_t(l)] = w.moeLayer(l);
  s.shared_expert = w.isMoe() && w.shared_expert;
  s.shared_gate = s.shared_expert && w.shared_expert_gate;
  s.arch = BlockArch::of(w);
  s.learned_positions = w.positions == workloads::Positions::Learned;
  s.tied = w.tie_embeddings;
  return s;
}

// The split is models/dp_layout.h's stageLayout, which the memory and time models read too.
StageSpec StageSpec::of(int64_t n_layer, int pp, int stage, int virtual_stages) {
  const std::vector<models::Range> chunks = models::stageLayout(n_layer, pp, stage, virtual_stages);
  StageSpec s;
  s.layer_begin = chunks[0].begin;
  s.layer_end = chunks[0].end;
  for (size_t k = 1; k < chunks.size(); ++k) s.later_chunks.emplace_back(chunks[k].begin, chunks[k].end);
  s.first = stage == 0;
  s.last = stage == pp - 1;
  return s;
}

int64_t StageSpec::layers() const {
  int64_t n = layer_end - layer_begin;
  for (const auto& [b, e] : later_chunks) n += e - b;
  return n;
}

std::vector<int64_t> StageSpec::layerIds() const {
  std::vector<int64_t> ids;
  for (int64_t l = layer_begin; l < layer_end; ++l) ids.push_back(l);
  for (const auto& [b, e] : later_chunks)
    for (int64_t l = b; l < e; ++l) ids.push_back(l);
  return ids;
}

StageSpec StageSpec::chunk(int k) const {
  StageSpec c = *this;
  c.later_chunks.clear();
  std::tie(c.layer_begin, c.layer_end) = k == 0 ? std::make_pair(layer_begin, layer_end) : later_chunks[size_t(k - 1)];
  c.first = first && k == 0;
  c.last = last && k == chunks() - 1;
  return c;
}

std::vector<at::Tensor> GptWeights::flat() const {
  std::vector<at::Tensor> out;
  if (wte.defined()) out.push_back(wte);
  if (wpe.defined()) out.push_back(wpe);
  for (const auto& b : blocks) {
    auto bf = b.flat();
    out.insert(out.end(), bf.begin(), bf.end());
  }
  for (const at::Tensor* t : {&lnf_w, &lnf_b, &lm_head})
    if (t->defined()) out.push_back(*t);
  return out;
}

GptWeights GptWeights::fromFlat(const std::vector<at::Tensor>& f, const StageSpec& st) {
  GptWeights w;
  w.arch = st.arch;
  size_t i = 0;
  if (st.first || (st.last && st.tied)) w.wte = f[i++];
  if (st.first && st.learned_positions) w.wpe = f[i++];
  for (int64_t l : st.layerIds()) {
    const BlockKind kind = st.blockKind(l);
    w.blocks.push_back(BlockWeights::fromFlat(&f[i], kind));
    i += kind.count();
  }
  if (st.last) {
    w.lnf_w = f[i++];
    if (!st.arch.rms_norm) w.lnf_b = f[i++];
    if (!st.tied) w.lm_head = f[i++];
  }
  return w;
}

GptWeights GptWeights::chunk(const StageSpec& st, int k) const {
  const StageSpec c = st.chunk(k);
  size_t offset = 0;  // blocks hold the chunks' layers one chunk after the other
  for (int j = 0; j < k; ++j) offset += size_t(st.chunk(j).layers());
  GptWeights w;
  w.arch = arch;
  if (c.first || (c.last && c.tied)) w.wte = wte;
  if (c.first) w.wpe = wpe;
  w.blocks.assign(blocks.begin() + ptrdiff_t(offset), blocks.begin() + ptrdiff_t(offset + size_t(c.layers())));
  if (c.last) {
    w.lnf_w = lnf_w;
    w.lnf_b = lnf_b;
    w.lm_head = lm_head;
  }
  return w;
}

std::vector<ParamInfo> GptWeights::info(const StageSpec& st) {
  std::vector<ParamInfo> v;
  const BlockArch& a = st.arch;
  if (st.first || (st.last && st.tied)) v.push_back({"wte", true, true, false, true});
  if (st.first && st.learned_positions) v.push_back({"wpe", true, false, true, false});
  struct Entry { const char* name; bool decay, sharded, sp_partial; };
  static const Entry kBlock[] = {
      {"ln_1.weight", false, false, true},       {"ln_1.bias", false, false, true},
      {"attn.c_attn.weight", true, true, false}, {"attn.c_attn.bias", false, true, false},
      {"attn.c_proj.weight", true, true, false}, {"attn.c_proj.bias", false, false, true},
      {"ln_2.weight", false, false, true},       {"ln_2.bias", false, false, true},
      {"mlp.c_fc.weight", true, true, false},    {"mlp.c_fc.bias", false, true, false},
      {"mlp.c_proj.weight", true, true, false},  {"mlp.c_proj.bias", false, false, true}};
  const bool nb = !a.rms_norm, mb = a.mlp_bias;
  const bool present[12] = {true, nb, true, a.qkv_bias, true, a.proj_bias, true, nb, true, mb, true, mb};
  // A MoE MLP is replicated over TP (sequence parallelism is not run with it); the experts are split
  // over ep ranks.
  static const struct { const char* name; bool decay, expert; } kMoe[] = {
      {"mlp.router.weight", true, false},         {"mlp.experts.c_fc.weight", true, true},
      {"mlp.experts.c_fc.bias", false, true},     {"mlp.experts.c_proj.weight", true, true},
      {"mlp.experts.c_proj.bias", false, true},   {"mlp.shared.c_fc.weight", true, false},
      {"mlp.shared.c_fc.bias", false, false},     {"mlp.shared.c_proj.weight", true, false},
      {"mlp.shared.c_proj.bias", false, false},   {"mlp.shared_gate.weight", true, false}};
  const bool moe_present[10] = {true, true, mb, true, mb, true, mb, true, mb, true};
  for (int64_t l : st.layerIds()) {
    const std::string h = "h." + std::to_string(l) + ".";
    const BlockKind kind = st.blockKind(l);
    for (size_t j = 0; j < (kind.moe ? 8 : 12); ++j)
      if (present[j]) v.push_back({h + kBlock[j].name, kBlock[j].decay, kBlock[j].sharded, kBlock[j].sp_partial});
    for (size_t j = 0; kind.moe && j < (kind.shared_expert ? (kind.shared_gate ? 10 : 9) : 5); ++j) {
      if (!moe_present[j]) continue;
      ParamInfo p{h + kMoe[j].name, kMoe[j].decay, false, false, false};
      p.expert = kMoe[j].expert;
      v.push_back(p);
    }
  }
  if (st.last) {
    v.push_back({"ln_f.weight", false, false, true, false});
    if (nb) v.push_back({"ln_f.bias", false, false, true, false});
    if (!st.tied) v.push_back({"lm_head.weight", true, true, false, true});
  }
  return v;
}

GptWeights initGpt(const workloads::Workload& wl, uint64_t seed, const at::Device& device) {
  const int64_t C = wl.n_embd, V = wl.vocab_size, L = wl.n_layer;
  const BlockArch arch = BlockArch::of(wl);
  const int64_t D = wl.headSize(), qkv = (wl.n_head + 2 * wl.kvHeads()) * D, F = wl.ffnHidden();
  at::Generator gen = at::detail::createCPUGenerator(seed);
  auto opts = at::TensorOptions().dtype(at::kFloat);
  auto normal = [&](std::initializer_list<int64_t> shape, double std) {
    return at::empty(shape, opts).normal_(0.0, std, gen);
  };
  auto zerosIf = [&](bool present, std::initializer_list<int64_t> shape) {
    return present ? at::zeros(shape, opts) : at::Tensor();
  };
  const bool nb = !arch.rms_norm;
  const double std = 0.02, resid_std = 0.02 / std::sqrt(2.0 * double(L));
  GptWeights w;
  w.arch = arch;
  // Drawn from one generator in flat() order (GPT-2's draws are unchanged: wte, wpe, then blocks).
  w.wte = normal({V, C}, std);
  if (wl.positions == workloads::Positions::Learned) w.wpe = normal({wl.n_positions, C}, std);
  for (int64_t l = 0; l < L; ++l) {
    BlockWeights b;
    b.arch = arch.atLayer(l);
    b.ln1_w = at::ones({C}, opts);
    b.ln1_b = zerosIf(nb, {C});
    b.qkv_w = normal({qkv, C}, std);
    b.qkv_b = zerosIf(arch.qkv_bias, {qkv});
    b.proj_w = normal({C, wl.n_head * D}, resid_std);
    b.proj_b = zerosIf(arch.proj_bias, {C});
    b.ln2_w = at::ones({C}, opts);
    b.ln2_b = zerosIf(nb, {C});
    if (wl.moeLayer(l)) {  // drawn from the same generator, in flat() order
      b.moe = initMoe(wl, gen);
      b.moe.layer = l;
      w.blocks.push_back(std::move(b));
      continue;
    }
    const int64_t F2 = arch.swiglu ? 2 * F : F;
    b.fc_w = normal({F2, C}, std);
    b.fc_b = zerosIf(arch.mlp_bias, {F2});
    b.fcproj_w = normal({C, F}, resid_std);
    b.fcproj_b = zerosIf(arch.mlp_bias, {C});
    w.blocks.push_back(std::move(b));
  }
  w.lnf_w = at::ones({C}, opts);
  w.lnf_b = zerosIf(nb, {C});
  if (!wl.tie_embeddings) w.lm_head = normal({V, C}, std);
  if (device.is_cpu()) {
    for (auto& t : w.flat()) t.requires_grad_(true);
    return w;
  }
  return shardGpt(w, StageSpec::whole(L).withModel(wl), 1, 0, device);
}

GptWeights shardGpt(const GptWeights& full, const StageSpec& st, int tp, int r, const at::Device& device, int ep,
                    int ep_rank) {
  auto leaf = [&](const at::Tensor& t) {
    return t.defined() ? t.detach().contiguous().clone().to(device).requires_grad_(true) : at::Tensor();
  };
  auto rows = [&](const at::Tensor& t) { return t.chunk(tp, 0)[r]; };          // split output rows
  auto cols = [&](const at::Tensor& t) { return t.chunk(tp, 1)[r]; };          // split input columns
  auto sharded = [&](const at::Tensor& t, auto cut) { return t.defined() ? leaf(cut(t.detach())) : at::Tensor(); };
  // c_attn rows are [q; k; v], each split by heads: this rank's q heads, and its K/V heads — or,
  // when tp > KV, the one K/V head its q heads use (replicated over tp/KV ranks).
  auto qkvRows = [&](const BlockArch& a) {
    return [&, a](const at::Tensor& t) {
      const int64_t H = a.n_head, KV = a.n_kv_head, D = a.head_dim;
      if (H == 0 || tp <= KV) {
        auto parts = H == 0 ? t.chunk(3, 0) : t.split_with_sizes({H * D, KV * D, KV * D}, 0);
        return at::cat({rows(parts[0]), rows(parts[1]), rows(parts[2])}, 0);
      }
      auto parts = t.split_with_sizes({H * D, KV * D, KV * D}, 0);
      const int64_t j = r / (tp / KV);  // the K/V head of this rank's q heads
      return at::cat({rows(parts[0]), parts[1].narrow(0, j * D, D), parts[2].narrow(0, j * D, D)}, 0);
    };
  };
  // SwiGLU's c_fc rows are [gate; up]: each split by rows.
  auto fcRows = [&](const BlockArch& a) {
    return [&, a](const at::Tensor& t) {
      if (!a.swiglu) return rows(t);
      auto parts = t.chunk(2, 0);
      return at::cat({rows(parts[0]), rows(parts[1])}, 0);
    };
  };
  auto vocabRows = [&](const at::Tensor& full_rows) {  // padded to a multiple of tp, then split
    const int64_t V = full_rows.size(0), Vp = paddedVocab(V, tp);
    at::Tensor t = full_rows.detach();
    if (Vp != V) t = at::cat({t, at::zeros({Vp - V, t.size(1)}, t.options())}, 0);  // padding rows
    return leaf(rows(t));
  };
  GptWeights w;
  w.arch = full.arch;
  if (st.first || (st.last && st.tied)) w.wte = vocabRows(full.wte);
  if (st.first) w.wpe = leaf(full.wpe);
  for (int64_t l : st.layerIds()) {
    const BlockWeights& f = full.blocks[size_t(l)];
    BlockWeights b;
    b.arch = f.arch;
    b.ln1_w = leaf(f.ln1_w);
    b.ln1_b = leaf(f.ln1_b);
    b.qkv_w = sharded(f.qkv_w, qkvRows(f.arch));
    b.qkv_b = sharded(f.qkv_b, qkvRows(f.arch));
    b.proj_w = sharded(f.proj_w, cols);
    b.proj_b = leaf(f.proj_b);
    b.ln2_w = leaf(f.ln2_w);
    b.ln2_b = leaf(f.ln2_b);
    if (f.isMoe()) {
      b.moe = shardMoe(f.moe, ep, ep_rank, device);
      w.blocks.push_back(std::move(b));
      continue;
    }
    b.fc_w = sharded(f.fc_w, fcRows(f.arch));
    b.fc_b = sharded(f.fc_b, fcRows(f.arch));
    b.fcproj_w = sharded(f.fcproj_w, cols);
    b.fcproj_b = leaf(f.fcproj_b);
    w.blocks.push_back(std::move(b));
  }
  if (st.last) {
    w.lnf_w = leaf(full.lnf_w);
    w.lnf_b = leaf(full.lnf_b);
    if (full.lm_head.defined()) w.lm_head = vocabRows(full.lm_head);
  }
  return w;
}

}  // namespace trainscope::runtime
