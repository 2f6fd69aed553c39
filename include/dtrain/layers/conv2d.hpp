#pragma once
/// \file
/// `conv2d<Filters, Kernel, Activation, Options...>`: Keras `layers.Conv2D`, channels last.
/// Kernel (k, k, in_channels, filters) and bias (filters) as Keras stores them. Options:
/// `strides<S>` / `strides<Sh, Sw>`, `padding::valid` (default) / `padding::same`, `use_bias<false>` (no
/// bias variable: a convolution before batch normalization), a regularizer (of the kernel).
/// Computed by the backend's conv2d kernels (the cpu backend: im2col + GEMM in blocks of output rows
/// that stay in cache); the workspace forward fills is what backward reads, next to a scratch of its own.

#include <algorithm>

#include "dtrain/layers/activations.hpp"
#include "dtrain/layers/regularizers.hpp"
#include "dtrain/layers/window.hpp"

namespace dtrain {
template <std::size_t Filters, std::size_t Kernel, class Activation = linear, class... Options>
struct conv2d {
  static_assert(Filters > 0 && Kernel > 0, "conv2d: filters and kernel size must be positive");
  static_assert(detail::activation_policy<Activation>,
                "conv2d: the third argument must be an activation (relu, sigmoid, tanh, softmax, gelu, linear)");
  static_assert(((detail::is_regularizer<Options>::value || detail::is_strides<Options>::value ||
                  detail::is_padding<Options>::value || detail::is_use_bias<Options>::value) &&
                 ...),
                "conv2d: options are strides<...>, padding::valid | padding::same, use_bias<false> and "
                "regularizers such as l2<>");
  using stride_type = typename detail::find_option<detail::is_strides, strides<1>, Options...>::type;
  using padding_type = typename detail::find_option<detail::is_padding, padding::valid, Options...>::type;
  using regularizer = typename detail::find_option<detail::is_regularizer, no_regularizer, Options...>::type;
  static constexpr bool bias = detail::find_option<detail::is_use_bias, use_bias<true>, Options...>::type::value;

  template <class In, class B>
  struct bind {
    static_assert(window_kernels<B>, "conv2d: the backend lacks the window kernels (window_kernels)");
    using geo = detail::window2d<In, detail::window_layer::conv2d, Kernel, Kernel, stride_type, padding_type>;
    using input_shape = In;
    using output_shape = shape<geo::oh, geo::ow, Filters>;
    using ptr = pointer_t<B, float>;
    using cptr = pointer_t<B, const float>;
    static constexpr const char* keras_name = "conv2d";
    static constexpr const char* class_name = "Conv2D";
    static constexpr window_geometry window = geo::with_outputs(Filters);
    static constexpr activation_kind act = Activation::kind;
    static constexpr std::size_t k = window.taps();  // one im2col row
    static constexpr auto params = [] {
      constexpr param_spec kernel{"kernel", 4, {Kernel, Kernel, geo::c, Filters}};
      if constexpr (bias) return std::array<param_spec, 2>{kernel, {"bias", 1, {Filters, 0, 0, 0}}};
      else return std::array<param_spec, 1>{kernel};
    }();

    void initialize(std::span<float> p, rng& r) {
      detail::glorot_uniform(p.first(k * Filters), k, Kernel * Kernel * Filters, r);
      std::fill(p.begin() + k * Filters, p.end(), 0.0f);
    }

    void forward(layer_context<B>& ctx, cptr x, ptr y, std::size_t n, cptr p) {
      const B& dev = ctx.device;
      const ptr z = needs_input(act) ? ensure(dev, z_, n * output_shape::size) : ptr{};
      const ptr work = ensure(dev, work_, dev.template conv2d_workspace<window>(n));
      dev.template conv2d_forward<window, act>(n, x, p, bias ? p + k * Filters : cptr{}, y, z, work);
    }

    void backward(layer_context<B>& ctx, cptr, cptr y, ptr dy, ptr dx, std::size_t n, cptr p, ptr g) {
      const B& dev = ctx.device;
      const ptr scratch = ensure(dev, scratch_, dev.template conv2d_backward_workspace<window>(n, bool(dx)));
      dev.template conv2d_backward<window, act>(n, z_.data(), y, dy, p, work_.data(), scratch, g,
                                                bias ? g + k * Filters : ptr{}, dx);
    }

    void regularization(layer_context<B>& ctx, cptr p, ptr g, float scale, ptr penalty) const {
      regularizer::apply(ctx.device, k * Filters, p, g, scale, penalty);
    }

   private:
    buffer_t<B, float> z_, work_, scratch_;  // pre-activations (when the activation needs them); workspaces
  };
};

}  // namespace dtrain
