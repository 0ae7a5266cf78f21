// trainscope/runtime/gpt.h — the decoder model: its weights and its forward pass.
//
// GPT-2 architecture (Radford et al. 2019) by default: token + position embeddings, L pre-LN blocks
// (causal self-attention, GELU-tanh MLP of width 4C), final LayerNorm, LM head tied to the token
// embedding, no dropout (so recomputation is exact). The workload's description (BlockArch, below)
// switches to the Llama family's pieces: RMSNorm, RoPE, GQA, SwiGLU, no biases, an untied head.
// GPT-2 initialisation for all: N(0, 0.02) weights, zero biases, residual projections scaled by 1/sqrt(2L).
//
// The weights are a plain struct of tensors so that one forward serves fp32 master weights and
// their bf16/fp16 working copies alike. Under tensor parallelism the struct holds this rank's
// shards (Megatron layout: c_attn and c_fc split by output rows — heads for c_attn —, attn c_proj
// and mlp c_proj split by input columns, wte split by vocabulary rows); under pipeline parallelism
// only this stage's layers, wte/wpe on the first stage, wte/ln_f on the last. This is not torch::nn.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "trainscope/runconfig/config.h"
#include "trainscope/workloads/workload.h"

namespace trainscope::runtime {

struct BlockContext;

// A mixture-of-experts layer's MLP (model/moe.h): the router, this rank's experts (E/EP of them,
// each whole: no expert tensor parallelism) and an optional shared expert.
struct MoeWeights {
  at::Tensor router_w;                  // (E, C)        every rank holds the whole router
  at::Tensor fc_w, fc_b;                // (E/EP, F2, C), (E/EP, F2)  this rank's experts' c_fc
  at::Tensor proj_w, proj_b;            // (E/EP, C, F), (E/EP, C)  their c_proj
  at::Tensor shared_fc_w, shared_fc_b;  // (F, C), (F)   undefined without a shared expert
  at::Tensor shared_proj_w, shared_proj_b;  // (C, F), (C)   F: the shared expert's own width (Qwen2-MoE)
  at::Tensor shared_gate_w;             // (1, C)  Qwen2-MoE's sigmoid gate of the shared expert; else undefined
  int64_t layer = -1;                   // the global layer it belongs to (its expert-load rows)
  bool swiglu = false;                  // SwiGLU experts: c_fc (…, 2F, C) rows [gate; up]; biases may be undefined

