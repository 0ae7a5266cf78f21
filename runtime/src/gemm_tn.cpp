// gemm_tn.cpp — see gemm_tn.h. GotoBLAS-style blocking for this one shape:
//   for each chunk of kChunk reduction rows m:
//     pack B's chunk into column panels of 48 floats, each (kChunk, 48) contiguous (24 KiB: L1)
//     for each strip of 8 columns n of A: pack it to (kChunk, 8) contiguous (4 KiB), summing the
//       columns for the bias on the way; then one 8 × 48 register tile per panel.
// Packing matters: A's rows are N floats apart (4 or 16 KiB for N = 1024 or 4096), so reading a strip
// in place maps every row to the same L1 set and defeats the prefetchers.
#include "gemm_tn.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

namespace trainscope::runtime::kernels {
namespace {

constexpr int kRows = 8;       // tile rows of C (columns of A)
constexpr int kVectors = 3;    // tile columns of C, in 16-float vectors
constexpr int kPanel = 16 * kVectors;
constexpr int64_t kChunk = 128;  // reduction rows per packed chunk

// C[0:R, 0:16V] (+)= Σ_m a[m, 0:R]ᵀ b[m, 0:16V] over m < M; a (M, 8) and b (M, 16V) packed.
template <int R, int V>
__attribute__((target("avx512f"))) inline void tile(int64_t M, const float* a, const float* b, float* C,
                                                     int64_t ldc, bool accumulate) {
  __m512 c[R][V];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < V; ++j) c[i][j] = _mm512_setzero_ps();
  for (int64_t m = 0; m < M; ++m, a += kRows, b += 16 * V) {
    __m512 bv[V];
    for (int j = 0; j < V; ++j) bv[j] = _mm512_loadu_ps(b + 16 * j);
    for (int i = 0; i < R; ++i) {
      const __m512 av = _mm512_set1_ps(a[i]);
      for (int j = 0; j < V; ++j) c[i][j] = _mm512_fmadd_ps(av, bv[j], c[i][j]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < V; ++j) {
      float* p = C + i * ldc + 16 * j;
      _mm512_storeu_ps(p, accumulate ? _mm512_add_ps(_mm512_loadu_ps(p), c[i][j]) : c[i][j]);
    }
}

template <int V>
__attribute__((target("avx512f"))) void rowTile(int rows, int64_t M, const float* a, const float* b, float* C,
                                                 int64_t ldc, bool accumulate) {
  switch (rows) {
    case 8: return tile<8, V>(M, a, b, C, ldc, accumulate);
    case 7: return tile<7, V>(M, a, b, C, ldc, accumulate);
    case 6: return tile<6, V>(M, a, b, C, ldc, accumulate);
    case 5: return tile<5, V>(M, a, b, C, ldc, accumulate);
    case 4: return tile<4, V>(M, a, b, C, ldc, accumulate);
    case 3: return tile<3, V>(M, a, b, C, ldc, accumulate);
    case 2: return tile<2, V>(M, a, b, C, ldc, accumulate);
    default: return tile<1, V>(M, a, b, C, ldc, accumulate);
  }
}

bool detect() {
  const char* off = std::getenv("TRAINSCOPE_DISABLE_CPU_KERNELS");
  if (off && std::string(off) == "1") return false;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}

}  // namespace

bool gemmTNAvailable() {
  static const bool ok = detect();
  return ok;
}

__attribute__((target("avx512f"))) void gemmTN(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                                                const float* B, int64_t ldb, float* C, int64_t ldc, bool accumulate,
                                                float* bias) {
  thread_local std::vector<float> a_pack, b_pack;
  a_pack.resize(kChunk * kRows);
  b_pack.resize(kChunk * ((K + kPanel - 1) / kPanel) * kPanel);
  if (bias && !accumulate) std::fill(bias, bias + N, 0.0f);
  for (int64_t m0 = 0; m0 < M; m0 += kChunk) {
    const int64_t mc = std::min(kChunk, M - m0);
    const bool acc = accumulate || m0 > 0;
    // B's chunk → panels: panel p holds columns [48p, 48p + width) of rows m0.., row after row.
    for (int64_t k0 = 0; k0 < K; k0 += kPanel) {
      const int64_t width = std::min<int64_t>(kPanel, K - k0);
      float* dst = b_pack.data() + (k0 / kPanel) * kChunk * kPanel;
      for (int64_t m = 0; m < mc; ++m) std::copy_n(B + (m0 + m) * ldb + k0, width, dst + m * width);
    }
    for (int64_t n0 = 0; n0 < N; n0 += kRows) {
      const int rows = int(std::min<int64_t>(kRows, N - n0));
      __m256 colsum = _mm256_setzero_ps();
      for (int64_t m = 0; m < mc; ++m) {
        const float* src = A + (m0 + m) * lda + n0;
        float* dst = a_pack.data() + m * kRows;
        if (rows == kRows) {
          const __m256 v = _mm256_loadu_ps(src);
          _mm256_storeu_ps(dst, v);
          colsum = _mm256_add_ps(colsum, v);
        } else {
          std::copy_n(src, rows, dst);
        }
      }
      if (bias) {
        if (rows == kRows) {
          _mm256_storeu_ps(bias + n0, _mm256_add_ps(_mm256_loadu_ps(bias + n0), colsum));
        } else {
          for (int i = 0; i < rows; ++i)
            for (int64_t m = 0; m < mc; ++m) bias[n0 + i] += a_pack[m * kRows + i];
        }
      }
      for (int64_t k0 = 0; k0 < K; k0 += kPanel) {
        const int vectors = int(std::min<int64_t>(kVectors, (K - k0) / 16));
        const float* b = b_pack.data() + (k0 / kPanel) * kChunk * kPanel;
        float* c = C + n0 * ldc + k0;
        if (vectors == 3) rowTile<3>(rows, mc, a_pack.data(), b, c, ldc, acc);
        else if (vectors == 2) rowTile<2>(rows, mc, a_pack.data(), b, c, ldc, acc);
        else rowTile<1>(rows, mc, a_pack.data(), b, c, ldc, acc);
      }
    }
  }
}

}  // namespace trainscope::runtime::kernels
