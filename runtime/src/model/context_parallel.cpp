// context_parallel.cpp — ring attention over the cp group (see context_parallel.h).
//
// Shapes: B batch, NH query heads and KV K/V heads on this TP rank (G = NH/KV query heads share a
// K/V head: grouped-query attention; G = 1 for multi-head), T local tokens (= 2c, the rank's two
// chunks), HS head size. Queries are held grouped, (B, KV, G, T, HS); K/V blocks (B, KV, T, HS) travel
// as they are, and each block's GEMMs take a K/V head's G query heads as one matrix of G·Tq rows
// (rowsOf), so a K/V head is never repeated and its dK/dV sums over its group inside the GEMM. Block
// compute is in fp32 whatever the compute dtype (the merge by log-sum-exp needs it); K/V blocks
// travel in the compute dtype, the dK/dV accumulators in fp32.
#include "model/context_parallel.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <limits>
#include <optional>

#include "model/attention.h"
#include "trainscope/tracer/range.h"

namespace trainscope::runtime {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int kTagKv = 21, kTagDkv = 22;

// One ring exchange in flight: `outgoing` to the next rank, `incoming` from the previous one.
struct Shift {
  at::Tensor outgoing, incoming;  // outgoing kept alive until the send completes
  std::shared_ptr<Pending> send, recv;
  at::Tensor wait() {
    recv->wait();
    send->wait();
    return incoming;
  }
};

Shift startShift(Group& g, const at::Tensor& t, int tag) {
  Shift s;
  s.outgoing = t.contiguous();
  s.incoming = at::empty_like(s.outgoing);
  const int next = (g.rank() + 1) % g.size(), prev = (g.rank() + g.size() - 1) % g.size();
  // Odd ring positions receive first. Gloo runs the two at once either way; a backend that queues one
  // peer's sends and receives in order on one stream (NCCL, where at CP 2 next == prev) would
  // otherwise have both ranks' sends wait for receives queued behind them.
  if (g.rank() % 2 == 1) s.recv = g.recvAsync(s.incoming, prev, tag);
  s.send = g.send(s.outgoing, next, tag);
  if (g.rank() % 2 == 0) s.recv = g.recvAsync(s.incoming, prev, tag);
  return s;
}

// Which queries of this rank see which keys of the block it holds at ring step `step`, as ranges of
// the local sequence (see the table in context_parallel.h).
struct Pair {
  int64_t q0, qn, k0, kn;
  bool causal;
};
Pair pairAt(int step, int rank, int size, int64_t T) {
  const int64_t c = T / 2;
  if (step == 0) return {0, T, 0, T, true};           // own block: plain causal
  const int src = (rank - step + size) % size;        // whose K/V this is
  if (src < rank) return {0, T, 0, c, false};         // its first chunk is before both of ours
  return {c, c, 0, T, false};                         // both its chunks are before our second one
}

// The global position of local index i (of T = 2c) on cp rank x of P: chunks x and 2P − 1 − x.
int64_t globalPosition(int x, int P, int64_t T, int64_t i) {
  const int64_t c = T / 2;
  return i < c ? int64_t(x) * c + i : int64_t(2 * P - 1 - x) * c + (i - c);
}

// The positions of local indices [i0, i0 + n) on rank x (int64, on `device`).
at::Tensor positionsOf(int x, int P, int64_t T, int64_t i0, int64_t n, const at::Device& device) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = globalPosition(x, P, T, i0 + i);
  return at::tensor(v, at::TensorOptions().dtype(at::kLong)).to(device);
}

// One block pair as the ring sees it: which queries and keys (pairAt) and whose keys they are.
struct Block {
  Pair p;
  int src;
  // Whether a sliding window leaves every (query, key) of the pair out: the nearest pair of the two
  // ranges (positions grow with the local index on each rank) is window or more apart.
  bool skipped(int rank, int P, int64_t T, const cpu_ops::ScoreBias& bias) const {
    if (bias.window <= 0) return false;
    return globalPosition(rank, P, T, p.q0) - globalPosition(src, P, T, p.k0 + p.kn - 1) >= bias.window;
  }
};
Block blockAt(int step, int rank, int size, int64_t T) { return {pairAt(step, rank, size, T), (rank - step + size) % size}; }

