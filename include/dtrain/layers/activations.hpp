#pragma once
/// \file
/// Activation policies. Each one is both a fused policy (`dense<128, relu>`, applied in place on the
/// layer's output) and a standalone layer (`sequential<..., dense<10>, softmax>`), as in Keras where
/// `activation="relu"` and `layers.ReLU()` / `layers.Activation("relu")` coexist.
///
/// Policy contract (`detail::activation_policy`): `kind` is the `activation_kind` every backend
/// implements (backend/backend.hpp; softmax works along the last axis); `name` is Keras' name,
/// `layer_name` / `layer_class` the standalone layer's.

#include <cstddef>
#include <string_view>

#include "dtrain/layers/concepts.hpp"

namespace dtrain {

namespace detail {

/// The standalone-layer form of an activation policy `A`.
template <class A, class In, class B>
struct activation_layer : no_params {
  static_assert(activation_kernels<B>, "activation: the backend lacks the activation kernels (activation_kernels)");
  using input_shape = In;
  using output_shape = In;
  using ptr = pointer_t<B, float>;
  using cptr = pointer_t<B, const float>;
  static constexpr const char* keras_name = A::layer_name;
  static constexpr const char* class_name = A::layer_class;
  static constexpr bool supports_masking = true;
  /// Keras' Activation(name) (a ReLU or Softmax layer has its defaults: nothing to write).
  template <class C>
  static void get_config(C& c) {
    if constexpr (A::layer_class == std::string_view("Activation")) c.set("activation", A::name);
    if constexpr (A::layer_class == std::string_view("Softmax")) c.set("axis", -1);
  }
  static constexpr std::size_t features = In::dims[In::rank - 1];

  void forward(layer_context<B>& ctx, cptr x, ptr y, std::size_t n, cptr) {
    ctx.device.template activation_forward<A::kind>(n * In::size / features, features, x, y);
  }
  void backward(layer_context<B>& ctx, cptr x, cptr y, ptr dy, ptr dx, std::size_t n, cptr, ptr) {
    if (!dx) return;
    ctx.device.template activation_backward<A::kind>(n * In::size / features, features, x, y, dy, dx);
  }
};

}  // namespace detail

/// The identity (Keras "linear"): what `dense<N>` uses by default.
struct linear {
  static constexpr activation_kind kind = activation_kind::linear;
  static constexpr const char* name = "linear";
  static constexpr const char* layer_name = "activation";
  static constexpr const char* layer_class = "Activation";
  template <class In, class B>
  using bind = detail::activation_layer<linear, In, B>;
};

/// max(x, 0). As a layer it is Keras' `ReLU` (named re_lu).
struct relu {
  static constexpr activation_kind kind = activation_kind::relu;
  static constexpr const char* name = "relu";
  static constexpr const char* layer_name = "re_lu";
  static constexpr const char* layer_class = "ReLU";
  template <class In, class B>
  using bind = detail::activation_layer<relu, In, B>;
};

/// 1 / (1 + exp(-x)).
struct sigmoid {
  static constexpr activation_kind kind = activation_kind::sigmoid;
  static constexpr const char* name = "sigmoid";
  static constexpr const char* layer_name = "activation";
  static constexpr const char* layer_class = "Activation";
  template <class In, class B>
  using bind = detail::activation_layer<sigmoid, In, B>;
};

/// Hyperbolic tangent.
struct tanh {
  static constexpr activation_kind kind = activation_kind::tanh;
  static constexpr const char* name = "tanh";
  static constexpr const char* layer_name = "activation";
  static constexpr const char* layer_class = "Activation";
  template <class In, class B>
  using bind = detail::activation_layer<tanh, In, B>;
};

/// Softmax along the last axis.
struct softmax {
  static constexpr activation_kind kind = activation_kind::softmax;
  static constexpr const char* name = "softmax";
  static constexpr const char* layer_name = "softmax";
  static constexpr const char* layer_class = "Softmax";
  template <class In, class B>
  using bind = detail::activation_layer<softmax, In, B>;
};

/// Exact GELU, x * Phi(x) with the normal CDF through erf (Keras' default, approximate=False).
struct gelu {
  static constexpr activation_kind kind = activation_kind::gelu;
  static constexpr const char* name = "gelu";
  static constexpr const char* layer_name = "activation";
  static constexpr const char* layer_class = "Activation";
  template <class In, class B>
  using bind = detail::activation_layer<gelu, In, B>;
};

/// Keras `layers.LeakyReLU(negative_slope)`: x where x > 0, else `Slope` x. A layer only: its slope is a
/// parameter, which the fused activations of dense and conv2d do not take.
template <float Slope = 0.3f>
struct leaky_relu {
  static_assert(Slope >= 0.0f, "leaky_relu: the negative slope must be >= 0 (Keras' rule)");

  template <class In, class B>
  struct bind : detail::no_params {
    static_assert(activation_kernels<B>, "leaky_relu: the backend lacks the activation kernels (activation_kernels)");
    using input_shape = In;
    using output_shape = In;
    using ptr = pointer_t<B, float>;
    using cptr = pointer_t<B, const float>;
    static constexpr const char* keras_name = "leaky_re_lu";
    static constexpr const char* class_name = "LeakyReLU";
    static constexpr bool supports_masking = true;
    template <class C>
    static void get_config(C& c) {
      c.set("negative_slope", Slope);
    }

    void forward(layer_context<B>& ctx, cptr x, ptr y, std::size_t n, cptr) {
      ctx.device.leaky_relu_forward(n * In::size, Slope, x, y);
    }
    void backward(layer_context<B>& ctx, cptr x, cptr, ptr dy, ptr dx, std::size_t n, cptr, ptr) {
      if (dx) ctx.device.leaky_relu_backward(n * In::size, Slope, x, dy, dx);
    }
  };
};

/// Keras' `layers.Activation(a)`: the standalone layer of policy `A` (the policy itself works as well).
template <class A>
using activation = A;

namespace detail {
template <class T>
concept activation_policy = requires {
  { T::kind } -> std::convertible_to<activation_kind>;
  { T::name } -> std::convertible_to<const char*>;
};
template <class T>
struct is_activation : std::bool_constant<activation_policy<T>> {};
}  // namespace detail

}  // namespace dtrain
