#pragma once
/// \file
/// `max_pooling2d<Pool, Options...>` and `average_pooling2d<Pool, Options...>`: Keras `MaxPooling2D` /
/// `AveragePooling2D`, channels last; `global_max_pooling2d<>` and `global_average_pooling2d<>`: Keras
/// `GlobalMaxPooling2D` / `GlobalAveragePooling2D`, one window over the whole (h, w) plane. Strides
/// default to the pool size (Keras' strides=None); options `strides<...>` and `padding::valid |
/// padding::same`. With `same` padding the average is taken over the window's cells inside the input
/// (TF's rule; PyTorch's count_include_pad=False).

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "dtrain/layers/concepts.hpp"
#include "dtrain/layers/window.hpp"

namespace dtrain {

namespace detail {

/// A bound pooling layer over window G (input In, output Out): the backend's pooling kernels, with max
/// pooling's argmax (input index within the sample of each output's maximum) kept for backward.
template <bool Max, window_geometry G, class In, class Out, class B>
struct pooling_layer : no_params {
  static_assert(window_kernels<B>, "pooling: the backend lacks the window kernels (window_kernels)");
  using input_shape = In;
  using output_shape = Out;
  using ptr = pointer_t<B, float>;
  using cptr = pointer_t<B, const float>;
  static constexpr window_geometry window = G;

  void forward(layer_context<B>& ctx, cptr x, ptr y, std::size_t n, cptr) {
    if constexpr (Max)
      ctx.device.template max_pooling2d_forward<G>(n, x, y, ensure(ctx.device, argmax_, n * Out::size));
    else
      ctx.device.template average_pooling2d_forward<G>(n, x, y);
  }

  void backward(layer_context<B>& ctx, cptr, cptr, ptr dy, ptr dx, std::size_t n, cptr, ptr) {
    if (!dx) return;
    if constexpr (Max)
      ctx.device.template max_pooling2d_backward<G>(n, dy, argmax_.data(), dx);
    else
      ctx.device.template average_pooling2d_backward<G>(n, dy, dx);
  }

 private:
  buffer_t<B, std::uint32_t> argmax_;
};

template <bool Max, kernel_size Pool, class... Options>
struct pooling2d {
  static_assert(Pool.positive(), "pooling: the pool size must be positive");
  static_assert(((is_strides<Options>::value || is_padding<Options>::value) && ...),
                "pooling: options are strides<...> and padding::valid | padding::same");
  using stride_type = typename find_option<is_strides, strides<Pool.h, Pool.w>, Options...>::type;
  using padding_type = typename find_option<is_padding, padding::valid, Options...>::type;
  template <class In>
  using geo = window2d<In, Max ? window_layer::max_pooling2d : window_layer::average_pooling2d, Pool,
                       stride_type, padding_type>;

  template <class In, class B>
  struct bind : pooling_layer<Max, geo<In>::with_outputs(geo<In>::c), In,
                              shape<geo<In>::oh, geo<In>::ow, geo<In>::c>, B> {
    static constexpr const char* keras_name = Max ? "max_pooling2d" : "average_pooling2d";
    static constexpr const char* class_name = Max ? "MaxPooling2D" : "AveragePooling2D";
    template <class C>
    static void get_config(C& c) {
      window_config<Pool, stride_type, padding_type>(c, "pool_size");
    }
  };
};

/// One window over the sample's whole plane: (h, w, c) becomes (c), or (1, 1, c) with KeepDims.
template <bool Max, bool KeepDims>
struct global_pooling2d {
  template <class In>
  static constexpr window_geometry plane() {
    static_assert(In::rank == 3, "global pooling: the input must be (height, width, channels)");
    constexpr std::size_t h = In::dims[0], w = In::dims[1], c = In::dims[2];
    return {h, w, c, h, w, h, w, 0, 0, 1, 1, c};
  }

  template <class In, class B>
  struct bind : pooling_layer<Max, plane<In>(), In,
                              std::conditional_t<KeepDims, shape<1, 1, In::dims[2]>, shape<In::dims[2]>>, B> {
    static constexpr const char* keras_name = Max ? "global_max_pooling2d" : "global_average_pooling2d";
    static constexpr const char* class_name = Max ? "GlobalMaxPooling2D" : "GlobalAveragePooling2D";
    template <class C>
    static void get_config(C& c) {
      c.set("data_format", "channels_last");
      c.set("keepdims", KeepDims);
    }
  };
};

}  // namespace detail

/// Keras `layers.MaxPooling2D(pool_size)`: `max_pooling2d<2>`, `max_pooling2d<kernel_size{2, 3}>`.
template <kernel_size Pool = 2, class... Options>
struct max_pooling2d : detail::pooling2d<true, Pool, Options...> {};

/// Keras `layers.AveragePooling2D(pool_size)`.
template <kernel_size Pool = 2, class... Options>
struct average_pooling2d : detail::pooling2d<false, Pool, Options...> {};

/// Keras `layers.GlobalMaxPooling2D(keepdims=KeepDims)`.
template <bool KeepDims = false>
struct global_max_pooling2d : detail::global_pooling2d<true, KeepDims> {};

/// Keras `layers.GlobalAveragePooling2D(keepdims=KeepDims)`.
template <bool KeepDims = false>
struct global_average_pooling2d : detail::global_pooling2d<false, KeepDims> {};

}  // namespace dtrain
