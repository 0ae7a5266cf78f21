// context_parallel.cpp — ring attention over the cp group (see context_parallel.h).
//
// Shapes: B batch, NH heads on this TP rank, T local tokens (= 2c, the rank's two chunks), HS head
// size. Block compute is in fp32 whatever the compute dtype (the merge by log-sum-exp needs it);
// K/V blocks travel in the compute dtype, the dK/dV accumulators in fp32.
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

// Scaled scores of the pair (B, NH, Tq, Tk) fp32: causal within the own block; with a window or
// ALiBi, scoreBias at the global positions of both ranges (which includes causality).
at::Tensor scores(const at::Tensor& q, const at::Tensor& k, const Block& b, int rank, int P, int64_t T,
                  const cpu_ops::ScoreBias& bias) {
  const double scale = 1.0 / std::sqrt(double(q.size(-1)));
  at::Tensor s = at::matmul(q, k.transpose(-2, -1)).mul_(scale);          // (B, NH, Tq, Tk)
  if (bias.any()) {
    const at::Tensor qpos = positionsOf(rank, P, T, b.p.q0, b.p.qn, q.device());
    const at::Tensor kpos = positionsOf(b.src, P, T, b.p.k0, b.p.kn, q.device());
    s.add_(scoreBias(qpos, kpos, bias, at::kFloat));                     // (NH | 1, Tq, Tk) broadcast
  } else if (b.p.causal) {
    at::Tensor future = at::ones({s.size(-2), s.size(-1)}, q.options().dtype(at::kBool)).triu_(1);
    s.masked_fill_(future, -std::numeric_limits<float>::infinity());
  }
  return s;
}

// Forward of the whole ring: out (B, NH, T, HS) and lse (B, NH, T), both fp32.
std::pair<at::Tensor, at::Tensor> ringForward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                              Group& g, const cpu_ops::ScoreBias& bias) {
  const int P = g.size(), r = g.rank();
  const int64_t T = q.size(2);
  at::Tensor qf = q.to(at::kFloat);
  at::Tensor out = at::zeros_like(qf);                                         // (B, NH, T, HS)
  at::Tensor lse = at::full(qf.sizes().slice(0, 3), -std::numeric_limits<float>::infinity(), qf.options());
  at::Tensor kv = at::stack({k, v}).contiguous();                              // (2, B, NH, T, HS)
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
      at::Tensor qs = qf.narrow(2, p.q0, p.qn);
      at::Tensor ks = kv[0].narrow(2, p.k0, p.kn).to(at::kFloat), vs = kv[1].narrow(2, p.k0, p.kn).to(at::kFloat);
      at::Tensor sc = scores(qs, ks, b, r, P, T, bias);                        // (B, NH, Tq, Tk)
      at::Tensor blk_lse = at::logsumexp(sc, -1);                              // (B, NH, Tq)
      // A row the window leaves without keys here (lse −inf) adds nothing: shift it by 0, not −inf.
      const at::Tensor shift = blk_lse.masked_fill(blk_lse.isneginf(), 0).unsqueeze(-1);
      at::Tensor blk_out = at::matmul(at::exp(sc - shift), vs);                 // (B, NH, Tq, HS)
      // Online softmax: rescale both parts to the merged normaliser.
      at::Tensor acc_out = out.narrow(2, p.q0, p.qn), acc_lse = lse.narrow(2, p.q0, p.qn);
      at::Tensor merged = at::logaddexp(acc_lse, blk_lse);
      acc_out.mul_(at::exp(acc_lse - merged).unsqueeze(-1)).add_(blk_out * at::exp(blk_lse - merged).unsqueeze(-1));
      acc_lse.copy_(merged);
    }
    if (next) kv = next->wait();
  }
  return {out, lse};
}

// Where a block's scores are taken: this rank, the ring's size, the local length, the bias.
struct ScoreContext {
  int rank, P;
  int64_t T;
  const cpu_ops::ScoreBias& bias;
};

