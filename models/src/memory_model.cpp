// memory_model.cpp — see memory_model.h; formulas and their sources in docs/tuner.md.
#include "trainscope/models/memory_model.h"

#include <algorithm>
#include <cmath>

#include "trainscope/models/layer_ops.h"
#include "trainscope/workloads/memory.h"

namespace trainscope::models {
namespace {

using runtime::Checkpointing;
using runtime::PipelineSchedule;

// Calibrated on the CPU search space (tests/runtime/tuner_test.cpp): the gradients that flow
// between ops during backward and the fresh parameter gradients before they are accumulated, in
// units of one micro-batch's s·b·h activation and of the stage's largest weight.
constexpr double kTransientActivations = 6.0;  // × s·b·h elements
constexpr double kTransientWeights = 1.0;      // × the largest tensor's elements

workloads::OptimizerState stateOf(runtime::OptimizerKind k) {
  switch (k) {
    case runtime::OptimizerKind::AdamW: return workloads::OptimizerState::AdamW;
    case runtime::OptimizerKind::Adafactor: return workloads::OptimizerState::Adafactor;
    case runtime::OptimizerKind::Adam8bit: return workloads::OptimizerState::Adam8bit;
    case runtime::OptimizerKind::SGD: return workloads::OptimizerState::SGD;
  }
  return workloads::OptimizerState::AdamW;
}

// The tensors a (tp, pp) rank of stage `s` holds, with their sharded shapes (runtime's shardGpt).
std::vector<workloads::ParamTensor> stageTensors(const workloads::Workload& w, const Plan& p, int64_t s,
                                                 bool* has_tied) {
  const int64_t h = w.n_embd, t = p.tp, Vp = (w.vocab_size + t - 1) / t * t;
  std::vector<workloads::ParamTensor> out;
  *has_tied = false;
  if (s == 0) {
    out.push_back({"wte", {Vp / t, h}});
    out.push_back({"wpe", {w.n_positions, h}});
  }
  for (int64_t l = 0; l < layersOfStage(w.n_layer, p.pp, s); ++l) {
    for (auto shape : std::vector<std::vector<int64_t>>{{h}, {h}, {3 * h / t, h}, {3 * h / t}, {h, h / t}, {h}, {h}, {h},
                                                        {4 * h / t, h}, {4 * h / t}, {h, 4 * h / t}, {h}})
      out.push_back({"layer", shape});
  }
  if (s == p.pp - 1) {
    out.push_back({"ln_f.weight", {h}});
    out.push_back({"ln_f.bias", {h}});
    if (p.pp > 1) out.push_back({"wte", {Vp / t, h}});  // the tied copy on the last stage
  }
  *has_tied = p.pp > 1 && (s == 0 || s == p.pp - 1);
  return out;
}

}  // namespace

double megatronLayerActivationBytes(double s, double b, double h, double a, double t, bool sp, Checkpointing ckpt) {
  const double sbh = s * b * h, score = 5.0 * a * s / (h * t);
  switch (ckpt) {
    case Checkpointing::Full: return sp ? 2 * sbh / t : 2 * sbh;
    case Checkpointing::Selective: return sp ? 34 * sbh / t : sbh * (10 + 24 / t);
    case Checkpointing::None: break;
  }
  return sp ? sbh * (34 / t + score) : sbh * (10 + 24 / t + score);
}

MemoryPrediction predictMemory(const workloads::Workload& w, const Plan& p) {
  MemoryPrediction m;
  const int64_t e = p.elementBytes(), M = p.ga(), h = w.n_embd, t = p.tp;
  const int64_t Vp = (w.vocab_size + t - 1) / t * t;
  const double s = double(p.seq), b = double(p.mbs), sbh = s * b * double(h);
  const double s_local = p.sequence_parallel ? s / double(t) : s;
  const auto state = stateOf(p.optimizer);
  // Per-layer activations from the op list: this runtime's layer under the plan's checkpointing (and
  // without any, for the layer a full recomputation rebuilds), and Megatron-LM's with 16-bit
  // activations, as Korthikanti et al. count them (megatronLayerActivationBytes, their closed form,
  // is what the list reproduces).
  Plan whole = p, sixteen = p;
  whole.ckpt = Checkpointing::None;
  if (!sixteen.mixed()) sixteen.precision = runtime::Precision::BF16;
  const LayerOps runtime_layer = layerOps(w, p, Framework::Trainscope);
  const LayerOps runtime_whole = layerOps(w, whole, Framework::Trainscope);
  const LayerOps megatron_layer = layerOps(w, sixteen, Framework::Megatron);
  for (int64_t st = 0; st < p.pp; ++st) {
    StageMemory sm;
    sm.stage = st;
    sm.layers = layersOfStage(w.n_layer, p.pp, st);
    bool tied = false;
    const auto tensors = stageTensors(w, p, st, &tied);
    int64_t n = 0, largest = 0;
    for (const auto& x : tensors) {
      n += x.numel();
      largest = std::max(largest, x.numel());
    }
    const int64_t per_param = p.mixed() ? 6 : 4;  // fp32 (master) + the low-precision copy
    sm.params = per_param * n;
    sm.grads = per_param * n;
    sm.micro_batches = M;
    if (p.cpu_lanes > 1) {
      // Each lane's gradients (autograd's, fp32) live from its first backward to their sum; as the
      // lanes finish backward together, each holds the embedding's fresh dense gradient and the
      // head's dW (two of the largest tensor) before they are accumulated, and with more micro-
      // batches the head's saved dW of the next one as well.
      sm.lane_grads = p.cpu_lanes * 4 * n;
      sm.lane_fresh = p.cpu_lanes * 4 * largest * (M > 1 ? 3 : 2);
    }
    if (runtime::shardsOptimizer(p.zero) && p.dp > 1) {
      // ZeRO-1 as grad_sync.cpp partitions: whole tensors, largest first, onto the least-loaded rank
      // (the tied embedding under PP stays outside, its state on every rank).
      std::vector<const workloads::ParamTensor*> order;
      int64_t outside_state = 0;
      for (size_t i = 0; i < tensors.size(); ++i) {
        if (tied && tensors[i].name == "wte") {
          outside_state += workloads::optimizerStateBytes(tensors[i], state, false, 256);
          continue;
        }
        order.push_back(&tensors[i]);
      }
      std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->numel() > b->numel(); });
      std::vector<int64_t> load(size_t(p.dp), 0), bytes(size_t(p.dp), 0);
      int64_t partitioned = 0;
      for (const auto* x : order) {
        const size_t r = size_t(std::min_element(load.begin(), load.end()) - load.begin());
        load[r] += x->numel();
        bytes[r] += workloads::optimizerStateBytes(*x, state, false, 256);
        partitioned += x->numel();
      }
      const size_t worst = size_t(std::max_element(load.begin(), load.end()) - load.begin());
      sm.optimizer = bytes[worst] + outside_state;
      sm.buffers += 2 * 4 * (p.dp * load[worst] - partitioned);  // flat master and grad buffers: d·S elements
      // The step's reduce-scatter output and all-gather input (S elements each, one at a time); Gloo
      // (CPU) reduce-scatters through an all-reduce of a copy of the whole flat buffer (d·S).
      sm.sync = 4 * load[worst] * (p.cpu ? p.dp + 1 : 1);
    } else {
      for (const auto& x : tensors) sm.optimizer += workloads::optimizerStateBytes(x, state, false, 256);
    }
    // Micro-batches whose activations the stage holds at once.
    int64_t inflight = 1;
    if (p.pp > 1)
      inflight = p.schedule == PipelineSchedule::GPipe ? M : std::min<int64_t>(p.pp - st, M);
    double interleave = 1.0;
    if (p.virtual_stages > 1 && st == 0)
      interleave = 1.0 + double(p.pp - 1) / double(p.pp * p.virtual_stages);
    sm.inflight = inflight;
    // What one layer keeps for its backward: the op list's `saved` (layer_ops.h), the same list the
    // time model prices — this runtime's kernels (fused attention, no dropout; docs/memory-model.md).
    const double per_layer = runtime_layer.saved;
    double act = per_layer * double(sm.layers) * double(inflight) * interleave;
    act += 2.0 * 8.0 * s * b * double(inflight);  // the micro-batch's int64 inputs and targets
    sm.activations = int64_t(act);
    if (p.ckpt == Checkpointing::Full)  // one layer's activations live while it is recomputed (16-bit ones)
      sm.recompute = int64_t(runtime_whole.saved - runtime_whole.saved_fp32);
    if (st == p.pp - 1) {
      // dX for the rows, dW per lane (each core lane runs its own head on its rows).
      const int64_t head_inflight = p.pp > 1 && p.schedule == PipelineSchedule::GPipe ? M : 1;
      const double lanes = double(std::max<int64_t>(1, p.cpu_lanes));
      const double dx_dw = 4.0 * s * b * double(h) + lanes * 4.0 * double(Vp / t) * double(h);
      const double rows = lanes * std::min(s * b / lanes, std::max(128.0, double(8 << 20) / (4.0 * double(Vp / t))));
      sm.head = int64_t(dx_dw * double(head_inflight));
      // One chunk of fp32 logits; the general path (TP, 16-bit or GPU) also holds a same-sized
      // temporary (logsumexp's, or exp(logits − max) under TP), and 16-bit the logits before the cast.
      const bool one_pass = p.cpu && t == 1 && !p.mixed();
      sm.head_chunk = int64_t(rows * double(Vp / t) * (one_pass ? 4.0 : p.mixed() ? 10.0 : 8.0));
    }
    if (p.pp > 1) {  // sends keep their tensors until the schedule ends
      const double one = b * s_local * double(h) * double(e);
      sm.buffers += int64_t(one * double(M) * ((st < p.pp - 1) + (st > 0)));
    }
    // The fresh dense gradient of the embedding, made while its tied head's gradient is already in
    // .grad, is added to it: a second largest-sized tensor during backward. A pipeline stage holds
    // one end of the tie only, and autograd steals a fresh gradient into an empty .grad (the first
    // micro-batch) or adds it when that stage's activations are already freed (the embedding's
    // backward ends the stage's), so under PP it does not raise the layer-backward moment.
    const double fresh_weight = p.pp == 1 ? kTransientWeights * double(largest) : 0.0;
    sm.allowance = int64_t(kTransientActivations * sbh * double(e) / (p.sequence_parallel ? double(t) : 1.0) +
                           fresh_weight * double(e) * double(std::max<int64_t>(1, p.cpu_lanes)));
    // Megatron-LM on the same plan (Korthikanti et al. 2022): 16-bit activations.
    const double mega_inflight = p.pp == 1 ? 1.0
                                 : p.schedule == PipelineSchedule::GPipe ? double(M)
                                                                         : double(std::min<int64_t>(p.pp - st, M));
    double mega = megatron_layer.saved * double(sm.layers) * mega_inflight * interleave;
    if (st == p.pp - 1) mega += 4.0 * s * b * double(w.vocab_size) / double(t);  // fp32 logits
    sm.megatron_activations = int64_t(mega);
    m.stages.push_back(sm);
  }
  for (size_t i = 0; i < m.stages.size(); ++i)
    if (m.stages[i].total() > m.stages[size_t(m.worst_stage)].total()) m.worst_stage = int64_t(i);
  return m;
}

bool figuresCountable(const workloads::Workload& w, long double sequences, int64_t seq, int64_t devices) {
  const long double s = seq, h = w.n_embd, L = w.n_layer, V = w.vocab_size, a = w.n_head;
  const long double per_token = L * (64 * h + 8 * a * s) + 32 * (h + V) + 64;
  const long double params = (V + w.n_positions + 13 * L * h) * h;
  const long double bound = 4 * sequences * s * per_token + 64 * params * ((long double)devices + 2) + 16 * V * h * s;
  return bound < std::ldexp(1.0L, 60);
}

}  // namespace trainscope::models
