// trainer_impl.h — Trainer::Impl, the training step's state and its per-step work (internal; only
// trainer.cpp, the constructor and step(), and trainer_state.cpp, the state and checkpoint
// accessors, include it). See trainer.h for the recipe.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cpu/cpu_kernels.h"
#include "parallel/data_parallel.h"
#include "train/lane_grads.h"
#include "cpu/lanes.h"
#include "optim/loss_scaler.h"
#include "optim/partitioned.h"
#include "train/experts.h"
#include "train/sources.h"
#include "parallel/pipeline.h"
#include "model/tensor_parallel.h"
#include "model/context_parallel.h"
#include "model/fp8.h"
#include "trainscope/common/error.h"
#include "trainscope/runtime/data.h"
#include "trainscope/runtime/gpt.h"
#include "trainscope/runtime/memory.h"
#include "trainscope/runtime/optim.h"
#include "trainscope/runtime/trainer.h"
#include "trainscope/tracer/range.h"

namespace trainscope::runtime {
namespace names = tracer::names;

// Allocated bytes as a counter in the trace (when a memory source runs: ranges level and above).
inline void memoryCounter(const MemoryMeter& m) { MemorySource::sample(m.currentBytes()); }

inline int64_t bytesOf(const std::vector<at::Tensor>& ts) {
  int64_t b = 0;
  for (const auto& t : ts) b += t.nbytes();
  return b;
}

struct Trainer::Impl {
  TrainConfig cfg;
  DeviceChoice dev;
  at::Device device{at::kCPU};
  at::ScalarType compute_dtype = at::kFloat;
  std::unique_ptr<TokenSource> data;
  std::unique_ptr<MemoryMeter> memory;
  std::unique_ptr<Comm> own_comm;  // when the caller gave none
  Comm* comm = nullptr;
  Layout layout;
  StageSpec stage;
  BlockContext tp;  // what every block receives: TP, and CP / MoE when they run
  CpContext cp;     // tp.cp points here when cp > 1
  std::vector<ParamInfo> info;
  std::unique_ptr<Experts> experts;    // MoE: expert gradients, load (train/experts.h)
  fp8::Recipe fp8;                     // --precision fp8: the block linears' scaling (model/fp8.h)
  std::vector<rundb::Fp8Scale> fp8_rows;  // the last step's, until takeFp8Scales()

  std::vector<at::Tensor> master;      // fp32 weights (the optimizer's)
  std::vector<at::Tensor> compute;     // weights forward/backward use: `master` in fp32, else copies
  GptWeights compute_weights;
  std::vector<GptWeights> chunk_weights;  // compute_weights by model chunk (one unless interleaved 1F1B)
  std::unique_ptr<DataParallel> dp;    // gradients over DP x CP, ZeRO 0-3 (makeDataParallel picks the class)
  std::unique_ptr<Optimizer> optimizer;
  int wte_index = -1;                  // tied embedding under pipeline parallelism (reduced by hand)
  // GQA with tp > n_kv_head: c_attn's K/V rows (the last elements of the flattened weight and bias)
  // are replicas of another TP rank's; per tensor, how many leading elements the gradient norm counts
  // here (−1: all).
  std::vector<int64_t> replica_keep;
  LossScaler scaler;
  // Core lanes (CPU): lane k trains on leaves that share the weights' storage but collect their own
  // gradients, which autograd allocates (no zeroing); the main gradients are their sum in lane order.
  std::unique_ptr<CoreLanes> lanes;
  std::vector<GptWeights> lane_weights;
  std::vector<std::vector<at::Tensor>> lane_leaves;
  std::optional<double> lane_sq;  // Σ g² over the summed gradients, when sumLaneGradients had it
  // How a step's micro-batches run, chosen once: one after the other, split over the core lanes,
  // or through the pipeline schedule (GPipe / 1F1B).
  enum class Schedule { Plain, Lanes, Pipeline } schedule = Schedule::Plain;
  int64_t step = 0;
  bool inject_overflow = false;

  bool lowPrecision() const { return compute_dtype != at::kFloat; }
  std::vector<at::Tensor>& grads() { return dp->mainGrads(); }
  const std::vector<DataParallel::Shard>& shards() const { return dp->shards(); }

