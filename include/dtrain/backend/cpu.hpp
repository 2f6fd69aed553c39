#pragma once
/// \file
/// `cpu`: the host backend. Its memory is host memory (pointers are plain pointers), GEMMs run on
/// dtrain's own kernels (cpu/gemm.hpp; on BLAS with DTRAIN_GEMM=blas), every other kernel is a loop of
/// its own, and the large ones (GEMMs, convolutions, element-wise passes, column sums, normalization,
/// optimizer steps) are split over dtrain's thread budget (core/threads.hpp). Kernels run on the caller's
/// thread and are done when they return. The thread split never changes a result: every split computes
/// the same sums in the same order (on BLAS, for a GEMM split into blocks of C, as far as the BLAS
/// computes an element the same way in any block: OpenBLAS' AVX-512 kernels do, its Zen kernels round
/// differently by block).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "dtrain/backend/backend.hpp"
#include "dtrain/backend/cpu/activations.hpp"
#include "dtrain/backend/cpu/embedding.hpp"
#include "dtrain/backend/cpu/gemm.hpp"
#include "dtrain/backend/cpu/losses.hpp"
#include "dtrain/backend/cpu/normalization.hpp"
#include "dtrain/backend/cpu/reductions.hpp"
#include "dtrain/backend/cpu/regularization.hpp"
#include "dtrain/backend/cpu/updates.hpp"
#include "dtrain/backend/cpu/window.hpp"
#include "dtrain/core/tensor.hpp"

