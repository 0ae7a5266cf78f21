// trainscope/models/dp_layout.h — the data-parallel layout: the one place its rules are written.
//
// Which layers a pipeline stage holds, which flat buffer each parameter tensor of the stage lives
// in, where in it, and which elements of it each data-parallel rank keeps. The runtime lays its
// tensors out by it (runtime/src/parallel/grad_sync.cpp, zero3.cpp; StageSpec::of in
// runtime/src/model/gpt.cpp) and the memory and time models price what it lays out
// (models/src/memory_model.cpp), so the two cannot drift apart. No LibTorch: both sides describe the
// stage's tensors as Slots, in the runtime's GptWeights::flat() order (stageSlots builds them from a
// workload and a plan; the runtime from its tensors).
//
// One kind of group serves every mode (after Megatron-LM's distributed optimizer, whose buffers are
// ranges of one flat buffer):
//   DDP (zero none)  — buckets of the managed tensors in backward order (the reverse of flat()), a new
//                      bucket whenever the next tensor would take it past bucket_bytes of fp32; no padding;
//   ZeRO-1           — one buffer of whole tensors, each owned by one rank: largest first onto the
//                      least-loaded rank, segments padded to the largest load; rank r's segment is its shard;
//   ZeRO-2           — the DDP buckets, each padded to a multiple of d and split element-wise: ⌈n/d⌉ each;
//   ZeRO-3           — one unit per layer of the stage (its tensors in flat() order) and unit 0 of the
//                      rest (embeddings, ln_f), each padded and split element-wise like a ZeRO-2 bucket.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/models/plan.h"
#include "trainscope/runconfig/config.h"
#include "trainscope/workloads/workload.h"

namespace trainscope::models {

// Elements [begin, end) of a flat buffer (or of one tensor).
struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end > begin ? end - begin : 0; }
  bool empty() const { return end <= begin; }
  Range intersect(const Range& o) const;
  bool operator==(const Range& o) const { return begin == o.begin && end == o.end; }
};

// One rank's share of `n` elements split evenly over d ranks: ⌈n/d⌉ (the last rank's padding ignored).
inline int64_t evenShard(int64_t n, int64_t d) { return (n + d - 1) / d; }

// One parameter tensor of a pipeline stage, as one rank holds it (TP- and EP-local shape).
struct Slot {
  std::string name;             // the runtime's name (GptWeights::info): "wte", "h.3.attn.c_attn.weight", …
  std::vector<int64_t> shape;
  int64_t layer = -1;           // position of its layer among the stage's layers; −1: wte, wpe, ln_f
  bool managed = true;          // in the DP layout; false: reduced elsewhere (the tied wte under PP,
                                // a MoE's experts under ep > 1) and whole on every rank
  bool expert_mlp = false;      // a MoE layer's MLP past the router (its experts' gradients)
  int64_t numel() const;
};

// A group of tensors sharing one flat buffer: a DDP bucket, ZeRO-1's buffer, a ZeRO-2 bucket, a
// ZeRO-3 unit. `tensors` are slot indices in the buffer's order (backward order for buckets), and
// `ranges[k]` is where tensors[k] lies in the buffer. The buffer is `padded` elements, `shard` per
// rank (padded = ranks · shard; a DDP bucket is not sharded: ranks 1).
struct ShardGroup {
  std::vector<size_t> tensors;
  std::vector<Range> ranges;
  int64_t numel = 0, padded = 0, shard = 0, ranks = 1;

  Range mine(int64_t rank) const { return {rank * shard, (rank + 1) * shard}; }  // in the buffer
  // The elements of tensors[k] that `rank` keeps, as a range of the tensor's own (flattened)
  // elements; empty when it keeps none of them.
  Range local(size_t k, int64_t rank) const;
};

struct DpLayout {
  runconfig::ZeroStage stage = runconfig::ZeroStage::None;
  int64_t ranks = 1;
  std::vector<ShardGroup> groups;  // buckets in launch order, ZeRO-1's one buffer, or units 0, 1, …
  std::vector<int> group_of;       // per slot: its group, −1 outside the layout (unmanaged)
  std::vector<size_t> index_of;    // per slot: its position k in that group's tensors
  int64_t padded() const;          // Σ of the groups' padded sizes (ZeRO-2's master buffer)
};

// The layout of a stage's slots over d data-parallel ranks under ZeRO stage `stage` (None: DDP
// buckets; ZeRO-3: units, whatever `managed` says), buckets of about bucket_bytes of fp32.
DpLayout dpLayout(const std::vector<Slot>& slots, runconfig::ZeroStage stage, int64_t d, int64_t bucket_bytes);

// The bucket size in bytes of `--bucket-mb` (MiB, possibly fractional), as the runtime takes it.
inline int64_t bucketBytes(double bucket_mb) { return int64_t(bucket_mb * 1024 * 1024); }

// The layers pipeline stage `stage` of pp holds, as ranges of global layer numbers in chunk order: the
// balanced split of n_layer over pp·v chunks (earlier chunks take the remainder), chunks stage + k·pp
// for k < v (Megatron-LM's interleaved layout; v 1: one contiguous range).
std::vector<Range> stageLayout(int64_t n_layer, int64_t pp, int64_t stage, int64_t virtual_stages = 1);

// The slots a (tp, pp, ep) rank of stage `stage` holds under plan p, in the runtime's flat() order
// and with its names and shapes (shardGpt's: vocabulary padded to a multiple of tp and split, c_attn
// and c_fc split by rows, the projections by columns, E/ep experts). Managed as the trainer sets it.
std::vector<Slot> stageSlots(const workloads::Workload& w, const Plan& p, int64_t stage);

}  // namespace trainscope::models
