#pragma once
/// \file
/// The GEMM of a mixed_bfloat16 layer on a CPU with AVX512_BF16 (Zen 4, Cooper Lake, Sapphire Rapids and
/// newer): each operand rounded to bfloat16 (to nearest even, as a cast would), its products exact and
/// summed in float32, at twice the multiplies per instruction of float32 FMAs (`vdpbf16ps`: per float
/// lane, the products of one pair of bfloat16 values from each operand, added to the lane).
///
/// Both operands are packed first, k in pairs (a pair: a(i, 2q), a(i, 2q + 1)), each pair in one 32-bit
/// element: op(B) pair-row by pair-row, columns padded to whole tiles with zeros; op(A) row by row, or,
/// transposed, pair-row by pair-row as B (a contiguous pass either way). The tiles are the direct GEMM's (one pair of A broadcast against a few vectors of B per step, C
/// in registers, k in blocks of `direct_gemm_depth` summed from zero and then added to C), so a sum does
/// not depend on the thread count. Each pair is stored with its later k in the low half: the instruction
/// adds the high half's product first, so a lane sums its products in k's order, one rounding each, as
/// the float32 kernels do (apart from the instruction's flushing of subnormals to zero).

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "dtrain/backend/backend.hpp"
#include "dtrain/backend/cpu/direct_gemm.hpp"
#include "dtrain/backend/cpu/isa.hpp"
#include "dtrain/backend/cpu/reductions.hpp"
#include "dtrain/core/float16.hpp"

