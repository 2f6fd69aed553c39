#pragma once
/// \file
/// The CUDA backend's activation kernels (kind: the `activation_kind` as an int) and leaky ReLU: their
/// source and their launches. `dtrain_bias_activation` is conv2d's epilogue (cuda/window.hpp).

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "dtrain/backend/backend.hpp"
#include "dtrain/backend/cuda/device_pointer.hpp"
#include "dtrain/backend/cuda/kernel_source.hpp"

// clang-format off
DTRAIN_CUDA_SOURCE(activations,

// ---- activations (kind: 0 linear, 1 relu, 2 sigmoid, 3 tanh, 4 softmax, 5 gelu) -------------------------
DTRAIN_DEVICE float activate(int kind, float x) {
  if (kind == 1) return x > 0.0f ? x : 0.0f;
  if (kind == 2) return 1.0f / (1.0f + expf(-x));
  if (kind == 3) return tanhf(x);
  if (kind == 5) return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  return x;
}
// y = activation(x); y may be x.
DTRAIN_KERNEL void dtrain_activation_forward(long long rows, long long cols, int kind, const float* x, float* y) {
  if (kind == 4) {  // softmax along each row, the row maximum subtracted first
    for (long long r = first_index(); r < rows; r += grid_stride()) {
      const float* in = x + r * cols;
      float* row = y + r * cols;
      float m = in[0];
      for (long long j = 1; j < cols; ++j) m = in[j] > m ? in[j] : m;
      float s = 0.0f;
      for (long long j = 0; j < cols; ++j) s += (row[j] = expf(in[j] - m));
      const float inv = 1.0f / s;
      for (long long j = 0; j < cols; ++j) row[j] *= inv;
    }
    return;
  }
  for (long long i = first_index(); i < rows * cols; i += grid_stride()) y[i] = activate(kind, x[i]);
}
// y = activation(y + b[column]) for the elementwise kinds (not softmax; y alone where b is null); z = y + b
// first where z is given (the pre-activations, for gelu's backward).
DTRAIN_KERNEL void dtrain_bias_activation(long long rows, long long cols, int kind, const float* b, float* z,
                                          float* y) {
  for (long long i = first_index(); i < rows * cols; i += grid_stride()) {
    const float v = b ? y[i] + b[rem(i, cols)] : y[i];
    if (z) z[i] = v;
    y[i] = activate(kind, v);
  }
}
// dx = d loss / d input from dy = d loss / d output, the input z (gelu) and the output y; dx may be dy.
DTRAIN_KERNEL void dtrain_activation_backward(long long rows, long long cols, int kind, const float* z,
                                              const float* y, const float* dy, float* dx) {
  if (kind == 4) {
    for (long long r = first_index(); r < rows; r += grid_stride()) {
      const float* yr = y + r * cols;
      const float* dr = dy + r * cols;
      float* out = dx + r * cols;
      float dot = 0.0f;
      for (long long j = 0; j < cols; ++j) dot += dr[j] * yr[j];
      for (long long j = 0; j < cols; ++j) out[j] = yr[j] * (dr[j] - dot);
    }
    return;
  }
  for (long long i = first_index(); i < rows * cols; i += grid_stride()) {
    if (kind == 1) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
    else if (kind == 2) dx[i] = dy[i] * (y[i] * (1.0f - y[i]));
    else if (kind == 3) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
    else if (kind == 5) {
      const float x = z[i];
      const float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
      dx[i] = dy[i] * (cdf + x * 0.39894228040143268f * expf(-0.5f * x * x));
    } else dx[i] = dy[i];
  }
}

// ---- leaky ReLU -----------------------------------------------------------------------------------------
DTRAIN_KERNEL void dtrain_leaky_relu_forward(long long n, float slope, const float* x, float* y) {
  for (long long i = first_index(); i < n; i += grid_stride()) y[i] = x[i] > 0.0f ? x[i] : slope * x[i];
}
DTRAIN_KERNEL void dtrain_leaky_relu_backward(long long n, float slope, const float* x, const float* dy, float* dx) {
  for (long long i = first_index(); i < n; i += grid_stride()) dx[i] = x[i] > 0.0f ? dy[i] : slope * dy[i];
}


)
// clang-format on

/// The family's kernels, for the kernel list (cuda/kernels.hpp).
#define DTRAIN_CUDA_ACTIVATION_KERNELS(X)                                                                     \
  X(dtrain_activation_forward) X(dtrain_bias_activation) X(dtrain_activation_backward)                        \
  X(dtrain_leaky_relu_forward) X(dtrain_leaky_relu_backward)

namespace dtrain::cuda_detail {

template <class D>
class cuda_activation_kernels {
  template <class T>
  using pointer = device_pointer<T>;
  const D& self() const { return static_cast<const D&>(*this); }

 public:
  template <activation_kind A>
  void activation_forward(std::size_t rows, std::size_t cols, pointer<const float> x, pointer<float> y) const {
    if (A != activation_kind::linear || x.get() != y.get())
      self().template run<&kernels::dtrain_activation_forward>(A == activation_kind::softmax ? rows : rows * cols,
                                                                rows, cols, static_cast<int>(A), x, y);
  }
  template <activation_kind A>
  void activation_backward(std::size_t rows, std::size_t cols, pointer<const float> z, pointer<const float> y,
                           pointer<const float> dy, pointer<float> dx) const {
    if (A != activation_kind::linear || dy.get() != dx.get())
      self().template run<&kernels::dtrain_activation_backward>(A == activation_kind::softmax ? rows : rows * cols,
                                                                 rows, cols, static_cast<int>(A), z, y, dy, dx);
  }
  void leaky_relu_forward(std::size_t n, float slope, pointer<const float> x, pointer<float> y) const {
    self().template run<&kernels::dtrain_leaky_relu_forward>(n, n, slope, x, y);
  }
  void leaky_relu_backward(std::size_t n, float slope, pointer<const float> x, pointer<const float> dy,
                           pointer<float> dx) const {
    self().template run<&kernels::dtrain_leaky_relu_backward>(n, n, slope, x, dy, dx);
  }
};

}  // namespace dtrain::cuda_detail
