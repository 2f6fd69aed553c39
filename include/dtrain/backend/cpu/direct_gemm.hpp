#pragma once
/// \file
/// The GEMMs a training step is made of at ordinary batch sizes are skinny: a dense layer's forward pass
/// (batch x in) . (in x units), its kernel gradient (in x batch) . (batch x units) and its input gradient
/// (batch x units) . (units x in)^T, with batch and units in the tens or hundreds and `in` up to tens of
/// thousands. BLAS packs both operands into its own layout before it multiplies; for these shapes the
/// packing moves as many bytes as the product reads and costs a quarter of a CNN step. The direct GEMM
/// reads the operands where they are: a tile of C stays in registers while one value of A is broadcast
/// against a few vectors of a row of B per step (B's rows are contiguous in every shape above but the
/// input gradient, which is computed as C^T and transposed in registers on its way out).
///
/// Chosen at run time by CPU feature (users build dtrain without -march=native): AVX-512F, else AVX2 with
/// FMA, else BLAS. Every element of C is a sum over k in order, in blocks of `direct_gemm_depth`, so the
/// result does not depend on how the work is split over threads.

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "dtrain/backend/backend.hpp"
#include "dtrain/backend/cpu/isa.hpp"
#include "dtrain/core/threads.hpp"

namespace dtrain::detail {

/// C (m x n, ldc) = A B, plus C when `accumulate`: a(i, p) = a[i ars + p aps], B row-major k x n (ldb).
struct direct_gemm_problem {
  std::size_t m, n, k;
  const float* a;
  std::size_t ars, aps;
  const float* b;
  std::size_t ldb;
  float* c;
  std::size_t ldc;
  bool accumulate;
};

/// Steps of k per pass over C: a block of B (256 x up to a few hundred floats) stays in L2.
inline constexpr std::size_t direct_gemm_depth = 256;

namespace direct {
/// Of `cols` valid columns, how many lie at or after column `first` (a partial tile's vector `first / lanes`).
inline std::size_t lanes_left(std::size_t cols, std::size_t first) { return cols > first ? cols - first : 0; }
}  // namespace direct

}  // namespace dtrain::detail

#if DTRAIN_CPU_AVX
#define DTRAIN_ISA avx512
#define DTRAIN_ISA_TARGET DTRAIN_AVX512
#include "dtrain/backend/cpu/direct_gemm_isa.hpp"
#undef DTRAIN_ISA
#undef DTRAIN_ISA_TARGET
#define DTRAIN_ISA avx2
#define DTRAIN_ISA_TARGET DTRAIN_AVX2
#include "dtrain/backend/cpu/direct_gemm_isa.hpp"
#undef DTRAIN_ISA
#undef DTRAIN_ISA_TARGET
#endif