namespace dtrain::detail {

/// Whether the bfloat16 GEMM runs here: the CPU has AVX512_BF16 and the kernels in use are AVX-512's
/// (`DTRAIN_CPU_ISA` set lower turns it off too).
inline bool bf16_gemm_available() {
#if DTRAIN_CPU_AVX
  static const bool available = __builtin_cpu_supports("avx512bf16") && best_cpu_isa() == cpu_isa::avx512;
  return available;
#else
  return false;
#endif
}

namespace bf16 {

/// The bfloat16 nearest x (ties to even; a NaN stays a quiet NaN), as its 16 bits.
[[gnu::always_inline]] inline std::uint32_t bits(float x) {
  return std::bit_cast<std::uint32_t>(round_through_bfloat16(x)) >> 16;
}
/// The pair (first, second) of k as vdpbf16ps takes it in order: the second in the low half.
[[gnu::always_inline]] inline std::uint32_t pair(float first, float second) { return bits(second) | bits(first) << 16; }

#if DTRAIN_CPU_AVX
#define DTRAIN_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
/// Each lane's bfloat16 (bits(x)) in its high half, the low half zero. (The zero-masking shifts: see
/// avx512::transpose.)
DTRAIN_AVX512 DTRAIN_ISA_OP __m512i high_bits(__m512 x) {
  const __m512i u = _mm512_castps_si512(x), top = _mm512_set1_epi32(int(0xffff0000u));
  const __m512i odd = _mm512_and_si512(_mm512_maskz_srli_epi32(0xffff, u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_and_si512(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), top);
  const __m512i quiet = _mm512_and_si512(_mm512_or_si512(u, _mm512_set1_epi32(0x00400000)), top);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_blend_epi32(nan, rounded, quiet);
}
/// pair(first[l], second[l]) in each lane l.
DTRAIN_AVX512 DTRAIN_ISA_OP __m512i pairs_of(__m512 first, __m512 second) {
  return _mm512_or_si512(high_bits(first), _mm512_maskz_srli_epi32(0xffff, high_bits(second), 16));
}
/// 16 rows of 16 pairs (rows[r] lane l) stored transposed: out[l * ld + r].
DTRAIN_AVX512 DTRAIN_ISA_OP void store_transposed(__m512i (&rows)[16], std::uint32_t* out, std::size_t ld) {
  avx512::vec v[16];
  for (int r = 0; r < 16; ++r) v[r] = _mm512_castsi512_ps(rows[r]);
  avx512::transpose(v);
  for (int l = 0; l < 16; ++l) _mm512_storeu_si512(out + l * ld, _mm512_castps_si512(v[l]));
}
/// The 16 pairs of 32 consecutive floats.
DTRAIN_AVX512 DTRAIN_ISA_OP __m512i pairs_along(const float* p) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512 lo = avx512::load(p), hi = avx512::load(p + 16);
  return pairs_of(_mm512_permutex2var_ps(lo, even, hi), _mm512_permutex2var_ps(lo, odd, hi));
}
/// op(B) transposed, 16 columns (j) x 16 pairs (q): from b[j * ldb + p] with p from 0, into out[q * ld + j].
DTRAIN_AVX512 inline void pack_b_transposed_block(const float* b, std::size_t ldb, std::uint32_t* out, std::size_t ld) {
  __m512i rows[16];
  for (int j = 0; j < 16; ++j) rows[j] = pairs_along(b + j * ldb);
  store_transposed(rows, out, ld);
}
/// out[q] = pair(row[2 q], row[2 q + 1]) for q < 16 blocks * 16.
DTRAIN_AVX512 inline void pack_row(const float* row, std::size_t blocks, std::uint32_t* out) {
  for (std::size_t t = 0; t < blocks; ++t) _mm512_storeu_si512(out + 16 * t, pairs_along(row + 32 * t));
}
/// out[j] = pair(first[j], second[j]) for j < 16 blocks * 16.
DTRAIN_AVX512 inline void pack_rows(const float* first, const float* second, std::size_t blocks, std::uint32_t* out) {
  for (std::size_t t = 0; t < blocks; ++t)
    _mm512_storeu_si512(out + 16 * t, pairs_of(avx512::load(first + 16 * t), avx512::load(second + 16 * t)));
}
#else
inline void pack_b_transposed_block(const float*, std::size_t, std::uint32_t*, std::size_t) {}
inline void pack_row(const float*, std::size_t, std::uint32_t*) {}
inline void pack_rows(const float*, const float*, std::size_t, std::uint32_t*) {}
#endif

/// Columns of B in a block the transposed packing walks together: each pass over k reads a few cache
/// lines of every row and writes whole lines, where one row at a time would stride through all of memory.
inline constexpr std::size_t pack_block = 16;

/// A (m x k, row-major) packed: row i's pair q at out[i * pairs + q], pairs = ceil(k / 2) (an odd k's
/// last pair ends in zero). (A transposed is packed as B is: pack_b.)
inline void pack_a(std::size_t m, std::size_t k, const float* a, std::size_t lda, std::uint32_t* out) {
  const std::size_t pairs = (k + 1) / 2;
  for_rows(m, k, [&](std::size_t r0, std::size_t r1) {
    for (std::size_t i = r0; i < r1; ++i) {
      const float* row = a + i * lda;
      std::uint32_t* o = out + i * pairs;
      pack_row(row, k / 32, o);
      for (std::size_t q = k / 32 * 16; q < k / 2; ++q) o[q] = pair(row[2 * q], row[2 * q + 1]);
      if (k % 2) o[k / 2] = pair(row[k - 1], 0.0f);
    }
  });
}

/// op(B) (k x n) times alpha, packed: pair-row q's column j at out[q * ldp + j], ldp at least n (the
/// padding zero; packed_columns(n) for the tiles).
inline void pack_b(transpose tb, std::size_t k, std::size_t n, float alpha, const float* b, std::size_t ldb,
                   std::uint32_t* out, std::size_t ldp) {
  const std::size_t pairs = (k + 1) / 2;
  auto at = [&](std::size_t p, std::size_t j) {
    return p >= k ? 0.0f : alpha * (tb == transpose::no ? b[p * ldb + j] : b[j * ldb + p]);
  };
  if (tb == transpose::no) {
    for_rows(pairs, n, [&](std::size_t q0, std::size_t q1) {
      for (std::size_t q = q0; q < q1; ++q) {
        std::uint32_t* o = out + q * ldp;
        const float* r0 = b + 2 * q * ldb;
        if (2 * q + 1 < k && alpha == 1.0f) {
          pack_rows(r0, r0 + ldb, n / 16, o);
          for (std::size_t j = n / 16 * 16; j < n; ++j) o[j] = pair(r0[j], r0[ldb + j]);
        } else
          for (std::size_t j = 0; j < n; ++j) o[j] = pair(at(2 * q, j), at(2 * q + 1, j));
        std::fill(o + n, o + ldp, 0u);
      }
    });
    return;
  }
  // transposed: column j of op(B) is row j of B, its pairs consecutive; columns in blocks, 16 x 16
  // pairs by the vector transpose where it can
  for_rows((n + pack_block - 1) / pack_block, k * pack_block, [&](std::size_t b0, std::size_t b1) {
    for (std::size_t j0 = b0 * pack_block; j0 < std::min(n, b1 * pack_block); j0 += pack_block) {
      const std::size_t j1 = std::min(n, j0 + pack_block);
      std::size_t q = 0;
      if (j1 - j0 == pack_block && alpha == 1.0f)
        for (; (q + pack_block) * 2 <= k; q += pack_block)
          pack_b_transposed_block(b + j0 * ldb + 2 * q, ldb, out + q * ldp + j0, ldp);
      for (; q < pairs; ++q)
        for (std::size_t j = j0; j < j1; ++j) out[q * ldp + j] = pair(at(2 * q, j), at(2 * q + 1, j));
    }
  });
  for (std::size_t q = 0; q < pairs; ++q) std::fill(out + q * ldp + n, out + (q + 1) * ldp, 0u);
}

}  // namespace bf16
}  // namespace dtrain::detail

