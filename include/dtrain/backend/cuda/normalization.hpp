#pragma once
/// \file
/// The CUDA backend's normalization kernels (layer normalization one thread per row, the cpu backend's
/// sums in its order; batch normalization element-wise, its statistics column sums): source and launches.

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "dtrain/backend/backend.hpp"
#include "dtrain/backend/cuda/device_pointer.hpp"
#include "dtrain/backend/cuda/kernel_source.hpp"

// clang-format off
DTRAIN_CUDA_SOURCE(normalization,

// ---- layer normalization: one thread per row, the cpu backend's sums in its order -------------------------
DTRAIN_KERNEL void dtrain_layer_norm_forward(long long rows, long long cols, float epsilon, const float* x,
                                             const float* gamma, const float* beta, float* y, float* xhat,
                                             float* inv_std) {
  for (long long r = first_index(); r < rows; r += grid_stride()) {
    const float* xr = x + r * cols;
    float mean = 0.0f, var = 0.0f;
    for (long long j = 0; j < cols; ++j) mean += xr[j];
    mean /= (float)cols;
    for (long long j = 0; j < cols; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    const float inv = 1.0f / sqrtf(var / (float)cols + epsilon);
    inv_std[r] = inv;
    for (long long j = 0; j < cols; ++j) {
      const float h = (xr[j] - mean) * inv;
      xhat[r * cols + j] = h;
      y[r * cols + j] = h * gamma[j] + beta[j];
    }
  }
}
DTRAIN_KERNEL void dtrain_layer_norm_backward(long long rows, long long cols, const float* xhat, const float* inv_std,
                                              const float* gamma, const float* dy, float* dx) {
  for (long long r = first_index(); r < rows; r += grid_stride()) {
    const float *xr = xhat + r * cols, *dr = dy + r * cols;
    float mg = 0.0f, mgx = 0.0f;
    for (long long j = 0; j < cols; ++j) { mg += dr[j] * gamma[j]; mgx += dr[j] * gamma[j] * xr[j]; }
    mg /= (float)cols;
    mgx /= (float)cols;
    for (long long j = 0; j < cols; ++j) dx[r * cols + j] = inv_std[r] * (dr[j] * gamma[j] - mg - xr[j] * mgx);
  }
}

// ---- batch normalization: element-wise (the sums are column sums, cuda/blas.hpp's column_sums_of) ---------
DTRAIN_KERNEL void dtrain_moving_average(long long n, float momentum, const float* value, float* average) {
  for (long long i = first_index(); i < n; i += grid_stride())
    average[i] = average[i] * momentum + value[i] * (1.0f - momentum);
}
DTRAIN_KERNEL void dtrain_batch_norm_forward(long long rows, long long cols, float epsilon, const float* x,
                                             const float* mean, const float* variance, const float* gamma,
                                             const float* beta, float* y, float* xhat, float* inv_std) {
  for (long long e = first_index(); e < rows * cols; e += grid_stride()) {
    const long long j = rem(e, cols);
    const float inv = 1.0f / sqrtf(variance[j] + epsilon);
    const float h = (x[e] - mean[j]) * inv;
    if (xhat) xhat[e] = h;
    if (e < cols) inv_std[j] = inv;
    y[e] = h * gamma[j] + beta[j];
  }
}
DTRAIN_KERNEL void dtrain_batch_norm_backward(long long rows, long long cols, float inv_count, const float* xhat,
                                              const float* inv_std, const float* gamma, const float* sums,
                                              const float* dy, float* dx) {
  for (long long e = first_index(); e < rows * cols; e += grid_stride()) {
    const long long j = rem(e, cols);
    const float centred = sums ? dy[e] - inv_count * (sums[cols + j] + xhat[e] * sums[j]) : dy[e];
    dx[e] = gamma[j] * inv_std[j] * centred;
  }
}


)
// clang-format on

/// The family's kernels, for the kernel list (cuda/kernels.hpp).
#define DTRAIN_CUDA_NORMALIZATION_KERNELS(X)                                                                  \
  X(dtrain_layer_norm_forward) X(dtrain_layer_norm_backward) X(dtrain_moving_average)                         \
  X(dtrain_batch_norm_forward) X(dtrain_batch_norm_backward)

namespace dtrain::cuda_detail {

template <class D>
class cuda_normalization_kernels {
  template <class T>
  using pointer = device_pointer<T>;
  const D& self() const { return static_cast<const D&>(*this); }

 public:
  void layer_normalization_forward(std::size_t rows, std::size_t cols, float epsilon, pointer<const float> x,
                                   pointer<const float> gamma, pointer<const float> beta, pointer<float> y,
                                   pointer<float> xhat, pointer<float> inv_std) const {
    self().template run<&kernels::dtrain_layer_norm_forward>(rows, rows, cols, epsilon, x, gamma, beta, y, xhat,
                                                              inv_std);
  }
  void layer_normalization_backward(std::size_t rows, std::size_t cols, pointer<const float> xhat,
                                    pointer<const float> inv_std, pointer<const float> gamma,
                                    pointer<const float> dy, pointer<float> dx) const {
    self().template run<&kernels::dtrain_layer_norm_backward>(rows, rows, cols, xhat, inv_std, gamma, dy, dx);
  }
  void squared_deviation_sums(std::size_t rows, std::size_t cols, pointer<const float> x, pointer<const float> mean,
                              pointer<float> out) const {
    self().column_sums_of(rows, cols, x, nullptr, mean, out);
  }
  void moving_average(std::size_t n, float momentum, pointer<const float> value, pointer<float> average) const {
    self().template run<&kernels::dtrain_moving_average>(n, n, momentum, value, average);
  }
  void batch_normalization_forward(std::size_t rows, std::size_t cols, float epsilon, pointer<const float> x,
                                   pointer<const float> mean, pointer<const float> variance,
                                   pointer<const float> gamma, pointer<const float> beta, pointer<float> y,
                                   pointer<float> xhat, pointer<float> inv_std) const {
    self().template run<&kernels::dtrain_batch_norm_forward>(rows * cols, rows, cols, epsilon, x, mean, variance,
                                                              gamma, beta, y, xhat, inv_std);
  }
  void batch_normalization_gradient_sums(std::size_t rows, std::size_t cols, pointer<const float> dy,
                                         pointer<const float> xhat, pointer<float> sums) const {
    self().column_sums_of(rows, cols, dy, xhat, nullptr, sums);
    self().column_sums(rows, cols, dy, sums + cols);
  }
  void batch_normalization_backward(std::size_t rows, std::size_t cols, float inv_count, pointer<const float> xhat,
                                    pointer<const float> inv_std, pointer<const float> gamma,
                                    pointer<const float> sums, pointer<const float> dy, pointer<float> dx) const {
    self().template run<&kernels::dtrain_batch_norm_backward>(rows * cols, rows, cols, inv_count, xhat, inv_std,
                                                               gamma, sums, dy, dx);
  }
};

}  // namespace dtrain::cuda_detail