namespace dtrain::detail {

namespace direct {

/// Splits rows [0, m) (in tiles of `rows`) or columns [0, n) (in tiles of `cols`) over the thread budget,
/// with at least ~2 MFLOP per part; `f(r0, r1, s0, s1)` gets one part.
template <class F>
void split(bool by_rows, std::size_t m, std::size_t n, std::size_t k, std::size_t rows, std::size_t cols, F&& f) {
  const std::size_t unit = by_rows ? rows : cols, extent = by_rows ? m : n, other = by_rows ? n : m;
  const std::size_t tiles = (extent + unit - 1) / unit;
  const double tile_flops = 2.0 * double(unit) * double(other) * double(k);
  const auto grain = static_cast<std::size_t>(std::max(1.0, 2e6 / std::max(tile_flops, 1.0)));
  parallel_for(
      tiles, grain,
      [&](std::size_t t0, std::size_t t1) {
        const std::size_t e0 = t0 * unit, e1 = std::min(extent, t1 * unit);
        if (by_rows) f(e0, e1, std::size_t(0), n);
        else f(std::size_t(0), m, e0, e1);
      },
      1);
}

/// Padding to whole vectors wastes at most a quarter of the work.
inline bool fits(std::size_t n, std::size_t unit) { return n >= unit / 2 && ((n + unit - 1) / unit) * unit * 4 <= n * 5; }

}  // namespace direct

/// Row-major C = alpha op(A) op(B) + beta C by the direct kernels of `isa`, when the shape is one they
/// are for (see the file comment): alpha 1, beta 0 or 1, op(B) not transposed and m or k at most 512; or
/// op(A) not transposed, op(B) transposed, beta 0 and op(A) at most 64 Ki floats (it is transposed into a
/// scratch buffer). Returns false, having done nothing, otherwise.
inline bool direct_gemm(cpu_isa isa, transpose ta, transpose tb, std::size_t m, std::size_t n, std::size_t k,
                        float alpha, const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta,
                        float* c, std::size_t ldc) {
#if DTRAIN_CPU_AVX
  if (isa == cpu_isa::baseline || alpha != 1.0f || (beta != 0.0f && beta != 1.0f) || m == 0 || n == 0 || k == 0)
    return false;
  const bool wide = isa == cpu_isa::avx512;
  const std::size_t lanes = wide ? avx512::lanes : avx2::lanes;
  if (tb == transpose::no) {
    // the widest tile C's columns fill; AVX-512 narrows to 2 or 1 vectors for 32 or 16 columns
    int nv = wide ? avx512::nv : avx2::nv;
    while (nv > 1 && wide && !direct::fits(n, std::size_t(nv) * lanes)) nv /= 2;
    if (std::min(m, k) > 512 || !direct::fits(n, std::size_t(nv) * lanes)) return false;
    const std::size_t tile_rows = !wide ? avx2::mr : nv == 4 ? avx512::mr_of<4> : nv == 2 ? avx512::mr_of<2> : avx512::mr_of<1>;
    const direct_gemm_problem q{m,     n, k,   a, ta == transpose::no ? lda : 1, ta == transpose::no ? 1 : lda, b,
                                ldb,   c, ldc, beta == 1.0f};
    // the longer side is split: each thread then reads the other operand's smaller part whole
    direct::split(m >= n, m, n, k, tile_rows, std::size_t(nv) * lanes,
                  [&](std::size_t r0, std::size_t r1, std::size_t s0, std::size_t s1) {
                    if (!wide) avx2::block(q, r0, r1, s0, s1);
                    else if (nv == 4) avx512::block<4>(q, r0, r1, s0, s1);
                    else if (nv == 2) avx512::block<2>(q, r0, r1, s0, s1);
                    else avx512::block<1>(q, r0, r1, s0, s1);
                  });
    return true;
  }
  if (ta == transpose::no && beta == 0.0f && m * k <= 65536 && direct::fits(m, lanes)) {
    // C^T = op(B)^T op(A)^T: op(B)^T's rows are B's rows; op(A)^T (k x m) is gathered once
    thread_local std::vector<float> at;
    at.resize(k * m);
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t p = 0; p < k; ++p) at[p * m + i] = a[i * lda + p];
    const direct_gemm_problem q{n, m, k, b, ldb, 1, at.data(), m, c, ldc, false};
    direct::split(true, n, m, k, lanes, 1, [&](std::size_t r0, std::size_t r1, std::size_t, std::size_t) {
      if (wide) avx512::block_transposed(q, r0, r1);
      else avx2::block_transposed(q, r0, r1);
    });
    return true;
  }
#else
  (void)isa, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb,
      (void)beta, (void)c, (void)ldc;
#endif
  return false;
}

/// Rows [r0, r1) and columns [s0, s1) of the baseline's product (no AVX): per row of C, each block of k
/// summed from zero into a row of partial sums (the loop over columns vectorises to the baseline's
/// vectors), then added to C, the direct kernels' two-level sum.
inline void baseline_block(const direct_gemm_problem& q, std::size_t r0, std::size_t r1, std::size_t s0,
                           std::size_t s1) {
  thread_local std::vector<float> acc;
  acc.resize(s1 - s0);
  for (std::size_t r = r0; r < r1; ++r)
    for (std::size_t p0 = 0; p0 < q.k; p0 += direct_gemm_depth) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (std::size_t p = p0; p < std::min(q.k, p0 + direct_gemm_depth); ++p) {
        const float av = q.a[r * q.ars + p * q.aps];
        const float* brow = q.b + p * q.ldb + s0;
        for (std::size_t j = 0; j < s1 - s0; ++j) acc[j] += av * brow[j];
      }
      float* crow = q.c + r * q.ldc + s0;
      if (p0 > 0 || q.accumulate)
        for (std::size_t j = 0; j < s1 - s0; ++j) crow[j] += acc[j];
      else
        std::copy(acc.begin(), acc.end(), crow);
    }
}

/// Columns of C per pass of the tiles: a block of B (direct_gemm_depth rows of them) stays in the L2
/// cache while every row tile passes over it.
inline constexpr std::size_t own_gemm_columns = 512;

/// to[j * rows + i] = scale from[i * ld + j] (i < rows, j < cols), in 16 x 16 blocks that stay in cache.
inline void transpose_into(const float* from, std::size_t ld, std::size_t rows, std::size_t cols, float* to,
                           float scale = 1.0f) {
  for (std::size_t i0 = 0; i0 < rows; i0 += 16)
    for (std::size_t j0 = 0; j0 < cols; j0 += 16)
      for (std::size_t i = i0; i < std::min(rows, i0 + 16); ++i)
        for (std::size_t j = j0; j < std::min(cols, j0 + 16); ++j) to[j * rows + i] = scale * from[i * ld + j];
}

