/// \file
/// The body of the direct GEMM (backend/cpu/direct_gemm.hpp), written once for every instruction set:
/// direct_gemm.hpp includes this file once per AVX set, with `DTRAIN_ISA` naming the namespace that
/// holds the set's vector operations (backend/cpu/isa.hpp) and `DTRAIN_ISA_TARGET` the functions' target
/// attribute. On its own (without those macros) it defines nothing. No include guard, by design.
#if defined(DTRAIN_ISA) && defined(DTRAIN_ISA_TARGET)

namespace dtrain::detail::DTRAIN_ISA {

/// Vectors per row of a tile (the widest; AVX-512 also has tiles of 2 and 1 vectors for C of 32 or 16
/// columns, a convolution's few filters) and rows of a tile of NV vectors (each a broadcast of one A
/// value per step): mr * NV accumulators, plus NV B vectors and a broadcast, fit the register file, and
/// 8 rows keep enough independent FMAs in flight. (14 rows of one vector were measured no faster.)
inline constexpr int nv = lanes == 16 ? 4 : 2;
template <int NV>
inline constexpr int mr_of = NV == 4 || lanes == 8 ? 6 : 8;
inline constexpr int mr = mr_of<nv>;

/// C[0..MR) x [0..NV lanes) (+)= sum over p < k of a(r, p) b[p][.], a(r, p) = a[r ars + p aps]; `cols`
/// valid columns when Partial (the rest neither read nor written). The sum starts from zero in registers
/// and is added to C at the end: over k in blocks (block() below) that is a two-level sum, whose rounding
/// error grows with the block length plus the block count, not with k (k = 21,632 in the CNN's dense
/// layer: one running sum from C was 8x further from a float64 reference than Keras).
template <int NV, int MR, bool Partial>
DTRAIN_ISA_TARGET inline void tile(std::size_t k, const float* a, std::size_t ars, std::size_t aps,
                                   const float* b, std::size_t ldb, float* c, std::size_t ldc,
                                   bool accumulate, std::size_t cols) {
  // (the loops over registers unrolled whatever the optimisation level: at -O2, GCC leaves them rolled
  // and keeps the accumulators in memory, at half the speed)
  vec acc[MR][NV];
#pragma GCC unroll 16
  for (auto& row : acc)
#pragma GCC unroll 16
    for (auto& x : row) x = zero();
  for (std::size_t p = 0; p < k; ++p) {
    vec bv[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      const std::size_t left = direct::lanes_left(cols, std::size_t(v) * lanes);
      bv[v] = Partial ? load_part(b + p * ldb + v * lanes, left) : load(b + p * ldb + v * lanes);
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const vec ar = broadcast(a + r * ars + p * aps);
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[r][v] = fma(ar, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      const std::size_t left = direct::lanes_left(cols, std::size_t(v) * lanes);
      float* to = c + r * ldc + v * lanes;
      if (accumulate) acc[r][v] = add(Partial ? load_part(to, left) : load(to), acc[r][v]);
      if (Partial) store_part(to, acc[r][v], left);
      else store(to, acc[r][v]);
    }
}

/// A tile of `rows` (1 to mr_of<NV>) rows: a last, shorter one in tiles of 8, 4, 2 and 1 rows (fewer
/// instances of `tile` to compile in every program than one per row count).
template <int NV, bool Partial>
DTRAIN_ISA_TARGET inline void tile_rows(std::size_t rows, std::size_t k, const float* a, std::size_t ars,
                                        std::size_t aps, const float* b, std::size_t ldb, float* c,
                                        std::size_t ldc, bool accumulate, std::size_t cols) {
  constexpr int full = mr_of<NV>;
  if (rows == std::size_t(full)) return tile<NV, full, Partial>(k, a, ars, aps, b, ldb, c, ldc, accumulate, cols);
  std::size_t done = 0;
  auto part = [&]<int R>() {
    if constexpr (R < full)
      for (; rows - done >= std::size_t(R); done += R)
        tile<NV, R, Partial>(k, a + done * ars, ars, aps, b, ldb, c + done * ldc, ldc, accumulate, cols);
  };
  part.template operator()<8>(), part.template operator()<4>(), part.template operator()<2>(), part.template operator()<1>();
}

/// Rows [r0, r1) and columns [s0, s1) of C (ldc) = A B (+ C when `accumulate`), B row-major (ldb), in
/// tiles of NV vectors: k in blocks of `direct_gemm_depth` (a block of B stays in the L2 cache while
/// every row tile passes over it), then rows in tiles of `mr_of<NV>`, then columns in tiles of NV vectors.
template <int NV = nv>
DTRAIN_ISA_TARGET inline void block(const direct_gemm_problem& q, std::size_t r0, std::size_t r1,
                                    std::size_t s0, std::size_t s1) {
  constexpr std::size_t rows_per_tile = mr_of<NV>, cols_per_tile = std::size_t(NV) * lanes;
  for (std::size_t p0 = 0; p0 < q.k; p0 += direct_gemm_depth) {
    const std::size_t kc = std::min(direct_gemm_depth, q.k - p0);
    const bool accumulate = p0 > 0 || q.accumulate;
    for (std::size_t r = r0; r < r1; r += rows_per_tile) {
      const std::size_t rows = std::min(rows_per_tile, r1 - r);
      const float* a = q.a + r * q.ars + p0 * q.aps;
      for (std::size_t s = s0; s < s1; s += cols_per_tile) {
        const std::size_t cols = std::min(cols_per_tile, s1 - s);
        const float* b = q.b + p0 * q.ldb + s;
        float* c = q.c + r * q.ldc + s;
        if (cols == cols_per_tile) tile_rows<NV, false>(rows, kc, a, q.ars, q.aps, b, q.ldb, c, q.ldc, accumulate, cols);
        else tile_rows<NV, true>(rows, kc, a, q.ars, q.aps, b, q.ldb, c, q.ldc, accumulate, cols);
      }
    }
  }
}

/// The transposed store: C^T[r][s] = C[s][r] for rows [r0, r1) of A (C's columns) and all `q.n` columns
/// of B (C's rows), in tiles of `lanes` x `lanes` transposed in registers. C = A B, never accumulated.
/// (Transposing each tile of A's rows first, so that a step's broadcasts come from one cache line, was
/// measured no faster.)
DTRAIN_ISA_TARGET inline void block_transposed(const direct_gemm_problem& q, std::size_t r0, std::size_t r1) {
  for (std::size_t r = r0; r < r1; r += lanes) {
    const std::size_t rows = std::min<std::size_t>(lanes, r1 - r);
    const float* arow[lanes];  // rows past the end repeat the first (their results are dropped)
    for (std::size_t i = 0; i < std::size_t(lanes); ++i) arow[i] = q.a + (r + (i < rows ? i : 0)) * q.ars;
    for (std::size_t s = 0; s < q.n; s += lanes) {
      const std::size_t cols = std::min<std::size_t>(lanes, q.n - s);
      vec acc[lanes];
      for (auto& x : acc) x = zero();
      for (std::size_t p = 0; p < q.k; ++p) {
        const float* bp = q.b + p * q.ldb + s;
        const vec bv = cols == std::size_t(lanes) ? load(bp) : load_part(bp, cols);
        for (int i = 0; i < lanes; ++i) acc[i] = fma(broadcast(arow[i] + p * q.aps), bv, acc[i]);
      }
      float* c = q.c + s * q.ldc + r;  // C rows s.., columns r..
      if (rows == std::size_t(lanes) && cols == std::size_t(lanes)) {
        transpose(acc);
        for (int i = 0; i < lanes; ++i) store(c + i * q.ldc, acc[i]);
      } else {
        float t[lanes][lanes];
        for (int i = 0; i < lanes; ++i) store(t[i], acc[i]);
        for (std::size_t j = 0; j < cols; ++j)
          for (std::size_t i = 0; i < rows; ++i) c[j * q.ldc + i] = t[i][j];
      }
    }
  }
}

}  // namespace dtrain::detail::DTRAIN_ISA

#endif
