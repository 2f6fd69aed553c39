#pragma once
/// \file
/// `zero_padding2d<P...>`: Keras `layers.ZeroPadding2D(padding)`, channels last. Rows and columns of zeros
/// around each sample: `zero_padding2d<>` one on every side (Keras' default (1, 1)), `<P>` P on every
/// side, `<Ph, Pw>` Ph above and below and Pw left and right, `<Top, Bottom, Left, Right>` as Keras'
/// ((top, bottom), (left, right)).

#include <array>

#include "dtrain/layers/concepts.hpp"

namespace dtrain {

template <std::size_t... P>
struct zero_padding2d {
  static_assert(sizeof...(P) == 0 || sizeof...(P) == 1 || sizeof...(P) == 2 || sizeof...(P) == 4,
                "zero_padding2d: give one padding, (rows, columns), or (top, bottom, left, right)");
  static constexpr std::array<std::size_t, 4> pads = [] {
    constexpr std::array<std::size_t, sizeof...(P) + 1> p{P..., 0};
    if constexpr (sizeof...(P) == 0) return std::array<std::size_t, 4>{1, 1, 1, 1};
    else if constexpr (sizeof...(P) == 1) return std::array<std::size_t, 4>{p[0], p[0], p[0], p[0]};
    else if constexpr (sizeof...(P) == 2) return std::array<std::size_t, 4>{p[0], p[0], p[1], p[1]};
    else return std::array<std::size_t, 4>{p[0], p[1], p[2], p[3]};
  }();

  template <class In, class B>
  struct bind : detail::no_params {
    static_assert(window_kernels<B>, "zero_padding2d: the backend lacks the window kernels (window_kernels)");
    static_assert(In::rank == 3, "zero_padding2d: the input must be (height, width, channels)");
    static constexpr std::size_t h = In::dims[0], w = In::dims[1], c = In::dims[2];
    static constexpr std::size_t oh = h + pads[0] + pads[1], ow = w + pads[2] + pads[3];
    using input_shape = In;
    using output_shape = shape<oh, ow, c>;
    using ptr = pointer_t<B, float>;
    using cptr = pointer_t<B, const float>;
    static constexpr const char* keras_name = "zero_padding2d";
    static constexpr const char* class_name = "ZeroPadding2D";
    template <class C>
    static void get_config(C& c) {
      c.set("padding", std::array<std::array<std::size_t, 2>, 2>{{{pads[0], pads[1]}, {pads[2], pads[3]}}});
      c.set("data_format", "channels_last");
    }
    static constexpr window_geometry window{h, w, c, 1, 1, 1, 1, pads[0], pads[2], oh, ow, c};

    void forward(layer_context<B>& ctx, cptr x, ptr y, std::size_t n, cptr) {
      ctx.device.template zero_padding2d_forward<window>(n, x, y);
    }
    void backward(layer_context<B>& ctx, cptr, cptr, ptr dy, ptr dx, std::size_t n, cptr, ptr) {
      if (dx) ctx.device.template zero_padding2d_backward<window>(n, dy, dx);
    }
  };
};

}  // namespace dtrain
