// trainscope/runtime/trainer.h — one process training a GPT: the train step as a recipe.
//
//   for each micro-batch: batch → forward → backward (loss / GA, × loss scale) → accumulate
//   then: unscale → grad norm → (fp16 overflow? skip) → clip → optimizer update → refresh copies
//
// Data parallelism, whatever the ZeRO stage, is one DataParallel (runtime/src/parallel/data_parallel.h)
// called at fixed points of it: zero the gradients, before each micro-batch, around each layer (its
// layer hooks), finish backward; the norm summed over its norm group; the update on its shards, then
// after the update.
//
// Precision: fp32 trains the fp32 weights directly. bf16/fp16 keep fp32 master weights and
// optimizer state; forward/backward run on low-precision copies whose gradients are added into fp32
// main gradients after each micro-batch (Micikevicius et al. 2018). fp16 adds dynamic loss scaling.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "trainscope/runtime/comm.h"
#include "trainscope/runconfig/config.h"
#include "trainscope/runtime/device.h"
#include "trainscope/rundb/rows.h"

namespace trainscope::runtime {

struct GptWeights;
class Optimizer;
namespace fp8 {
class Recipe;
}

class Trainer {
 public:
  // cfg must have been through resolve(). comm: this rank's process groups (nullptr: one process).
  // initial: the whole model's fp32 weights to start from (a checkpoint's, unsharded, on the CPU);
  // nullptr: initialised from cfg.seed. Each rank keeps its part of them, whatever the layout.
  Trainer(const TrainConfig& cfg, const DeviceChoice& device, Comm* comm = nullptr,
          const GptWeights* initial = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One optimizer step on the next global batch; returns its metrics.
  rundb::Step step();

  // Forward and backward over step `step`'s global batch, leaving gradients in mainGrads() without
  // updating anything; returns the mean loss (tests compare these across configurations).
  double computeGradients(int64_t step);

  // The logits (mbs, T, V) of step `step`'s first micro-batch, fp32 on the CPU, without gradients:
  // one process only (run --dump-logits, for the transformers oracle).
  at::Tensor logits(int64_t step);
  std::vector<at::Tensor> masterParams() const;  // fp32 (this rank's shard under TP/PP)
  // Collective under ZeRO-3 (over the shard group): the master weights whole as the leaves hold them
  // (TP/PP/EP-local); elsewhere masterParams().
  std::vector<at::Tensor> wholeMasterParams() const;
  std::vector<at::Tensor> mainGrads() const;     // fp32, unscaled after step()/computeGradients()
  int64_t parameterCount() const;
  int64_t stepsDone() const;
  double lossScale() const;
  const TrainConfig& config() const;
  const DeviceChoice& device() const;

  // What a checkpoint holds besides the weights (runtime/src/state/checkpoint.h): the step to run
  // next (the data position is a function of it: step · gbs samples), the fp16 loss scaler, and
  // this rank's optimizer state (live tensors, in Optimizer::stateTensors order).
  struct Resumable {
    int64_t step = 0, optimizer_steps = 0, clean_steps = 0;
    double loss_scale = 1;
  };
  Resumable resumable() const;
  std::vector<at::Tensor> optimizerState() const;
  // Copies `state` into the optimizer's tensors (shapes and dtypes checked by the caller) and
  // continues from r.step.
  void restore(const Resumable& r, const std::vector<at::Tensor>& state);
  // Where each optimizer parameter lies in this rank's flat parameters (the layout-free optimizer
  // state, runtime/src/state/optim_state.h): its flat index, its expert (-1: not one expert of a
  // tensor), where its elements start in the TP-local tensor. stageShapes: those tensors' shapes.
  struct OptimizerSlot {
    size_t param = 0;
    int64_t expert = -1, offset = 0;
  };
  std::vector<OptimizerSlot> optimizerSlots() const;
  std::vector<std::vector<int64_t>> stageShapes() const;
  Group* optimizerShardGroup() const;  // the ranks that split the optimizer state (null: none)
  Optimizer& optimizer() const;

  // Testing seam: the next step's gradients get an inf, as an fp16 overflow would produce.
  void injectOverflowOnce();

  // Data-parallel statistics of the last step: share of all-reduce time hidden behind backward,
  // and the seconds the gradient collectives took.
  double lastHiddenShare() const;
  double lastCommSeconds() const;
  // MoE: what the routers did in the last step on this rank (rundb expert_load rows; empty for a
  // dense model), then forgotten.
  std::vector<rundb::ExpertLoad> takeExpertLoad();
  // --precision fp8: the last step's amax and scale per FP8 linear and role on this rank (rundb
  // fp8_scales rows; empty otherwise), then forgotten.
  std::vector<rundb::Fp8Scale> takeFp8Scales();
  // --precision fp8: the block linears' scaling state (amax histories and scales, model/fp8.h),
  // which a checkpoint saves and --resume restores (runtime/src/state/fp8_state.h); empty otherwise.
  fp8::Recipe& fp8Recipe() const;

  // This rank's contribution to a digest of the whole model's weights, by canonical parameter name:
  // {sum, sum of squares, sum of |x|}. Summed over all ranks it is the same for every parallel layout
  // of the same training: empty on all but DP replica 0 (under ZeRO-3, the first shard group, whose
  // ranks hand in their pieces); TP-replicated tensors count on TP rank 0 only, the tied embedding on
  // the first stage only.
  struct Digest {
    std::string name;
    double sum = 0, sumsq = 0, abssum = 0;
  };
  std::vector<Digest> weightDigest() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainscope::runtime