  // Forward + backward over this rank's share of step k's global batch; reduces gradients over DP
  // (and the tied embedding over its two stages). Grads are still multiplied by the loss scale.
  // Returns the mean loss over the global batch and the activation peak above the step's baseline.
  std::pair<double, int64_t> forwardBackward(int64_t k) {
    fp8::Scope fp8_scope(&fp8);  // the block linears run in FP8 when any are registered
    if (!lanes) dp->zeroGrads();  // lanes overwrite the main gradients
    const int64_t baseline = memory->currentBytes();
    memory->resetPeak();
    const int64_t M = cfg.ga_steps;
    // DP rank d reads samples [k*gbs + d*gbs/DP, ...): any DP degree sees the same global batch.
    const int64_t first_sample = k * cfg.global_batch + layout.dp_rank * (cfg.global_batch / layout.dp);
    // Under context parallelism every CP rank of a DP replica reads the same samples and keeps its
    // two chunks of each sequence: (mbs, T/CP).
    auto batch = [&](int64_t m) {
      return contextShard(data->samples(first_sample + m * cfg.mbs, cfg.mbs, device), layout.cp, layout.cp_rank);
    };  // (mbs, T/CP)
    auto forward = [&](const at::Tensor& input, const at::Tensor& targets) {
      TRAINSCOPE_RANGE(names::kForward);
      at::Tensor out =
          stageForward(compute_weights, stage, tp, cfg.model.n_head, input, targets, cfg.ckpt, dp->layerHooks());
      memoryCounter(*memory);
      return out;
    };
    const double loss_scale = scaler.scale / double(M);
    experts->beginStep(loss_scale);  // MoE aux/z losses enter backward scaled alike
    at::Tensor loss_sum;
    switch (schedule) {  // chosen once, in the constructor
      case Schedule::Plain: loss_sum = plainMicroBatches(M, batch, forward, loss_scale); break;
      case Schedule::Lanes: loss_sum = laneMicroBatches(M, batch, loss_scale); break;
      case Schedule::Pipeline: {
        PipelineStep p{comm->pp(), stage, cfg.pp_schedule, M, activationShape(), compute_dtype, device};
        loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device));
        auto chunk_forward = [&](int k, const at::Tensor& input, const at::Tensor& targets) {
          TRAINSCOPE_RANGE(names::kForward);
          at::Tensor out = stageForward(chunk_weights[size_t(k)], stage.chunk(k), tp, cfg.model.n_head, input,
                                        targets, cfg.ckpt);
          memoryCounter(*memory);
          return out;
        };
        loss_sum += runPipeline(p, batch, chunk_forward, loss_scale,
                                [&](int64_t m) { dp->beforeMicroBatch(m == M - 1); });
        break;
      }
    }
    finalizeGradients();
    const int64_t activation = memory->peakBytes() - baseline;

