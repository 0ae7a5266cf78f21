// moe.cpp — see moe.h. Router, capacity, dispatch by all-to-all, experts, combine.
#include "model/moe.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <numeric>

#include "cpu/cpu_ops.h"
#include "model/checkpoint.h"
#include "model/tensor_parallel.h"
#include "trainscope/common/error.h"

namespace trainscope::runtime {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::vector<int64_t> toVector(const at::Tensor& t) {
  at::Tensor c = t.to(at::kLong).contiguous().cpu();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

// Forward: rows to the ranks of their experts; backward: the gradients' rows back by the swapped
// splits. The group travels through saved_data as an integer: it outlives every step.
struct AllToAll : torch::autograd::Function<AllToAll> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group, std::vector<int64_t> out_splits,
                            std::vector<int64_t> in_splits) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["out"] = c10::IValue(out_splits);
    ctx->saved_data["in"] = c10::IValue(in_splits);
    return exchange(x, *reinterpret_cast<Group*>(group), out_splits, in_splits);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto& group = *reinterpret_cast<Group*>(ctx->saved_data["group"].toInt());
    const auto out = ctx->saved_data["out"].toIntVector(), in = ctx->saved_data["in"].toIntVector();
    return {exchange(g[0], group, in, out), at::Tensor(), at::Tensor(), at::Tensor()};
  }
  static at::Tensor exchange(const at::Tensor& x, Group& group, const std::vector<int64_t>& out_splits,
                             const std::vector<int64_t>& in_splits) {
    at::Tensor in = x.contiguous();
    const int64_t rows = std::accumulate(out_splits.begin(), out_splits.end(), int64_t(0));
    at::Tensor out = at::empty({rows, x.size(1)}, x.options());
    group.allToAll(out, in, out_splits, in_splits);
    return out;
  }
};

// Forward: the layer's output as is; backward: also the aux/z losses' gradient (Megatron-LM's
// MoEAuxLossAutoScaler), so the losses need no path of their own to the step's loss.
struct AttachLoss : torch::autograd::Function<AttachLoss> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& out, const at::Tensor& loss, double scale) {
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["dtype"] = loss.scalar_type();
    return out.view_as(out);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const double scale = ctx->saved_data["scale"].toDouble();
    return {g[0], at::full({}, scale, g[0].options().dtype(ctx->saved_data["dtype"].toScalarType())), at::Tensor()};
  }
};

// The combine's scatter: out = zeros(rows, C) with src's rows added at index (index_add). Forward
// as autograd's index_add; its backward, dsrc = dout.index_select(0, index), is autograd's too, but
// keeps the index only: IndexAddBackward0 also keeps `source` (to read its shape), which here is
// the gated expert outputs, M·C·e per MoE layer held to the backward for nothing
// (docs/memory-model.md, "Mixture of experts").
struct IndexAddRows : torch::autograd::Function<IndexAddRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& src, const at::Tensor& index, int64_t rows) {
    ctx->save_for_backward({index});
    return at::zeros({rows, src.size(1)}, src.options()).index_add(0, index, src);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const at::Tensor index = ctx->get_saved_variables()[0];
    return {g[0].index_select(0, index), at::Tensor(), at::Tensor()};
  }
};

// Rows put in another order: out[i] = x[from[i]]. Forward as an index_select; backward scatters
// dout back by the inverse permutation as a gather (dx = dout.index_select(0, to), to[from[i]] = i),
// the exact copy index_copy's backward made. Keeps the two index vectors only (autograd's
// index_copy kept its source, the experts' outputs R·C·e, and index_select's backward would add
// into a zero-filled tensor).
struct PermuteRows : torch::autograd::Function<PermuteRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& from, const at::Tensor& to) {
    ctx->save_for_backward({to});
    return x.index_select(0, from);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const at::Tensor to = ctx->get_saved_variables()[0];
    return {g[0].index_select(0, to), at::Tensor(), at::Tensor()};
  }
};

