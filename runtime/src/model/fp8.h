// fp8.h — tensor-wise scaled FP8 GEMMs for the transformer blocks' linears (internal to the runtime).
//
// --precision fp8 (Transformer Engine's "HYBRID" recipe with delayed scaling; docs/config-reference.md):
//   forward   y  = (x·s_x → E4M3) (W·s_w → E4M3)ᵀ / (s_x s_w)           (bf16 out)
//   backward  dX = (dY·s_g → E5M2) (W·s_w → E4M3) / (s_g s_w)
//             dW = (dY·s_g → E5M2)ᵀ (x·s_x → E4M3) / (s_g s_x)
// E4M3 (max 448) has the precision activations and weights need; E5M2 (max 57344) the range
// gradients need. Each registered weight owns three scales (input, weight, output gradient); a scale
// is s = fp8_max / amax, amax the largest |value| over the last kHistory steps (the "max" algorithm,
// margin 0), so the scale a step uses comes from earlier steps only (delayed scaling) and the
// recomputation of a checkpointed layer quantises exactly as its first forward did. Before a tensor
// has any history (the first step) it is scaled by its own amax (current scaling). Values beyond the
// range (a stale scale) saturate to ±fp8_max, as Transformer Engine's casts do. At the end of each
// step the step's amaxes are reduced (max) over the data-parallel and tensor-parallel groups, as
// Transformer Engine's reduce_amax does, so every replica uses the same scales.
// Only the block linears registered here run in FP8; attention's core, norms, embeddings, the LM
// head and MoE experts stay bf16 (Transformer Engine's defaults).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/core/Tensor.h>

#include "trainscope/rundb/rows.h"

namespace trainscope::runtime {

class Comm;
class Group;
struct ParamInfo;

namespace fp8 {

inline constexpr int kHistory = 16;          // steps of amax history (torchao's default; TE's is 1024)
inline constexpr double kE4M3Max = 448.0;    // largest finite float8_e4m3fn
inline constexpr double kE5M2Max = 57344.0;  // largest finite float8_e5m2

// The saturating cast's fp32 intermediate: at most this many elements at once (quantize).
inline constexpr int64_t kCastBlock = int64_t(1) << 14;

enum Role { Input = 0, Weight = 1, GradOutput = 2 };
const char* roleName(int role);  // "input", "weight", "grad_output"

// One FP8 linear's scaling state: per role, this step's amax (a 0-d fp32 tensor on the device, so
// no synchronisation per GEMM), the amax history of earlier steps and the scale derived from it.
struct Meta {
  std::string name;                 // the weight's parameter name, e.g. "h.0.attn.c_attn.weight"
  at::Tensor amax[3];               // this step's max |x| (0-d fp32); undefined: not seen this step
  std::vector<double> history[3];   // newest last, at most kHistory
  double scale[3] = {0, 0, 0};      // 0: no history yet (current scaling)
  double used_scale[3] = {0, 0, 0}; // the scale this step quantised with (what the run database records)
  bool current[3] = {false, false, false};  // this step scaled by each tensor's own amax (no history)
  // The weight cast once per step (Transformer Engine's FP8 weight cache under gradient
  // accumulation): its E4M3 copy (N, K) and the column-major copy dgrad reads, made at the step's
  // first forward and reused by every micro-batch and recomputation until endStep (before the
  // optimizer changes the weight). Under ZeRO-3 the cast is of the first gather's full weight, so
  // later gathers of the same step need none. Undefined: not cast yet this step.
  at::Tensor weight_q, weight_t;
  double weight_scale = 0;
};

// The FP8 linears of one trainer: its registered weights (by identity: the autograd leaves the
// blocks receive every step) and their scaling state.
class Recipe {
 public:
  void add(const at::Tensor& weight, const std::string& name);
  Meta* find(const at::Tensor& weight);  // nullptr: not an FP8 linear
  bool empty() const { return metas_.empty(); }
  // After a step's backward: reduces the step's amaxes (max) over `groups` (nullptr or size 1
  // entries skipped), appends them to the histories, derives the next scales, and returns the rows
  // for the run database (rank, step, tensor, role, amax, scale used this step).
  // Also drops every cached FP8 weight (the optimizer step that follows changes the weights).
  std::vector<rundb::Fp8Scale> endStep(const std::vector<Group*>& groups, int64_t rank, int64_t step);
  // Bytes of the FP8 weight copies cached this step (both layouts).
  int64_t cachedWeightBytes() const;
  // The registered linears in registration order: what a checkpoint saves of each (its amax
  // history and scale per role, state/fp8_state.h) and restores on --resume.
  const std::vector<Meta*>& metas() const { return metas_; }

 private:
  std::unordered_map<const void*, std::unique_ptr<Meta>> by_impl_;
  std::vector<Meta*> metas_;  // registration order
};

// Registers the transformer blocks' dense linears (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj
// weights, by their ParamInfo names) among `leaves` (the tensors the blocks receive).
void registerBlockLinears(Recipe& r, const std::vector<at::Tensor>& leaves, const std::vector<ParamInfo>& info);

// The groups a step's amaxes are reduced over: data-, tensor- and context-parallel.
std::vector<Group*> amaxGroups(Comm& comm);

// The recipe the block linears consult (set by the trainer around its forward and backward passes;
// nullptr: FP8 off). Thread-local: a rank's forward runs on one thread.
Recipe* active();
class Scope {
 public:
  explicit Scope(Recipe* r);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  Recipe* prev_;
};

// The FP8 linear for `weight` when one is active (active() has it registered), else nullptr.
Meta* metaFor(const at::Tensor& weight);

// While alive, metaFor(copies[i]) answers as for originals[i]: a checkpointed block recomputes on
// detached copies of its weights (model/checkpoint.cpp), which must run the same FP8 linears.
class AliasScope {
 public:
  AliasScope(const std::vector<at::Tensor>& copies, const std::vector<at::Tensor>& originals);
  ~AliasScope();
  AliasScope(const AliasScope&) = delete;
  AliasScope& operator=(const AliasScope&) = delete;

 private:
  const void* prev_;
};

// The weight's E4M3 copy for this step: cast (and its column-major copy made) at the first call of
// the step, the cached pair afterwards (Meta::weight_q). Returns (copy, column-major copy, scale).
struct CastWeight {
  at::Tensor q, t;
  double scale;
};
CastWeight castWeight(const at::Tensor& w, Meta* meta);

// x (M, K) bf16, w (N, K) bf16, b (N) or undefined → (M, N) bf16, through the FP8 GEMMs above, with
// its own autograd backward.
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, Meta* meta);

// Quantise `t` with the scale for `role` (recording its amax): returns (t·s → fp8, s).
std::pair<at::Tensor, double> quantize(const at::Tensor& t, Meta* meta, int role);

}  // namespace fp8
}  // namespace trainscope::runtime
