#pragma once
/// \file
/// What the layers that slide a 2-D window over (height, width, channels) share: the window's size
/// `kernel_size`, the options `strides<...>`, `padding::valid | padding::same | padding::causal` and
/// `dilation_rate<...>` with their traits, and `detail::window2d`, a layer's window geometry by TF's rules (its output extent,
/// padding and the `window_geometry` the backend's kernels take). Used by layers/conv2d.hpp (and
/// conv1d, a conv2d over one row), layers/conv2d_transpose.hpp, layers/depthwise_conv2d.hpp and
/// layers/pooling.hpp.

#include <array>
#include <cstddef>
#include <type_traits>

#include "dtrain/backend/backend.hpp"

namespace dtrain {

/// A 2-D window's size, Keras' `kernel_size` / `pool_size`: `3` (3 x 3) or `kernel_size{3, 5}` (height,
/// width), so `conv2d<16, 3>` and `conv2d<16, kernel_size{1, 7}>` read as Keras' Conv2D(16, 3) and
/// Conv2D(16, (1, 7)).
struct kernel_size {
  std::size_t h, w;
  constexpr kernel_size(std::size_t square) : h(square), w(square) {}
  constexpr kernel_size(std::size_t height, std::size_t width) : h(height), w(width) {}
  constexpr bool positive() const { return h > 0 && w > 0; }
};

/// Window strides of conv2d and the pooling layers.
template <std::size_t H, std::size_t W = H>
struct strides {
  static_assert(H > 0 && W > 0, "strides: must be positive");
  static constexpr bool is_strides = true;
  static constexpr std::size_t h = H, w = W;
};

/// Spacing between a convolution's taps, Keras' `dilation_rate`: tap (ky, kx) reads the input at
/// (ky * H, kx * W) from the window's corner, so a k-tap kernel spans (k - 1) * H + 1 rows.
template <std::size_t H, std::size_t W = H>
struct dilation_rate {
  static_assert(H > 0 && W > 0, "dilation_rate: must be positive");
  static constexpr bool is_dilation_rate = true;
  static constexpr std::size_t h = H, w = W;
};

/// Padding modes, as Keras' padding="valid" | "same" (TF: extra padding goes bottom/right) | "causal"
/// (conv1d only: (taps - 1) * dilation zeros before the sequence, none after, so output step t sees
/// input steps up to t).
namespace padding {
struct valid {
  static constexpr bool is_padding = true;
  static constexpr bool is_same = false;
  static constexpr bool is_causal = false;
};
struct same {
  static constexpr bool is_padding = true;
  static constexpr bool is_same = true;
  static constexpr bool is_causal = false;
};
struct causal {
  static constexpr bool is_padding = true;
  static constexpr bool is_same = false;
  static constexpr bool is_causal = true;
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
template <class T, class = void>
struct is_dilation_rate : std::false_type {};
template <class T>
struct is_dilation_rate<T, std::void_t<decltype(T::is_dilation_rate)>> : std::true_type {};

/// Output extent and leading pad of a sliding window along one axis (TF's rules); k is the span the
/// window covers ((taps - 1) * dilation + 1).
struct window_axis {
  std::size_t out, pad;
};
template <class Padding>
constexpr window_axis window(std::size_t in, std::size_t k, std::size_t s) {
  if (Padding::is_causal) return {in ? (in - 1) / s + 1 : 0, k - 1};
  if (!Padding::is_same) return {in >= k ? (in - k) / s + 1 : 0, 0};
  const std::size_t out = (in + s - 1) / s;
  const std::size_t need = (out - 1) * s + k;
  return {out, need > in ? (need - in) / 2 : 0};
}

/// The window entries of a 2-D window layer's Keras config: its size under `size_key` (kernel_size or
/// pool_size), strides, padding and the channels-last data format; with `one_row`, a 1-D layer's (the
/// width's size and stride only).
template <kernel_size K, class Strides, class Padding, class C>
void window_config(C& c, const char* size_key, bool one_row = false) {
  if (one_row) {
    c.set(size_key, std::array<std::size_t, 1>{K.w});
    c.set("strides", std::array<std::size_t, 1>{Strides::w});
  } else {
    c.set(size_key, std::array<std::size_t, 2>{K.h, K.w});
    c.set("strides", std::array<std::size_t, 2>{Strides::h, Strides::w});
  }
  c.set("padding", Padding::is_causal ? "causal" : Padding::is_same ? "same" : "valid");
  c.set("data_format", "channels_last");
}

/// The layers built on a 2-D window, so that a misplaced one is named in its compile error.
enum class window_layer {
  conv1d,
  conv2d,
  conv2d_transpose,
  depthwise_conv2d,
  separable_conv2d,
  max_pooling2d,
  average_pooling2d
};

/// Geometry of a 2-D window op of layer `L` over an (H, W, C) input.
template <class In, window_layer L, kernel_size K, class Strides, class Padding, class Dilation = dilation_rate<1>>
struct window2d {
  static_assert(K.positive(), "2-D window layer: the kernel (pool) size must be positive");
  static constexpr bool rank3 = In::rank == 3;
#define DTRAIN_RANK3(layer)                                                                                 \
  static_assert(rank3 || L != window_layer::layer, #layer " expects a rank-3 input (height, width, channels); " \
                                                          "add dtrain::reshape<h, w, c> before it")
  DTRAIN_RANK3(conv2d);
  DTRAIN_RANK3(conv2d_transpose);
  DTRAIN_RANK3(depthwise_conv2d);
  DTRAIN_RANK3(separable_conv2d);
  DTRAIN_RANK3(max_pooling2d);
  DTRAIN_RANK3(average_pooling2d);
#undef DTRAIN_RANK3
  static constexpr std::size_t dim(std::size_t i) { return rank3 ? In::dims[i] : 1; }  // (1: one error only)
  static constexpr std::size_t h = dim(0), w = dim(1), c = dim(2);
  static constexpr std::size_t sh = Strides::h, sw = Strides::w, dh = Dilation::h, dw = Dilation::w;
  static constexpr std::size_t span_h = (K.h - 1) * dh + 1, span_w = (K.w - 1) * dw + 1;
  static_assert(!Padding::is_causal || L == window_layer::conv1d, "padding::causal is conv1d's only");
  static constexpr window_axis ay = window<Padding>(h, span_h, sh), ax = window<Padding>(w, span_w, sw);
  static constexpr std::size_t oh = ay.out, ow = ax.out, pt = ay.pad, pl = ax.pad;
  static_assert(!rank3 || Padding::is_same || (h >= span_h && w >= span_w),
                "2-D window layer: the window is larger than the input");
  /// The geometry the backend's kernels take, with `f` output channels in `groups` groups.
  static constexpr window_geometry with_outputs(std::size_t f, std::size_t groups = 1) {
    return {h, w, c, K.h, K.w, sh, sw, pt, pl, oh, ow, f, dh, dw, groups};
  }
};
}  // namespace detail

}  // namespace dtrain
