// gemm_tn.h — one GEMM shape done by hand: the weight gradient of a linear layer.
//
//   C (N, K) [+]= Aᵀ B,   A (M, N) = dy,  B (M, K) = x,   all fp32, row-major, unit column stride
//   and optionally  bias (N) [+]= Σ_m A[m, :]  (the bias gradient, from the same pass over A)
//
// The reduction runs over the rows of both operands, so each step of it is an outer product of a
// row slice of A and a row slice of B: no transpose and no packing. Register tile 8 × 48 (24 zmm
// accumulators), A broadcast from its row, B loaded 3 vectors at a time; tiles walk N outermost so
// that an (M, 8) strip of A is read from memory once. Single-threaded (the core lanes call it, one
// per core). AVX-512 only: available() is false elsewhere and callers keep their BLAS path.
#pragma once

#include <cstdint>

namespace trainscope::runtime::kernels {

bool gemmTNAvailable();  // AVX-512F on this CPU, and not turned off by TRAINSCOPE_DISABLE_CPU_KERNELS=1

// Requires K % 16 == 0, lda ≥ N, ldb ≥ K, ldc ≥ K. bias may be null.
void gemmTN(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
            int64_t ldc, bool accumulate, float* bias = nullptr);

}  // namespace trainscope::runtime::kernels