// One expert's MLP over rows x (n, C): GELU-tanh, or SwiGLU with fc_w's rows [gate; up]
// (down(silu(gate(x)) · up(x)), as Mixtral's experts). Biases may be undefined (mlp_bias false).
at::Tensor expertMlp(const at::Tensor& x, const at::Tensor& fc_w, const at::Tensor& fc_b, const at::Tensor& proj_w,
                     const at::Tensor& proj_b, bool swiglu) {
  at::Tensor h = fc_b.defined() ? at::addmm(fc_b, x, fc_w.t()) : at::mm(x, fc_w.t());   // (n, F2)
  if (swiglu) {
    auto gu = h.chunk(2, 1);
    h = at::silu(gu[0]) * gu[1];                                                         // (n, F)
  } else {
    h = cpu_ops::usable(h) ? cpu_ops::geluTanh(h) : at::gelu(h, "tanh");
  }
  return proj_b.defined() ? at::addmm(proj_b, h, proj_w.t()) : at::mm(h, proj_w.t());    // (n, C)
}

// Each expert's GELU MLP over its consecutive rows: xs (M, C) with counts[e] rows for local expert e.
// The experts' weights are taken apart with one unbind per tensor, not an index per expert: in
// backward an unbind stacks its E gradients once, where E selects would each materialise a zero-filled
// (E, F, C) gradient and add them up (E² · F · C bytes written per tensor).
at::Tensor runExperts(const MoeWeights& w, const at::Tensor& xs, const std::vector<int64_t>& counts) {
  const std::vector<at::Tensor> fc_w = w.fc_w.unbind(0), proj_w = w.proj_w.unbind(0);   // E/EP x (F2, C), (C, F)
  const std::vector<at::Tensor> fc_b = w.fc_b.defined() ? w.fc_b.unbind(0) : std::vector<at::Tensor>(counts.size());
  const std::vector<at::Tensor> proj_b =
      w.proj_b.defined() ? w.proj_b.unbind(0) : std::vector<at::Tensor>(counts.size());  // biases: mlp_bias
  // The rows by expert, likewise one split (its backward concatenates), not a narrow per expert.
  const std::vector<at::Tensor> xe = xs.split_with_sizes(counts, 0);                     // E/EP x (n_e, C)
  std::vector<at::Tensor> ys;
  for (size_t e = 0; e < counts.size(); ++e)
    ys.push_back(expertMlp(xe[e], fc_w[e], fc_b[e], proj_w[e], proj_b[e], w.swiglu));   // (n_e, C)
  return at::cat(ys, 0);                                                                 // (M, C)
}

// Rows sorted by global expert go to the experts' ranks, run there, and come back in the same order.
at::Tensor dispatchAndRun(const MoeWeights& w, const at::Tensor& xs, const std::vector<int64_t>& kept_per_expert,
                          Group& ep) {
  const int P = ep.size(), r = ep.rank();
  const int64_t E = int64_t(kept_per_expert.size()), El = E / P;
  // Every rank's per-expert counts: (P, E). Small (E int64 per rank), so one all-gather.
  // On the tokens' device: NCCL gathers device tensors only.
  at::Tensor mine = at::tensor(kept_per_expert, at::kLong).to(xs.device()), all = at::empty({P * E}, mine.options());
  ep.allGather(all, mine);
  const std::vector<int64_t> counts = toVector(all);  // counts[q·E + e]
  std::vector<int64_t> send(size_t(P), 0), recv(size_t(P), 0), local(size_t(El), 0);
  for (int q = 0; q < P; ++q)
    for (int64_t e = 0; e < El; ++e) {
      send[size_t(q)] += kept_per_expert[size_t(q * El + e)];
      recv[size_t(q)] += counts[size_t(q * E + r * El + e)];
      local[size_t(e)] += counts[size_t(q * E + r * El + e)];
    }
  at::Tensor got = AllToAll::apply(xs, reinterpret_cast<int64_t>(&ep), recv, send);  // (R, C): by source, then expert
  // Regroup what arrived by local expert: expert e's rows from source 0, then source 1, …
  std::vector<int64_t> order;
  std::vector<int64_t> offset(size_t(P), 0);
  for (int q = 1; q < P; ++q) offset[size_t(q)] = offset[size_t(q - 1)] + recv[size_t(q - 1)];
  for (int64_t e = 0; e < El; ++e)
    for (int q = 0; q < P; ++q) {
      int64_t start = offset[size_t(q)];
      for (int64_t j = 0; j < e; ++j) start += counts[size_t(q * E + r * El + j)];
      for (int64_t i = 0; i < counts[size_t(q * E + r * El + e)]; ++i) order.push_back(start + i);
    }
  // order[i]: the received row that is the i-th by expert; inverse[order[i]] = i.
  std::vector<int64_t> inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) inverse[size_t(order[i])] = int64_t(i);
  at::Tensor perm = at::tensor(order, at::kLong).to(xs.device());
  at::Tensor unperm = at::tensor(inverse, at::kLong).to(xs.device());
  at::Tensor y = runExperts(w, got.index_select(0, perm), local);                       // (R, C) by expert
  at::Tensor back = PermuteRows::apply(y, unperm, perm);                                 // (R, C) by source
  return AllToAll::apply(back, reinterpret_cast<int64_t>(&ep), send, recv);              // (M, C) as sent
}

}  // namespace