  bool defined() const { return router_w.defined(); }
  // In the order of workloads::parameterTensors: router, experts' c_fc w/b, c_proj w/b, shared's, its gate.
  std::vector<at::Tensor> flat() const;
};

// The description a block is built from, read from the workload (StageSpec::withModel) and nowhere
// else: GPT-2's shape by default. The flat tensors a block holds and what its forward does follow
// from it (docs/architecture.md, "Building a block from the description").
struct BlockArch {
  bool rms_norm = false;          // RMSNorm (weight only, fp32 compute) instead of LayerNorm (weight, bias)
  double norm_eps = 1e-5;
  bool qkv_bias = true, proj_bias = true, mlp_bias = true;
  bool rope = false;              // rotary positions on q and k (HF rotate_half), else none in the block
  double rope_theta = 10000;
  workloads::RopeScaling rope_scaling;  // Llama 3's; factor 0: none
  bool swiglu = false;            // c_fc rows [gate; up]: down(silu(gate(x)) · up(x)); else GELU-tanh
  // Whole-model attention heads; 0: GPT-2's (n_kv_head = n_head, head_dim = C / n_head).
  int64_t n_head = 0, n_kv_head = 0, head_dim = 0;
  int64_t window = 0;             // sliding-window attention (Mistral's sliding_window): keys (t - window, t]; 0: none
  int64_t window_from_layer = 0;  // layers before it attend over the whole sequence (Qwen2's max_window_layers)
  bool alibi = false;             // ALiBi: the core adds -m·(t - j) to each score, m the head's slope
  static BlockArch of(const workloads::Workload& w);
  // The description of global layer l: no window before window_from_layer.
  BlockArch atLayer(int64_t l) const {
    BlockArch a = *this;
    if (l < window_from_layer) a.window = 0;
    return a;
  }
  size_t normTensors() const { return rms_norm ? 1 : 2; }
};

// What a block's flat tensors are: GPT-2's dense 12 (MoE: 8 + 5, + 4 shared, + 1 its gate), fewer
// without biases.
struct BlockKind {
  bool moe = false, shared_expert = false;
  int64_t layer = -1;  // global layer number
  BlockArch arch;
  bool shared_gate = false;  // the shared expert's sigmoid gate (Qwen2-MoE)
  size_t count() const {
    const size_t m = arch.mlp_bias ? 2 : 1;
    return 2 * arch.normTensors() + (arch.qkv_bias ? 2 : 1) + (arch.proj_bias ? 2 : 1) +
           (moe ? 1 + 2 * m + (shared_expert ? 2 * m + (shared_gate ? 1 : 0) : 0) : 2 * m);
  }
};

struct BlockWeights {
  // Tensors the architecture does not have (biases, RMSNorm's bias) are undefined. GQA: c_attn is
  // ((H + 2·KV)·D / TP, C), rows [q; k; v] of this rank's heads; SwiGLU: c_fc (2F/TP, C), [gate; up].
  at::Tensor ln1_w, ln1_b;      // (C), (C)
  at::Tensor qkv_w, qkv_b;      // (3C/TP, C), (3C/TP)   c_attn
  at::Tensor proj_w, proj_b;    // (C, C/TP), (C)        attn c_proj
  at::Tensor ln2_w, ln2_b;      // (C), (C)
  at::Tensor fc_w, fc_b;        // (4C/TP, C), (4C/TP)   mlp c_fc     (undefined in a MoE block)
  at::Tensor fcproj_w, fcproj_b;// (C, 4C/TP), (C)       mlp c_proj   (undefined in a MoE block)
  MoeWeights moe;               // a MoE block's MLP instead (TP-replicated)
  BlockArch arch;

  bool isMoe() const { return moe.defined(); }
  BlockKind kind() const { return {isMoe(), moe.shared_fc_w.defined(), moe.layer, arch, moe.shared_gate_w.defined()}; }
  std::vector<at::Tensor> flat() const;  // the defined attention/norm tensors above, then the MLP's
  static BlockWeights fromFlat(const at::Tensor* first, const BlockKind& kind);  // reads kind.count()
};

// Which layers a pipeline stage holds. One contiguous range of layers (a model chunk), or under
// interleaved 1F1B v chunks per rank in Megatron-LM's layout: the layers split into pp·v chunks,
// rank r holding chunks r, r + pp, r + 2·pp, … (Narayanan et al. 2021, §2.2). `first` (wte, wpe)
// belongs to the rank's chunk 0 and `last` (ln_f, the tied head) to its chunk v − 1.
struct StageSpec {
  int64_t layer_begin = 0, layer_end = 0;  // chunk 0's layers
  bool first = true, last = true;
  // Interleaved 1F1B: the layer ranges [begin, end) of chunks 1 … v − 1, in chunk order. Empty: one chunk.
  std::vector<std::pair<int64_t, int64_t>> later_chunks;

  // Which layers' MLP is a mixture of experts, by global layer number: workloads::Workload::moeLayer
  // (its moe_every or moe_pattern) read once by withModel; empty: none.
  std::vector<bool> moe_layers;
  bool shared_expert = false;
  // The rest of the description (withModel): blocks, learned positions (wpe), tied LM head.
  BlockArch arch;
  bool learned_positions = true, tied = true;
  bool shared_gate = false;  // the shared expert's sigmoid gate (Qwen2-MoE)

