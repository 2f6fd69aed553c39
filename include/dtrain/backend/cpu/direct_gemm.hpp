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

}  // namespace dtrain::detail
