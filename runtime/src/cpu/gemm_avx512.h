// gemm_avx512.h — one GEMM shape done by hand: the weight gradient of a linear layer.
//
//   C (N, K) [+]= Aᵀ B,   A (M, N) = dy,  B (M, K) = x,   all fp32, row-major, unit column stride
//   and optionally  bias (N) [+]= Σ_m A[m, :]  (the bias gradient, from the same pass over A)
//
// The reduction runs over the rows of both operands, so each step of it is an outer product of a
// row slice of A and a row slice of B: no transpose and no packing. Register tile 8 × 48 (24 zmm
// accumulators), A broadcast from its row, B loaded 3 vectors at a time; tiles walk N outermost so
// that an (M, 8) strip of A is read from memory once. Single-threaded (the core lanes call it, one
// per core). AVX-512 only: handGemmsAvailable() is false elsewhere and callers keep their BLAS path.
#pragma once

#include <cstdint>

namespace trainscope::runtime::kernels {

// AVX-512F on this CPU, not turned off by TRAINSCOPE_DISABLE_CPU_KERNELS=1, and allowed.
bool handGemmsAvailable();
// Tests: false makes handGemmsAvailable() false, so callers take their BLAS fallbacks.
void allowHandGemms(bool allowed);

// Requires K % 16 == 0, lda ≥ N, ldb ≥ K, ldc ≥ K. bias may be null.
void gemmTN(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
            int64_t ldc, bool accumulate, float* bias = nullptr);

// 2. gemmSmall: the attention kernel's per-head GEMMs, operands already in L1/L2 (at most a few
// hundred rows by 64-128 columns), so no packing: a 6 × 64 register tile reads B's rows in place and
// broadcasts A's entries through two strides, which covers both A and Aᵀ:
//   C (M, N) = alpha · Σ_r A(i, r) B(r, :) + beta · C,   A(i, r) = a[i · a_row + r · a_col]
// (a_row = lda, a_col = 1 for A; a_row = 1, a_col = lda for Aᵀ). B row-major (R, N), row stride ldb;
// C row-major, row stride ldc. beta = 0 never reads C. Any M, N, R (column tails are masked).
void gemmSmall(int64_t M, int64_t N, int64_t R, float alpha, const float* a, int64_t a_row, int64_t a_col,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace trainscope::runtime::kernels
