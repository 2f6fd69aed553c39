#pragma once
/// \file
/// `conv2d<Filters, Kernel, Activation, Options...>`: Keras `layers.Conv2D`, channels last.
/// Kernel (k, k, in_channels, filters) and bias (filters) as Keras stores them. Options:
/// `strides<S>` / `strides<Sh, Sw>`, `padding::valid` (default) / `padding::same`, a regularizer.
/// Computed as im2col + sgemm in blocks of output rows that stay in cache (spread over the thread budget);
/// the column buffer is reused by backward.

#include <algorithm>
#include <cstring>

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

/// Geometry of a 2-D window op over an (H, W, C) input.
template <class In, std::size_t Kh, std::size_t Kw, class Strides, class Padding>
struct window2d {
  static_assert(In::rank == 3,
                "2-D window layers (conv2d, pooling) expect a rank-3 input (height, width, channels); "
                "add dtrain::reshape<h, w, c> before it");
  static constexpr std::size_t h = In::dims[0], w = In::dims[1], c = In::dims[2];
  static constexpr std::size_t sh = Strides::h, sw = Strides::w;
  static constexpr window_axis ay = window(h, Kh, sh, Padding::is_same), ax = window(w, Kw, sw, Padding::is_same);
  static constexpr std::size_t oh = ay.out, ow = ax.out, pt = ay.pad, pl = ax.pad;
  static_assert(Padding::is_same || (h >= Kh && w >= Kw), "2-D window layer: the window is larger than the input");
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

  template <class In>
  struct bind {
    using geo = detail::window2d<In, Kernel, Kernel, stride_type, padding_type>;
    using input_shape = In;
    using output_shape = shape<geo::oh, geo::ow, Filters>;
    static constexpr const char* keras_name = "conv2d";
    static constexpr const char* class_name = "Conv2D";
    static constexpr std::size_t k = Kernel * Kernel * geo::c;  // one im2col row
    static constexpr std::size_t pixels = geo::oh * geo::ow;
    static constexpr std::array<param_spec, 2> params{
        {{"kernel", 4, {Kernel, Kernel, geo::c, Filters}}, {"bias", 1, {Filters, 0, 0, 0}}}};

    void initialize(std::span<float> p, rng& r) {
      detail::glorot_uniform(p.first(k * Filters), k, Kernel * Kernel * Filters, r);
      std::fill(p.begin() + k * Filters, p.end(), 0.0f);
    }

    template <class Ctx>
    void forward(Ctx& ctx, const float* x, float* y, std::size_t n, std::span<const float> p) {
      const std::size_t m = n * pixels;
      float* cols = detail::ensure(cols_, m * k);
      float* z = Activation::needs_input ? detail::ensure(z_, m * Filters) : nullptr;
      const float* w = p.data();
      const float* b = w + k * Filters;
      // block by block (rows of the output that stay in cache): im2col, bias, GEMM, activation
      detail::for_row_blocks(ctx.device, m, block_rows, [&](std::size_t r0, std::size_t r1) {
        im2col(x, cols, r0, r1);
        float* yb = y + r0 * Filters;
        for (std::size_t r = r0; r < r1; ++r) std::memcpy(y + r * Filters, b, Filters * sizeof(float));
        ctx.device.gemm(transpose::no, transpose::no, r1 - r0, Filters, k, 1.0f, cols + r0 * k, k, w, Filters, 1.0f,
                        yb, Filters);
        if constexpr (Activation::needs_input)
          std::memcpy(z + r0 * Filters, yb, (r1 - r0) * Filters * sizeof(float));
        Activation::forward(yb, r1 - r0, Filters);
      });
    }

