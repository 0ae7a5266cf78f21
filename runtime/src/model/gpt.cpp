// gpt.cpp — GPT weights and forward pass. Backward is LibTorch autograd, except that checkpointed
// regions (checkpoint.cpp) save only their inputs and recompute in backward, and the LM head
// (fused_head.cpp) produces its gradients in forward.
#include "trainscope/runtime/gpt.h"

#include <ATen/ATen.h>

#include <cmath>
#include <tuple>

#include "model/checkpoint.h"
#include "model/context_parallel.h"
#include "cpu/cpu_ops.h"
#include "model/fused_head.h"
#include "model/linear.h"
#include "model/moe.h"
#include "model/tensor_parallel.h"
#include "trainscope/common/error.h"
#include "trainscope/models/dp_layout.h"
#include "trainscope/tracer/range.h"

namespace trainscope::runtime {

// ---- weights ----------------------------------------------------------------------------------

std::vector<at::Tensor> BlockWeights::flat() const {
  std::vector<at::Tensor> v = {ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b};
  if (!isMoe()) {
    v.insert(v.end(), {fc_w, fc_b, fcproj_w, fcproj_b});
    return v;
  }
  std::vector<at::Tensor> m = moe.flat();
  v.insert(v.end(), m.begin(), m.end());
  return v;
}

BlockWeights BlockWeights::fromFlat(const at::Tensor* f, const BlockKind& kind) {
  BlockWeights b;
  for (at::Tensor* t : {&b.ln1_w, &b.ln1_b, &b.qkv_w, &b.qkv_b, &b.proj_w, &b.proj_b, &b.ln2_w, &b.ln2_b}) *t = *f++;
  if (!kind.moe) {
    for (at::Tensor* t : {&b.fc_w, &b.fc_b, &b.fcproj_w, &b.fcproj_b}) *t = *f++;
    return b;
  }
  MoeWeights& m = b.moe;
  for (at::Tensor* t : {&m.router_w, &m.fc_w, &m.fc_b, &m.proj_w, &m.proj_b}) *t = *f++;
  if (kind.shared_expert)
    for (at::Tensor* t : {&m.shared_fc_w, &m.shared_fc_b, &m.shared_proj_w, &m.shared_proj_b}) *t = *f++;
  m.layer = kind.layer;
  return b;
}

std::vector<at::Tensor> MoeWeights::flat() const {
  std::vector<at::Tensor> v = {router_w, fc_w, fc_b, proj_w, proj_b};
  if (shared_fc_w.defined()) v.insert(v.end(), {shared_fc_w, shared_fc_b, shared_proj_w, shared_proj_b});
  return v;
}

StageSpec StageSpec::withModel(const workloads::Workload& w) const {
  StageSpec s = *this;
  s.moe_every = w.isMoe() ? w.moe_every : 0;
  s.shared_expert = w.isMoe() && w.shared_expert;
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
  StageSpec c;
  std::tie(c.layer_begin, c.layer_end) = k == 0 ? std::make_pair(layer_begin, layer_end) : later_chunks[size_t(k - 1)];
  c.first = first && k == 0;
  c.last = last && k == chunks() - 1;
  c.moe_every = moe_every;
  c.shared_expert = shared_expert;
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
  if (lnf_w.defined()) {
    out.push_back(lnf_w);
    out.push_back(lnf_b);
  }
  return out;
}

GptWeights GptWeights::fromFlat(const std::vector<at::Tensor>& f, const StageSpec& st) {
  GptWeights w;
  size_t i = 0;
  if (st.first || st.last) w.wte = f[i++];
  if (st.first) w.wpe = f[i++];
  for (int64_t l : st.layerIds()) {
    const BlockKind kind = st.blockKind(l);
    w.blocks.push_back(BlockWeights::fromFlat(&f[i], kind));
    i += kind.count();
  }
  if (st.last) {
    w.lnf_w = f[i++];
    w.lnf_b = f[i++];
  }
  return w;
}

GptWeights GptWeights::chunk(const StageSpec& st, int k) const {
  const StageSpec c = st.chunk(k);
  size_t offset = 0;  // blocks hold the chunks' layers one chunk after the other
  for (int j = 0; j < k; ++j) offset += size_t(st.chunk(j).layers());
  GptWeights w;
  if (c.first || c.last) w.wte = wte;
  if (c.first) w.wpe = wpe;
  w.blocks.assign(blocks.begin() + ptrdiff_t(offset), blocks.begin() + ptrdiff_t(offset + size_t(c.layers())));
  if (c.last) {
    w.lnf_w = lnf_w;
    w.lnf_b = lnf_b;
  }
  return w;
}

std::vector<ParamInfo> GptWeights::info(const StageSpec& st) {
  std::vector<ParamInfo> v;
  if (st.first || st.last) v.push_back({"wte", true, true, false, true});
  if (st.first) v.push_back({"wpe", true, false, true, false});
  struct Entry { const char* name; bool decay, sharded, sp_partial; };
  static const Entry kBlock[] = {
      {"ln_1.weight", false, false, true},       {"ln_1.bias", false, false, true},
      {"attn.c_attn.weight", true, true, false}, {"attn.c_attn.bias", false, true, false},
      {"attn.c_proj.weight", true, true, false}, {"attn.c_proj.bias", false, false, true},
      {"ln_2.weight", false, false, true},       {"ln_2.bias", false, false, true},
      {"mlp.c_fc.weight", true, true, false},    {"mlp.c_fc.bias", false, true, false},
      {"mlp.c_proj.weight", true, true, false},  {"mlp.c_proj.bias", false, false, true}};
  // A MoE MLP is replicated over TP (sequence parallelism is not run with it); the experts are split
  // over ep ranks.
  static const struct { const char* name; bool decay, expert; } kMoe[] = {
      {"mlp.router.weight", true, false},         {"mlp.experts.c_fc.weight", true, true},
      {"mlp.experts.c_fc.bias", false, true},     {"mlp.experts.c_proj.weight", true, true},
      {"mlp.experts.c_proj.bias", false, true},   {"mlp.shared.c_fc.weight", true, false},
      {"mlp.shared.c_fc.bias", false, false},     {"mlp.shared.c_proj.weight", true, false},
      {"mlp.shared.c_proj.bias", false, false}};
  for (int64_t l : st.layerIds()) {
    const std::string h = "h." + std::to_string(l) + ".";
    const BlockKind kind = st.blockKind(l);
    for (size_t j = 0; j < (kind.moe ? 8 : 12); ++j)
      v.push_back({h + kBlock[j].name, kBlock[j].decay, kBlock[j].sharded, kBlock[j].sp_partial});
    for (size_t j = 0; kind.moe && j < kind.count() - 8; ++j) {
      ParamInfo p{h + kMoe[j].name, kMoe[j].decay, false, false, false};
      p.expert = kMoe[j].expert;
      v.push_back(p);
    }
  }
  if (st.last) {
    v.push_back({"ln_f.weight", false, false, true, false});
    v.push_back({"ln_f.bias", false, false, true, false});
  }
  return v;
}

GptWeights initGpt(const workloads::Workload& wl, uint64_t seed, const at::Device& device) {
  const int64_t C = wl.n_embd, V = wl.vocab_size, L = wl.n_layer;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  auto opts = at::TensorOptions().dtype(at::kFloat);
  auto normal = [&](std::initializer_list<int64_t> shape, double std) {
    return at::empty(shape, opts).normal_(0.0, std, gen);
  };
  const double std = 0.02, resid_std = 0.02 / std::sqrt(2.0 * double(L));
  GptWeights w;
  w.wte = normal({V, C}, std);
  w.wpe = normal({wl.n_positions, C}, std);
  for (int64_t l = 0; l < L; ++l) {
    BlockWeights b;
    b.ln1_w = at::ones({C}, opts);
    b.ln1_b = at::zeros({C}, opts);
    b.qkv_w = normal({3 * C, C}, std);
    b.qkv_b = at::zeros({3 * C}, opts);
    b.proj_w = normal({C, C}, resid_std);
    b.proj_b = at::zeros({C}, opts);
    b.ln2_w = at::ones({C}, opts);
    b.ln2_b = at::zeros({C}, opts);
    if (wl.moeLayer(l)) {  // drawn from the same generator, in flat() order
      b.moe = initMoe(wl, gen);
      b.moe.layer = l;
      w.blocks.push_back(std::move(b));
      continue;
    }
    b.fc_w = normal({4 * C, C}, std);
    b.fc_b = at::zeros({4 * C}, opts);
    b.fcproj_w = normal({C, 4 * C}, resid_std);
    b.fcproj_b = at::zeros({C}, opts);
    w.blocks.push_back(std::move(b));
  }
  w.lnf_w = at::ones({C}, opts);
  w.lnf_b = at::zeros({C}, opts);
  if (device.is_cpu()) {
    for (auto& t : w.flat()) t.requires_grad_(true);
    return w;
  }
  return shardGpt(w, StageSpec::whole(L).withModel(wl), 1, 0, device);
}

GptWeights shardGpt(const GptWeights& full, const StageSpec& st, int tp, int r, const at::Device& device, int ep,
                    int ep_rank) {
  auto leaf = [&](const at::Tensor& t) { return t.detach().contiguous().clone().to(device).requires_grad_(true); };
  auto rows = [&](const at::Tensor& t) { return t.chunk(tp, 0)[r]; };          // split output rows
  auto cols = [&](const at::Tensor& t) { return t.chunk(tp, 1)[r]; };          // split input columns
  // c_attn rows are [q; k; v], each split by heads: take this rank's heads of each.
  auto qkvRows = [&](const at::Tensor& t) {
    auto parts = t.chunk(3, 0);
    return at::cat({rows(parts[0]), rows(parts[1]), rows(parts[2])}, 0);
  };
  GptWeights w;
  if (st.first || st.last) {
    const int64_t V = full.wte.size(0), Vp = paddedVocab(V, tp);
    at::Tensor wte = full.wte.detach();
    if (Vp != V) wte = at::cat({wte, at::zeros({Vp - V, wte.size(1)}, wte.options())}, 0);  // padding rows
    w.wte = leaf(rows(wte));
  }
  if (st.first) w.wpe = leaf(full.wpe);
  for (int64_t l : st.layerIds()) {
    const BlockWeights& f = full.blocks[size_t(l)];
    BlockWeights b;
    b.ln1_w = leaf(f.ln1_w);
    b.ln1_b = leaf(f.ln1_b);
    b.qkv_w = leaf(qkvRows(f.qkv_w.detach()));
    b.qkv_b = leaf(qkvRows(f.qkv_b.detach()));
    b.proj_w = leaf(cols(f.proj_w.detach()));
    b.proj_b = leaf(f.proj_b);
    b.ln2_w = leaf(f.ln2_w);
    b.ln2_b = leaf(f.ln2_b);
    if (f.isMoe()) {
      b.moe = shardMoe(f.moe, ep, ep_rank, device);
      w.blocks.push_back(std::move(b));
      continue;
    }
    b.fc_w = leaf(rows(f.fc_w.detach()));
    b.fc_b = leaf(rows(f.fc_b.detach()));
    b.fcproj_w = leaf(cols(f.fcproj_w.detach()));
    b.fcproj_b = leaf(f.fcproj_b);
    w.blocks.push_back(std::move(b));
  }
  if (st.last) {
    w.lnf_w = leaf(full.lnf_w);
    w.lnf_b = leaf(full.lnf_b);
  }
  return w;
}

// ---- forward ----------------------------------------------------------------------------------

namespace detail {

// Causal attention core: qkv (B, T, 3C') -> y (B, T, C'), C' = C/TP with n_head local heads.
// The part selective checkpointing recomputes.
at::Tensor attentionCore(const at::Tensor& qkv, int64_t n_head) {
  if (cpu_ops::attentionUsable(qkv)) return cpu_ops::causalAttention(qkv, n_head);  // (B, T, C')
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, HS = C / n_head;
  auto parts = qkv.split(C, /*dim=*/2);                                   // 3 x (B, T, C')
  at::Tensor q = parts[0].view({B, T, n_head, HS}).transpose(1, 2);       // (B, NH, T, HS)
  at::Tensor k = parts[1].view({B, T, n_head, HS}).transpose(1, 2);       // (B, NH, T, HS)
  at::Tensor v = parts[2].view({B, T, n_head, HS}).transpose(1, 2);       // (B, NH, T, HS)
  at::Tensor y = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                                  /*is_causal=*/true);   // (B, NH, T, HS)
  return y.transpose(1, 2).reshape({B, T, C});                            // (B, T, C')
}

// One pre-LN transformer block: x (B, T, C) -> (B, T, C); (B, T/TP, C) under sequence parallelism.
// Without TP the collectives are identities and the biases fuse into the GEMMs.
at::Tensor blockForward(const BlockWeights& p, const at::Tensor& x, int64_t n_head, bool selective,
                        const BlockContext& tp) {
  const int64_t C = x.size(2);
  const bool sp = tp.sequence_parallel, split = tp.active();
  auto leaveTp = [&](const at::Tensor& t) { return sp ? scatterSeq(t, tp) : reduceFromTp(t, tp); };

  // The column-parallel linears enter TP themselves: under SP they keep only the (B, T/TP, C) shard.
  at::Tensor h = at::layer_norm(x, {C}, p.ln1_w, p.ln1_b, 1e-5);           // (B, T', C)
  at::Tensor qkv = columnParallelLinear(h, p.qkv_w, p.qkv_b, tp);          // (B, T, 3C/TP)
  // Under context parallelism the ring keeps only q, k, v and the output (flash-style): selective
  // checkpointing has nothing left to drop there.
  at::Tensor y = tp.cp       ? contextParallelAttention(qkv, n_head, *tp.cp)  // (B, T/CP, C/TP)
                 : selective ? checkpointAttention(qkv, n_head)              // (B, T, C/TP)
                             : attentionCore(qkv, n_head);
  at::Tensor x1 = split ? x + leaveTp(linear(y, p.proj_w, at::Tensor())) + p.proj_b       // (B, T', C)
                        : linearAdd(y, p.proj_w, p.proj_b, x);                  // x + proj(y), one pass

  h = at::layer_norm(x1, {C}, p.ln2_w, p.ln2_b, 1e-5);                    // (B, T', C)
  // A MoE MLP runs whole on every TP rank (replicated input, replicated output: no TP collective).
  if (p.isMoe()) return x1 + moeForward(p.moe, h, moeContext(tp));         // (B, T, C)
  at::Tensor f = columnParallelLinear(h, p.fc_w, p.fc_b, tp);              // (B, T, 4C/TP)
  f = cpu_ops::usable(f) ? cpu_ops::geluTanh(f) : at::gelu(f, "tanh");
  return split ? x1 + leaveTp(linear(f, p.fcproj_w, at::Tensor())) + p.fcproj_b      // (B, T', C)
               : linearAdd(f, p.fcproj_w, p.fcproj_b, x1);
}

}  // namespace detail

