#pragma once
/// \file
/// The one place dtrain calls BLAS, and only in a program built with one (`DTRAIN_BLAS` defined: CMake's
/// `dtrain::blas`, or `-DDTRAIN_BLAS` and the library on the link line; in every translation unit of
/// the program or in none, since dtrain's inline GEMM differs with it): a row-major sgemm through the
/// Fortran interface (`sgemm_`), which every BLAS exports under that name (OpenBLAS, BLIS, MKL, the
/// reference BLAS). dtrain's own kernels multiply every shape; BLAS is what `DTRAIN_GEMM=blas` picks for
/// the GEMMs the direct kernels decline. Declaring sgemm_ here keeps CBLAS headers out of dtrain, so a
/// program may include whichever cblas.h it likes (two of them declare the same enums and cannot meet in
/// one translation unit).

#include <cstddef>

#include "dtrain/backend/backend.hpp"

#ifdef DTRAIN_BLAS
extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                       const float* beta, float* c, const int* ldc);
#endif

namespace dtrain::detail {

/// Whether this program was built with a BLAS.
#ifdef DTRAIN_BLAS
inline constexpr bool has_blas = true;
#else
inline constexpr bool has_blas = false;
#endif

#ifdef DTRAIN_BLAS
/// Row-major C (m x n) = alpha op(A) op(B) + beta C, with op(A) m x k and op(B) k x n. A row-major matrix
/// is its transpose in column-major order, so this is the column-major C^T = alpha op(B)^T op(A)^T + beta C^T.
inline void sgemm(transpose ta, transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
                  const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                  std::size_t ldc) {
  const char opa = ta == transpose::yes ? 'T' : 'N', opb = tb == transpose::yes ? 'T' : 'N';
  const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k);
  const int ila = static_cast<int>(lda), ilb = static_cast<int>(ldb), ilc = static_cast<int>(ldc);
  sgemm_(&opb, &opa, &in, &im, &ik, &alpha, b, &ilb, a, &ila, &beta, c, &ilc);
}
#endif

}  // namespace dtrain::detail
