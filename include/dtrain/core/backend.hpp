#pragma once
/// \file
/// The backend seam: where tensors live and how the heavy kernels run. Layers call their backend
/// through this concept only, so a `cuda` backend can replace `cpu` without touching a layer.

#include <algorithm>
#include <complex>
#include <concepts>
#include <cstddef>
#include <vector>

// xtensor-blas' bundled cxxblas, routed to CBLAS (OpenBLAS): the sgemm every layer uses.
#include "xtensor-blas/xblas_config.hpp"
#include "xflens/cxxblas/cxxblas.cxx"

#include "dtrain/core/threads.hpp"

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

namespace detail {

/// Row-major sgemm through xtensor-blas' cxxblas (CBLAS, OpenBLAS).
inline void sgemm(transpose ta, transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
                  const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                  std::size_t ldc) {
  using idx = xt::blas_index_t;
  cxxblas::gemm<idx>(cxxblas::RowMajor, ta == transpose::yes ? cxxblas::Trans : cxxblas::NoTrans,
                     tb == transpose::yes ? cxxblas::Trans : cxxblas::NoTrans, static_cast<idx>(m),
                     static_cast<idx>(n), static_cast<idx>(k), alpha, a, static_cast<idx>(lda), b,
                     static_cast<idx>(ldb), beta, c, static_cast<idx>(ldc));
}

/// How the cpu backend runs one GEMM, chosen from the shape alone. OpenBLAS runs on one thread (see
/// threads.hpp); dtrain's pool shares the work:
/// - `one`: too small to share (under ~4 MFLOP): one call on the caller's thread.
/// - `rows`: a small k (a weight gradient, k = batch; an im2col conv, k = kernel taps) with a large C.
///   OpenBLAS scales all of C by beta, then streams it through the kernel again; row blocks of C that stay
///   in cache (~64 KiB) halve that traffic, and the pool takes blocks in turn.
/// - `depth`: a tiny C and a huge k (a conv kernel gradient: k = batch x pixels). Fixed slices of k (their
///   count from the shape only, never from the thread count), each into its own scratch C, summed in
///   order: the result differs from one GEMM by summation order only, and is the same for any budget.
/// - `split`: the rest: C cut into one block of rows (when m >= n, so each thread packs op(B) once) or of
///   columns (each packs op(A) once) per thread.
enum class gemm_plan { one, rows, depth, split };

inline constexpr std::size_t gemm_rows_target = 16384;  // floats of C per row block (64 KiB)
inline constexpr std::size_t gemm_depth_slices = 8;

inline gemm_plan plan_gemm(std::size_t m, std::size_t n, std::size_t k) {
  const double flops = 2.0 * double(m) * double(n) * double(k);
  if (flops < 4e6) return gemm_plan::one;
  if (k <= 512 && k * n <= 65536 && m * n >= 65536 && m >= 4 * std::max<std::size_t>(1, gemm_rows_target / n))
    return gemm_plan::rows;  // every row block repacks op(B): only when op(B) is small
  if (m * n <= 4096 && k >= 64 * gemm_depth_slices && k >= 16 * std::max(m, n)) return gemm_plan::depth;
  return gemm_plan::split;
}

/// op(A) row `i`, column `j` of a row-major operand (leading dimension `ld`, transposed or not).
inline const float* at(const float* a, transpose t, std::size_t ld, std::size_t i, std::size_t j) {
  return t == transpose::no ? a + i * ld + j : a + j * ld + i;
}

/// Scratch for `depth` GEMMs: grows to the largest seen, per thread, and is reused.
inline std::vector<float>& gemm_scratch() {
  thread_local std::vector<float> s;
  return s;
}

}  // namespace detail

/// The host backend: plain memory, OpenBLAS sgemm through xtensor-blas (one thread per call), large
/// GEMMs split over dtrain's thread budget (see `detail::gemm_plan`).
struct cpu {
  static constexpr const char* name = "cpu";

  /// Calls `f(first, last)` on ranges of [0, count) spread over the thread budget. What layers use to
  /// process independent blocks of rows.
  template <class F>
  void for_blocks(std::size_t count, F&& f) const {
    detail::parallel_for(count, 1, f, 1);  // one thread or one block: on the caller's thread
  }

  void gemm(transpose ta, transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
            const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
            std::size_t ldc) const {
    if (m == 0 || n == 0) return;
    const int threads = num_threads();  // (also puts OpenBLAS on one thread before its first call)
    switch (detail::plan_gemm(m, n, k)) {
      case detail::gemm_plan::one:
        detail::sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
      case detail::gemm_plan::split:
        if (threads <= 1)
          detail::sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        else if (m >= n)
          detail::parallel_for(
              m, 16,
              [&](std::size_t r0, std::size_t r1) {
                detail::sgemm(ta, tb, r1 - r0, n, k, alpha, detail::at(a, ta, lda, r0, 0), lda, b, ldb, beta,
                              c + r0 * ldc, ldc);
              },
              16);
        else
          detail::parallel_for(
              n, 16,
              [&](std::size_t j0, std::size_t j1) {
                detail::sgemm(ta, tb, m, j1 - j0, k, alpha, a, lda, detail::at(b, tb, ldb, 0, j0), ldb, beta,
                              c + j0, ldc);
              },
              16);
        return;
      case detail::gemm_plan::rows: {
        const std::size_t rows = std::max<std::size_t>(1, detail::gemm_rows_target / n);
        const std::size_t blocks = (m + rows - 1) / rows;
        detail::parallel_for(
            blocks, 1,
            [&](std::size_t first, std::size_t last) {
              for (std::size_t i = first; i < last; ++i) {
                const std::size_t r0 = i * rows, r1 = std::min(m, r0 + rows);
                detail::sgemm(ta, tb, r1 - r0, n, k, alpha, detail::at(a, ta, lda, r0, 0), lda, b, ldb, beta,
                              c + r0 * ldc, ldc);
              }
            },
            1);
        return;
      }
      case detail::gemm_plan::depth: {
        constexpr std::size_t slices = detail::gemm_depth_slices;
        const std::size_t len = (k + slices - 1) / slices, mn = m * n;
        std::vector<float>& scratch = detail::gemm_scratch();
        if (scratch.size() < slices * mn) scratch.resize(slices * mn);
        float* part = scratch.data();
        detail::parallel_for(
            slices, 1,
            [&](std::size_t first, std::size_t last) {
              for (std::size_t s = first; s < last; ++s) {
                const std::size_t k0 = std::min(k, s * len), k1 = std::min(k, k0 + len);
                float* out = part + s * mn;
                if (k0 == k1) {
                  std::fill(out, out + mn, 0.0f);
                  continue;
                }
                detail::sgemm(ta, tb, m, n, k1 - k0, 1.0f, detail::at(a, ta, lda, 0, k0), lda,
                              detail::at(b, tb, ldb, k0, 0), ldb, 0.0f, out, n);
              }
            },
            1);
        for (std::size_t i = 0; i < m; ++i)
          for (std::size_t j = 0; j < n; ++j) {
            float sum = part[i * n + j];
            for (std::size_t s = 1; s < slices; ++s) sum += part[s * mn + i * n + j];
            float& out = c[i * ldc + j];
            out = beta == 0.0f ? alpha * sum : beta * out + alpha * sum;
          }
        return;
      }
    }
  }
};

static_assert(backend<cpu>);

}  // namespace dtrain
