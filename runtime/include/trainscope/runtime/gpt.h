// trainscope/runtime/gpt.h — the GPT model: its weights and its forward pass.
//
// GPT-2 architecture (Radford et al. 2019): token + position embeddings, L pre-LN blocks
// (causal self-attention, GELU-tanh MLP of width 4C), final LayerNorm, LM head tied to the token
// embedding, no dropout (so recomputation is exact). GPT-2 initialisation: N(0, 0.02) weights,
// zero biases, residual projections scaled by 1/sqrt(2L).
//
// The weights are a plain struct of tensors so that one forward serves fp32 master weights and
// their bf16/fp16 working copies alike. This is not torch::nn: no module tree, no hooks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "trainscope/runtime/config.h"
#include "trainscope/workloads/workload.h"

namespace trainscope::runtime {

struct BlockWeights {
  at::Tensor ln1_w, ln1_b;      // (C), (C)
  at::Tensor qkv_w, qkv_b;      // (3C, C), (3C)      c_attn
  at::Tensor proj_w, proj_b;    // (C, C), (C)        attn c_proj
  at::Tensor ln2_w, ln2_b;      // (C), (C)
  at::Tensor fc_w, fc_b;        // (4C, C), (4C)      mlp c_fc
  at::Tensor fcproj_w, fcproj_b;// (C, 4C), (C)       mlp c_proj
  static constexpr int kCount = 12;

  std::vector<at::Tensor> flat() const;                    // the 12 tensors in the order above
  static BlockWeights fromFlat(const at::Tensor* first);  // reads kCount tensors
};

struct GptWeights {
  at::Tensor wte;               // (V, C)  token embedding, also the LM head
  at::Tensor wpe;               // (Tmax, C)
  std::vector<BlockWeights> blocks;  // L
  at::Tensor lnf_w, lnf_b;      // (C), (C)

  // All tensors in a fixed order (wte, wpe, block 0 ... block L-1, lnf), and their names.
  std::vector<at::Tensor> flat() const;
  static GptWeights fromFlat(const std::vector<at::Tensor>& flat, int64_t n_layer);
  static std::vector<std::string> names(int64_t n_layer);
  // Whether flat()[i] gets weight decay (2-D matrices only, as in nanoGPT/Megatron).
  static std::vector<bool> decayMask(int64_t n_layer);
};

// GPT-2 initialised fp32 weights on `device`, deterministic for a seed.
GptWeights initGpt(const workloads::Workload& w, uint64_t seed, const at::Device& device);

// Mean next-token cross-entropy over (B, T). inputs/targets (B, T) int64. Computes in the weights'
// dtype; the loss is fp32. ckpt selects activation recomputation in backward.
at::Tensor gptLoss(const GptWeights& w, int64_t n_head, const at::Tensor& inputs, const at::Tensor& targets,
                   Checkpointing ckpt);

}  // namespace trainscope::runtime