namespace dtrain {

/// Host memory and the BLAS-like kernels here; every other family in its own file (cpu/<family>.hpp).
struct cpu : detail::cpu_activation_kernels,
             detail::cpu_window_kernels,
             detail::cpu_normalization_kernels,
             detail::cpu_embedding_kernels,
             detail::cpu_regularization_kernels,
             detail::cpu_loss_kernels,
             detail::cpu_update_kernels {
  static constexpr const char* name = "cpu";
  static constexpr device_kind device = device_kind::cpu;

  template <class T>
  using pointer = T*;

  /// Host memory, uninitialised when allocated (pages a kernel never writes cost nothing).
  template <class T>
  class buffer {
   public:
    using value_type = T;
    buffer() = default;
    explicit buffer(std::size_t n) : data_(n ? new T[n] : nullptr), size_(n) {}
    T* data() const { return data_.get(); }
    std::size_t size() const { return size_; }

   private:
    std::unique_ptr<T[]> data_;
    std::size_t size_ = 0;
  };

  template <class T>
  buffer<T> allocate(std::size_t n) const {
    return buffer<T>(n);
  }
  template <class T>
  void upload(std::size_t n, const T* host, T* p) const {
    if (n) std::memcpy(p, host, n * sizeof(T));
  }
  template <class T>
  void download(std::size_t n, const T* p, T* host) const {
    if (n) std::memcpy(host, p, n * sizeof(T));
  }
  void synchronize() const {}

  // ---- BLAS-like ---------------------------------------------------------------------------------------
  // (the element-wise kernels split by elements over the thread budget: detail::for_rows)
  void fill(std::size_t n, float value, float* x) const {
    detail::for_rows(n, 1, [&](std::size_t b, std::size_t e) { std::fill(x + b, x + e, value); });
  }
  void copy(std::size_t n, const float* x, float* y) const {
    detail::for_rows(n, 1, [&](std::size_t b, std::size_t e) {
      if (e > b) std::memcpy(y + b, x + b, (e - b) * sizeof(float));
    });
  }
  /// y[r][j] = x[r][j] for r < rows, j < cols, rows ldx and ldy floats apart.
  void copy_columns(std::size_t rows, std::size_t cols, const float* x, std::size_t ldx, float* y,
                    std::size_t ldy) const {
    if (cols == 0) return;
    for (std::size_t r = 0; r < rows; ++r) copy(cols, x + r * ldx, y + r * ldy);
  }
  /// y[j][i] = x[i][j] for i < rows, j < cols (y is cols x rows), in 16 x 16 blocks that stay in cache.
  void transpose_matrix(std::size_t rows, std::size_t cols, const float* x, std::size_t ldx, float* y,
                        std::size_t ldy) const {
    for (std::size_t i0 = 0; i0 < rows; i0 += 16)
      for (std::size_t j0 = 0; j0 < cols; j0 += 16)
        for (std::size_t i = i0; i < std::min(rows, i0 + 16); ++i)
          for (std::size_t j = j0; j < std::min(cols, j0 + 16); ++j) y[j * ldy + i] = x[i * ldx + j];
  }
  /// y += alpha x
  void axpy(std::size_t n, float alpha, const float* x, float* y) const {
    detail::for_rows(n, 1, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) y[i] += alpha * x[i];
    });
  }
  /// z = x * y, element by element (z may be x or y)
  void multiply(std::size_t n, const float* x, const float* y, float* z) const {
    detail::for_rows(n, 1, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) z[i] = x[i] * y[i];
    });
  }
  /// x *= alpha, in place.
  void scale(std::size_t n, float alpha, float* x) const {
    detail::for_rows(n, 1, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) x[i] *= alpha;
    });
  }
  /// x = x clamped to [lo, hi], in place; a NaN stays NaN.
  void clip(std::size_t n, float lo, float hi, float* x) const {
    detail::for_rows(n, 1, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) x[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i];
    });
  }
  /// y = x, each value rounded to the nearest value of `to` (y may be x).
  void round_to(std::size_t n, dtype to, const float* x, float* y) const {
    detail::for_rows(n, 1, [&](std::size_t b, std::size_t e) {
      if (to == dtype::bfloat16)
        for (std::size_t i = b; i < e; ++i) y[i] = detail::round_through_bfloat16(x[i]);
      else if (to == dtype::float16)
        round_through<float16>(x + b, e - b, y + b);  // (F16C's conversions where the CPU has them)
      else if (x != y)
        std::copy(x + b, x + e, y + b);
    });
  }
  /// Row-major C = alpha op(A) op(B) + beta C with op(A) m x k and op(B) k x n (cblas_sgemm's meaning).
  void gemm(transpose ta, transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
            std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc) const {
    detail::planned_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, gemm_dtype_);
  }
  /// This backend with its GEMMs and convolutions multiplying operands of dtype `d` (a mixed_bfloat16
  /// layer's: bfloat16 on AVX512_BF16; float32 multiplies elsewhere, and for float16).
  cpu with_gemm_dtype(dtype d) const {
    cpu c = *this;
    c.gemm_dtype_ = d;
    return c;
  }
  /// Every row of y (rows x cols) = x (cols).
  void broadcast_rows(std::size_t rows, std::size_t cols, const float* x, float* y) const {
    for (std::size_t r = 0; r < rows; ++r) std::memcpy(y + r * cols, x, cols * sizeof(float));
  }
  /// y (cols) = the sum of the rows of x (rows x cols) in float, in fixed slices of rows (detail::sum_rows).
  void column_sums(std::size_t rows, std::size_t cols, const float* x, float* y) const {
    detail::column_sums(rows, cols, x, y);
  }
  /// out[0] = the sum of x, accumulated in double.
  void sum(std::size_t n, const float* x, float* out) const {
    double s = 0.0;
    for (std::size_t i = 0; i < n; ++i) s += x[i];
    *out = static_cast<float>(s);
  }
};

static_assert(backend<cpu>);

/// Matrix product of two rank-2 tensors on the host (`keras.ops.matmul`), by the cpu backend's GEMM.
inline tensor matmul(const tensor& a, const tensor& b) {
  if (a.dimension() != 2 || b.dimension() != 2 || a.shape()[1] != b.shape()[0])
    throw shape_error("matmul: cannot multiply " + shape_str(a.shape()) + " by " + shape_str(b.shape()));
  const std::size_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  tensor c = zeros({m, n});
  if (k > 0) cpu{}.gemm(transpose::no, transpose::no, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  return c;
}

}  // namespace dtrain