#if DTRAIN_CPU_AVX
namespace dtrain::detail::bf16 {

/// A packed problem: C (m x n, ldc) = A B (+ C when `accumulate`), A's row i pair q at a[i ap + q aq],
/// B's pair-row q at b + q * bp.
struct packed_problem {
  std::size_t m, n, pairs;
  const std::uint32_t* a;
  std::size_t ap, aq;
  const std::uint32_t* b;
  std::size_t bp;
  float* c;
  std::size_t ldc;
  bool accumulate;
};

/// The columns of packed B for C of n columns: n rounded up to whole tiles (the tiles read every
/// vector of their last one, and the padding is zero).
inline std::size_t packed_columns(std::size_t n) {
  const std::size_t tile = std::size_t(product_vectors(cpu_isa::avx512, n)) * 16;
  return (n + tile - 1) / tile * tile;
}

/// Pairs of k per pass over C: the float32 kernels' depth.
inline constexpr std::size_t depth = direct_gemm_depth / 2;

/// A tile of MR rows and NV vectors of C over `pairs` pairs (a fold over the accumulators, as the
/// float32 tile: they stay in registers at any optimisation level); `cols` valid columns when Partial.
template <int NV, int MR, bool Partial, std::size_t... I>
DTRAIN_AVX512_BF16 inline void tile(std::index_sequence<I...>, std::size_t pairs, const std::uint32_t* a,
                                    std::size_t ap, std::size_t aq, const std::uint32_t* b, std::size_t bp, float* c,
                                    std::size_t ldc, bool accumulate, std::size_t cols) {
  static_assert(sizeof...(I) == std::size_t(MR * NV));
  __m512 acc[MR * NV] = {((void)I, _mm512_setzero_ps())...};
  for (std::size_t q = 0; q < pairs; ++q) {
    const std::uint32_t* bq = b + q * bp;
    __m512bh bv[NV];
    ((I < std::size_t(NV) ? void(bv[I] = __m512bh(_mm512_loadu_si512(bq + I * 16))) : void()), ...);
    const std::uint32_t* aq_ = a + q * aq;
    ((acc[I] = _mm512_dpbf16_ps(acc[I], __m512bh(_mm512_set1_epi32(int(aq_[(I / NV) * ap]))), bv[I % NV])), ...);
  }
  (avx512::tile_out<Partial>(c + (I / NV) * ldc + (I % NV) * 16, acc[I], accumulate,
                             direct::lanes_left(cols, (I % NV) * 16)),
   ...);
}

/// `rows` (1 to avx512::mr_of<NV>) rows of tiles: the full tile, else tiles of 4, 2 and 1 rows.
template <int NV, bool Partial>
DTRAIN_AVX512_BF16 inline void tile_rows(std::size_t rows, std::size_t pairs, const std::uint32_t* a, std::size_t ap,
                                         std::size_t aq, const std::uint32_t* b, std::size_t bp, float* c,
                                         std::size_t ldc, bool accumulate, std::size_t cols) {
  constexpr int full = avx512::mr_of<NV>;
  auto run = [&]<int R>(std::size_t done) {
    tile<NV, R, Partial>(std::make_index_sequence<R * NV>{}, pairs, a + done * ap, ap, aq, b, bp, c + done * ldc,
                         ldc, accumulate, cols);
  };
  if (rows == std::size_t(full)) return run.template operator()<full>(0);
  std::size_t done = 0;
  for (; rows - done >= 4; done += 4) run.template operator()<4>(done);
  for (; rows - done >= 2; done += 2) run.template operator()<2>(done);
  for (; rows - done >= 1; done += 1) run.template operator()<1>(done);
}

/// Rows [r0, r1) and columns [s0, s1) of a packed problem, as avx512::block: k in blocks of `depth`
/// pairs, then row tiles, then column tiles of NV vectors.
template <int NV>
DTRAIN_AVX512_BF16 inline void block(const packed_problem& q, std::size_t r0, std::size_t r1, std::size_t s0,
                                     std::size_t s1) {
  constexpr std::size_t rows_per_tile = avx512::mr_of<NV>, cols_per_tile = std::size_t(NV) * 16;
  for (std::size_t p0 = 0; p0 < q.pairs; p0 += depth) {
    const std::size_t kc = std::min(depth, q.pairs - p0);
    const bool accumulate = p0 > 0 || q.accumulate;
    for (std::size_t r = r0; r < r1; r += rows_per_tile) {
      const std::size_t rows = std::min(rows_per_tile, r1 - r);
      for (std::size_t s = s0; s < s1; s += cols_per_tile) {
        const std::size_t cols = std::min(cols_per_tile, s1 - s);
        const std::uint32_t* a = q.a + r * q.ap + p0 * q.aq;
        const std::uint32_t* b = q.b + p0 * q.bp + s;
        float* c = q.c + r * q.ldc + s;
        if (cols == cols_per_tile) tile_rows<NV, false>(rows, kc, a, q.ap, q.aq, b, q.bp, c, q.ldc, accumulate, cols);
        else tile_rows<NV, true>(rows, kc, a, q.ap, q.aq, b, q.bp, c, q.ldc, accumulate, cols);
      }
    }
  }
}

/// Rows [r0, r1) and columns [s0, s1) of a packed problem on this thread, in tiles of the vectors
/// product_vectors gives for its columns.
inline void product(const packed_problem& q, std::size_t r0, std::size_t r1, std::size_t s0, std::size_t s1) {
  const int nv = product_vectors(cpu_isa::avx512, q.n);
  if (nv == 4) block<4>(q, r0, r1, s0, s1);
  else if (nv == 2) block<2>(q, r0, r1, s0, s1);
  else block<1>(q, r0, r1, s0, s1);
}

/// The packed problem split over the thread budget as the float32 GEMM splits, in passes of
/// own_gemm_columns columns (a block of packed B stays in the L2 cache).
inline void run(const packed_problem& q) {
  const product_tile tile = product_tile_of(cpu_isa::avx512, q.n);
  direct::split(q.m >= q.n, q.m, q.n, 2 * q.pairs, tile.rows, tile.cols,
                [&](std::size_t r0, std::size_t r1, std::size_t s0, std::size_t s1) {
                  for (std::size_t s = s0; s < s1; s += own_gemm_columns)
                    product(q, r0, r1, s, std::min(s1, s + own_gemm_columns));
                });
}

}  // namespace dtrain::detail::bf16
#endif

