// trainscope/runtime/data.h — token streams and the batches cut from them.
//
// Two sources: `synthetic` (a deterministic, learnable stream made from the seed: a Markov chain
// with a random successor table, so loss falls and any run can be reproduced) and a uint16 token file in the
// nanoGPT layout (raw little-endian uint16) or llm.c's (a 256 x int32 header: magic 20240520,
// version 1, token count; then uint16 tokens).
//
// Batches are defined by the global sample index, not by who reads them: sample s of step k starts
// at token ((k * gbs + s) * T) mod (N - T), so every sample has its T+1 tokens. Data-parallel rank
// d reads samples [d*gbs/DP, (d+1)*gbs/DP) of the step, in micro-batches of mbs. So any split of the
// global batch (GA, DP) sees exactly the same samples.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace trainscope::runtime {

struct Batch {
  at::Tensor inputs;   // (B, T) int64
  at::Tensor targets;  // (B, T) int64, inputs shifted by one token
};

class TokenSource {
 public:
  // spec: "synthetic" or a path. Throws UserError("--data", ...) on a missing, truncated or
  // malformed file, a file with too few tokens for one sequence, or tokens >= vocab.
  TokenSource(const std::string& spec, int64_t vocab, int64_t seq, uint64_t seed);

  // Samples [first, first + count) of the stream, each T+1 tokens → inputs/targets on `device`.
  Batch samples(int64_t first, int64_t count, const at::Device& device) const;
  int64_t tokenCount() const { return static_cast<int64_t>(tokens_.size()); }
  const std::string& description() const { return description_; }

 private:
  std::vector<uint16_t> tokens_;
  int64_t seq_;
  std::string description_;
};

// Context parallelism with causal load balancing (Megatron-LM's get_batch_on_this_cp_rank): the
// sequence is cut into 2·cp chunks of T/(2·cp) tokens and cp rank i keeps chunks i and 2·cp−1−i, so
// that every rank has as much causal attention work as every other. Chunk order is kept: the
// positions a rank holds increase along its local sequence.
//   contextPositions: the T/cp global positions cp rank i holds (int64, for the position embedding)
//   contextShard:     the batch's inputs and targets at those positions, (B, T) -> (B, T/cp)
at::Tensor contextPositions(int64_t seq, int cp, int cp_rank, const at::Device& device);
Batch contextShard(const Batch& b, int cp, int cp_rank);

// Writes a token file (tests, bench): llm.c layout when with_header, else raw nanoGPT layout.
void writeTokenFile(const std::string& path, const std::vector<uint16_t>& tokens, bool with_header);

}  // namespace trainscope::runtime
