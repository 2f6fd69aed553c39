#pragma once
/// \file
/// `depthwise_conv2d<Kernel, Activation, Options...>`: Keras `layers.DepthwiseConv2D`, each input channel
/// convolved with its own `depth_multiplier<M>` filters (kernel (kh, kw, channels, M), bias (channels M)).
/// `separable_conv2d<Filters, Kernel, Activation, Options...>`: Keras `layers.SeparableConv2D`, a depthwise
/// convolution without bias, then a 1 x 1 convolution to `Filters` (depthwise_kernel (kh, kw, channels, M),
/// pointwise_kernel (1, 1, channels M, Filters), bias (Filters)). Options: `strides<...>`,
/// `padding::valid | padding::same`, `depth_multiplier<M>` (default 1), `use_bias<false>` (no bias: before
/// batch normalization, as MobileNets have it). Channels last, zero padding, the activation fused as in
/// conv2d.

#include <algorithm>

#include "dtrain/layers/activations.hpp"
#include "dtrain/layers/window.hpp"

namespace dtrain {

/// Filters per input channel of a depthwise convolution (Keras' depth_multiplier).
template <std::size_t M>
struct depth_multiplier {
  static_assert(M > 0, "depth_multiplier: must be positive");
  static constexpr std::size_t value = M;
  static constexpr bool is_depth_multiplier = true;
};

namespace detail {
template <class T, class = void>
struct is_depth_multiplier : std::false_type {};
template <class T>
struct is_depth_multiplier<T, std::void_t<decltype(T::is_depth_multiplier)>> : std::true_type {};

/// What the two layers share: the options, the depthwise geometry, and the depthwise part of a pass.
template <kernel_size Kernel, class Activation, class... Options>
struct depthwise_options {
  static_assert(Kernel.positive(), "depthwise convolution: the kernel size must be positive");
  static_assert(activation_policy<Activation>,
                "depthwise convolution: the activation must be relu, sigmoid, tanh, softmax, gelu or linear");
  static_assert(((is_strides<Options>::value || is_padding<Options>::value || is_depth_multiplier<Options>::value ||
                  is_use_bias<Options>::value) &&
                 ...),
                "depthwise convolution: options are strides<...>, padding::valid | padding::same, "
                "depth_multiplier<M> and use_bias<false>");
  using stride_type = typename find_option<is_strides, strides<1>, Options...>::type;
  using padding_type = typename find_option<is_padding, padding::valid, Options...>::type;
  static constexpr std::size_t multiplier =
      find_option<is_depth_multiplier, depth_multiplier<1>, Options...>::type::value;
  static constexpr bool bias = find_option<is_use_bias, use_bias<true>, Options...>::type::value;

  template <class In, window_layer L>
  using geometry = window2d<In, L, Kernel, stride_type, padding_type>;

  /// The Keras config entries both layers have.
  template <class C>
  static void get_config(C& c) {
    window_config<Kernel, stride_type, padding_type>(c, "kernel_size");
    c.set("depth_multiplier", multiplier);
    c.set("dilation_rate", std::array<std::size_t, 2>{1, 1});
    c.set("activation", Activation::name);
    c.set("use_bias", bias);
  }
};
}  // namespace detail

template <kernel_size Kernel, class Activation = linear, class... Options>
struct depthwise_conv2d : detail::depthwise_options<Kernel, Activation, Options...> {
  using base = detail::depthwise_options<Kernel, Activation, Options...>;

  template <class In, class B>
  struct bind {
    static_assert(window_kernels<B> && activation_kernels<B>,
                  "depthwise_conv2d: the backend lacks the window or activation kernels (window_kernels, activation_kernels)");
    using geo = typename base::template geometry<In, detail::window_layer::depthwise_conv2d>;
    static constexpr std::size_t f = geo::c * base::multiplier;
    using input_shape = In;
    using output_shape = shape<geo::oh, geo::ow, f>;
    using ptr = pointer_t<B, float>;
    using cptr = pointer_t<B, const float>;
    static constexpr const char* keras_name = "depthwise_conv2d";
    static constexpr const char* class_name = "DepthwiseConv2D";
    template <class C>
    static void get_config(C& c) {
      base::get_config(c);
    }
    static constexpr window_geometry window = geo::with_outputs(f);
    static constexpr activation_kind act = Activation::kind;
    static constexpr std::size_t taps = Kernel.h * Kernel.w * f;  // kernel values
    static constexpr auto params = [] {
      constexpr param_spec kernel{"kernel", 4, {Kernel.h, Kernel.w, geo::c, base::multiplier}};
      if constexpr (base::bias) return std::array<param_spec, 2>{kernel, {"bias", 1, {f, 0, 0, 0}}};
      else return std::array<param_spec, 1>{kernel};
    }();

    void initialize(std::span<float> p, rng& r) {
      detail::glorot_uniform(p.first(taps), Kernel.h * Kernel.w * geo::c, Kernel.h * Kernel.w * base::multiplier, r);
      std::fill(p.begin() + taps, p.end(), 0.0f);
    }

    void forward(layer_context<B>& ctx, cptr x, ptr y, std::size_t n, cptr p) {
      const B& dev = ctx.device;
      const std::size_t rows = n * geo::oh * geo::ow;
      dev.template depthwise_conv2d_forward<window>(n, x, p, base::bias ? p + taps : cptr{}, y);
      if constexpr (needs_input(act)) dev.copy(rows * f, y, ensure(dev, z_, rows * f));
      dev.template activation_forward<act>(rows, f, y, y);
    }

