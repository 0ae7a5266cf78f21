// grad_sync.h — data-parallel gradient reduction (internal to the runtime).
//
// Owns the fp32 main gradients. Three modes:
//   Buckets  — DDP-style: gradients live in flat buckets (reverse parameter order, ~backward order);
//              a post-accumulate hook on each parameter marks it ready during the last micro-batch's
//              backward, and a full bucket is all-reduced asynchronously while backward goes on.
//   Zero1    — gradients live in one flat buffer laid out by owning DP rank (whole tensors, greedily
//              balanced, segments padded to one size); after backward one reduce-scatter leaves each
//              rank the summed gradients of the tensors it owns. Master weights live in the same
//              layout and are all-gathered after the update.
//   None     — local SGD: no gradient traffic.
// In bf16/fp16 the same hooks add each low-precision gradient into its fp32 main gradient as soon as
// autograd has accumulated it, then clear it.
#pragma once

#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "trainscope/runtime/comm.h"

namespace trainscope::runtime {

class GradSync {
 public:
  enum class Mode { Buckets, Zero1, None };

  // compute: the autograd leaves forward uses; master: fp32 weights (same shapes; may be the same
  // tensors). Zero1 re-seats `master` as views into the owner-ordered flat buffer.
  // managed[i] false: the parameter gets a plain main gradient that the caller reduces itself (the
  // tied embedding under pipeline parallelism, which also needs the first/last-stage all-reduce).
  GradSync(Group& dp, Mode mode, int64_t bucket_bytes, std::vector<at::Tensor>& compute,
           std::vector<at::Tensor>& master, bool low_precision, const std::vector<bool>& managed);
  ~GradSync();

  std::vector<at::Tensor>& mainGrads() { return main_grads_; }
  // Zero1: which parameters this rank updates (all, otherwise).
  const std::vector<bool>& owned() const { return owned_; }

  void zeroGrads();
  void setLastMicroBatch(bool last) { last_micro_ = last; }  // reductions launch only in the last one
  // After the last backward: launch what has not been, wait, and average over DP.
  void finishBackward();
  // Zero1: all-gather the updated master weights.
  void gatherParams();

  // Share of this step's all-reduce time that ran before backward ended (Buckets), and the total
  // time the collectives took.
  double hiddenShare() const { return hidden_share_; }
  double commSeconds() const { return comm_seconds_; }

 private:
  struct Bucket;
  void onGradReady(size_t i);
  void launch(Bucket& b);

  Group& dp_;
  Mode mode_;
  bool low_precision_;
  bool last_micro_ = true;
  std::vector<at::Tensor> compute_;
  std::vector<at::Tensor> main_grads_;
  std::vector<bool> owned_;
  std::vector<std::shared_ptr<void>> hooks_;  // grad accumulators kept alive
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<int> bucket_of_;
  // Zero1
  at::Tensor flat_grads_, flat_params_;
  int64_t segment_ = 0;
  double hidden_share_ = 0, comm_seconds_ = 0;
};

}  // namespace trainscope::runtime
