// linear.h — y = x W^T + b with a faster CPU GEMM path (internal to the runtime).
#pragma once

#include <ATen/core/Tensor.h>

namespace trainscope::runtime {

// x (..., K), w (N, K), b (N) or undefined → (..., N). Same result and autograd as at::linear.
// On the CPU in fp32 the forward GEMM and backward's dX GEMM go through oneDNN, whose kernels use
// AVX-512 where MKL (LibTorch's default BLAS) falls back to its generic path on non-Intel CPUs;
// elsewhere it is at::linear. Under --precision fp8 a registered block weight (model/fp8.h) goes
// through the FP8 GEMMs instead; so does linearAdd.
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {});

// residual + linear(x, w, b), residual shaped like the output. On the oneDNN path the add is the
// GEMM's post-op (one pass, no separate add kernel); elsewhere the two ops.
at::Tensor linearAdd(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const at::Tensor& residual);

// x (M, K) · w^T (N, K) → (M, N) without autograd, same choice of GEMM as linear().
at::Tensor mmNT(const at::Tensor& x, const at::Tensor& w);

// Whether the oneDNN path is in use (LibTorch built with it, CPU, not disabled by
// TRAINSCOPE_DISABLE_ONEDNN=1).
bool onednnLinearAvailable();

// Whether aᵀ b (a (M, N), b (M, K), CPU fp32, rows contiguous, K % 16 == 0) can go through the
// hand-written weight-gradient GEMM (gemm_avx512.h): AVX-512 present, neither
// TRAINSCOPE_DISABLE_CPU_KERNELS=1 nor TRAINSCOPE_DISABLE_GEMM_TN=1 set.
bool gemmTNUsable(const at::Tensor& a, const at::Tensor& b);

// c (N, K) [+]= aᵀ b through that GEMM, and bias (N) [+]= Σ_m a when defined; the N dimension is
// split over LibTorch's intra-op threads (one thread inside the core lanes). Needs gemmTNUsable.
void gemmTN(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, bool accumulate,
            const at::Tensor& bias = {});

}  // namespace trainscope::runtime