namespace dtrain::detail {

/// Row-major C = alpha op(A) op(B) + beta C with op(A) and op(B) rounded to bfloat16 and the products
/// summed in float32, where bf16_gemm_available(); returns false, having done nothing, elsewhere.
inline bool bf16_gemm(transpose ta, transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
                      const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                      std::size_t ldc) {
#if DTRAIN_CPU_AVX
  if (!bf16_gemm_available()) return false;
  if (!scale_c_first(m, n, k, alpha, beta, c, ldc)) return true;
  thread_local std::vector<std::uint32_t> packed_a, packed_b;
  const std::size_t pairs = (k + 1) / 2, ldp = bf16::packed_columns(n);
  packed_a.resize(m * pairs);
  packed_b.resize(pairs * ldp);
  // op(A) row-major: a row's pairs together; transposed: packed as B is (pair-row q holds every row's q),
  // one contiguous pass where gathering rows would be a transpose
  if (ta == transpose::no) bf16::pack_a(m, k, a, lda, packed_a.data());
  else bf16::pack_b(transpose::no, k, m, 1.0f, a, lda, packed_a.data(), m);
  const std::size_t ap = ta == transpose::no ? pairs : 1, aq = ta == transpose::no ? 1 : m;
  bf16::pack_b(tb, k, n, alpha, b, ldb, packed_b.data(), ldp);
  bf16::run({m, n, pairs, packed_a.data(), ap, aq, packed_b.data(), ldp, c, ldc, beta != 0.0f});
  return true;
#else
  (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb, (void)beta,
      (void)c, (void)ldc;
  return false;
#endif
}

}  // namespace dtrain::detail
