#pragma once
/// \file
/// The cpu backend's activation kernels on `rows` rows of `cols` values (softmax works along each row):
/// forward y from x, backward d loss / d input (dx) from d loss / d output (dy), given the input `z`
/// (read by gelu only) and the output `y`; each also in place (y = x, dx = dy). And leaky_relu. Sigmoid,
/// tanh and GELU run the vector loops of activations_isa.hpp on the CPU's best instruction set.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "dtrain/backend/backend.hpp"
#include "dtrain/backend/cpu/isa.hpp"
#include "dtrain/backend/cpu/reductions.hpp"

#define DTRAIN_ISA_FILE "dtrain/backend/cpu/activations_isa.hpp"
#include "dtrain/backend/cpu/each_isa.hpp"

namespace dtrain::detail {

/// `f(activations)` with the activations (activations_isa.hpp) of the best instruction set this CPU has.
template <class F>
void with_vector_activations(F f) {
#if DTRAIN_CPU_AVX
  const cpu_isa isa = best_cpu_isa();
  if (isa == cpu_isa::avx512) return f(avx512::activations{});
  if (isa == cpu_isa::avx2) return f(avx2::activations{});
#endif
  f(baseline::activations{});
}

template <activation_kind A>
void activation_forward(std::size_t rows, std::size_t cols, const float* x, float* y) {
  const std::size_t e = rows * cols;
  if constexpr (A == activation_kind::linear) {
    if (y != x) std::copy_n(x, e, y);
  } else if constexpr (A == activation_kind::relu) {
    for (std::size_t i = 0; i < e; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  } else if constexpr (A == activation_kind::sigmoid) {
    with_vector_activations([&](auto v) { v.sigmoid(e, x, y); });
  } else if constexpr (A == activation_kind::tanh) {
    with_vector_activations([&](auto v) { v.tanh(e, x, y); });
  } else if constexpr (A == activation_kind::softmax) {  // stable: the row maximum is subtracted first
    for (std::size_t r = 0; r < rows; ++r) {
      const float* in = x + r * cols;
      float* row = y + r * cols;
      const float m = *std::max_element(in, in + cols);
      float s = 0.0f;
      for (std::size_t j = 0; j < cols; ++j) s += (row[j] = std::exp(in[j] - m));
      const float inv = 1.0f / s;
      for (std::size_t j = 0; j < cols; ++j) row[j] *= inv;
    }
  } else if constexpr (A == activation_kind::gelu) {  // exact: x Phi(x), Phi through erf
    with_vector_activations([&](auto v) { v.gelu(e, x, y); });
  }
}

template <activation_kind A>
void activation_backward(std::size_t rows, std::size_t cols, const float* z, const float* y, const float* dy,
                         float* dx) {
  const std::size_t e = rows * cols;
  if constexpr (A == activation_kind::linear) {
    if (dx != dy) std::copy_n(dy, e, dx);
  } else if constexpr (A == activation_kind::relu) {
    for (std::size_t i = 0; i < e; ++i) {  // dy read whatever y is: GCC vectorizes only an unconditional load
      const float g = dy[i];
      dx[i] = y[i] > 0.0f ? g : 0.0f;
    }
  } else if constexpr (A == activation_kind::sigmoid) {
    for (std::size_t i = 0; i < e; ++i) dx[i] = dy[i] * (y[i] * (1.0f - y[i]));
  } else if constexpr (A == activation_kind::tanh) {
    for (std::size_t i = 0; i < e; ++i) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
  } else if constexpr (A == activation_kind::softmax) {
    for (std::size_t r = 0; r < rows; ++r) {
      const float* yr = y + r * cols;
      const float* dr = dy + r * cols;
      float* out = dx + r * cols;
      float dot = 0.0f;
      for (std::size_t j = 0; j < cols; ++j) dot += dr[j] * yr[j];
      for (std::size_t j = 0; j < cols; ++j) out[j] = yr[j] * (dr[j] - dot);
    }
  } else if constexpr (A == activation_kind::gelu) {
    with_vector_activations([&](auto v) { v.gelu_backward(e, z, dy, dx); });
  }
}

/// The cpu backend's activation family (`activation_kernels`), each pass split by rows over the thread
/// budget.
struct cpu_activation_kernels {
  template <activation_kind A>
  void activation_forward(std::size_t rows, std::size_t cols, const float* x, float* y) const {
    for_rows(rows, cols, [&](std::size_t r0, std::size_t r1) {
      detail::activation_forward<A>(r1 - r0, cols, x + r0 * cols, y + r0 * cols);
    });
  }
  template <activation_kind A>
  void activation_backward(std::size_t rows, std::size_t cols, const float* z, const float* y, const float* dy,
                           float* dx) const {
    for_rows(rows, cols, [&](std::size_t r0, std::size_t r1) {
      detail::activation_backward<A>(r1 - r0, cols, z ? z + r0 * cols : nullptr, y + r0 * cols, dy + r0 * cols,
                                     dx + r0 * cols);
    });
  }
  /// y = x where x > 0, else slope x (TF's LeakyRelu).
  void leaky_relu_forward(std::size_t n, float slope, const float* x, float* y) const {
    for_rows(n, 1, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) y[i] = x[i] > 0.0f ? x[i] : slope * x[i];
    });
  }
  /// dx = dy where x > 0, else slope dy (TF's LeakyReluGrad; dx may be dy).
  void leaky_relu_backward(std::size_t n, float slope, const float* x, const float* dy, float* dx) const {
    for_rows(n, 1, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) dx[i] = x[i] > 0.0f ? dy[i] : slope * dy[i];
    });
  }
};

}  // namespace dtrain::detail
