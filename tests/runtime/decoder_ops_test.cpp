// decoder_ops_test.cpp — the Llama block's fused ops against the eager references they replace
// (values and gradients): the grouped-query attention core (each K/V head read for its group of
// query heads, no repeated copy) against SDPA on repeated K/V heads, RMSNorm against transformers'
// five eager ops, RoPE on the fused projection against rotate_half, SwiGLU against silu(g)·u.
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "cpu/cpu_ops.h"
#include "cpu/decoder_ops.h"
#include "cpu/gemm_avx512.h"
#include "model/attention.h"
#include "util.h"

namespace rt = trainscope::runtime;
using trainscope::testing::relErr;

namespace {

// SDPA on K/V heads repeated for their query heads: qkv (B, T, (H + 2KV)·D) → (B, T, H·D).
at::Tensor gqaReference(const at::Tensor& qkv, int64_t H, int64_t KV) {
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / (H + 2 * KV);
  auto parts = qkv.split_with_sizes({H * D, KV * D, KV * D}, 2);
  auto heads = [&](const at::Tensor& t, int64_t n) {
    return t.reshape({B, T, n, D}).repeat_interleave(H / n, 2).transpose(1, 2);
  };
  at::Tensor y = at::scaled_dot_product_attention(heads(parts[0], H), heads(parts[1], KV), heads(parts[2], KV), {},
                                                  0.0, true);
  return y.transpose(1, 2).reshape({B, T, H * D});
}

}  // namespace

TEST(DecoderOps, GroupedQueryAttentionMatchesRepeatedHeadsValuesAndGradients) {
  // Groups of 2 and 4 query heads, multi-query (KV = 1), multi-head (KV = H); T = 77 ends in a
  // ragged query block, T = 128 is the benchmark's shape. Both GEMM paths.
  for (bool hand : {true, false})
  for (auto [B, T, D, H, KV] : std::vector<std::array<int64_t, 5>>{
           {2, 77, 32, 4, 2}, {2, 128, 64, 4, 2}, {1, 40, 16, 8, 2}, {2, 33, 16, 3, 1}, {1, 50, 16, 2, 2}}) {
    rt::kernels::allowHandGemms(hand);
    at::manual_seed(21);
    at::Tensor qkv0 = at::randn({B, T, (H + 2 * KV) * D}), dy = at::randn({B, T, H * D});
    at::Tensor a = qkv0.clone().requires_grad_(true), b = qkv0.clone().requires_grad_(true);
    at::Tensor ya = rt::cpu_ops::causalAttention(a, H, KV), yb = gqaReference(b, H, KV);
    ya.backward(dy);
    yb.backward(dy);
    EXPECT_LE(relErr(ya, yb), 1e-5) << "T=" << T << " H=" << H << " KV=" << KV;
    EXPECT_LE(relErr(a.grad(), b.grad()), 1e-5) << "T=" << T << " H=" << H << " KV=" << KV << " hand " << hand;
  }
  rt::kernels::allowHandGemms(true);
}

TEST(DecoderOps, SlidingWindowAttentionMatchesAMaskedReference) {
  // transformers' sliding-window mask: query t sees keys t - window < j <= t. Windows inside one query
  // block, across blocks, of one key, and wider than the sequence (= causal); GQA and multi-head.
  for (bool hand : {true, false})
  for (auto [T, H, KV, W] : std::vector<std::array<int64_t, 4>>{
           {77, 4, 2, 5}, {128, 4, 2, 40}, {70, 2, 2, 33}, {40, 4, 1, 1}, {20, 4, 2, 64}}) {
    rt::kernels::allowHandGemms(hand);
    const int64_t B = 2, D = 16;
    at::manual_seed(26);
    at::Tensor qkv0 = at::randn({B, T, (H + 2 * KV) * D}), dy = at::randn({B, T, H * D});
    at::Tensor a = qkv0.clone().requires_grad_(true), b = qkv0.clone().requires_grad_(true);
    at::Tensor ya = rt::cpu_ops::causalAttention(a, H, KV, W);
    auto parts = b.split_with_sizes({H * D, KV * D, KV * D}, 2);
    auto heads = [&](const at::Tensor& t, int64_t n) {
      return t.reshape({B, T, n, D}).repeat_interleave(H / n, 2).transpose(1, 2);
    };
    const at::Tensor i = at::arange(T).view({T, 1}), j = at::arange(T).view({1, T});
    const at::Tensor allowed = (j <= i).logical_and(j > i - W);
    at::Tensor yb = at::scaled_dot_product_attention(heads(parts[0], H), heads(parts[1], KV), heads(parts[2], KV),
                                                     allowed, 0.0, false)
                        .transpose(1, 2)
                        .reshape({B, T, H * D});
    ya.backward(dy);
    yb.backward(dy);
    EXPECT_LE(relErr(ya, yb), 1e-5) << "T=" << T << " W=" << W;
    EXPECT_LE(relErr(a.grad(), b.grad()), 1e-5) << "T=" << T << " W=" << W << " hand " << hand;
  }
  rt::kernels::allowHandGemms(true);
}

