// moe.cpp — see moe.h; formulas and sources in docs/time-model.md and docs/memory-model.md.
#include "trainscope/models/moe.h"

#include <algorithm>
#include <cmath>

namespace trainscope::models {
namespace {

Op gemm(const char* name, double m, double n, double k, double batch, double saved) {
  Op o;
  o.name = name;
  o.kind = Op::Kind::Gemm;
  o.m = m, o.n = n, o.k = k, o.batch = batch, o.saved = saved;
  return o;
}
Op mem(const char* name, double bytes, double saved) {
  Op o;
  o.name = name;
  o.bytes = bytes, o.saved = saved;
  return o;
}

}  // namespace

MoeRouting moeRouting(const workloads::Workload& w, const Plan& p) {
  MoeRouting r;
  if (!w.isMoe()) return r;
  const double E = double(w.n_experts), k = double(w.top_k), ep = double(p.ep);
  r.tokens = double(p.mbs) * double(p.localSeq());
  r.assignments = k * r.tokens;
  // Switch Transformer (Fedus et al. 2021, §2.2): expert capacity = capacity factor × tokens·k / E,
  // counted per routing rank as Megatron-LM and the runtime do; an assignment past it is dropped.
  r.capacity = w.capacity_factor > 0 ? std::ceil(w.capacity_factor * r.assignments / E) : 0.0;
  r.kept = r.capacity > 0 ? std::min(r.assignments, E * r.capacity) : r.assignments;
  r.local_experts = E / ep;
  // The hottest rank's routed rows (docs/memory-model.md, "Routing load"): the plan's load, or the
  // expected hottest rank of random routing over the ep·N tokens of the EP group; under a capacity
  // each of its E/ep experts takes at most `capacity` rows from each of the ep routing ranks, E·c.
  if (p.ep > 1) {
    r.random_load = !(p.moe_load > 0);
    r.load = r.random_load ? moeRandomRoutingLoad(ep * r.tokens, k, E, ep) : p.moe_load;
  }
  r.received = r.load * r.kept;
  if (r.capacity > 0) r.received = std::min(r.received, E * r.capacity);
  r.per_expert = r.received / r.local_experts;
  return r;
}

double expectedMaxOfNormals(int64_t n) {
  if (n <= 1) return 0;
  // Trapezoids over [−9, 9] (the integrand is below 1e-17 outside), 3600 steps: exact to ~1e-9.
  const double lo = -9, hi = 9, h = (hi - lo) / 3600, nn = double(n);
  double sum = 0;
  for (int i = 0; i <= 3600; ++i) {
    const double x = lo + h * i;
    const double phi = std::exp(-0.5 * x * x) / std::sqrt(2 * 3.14159265358979323846), Phi = 0.5 * std::erfc(-x / std::sqrt(2.0));
    sum += (i == 0 || i == 3600 ? 0.5 : 1.0) * x * nn * phi * std::pow(Phi, nn - 1);
  }
  return sum * h;
}

double moeRandomRoutingLoad(double tokens, double top_k, double experts, double ep) {
  if (ep <= 1 || tokens <= 0 || top_k <= 0 || experts <= top_k) return 1;
  // e_ep for the EP degrees in use, once per degree and thread (the tuner prices many plans).
  thread_local std::vector<double> e;
  const size_t n = size_t(ep);
  if (e.size() <= n) {
    const size_t from = e.size();
    e.resize(n + 1);
    for (size_t i = from; i <= n; ++i) e[i] = expectedMaxOfNormals(int64_t(i));
  }
  const double load = 1 + e[n] * std::sqrt(ep * (experts - top_k) / (tokens * top_k * (experts - 1)));
  return std::min(load, ep * std::min(top_k, experts / ep) / top_k);
}

int64_t moeLayersOfStage(const workloads::Workload& w, const Plan& p, int64_t stage) {
  int64_t n = 0;
  for (int64_t l : layerIdsOfStage(w.n_layer, p.pp, stage, p.virtual_stages)) n += w.moeLayer(l) ? 1 : 0;
  return n;
}

// The runtime's moeForward (docs/architecture.md) in kernels. N tokens of C, E experts of width F,
// e bytes per element; the router runs in fp32.
void appendMoeMlp(std::vector<Op>& F, const workloads::Workload& w, const Plan& p, double e) {
  const MoeRouting r = moeRouting(w, p);
  const double N = r.tokens, C = double(w.n_embd), Fh = double(w.expertHidden()), E = double(w.n_experts);
  const double kN = r.assignments, M = r.kept, R = r.received;
  F.push_back(gemm("router", N, E, C, 1, N * C * e));  // keeps x for its weight gradient
  // softmax (N, E) fp32 and top-k: logits in, probs out, probs read again; logits and probs kept.
  F.push_back(mem("router softmax + top-k", 3.0 * N * E * 4.0, 2.0 * N * E * 4.0));
  // one-hot (kN, E) int64 and, with a capacity, its cumsum: written and read once each, freed.
  F.push_back(mem("routing one-hot + cumsum", (r.capacity > 0 ? 4.0 : 2.0) * kN * E * 8.0, 0));
  F.back().backward_bytes = 0;  // integer routing: no backward
  F.push_back(mem("dispatch gather x[token]", 2.0 * M * C * e, 0));
  // The regrouped rows are fc1's input: kept once, by fc1 (the all-to-all's output is not kept).
  if (p.ep > 1) F.push_back(mem("regroup received rows by expert", 2.0 * R * C * e, 0));
  // E/ep experts, each over ep·M/E rows: a batched GEMM of the realised per-expert batch.
  // SwiGLU experts (Mixtral): fc1 is [gate; up] (2F), then the SiLU-multiply (reads 2F, writes F;
  // eager autograd keeps gate, silu(gate), up), as the dense SwiGLU MLP (layer_ops.cpp).
  const bool swiglu = w.mlp == workloads::Mlp::SwiGLU;
  const double F1 = swiglu ? 2.0 * Fh : Fh;
  F.push_back(gemm("expert fc1", r.per_expert, F1, C, r.local_experts, R * C * e));
  if (swiglu) F.push_back(mem("expert silu-multiply", 3.0 * R * Fh * e, 3.0 * R * Fh * e));
  else F.push_back(mem("expert bias-gelu", 2.0 * R * Fh * e, R * Fh * e));
  F.push_back(gemm("expert fc2", r.per_expert, C, Fh, r.local_experts, R * Fh * e));
  // gate multiply (keeps the expert outputs and gates) and index_add into (N, C).
  F.push_back(mem("combine gate + index_add", 2.0 * M * C * e + 2.0 * N * C * e, M * C * e));
  if (w.shared_expert) {  // at its own width Fs (Qwen2-MoE's shared_expert_intermediate_size)
    const double Fs = double(w.sharedExpertHidden()), Fs1 = swiglu ? 2.0 * Fs : Fs;
    F.push_back(gemm("shared fc1", N, Fs1, C, 1, 0));  // its input is the router's, kept once
    if (swiglu) F.push_back(mem("shared silu-multiply", 3.0 * N * Fs * e, 3.0 * N * Fs * e));
    else F.push_back(mem("shared bias-gelu", 2.0 * N * Fs * e, N * Fs * e));
    F.push_back(gemm("shared fc2", N, C, Fs, 1, N * Fs * e));
    if (w.shared_expert_gate) {
      // Qwen2-MoE: sigmoid(x·g) (N, 1) times the shared output, added to the routed one. The GEMV
      // reads x (kept by the router); the multiply keeps the shared output and the gate.
      F.push_back(gemm("shared gate", N, 1, C, 1, 0));
      F.push_back(mem("shared sigmoid-gate multiply", 3.0 * N * C * e, N * C * e + N * e));
    }
  }
}

double moeAllToAllBytes(const workloads::Workload& w, const Plan& p) {
  if (p.ep <= 1 || !w.isMoe()) return 0;
  const MoeRouting r = moeRouting(w, p);
  return std::max(r.kept, r.received) * double(w.n_embd) * double(p.elementBytes());
}

double moeAllToAllSeconds(const NetworkTier& tier, double bytes, double ep) {
  if (ep <= 1 || bytes <= 0) return 0;
  double busbw = tier.bandwidth * tier.efficiency;
  if (tier.half_bytes > 0) busbw *= bytes / (bytes + tier.half_bytes);
  // ep − 1 pairwise exchanges, (ep − 1)/ep of the rows leave the rank.
  return tier.latency * (ep - 1.0) + bytes * (ep - 1.0) / ep / std::max(busbw, 1.0);
}

double moeCpuExtraForwardSeconds(const workloads::Workload& w, const Plan& p, const Cluster& c, double peak) {
  if (!w.isMoe()) return 0;
  const MoeRouting r = moeRouting(w, p);
  const double C = double(w.n_embd), Fh = double(w.expertHidden()), E = double(w.n_experts), t = double(p.tp);
  auto gemm = [&](double m, double n, double k) {
    const double f = 2.0 * m * n * k;
    return f > 0 ? f / (peak * c.matmulEfficiency(f)) : 0.0;
  };
  const double F1 = w.mlp == workloads::Mlp::SwiGLU ? 2.0 * Fh : Fh, Fd = double(w.ffnHidden()) / t;
  double s = gemm(r.tokens, E, C) + r.local_experts * (gemm(r.per_expert, F1, C) + gemm(r.per_expert, C, Fh));
  const double Fs = double(w.sharedExpertHidden()), Fs1 = w.mlp == workloads::Mlp::SwiGLU ? 2.0 * Fs : Fs;
  if (w.shared_expert) s += gemm(r.tokens, Fs1, C) + gemm(r.tokens, C, Fs) + (w.shared_expert_gate ? gemm(r.tokens, 1, C) : 0.0);
  // less the dense MLP's GEMMs the layer list priced in its place
  return s - (gemm(r.tokens, (w.mlp == workloads::Mlp::SwiGLU ? 2.0 : 1.0) * Fd, C) + gemm(r.tokens, C, Fd));
}

const NetworkTier& moeTier(const Plan& p, const Cluster& c) {
  return p.tp * p.cp * p.ep <= c.devices_per_node ? c.intra_node : c.inter_node;
}

// One expert's parameters: C·F + F + F·C + C (GELU, biases), 3·C·F for SwiGLU without biases (Mixtral).
static double expertParameters(const workloads::Workload& w) {
  const double C = double(w.n_embd), F = double(w.expertHidden());
  const double mats = w.mlp == workloads::Mlp::SwiGLU ? 3.0 : 2.0;
  return mats * C * F + (w.mlp_bias ? (mats - 1.0) * F + C : 0.0);
}

double moeExpertParameters(const workloads::Workload& w) {
  if (!w.isMoe()) return 0;
  int64_t layers = 0;
  for (int64_t l = 0; l < w.n_layer; ++l) layers += w.moeLayer(l) ? 1 : 0;
  return double(layers) * double(w.n_experts) * expertParameters(w);
}

double moeStageExpertParameters(const workloads::Workload& w, const Plan& p, int64_t stage) {
  if (!w.isMoe()) return 0;
  return double(moeLayersOfStage(w, p, stage)) * double(w.n_experts / std::max<int64_t>(1, p.ep)) * expertParameters(w);
}

double moeCountsAllGatherSeconds(const NetworkTier& tier, const workloads::Workload& w, double ep) {
  if (ep <= 1 || !w.isMoe()) return 0;
  // Ring all-gather: ep − 1 steps, each one rank's E·8 bytes (nccl-tests' busbw factor (ep−1)/ep).
  const double bytes = ep * double(w.n_experts) * 8.0;
  return tier.latency * (ep - 1.0) + bytes * (ep - 1.0) / ep / std::max(tier.bandwidth * tier.efficiency, 1.0);
}

// (Until the runtime's 1682e36 it indexed expert by expert and SelectBackward's zero-filled stacks
// were summed instead; measured both ways: docs/memory-model.md, "Mixture of experts".)
double moeExpertGradientBuffers(const workloads::Workload& w, const Plan& p) {
  const double F = double(w.expertHidden()), F2 = w.mlp == workloads::Mlp::SwiGLU ? 2.0 * F : F;
  const double per = double(w.n_experts / std::max<int64_t>(1, p.ep)) * double(w.n_embd) * double(p.elementBytes());
  return per * std::max(F2 + 2.0 * F, 2.0 * F2);
}

double moeExpertChainSaved(const workloads::Workload& w, const Plan& p) {
  const MoeRouting r = moeRouting(w, p);
  const double C = double(w.n_embd), F = double(w.expertHidden()), e = double(p.elementBytes());
  const double activation = w.mlp == workloads::Mlp::SwiGLU ? 3.0 : 1.0;  // appendMoeMlp's silu-multiply / gelu
  return r.received * C * e + (activation + 1.0) * r.received * F * e + r.kept * C * e;
}

double moeRecomputedCombineBytes(const workloads::Workload& w, const Plan& p) {
  if (!w.isMoe()) return 0;
  const MoeRouting r = moeRouting(w, p);
  const double C = double(w.n_embd), e = double(p.elementBytes());
  const double combine = 2.0 * r.tokens * C * e + 3.0 * r.kept * C * e;
  if (p.ep <= 1) return combine;
  // ep > 1: the rebuilt forward's return all-to-all, with the block's incoming gradient dY beside it.
  return std::max(combine, r.tokens * C * e + moeDispatchBytes(w, p));
}

// The return all-to-all (dispatchAndRun's last line), its output the experts' outputs M·C·e (kept,
// in the layer's list): moeForward's dispatched rows xs (M·C·e), dispatchAndRun's locals got, y and
// back (3·R·C·e), and the routing's int64 one-hot kN·E (with its cumsum under a capacity) and
// assignment lists (expert, token, kept, sorted, token of kept: 5·kN).
double moeDispatchBytes(const workloads::Workload& w, const Plan& p) {
  if (!w.isMoe() || p.ep <= 1) return 0;
  const MoeRouting r = moeRouting(w, p);
  const double C = double(w.n_embd), e = double(p.elementBytes());
  const double routing = 8.0 * r.assignments * (double(w.n_experts) * (r.capacity > 0 ? 2.0 : 1.0) + 5.0);
  return r.kept * C * e + 3.0 * r.received * C * e + routing;
}

std::vector<std::vector<int64_t>> moeMlpShapes(const workloads::Workload& w, const Plan& p) {
  const int64_t C = w.n_embd, Fh = w.expertHidden(), El = w.n_experts / std::max<int64_t>(1, p.ep);
  // SwiGLU experts: c_fc holds [gate; up], 2F rows (the runtime's layout, docs/architecture.md).
  const bool swiglu = w.mlp == workloads::Mlp::SwiGLU, bias = w.mlp_bias;
  const int64_t F2 = swiglu ? 2 * Fh : Fh;
  // Biases only where the workload has them (mlp_bias: the runtime's initMoe and parameterTensors;
  // Mixtral and Qwen-MoE have none), each after its weight.
  std::vector<std::vector<int64_t>> s = {{w.n_experts, C}, {El, F2, C}};
  if (bias) s.push_back({El, F2});
  s.push_back({El, C, Fh});
  if (bias) s.push_back({El, C});
  const int64_t Fs = w.sharedExpertHidden(), Fs2 = swiglu ? 2 * Fs : Fs;  // the shared expert's own width
  if (w.shared_expert) {
    s.push_back({Fs2, C});
    if (bias) s.push_back({Fs2});
    s.push_back({C, Fs});
    if (bias) s.push_back({C});
  }
  if (w.shared_expert && w.shared_expert_gate) s.push_back({1, C});  // Qwen2-MoE's sigmoid gate
  return s;
}

}  // namespace trainscope::models