    void backward(layer_context<B>& ctx, cptr x, cptr y, ptr dy, ptr dx, std::size_t n, cptr p, ptr g) {
      const B& dev = ctx.device;
      const std::size_t rows = n * geo::oh * geo::ow;
      dev.template activation_backward<act>(rows, f, z_.data(), y, dy, dy);
      dev.template depthwise_conv2d_backward<window>(n, x, p, dy, g, dx);
      if constexpr (base::bias) dev.column_sums(rows, f, dy, g + taps);
    }

    void regularization(layer_context<B>&, cptr, ptr, float, ptr) const {}

   private:
    buffer_t<B, float> z_;  // pre-activations, for activations that need them
  };
};

template <std::size_t Filters, kernel_size Kernel, class Activation = linear, class... Options>
struct separable_conv2d : detail::depthwise_options<Kernel, Activation, Options...> {
  static_assert(Filters > 0, "separable_conv2d: filters must be positive");
  using base = detail::depthwise_options<Kernel, Activation, Options...>;

  template <class In, class B>
  struct bind {
    static_assert(window_kernels<B> && activation_kernels<B>,
                  "separable_conv2d: the backend lacks the window or activation kernels (window_kernels, activation_kernels)");
    using geo = typename base::template geometry<In, detail::window_layer::separable_conv2d>;
    static constexpr std::size_t mid = geo::c * base::multiplier;  // the depthwise part's channels
    using input_shape = In;
    using output_shape = shape<geo::oh, geo::ow, Filters>;
    using ptr = pointer_t<B, float>;
    using cptr = pointer_t<B, const float>;
    static constexpr const char* keras_name = "separable_conv2d";
    static constexpr const char* class_name = "SeparableConv2D";
    template <class C>
    static void get_config(C& c) {
      c.set("filters", Filters);
      base::get_config(c);
    }
    static constexpr window_geometry window = geo::with_outputs(mid);
    static constexpr activation_kind act = Activation::kind;
    static constexpr std::size_t taps = Kernel.h * Kernel.w * mid, pointwise = mid * Filters;
    static constexpr auto params = [] {
      constexpr param_spec depthwise{"depthwise_kernel", 4, {Kernel.h, Kernel.w, geo::c, base::multiplier}},
          pointwise_kernel{"pointwise_kernel", 4, {1, 1, mid, Filters}};
      if constexpr (base::bias)
        return std::array<param_spec, 3>{depthwise, pointwise_kernel, {"bias", 1, {Filters, 0, 0, 0}}};
      else return std::array<param_spec, 2>{depthwise, pointwise_kernel};
    }();

    void initialize(std::span<float> p, rng& r) {
      detail::glorot_uniform(p.first(taps), Kernel.h * Kernel.w * geo::c, Kernel.h * Kernel.w * base::multiplier, r);
      detail::glorot_uniform(p.subspan(taps, pointwise), mid, Filters, r);
      std::fill(p.begin() + taps + pointwise, p.end(), 0.0f);
    }

    /// The depthwise part into `t_`, then y = t_ pointwise (+ bias), then the activation.
    void forward(layer_context<B>& ctx, cptr x, ptr y, std::size_t n, cptr p) {
      const B& dev = ctx.device;
      const std::size_t rows = n * geo::oh * geo::ow;
      const ptr t = ensure(dev, t_, rows * mid);
      dev.template depthwise_conv2d_forward<window>(n, x, p, cptr{}, t);
      if constexpr (base::bias) dev.broadcast_rows(rows, Filters, p + taps + pointwise, y);
      dev.gemm(transpose::no, transpose::no, rows, Filters, mid, 1.0f, t, mid, p + taps, Filters, base::bias ? 1.0f : 0.0f,
               y, Filters);
      if constexpr (needs_input(act)) dev.copy(rows * Filters, y, ensure(dev, z_, rows * Filters));
      dev.template activation_forward<act>(rows, Filters, y, y);
    }

    void backward(layer_context<B>& ctx, cptr x, cptr y, ptr dy, ptr dx, std::size_t n, cptr p, ptr g) {
      const B& dev = ctx.device;
      const std::size_t rows = n * geo::oh * geo::ow;
      dev.template activation_backward<act>(rows, Filters, z_.data(), y, dy, dy);
      dev.gemm(transpose::yes, transpose::no, mid, Filters, rows, 1.0f, t_.data(), mid, dy, Filters, 0.0f, g + taps,
               Filters);
      if constexpr (base::bias) dev.column_sums(rows, Filters, dy, g + taps + pointwise);
      const ptr dt = ensure(dev, dt_, rows * mid);  // d loss / d the depthwise part's output
      dev.gemm(transpose::no, transpose::yes, rows, mid, Filters, 1.0f, dy, Filters, p + taps, Filters, 0.0f, dt, mid);
      dev.template depthwise_conv2d_backward<window>(n, x, p, dt, g, dx);
    }

    void regularization(layer_context<B>&, cptr, ptr, float, ptr) const {}

   private:
    buffer_t<B, float> t_, dt_, z_;  // the depthwise part's output and its gradient; pre-activations
  };
};

}  // namespace dtrain
