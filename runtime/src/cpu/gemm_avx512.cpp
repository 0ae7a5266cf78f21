// gemm_avx512.cpp — see gemm_avx512.h. GotoBLAS-style blocking for this one shape:
//   for each chunk of kChunk reduction rows m:
//     pack B's chunk into column panels of 48 floats, each (kChunk, 48) contiguous (24 KiB: L1)
//     for each strip of 8 columns n of A: pack it to (kChunk, 8) contiguous (4 KiB), summing the
//       columns for the bias on the way; then one 8 × 48 register tile per panel.
// Packing matters: A's rows are N floats apart (4 or 16 KiB for N = 1024 or 4096), so reading a strip
// in place maps every row to the same L1 set and defeats the prefetchers.
#include "cpu/gemm_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

namespace trainscope::runtime::kernels {
namespace {

constexpr int kRows = 8;       // tile rows of C (columns of A)
constexpr int kVectors = 3;    // tile columns of C, in 16-float vectors
constexpr int kPanel = 16 * kVectors;
constexpr int64_t kChunk = 256;  // reduction rows per packed chunk
constexpr int64_t kPrefetchRows = 8;  // how far ahead packing prefetches

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

std::atomic<bool> g_allowed{true};

}  // namespace

bool handGemmsAvailable() {
  static const bool ok = detect();
  return ok && g_allowed.load(std::memory_order_relaxed);
}

void allowHandGemms(bool allowed) { g_allowed.store(allowed); }

__attribute__((target("avx512f"))) void gemmTN(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                                                const float* B, int64_t ldb, float* C, int64_t ldc, bool accumulate,
                                                float* bias) {
  // Panels of 48 columns (K % 16 == 0); a 16-column remainder turns the last 48 + 16 into 32 + 32, since an 8 × 16
  // tile does 8 FMAs per 9 loads and would run at a third of the rate.
  std::vector<int64_t> widths(K / kPanel, kPanel);
  if (K % kPanel == 32 || (K % kPanel == 16 && widths.empty())) widths.push_back(K % kPanel);
  else if (K % kPanel == 16) widths.back() = 32, widths.push_back(32);
  thread_local std::vector<float> a_pack, b_pack;
  a_pack.resize(kChunk * kRows);
  b_pack.resize(kChunk * kPanel * widths.size());
  if (bias && !accumulate) std::fill(bias, bias + N, 0.0f);
  for (int64_t m0 = 0; m0 < M; m0 += kChunk) {
    const int64_t mc = std::min(kChunk, M - m0);
    const bool acc = accumulate || m0 > 0;
    // B's chunk → panels: panel p holds columns [48p, 48p + width) of rows m0.., row after row.
    // Row by row, all panels of a row at once (its K floats are contiguous), prefetching a few rows
    // ahead: B is usually a saved activation, cold in DRAM.
    for (int64_t m = 0; m < mc; ++m) {
      const float* src = B + (m0 + m) * ldb;
      if (m + kPrefetchRows < mc)
        for (int64_t k = 0; k < K; k += 16) _mm_prefetch(reinterpret_cast<const char*>(src + kPrefetchRows * ldb + k), _MM_HINT_T0);
      for (size_t p = 0, k0 = 0; p < widths.size(); k0 += widths[p++]) {
        float* dst = b_pack.data() + p * kChunk * kPanel + m * widths[p];
        for (int64_t j = 0; j < widths[p]; j += 16) _mm512_storeu_ps(dst + j, _mm512_loadu_ps(src + k0 + j));
      }
    }
    for (int64_t n0 = 0; n0 < N; n0 += kRows) {
      const int rows = int(std::min<int64_t>(kRows, N - n0));
      __m256 colsum = _mm256_setzero_ps();
      for (int64_t m = 0; m < mc; ++m) {
        const float* src = A + (m0 + m) * lda + n0;
        if (m + kPrefetchRows < mc) _mm_prefetch(reinterpret_cast<const char*>(src + kPrefetchRows * lda), _MM_HINT_T0);
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
      for (size_t p = 0, k0 = 0; p < widths.size(); k0 += widths[p++]) {
        const float* b = b_pack.data() + p * kChunk * kPanel;
        float* c = C + n0 * ldc + k0;
        const int64_t width = widths[p];
        if (width == 48) {
          rowTile<3>(rows, mc, a_pack.data(), b, c, ldc, acc);
        } else if (width == 32) {
          rowTile<2>(rows, mc, a_pack.data(), b, c, ldc, acc);
        } else {
          rowTile<1>(rows, mc, a_pack.data(), b, c, ldc, acc);
        }
      }
    }
  }
}

namespace {

// C[0:MR, 0:16V] = alpha · Σ_r A(i, r) B(r, :) + beta · C. Masked: the last vector's columns
// are masked by `last`. Kept a template flag because GCC, given a masked load inside the loop,
// keeps the accumulators in memory and runs at 40% of the unmasked rate.
template <int MR, int V, bool Masked>
__attribute__((target("avx512f"))) inline void smallTile(int64_t R, float alpha, const float* a, int64_t a_row,
                                                         int64_t a_col, const float* b, int64_t ldb, float beta,
                                                         float* c, int64_t ldc, __mmask16 last) {
  __m512 acc[MR][V];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < V; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int64_t r = 0; r < R; ++r, a += a_col, b += ldb) {
    __m512 bv[V];
    for (int j = 0; j < V; ++j)
      bv[j] = Masked && j == V - 1 ? _mm512_maskz_loadu_ps(last, b + 16 * j) : _mm512_loadu_ps(b + 16 * j);
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_set1_ps(a[i * a_row]);
      for (int j = 0; j < V; ++j) acc[i][j] = _mm512_fmadd_ps(av, bv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < V; ++j) {
      const __mmask16 mask = Masked && j == V - 1 ? last : __mmask16(0xffff);
      float* p = c + i * ldc + 16 * j;
      __m512 out = _mm512_mul_ps(acc[i][j], _mm512_set1_ps(alpha));
      if (beta != 0.0f) out = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, p), _mm512_set1_ps(beta), out);
      _mm512_mask_storeu_ps(p, mask, out);
    }
}

template <int V, bool Masked>
__attribute__((target("avx512f"))) void smallRows(int rows, int64_t R, float alpha, const float* a, int64_t a_row,
                                                  int64_t a_col, const float* b, int64_t ldb, float beta, float* c,
                                                  int64_t ldc, __mmask16 last) {
  switch (rows) {
    case 6: return smallTile<6, V, Masked>(R, alpha, a, a_row, a_col, b, ldb, beta, c, ldc, last);
    case 5: return smallTile<5, V, Masked>(R, alpha, a, a_row, a_col, b, ldb, beta, c, ldc, last);
    case 4: return smallTile<4, V, Masked>(R, alpha, a, a_row, a_col, b, ldb, beta, c, ldc, last);
    case 3: return smallTile<3, V, Masked>(R, alpha, a, a_row, a_col, b, ldb, beta, c, ldc, last);
    case 2: return smallTile<2, V, Masked>(R, alpha, a, a_row, a_col, b, ldb, beta, c, ldc, last);
    default: return smallTile<1, V, Masked>(R, alpha, a, a_row, a_col, b, ldb, beta, c, ldc, last);
  }
}

template <bool Masked>
__attribute__((target("avx512f"))) void smallColumns(int vectors, int rows, int64_t R, float alpha, const float* a,
                                                     int64_t a_row, int64_t a_col, const float* b, int64_t ldb,
                                                     float beta, float* c, int64_t ldc, __mmask16 last) {
  switch (vectors) {
    case 4: return smallRows<4, Masked>(rows, R, alpha, a, a_row, a_col, b, ldb, beta, c, ldc, last);
    case 3: return smallRows<3, Masked>(rows, R, alpha, a, a_row, a_col, b, ldb, beta, c, ldc, last);
    case 2: return smallRows<2, Masked>(rows, R, alpha, a, a_row, a_col, b, ldb, beta, c, ldc, last);
    default: return smallRows<1, Masked>(rows, R, alpha, a, a_row, a_col, b, ldb, beta, c, ldc, last);
  }
}

}  // namespace

