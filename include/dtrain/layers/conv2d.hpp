#pragma once
/// \file
/// `conv2d<Filters, Kernel, Activation, Options...>`: Keras `layers.Conv2D`, channels last; Kernel is
/// `3` or `kernel_size{3, 5}`. Kernel (kh, kw, in_channels / groups, filters) and bias (filters) as Keras
/// stores them. Options: `strides<S>` / `strides<Sh, Sw>`, `padding::valid` (default) / `padding::same`,
/// `dilation_rate<D>` / `dilation_rate<Dh, Dw>`, `groups<G>`, `use_bias<false>` (no bias variable: a
/// convolution before batch normalization), a regularizer (of the kernel).
/// Computed by the backend's conv2d kernels (the cpu backend: im2col + GEMM in blocks of output rows
/// that stay in cache); the workspace forward fills is what backward reads, next to a scratch of its own.

#include <algorithm>

#include "dtrain/layers/activations.hpp"
#include "dtrain/layers/regularizers.hpp"
#include "dtrain/layers/window.hpp"

namespace dtrain {

/// Keras Conv2D's `groups`: the input channels and the filters split into G groups, group g's filters
/// seeing group g's channels only (G = channels is a depthwise convolution).
template <std::size_t G>
struct groups {
  static_assert(G > 0, "groups: must be positive");
  static constexpr bool is_groups = true;
  static constexpr std::size_t value = G;
};

namespace detail {
template <class T, class = void>
struct is_groups : std::false_type {};
template <class T>
struct is_groups<T, std::void_t<decltype(T::is_groups)>> : std::true_type {};
/// The option conv1d binds its conv2d with: the window is conv1d's (causal padding allowed).
struct conv1d_window {
  static constexpr bool is_conv1d_window = true;
};
template <class T, class = void>
struct is_conv1d_window : std::false_type {};
template <class T>
struct is_conv1d_window<T, std::void_t<decltype(T::is_conv1d_window)>> : std::true_type {};
}  // namespace detail

template <std::size_t Filters, kernel_size Kernel, class Activation = linear, class... Options>
struct conv2d {
  static_assert(Filters > 0 && Kernel.positive(), "conv2d: filters and kernel size must be positive");
  static_assert(detail::activation_policy<Activation>,
                "conv2d: the third argument must be an activation (relu, sigmoid, tanh, softmax, gelu, linear)");
  static_assert(((detail::is_regularizer<Options>::value || detail::is_strides<Options>::value ||
                  detail::is_padding<Options>::value || detail::is_use_bias<Options>::value ||
                  detail::is_dilation_rate<Options>::value || detail::is_groups<Options>::value ||
                  detail::is_bias_regularizer<Options>::value || detail::is_activity_regularizer<Options>::value ||
                  detail::is_conv1d_window<Options>::value) &&
                 ...),
                "conv2d: options are strides<...>, padding::valid | padding::same, dilation_rate<...>, "
                "groups<G>, use_bias<false>, regularizers such as l2<>, bias_regularizer<...> and "
                "activity_regularizer<...>");
  using stride_type = typename detail::find_option<detail::is_strides, strides<1>, Options...>::type;
  using padding_type = typename detail::find_option<detail::is_padding, padding::valid, Options...>::type;
  using regularizer = typename detail::find_option<detail::is_regularizer, no_regularizer, Options...>::type;
  using bias_regularizer = detail::bias_regularizer_of<Options...>;
  using dilation_type = typename detail::find_option<detail::is_dilation_rate, dilation_rate<1>, Options...>::type;
  static constexpr bool bias = detail::find_option<detail::is_use_bias, use_bias<true>, Options...>::type::value;
  static_assert(bias || !bias_regularizer::active, "conv2d: a bias_regularizer needs the bias (not use_bias<false>)");
  static constexpr std::size_t group_count = detail::find_option<detail::is_groups, groups<1>, Options...>::type::value;
  static_assert(Filters % group_count == 0, "conv2d: groups<G> must divide the number of filters");

  template <class In, class B>
  struct bind {
    using activity_regularizer = detail::activity_regularizer_of<Options...>;
    static_assert(window_kernels<B>, "conv2d: the backend lacks the window kernels (window_kernels)");
    static constexpr auto layer = (detail::is_conv1d_window<Options>::value || ...) ? detail::window_layer::conv1d
                                                                                     : detail::window_layer::conv2d;
    using geo = detail::window2d<In, layer, Kernel, stride_type, padding_type, dilation_type>;
    static_assert(geo::c % group_count == 0, "conv2d: groups<G> must divide the input's channels");
    using input_shape = In;
    using output_shape = shape<geo::oh, geo::ow, Filters>;
    using ptr = pointer_t<B, float>;
    using cptr = pointer_t<B, const float>;
    static constexpr const char* keras_name = "conv2d";
    static constexpr const char* class_name = "Conv2D";
    template <class C>
    static void get_config(C& c) {
      c.set("filters", Filters);
      detail::window_config<Kernel, stride_type, padding_type>(c, "kernel_size");
      c.set("dilation_rate", std::array<std::size_t, 2>{dilation_type::h, dilation_type::w});
      c.set("groups", group_count);
      c.set("activation", Activation::name);
      c.set("use_bias", bias);
      detail::regularizers_config<regularizer, bias_regularizer, activity_regularizer>(c);
    }
    static constexpr window_geometry window = geo::with_outputs(Filters, group_count);
    static constexpr activation_kind act = Activation::kind;
    static constexpr std::size_t k = window.group_taps();  // kernel rows (one group's share of an im2col row)
    static constexpr auto params = [] {
      constexpr param_spec kernel{"kernel", 4, {Kernel.h, Kernel.w, geo::c / group_count, Filters}};
      if constexpr (bias) return std::array<param_spec, 2>{kernel, {"bias", 1, {Filters, 0, 0, 0}}};
      else return std::array<param_spec, 1>{kernel};
    }();

    void initialize(std::span<float> p, rng& r) {
      detail::glorot_uniform(p.first(k * Filters), k, Kernel.h * Kernel.w * Filters, r);
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
      if constexpr (bias_regularizer::active)
        bias_regularizer::apply(ctx.device, Filters, p + k * Filters, g ? g + k * Filters : ptr{}, scale, penalty);
    }

   private:
    buffer_t<B, float> z_, work_, scratch_;  // pre-activations (when the activation needs them); workspaces
  };
};

}  // namespace dtrain