// One block pair's backward (flash-attention's recurrences, below): adds to dq and to the block's
// dK/dV accumulator dkv (2, B, NH, T, HS).
void blockBackward(const at::Tensor& qf, const at::Tensor& dout, const at::Tensor& D, const at::Tensor& lse,
                   const at::Tensor& kv, const Block& b, const ScoreContext& c, at::Tensor& dq, at::Tensor& dkv) {
  const Pair& p = b.p;
  const double scale = 1.0 / std::sqrt(double(qf.size(-1)));
  at::Tensor qs = qf.narrow(2, p.q0, p.qn), dos = dout.narrow(2, p.q0, p.qn);
  at::Tensor ks = kv[0].narrow(2, p.k0, p.kn).to(at::kFloat), vs = kv[1].narrow(2, p.k0, p.kn).to(at::kFloat);
  at::Tensor prob = at::exp(scores(qs, ks, b, c.rank, c.P, c.T, c.bias) - lse.narrow(2, p.q0, p.qn).unsqueeze(-1));
  dkv[1].narrow(2, p.k0, p.kn).add_(at::matmul(prob.transpose(-2, -1), dos));                         // dV
  at::Tensor ds = prob.mul_(at::matmul(dos, vs.transpose(-2, -1)).sub_(D.narrow(2, p.q0, p.qn).unsqueeze(-1)));
  dq.narrow(2, p.q0, p.qn).add_(at::matmul(ds, ks), scale);
  dkv[0].narrow(2, p.k0, p.kn).add_(at::matmul(ds.transpose(-2, -1), qs), scale);                      // dK
}

// Backward of the whole ring (flash-attention's recurrences per block pair, with the final lse):
//   P = exp(S − lse), dV = Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP − D), D = rowsum(dO ∘ O),
//   dQ = dS K / √HS, dK = dSᵀ Q / √HS.
variable_list ringBackward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                           const at::Tensor& lse, const at::Tensor& grad, Group& g, const cpu_ops::ScoreBias& bias) {
  const int P = g.size(), r = g.rank();
  const int64_t T = q.size(2);
  at::Tensor qf = q.to(at::kFloat), dout = grad.to(at::kFloat);               // (B, NH, T, HS)
  at::Tensor D = (dout * out).sum(-1);                                         // (B, NH, T)
  at::Tensor dq = at::zeros_like(qf);
  at::Tensor kv = at::stack({k, v}).contiguous();                              // (2, B, NH, T, HS)
  std::optional<Shift> dkv_shift;  // the accumulator of the block held one step ago, on its way
  for (int s = 0; s < P; ++s) {
    std::optional<Shift> next;
    if (s + 1 < P) next = startShift(g, kv, kTagKv);
    at::Tensor dkv = at::zeros(kv.sizes(), qf.options());                     // (2, B, NH, T, HS)
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

// A CpContext travels through autograd's saved_data as an integer: it outlives every step.
struct RingAttention : torch::autograd::Function<RingAttention> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            int64_t cp, const cpu_ops::ScoreBias& bias) {
    Group& g = *reinterpret_cast<const CpContext*>(cp)->group;
    auto [out, lse] = ringForward(q, k, v, g, bias);
    ctx->saved_data["cp"] = cp;
    ctx->saved_data["window"] = bias.window;
    ctx->saved_data["slopes"] = bias.slopes;
    ctx->save_for_backward({q, k, v, out, lse});  // no T x T matrix is kept: flash-style
    return out.to(q.scalar_type());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    Group& g = *reinterpret_cast<const CpContext*>(ctx->saved_data["cp"].toInt())->group;
    const cpu_ops::ScoreBias bias{ctx->saved_data["window"].toInt(), ctx->saved_data["slopes"].toDoubleVector()};
    variable_list s = ctx->get_saved_variables();
    variable_list d = ringBackward(s[0], s[1], s[2], s[3], s[4], grad[0], g, bias);
    return {d[0], d[1], d[2], at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor ringAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const CpContext& cp,
                         const cpu_ops::ScoreBias& bias) {
  return RingAttention::apply(q, k, v, reinterpret_cast<int64_t>(&cp), bias);
}

at::Tensor contextParallelAttention(const at::Tensor& qkv, int64_t n_head, const CpContext& cp,
                                   const cpu_ops::ScoreBias& bias) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, HS = C / n_head;
  auto parts = qkv.split(C, /*dim=*/2);                                   // 3 x (B, T, C')
  at::Tensor q = parts[0].view({B, T, n_head, HS}).transpose(1, 2);       // (B, NH, T, HS)
  at::Tensor k = parts[1].view({B, T, n_head, HS}).transpose(1, 2);       // (B, NH, T, HS)
  at::Tensor v = parts[2].view({B, T, n_head, HS}).transpose(1, 2);       // (B, NH, T, HS)
  at::Tensor y = ringAttention(q.contiguous(), k.contiguous(), v.contiguous(), cp, bias);  // (B, NH, T, HS)
  return y.transpose(1, 2).reshape({B, T, C});                            // (B, T, C')
}

}  // namespace trainscope::runtime
