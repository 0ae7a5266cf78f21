// gpt.cpp — GPT forward pass. Backward is LibTorch autograd, except that checkpointed regions
// (checkpoint.cpp) save only their inputs and recompute in backward.
#include "trainscope/runtime/gpt.h"

#include <ATen/ATen.h>

#include <cmath>

#include "checkpoint.h"
#include "fused_head.h"
#include "linear.h"

namespace trainscope::runtime {

std::vector<at::Tensor> BlockWeights::flat() const {
  return {ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b};
}

BlockWeights BlockWeights::fromFlat(const at::Tensor* f) {
  BlockWeights b;
  for (at::Tensor* t : {&b.ln1_w, &b.ln1_b, &b.qkv_w, &b.qkv_b, &b.proj_w, &b.proj_b, &b.ln2_w, &b.ln2_b, &b.fc_w,
                        &b.fc_b, &b.fcproj_w, &b.fcproj_b})
    *t = *f++;
  return b;
}

std::vector<at::Tensor> GptWeights::flat() const {
  std::vector<at::Tensor> out{wte, wpe};
  out.reserve(2 + blocks.size() * BlockWeights::kCount + 2);
  for (const auto& b : blocks) {
    auto bf = b.flat();
    out.insert(out.end(), bf.begin(), bf.end());
  }
  out.push_back(lnf_w);
  out.push_back(lnf_b);
  return out;
}

GptWeights GptWeights::fromFlat(const std::vector<at::Tensor>& f, int64_t n_layer) {
  GptWeights w;
  size_t i = 0;
  w.wte = f[i++];
  w.wpe = f[i++];
  for (int64_t l = 0; l < n_layer; ++l, i += BlockWeights::kCount) w.blocks.push_back(BlockWeights::fromFlat(&f[i]));
  w.lnf_w = f[i++];
  w.lnf_b = f[i++];
  return w;
}

std::vector<std::string> GptWeights::names(int64_t n_layer) {
  std::vector<std::string> n{"wte", "wpe"};
  for (int64_t l = 0; l < n_layer; ++l)
    for (const char* s : {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                          "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                          "mlp.c_proj.weight", "mlp.c_proj.bias"})
      n.push_back("h." + std::to_string(l) + "." + s);
  n.push_back("ln_f.weight");
  n.push_back("ln_f.bias");
  return n;
}

std::vector<bool> GptWeights::decayMask(int64_t n_layer) {
  std::vector<bool> m{true, true};
  for (int64_t l = 0; l < n_layer; ++l)
    for (bool d : {false, false, true, false, true, false, false, false, true, false, true, false}) m.push_back(d);
  m.push_back(false);
  m.push_back(false);
  return m;
}

GptWeights initGpt(const workloads::Workload& wl, uint64_t seed, const at::Device& device) {
  const int64_t C = wl.n_embd, V = wl.vocab_size, L = wl.n_layer;
  // Initialise on the CPU with a private generator so every device gets identical weights.
  at::Generator gen = at::detail::createCPUGenerator(seed);
  auto opts = at::TensorOptions().dtype(at::kFloat);
  auto normal = [&](std::initializer_list<int64_t> shape, double std) {
    return at::empty(shape, opts).normal_(0.0, std, gen);
  };
  const double std = 0.02, resid_std = 0.02 / std::sqrt(2.0 * double(L));
  GptWeights w;
  w.wte = normal({V, C}, std);
  w.wpe = normal({wl.n_positions, C}, std);
  for (int64_t l = 0; l < L; ++l) {
    BlockWeights b;
    b.ln1_w = at::ones({C}, opts);
    b.ln1_b = at::zeros({C}, opts);
    b.qkv_w = normal({3 * C, C}, std);
    b.qkv_b = at::zeros({3 * C}, opts);
    b.proj_w = normal({C, C}, resid_std);
    b.proj_b = at::zeros({C}, opts);
    b.ln2_w = at::ones({C}, opts);
    b.ln2_b = at::zeros({C}, opts);
    b.fc_w = normal({4 * C, C}, std);
    b.fc_b = at::zeros({4 * C}, opts);
    b.fcproj_w = normal({C, 4 * C}, resid_std);
    b.fcproj_b = at::zeros({C}, opts);
    w.blocks.push_back(std::move(b));
  }
  w.lnf_w = at::ones({C}, opts);
  w.lnf_b = at::zeros({C}, opts);
  std::vector<at::Tensor> flat = w.flat();
  for (auto& t : flat) t = t.to(device).requires_grad_(true);
  return GptWeights::fromFlat(flat, L);
}

// ---- forward ----------------------------------------------------------------------------------

namespace detail {

// Causal attention core: qkv (B, T, 3C) -> y (B, T, C). The part selective checkpointing recomputes.
at::Tensor attentionCore(const at::Tensor& qkv, int64_t n_head) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, HS = C / n_head;
  auto parts = qkv.split(C, /*dim=*/2);                                   // 3 x (B, T, C)
  at::Tensor q = parts[0].view({B, T, n_head, HS}).transpose(1, 2);       // (B, NH, T, HS)
  at::Tensor k = parts[1].view({B, T, n_head, HS}).transpose(1, 2);       // (B, NH, T, HS)
  at::Tensor v = parts[2].view({B, T, n_head, HS}).transpose(1, 2);       // (B, NH, T, HS)
  at::Tensor y = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                                  /*is_causal=*/true);   // (B, NH, T, HS)
  return y.transpose(1, 2).reshape({B, T, C});                            // (B, T, C)
}

// One pre-LN transformer block: x (B, T, C) -> (B, T, C).
at::Tensor blockForward(const BlockWeights& p, const at::Tensor& x, int64_t n_head, bool selective) {
  const int64_t C = x.size(2);
  at::Tensor h = at::layer_norm(x, {C}, p.ln1_w, p.ln1_b, 1e-5);        // (B, T, C)
  at::Tensor qkv = linear(h, p.qkv_w, p.qkv_b);                      // (B, T, 3C)
  at::Tensor y = selective ? checkpointAttention(qkv, n_head)            // (B, T, C)
                           : attentionCore(qkv, n_head);
  at::Tensor x1 = x + linear(y, p.proj_w, p.proj_b);                 // (B, T, C)
  h = at::layer_norm(x1, {C}, p.ln2_w, p.ln2_b, 1e-5);                   // (B, T, C)
  at::Tensor f = at::gelu(linear(h, p.fc_w, p.fc_b), "tanh");        // (B, T, 4C)
  return x1 + linear(f, p.fcproj_w, p.fcproj_b);                     // (B, T, C)
}

}  // namespace detail

at::Tensor gptLoss(const GptWeights& w, int64_t n_head, const at::Tensor& inputs, const at::Tensor& targets,
                   Checkpointing ckpt) {
  const int64_t B = inputs.size(0), T = inputs.size(1), C = w.wte.size(1);
  at::Tensor x = at::embedding(w.wte, inputs) + w.wpe.narrow(0, 0, T);   // (B, T, C)
  for (const BlockWeights& b : w.blocks) {
    if (ckpt == Checkpointing::Full) x = checkpointBlock(b, x, n_head); // saves x only
    else x = detail::blockForward(b, x, n_head, ckpt == Checkpointing::Selective);
  }
  x = at::layer_norm(x, {C}, w.lnf_w, w.lnf_b, 1e-5);                    // (B, T, C)
  // Tied LM head + cross-entropy, fused and chunked: the (B*T, V) logits never exist at once.
  return lmHeadCrossEntropy(x.view({B * T, C}), w.wte, targets.reshape({B * T}));  // scalar, mean, fp32
}

}  // namespace trainscope::runtime