    // The loss lives on the last stage; every rank reports the global-batch mean. Each CP rank's
    // loss is the mean over its T/CP tokens of every sequence: the mean over DP x CP is the global one.
    if (layout.pp > 1) comm->pp().broadcast(loss_sum, layout.pp - 1);
    if (layout.dp * layout.cp > 1) {
      comm->dpCp().allReduce(loss_sum);
      loss_sum.div_(double(layout.dp * layout.cp));
    }
    return {loss_sum.item<double>() / double(M), activation};
  }

  // One micro-batch after the other in this process: forward, backward on loss × scale / GA.
  template <class BatchFn, class ForwardFn>
  at::Tensor plainMicroBatches(int64_t M, BatchFn& batch, ForwardFn& forward, double loss_scale) {
    at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device));
    for (int64_t m = 0; m < M; ++m) {
      TRAINSCOPE_RANGE(names::kMicroBatch);
      dp->beforeMicroBatch(m == M - 1);  // DP buckets launch during the last backward
      Batch b = batch(m);                                                // (mbs, T)
      at::Tensor loss = forward(b.inputs, b.targets);                   // scalar
      {
        TRAINSCOPE_RANGE(names::kBackward);
        (loss * loss_scale).backward();
      }
      memoryCounter(*memory);
      loss_sum += loss.detach();
    }
    return loss_sum;
  }

  // Each micro-batch split by rows over the core lanes, forward and backward at once: lane k takes
  // rows [r_k, r_k + n_k) of each micro-batch; its mean loss weighs n_k / mbs.
  template <class BatchFn>
  at::Tensor laneMicroBatches(int64_t M, BatchFn& batch, double loss_scale) {
    at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device));
    const int W = lanes->size();
    std::vector<at::Tensor> lane_loss(static_cast<size_t>(W));
    for (int64_t m = 0; m < M; ++m) {
      TRAINSCOPE_RANGE(names::kMicroBatch);
      Batch b = batch(m);                                                // (mbs, T)
      lanes->run([&](int k) {
        const int64_t r = cfg.mbs * k / W, n = cfg.mbs * (k + 1) / W - r;
        const double share = double(n) / double(cfg.mbs);
        at::Tensor loss;
        {
          TRAINSCOPE_RANGE(names::kForward);
          loss = stageForward(lane_weights[size_t(k)], stage, tp, cfg.model.n_head, b.inputs.narrow(0, r, n),
                              b.targets.narrow(0, r, n), cfg.ckpt);    // scalar, mean over n rows
        }
        {
          TRAINSCOPE_RANGE(names::kBackward);
          (loss * (loss_scale * share)).backward();
        }
        lane_loss[size_t(k)] = loss.detach() * share;
      });
      memoryCounter(*memory);
      for (const auto& l : lane_loss) loss_sum += l;
    }
    return loss_sum;
  }

  // After the last backward, whatever the schedule: the lanes' gradients summed into the main ones,
  // the data-parallel reduction finished (or ZeRO-1's reduce-scatter), the tied embedding summed over
  // its two stages and, under SP, the partial gradients summed over TP.
  void finalizeGradients() {
    TRAINSCOPE_RANGE(names::kGradSync);
    if (lanes) lane_sq = sumLaneGradients(*lanes, lane_leaves, grads());
    dp->finishBackward();
    reduceTiedAndPartial();
  }

  // The one rule for which rank counts a parameter of the whole model (the gradient norm, the weight
  // digest): TP-replicated tensors on TP rank 0 only, the tied embedding on the first stage only.
  bool countedOnThisRank(size_t i) const {
    if (!info[i].tp_sharded && tp.rank() != 0) return false;  // (MoE tensors are TP-replicated)
    if (static_cast<int>(i) == wte_index && !stage.first) return false;
    return true;
  }

  // The replicated K/V rows count once, on the first rank of each group of tp / n_kv_head.
  void countReplicas() {
    replica_keep.assign(info.size(), -1);
    const int64_t kv = cfg.model.kvHeads(), t = layout.tp;
    if (t <= kv || (layout.tp_rank % (t / kv)) == 0) return;
    const int64_t q_rows = cfg.model.n_head / t * cfg.model.headSize();  // this rank's q rows come first
    auto endsWith = [](const std::string& n, const std::string& e) {
      return n.size() >= e.size() && n.compare(n.size() - e.size(), e.size(), e) == 0;
    };
    for (size_t i = 0; i < info.size(); ++i) {
      if (endsWith(info[i].name, "attn.c_attn.weight")) replica_keep[i] = q_rows * cfg.model.n_embd;
      if (endsWith(info[i].name, "attn.c_attn.bias")) replica_keep[i] = q_rows;
    }
  }

  // This rank's share of piece `g` of tensor i, starting at element `offset` of the tensor, that the
  // norm and the digest count (replicas left out).
  at::Tensor countedPart(size_t i, const at::Tensor& g, int64_t offset) const {
    if (replica_keep.empty() || replica_keep[i] < 0) return g;
    const int64_t keep = std::clamp<int64_t>(replica_keep[i] - offset, 0, g.numel());
    return g.reshape({-1}).narrow(0, 0, keep);
  }

  // Core lanes need one process holding the whole model in fp32 on the CPU with no gradient
  // collective during backward (DP buckets would launch on one lane's gradients alone).
  void setUpLanes() {
    // (A MoE router's capacity and aux loss are over a micro-batch's tokens: a lane's rows would route differently.)
    const bool eligible = device.is_cpu() && layout.tp == 1 && layout.pp == 1 && layout.cp == 1 && !lowPrecision() &&
                          cfg.zero == ZeroStage::None && (layout.dp == 1 || cfg.local_sgd > 0) && !cfg.model.isMoe();
    int W = cfg.cpu_lanes;
    if (W == 0) W = eligible ? int(std::min<int64_t>(at::get_num_threads(), cfg.mbs)) : 1;
    if (W > 1 && !eligible)
      throw UserError("--cpu-lanes", kLanesNeed,
                      "drop --cpu-lanes (auto picks 1 here) or pass --cpu-lanes 1");
    if (W <= 1) return;
    lanes = std::make_unique<CoreLanes>(W);
    for (int k = 0; k < W; ++k) {
      std::vector<at::Tensor> leaves;
      for (const auto& p : compute) leaves.push_back(p.detach().requires_grad_(p.requires_grad()));
      lane_weights.push_back(GptWeights::fromFlat(leaves, stage));
      lane_leaves.push_back(std::move(leaves));
    }
  }

  int64_t laneGradBytes() const { return lanes ? int64_t(lanes->size()) * bytesOf(compute) : 0; }

  std::vector<int64_t> activationShape() const {
    const int64_t T = tp.sequence_parallel ? cfg.seq / layout.cp / layout.tp : cfg.seq / layout.cp;
    return {cfg.mbs, T, cfg.model.n_embd};
  }

  // The tied embedding's two copies (first and last stage) sum their gradients, then average over
  // DP x CP. Under sequence parallelism the replicated parameters used inside the sequence-split region
  // hold partial gradients: sum them over TP.
  void reduceTiedAndPartial() {
    c10::NoGradGuard no_grad;
    experts->reduce(grads());  // --ep > 1: expert gradients over their expert-dp group
    if (wte_index >= 0) {
      at::Tensor& g = grads()[wte_index];
      comm->embedding().allReduce(g);
      if (layout.dp * layout.cp > 1 && cfg.local_sgd == 0) {
        comm->dpCp().allReduce(g);
        g.div_(double(layout.dp * layout.cp));
      }
    }
    if (tp.sequence_parallel)
      for (const DataParallel::Shard& sh : shards())  // TP peers shard alike: same slices
        if (info[sh.param].sp_partial) {
          at::Tensor g = sh.grad;
          comm->tp().allReduce(g);
        }
  }

  // Unscales the main grads in place and returns the global L2 norm over the whole model (inf/nan
  // on overflow). Each parameter counts once: TP-replicated ones on TP rank 0 only, the tied
  // embedding on the first stage only, ZeRO-sharded ones on their owner.
  double unscaleAndNorm() {
    c10::NoGradGuard no_grad;
    std::vector<at::Tensor> g;  // what this rank updates: whole main gradients, or ZeRO-2's slices
    for (const DataParallel::Shard& sh : shards()) g.push_back(sh.grad);
    if (scaler.scale != 1.0 && !g.empty()) at::_foreach_mul_(g, 1.0 / scaler.scale);
    if (inject_overflow) {
      if (!g.empty()) g[0].view({-1})[0].fill_(std::numeric_limits<float>::infinity());
      inject_overflow = false;
      lane_sq.reset();
    }
    Group* sum_over = dp->normGroup();  // ranks holding other shards of the same tensors (ZeRO)
    std::vector<at::Tensor> counted, counted_experts;
    for (const DataParallel::Shard& sh : shards()) {
      const size_t i = sh.param;
      if (!countedOnThisRank(i)) continue;
      if (experts->ownsGradient(i)) {
        counted_experts.push_back(sh.grad);
        continue;
      }
      // Under ZeRO the tied embedding (not partitioned) is on every DP rank: count it on one.
      if (static_cast<int>(i) == wte_index && sum_over && sum_over->rank() != 0) continue;
      counted.push_back(countedPart(i, sh.grad, sh.offset));
    }
    at::Tensor sq = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device));
    // Lanes (one process, every parameter counted, scale 1): the lanes' sum already took Σ g².
    const bool have_lane_sq = lane_sq && scaler.scale == 1.0 && counted.size() == g.size();
    if (have_lane_sq) sq.fill_(*lane_sq);
    else if (!counted.empty()) sq = at::stack(at::_foreach_norm(counted, 2)).to(at::kDouble).square().sum();
    lane_sq.reset();
    if (experts->active() && cfg.ep > 1) sq += experts->sumSquares(counted_experts, sum_over != nullptr);
    if (sum_over) sum_over->allReduce(sq);
    if (layout.tp > 1) comm->tp().allReduce(sq);
    if (layout.pp > 1) comm->pp().allReduce(sq);
    if (cfg.local_sgd > 0 && layout.dp > 1) {
      // Local SGD: replicas hold different gradients; they must agree on skipping a step, or the
      // weight averaging that follows would be entered by some and not others.
      at::Tensor bad = at::full({}, std::isfinite(sq.item<double>()) ? 0.0 : 1.0, sq.options());
      comm->dp().allReduce(bad, Reduce::Max);
      if (bad.item<double>() > 0) return std::numeric_limits<double>::infinity();
    }
    return std::sqrt(sq.item<double>());
  }

  // The elements of this rank's copy of the (vocabulary-padded) embedding, flat, that hold real
  // rows: a whole tensor's first rows, or the part of a ZeRO-3 piece before the padding.
  at::Tensor realRows(size_t i, const at::Tensor& piece) const {
    const int64_t real = std::max<int64_t>(0, tp.vocab - tp.vocab_begin) * cfg.model.n_embd;
    const int64_t keep = std::clamp<int64_t>(real - dp->pieceOffset(i), 0, piece.numel());
    return piece.reshape({-1}).narrow(0, 0, keep);
  }

  // What the optimizer steps: this rank's shards, a MoE expert tensor (E/ep, …) as E/ep tensors of
  // their own, one per expert (views), so that per-tensor state — Adafactor's factors and RMS clip,
  // 8-bit Adam's blocks — is each expert's whatever the ep split, as Megatron-LM's per-expert
  // weights have it. (ZeRO-2's 1-D slices stay as they are.)
  template <class Pick>
  std::vector<at::Tensor> optimizerTensors(Pick pick, std::vector<bool>* decay = nullptr) const {
    std::vector<at::Tensor> out;
    for (const DataParallel::Shard& sh : shards()) {
      const at::Tensor t = pick(sh);
      const size_t n = info[sh.param].expert && t.dim() >= 2 ? size_t(t.size(0)) : 0;
      if (n == 0) out.push_back(t);
      for (size_t e = 0; e < n; ++e) out.push_back(t.select(0, int64_t(e)));
      if (decay) decay->insert(decay->end(), std::max<size_t>(n, 1), info[sh.param].decay);
    }
    return out;
  }

  void update(double lr, double norm) {
    TRAINSCOPE_RANGE(names::kOptimizer);
    c10::NoGradGuard no_grad;
    std::vector<at::Tensor> mine = optimizerTensors([](const DataParallel::Shard& sh) { return sh.grad; });
    const double clip = cfg.clip > 0 && norm > cfg.clip ? cfg.clip / (norm + 1e-6) : 1.0;
    if (PartitionedStep* parts = lanes ? partitioned(*optimizer) : nullptr) {
      // Each lane updates its share of the elements: no intra-op fork per parameter tensor.
      parts->beginPartitionedStep();
      lanes->run([&](int k) { parts->stepPart(mine, lr, clip, k, lanes->size()); });
    } else {
      optimizer->step(mine, lr, clip);  // clipped
    }
    dp->afterUpdate();  // ZeRO-1/2: everyone gets everyone's updated shard
    if (cfg.local_sgd > 0 && layout.dp > 1 && (step + 1) % cfg.local_sgd == 0)
      for (auto& p : master) {  // local SGD: average the weights every H steps
        comm->dp().allReduce(p);
        p.div_(double(layout.dp));
      }
    if (lowPrecision())
      for (size_t i = 0; i < master.size(); ++i) compute[i].copy_(master[i]);
    memoryCounter(*memory);
  }
};

}  // namespace trainscope::runtime