MoeSpec MoeSpec::of(const workloads::Workload& w) {
  MoeSpec s;
  s.n_experts = w.n_experts;
  s.top_k = w.top_k;
  s.renormalise = w.renormalisesGates();
  s.capacity_factor = w.capacity_factor;
  s.aux_loss_coeff = w.aux_loss_coeff;
  s.z_loss_coeff = w.z_loss_coeff;
  if (const char* e = std::getenv("TRAINSCOPE_TEST_ROUTE_ALL_TO"); e && *e) s.force_expert = std::atoll(e);
  return s;
}

int64_t MoeSpec::capacity(int64_t tokens) const {
  if (capacity_factor <= 0) return 0;
  return int64_t(std::ceil(capacity_factor * double(tokens) * double(top_k) / double(n_experts)));
}

double ExpertLoad::imbalance() const {
  if (tokens.empty()) return 0;
  const double total = double(std::accumulate(tokens.begin(), tokens.end(), int64_t(0)));
  if (total == 0) return 0;
  return double(*std::max_element(tokens.begin(), tokens.end())) / (total / double(tokens.size()));
}

void ExpertLoad::add(const ExpertLoad& o) {
  if (tokens.empty()) {
    tokens.assign(o.tokens.size(), 0);
    kept.assign(o.kept.size(), 0);
  }
  for (size_t e = 0; e < tokens.size() && e < o.tokens.size(); ++e) {
    tokens[e] += o.tokens[e];
    kept[e] += o.kept[e];
  }
  assignments += o.assignments;
  dropped += o.dropped;
  capacity = o.capacity;
  aux_loss += o.aux_loss;
  z_loss += o.z_loss;
  calls += o.calls;
}

MoeContext& moeContext(const BlockContext& tp) {
  if (!tp.moe) TRAINSCOPE_THROW("a MoE block ran without its MoE context (BlockContext::moe)");
  return *tp.moe;
}

at::Tensor moeForward(const MoeWeights& w, const at::Tensor& x, MoeContext& ctx) {
  if (inRecompute()) return moeForward(w, x, ctx.spec, ctx.ep);  // counted in the first forward
  ExpertLoad call;
  at::Tensor out = moeForward(w, x, ctx.spec, ctx.ep, &call);
  ctx.load[w.layer].add(call);
  return out;
}

