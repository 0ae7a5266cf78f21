// data_parallel.h — the one interface the trainer holds for data parallelism (internal to the runtime).
//
// Whatever splits the work over data-parallel ranks — DDP buckets, ZeRO-1's partitioned optimizer,
// ZeRO-2's sharded gradients (GradSync, grad_sync.h), ZeRO-3's sharded parameters (Zero3, zero3.h) —
// answers the trainer the same questions at the same points of a step, as Megatron-core's
// `_BaseDataParallel` does for its DDP and FSDP:
//
//   the weights      leaves()       the autograd leaves forward and backward use (flat() order)
//                    layerHooks()   what stageForward calls around each layer (ZeRO-3's gathers)
//   a step           zeroGrads() → beforeMicroBatch(last) × GA → finishBackward() → [norm, update]
//                    → afterUpdate()
//   the update       shards()       what this rank updates: views of its main gradients and masters
//                    mainGrads()    the fp32 main gradients by parameter (the tied embedding and the
//                                   expert tensors, reduced by the trainer, are read through it)
//                    normGroup()    the group Σg² over shards() is summed across (null: none)
//   the records      gradBytes(), hiddenShare(), commSeconds(), and the weight digest's rule
//
// makeDataParallel is the one place that knows which ZeRO stage runs on which class. A new sharding
// mode is one more class implementing this and one more case there (docs/architecture.md, "Adding a
// sharding mode").
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "trainscope/runconfig/config.h"
#include "trainscope/runtime/comm.h"
#include "trainscope/runtime/gpt.h"

namespace trainscope::runtime {

class DataParallel {
 public:
  // What this rank updates: the elements of parameter `param` that are its own, as views of the
  // fp32 main gradient and of the master weight (whole tensors, or 1-D slices/pieces).
  struct Shard {
    size_t param;
    at::Tensor grad, master;
    int64_t offset = 0;  // where this piece starts among the tensor's (flattened) elements
  };

  virtual ~DataParallel() = default;

  // The autograd leaves forward and backward use, in GptWeights::flat() order (full shapes).
  virtual const std::vector<at::Tensor>& leaves() const = 0;
  // Called by stageForward around each layer; null when the whole stage stays resident.
  virtual LayerHooks* layerHooks() { return nullptr; }

  // Before a step's first micro-batch (core lanes, which overwrite the main gradients, skip it).
  virtual void zeroGrads() = 0;
  // Before each micro-batch's backward; `last`: the step's final one.
  virtual void beforeMicroBatch(bool /*last*/) {}
  // After the last backward: every gradient reduced into what this rank updates, averaged over DP.
  virtual void finishBackward() = 0;
  // After the optimizer stepped shards(): whatever the other ranks need of the updated weights.
  virtual void afterUpdate() {}

  virtual const std::vector<Shard>& shards() const = 0;
  virtual std::vector<at::Tensor>& mainGrads() = 0;
  // Where Σg² over shards() is summed: the ranks that hold different shards of the same tensors
  // (null: this rank holds whole gradients, every replica the same). A tensor held whole by every
  // rank of that group (the tied embedding) is counted on its rank 0 only.
  virtual Group* normGroup() = 0;
  // Collective over the ranks that split the parameters (ZeRO-3's shard group; nothing elsewhere):
  // this rank's fp32 master weights whole, in the leaves' shapes (a checkpoint's weights).
  virtual std::vector<at::Tensor> wholeMaster(const std::vector<at::Tensor>& master) { return master; }
  // Where piece i starts in its whole tensor (elements; 0 for a whole tensor).
  virtual int64_t pieceOffset(size_t /*i*/) const { return 0; }
  // The weight digest: whether this rank hands in its copy of a parameter, given `whole_replica`,
  // the answer for whole weights replicated over DP (the trainer's rule). Sharded weights answer for
  // themselves.
  virtual bool handsInDigest(bool whole_replica) const { return whole_replica; }

  // Bytes of gradients held between steps (main gradients or their shards, any 16-bit one still held).
  virtual int64_t gradBytes() const = 0;
  // Share of the last step's gradient-collective time hidden behind backward, and its seconds.
  virtual double hiddenShare() const { return 0.0; }
  virtual double commSeconds() const = 0;
};

// The one place that picks the class for cfg.zero (and local SGD): DDP buckets, ZeRO-1 or ZeRO-2 on
// GradSync over DP x CP, ZeRO-3 on Zero3 over its shard group (one of a single rank runs ZeRO-1).
// master/compute: this rank's fp32 weights and the copies forward uses (the same tensors in fp32),
// re-seated as the class keeps them (views of a flat buffer, or ZeRO-3's pieces). managed[i] false:
// the trainer reduces parameter i itself (the tied embedding under PP, expert tensors under EP).
std::unique_ptr<DataParallel> makeDataParallel(const TrainConfig& cfg, Comm& comm, const StageSpec& stage,
                                               std::vector<at::Tensor>& master, std::vector<at::Tensor>& compute,
                                               const std::vector<bool>& managed, at::ScalarType compute_dtype,
                                               const at::Device& device);

}  // namespace trainscope::runtime
