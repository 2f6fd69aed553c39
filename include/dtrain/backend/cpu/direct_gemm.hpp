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
#include "dtrain/core/threads.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define DTRAIN_DIRECT_GEMM 1
#else
#define DTRAIN_DIRECT_GEMM 0
#endif

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

/// The instruction sets the direct GEMM has kernels for.
enum class direct_isa { none, avx2, avx512 };

namespace direct {
/// Of `cols` valid columns, how many lie at or after column `first` (a partial tile's vector `first / lanes`).
inline std::size_t lanes_left(std::size_t cols, std::size_t first) { return cols > first ? cols - first : 0; }
}  // namespace direct

}  // namespace dtrain::detail

#if DTRAIN_DIRECT_GEMM
#define DTRAIN_DIRECT_GEMM_OP __attribute__((always_inline)) inline

namespace dtrain::detail::avx512 {
#define DTRAIN_DIRECT_GEMM_TARGET __attribute__((target("avx512f")))
using vec = __m512;
inline constexpr int lanes = 16;
DTRAIN_DIRECT_GEMM_TARGET DTRAIN_DIRECT_GEMM_OP vec zero() { return _mm512_setzero_ps(); }
DTRAIN_DIRECT_GEMM_TARGET DTRAIN_DIRECT_GEMM_OP vec load(const float* p) { return _mm512_loadu_ps(p); }
DTRAIN_DIRECT_GEMM_TARGET DTRAIN_DIRECT_GEMM_OP void store(float* p, vec v) { _mm512_storeu_ps(p, v); }
DTRAIN_DIRECT_GEMM_TARGET DTRAIN_DIRECT_GEMM_OP __mmask16 first(std::size_t n) {
  return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1);
}
/// The first `n` lanes from p (none read beyond), the rest zero.
DTRAIN_DIRECT_GEMM_TARGET DTRAIN_DIRECT_GEMM_OP vec load_part(const float* p, std::size_t n) {
  return _mm512_maskz_loadu_ps(first(n), p);
}
DTRAIN_DIRECT_GEMM_TARGET DTRAIN_DIRECT_GEMM_OP void store_part(float* p, vec v, std::size_t n) {
  _mm512_mask_storeu_ps(p, first(n), v);
}
DTRAIN_DIRECT_GEMM_TARGET DTRAIN_DIRECT_GEMM_OP vec broadcast(const float* p) { return _mm512_set1_ps(*p); }
DTRAIN_DIRECT_GEMM_TARGET DTRAIN_DIRECT_GEMM_OP vec add(vec a, vec b) { return _mm512_add_ps(a, b); }
DTRAIN_DIRECT_GEMM_TARGET DTRAIN_DIRECT_GEMM_OP vec fma(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
/// 16 x 16 in place: 4 x 4 blocks within each 128-bit lane (unpack, shuffle), then the lanes. (The
/// zero-masking forms with every lane selected are the plain instructions; GCC 12's plain intrinsics
/// start from `_mm512_undefined_ps()`, which -Wmaybe-uninitialized reports.)
DTRAIN_DIRECT_GEMM_TARGET DTRAIN_DIRECT_GEMM_OP void transpose(vec (&r)[16]) {
  constexpr __mmask16 all = 0xffff;
  vec t[16], u[16];
  for (int i = 0; i < 16; i += 2)
    t[i] = _mm512_maskz_unpacklo_ps(all, r[i], r[i + 1]), t[i + 1] = _mm512_maskz_unpackhi_ps(all, r[i], r[i + 1]);
  for (int i = 0; i < 16; i += 4) {
    u[i] = _mm512_maskz_shuffle_ps(all, t[i], t[i + 2], 0x44);
    u[i + 1] = _mm512_maskz_shuffle_ps(all, t[i], t[i + 2], 0xee);
    u[i + 2] = _mm512_maskz_shuffle_ps(all, t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm512_maskz_shuffle_ps(all, t[i + 1], t[i + 3], 0xee);
  }
  for (int j = 0; j < 4; ++j) {  // u[4g + j], lane l: column 4l + j of rows 4g..4g+3
    const vec w0 = _mm512_maskz_shuffle_f32x4(all, u[j], u[4 + j], 0x88);
    const vec w1 = _mm512_maskz_shuffle_f32x4(all, u[j], u[4 + j], 0xdd);
    const vec w2 = _mm512_maskz_shuffle_f32x4(all, u[8 + j], u[12 + j], 0x88);
    const vec w3 = _mm512_maskz_shuffle_f32x4(all, u[8 + j], u[12 + j], 0xdd);
    r[j] = _mm512_maskz_shuffle_f32x4(all, w0, w2, 0x88), r[8 + j] = _mm512_maskz_shuffle_f32x4(all, w0, w2, 0xdd);
    r[4 + j] = _mm512_maskz_shuffle_f32x4(all, w1, w3, 0x88), r[12 + j] = _mm512_maskz_shuffle_f32x4(all, w1, w3, 0xdd);
  }
}
}  // namespace dtrain::detail::avx512
#define DTRAIN_DIRECT_GEMM_ISA avx512
#include "dtrain/backend/cpu/direct_gemm_isa.hpp"
#undef DTRAIN_DIRECT_GEMM_ISA
#undef DTRAIN_DIRECT_GEMM_TARGET

namespace dtrain::detail::avx2 {
#define DTRAIN_DIRECT_GEMM_TARGET __attribute__((target("avx2,fma")))
using vec = __m256;
inline constexpr int lanes = 8;
DTRAIN_DIRECT_GEMM_TARGET DTRAIN_DIRECT_GEMM_OP vec zero() { return _mm256_setzero_ps(); }
DTRAIN_DIRECT_GEMM_TARGET DTRAIN_DIRECT_GEMM_OP vec load(const float* p) { return _mm256_loadu_ps(p); }
DTRAIN_DIRECT_GEMM_TARGET DTRAIN_DIRECT_GEMM_OP void store(float* p, vec v) { _mm256_storeu_ps(p, v); }
DTRAIN_DIRECT_GEMM_TARGET DTRAIN_DIRECT_GEMM_OP __m256i first(std::size_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(std::min<std::size_t>(n, 8))), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
DTRAIN_DIRECT_GEMM_TARGET DTRAIN_DIRECT_GEMM_OP vec load_part(const float* p, std::size_t n) {
  return _mm256_maskload_ps(p, first(n));
}
DTRAIN_DIRECT_GEMM_TARGET DTRAIN_DIRECT_GEMM_OP void store_part(float* p, vec v, std::size_t n) {
  _mm256_maskstore_ps(p, first(n), v);
}
DTRAIN_DIRECT_GEMM_TARGET DTRAIN_DIRECT_GEMM_OP vec broadcast(const float* p) { return _mm256_broadcast_ss(p); }
DTRAIN_DIRECT_GEMM_TARGET DTRAIN_DIRECT_GEMM_OP vec add(vec a, vec b) { return _mm256_add_ps(a, b); }
DTRAIN_DIRECT_GEMM_TARGET DTRAIN_DIRECT_GEMM_OP vec fma(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
/// 8 x 8 in place: 4 x 4 blocks within each 128-bit lane, then the two lanes.
DTRAIN_DIRECT_GEMM_TARGET DTRAIN_DIRECT_GEMM_OP void transpose(vec (&r)[8]) {
  vec t[8], u[8];
  for (int i = 0; i < 8; i += 2) t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44), u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44), u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (int j = 0; j < 4; ++j)
    r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20), r[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
}
}  // namespace dtrain::detail::avx2
#define DTRAIN_DIRECT_GEMM_ISA avx2
#include "dtrain/backend/cpu/direct_gemm_isa.hpp"
#undef DTRAIN_DIRECT_GEMM_ISA
#undef DTRAIN_DIRECT_GEMM_TARGET
#undef DTRAIN_DIRECT_GEMM_OP
#endif

namespace dtrain::detail {

/// The best instruction set this CPU has kernels for (asked once).
inline direct_isa direct_gemm_isa() {
#if DTRAIN_DIRECT_GEMM
  static const direct_isa isa = __builtin_cpu_supports("avx512f")                                   ? direct_isa::avx512
                                : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? direct_isa::avx2
                                                                                                   : direct_isa::none;
  return isa;
#else
  return direct_isa::none;
#endif
}

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
inline bool direct_gemm(direct_isa isa, transpose ta, transpose tb, std::size_t m, std::size_t n, std::size_t k,
                        float alpha, const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta,
                        float* c, std::size_t ldc) {
#if DTRAIN_DIRECT_GEMM
  if (isa == direct_isa::none || alpha != 1.0f || (beta != 0.0f && beta != 1.0f) || m == 0 || n == 0 || k == 0)
    return false;
  const bool wide = isa == direct_isa::avx512;
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
