#pragma once
/// \file
/// The cpu backend's GEMM, on dtrain's own kernels whatever the shape (direct_gemm.hpp: the direct
/// GEMM's shapes, then `own_gemm`), so a program needs no BLAS and its speed does not depend on which
/// BLAS build the system has. In a program built with one (cpu/blas.hpp), `DTRAIN_GEMM=blas` gives what
/// the direct GEMM declines to BLAS instead, on one thread per call (see core/threads.hpp), large
/// products split over dtrain's thread budget by a plan chosen from the shape.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

#include "dtrain/backend/cpu/bf16_gemm.hpp"
#include "dtrain/backend/cpu/blas.hpp"
#include "dtrain/backend/cpu/direct_gemm.hpp"
#include "dtrain/core/environment.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/threads.hpp"

namespace dtrain::detail {

/// Who multiplies what the direct GEMM declines: dtrain's own kernels (the default) or the system's BLAS.
enum class gemm_engine { dtrain, blas };

/// The engine `DTRAIN_GEMM` (`dtrain` or `blas`) names; unset or empty: dtrain's. Another word, or
/// `blas` in a program built without one (`with_blas` false), is a `config_error`.
inline gemm_engine gemm_engine_from_env(const char* value, bool with_blas = has_blas) {
  const std::string v = value ? value : "";
  if (v.empty() || v == "dtrain") return gemm_engine::dtrain;
  if (v != "blas") throw config_error("DTRAIN_GEMM=\"" + v + "\": expected dtrain or blas");
  if (!with_blas)
    throw config_error("DTRAIN_GEMM=blas: this program was built without a BLAS (link dtrain::blas, or compile "
                       "with -DDTRAIN_BLAS and link one, such as -lopenblas)");
  return gemm_engine::blas;
}

/// The engine in use (read from the environment once; tests and benchmarks may set it).
inline std::atomic<gemm_engine>& gemm_engine_in_use() {
  static std::atomic<gemm_engine> engine{gemm_engine_from_env(environment::get(environment::gemm).c_str())};
  return engine;
}

/// How one GEMM runs on BLAS, chosen from the shape alone. OpenBLAS runs on one thread; dtrain's pool shares
/// the work:
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

#ifdef DTRAIN_BLAS
/// Scratch for `depth` GEMMs: grows to the largest seen, per thread, and is reused.
inline std::vector<float>& gemm_scratch() {
  thread_local std::vector<float> s;
  return s;
}

/// Row-major `C = alpha op(A) op(B) + beta C` on BLAS, by the plan of its shape.
inline void blas_gemm(transpose ta, transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
                      const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                      std::size_t ldc) {
  const int threads = num_threads();  // (also puts OpenBLAS on one thread before its first call)
  switch (plan_gemm(m, n, k)) {
    case gemm_plan::one:
      sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      return;
    case gemm_plan::split:
      if (threads <= 1)
        sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      else if (m >= n)
        parallel_for(
            m, 16,
            [&](std::size_t r0, std::size_t r1) {
              sgemm(ta, tb, r1 - r0, n, k, alpha, at(a, ta, lda, r0, 0), lda, b, ldb, beta, c + r0 * ldc, ldc);
            },
            16);
      else
        parallel_for(
            n, 16,
            [&](std::size_t j0, std::size_t j1) {
              sgemm(ta, tb, m, j1 - j0, k, alpha, a, lda, at(b, tb, ldb, 0, j0), ldb, beta, c + j0, ldc);
            },
            16);
      return;
    case gemm_plan::rows: {
      const std::size_t rows = std::max<std::size_t>(1, gemm_rows_target / n);
      const std::size_t blocks = (m + rows - 1) / rows;
      parallel_for(
          blocks, 1,
          [&](std::size_t first, std::size_t last) {
            for (std::size_t i = first; i < last; ++i) {
              const std::size_t r0 = i * rows, r1 = std::min(m, r0 + rows);
              sgemm(ta, tb, r1 - r0, n, k, alpha, at(a, ta, lda, r0, 0), lda, b, ldb, beta, c + r0 * ldc, ldc);
            }
          },
          1);
      return;
    }
    case gemm_plan::depth: {
      constexpr std::size_t slices = gemm_depth_slices;
      const std::size_t len = (k + slices - 1) / slices, mn = m * n;
      std::vector<float>& scratch = gemm_scratch();
      if (scratch.size() < slices * mn) scratch.resize(slices * mn);
      float* part = scratch.data();
      parallel_for(
          slices, 1,
          [&](std::size_t first, std::size_t last) {
            for (std::size_t s = first; s < last; ++s) {
              const std::size_t k0 = std::min(k, s * len), k1 = std::min(k, k0 + len);
              float* out = part + s * mn;
              if (k0 == k1) {
                std::fill(out, out + mn, 0.0f);
                continue;
              }
              sgemm(ta, tb, m, n, k1 - k0, 1.0f, at(a, ta, lda, 0, k0), lda, at(b, tb, ldb, k0, 0), ldb, 0.0f, out, n);
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
#endif

/// Row-major `C = alpha op(A) op(B) + beta C`: with `inputs` bfloat16, the bfloat16 GEMM where the CPU
/// has one (operands rounded, products summed in float32); else the direct GEMM, else the engine in use.
inline void planned_gemm(transpose ta, transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
                         const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                         std::size_t ldc, dtype inputs = dtype::float32) {
  if (m == 0 || n == 0) return;
  if (inputs == dtype::bfloat16 && bf16_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) return;
  const gemm_engine engine = gemm_engine_in_use();  // (DTRAIN_GEMM is checked in every program)
  const cpu_isa isa = best_cpu_isa();
  if (direct_gemm(isa, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) return;
#ifdef DTRAIN_BLAS
  if (engine == gemm_engine::blas) return blas_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#endif
  (void)engine;
  own_gemm(isa, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace dtrain::detail
