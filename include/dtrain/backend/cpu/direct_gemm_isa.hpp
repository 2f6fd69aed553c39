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

/// One accumulator of a tile into C at `to` (`left` valid lanes when Partial).
template <bool Partial>
DTRAIN_ISA_TARGET DTRAIN_ISA_OP void tile_out(float* to, vec x, bool accumulate, std::size_t left) {
  if (accumulate) x = add(Partial ? load_part(to, left) : load(to), x);
  if (Partial) store_part(to, x, left);
  else store(to, x);
}

template <int NV, int MR, bool Partial, std::size_t... I>
DTRAIN_ISA_TARGET inline void tile(std::index_sequence<I...>, std::size_t k, const float* a, std::size_t ars,
                                   std::size_t aps, const float* b, std::size_t ldb, float* c, std::size_t ldc,
                                   bool accumulate, std::size_t cols) {
  // Accumulator I is row I / NV, vector I % NV. Folds over I, not loops: each index a constant from the
  // start, the accumulators stay in registers at any optimisation level (at -O1 and -O2 GCC left loops
  // over an array of them in memory, at half the speed or less).
  static_assert(sizeof...(I) == std::size_t(MR * NV));
  auto left = [cols](std::size_t i) { return direct::lanes_left(cols, (i % NV) * lanes); };
  vec acc[MR * NV] = {((void)I, zero())...};
  for (std::size_t p = 0; p < k; ++p) {
    const float* bp = b + p * ldb;
    vec bv[NV];
    ((I < std::size_t(NV) ? void(bv[I % NV] = Partial ? load_part(bp + (I % NV) * lanes, left(I))
                                                     : load(bp + (I % NV) * lanes))
                          : void()),
     ...);
    ((acc[I] = fma(broadcast(a + (I / NV) * ars + p * aps), bv[I % NV], acc[I])), ...);
  }
  (tile_out<Partial>(c + (I / NV) * ldc + (I % NV) * lanes, acc[I], accumulate, left(I)), ...);
}

/// C[0..MR) x [0..NV lanes) (+)= sum over p < k of a(r, p) b[p][.], a(r, p) = a[r ars + p aps]; `cols`
/// valid columns when Partial (the rest neither read nor written). The sum starts from zero in registers
/// and is added to C at the end: over k in blocks (block() below) that is a two-level sum, whose rounding
/// error grows with the block length plus the block count, not with k (k = 21,632 in the CNN's dense
/// layer: one running sum from C was 8x further from a float64 reference than Keras).
template <int NV, int MR, bool Partial>
DTRAIN_ISA_TARGET inline void tile(std::size_t k, const float* a, std::size_t ars, std::size_t aps,
                                   const float* b, std::size_t ldb, float* c, std::size_t ldc,
                                   bool accumulate, std::size_t cols) {
  tile<NV, MR, Partial>(std::make_index_sequence<MR * NV>{}, k, a, ars, aps, b, ldb, c, ldc, accumulate, cols);
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

/// out[i] = sum over p of a(arow[i], p) times row p of B from column s (`cols` of them), for i < lanes: one
/// block of block_transposed (a fold, so the sums stay in registers; see tile).
template <std::size_t... I>
DTRAIN_ISA_TARGET inline void transposed_dots(std::index_sequence<I...>, const direct_gemm_problem& q,
                                              const float* const* arow, std::size_t s, std::size_t cols,
                                              vec (&out)[lanes]) {
  vec acc[lanes] = {((void)I, zero())...};
  for (std::size_t p = 0; p < q.k; ++p) {
    const float* bp = q.b + p * q.ldb + s;
    const vec bv = cols == std::size_t(lanes) ? load(bp) : load_part(bp, cols);
    ((acc[I] = fma(broadcast(arow[I] + p * q.aps), bv, acc[I])), ...);
  }
  ((out[I] = acc[I]), ...);
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
      transposed_dots(std::make_index_sequence<lanes>{}, q, arow, s, cols, acc);
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