#if DTRAIN_CPU_AVX
/// The vectors per row of the tile own_gemm and product_block use for C of n columns on `isa`.
inline int product_vectors(cpu_isa isa, std::size_t n) {
  const bool wide = isa == cpu_isa::avx512;
  int nv = wide ? avx512::nv : avx2::nv;
  while (nv > 1 && !direct::fits(n, std::size_t(nv) * (wide ? avx512::lanes : avx2::lanes))) nv /= 2;
  return nv;
}
#endif
/// The rows and columns of that tile (the baseline's: one row, 64 columns), for splitting C over threads.
struct product_tile {
  std::size_t rows, cols;
};
inline product_tile product_tile_of(cpu_isa isa, std::size_t n) {
#if DTRAIN_CPU_AVX
  if (isa == cpu_isa::avx2) return {std::size_t(avx2::mr), std::size_t(product_vectors(isa, n)) * avx2::lanes};
  if (isa == cpu_isa::avx512) {
    const int nv = product_vectors(isa, n);
    return {std::size_t(nv == 4 ? avx512::mr_of<4> : nv == 2 ? avx512::mr_of<2> : avx512::mr_of<1>),
            std::size_t(nv) * avx512::lanes};
  }
#endif
  (void)isa, (void)n;
  return {1, 64};
}

/// Rows [r0, r1) and columns [s0, s1) of problem q (C = A B, plus C when q.accumulate) on this thread, by
/// the tiles of `isa` (the baseline's loops without AVX), in passes of own_gemm_columns columns.
inline void product_block(cpu_isa isa, const direct_gemm_problem& q, std::size_t r0, std::size_t r1, std::size_t s0,
                          std::size_t s1) {
  for (std::size_t s = s0; s < s1; s += own_gemm_columns) {
    const std::size_t e = std::min(s1, s + own_gemm_columns);
#if DTRAIN_CPU_AVX
    if (isa != cpu_isa::baseline) {
      const int nv = product_vectors(isa, q.n);
      if (isa == cpu_isa::avx2 && nv == 2) avx2::block<2>(q, r0, r1, s, e);
      else if (isa == cpu_isa::avx2) avx2::block<1>(q, r0, r1, s, e);
      else if (nv == 4) avx512::block<4>(q, r0, r1, s, e);
      else if (nv == 2) avx512::block<2>(q, r0, r1, s, e);
      else avx512::block<1>(q, r0, r1, s, e);
      continue;
    }
#endif
    baseline_block(q, r0, r1, s, e);
  }
}

/// What C = alpha op(A) op(B) + beta C needs before a product: C scaled by a beta other than 0 and 1, or,
/// when there is no product (m, n, k or alpha 0), C zeroed for beta 0. Returns whether a product remains,
/// to be written over C (beta 0) or added to it.
inline bool scale_c_first(std::size_t m, std::size_t n, std::size_t k, float alpha, float beta, float* c,
                          std::size_t ldc) {
  if (m == 0 || n == 0) return false;
  if (beta != 0.0f && beta != 1.0f)
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) c[i * ldc + j] *= beta;
  if (k != 0 && alpha != 0.0f) return true;
  if (beta == 0.0f)
    for (std::size_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
  return false;
}

/// Row-major C = alpha op(A) op(B) + beta C for any shape, on dtrain's kernels: the direct GEMM's tiles
/// (AVX-512, AVX2) or the baseline's loops, A read where it is (transposed or not). op(B), times
/// alpha, is packed row-major (k x n) first when B is transposed or alpha is not 1; C is scaled by beta
/// first when beta is neither 0 nor 1. (Packing a transposed A, a block of rows and of k at a time, was
/// measured slower: the scalar transpose cost more than the strided reads it saved.) Split over the
/// thread budget as direct_gemm splits, so the bits do not depend on the thread count either.
inline void own_gemm(cpu_isa isa, transpose ta, transpose tb, std::size_t m, std::size_t n, std::size_t k,
                     float alpha, const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta,
                     float* c, std::size_t ldc) {
  if (!scale_c_first(m, n, k, alpha, beta, c, ldc)) return;
  thread_local std::vector<float> packed_b;
  if (tb == transpose::yes) {
    packed_b.resize(k * n);
    transpose_into(b, ldb, n, k, packed_b.data(), alpha);
    b = packed_b.data(), ldb = n;
  } else if (alpha != 1.0f) {
    packed_b.resize(k * n);
    for (std::size_t p = 0; p < k; ++p)
      for (std::size_t j = 0; j < n; ++j) packed_b[p * n + j] = alpha * b[p * ldb + j];
    b = packed_b.data(), ldb = n;
  }
  const direct_gemm_problem q{m,   n, k,   a, ta == transpose::no ? lda : 1, ta == transpose::no ? 1 : lda,
                              b,   ldb, c, ldc, beta != 0.0f};
  const product_tile tile = product_tile_of(isa, n);
  direct::split(m >= n, m, n, k, tile.rows, tile.cols,
                [&](std::size_t r0, std::size_t r1, std::size_t s0, std::size_t s1) {
                  product_block(isa, q, r0, r1, s0, s1);
                });
}

}  // namespace dtrain::detail