TEST(DecoderOps, RmsNormMatchesEagerReferenceValuesAndGradients) {
  at::manual_seed(22);
  for (auto [R, C] : std::vector<std::array<int64_t, 2>>{{8 * 128, 256}, {3 * 7, 50}, {130, 17}}) {
    at::Tensor x0 = at::randn({1, R, C}) * 3 + 0.5, w0 = at::randn({C}), dy = at::randn({1, R, C});
    at::Tensor xa = x0.clone().requires_grad_(true), wa = w0.clone().requires_grad_(true);
    at::Tensor xb = x0.clone().requires_grad_(true), wb = w0.clone().requires_grad_(true);
    at::Tensor ya = rt::cpu_ops::rmsNorm(xa, wa, 1e-5), yb = rt::cpu_ops::rmsNormReference(xb, wb, 1e-5);
    ya.backward(dy);
    yb.backward(dy);
    EXPECT_LE(relErr(ya, yb), 1e-6) << "C=" << C;
    EXPECT_LE((ya - yb).abs().max().item<double>() / yb.abs().max().item<double>(), 1e-6) << "C=" << C;
    EXPECT_LE(relErr(xa.grad(), xb.grad()), 1e-5) << "C=" << C;
    EXPECT_LE(relErr(wa.grad(), wb.grad()), 1e-5) << "C=" << C;
  }
}

TEST(DecoderOps, SixteenBitTensorsTakeTheEagerOps) {
  // bf16 (and any GPU tensor) runs transformers' eager ops, keeping what they keep (layer_ops.cpp).
  at::manual_seed(23);
  at::Tensor x = at::randn({4, 9, 64}).to(at::kBFloat16), w = at::randn({64}).to(at::kBFloat16);
  EXPECT_TRUE(at::equal(rt::cpu_ops::rmsNorm(x, w, 1e-6), rt::cpu_ops::rmsNormReference(x, w, 1e-6)));
  at::Tensor f = at::randn({4, 9, 64}).to(at::kBFloat16);
  EXPECT_TRUE(at::equal(rt::cpu_ops::swiglu(f), at::silu(f.narrow(2, 0, 32)) * f.narrow(2, 32, 32)));
}

TEST(DecoderOps, RopeOnTheFusedProjectionMatchesRotateHalf) {
  // Positions as a context-parallel rank holds them (not 0..T-1) and Llama 3's frequency scaling.
  rt::BlockArch a;
  a.rope = true;
  a.rope_theta = 500000.0;
  a.rope_scaling.factor = 8.0;
  a.rope_scaling.low_freq_factor = 1.0;
  a.rope_scaling.high_freq_factor = 4.0;
  a.rope_scaling.original_max_position_embeddings = 64;
  const int64_t B = 2, T = 12, H = 4, KV = 2, D = 16;
  at::manual_seed(24);
  at::Tensor pos = at::cat({at::arange(0, 6, at::kLong), at::arange(90, 96, at::kLong)});
  at::Tensor qkv0 = at::randn({B, T, (H + 2 * KV) * D}), dy = at::randn({B, T, (H + 2 * KV) * D});
  at::Tensor xa = qkv0.clone().requires_grad_(true), xb = qkv0.clone().requires_grad_(true);
  const rt::RopeTable half = rt::ropeHalfTable(pos, D, a);
  at::Tensor ya = rt::cpu_ops::ropeQkv(xa, half.cos, half.sin, H, KV);
  const rt::RopeTable full = rt::ropeTable(pos, D, a, at::kFloat);
  auto parts = xb.split_with_sizes({H * D, KV * D, KV * D}, 2);
  at::Tensor yb = at::cat({rt::applyRope(parts[0].view({B, T, H, D}), full).reshape({B, T, H * D}),
                           rt::applyRope(parts[1].view({B, T, KV, D}), full).reshape({B, T, KV * D}), parts[2]}, 2);
  ya.backward(dy);
  yb.backward(dy);
  EXPECT_LE(relErr(ya, yb), 1e-6);
  EXPECT_LE(relErr(xa.grad(), xb.grad()), 1e-6);
  EXPECT_TRUE(at::equal(ya.narrow(2, (H + KV) * D, KV * D), qkv0.narrow(2, (H + KV) * D, KV * D)));  // v as it was
}

TEST(DecoderOps, SwigluMatchesSiluTimesUp) {
  at::manual_seed(25);
  at::Tensor f0 = at::cat({at::randn({3, 5, 2 * 70}) * 3, at::linspace(-30, 30, 140).view({1, 1, 140}).expand({3, 1, 140})}, 1);
  at::Tensor dy = at::randn({3, 6, 70});
  at::Tensor a = f0.clone().requires_grad_(true), b = f0.clone().requires_grad_(true);
  at::Tensor ya = rt::cpu_ops::swiglu(a);
  auto gu = b.chunk(2, 2);
  at::Tensor yb = at::silu(gu[0]) * gu[1];
  ya.backward(dy);
  yb.backward(dy);
  EXPECT_LE(relErr(ya, yb), 1e-6);
  EXPECT_LE(relErr(a.grad(), b.grad()), 1e-5);
}
