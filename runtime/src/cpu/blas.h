// blas.h — the one wrapper around the BLAS that LibTorch's CPU library carries (MKL in the x86-64
// wheel, OpenBLAS on aarch64). Row-major, float, single call: for the small per-head GEMMs of the
// CPU attention kernel, where building a tensor per call would cost more than the GEMM.
#pragma once

#include <cstdint>

namespace trainscope::runtime::blas {

// Whether LibTorch's CPU library exports the BLAS (sgemm_); if not, callers use LibTorch ops.
bool available();

// C (m, n) = alpha · op(A) · op(B) + beta · C, row-major with leading dimensions; op(A) is (m, k),
// op(B) is (k, n). Runs on the calling thread's BLAS threading (one thread inside a parallel region).
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// While alive, BLAS calls from this thread run on this thread alone. For calls made inside a
// parallel region: MKL's own threading would otherwise nest inside it (measured: a 2-thread
// region of per-head GEMMs ran 1.7x slower than one thread). A no-op where the BLAS has no such
// setting.
class SequentialScope {
 public:
  SequentialScope();
  ~SequentialScope();
  SequentialScope(const SequentialScope&) = delete;
  SequentialScope& operator=(const SequentialScope&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace trainscope::runtime::blas