MoeWeights initMoe(const workloads::Workload& wl, at::Generator& gen) {
  const int64_t C = wl.n_embd, E = wl.n_experts, F = wl.expertHidden(), Fs = wl.sharedExpertHidden();
  const bool swiglu = wl.mlp == workloads::Mlp::SwiGLU, bias = wl.mlp_bias;
  const int64_t F2 = swiglu ? 2 * F : F, Fs2 = swiglu ? 2 * Fs : Fs;  // SwiGLU: rows [gate; up]
  auto opts = at::TensorOptions().dtype(at::kFloat);
  const double std = 0.02, resid_std = 0.02 / std::sqrt(2.0 * double(wl.n_layer));
  auto normal = [&](at::IntArrayRef shape, double s) { return at::empty(shape, opts).normal_(0.0, s, gen); };
  auto zeros = [&](at::IntArrayRef shape) { return bias ? at::zeros(shape, opts) : at::Tensor(); };
  MoeWeights w;
  w.swiglu = swiglu;
  w.router_w = normal({E, C}, std);
  w.fc_w = normal({E, F2, C}, std);
  w.fc_b = zeros({E, F2});
  w.proj_w = normal({E, C, F}, resid_std);
  w.proj_b = zeros({E, C});
  if (wl.shared_expert) {
    w.shared_fc_w = normal({Fs2, C}, std);
    w.shared_fc_b = zeros({Fs2});
    w.shared_proj_w = normal({C, Fs}, resid_std);
    w.shared_proj_b = zeros({C});
    if (wl.shared_expert_gate) w.shared_gate_w = normal({1, C}, std);
  }
  return w;
}

MoeWeights shardMoe(const MoeWeights& full, int ep, int r, const at::Device& device) {
  const int64_t E = full.router_w.size(0);
  if (E % ep != 0)
    throw UserError("--ep", "n_experts=" + std::to_string(E) + " does not divide over " + std::to_string(ep) + " ranks",
                    "pass an --ep that divides n_experts");
  auto leaf = [&](const at::Tensor& t) {
    return t.defined() ? t.detach().contiguous().clone().to(device).requires_grad_(true) : at::Tensor();
  };
  auto mine = [&](const at::Tensor& t) { return t.defined() ? leaf(t.narrow(0, r * (E / ep), E / ep)) : at::Tensor(); };
  MoeWeights w;
  w.layer = full.layer;
  w.swiglu = full.swiglu;
  w.router_w = leaf(full.router_w);
  w.fc_w = mine(full.fc_w);
  w.fc_b = mine(full.fc_b);
  w.proj_w = mine(full.proj_w);
  w.proj_b = mine(full.proj_b);
  if (full.shared_fc_w.defined()) {
    w.shared_fc_w = leaf(full.shared_fc_w);
    w.shared_fc_b = leaf(full.shared_fc_b);
    w.shared_proj_w = leaf(full.shared_proj_w);
    w.shared_proj_b = leaf(full.shared_proj_b);
    w.shared_gate_w = leaf(full.shared_gate_w);
  }
  return w;
}