// Where a block's scores are taken: this rank, the ring's size, the local length, the bias.
struct ScoreContext {
  int rank, P;
  int64_t T;
  const cpu_ops::ScoreBias& bias;
};

constexpr int64_t kSeq = 3;  // the token dimension of the grouped query-side tensors (B, KV, G, T, …)

// A K/V head's G query heads as the rows of one GEMM: (B, KV, G, n, X) -> (B, KV, G·n, X); and back.
at::Tensor rowsOf(const at::Tensor& t) { return t.flatten(2, 3); }
at::Tensor groupsOf(const at::Tensor& t, int64_t G) { return t.unflatten(2, {G, t.size(2) / G}); }

// Scaled scores of the pair (B, KV, G, Tq, Tk) fp32, of q (B, KV, G, Tq, HS) against k (B, KV, Tk, HS):
// causal within the own block; with a window or ALiBi, scoreBias at the global positions of both
// ranges (which includes causality).
at::Tensor scores(const at::Tensor& q, const at::Tensor& k, const Block& b, const ScoreContext& c) {
  const int64_t G = q.size(2);
  const double scale = 1.0 / std::sqrt(double(q.size(-1)));
  at::Tensor s = groupsOf(at::matmul(rowsOf(q), k.transpose(-2, -1)), G).mul_(scale);   // (B, KV, G, Tq, Tk)
  if (c.bias.any()) {
    const at::Tensor qpos = positionsOf(c.rank, c.P, c.T, b.p.q0, b.p.qn, q.device());
    const at::Tensor kpos = positionsOf(b.src, c.P, c.T, b.p.k0, b.p.kn, q.device());
    at::Tensor add = scoreBias(qpos, kpos, c.bias, at::kFloat);                          // (NH | 1, Tq, Tk)
    // Query head i is member i % G of K/V head i / G's group: (NH, …) is (KV, G, …).
    if (add.size(0) > 1) add = add.view({q.size(1), G, add.size(1), add.size(2)});
    s.add_(add);                                                                         // broadcast
  } else if (b.p.causal) {
    at::Tensor future = at::ones({s.size(-2), s.size(-1)}, q.options().dtype(at::kBool)).triu_(1);
    s.masked_fill_(future, -std::numeric_limits<float>::infinity());
  }
  return s;
}

// Forward of the whole ring, q (B, KV, G, T, HS), k and v (B, KV, T, HS): out (B, KV, G, T, HS) and
// lse (B, KV, G, T), both fp32.
std::pair<at::Tensor, at::Tensor> ringForward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                              Group& g, const cpu_ops::ScoreBias& bias) {
  const int P = g.size(), r = g.rank();
  const int64_t T = q.size(kSeq), G = q.size(2);
  const ScoreContext c{r, P, T, bias};
  at::Tensor qf = q.to(at::kFloat);
  at::Tensor out = at::zeros_like(qf);                                         // (B, KV, G, T, HS)
  at::Tensor lse = at::full(qf.sizes().slice(0, 4), -std::numeric_limits<float>::infinity(), qf.options());
  at::Tensor kv = at::stack({k, v}).contiguous();                              // (2, B, KV, T, HS)
  for (int s = 0; s < P; ++s) {
    std::optional<Shift> next;
    if (s + 1 < P) next = startShift(g, kv, kTagKv);  // the next block travels while this one computes
    {
      TRAINSCOPE_RANGE(tracer::names::kCpAttention);
      const Block b = blockAt(s, r, P, T);
      const Pair& p = b.p;
      if (b.skipped(r, P, T, bias)) {
        if (next) kv = next->wait();
        continue;
      }
      at::Tensor qs = qf.narrow(kSeq, p.q0, p.qn);                             // (B, KV, G, Tq, HS)
      at::Tensor ks = kv[0].narrow(2, p.k0, p.kn).to(at::kFloat), vs = kv[1].narrow(2, p.k0, p.kn).to(at::kFloat);
      at::Tensor sc = scores(qs, ks, b, c);                                    // (B, KV, G, Tq, Tk)
      at::Tensor blk_lse = at::logsumexp(sc, -1);                              // (B, KV, G, Tq)
      // A row the window leaves without keys here (lse −inf) adds nothing: shift it by 0, not −inf.
      const at::Tensor shift = blk_lse.masked_fill(blk_lse.isneginf(), 0).unsqueeze(-1);
      at::Tensor blk_out = groupsOf(at::matmul(rowsOf(at::exp(sc - shift)), vs), G);  // (B, KV, G, Tq, HS)
      // Online softmax: rescale both parts to the merged normaliser.
      at::Tensor acc_out = out.narrow(kSeq, p.q0, p.qn), acc_lse = lse.narrow(kSeq, p.q0, p.qn);
      at::Tensor merged = at::logaddexp(acc_lse, blk_lse);
      acc_out.mul_(at::exp(acc_lse - merged).unsqueeze(-1)).add_(blk_out * at::exp(blk_lse - merged).unsqueeze(-1));
      acc_lse.copy_(merged);
    }
    if (next) kv = next->wait();
  }
  return {out, lse};
}