  int chunks() const { return 1 + static_cast<int>(later_chunks.size()); }
  BlockKind blockKind(int64_t layer) const {
    const bool moe = layer >= 0 && layer < int64_t(moe_layers.size()) && moe_layers[size_t(layer)];
    return {moe, moe && shared_expert, layer, arch.atLayer(layer), moe && shared_expert && shared_gate};
  }
  StageSpec withModel(const workloads::Workload& w) const;  // this split, with w's architecture
  int64_t layers() const;                // over all chunks
  std::vector<int64_t> layerIds() const;  // global layer numbers, in chunk order
  StageSpec chunk(int k) const;          // chunk k alone (first only for k = 0, last only for k = v − 1)
  static StageSpec whole(int64_t n_layer) { return {0, n_layer, true, true, {}, {}, false, {}, true, true}; }
  // Balanced split of n_layer over pp stages (earlier stages take the remainder); with
  // virtual_stages v > 1, chunk k of this stage is chunk stage + k·pp of that split over pp·v.
  static StageSpec of(int64_t n_layer, int pp, int stage, int virtual_stages = 1);
};

// What a flat parameter is, for decay, norms and tensor-parallel gradient reduction.
struct ParamInfo {
  std::string name;
  bool decay = false;       // 2-D weight: weight decay applies
  bool tp_sharded = false;  // split over TP ranks (else replicated on each)
  bool sp_partial = false;  // replicated, but its gradient is partial under sequence parallelism
  bool wte = false;         // the token embedding or the untied LM head: vocabulary rows, padded
  bool expert = false;      // a MoE expert's tensor: split over the ep ranks, reduced over the expert-dp group
};

struct GptWeights {
  at::Tensor wte;               // (V/TP, C)  token embedding (first stage), also the LM head when tied (last)
  at::Tensor wpe;               // (Tmax, C)  first stage, learned positions only
  std::vector<BlockWeights> blocks;  // this stage's layers
  at::Tensor lnf_w, lnf_b;      // (C), (C)   last stage (no bias under RMSNorm)
  at::Tensor lm_head;           // (V/TP, C)  last stage, untied only
  BlockArch arch;               // the final norm's kind (the blocks carry their own copy)

  // The tensors this stage holds in a fixed order (wte, wpe, blocks, ln_f, lm_head), and what each is.
  std::vector<at::Tensor> flat() const;
  static GptWeights fromFlat(const std::vector<at::Tensor>& flat, const StageSpec& stage);
  static std::vector<ParamInfo> info(const StageSpec& stage);
  // The weights model chunk k of `stage` runs on (the same tensors, no copy): its blocks, and the
  // embeddings or ln_f where that chunk holds them.
  GptWeights chunk(const StageSpec& stage, int k) const;
};

// GPT-2 initialised fp32 weights of the whole model, deterministic for a seed (CPU generator, so
// every device and every parallel layout starts from the same numbers). Then `shard` cuts out
// what one rank holds (a copy) and moves it to `device` as autograd leaves.
GptWeights initGpt(const workloads::Workload& w, uint64_t seed, const at::Device& device);
// MoE layers keep experts [r·E/ep, (r+1)·E/ep) for ep_rank r, and are not split over TP.
GptWeights shardGpt(const GptWeights& full, const StageSpec& stage, int tp_size, int tp_rank,
                    const at::Device& device, int ep_size = 1, int ep_rank = 0);

// What stageForward calls around each layer it runs (ZeRO-3 gathers a layer's parameters before the
// layer and frees them after it: parallel/zero3.h). Layer -1 is the rest of the stage (embeddings,
// ln_f, head), announced before anything runs; layers are numbered within the stage.
class LayerHooks {
 public:
  virtual ~LayerHooks() = default;
  virtual void beforeForward(int64_t layer) = 0;
  // The layer's output, returned as is; what its backward needs first is arranged on it.
  virtual at::Tensor afterForward(int64_t layer, const at::Tensor& out) = 0;
};

// Forward of one pipeline stage. First stage: input = tokens (B, T) int64; otherwise the previous
// stage's hidden states (B, T, C), or (B, T/TP, C) under sequence parallelism. Last stage: returns
// the mean next-token cross-entropy (fp32 scalar) against targets (B, T); otherwise hidden states.
// Last stage with `targets` undefined (one process, no TP): the logits (B, T, V) (run --dump-logits).
at::Tensor stageForward(const GptWeights& w, const StageSpec& stage, const BlockContext& tp, int64_t n_head,
                        const at::Tensor& input, const at::Tensor& targets, Checkpointing ckpt,
                        LayerHooks* hooks = nullptr);

// The whole model on one process: stageForward with no parallelism.
at::Tensor gptLoss(const GptWeights& w, int64_t n_head, const at::Tensor& inputs, const at::Tensor& targets,
                   Checkpointing ckpt);

}  // namespace trainscope::runtime
