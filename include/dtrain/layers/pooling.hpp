#pragma once
/// \file
/// `max_pooling2d<Pool, Options...>` and `average_pooling2d<Pool, Options...>`: Keras `MaxPooling2D` /
/// `AveragePooling2D`, channels last. Strides default to the pool size (Keras' strides=None);
/// options `strides<...>` and `padding::valid | padding::same`. With `same` padding the average is
/// taken over the window's cells inside the input (TF's rule; PyTorch's count_include_pad=False).

#include <algorithm>
#include <cstdint>
#include <limits>

#include "dtrain/layers/conv2d.hpp"

namespace dtrain {

namespace detail {

template <bool Max, std::size_t Pool, class... Options>
struct pooling2d {
  static_assert(Pool > 0, "pooling: the pool size must be positive");
  static_assert(((is_strides<Options>::value || is_padding<Options>::value) && ...),
                "pooling: options are strides<...> and padding::valid | padding::same");
  using stride_type = typename find_option<is_strides, strides<Pool>, Options...>::type;
  using padding_type = typename find_option<is_padding, padding::valid, Options...>::type;

  template <class In>
  struct bind : no_params {
    using geo = window2d<In, Pool, Pool, stride_type, padding_type>;
    using input_shape = In;
    using output_shape = shape<geo::oh, geo::ow, geo::c>;
    static constexpr const char* keras_name = Max ? "max_pooling2d" : "average_pooling2d";
    static constexpr const char* class_name = Max ? "MaxPooling2D" : "AveragePooling2D";

    template <class Ctx>
    void forward(Ctx&, const float* x, float* y, std::size_t n, std::span<const float>) {
      constexpr std::size_t C = geo::c;
      std::uint32_t* arg = nullptr;
      if constexpr (Max) {
        if (argmax_.size() < n * output_shape::size) argmax_.resize(n * output_shape::size);
        arg = argmax_.data();
      }
      for_each_window(n, [&](std::size_t out, std::size_t s, std::size_t y0, std::size_t y1, std::size_t x0,
                             std::size_t x1) {
        for (std::size_t c = 0; c < C; ++c) {
          float acc = Max ? -std::numeric_limits<float>::infinity() : 0.0f;
          std::size_t best = 0;
          for (std::size_t iy = y0; iy < y1; ++iy)
            for (std::size_t ix = x0; ix < x1; ++ix) {
              const std::size_t at = ((s * geo::h + iy) * geo::w + ix) * C + c;
              if constexpr (Max) {
                if (x[at] > acc || (iy == y0 && ix == x0)) acc = x[at], best = at;
              } else {
                acc += x[at];
              }
            }
          if constexpr (Max) {
            y[out * C + c] = acc;
            arg[out * C + c] = static_cast<std::uint32_t>(best - s * In::size);
          } else {
            y[out * C + c] = acc / static_cast<float>((y1 - y0) * (x1 - x0));
          }
        }
      });
    }

    template <class Ctx>
    void backward(Ctx&, const float*, const float*, float* dy, float* dx, std::size_t n, std::span<const float>,
                  std::span<float>) {
      if (!dx) return;
      constexpr std::size_t C = geo::c;
      std::fill(dx, dx + n * In::size, 0.0f);
      for_each_window(n, [&](std::size_t out, std::size_t s, std::size_t y0, std::size_t y1, std::size_t x0,
                             std::size_t x1) {
        for (std::size_t c = 0; c < C; ++c) {
          const float d = dy[out * C + c];
          if constexpr (Max) {
            dx[s * In::size + argmax_[out * C + c]] += d;
          } else {
            const float share = d / static_cast<float>((y1 - y0) * (x1 - x0));
            for (std::size_t iy = y0; iy < y1; ++iy)
              for (std::size_t ix = x0; ix < x1; ++ix) dx[((s * geo::h + iy) * geo::w + ix) * C + c] += share;
          }
        }
      });
    }

   private:
    /// Calls f(output_pixel, sample, y0, y1, x0, x1) with the window clipped to the input.
    template <class F>
    static void for_each_window(std::size_t n, F&& f) {
      std::size_t out = 0;
      for (std::size_t s = 0; s < n; ++s)
        for (std::size_t oy = 0; oy < geo::oh; ++oy)
          for (std::size_t ox = 0; ox < geo::ow; ++ox, ++out) {
            const auto y0 = std::max<std::ptrdiff_t>(0, std::ptrdiff_t(oy * geo::sh) - std::ptrdiff_t(geo::pt));
            const auto x0 = std::max<std::ptrdiff_t>(0, std::ptrdiff_t(ox * geo::sw) - std::ptrdiff_t(geo::pl));
            const auto y1 = std::min<std::ptrdiff_t>(std::ptrdiff_t(geo::h),
                                                     std::ptrdiff_t(oy * geo::sh + Pool) - std::ptrdiff_t(geo::pt));
            const auto x1 = std::min<std::ptrdiff_t>(std::ptrdiff_t(geo::w),
                                                     std::ptrdiff_t(ox * geo::sw + Pool) - std::ptrdiff_t(geo::pl));
            f(out, s, std::size_t(y0), std::size_t(y1), std::size_t(x0), std::size_t(x1));
          }
    }

    std::vector<std::uint32_t> argmax_;  // input index (within the sample) of each output's maximum
  };
};

}  // namespace detail

/// Keras `layers.MaxPooling2D(pool_size)`.
template <std::size_t Pool = 2, class... Options>
struct max_pooling2d : detail::pooling2d<true, Pool, Options...> {};

/// Keras `layers.AveragePooling2D(pool_size)`.
template <std::size_t Pool = 2, class... Options>
struct average_pooling2d : detail::pooling2d<false, Pool, Options...> {};

}  // namespace dtrain
