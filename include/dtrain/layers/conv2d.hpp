#pragma once
/// \file
/// `conv2d<Filters, Kernel, Activation, Options...>`: Keras `layers.Conv2D`, channels last.
/// Kernel (k, k, in_channels, filters) and bias (filters) as Keras stores them. Options:
/// `strides<S>` / `strides<Sh, Sw>`, `padding::valid` (default) / `padding::same`, a regularizer.
/// Computed by the backend's conv2d kernels (the cpu backend: im2col + GEMM in blocks of output rows
/// that stay in cache); the workspace forward fills is what backward reads, next to a scratch of its own.

#include <algorithm>

#include "dtrain/layers/activations.hpp"
#include "dtrain/layers/regularizers.hpp"

namespace dtrain {

/// Window strides of conv2d and the pooling layers.
template <std::size_t H, std::size_t W = H>
struct strides {
  static_assert(H > 0 && W > 0, "strides: must be positive");
  static constexpr bool is_strides = true;
  static constexpr std::size_t h = H, w = W;
};

/// Padding modes, as Keras' padding="valid" | "same" (TF: extra padding goes bottom/right).
namespace padding {
struct valid {
  static constexpr bool is_padding = true;
  static constexpr bool is_same = false;
};
struct same {
  static constexpr bool is_padding = true;
  static constexpr bool is_same = true;
};
}  // namespace padding

namespace detail {
template <class T, class = void>
struct is_strides : std::false_type {};
template <class T>
struct is_strides<T, std::void_t<decltype(T::is_strides)>> : std::true_type {};
template <class T, class = void>
struct is_padding : std::false_type {};
template <class T>
struct is_padding<T, std::void_t<decltype(T::is_padding)>> : std::true_type {};

/// Output extent and leading pad of a sliding window along one axis (TF's rules).
struct window_axis {
  std::size_t out, pad;
};
constexpr window_axis window(std::size_t in, std::size_t k, std::size_t s, bool same) {
  if (!same) return {in >= k ? (in - k) / s + 1 : 0, 0};
  const std::size_t out = (in + s - 1) / s;
  const std::size_t need = (out - 1) * s + k;
  return {out, need > in ? (need - in) / 2 : 0};
}

/// The layers built on a 2-D window, so that a misplaced one is named in its compile error.
enum class window_layer { conv2d, depthwise_conv2d, separable_conv2d, max_pooling2d, average_pooling2d };

/// Geometry of a 2-D window op of layer `L` over an (H, W, C) input.
template <class In, window_layer L, std::size_t Kh, std::size_t Kw, class Strides, class Padding>
struct window2d {
  static constexpr bool rank3 = In::rank == 3;
#define DTRAIN_RANK3(layer)                                                                                 \
  static_assert(rank3 || L != window_layer::layer, #layer " expects a rank-3 input (height, width, channels); " \
                                                          "add dtrain::reshape<h, w, c> before it")
  DTRAIN_RANK3(conv2d);
  DTRAIN_RANK3(depthwise_conv2d);
  DTRAIN_RANK3(separable_conv2d);
  DTRAIN_RANK3(max_pooling2d);
  DTRAIN_RANK3(average_pooling2d);
#undef DTRAIN_RANK3
  static constexpr std::size_t dim(std::size_t i) { return rank3 ? In::dims[i] : 1; }  // (1: one error only)
  static constexpr std::size_t h = dim(0), w = dim(1), c = dim(2);
  static constexpr std::size_t sh = Strides::h, sw = Strides::w;
  static constexpr window_axis ay = window(h, Kh, sh, Padding::is_same), ax = window(w, Kw, sw, Padding::is_same);
  static constexpr std::size_t oh = ay.out, ow = ax.out, pt = ay.pad, pl = ax.pad;
  static_assert(!rank3 || Padding::is_same || (h >= Kh && w >= Kw),
                "2-D window layer: the window is larger than the input");
  /// The geometry the backend's kernels take, with `f` output channels.
  static constexpr window_geometry with_outputs(std::size_t f) { return {h, w, c, Kh, Kw, sh, sw, pt, pl, oh, ow, f}; }
};
}  // namespace detail

template <std::size_t Filters, std::size_t Kernel, class Activation = linear, class... Options>
struct conv2d {
  static_assert(Filters > 0 && Kernel > 0, "conv2d: filters and kernel size must be positive");
  static_assert(detail::activation_policy<Activation>,
                "conv2d: the third argument must be an activation (relu, sigmoid, tanh, softmax, gelu, linear)");
  static_assert(((detail::is_regularizer<Options>::value || detail::is_strides<Options>::value ||
                  detail::is_padding<Options>::value) &&
                 ...),
                "conv2d: options are strides<...>, padding::valid | padding::same and regularizers such as l2<>");
  using stride_type = typename detail::find_option<detail::is_strides, strides<1>, Options...>::type;
  using padding_type = typename detail::find_option<detail::is_padding, padding::valid, Options...>::type;
  using regularizer = typename detail::find_option<detail::is_regularizer, no_regularizer, Options...>::type;

  template <class In, class B>
  struct bind {
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
    static constexpr std::array<param_spec, 2> params{
        {{"kernel", 4, {Kernel, Kernel, geo::c, Filters}}, {"bias", 1, {Filters, 0, 0, 0}}}};

    void initialize(std::span<float> p, rng& r) {
      detail::glorot_uniform(p.first(k * Filters), k, Kernel * Kernel * Filters, r);
      std::fill(p.begin() + k * Filters, p.end(), 0.0f);
    }

    void forward(layer_context<B>& ctx, cptr x, ptr y, std::size_t n, cptr p) {
      const B& dev = ctx.device;
      const ptr z = needs_input(act) ? ensure(dev, z_, n * output_shape::size) : ptr{};
      const ptr work = ensure(dev, work_, dev.template conv2d_workspace<window>(n));
      dev.template conv2d_forward<window, act>(n, x, p, p + k * Filters, y, z, work);
    }

    void backward(layer_context<B>& ctx, cptr, cptr y, ptr dy, ptr dx, std::size_t n, cptr p, ptr g) {
      const B& dev = ctx.device;
      const ptr scratch = ensure(dev, scratch_, dev.template conv2d_backward_workspace<window>(n, bool(dx)));
      dev.template conv2d_backward<window, act>(n, z_.data(), y, dy, p, work_.data(), scratch, g, dx);
    }

    void regularization(layer_context<B>& ctx, cptr p, ptr g, float scale, ptr penalty) const {
      regularizer::apply(ctx.device, k * Filters, p, g, scale, penalty);
    }

   private:
    buffer_t<B, float> z_, work_, scratch_;  // pre-activations (when the activation needs them); workspaces
  };
};

}  // namespace dtrain
