#pragma once
/// \file
/// Activation policies. Each one is both a fused policy (`dense<128, relu>`, applied in place on the
/// layer's output) and a standalone layer (`sequential<..., dense<10>, softmax>`), as in Keras where
/// `activation="relu"` and `layers.ReLU()` / `layers.Activation("relu")` coexist.
///
/// Policy contract: `forward(v, rows, features)` maps pre-activations to activations in place, row by
/// row (softmax works along the last axis); `backward(z, y, d, rows, features)` turns d loss / d y into
/// d loss / d z in place, given the pre-activation `z` (only read when `needs_input`) and output `y`.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "dtrain/layers/concepts.hpp"

namespace dtrain {

namespace detail {

/// The standalone-layer form of an activation policy `A`.
template <class A, class In>
struct activation_layer : no_params {
  using input_shape = In;
  using output_shape = In;
  static constexpr const char* keras_name = A::layer_name;
  static constexpr const char* class_name = A::layer_class;
  static constexpr std::size_t features = In::rank == 0 ? 1 : In::dims[In::rank - 1];

  template <class Ctx>
  void forward(Ctx&, const float* x, float* y, std::size_t n, std::span<const float>) {
    std::memcpy(y, x, n * In::size * sizeof(float));
    A::forward(y, n * In::size / features, features);
  }
  template <class Ctx>
  void backward(Ctx&, const float* x, const float* y, float* dy, float* dx, std::size_t n, std::span<const float>,
                std::span<float>) {
    if (!dx) return;
    A::backward(x, y, dy, n * In::size / features, features);
    std::memcpy(dx, dy, n * In::size * sizeof(float));
  }
};

}  // namespace detail

/// The identity (Keras "linear"): what `dense<N>` uses by default.
struct linear {
  static constexpr const char* name = "linear";
  static constexpr const char* layer_name = "activation";
  static constexpr const char* layer_class = "Activation";
  static constexpr bool needs_input = false;
  static void forward(float*, std::size_t, std::size_t) {}
  static void backward(const float*, const float*, float*, std::size_t, std::size_t) {}
  template <class In>
  using bind = detail::activation_layer<linear, In>;
};

/// max(x, 0). As a layer it is Keras' `ReLU` (named re_lu).
struct relu {
  static constexpr const char* name = "relu";
  static constexpr const char* layer_name = "re_lu";
  static constexpr const char* layer_class = "ReLU";
  static constexpr bool needs_input = false;
  static void forward(float* v, std::size_t rows, std::size_t f) {
    for (std::size_t i = 0, e = rows * f; i < e; ++i) v[i] = v[i] > 0.0f ? v[i] : 0.0f;
  }
  static void backward(const float*, const float* y, float* d, std::size_t rows, std::size_t f) {
    for (std::size_t i = 0, e = rows * f; i < e; ++i) d[i] = y[i] > 0.0f ? d[i] : 0.0f;
  }
  template <class In>
  using bind = detail::activation_layer<relu, In>;
};

/// 1 / (1 + exp(-x)).
struct sigmoid {
  static constexpr const char* name = "sigmoid";
  static constexpr const char* layer_name = "activation";
  static constexpr const char* layer_class = "Activation";
  static constexpr bool needs_input = false;
  static void forward(float* v, std::size_t rows, std::size_t f) {
    for (std::size_t i = 0, e = rows * f; i < e; ++i) v[i] = 1.0f / (1.0f + std::exp(-v[i]));
  }
  static void backward(const float*, const float* y, float* d, std::size_t rows, std::size_t f) {
    for (std::size_t i = 0, e = rows * f; i < e; ++i) d[i] *= y[i] * (1.0f - y[i]);
  }
  template <class In>
  using bind = detail::activation_layer<sigmoid, In>;
};

/// Hyperbolic tangent.
struct tanh {
  static constexpr const char* name = "tanh";
  static constexpr const char* layer_name = "activation";
  static constexpr const char* layer_class = "Activation";
  static constexpr bool needs_input = false;
  static void forward(float* v, std::size_t rows, std::size_t f) {
    for (std::size_t i = 0, e = rows * f; i < e; ++i) v[i] = std::tanh(v[i]);
  }
  static void backward(const float*, const float* y, float* d, std::size_t rows, std::size_t f) {
    for (std::size_t i = 0, e = rows * f; i < e; ++i) d[i] *= 1.0f - y[i] * y[i];
  }
  template <class In>
  using bind = detail::activation_layer<tanh, In>;
};

/// Softmax along the last axis (stable: the row maximum is subtracted first).
struct softmax {
  static constexpr const char* name = "softmax";
  static constexpr const char* layer_name = "softmax";
  static constexpr const char* layer_class = "Softmax";
  static constexpr bool needs_input = false;
  static void forward(float* v, std::size_t rows, std::size_t f) {
    for (std::size_t r = 0; r < rows; ++r) {
      float* row = v + r * f;
      const float m = *std::max_element(row, row + f);
      float s = 0.0f;
      for (std::size_t j = 0; j < f; ++j) s += (row[j] = std::exp(row[j] - m));
      const float inv = 1.0f / s;
      for (std::size_t j = 0; j < f; ++j) row[j] *= inv;
    }
  }
  static void backward(const float*, const float* y, float* d, std::size_t rows, std::size_t f) {
    for (std::size_t r = 0; r < rows; ++r) {
      const float* yr = y + r * f;
      float* dr = d + r * f;
      float dot = 0.0f;
      for (std::size_t j = 0; j < f; ++j) dot += dr[j] * yr[j];
      for (std::size_t j = 0; j < f; ++j) dr[j] = yr[j] * (dr[j] - dot);
    }
  }
  template <class In>
  using bind = detail::activation_layer<softmax, In>;
};

/// Exact GELU, x * Phi(x) with the normal CDF through erf (Keras' default, approximate=False).
struct gelu {
  static constexpr const char* name = "gelu";
  static constexpr const char* layer_name = "activation";
  static constexpr const char* layer_class = "Activation";
  static constexpr bool needs_input = true;
  static void forward(float* v, std::size_t rows, std::size_t f) {
    for (std::size_t i = 0, e = rows * f; i < e; ++i)
      v[i] = 0.5f * v[i] * (1.0f + std::erf(v[i] * static_cast<float>(std::numbers::sqrt2 / 2)));
  }
  static void backward(const float* z, const float*, float* d, std::size_t rows, std::size_t f) {
    constexpr float inv_sqrt_2pi = static_cast<float>(std::numbers::inv_sqrtpi / std::numbers::sqrt2);
    for (std::size_t i = 0, e = rows * f; i < e; ++i) {
      const float x = z[i];
      const float cdf = 0.5f * (1.0f + std::erf(x * static_cast<float>(std::numbers::sqrt2 / 2)));
      d[i] *= cdf + x * inv_sqrt_2pi * std::exp(-0.5f * x * x);
    }
  }
  template <class In>
  using bind = detail::activation_layer<gelu, In>;
};

/// Keras' `layers.Activation(a)`: the standalone layer of policy `A` (the policy itself works as well).
template <class A>
using activation = A;

namespace detail {
template <class T>
concept activation_policy = requires(float* v, const float* c, std::size_t n) {
  { T::needs_input } -> std::convertible_to<bool>;
  T::forward(v, n, n);
  T::backward(c, c, v, n, n);
};
template <class T>
struct is_activation : std::bool_constant<activation_policy<T>> {};
}  // namespace detail

}  // namespace dtrain
