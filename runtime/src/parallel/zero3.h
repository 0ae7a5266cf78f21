// zero3.h — ZeRO-3 / fully sharded data parallelism (internal to the runtime): the DataParallel
// (data_parallel.h) of --zero 3 over a shard group of more than one rank.
//
// What it is: the parameters, their gradients and the optimizer state sharded over a group of DP
// ranks (Rajbhandari et al. 2020, "P_os+g+p"), gathered one layer at a time as PyTorch FSDP does
// (Zhao et al. 2023). What it is not: a general module wrapper — it knows the GPT's units.
//
// Units. Each transformer block of the stage is one unit (its 12 tensors), and the rest of the stage
// (wte, wpe, ln_f) one more, unit 0. A unit is one flat buffer of its tensors in flat() order, padded
// to a multiple of the shard group's size s; rank r keeps elements [r·S, (r+1)·S), S = padded / s, of
//   the fp32 master weights  (the optimizer's; per-tensor pieces of it are what the optimizer sees),
//   the compute copy         (bf16/fp16; in fp32 the master itself), the source of the all-gather,
//   the fp32 gradient        (reduce-scattered into, summed over micro-batches).
// The optimizer is built on the pieces, so elementwise optimizers (AdamW, SGD) step exactly as on
// the whole tensors; the config refuses Adafactor and 8-bit Adam, whose state spans whole tensors.
//
// Gathering. The tensors forward and backward use are autograd leaves over one full flat buffer per
// unit, whose storage is released (size 0) when the unit is not in use and re-allocated and filled by
// an all-gather when it is. The leaves are made with variable_data(), so they have a version counter
// of their own: the all-gather writes into the buffer without bumping it, and autograd's saved
// references to the leaves (in every op, and in a checkpointed block's recompute) read the re-filled
// storage without complaint. The schedule, driven by stageForward's LayerHooks:
//   forward  — unit 0 gathered at the start; before block l: wait for its gather, start l+1's
//              asynchronously (the prefetch runs beside block l's compute); after block l: free it,
//              and put a hook on its output, which runs in backward before the block's backward;
//   backward — that hook: wait for block l's gather (or issue it), start l−1's; once every tensor of
//              a unit has its gradient (post-accumulate hooks), the unit's gradients go into one flat
//              fp32 buffer, reduce-scattered asynchronously into the shard (one in flight; waited
//              before the next starts), and the unit's full buffer is freed. Unit 0 is last.
// Hybrid sharding (--zero-shard-size s < dp): the shard group is s consecutive DP ranks; after the
// last backward each gradient shard is all-reduced over the dp/s replicas holding the same shard.
// Gradients are averaged over all dp ranks, as plain data parallelism does.
#pragma once

#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "parallel/data_parallel.h"
#include "trainscope/runtime/comm.h"
#include "trainscope/runtime/gpt.h"

namespace trainscope::runtime {

class Zero3 final : public DataParallel, private LayerHooks {
 public:
  // full: this rank's fp32 tensors as built (TP-local, the whole stage, in GptWeights::flat() order);
  // read once. replicas: null without hybrid sharding. dp: every DP rank, for the average.
  Zero3(Group& shard, Group* replicas, int dp, const StageSpec& stage, const std::vector<at::Tensor>& full,
        at::ScalarType compute_dtype, const at::Device& device);
  ~Zero3() override;

  // Per tensor of flat() order: this rank's piece (1-D, possibly empty) of the master weights, of the
  // compute copy (the same tensors in fp32), and of the gradients; whether the piece is non-empty.
  std::vector<at::Tensor>& master() { return master_; }
  std::vector<at::Tensor>& compute() { return compute_; }
  std::vector<at::Tensor>& mainGrads() override { return grads_; }
  const std::vector<bool>& owned() const { return owned_; }
  // The non-empty pieces as the trainer's optimizer and norm take them.
  const std::vector<Shard>& shards() const override { return shards_; }
  int64_t gradBytes() const override;  // the fp32 gradient shards (no full gradient outlives its unit's backward)
  int64_t pieceOffset(size_t i) const override { return piece_offset_[i]; }  // where piece i starts in its tensor
  // The leaves forward and backward use (full shapes; storage only while gathered).
  const std::vector<at::Tensor>& leaves() const override { return leaves_; }
  // Each unit's master shards all-gathered over the shard group, cut into whole tensors (copies).
  std::vector<at::Tensor> wholeMaster(const std::vector<at::Tensor>& master) override;
  const GptWeights& weights() const { return weights_; }
  // stageForward gathers and frees each layer through these (beforeForward, afterForward below).
  LayerHooks* layerHooks() override { return this; }
  // Σg²: summed over the shard group (under hybrid sharding the replicas hold the same shards).
  Group* normGroup() override { return &shard_; }
  // The weight digest: every rank of the first shard group hands in its pieces.
  bool handsInDigest(bool /*whole_replica*/) const override { return firstReplica(); }
  bool firstReplica() const { return !replicas_ || replicas_->rank() == 0; }

  void zeroGrads() override;
  // After the last backward: the last reduce-scatter waited for, replicas summed, the average taken.
  void finishBackward() override;
  double commSeconds() const override { return comm_seconds_; }

 private:
  void beforeForward(int64_t layer) override;
  at::Tensor afterForward(int64_t layer, const at::Tensor& out) override;

  struct Unit;
  void gather(size_t u);          // start the all-gather of unit u unless it is under way or done
  void ready(size_t u);           // unit u gathered (waits for it)
  void release(size_t u);         // unit u's full storage freed
  void preBackward(size_t u);     // before the backward of unit u (a block)
  void onGradReady(size_t i);
  void reduceScatter(size_t u);   // unit u's gradients into the shard; its full storage freed
  void finishReduceScatter();

  Group& shard_;
  Group* replicas_;
  int dp_;
  at::ScalarType dtype_;
  at::Device device_;
  std::vector<std::unique_ptr<Unit>> units_;
  std::vector<size_t> unit_of_;   // per tensor
  std::vector<at::Tensor> leaves_, master_, compute_, grads_;
  std::vector<int64_t> piece_offset_;
  std::vector<bool> owned_;
  std::vector<Shard> shards_;
  GptWeights weights_;
  std::vector<std::shared_ptr<void>> hooks_;  // grad accumulators kept alive
  struct InFlight;
  std::unique_ptr<InFlight> reducing_;
  double comm_seconds_ = 0;
};

}  // namespace trainscope::runtime