at::Tensor stageForward(const GptWeights& w, const StageSpec& st, const BlockContext& tp, int64_t n_head,
                        const at::Tensor& input, const at::Tensor& targets, Checkpointing ckpt,
                        LayerHooks* hooks) {
  at::Tensor x;
  if (hooks) hooks->beforeForward(-1);
  if (st.first) {
    const int64_t T = input.size(1);                                       // T/CP under CP
    at::Tensor e = vocabParallelEmbedding(w.wte, input, tp);              // (B, T, C), partial under TP
    // The positions this rank holds: 0..T-1, or its two context-parallel chunks.
    at::Tensor wpe = tp.cp ? w.wpe.index_select(0, tp.cp->positions) : w.wpe.narrow(0, 0, T);  // (T, C)
    if (tp.sequence_parallel) {
      const int64_t Ts = T / tp.size();
      x = scatterSeq(e, tp) + wpe.narrow(0, tp.rank() * Ts, Ts);           // (B, T/TP, C)
    } else {
      x = reduceFromTp(e, tp) + wpe;                                       // (B, T, C)
    }
  } else {
    x = input;
  }
  const int64_t heads = n_head / tp.size();
  for (size_t l = 0; l < w.blocks.size(); ++l) {
    const BlockWeights& b = w.blocks[l];
    TRAINSCOPE_RANGE(tracer::names::kLayer);
    if (hooks) hooks->beforeForward(int64_t(l));
    if (ckpt == Checkpointing::Full) x = checkpointBlock(b, x, heads, tp);  // saves x only
    else x = detail::blockForward(b, x, heads, ckpt == Checkpointing::Selective, tp);
    if (hooks) x = hooks->afterForward(int64_t(l), x);
  }
  if (!st.last) return x;
  const int64_t C = x.size(2);
  x = at::layer_norm(x, {C}, w.lnf_w, w.lnf_b, 1e-5);
  x = tp.sequence_parallel ? gatherSeq(x, tp) : copyToTp(x, tp);          // (B, T, C)
  const int64_t B = x.size(0), T = x.size(1);
  if (!targets.defined()) return at::matmul(x, w.wte.t());  // the logits, for --dump-logits (no TP)
  // Tied LM head + cross-entropy, fused and chunked: the (B*T, V) logits never exist at once.
  TRAINSCOPE_RANGE(tracer::names::kHead);
  return lmHeadCrossEntropy(x.reshape({B * T, C}), w.wte, targets.reshape({B * T}), tp);  // fp32 scalar
}

at::Tensor gptLoss(const GptWeights& w, int64_t n_head, const at::Tensor& inputs, const at::Tensor& targets,
                   Checkpointing ckpt) {
  static const BlockContext kNoTp;
  return stageForward(w, StageSpec::whole(int64_t(w.blocks.size())), kNoTp, n_head, inputs, targets, ckpt);
}

}  // namespace trainscope::runtime