    template <class Ctx>
    void backward(Ctx& ctx, const float*, const float* y, float* dy, float* dx, std::size_t n,
                  std::span<const float> p, std::span<float> g) {
      const std::size_t m = n * pixels;
      const float* z = z_.data();
      // Fixed slices of the rows (their count from m alone, so the sums do not depend on the thread
      // count), each block of a slice: activation backward, bias and kernel gradients into the slice's
      // partial sums while the block is in cache; then the slices are added in order.
      const std::size_t blocks = (m + block_rows - 1) / block_rows;
      const std::size_t slices = std::min(max_slices, blocks), per_slice = (blocks + slices - 1) / slices;
      const std::size_t part = k * Filters + Filters;  // one slice's kernel and bias gradient
      float* parts = detail::ensure(partials_, slices * part);
      detail::for_row_blocks(ctx.device, slices * per_slice * block_rows, per_slice * block_rows,
                             [&](std::size_t s0, std::size_t s1) {
                               const std::size_t s = s0 / (per_slice * block_rows);
                               float* pw = parts + s * part;
                               float* pb = pw + k * Filters;
                               std::fill(pw, pw + part, 0.0f);
                               for (std::size_t r0 = s0; r0 < std::min(s1, m); r0 += block_rows) {
                                 const std::size_t r1 = std::min(m, r0 + block_rows);
                                 float* db = dy + r0 * Filters;
                                 Activation::backward(z ? z + r0 * Filters : nullptr, y + r0 * Filters, db, r1 - r0,
                                                      Filters);
                                 ctx.device.gemm(transpose::yes, transpose::no, k, Filters, r1 - r0, 1.0f,
                                                 cols_.data() + r0 * k, k, db, Filters, 1.0f, pw, Filters);
                                 for (std::size_t r = 0; r < r1 - r0; ++r)
                                   for (std::size_t f = 0; f < Filters; ++f) pb[f] += db[r * Filters + f];
                               }
                             });
      float* gw = g.data();
      std::copy(parts, parts + part, gw);
      for (std::size_t s = 1; s < slices; ++s)
        for (std::size_t i = 0; i < part; ++i) gw[i] += parts[s * part + i];
      if (!dx) return;
      float* dcols = detail::ensure(dcols_, m * k);
      ctx.device.gemm(transpose::no, transpose::yes, m, k, Filters, 1.0f, dy, Filters, p.data(), Filters, 0.0f,
                      dcols, k);
      col2im(dcols, dx, n);
    }

    float regularization(std::span<const float> p, std::span<float> g, float scale) const {
      return regularizer::apply(p.first(k * Filters), g.first(k * Filters), scale);
    }

   private:
    /// Output rows per block: ~64 KiB of output, so a block's im2col, GEMM and activation stay in cache.
    static constexpr std::size_t block_rows = std::max<std::size_t>(16, 16384 / Filters);
    static constexpr std::size_t max_slices = 8;

    /// Calls f(col_offset, input_offset or -1) for every tap of output rows [r0, r1) (row = sample,
    /// then output y, then output x).
    template <class F>
    static void for_each_tap(std::size_t r0, std::size_t r1, F&& f) {
      constexpr std::size_t C = geo::c;
      std::size_t s = r0 / pixels, oy = r0 % pixels / geo::ow, ox = r0 % geo::ow;
      for (std::size_t row = r0; row < r1; ++row) {
        for (std::size_t ky = 0; ky < Kernel; ++ky) {
          const std::ptrdiff_t iy = std::ptrdiff_t(oy * geo::sh + ky) - std::ptrdiff_t(geo::pt);
          for (std::size_t kx = 0; kx < Kernel; ++kx) {
            const std::ptrdiff_t ix = std::ptrdiff_t(ox * geo::sw + kx) - std::ptrdiff_t(geo::pl);
            const std::size_t col = row * k + (ky * Kernel + kx) * C;
            const bool inside = iy >= 0 && ix >= 0 && iy < std::ptrdiff_t(geo::h) && ix < std::ptrdiff_t(geo::w);
            f(col, inside ? std::ptrdiff_t(((s * geo::h + iy) * geo::w + ix) * C) : std::ptrdiff_t(-1));
          }
        }
        if (++ox == geo::ow) {
          ox = 0;
          if (++oy == geo::oh) oy = 0, ++s;
        }
      }
    }
    static void im2col(const float* x, float* cols, std::size_t r0, std::size_t r1) {
      for_each_tap(r0, r1, [&](std::size_t col, std::ptrdiff_t src) {
        if (src < 0)
          std::fill(cols + col, cols + col + geo::c, 0.0f);
        else
          std::memcpy(cols + col, x + src, geo::c * sizeof(float));
      });
    }
    static void col2im(const float* dcols, float* dx, std::size_t n) {
      std::fill(dx, dx + n * In::size, 0.0f);
      for_each_tap(0, n * pixels, [&](std::size_t col, std::ptrdiff_t dst) {
        if (dst < 0) return;
        for (std::size_t c = 0; c < geo::c; ++c) dx[dst + c] += dcols[col + c];
      });
    }

    std::vector<float> cols_, dcols_, z_, partials_;
  };
};

}  // namespace dtrain
