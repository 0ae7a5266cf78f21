// blas.cpp — see blas.h. The Fortran BLAS symbol is exported by libtorch_cpu.so.
#include "cpu/blas.h"

// Weak, so that a LibTorch built without a Fortran-style BLAS still links: available() says so.
extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                       const float* beta, float* c, const int* ldc) __attribute__((weak));

// MKL only (weak: absent from other BLAS builds); the C entry point that mkl_service.h calls
// mkl_set_num_threads_local. Returns the previous thread-local setting.
extern "C" int MKL_Set_Num_Threads_Local(int) __attribute__((weak));

namespace trainscope::runtime::blas {

bool available() { return sgemm_ != nullptr; }

SequentialScope::SequentialScope() {
  if (MKL_Set_Num_Threads_Local) previous_ = MKL_Set_Num_Threads_Local(1);
}

SequentialScope::~SequentialScope() {
  if (MKL_Set_Num_Threads_Local) MKL_Set_Num_Threads_Local(previous_);  // 0: back to the global setting
}

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
  const char ta = trans_b ? 'T' : 'N', tb = trans_a ? 'T' : 'N';
  const int M = int(n), N = int(m), K = int(k), LDA = int(ldb), LDB = int(lda), LDC = int(ldc);
  sgemm_(&ta, &tb, &M, &N, &K, &alpha, b, &LDA, a, &LDB, &beta, c, &LDC);
}

}  // namespace trainscope::runtime::blas
