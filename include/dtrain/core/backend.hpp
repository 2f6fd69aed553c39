#pragma once
/// \file
/// The backend seam: where tensors live and how the heavy kernels run. Layers call their backend
/// through this concept only, so a `cuda` backend can replace `cpu` without touching a layer.

#include <complex>
#include <concepts>
#include <cstddef>

// xtensor-blas' bundled cxxblas, routed to CBLAS (OpenBLAS): the sgemm every layer uses.
#include "xtensor-blas/xblas_config.hpp"
#include "xflens/cxxblas/cxxblas.cxx"

namespace dtrain {

enum class transpose : bool { no = false, yes = true };

/// A backend runs row-major single-precision GEMM, `C = alpha * op(A) * op(B) + beta * C`, with
/// op(A) m x k, op(B) k x n and C m x n, on memory it can address through raw pointers.
/// Contract: `gemm` may not retain pointers past the call; results are ready when it returns
/// (an asynchronous backend synchronises before handing memory back to host code).
template <class B>
concept backend = requires(const B& b, transpose t, std::size_t n, float s, const float* cp, float* p) {
  { B::name } -> std::convertible_to<const char*>;
  b.gemm(t, t, n, n, n, s, cp, n, cp, n, s, p, n);
};

/// The host backend: plain memory, OpenBLAS sgemm through xtensor-blas.
struct cpu {
  static constexpr const char* name = "cpu";

  void gemm(transpose ta, transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
            const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
            std::size_t ldc) const {
    if (m == 0 || n == 0) return;
    using idx = xt::blas_index_t;
    cxxblas::gemm<idx>(cxxblas::RowMajor, ta == transpose::yes ? cxxblas::Trans : cxxblas::NoTrans,
                       tb == transpose::yes ? cxxblas::Trans : cxxblas::NoTrans, static_cast<idx>(m),
                       static_cast<idx>(n), static_cast<idx>(k), alpha, a, static_cast<idx>(lda), b,
                       static_cast<idx>(ldb), beta, c, static_cast<idx>(ldc));
  }
};

static_assert(backend<cpu>);

}  // namespace dtrain
