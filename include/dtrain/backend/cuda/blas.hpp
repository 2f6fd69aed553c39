#pragma once
/// \file
/// The CUDA backend's BLAS-like kernels: their source and their launches (`basic_cuda`'s members). GEMMs go
/// to cuBLAS; sums run as trees of fixed shape (deterministic), whose levels are these kernels.

#include <algorithm>
#include <cstddef>
#include <limits>
#include <string>

#include "dtrain/backend/backend.hpp"
#include "dtrain/backend/cuda/device_pointer.hpp"
#include "dtrain/backend/cuda/kernel_source.hpp"
#include "dtrain/core/error.hpp"

// clang-format off
DTRAIN_CUDA_SOURCE(blas,

// ---- BLAS-like -----------------------------------------------------------------------------------------
DTRAIN_KERNEL void dtrain_fill(long long n, float v, float* x) {
  for (long long i = first_index(); i < n; i += grid_stride()) x[i] = v;
}
DTRAIN_KERNEL void dtrain_copy(long long n, const float* x, float* y) {
  for (long long i = first_index(); i < n; i += grid_stride()) y[i] = x[i];
}
DTRAIN_KERNEL void dtrain_copy_columns(long long rows, long long cols, const float* x, long long ldx, float* y,
                                      long long ldy) {
  for (long long i = first_index(); i < rows * cols; i += grid_stride()) {
    const long long r = quot(i, cols), j = i - r * cols;
    y[r * ldy + j] = x[r * ldx + j];
  }
}
DTRAIN_KERNEL void dtrain_transpose_matrix(long long rows, long long cols, const float* x, long long ldx, float* y,
                                          long long ldy) {
  for (long long i = first_index(); i < rows * cols; i += grid_stride()) {
    const long long j = quot(i, rows), r = i - j * rows;  // consecutive threads write consecutive y
    y[j * ldy + r] = x[r * ldx + j];
  }
}
DTRAIN_KERNEL void dtrain_axpy(long long n, float a, const float* x, float* y) {
  for (long long i = first_index(); i < n; i += grid_stride()) y[i] += a * x[i];
}
DTRAIN_KERNEL void dtrain_scale(long long n, float a, float* x) {
  for (long long i = first_index(); i < n; i += grid_stride()) x[i] *= a;
}
DTRAIN_KERNEL void dtrain_clip(long long n, float lo, float hi, float* x) {
  for (long long i = first_index(); i < n; i += grid_stride()) x[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i];
}
DTRAIN_KERNEL void dtrain_multiply(long long n, const float* x, const float* y, float* z) {
  for (long long i = first_index(); i < n; i += grid_stride()) z[i] = x[i] * y[i];
}
DTRAIN_KERNEL void dtrain_broadcast_rows(long long rows, long long cols, const float* x, float* y) {
  for (long long i = first_index(); i < rows * cols; i += grid_stride()) y[i] = x[rem(i, cols)];
}
// y = x rounded to the nearest bfloat16 (to 1) or float16 (to 2) value, as core/float16.hpp rounds: ties to
// even, subnormals, overflow to inf, a NaN to the quiet NaN of its sign.
DTRAIN_DEVICE float round_to_bfloat16(float f) {
  const unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __uint_as_float((u | 0x400000u) & 0xffff0000u);
  return __uint_as_float((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}
DTRAIN_DEVICE float round_to_float16(float f) {
  const unsigned int u = __float_as_uint(f), sign = u & 0x80000000u, a = u ^ sign;
  if (a > 0x7f800000u) return __uint_as_float(sign | 0x7fc00000u);
  if (a >= 0x477ff000u) return __uint_as_float(sign | 0x7f800000u);  // at least 65520: inf
  if (a < (113u << 23)) return rintf(f * 16777216.0f) * (1.0f / 16777216.0f);  // below 2^-14: steps of 2^-24
  return __uint_as_float(((u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u));
}
DTRAIN_KERNEL void dtrain_round_to(long long n, int to, const float* x, float* y) {
  for (long long i = first_index(); i < n; i += grid_stride())
    y[i] = to == 1 ? round_to_bfloat16(x[i]) : to == 2 ? round_to_float16(x[i]) : x[i];
}
// Reductions run as a tree of these levels (the host picks `parts` so that no thread adds more than a
// few dozen values: a long chain of dependent loads is what a GPU does slowest).
// v[i] + v[i + stride] + ... (count values; `term` 1: squared, 2: their magnitudes) in the accumulator
// type S, added in order with four loads in flight.
template <class S, class T>
DTRAIN_DEVICE S strided_sum(const T* v, long long i, long long count, long long stride, int term) {
  S s = 0;
  long long k = 0;
  for (; k + 4 <= count; k += 4) {
    const S a = v[i + k * stride], b = v[i + (k + 1) * stride], c = v[i + (k + 2) * stride],
            d = v[i + (k + 3) * stride];
    if (term == 1) { s += a * a; s += b * b; s += c * c; s += d * d; }
    else if (term == 2) { s += fabs(a); s += fabs(b); s += fabs(c); s += fabs(d); }
    else { s += a; s += b; s += c; s += d; }
  }
  for (; k < count; ++k) {
    const S a = v[i + k * stride];
    s += term == 1 ? a * a : (term == 2 ? fabs(a) : a);
  }
  return s;
}
// Column sums, one level: part[ch * cols + j] = the sum of x[r][j] over the rows r = ch, ch + chunks, ...;
// the first level's terms may be x[r][j] by[r][j] (`by` not null) or (x[r][j] - mean[j])^2 (`mean` not null).
DTRAIN_KERNEL void dtrain_column_partials(long long rows, long long cols, long long chunks, const float* x,
                                          const float* by, const float* mean, float* part) {
  for (long long t = first_index(); t < chunks * cols; t += grid_stride()) {
    const long long ch = quot(t, cols), count = quot(rows - ch + chunks - 1, chunks), stride = chunks * cols;
    if (!by && !mean) {
      part[t] = strided_sum<float>(x, t, count, stride, 0);
      continue;
    }
    const float m = mean ? mean[rem(t, cols)] : 0.0f;
    float s = 0.0f;
    for (long long k = 0; k < count; ++k) {
      const long long e = t + k * stride;
      s += by ? x[e] * by[e] : (x[e] - m) * (x[e] - m);
    }
    part[t] = s;
  }
}
// Sum, the first level (in double): part[t] = the sum of x[t], x[t + parts], ... (as strided_sum's `term`).
DTRAIN_KERNEL void dtrain_sum_partials(long long n, long long parts, int term, const float* x, double* part) {
  for (long long t = first_index(); t < parts; t += grid_stride())
    part[t] = strided_sum<double>(x, t, quot(n - t + parts - 1, parts), parts, term);
}
// The next levels: part[t] = the sum of x[t], x[t + parts], ... (doubles).
DTRAIN_KERNEL void dtrain_sum_doubles(long long n, long long parts, const double* x, double* part) {
  for (long long t = first_index(); t < parts; t += grid_stride())
    part[t] = strided_sum<double>(x, t, quot(n - t + parts - 1, parts), parts, 0);
}
// The last level, one thread: out[0] = float(sum / divisor); with `accumulate`, out[0] += float(factor * sum).
DTRAIN_KERNEL void dtrain_sum_finish(long long parts, double divisor, float factor, int accumulate,
                                     const double* part, float* out) {
  if (first_index() != 0) return;
  double s = 0.0;
  for (long long t = 0; t < parts; ++t) s += part[t];
  if (accumulate) out[0] += (float)(factor * s);
  else out[0] = (float)(s / divisor);
}


)
// clang-format on

/// The family's kernels, for the kernel list (cuda/kernels.hpp).
#define DTRAIN_CUDA_BLAS_KERNELS(X)                                                                           \
  X(dtrain_fill) X(dtrain_copy) X(dtrain_copy_columns) X(dtrain_transpose_matrix) X(dtrain_axpy) X(dtrain_multiply)                      \
  X(dtrain_broadcast_rows) X(dtrain_column_partials) X(dtrain_sum_partials) X(dtrain_sum_doubles)             \
  X(dtrain_sum_finish) X(dtrain_round_to) X(dtrain_scale) X(dtrain_clip)

namespace dtrain::cuda_detail {

/// What a tree sum adds up: the values, their squares or their magnitudes (strided_sum's `term`).
enum class sum_of { values = 0, squares = 1, magnitudes = 2 };

template <class D>
class cuda_blas_kernels {
  template <class T>
  using pointer = device_pointer<T>;
  const D& self() const { return static_cast<const D&>(*this); }

 public:
  void fill(std::size_t n, float v, pointer<float> x) const { self().template run<&kernels::dtrain_fill>(n, n, v, x); }
  void copy(std::size_t n, pointer<const float> x, pointer<float> y) const {
    self().template run<&kernels::dtrain_copy>(n, n, x, y);
  }
  void copy_columns(std::size_t rows, std::size_t cols, pointer<const float> x, std::size_t ldx, pointer<float> y,
                    std::size_t ldy) const {
    self().template run<&kernels::dtrain_copy_columns>(rows * cols, rows, cols, x, ldx, y, ldy);
  }
  void transpose_matrix(std::size_t rows, std::size_t cols, pointer<const float> x, std::size_t ldx, pointer<float> y,
                        std::size_t ldy) const {
    self().template run<&kernels::dtrain_transpose_matrix>(rows * cols, rows, cols, x, ldx, y, ldy);
  }
  void axpy(std::size_t n, float a, pointer<const float> x, pointer<float> y) const {
    self().template run<&kernels::dtrain_axpy>(n, n, a, x, y);
  }
  void multiply(std::size_t n, pointer<const float> x, pointer<const float> y, pointer<float> z) const {
    self().template run<&kernels::dtrain_multiply>(n, n, x, y, z);
  }
  void scale(std::size_t n, float a, pointer<float> x) const { self().template run<&kernels::dtrain_scale>(n, n, a, x); }
  void clip(std::size_t n, float lo, float hi, pointer<float> x) const {
    self().template run<&kernels::dtrain_clip>(n, n, lo, hi, x);
  }
  void round_to(std::size_t n, dtype to, pointer<const float> x, pointer<float> y) const {
    self().template run<&kernels::dtrain_round_to>(n, n, to == dtype::bfloat16 ? 1 : to == dtype::float16 ? 2 : 0, x, y);
  }
  /// Row-major C = alpha op(A) op(B) + beta C, as cuBLAS' column-major C^T = op(B)^T op(A)^T.
  void gemm(transpose ta, transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
            pointer<const float> a, std::size_t lda, pointer<const float> b, std::size_t ldb, float beta,
            pointer<float> c, std::size_t ldc) const {
    if (m == 0 || n == 0) return;
    for (std::size_t v : {m, n, k, lda, ldb, ldc})
      if (v > std::size_t(std::numeric_limits<int>::max()))
        throw device_error(self().describe() + ": a GEMM of " + std::to_string(m) + " x " + std::to_string(n) +
                           " x " + std::to_string(k) + " (leading dimensions " + std::to_string(lda) + ", " +
                           std::to_string(ldb) + ", " + std::to_string(ldc) + ") exceeds cuBLAS' 32-bit sizes");
    const auto i = [](std::size_t v) { return static_cast<int>(std::max<std::size_t>(v, 1)); };
    self().issue_gemm({tb == transpose::yes, ta == transpose::yes, static_cast<int>(n), static_cast<int>(m),
                       static_cast<int>(k), alpha, b.get(), i(ldb), a.get(), i(lda), beta, c.get(), i(ldc)});
  }
  void broadcast_rows(std::size_t rows, std::size_t cols, pointer<const float> x, pointer<float> y) const {
    self().template run<&kernels::dtrain_broadcast_rows>(rows * cols, rows, cols, x, y);
  }
  /// y = the column sums of x, as a tree: each level adds at most `fan_in` rows of the one below
  /// (rows ch, ch + chunks, ...: coalesced), the last level into y.
  void column_sums(std::size_t rows, std::size_t cols, pointer<const float> x, pointer<float> y) const {
    column_sums_of(rows, cols, x, nullptr, nullptr, y);
  }
  /// column_sums of x by (element-wise, `by` not null) or of (x - mean[j])^2 (`mean` not null), the terms
  /// made at the tree's first level (the normalization family's sums).
  void column_sums_of(std::size_t rows, std::size_t cols, pointer<const float> x, pointer<const float> by,
                      pointer<const float> mean, pointer<float> y) const {
    if (cols == 0) return;
    std::size_t below = 0;
    for (std::size_t r = rows; r > fan_in; r = parts_of(r)) below += parts_of(r) * cols;
    auto* part = static_cast<float*>(self().scratch(below * sizeof(float)));
    const float *from = x.get(), *b = by.get(), *m = mean.get();
    for (; rows > fan_in; rows = parts_of(rows)) {
      const std::size_t chunks = parts_of(rows);
      self().template run<&kernels::dtrain_column_partials>(chunks * cols, rows, cols, chunks, from, b, m, part);
      from = part, part += chunks * cols, b = m = nullptr;
    }
    self().template run<&kernels::dtrain_column_partials>(cols, rows, cols, 1, from, b, m, y);
  }
  void sum(std::size_t n, pointer<const float> x, pointer<float> out) const {
    reduce(n, x, sum_of::values, 1.0, 0.0f, false, out);
  }

 protected:
  /// A reduction tree's fan-in: no thread adds more values than this.
  static constexpr std::size_t fan_in = 32;
  static std::size_t parts_of(std::size_t n) { return (n + fan_in - 1) / fan_in; }
  /// The doubles a sum of n values keeps between its levels.
  static std::size_t tree_size(std::size_t n) {
    std::size_t total = std::max<std::size_t>(parts_of(n), 1);
    for (std::size_t p = total; p > fan_in; p = parts_of(p)) total += parts_of(p);
    return total;
  }
  /// out[0] = sum(x) (of squares with `square`) / divisor; with `accumulate`, out[0] += factor sum. In
  /// double, as a tree (levels in `part`, tree_size(n) doubles; the scratch block when null): the sum
  /// of the other families' kernels (l2's penalty, a metric's total).
  void reduce(std::size_t n, pointer<const float> x, sum_of term, double divisor, float factor, bool accumulate,
              pointer<float> out, double* part = nullptr) const {
    if (!part) part = static_cast<double*>(self().scratch(tree_size(n) * sizeof(double)));
    std::size_t parts = std::max<std::size_t>(parts_of(n), 1);
    self().template run<&kernels::dtrain_sum_partials>(parts, n, parts, int(term), x, part);
    for (; parts > fan_in; part += parts, parts = parts_of(parts))
      self().template run<&kernels::dtrain_sum_doubles>(parts_of(parts), parts, parts_of(parts), part, part + parts);
    self().template run<&kernels::dtrain_sum_finish>(1, parts, divisor, factor, accumulate ? 1 : 0, part, out);
  }
};

}  // namespace dtrain::cuda_detail