// One block pair's backward (flash-attention's recurrences, below): adds to dq (B, KV, G, T, HS) and
// to the block's dK/dV accumulator dkv (2, B, KV, T, HS). With a K/V head's G query heads as the rows
// of one GEMM, dK and dV come out summed over the group.
void blockBackward(const at::Tensor& qf, const at::Tensor& dout, const at::Tensor& D, const at::Tensor& lse,
                   const at::Tensor& kv, const Block& b, const ScoreContext& c, at::Tensor& dq, at::Tensor& dkv) {
  const Pair& p = b.p;
  const int64_t G = qf.size(2);
  const double scale = 1.0 / std::sqrt(double(qf.size(-1)));
  at::Tensor qs = qf.narrow(kSeq, p.q0, p.qn), dos = dout.narrow(kSeq, p.q0, p.qn);   // (B, KV, G, Tq, HS)
  at::Tensor ks = kv[0].narrow(2, p.k0, p.kn).to(at::kFloat), vs = kv[1].narrow(2, p.k0, p.kn).to(at::kFloat);
  at::Tensor prob = at::exp(scores(qs, ks, b, c) - lse.narrow(kSeq, p.q0, p.qn).unsqueeze(-1));  // (B, KV, G, Tq, Tk)
  const at::Tensor dO = rowsOf(dos);                                                    // (B, KV, G·Tq, HS)
  dkv[1].narrow(2, p.k0, p.kn).add_(at::matmul(rowsOf(prob).transpose(-2, -1), dO));    // dV (B, KV, Tk, HS)
  const at::Tensor dP = groupsOf(at::matmul(dO, vs.transpose(-2, -1)), G);              // (B, KV, G, Tq, Tk)
  const at::Tensor dS = rowsOf(prob.mul_(dP.sub_(D.narrow(kSeq, p.q0, p.qn).unsqueeze(-1))));  // (B, KV, G·Tq, Tk)
  dq.narrow(kSeq, p.q0, p.qn).add_(groupsOf(at::matmul(dS, ks), G), scale);
  dkv[0].narrow(2, p.k0, p.kn).add_(at::matmul(dS.transpose(-2, -1), rowsOf(qs)), scale);  // dK (B, KV, Tk, HS)
}

// Backward of the whole ring (flash-attention's recurrences per block pair, with the final lse):
//   P = exp(S − lse), dV = Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP − D), D = rowsum(dO ∘ O),
//   dQ = dS K / √HS, dK = dSᵀ Q / √HS.
// q, out, grad (B, KV, G, T, HS), lse (B, KV, G, T), k and v (B, KV, T, HS): returns dq, dk, dv.
variable_list ringBackward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                           const at::Tensor& lse, const at::Tensor& grad, Group& g, const cpu_ops::ScoreBias& bias) {
  const int P = g.size(), r = g.rank();
  const int64_t T = q.size(kSeq);
  at::Tensor qf = q.to(at::kFloat), dout = grad.to(at::kFloat);               // (B, KV, G, T, HS)
  at::Tensor D = (dout * out).sum(-1);                                         // (B, KV, G, T)
  at::Tensor dq = at::zeros_like(qf);
  at::Tensor kv = at::stack({k, v}).contiguous();                              // (2, B, KV, T, HS)
  std::optional<Shift> dkv_shift;  // the accumulator of the block held one step ago, on its way
  for (int s = 0; s < P; ++s) {
    std::optional<Shift> next;
    if (s + 1 < P) next = startShift(g, kv, kTagKv);
    at::Tensor dkv = at::zeros(kv.sizes(), qf.options());                     // (2, B, KV, T, HS)
    {
      TRAINSCOPE_RANGE(tracer::names::kCpAttention);
      const Block b = blockAt(s, r, P, T);
      if (!b.skipped(r, P, T, bias)) blockBackward(qf, dout, D, lse, kv, b, ScoreContext{r, P, T, bias}, dq, dkv);
    }
    if (dkv_shift) dkv.add_(dkv_shift->wait());  // what the ranks before us added to this block
    dkv_shift = startShift(g, dkv, kTagDkv);     // on to the next rank; after the last step, home
    if (next) kv = next->wait();
  }
  at::Tensor dkv = dkv_shift->wait();                                          // our own block's, complete
  return {dq.to(q.scalar_type()), dkv[0].to(k.scalar_type()), dkv[1].to(v.scalar_type())};
}