__attribute__((target("avx512f"))) void gemmSmall(int64_t M, int64_t N, int64_t R, float alpha, const float* a,
                                                  int64_t a_row, int64_t a_col, const float* b, int64_t ldb,
                                                  float beta, float* c, int64_t ldc) {
  constexpr int kTileRows = 6, kTileVectors = 4;
  for (int64_t j0 = 0; j0 < N; j0 += 16 * kTileVectors) {
    const int64_t cols = std::min<int64_t>(16 * kTileVectors, N - j0);
    const int vectors = int((cols + 15) / 16);
    const __mmask16 last = cols % 16 == 0 ? __mmask16(0xffff) : __mmask16((1u << (cols % 16)) - 1);
    for (int64_t i0 = 0; i0 < M; i0 += kTileRows) {
      const int rows = int(std::min<int64_t>(kTileRows, M - i0));
      const float* ai = a + i0 * a_row;
      float* ci = c + i0 * ldc + j0;
      if (cols % 16 == 0) smallColumns<false>(vectors, rows, R, alpha, ai, a_row, a_col, b + j0, ldb, beta, ci, ldc, last);
      else smallColumns<true>(vectors, rows, R, alpha, ai, a_row, a_col, b + j0, ldb, beta, ci, ldc, last);
    }
  }
}

}  // namespace trainscope::runtime::kernels
