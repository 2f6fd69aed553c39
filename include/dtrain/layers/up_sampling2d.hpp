#pragma once
/// \file
/// `up_sampling2d<S...>`: Keras `layers.UpSampling2D(size, interpolation="nearest")`, channels last. Each
/// value of a sample is repeated into a block of rows and columns: `up_sampling2d<>` 2 x 2 (Keras'
/// default), `<S>` S x S, `<Sh, Sw>` Sh rows by Sw columns. Nearest is the one interpolation (Keras'
/// default; "bilinear" is not provided). The gradient of an input value is the sum of its block's.

#include <array>

#include "dtrain/layers/concepts.hpp"

namespace dtrain {

template <std::size_t... S>
struct up_sampling2d {
  static_assert(sizeof...(S) <= 2, "up_sampling2d: give one factor or (rows, columns)");
  static constexpr std::array<std::size_t, 2> size = [] {
    constexpr std::array<std::size_t, sizeof...(S) + 1> s{S..., 0};
    if constexpr (sizeof...(S) == 0) return std::array<std::size_t, 2>{2, 2};
    else if constexpr (sizeof...(S) == 1) return std::array<std::size_t, 2>{s[0], s[0]};
    else return std::array<std::size_t, 2>{s[0], s[1]};
  }();
  static_assert(size[0] >= 1 && size[1] >= 1, "up_sampling2d: the factors must be at least 1");

  template <class In, class B>
  struct bind : detail::no_params {
    static_assert(window_kernels<B>, "up_sampling2d: the backend lacks the window kernels (window_kernels)");
    static_assert(In::rank == 3, "up_sampling2d: the input must be (height, width, channels)");
    static constexpr std::size_t h = In::dims[0], w = In::dims[1], c = In::dims[2];
    using input_shape = In;
    using output_shape = shape<h * size[0], w * size[1], c>;
    using ptr = pointer_t<B, float>;
    using cptr = pointer_t<B, const float>;
    static constexpr const char* keras_name = "up_sampling2d";
    static constexpr const char* class_name = "UpSampling2D";
    template <class C>
    static void get_config(C& c) {
      c.set("size", size);
      c.set("data_format", "channels_last");
      c.set("interpolation", "nearest");
    }
    /// The factors as the window (kh x kw, stride the same): each input value's block of the output.
    static constexpr window_geometry window{h, w, c, size[0], size[1], size[0], size[1], 0, 0, h * size[0], w * size[1], c};

    void forward(layer_context<B>& ctx, cptr x, ptr y, std::size_t n, cptr) {
      ctx.device.template up_sampling2d_forward<window>(n, x, y);
    }
    void backward(layer_context<B>& ctx, cptr, cptr, ptr dy, ptr dx, std::size_t n, cptr, ptr) {
      if (dx) ctx.device.template up_sampling2d_backward<window>(n, dy, dx);
    }
  };
};

}  // namespace dtrain