// q (B, NH, T, HS) as K/V heads' groups (B, KV, G, T, HS), G = NH/KV (a view).
at::Tensor grouped(const at::Tensor& q, int64_t kv_heads) { return q.unflatten(1, {kv_heads, q.size(1) / kv_heads}); }

// A CpContext travels through autograd's saved_data as an integer: it outlives every step.
struct RingAttention : torch::autograd::Function<RingAttention> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            int64_t cp, const cpu_ops::ScoreBias& bias) {
    Group& g = *reinterpret_cast<const CpContext*>(cp)->group;
    auto [out, lse] = ringForward(grouped(q, k.size(1)), k, v, g, bias);      // (B, KV, G, T, HS), (B, KV, G, T)
    ctx->saved_data["cp"] = cp;
    ctx->saved_data["window"] = bias.window;
    ctx->saved_data["slopes"] = bias.slopes;
    ctx->save_for_backward({q, k, v, out, lse});  // no T x T matrix is kept: flash-style
    return out.flatten(1, 2).to(q.scalar_type());                             // (B, NH, T, HS)
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    Group& g = *reinterpret_cast<const CpContext*>(ctx->saved_data["cp"].toInt())->group;
    const cpu_ops::ScoreBias bias{ctx->saved_data["window"].toInt(), ctx->saved_data["slopes"].toDoubleVector()};
    variable_list s = ctx->get_saved_variables();
    const int64_t kv_heads = s[1].size(1);
    variable_list d =
        ringBackward(grouped(s[0], kv_heads), s[1], s[2], s[3], s[4], grouped(grad[0], kv_heads), g, bias);
    return {d[0].flatten(1, 2), d[1], d[2], at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor ringAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const CpContext& cp,
                         const cpu_ops::ScoreBias& bias) {
  TORCH_CHECK(k.sizes() == v.sizes() && k.size(1) > 0 && q.size(1) % k.size(1) == 0,
              "ringAttention: k and v must be (B, KV, T, HS) with KV dividing q's heads, got q ", q.sizes(), ", k ",
              k.sizes(), ", v ", v.sizes());
  return RingAttention::apply(q, k, v, reinterpret_cast<int64_t>(&cp), bias);
}

at::Tensor contextParallelAttention(const at::Tensor& qkv, int64_t n_head, int64_t n_kv, const CpContext& cp,
                                   const cpu_ops::ScoreBias& bias) {
  if (n_kv <= 0) n_kv = n_head;
  const int64_t B = qkv.size(0), T = qkv.size(1), HS = qkv.size(2) / (n_head + 2 * n_kv), C = n_head * HS;
  auto parts = qkv.split_with_sizes({C, n_kv * HS, n_kv * HS}, /*dim=*/2);   // (B, T, h·HS), 2 x (B, T, kv·HS)
  at::Tensor q = parts[0].view({B, T, n_head, HS}).transpose(1, 2);       // (B, NH, T, HS)
  at::Tensor k = parts[1].view({B, T, n_kv, HS}).transpose(1, 2);         // (B, KV, T, HS)
  at::Tensor v = parts[2].view({B, T, n_kv, HS}).transpose(1, 2);         // (B, KV, T, HS)
  at::Tensor y = ringAttention(q.contiguous(), k.contiguous(), v.contiguous(), cp, bias);  // (B, NH, T, HS)
  return y.transpose(1, 2).reshape({B, T, C});                            // (B, T, C')
}

}  // namespace trainscope::runtime