at::Tensor moeForward(const MoeWeights& w, const at::Tensor& x, const MoeSpec& s, Group* ep, ExpertLoad* load) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), N = B * T, E = s.n_experts, k = s.top_k;
  at::Tensor x2 = x.reshape({N, C});                                                     // (N, C)
  // Router, in fp32 whatever the compute dtype: the top-k must not flip with rounding.
  at::Tensor logits = at::matmul(x2.to(at::kFloat), w.router_w.to(at::kFloat).t());     // (N, E)
  if (s.force_expert >= 0 && s.force_expert < E)                                         // test seam (moe.h)
    logits = logits + at::one_hot(at::full({1}, s.force_expert, at::kLong), E).to(logits.device()).to(at::kFloat) * 30.0;
  at::Tensor probs = at::softmax(logits, 1);                                             // (N, E)
  auto [gate, idx] = probs.topk(k, 1);                                                   // (N, k), (N, k)
  // renormalised (GShard, Mixtral; Qwen2-MoE under norm_topk_prob), else the softmax's own (Switch, Qwen2-MoE)
  if (s.renormalise) gate = gate / gate.sum(1, /*keepdim=*/true);

  // Assignments in priority order: a = choice·N + token (every first choice before any second).
  at::Tensor expert_a = idx.t().reshape({N * k});                                        // (kN)
  at::Tensor token_a = at::arange(N, idx.options()).repeat({k});                         // (kN)
  at::Tensor gate_a = gate.t().reshape({N * k});                                         // (kN)
  at::Tensor onehot = at::one_hot(expert_a, E);                                          // (kN, E)
  at::Tensor routed = onehot.sum(0);                                                     // (E) before capacity
  const int64_t cap = s.capacity(N);
  at::Tensor keep;                                                                       // (kN) bool
  if (cap > 0) {
    at::Tensor pos = (onehot.cumsum(0) - 1).gather(1, expert_a.unsqueeze(1)).squeeze(1);  // place in its expert
    keep = pos < cap;
  } else {
    keep = at::ones({N * k}, at::TensorOptions().dtype(at::kBool).device(x.device()));
  }
  // The kept assignments sorted by expert, priority order inside each expert (a stable sort).
  at::Tensor kept = keep.nonzero().squeeze(1);                                           // (M)
  at::Tensor order = std::get<1>(at::sort(expert_a.index_select(0, kept), /*stable=*/true, 0, false));
  at::Tensor sel = kept.index_select(0, order);                                          // (M) assignment ids
  at::Tensor tok = token_a.index_select(0, sel);                                         // (M)
  // Load-balancing loss E·Σ f_e·P_e (f from counts, not differentiated) and the router z-loss.
  at::Tensor f = routed.to(at::kFloat) / double(N * k);                                  // (E)
  at::Tensor aux = s.aux_loss_coeff * double(E) * (f * probs.mean(0)).sum();            // scalar
  at::Tensor z = s.z_loss_coeff * at::logsumexp(logits, 1).pow(2).mean();               // scalar
  // What the host needs, in one device-to-host copy: the kept counts per expert (the experts' row
  // splits and the all-to-all's), and for the load record the routed counts and the two losses.
  const at::Tensor host = at::cat({onehot.index_select(0, sel).sum(0).to(at::kDouble), routed.to(at::kDouble),
                                   aux.detach().to(at::kDouble).view({1}), z.detach().to(at::kDouble).view({1})})
                              .cpu();                                                    // (2E + 2)
  const double* on_host = host.data_ptr<double>();
  const std::vector<int64_t> per_expert(on_host, on_host + E);                                       // (E) kept
  at::Tensor xs = x2.index_select(0, tok);                                               // (M, C) by expert

  at::Tensor ys;                                                                         // (M, C)
  if (ep && ep->size() > 1) {
    if (E % ep->size() != 0)
      throw UserError("--ep", "n_experts=" + std::to_string(E) + " does not divide over ep=" +
                                  std::to_string(ep->size()), "pass an --ep that divides n_experts");
    ys = dispatchAndRun(w, xs, per_expert, *ep);
  } else {
    ys = runExperts(w, xs, per_expert);
  }
  // Combine: each kept assignment's output, weighted by its gate, added to its token's row.
  at::Tensor g = gate_a.index_select(0, sel).to(ys.scalar_type()).unsqueeze(1);        // (M, 1)
  at::Tensor out = IndexAddRows::apply(ys * g, tok, N);                                  // (N, C)
  if (w.shared_fc_w.defined()) {
    at::Tensor shared = expertMlp(x2, w.shared_fc_w, w.shared_fc_b, w.shared_proj_w, w.shared_proj_b, w.swiglu);  // (N, C)
    // Qwen2-MoE: the shared expert's output times sigmoid(x·g), g a Linear(C, 1) without bias.
    if (w.shared_gate_w.defined()) shared = at::sigmoid(at::mm(x2, w.shared_gate_w.t())) * shared;
    out = out + shared;
  }

  if (load) {
    load->tokens.assign(on_host + E, on_host + 2 * E);
    load->kept = per_expert;
    load->calls = 1;
    load->assignments = N * k;
    load->capacity = cap;
    load->dropped = N * k - int64_t(sel.numel());
    load->aux_loss = on_host[2 * E];
    load->z_loss = on_host[2 * E + 1];
  }
  if (s.aux_loss_coeff > 0 || s.z_loss_coeff > 0) out = AttachLoss::apply(out, aux + z, s.loss_grad_scale);
  return out.view({B, T, C}).to(x.scalar_type());
}

}  // namespace trainscope::runtime
