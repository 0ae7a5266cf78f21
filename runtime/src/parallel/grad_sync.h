// grad_sync.h — data-parallel gradient reduction (internal to the runtime): the DataParallel
// (data_parallel.h) of every ZeRO stage but 3 — makeDataParallel picks the mode.
//
// Owns the fp32 main gradients. Four modes:
//   Buckets  — DDP-style: gradients live in flat buckets (reverse parameter order, ~backward order);
//              a post-accumulate hook on each parameter marks it ready during the last micro-batch's
//              backward, and a full bucket is all-reduced asynchronously while backward goes on.
//   Zero1    — gradients live in one flat buffer laid out by owning DP rank (whole tensors, greedily
//              balanced, segments padded to one size); after backward one reduce-scatter leaves each
//              rank the summed gradients of the tensors it owns. Master weights live in the same
//              layout and are all-gathered after the update.
//   Zero2    — the same buckets as DDP, each split element-wise into d equal shards (padded to a
//              multiple of d), as Megatron-LM's distributed optimizer and DeepSpeed stage 2 split theirs.
//              A rank keeps only its shard of each bucket's gradients (fp32, persistent) and updates
//              only those elements. The full bucket exists only while it fills and while its
//              reduce-scatter runs: allocated at its first gradient, reduce-scattered asynchronously
//              as soon as it is full (during backward), freed when the next bucket is launched or
//              backward ends — at most two buckets at once. Every micro-batch is reduced into the
//              shard (DeepSpeed's way), so no full gradient outlives a micro-batch's backward.
//              Master weights live in a flat buffer in bucket order; each bucket's updated shard is
//              all-gathered after the update.
//   None     — local SGD (or one DP rank): no gradient traffic.
// In bf16/fp16 the same hooks add each low-precision gradient into its fp32 main gradient as soon as
// autograd has accumulated it, then release it (Megatron-LM's main_grad): no 16-bit gradient is kept
// between backward passes, so mixed precision holds 4 + 2 bytes of weights and 4 of gradients.
#pragma once

#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "parallel/data_parallel.h"
#include "trainscope/runtime/comm.h"

namespace trainscope::runtime {

class GradSync final : public DataParallel {
 public:
  enum class Mode { Buckets, Zero1, Zero2, None };

  // Shard (data_parallel.h): whole tensors, or under ZeRO-2 1-D slices.

  // compute: the autograd leaves forward uses; master: fp32 weights (same shapes; may be the same
  // tensors). Zero1 and Zero2 re-seat `master` as views into their flat buffer.
  // managed[i] false: the parameter gets a plain main gradient that the caller reduces itself (the
  // tied embedding under pipeline parallelism, which also needs the first/last-stage all-reduce).
  GradSync(Group& dp, Mode mode, int64_t bucket_bytes, std::vector<at::Tensor>& compute,
           std::vector<at::Tensor>& master, bool low_precision, const std::vector<bool>& managed);
  ~GradSync() override;

  // The leaves: `compute` as re-seated. No layer hooks: the whole stage stays resident.
  const std::vector<at::Tensor>& leaves() const override { return compute_; }
  // Full main gradients by parameter. Under ZeRO-2 only the unmanaged ones are defined: use shards().
  std::vector<at::Tensor>& mainGrads() override { return main_grads_; }
  const std::vector<Shard>& shards() const override { return shards_; }
  // Zero1/Zero2 over more than one rank: the DP group the shards are spread over.
  Group* normGroup() override;
  // Whole tensors this rank updates (Zero1: its own; Zero2: only the unmanaged ones; else all).
  const std::vector<bool>& owned() const { return owned_; }
  // Bytes of gradients held between steps: main gradients (or ZeRO-2's shards), and any 16-bit
  // gradient still attached to a compute weight.
  int64_t gradBytes() const override;

  void zeroGrads() override;
  // Called before each micro-batch's backward (last: the step's final one). DDP buckets launch only
  // in the last; ZeRO-2 finishes the previous micro-batch's reduction here.
  void beforeMicroBatch(bool last) override;
  // After the last backward: launch what has not been, wait, and average over DP.
  void finishBackward() override;
  // Zero1/Zero2: all-gather the updated master weights.
  void afterUpdate() override;

  // Share of this step's gradient-collective time that ran before backward ended (Buckets, Zero2),
  // and the total time the collectives took.
  double hiddenShare() const override { return hidden_share_; }
  double commSeconds() const override { return comm_seconds_; }

 private:
  struct Bucket;
  void seat(size_t i, const at::Tensor& flat, int64_t at, std::vector<at::Tensor>& compute,
            std::vector<at::Tensor>& master);
  void layoutZero1(std::vector<at::Tensor>& compute, std::vector<at::Tensor>& master, const std::vector<bool>& managed);
  void layoutBuckets(std::vector<at::Tensor>& master, const std::vector<bool>& managed, int64_t bucket_bytes);
  void layoutZero2(std::vector<at::Tensor>& compute, std::vector<at::Tensor>& master, const std::vector<bool>& managed,
                   int64_t bucket_bytes);
  void onGradReady(size_t i);
  void launch(Bucket& b);
  // Zero2
  void addToBucket(size_t i);
  void launchShard(Bucket& b);
  void retireShard(Bucket& b, int64_t backward_end);
  void flushMicroBatch();

  Group& dp_;
  Mode mode_;
  bool low_precision_;
  bool last_micro_ = true;
  std::vector<at::Tensor> compute_;
  std::vector<at::Tensor> main_grads_;
  std::vector<bool> owned_;
  std::vector<Shard> shards_;
  std::vector<std::shared_ptr<void>> hooks_;  // grad accumulators kept alive
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<int> bucket_of_;
  std::vector<int64_t> offset_in_bucket_;
  // Zero1 and Zero2: the master weights' flat buffer; Zero1 also the gradients'.
  at::Tensor flat_grads_, flat_params_;
  int64_t segment_ = 0;
  // Zero2: the bucket whose reduce-scatter is in flight; whether this micro-batch produced gradients.
  Bucket* inflight_ = nullptr;
  bool micro_has_grads_ = false;
  double rs_total_ns_ = 0, rs_hidden_ns_ = 0;
  double hidden_share_ = 0, comm_seconds_ = 0;
};

}  // namespace trainscope::runtime
