#pragma once
/// \file
/// The CUDA backend's sliding-window kernels: conv2d as im2col + GEMM (the GEMMs cuBLAS'), pooling, zero
/// padding, depthwise conv2d: their source and their launches.

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "dtrain/backend/backend.hpp"
#include "dtrain/backend/cuda/device_pointer.hpp"
#include "dtrain/backend/cuda/kernel_source.hpp"
#include "dtrain/backend/cuda/activations.hpp"

// clang-format off
DTRAIN_CUDA_SOURCE(window,

// ---- windows: conv2d as im2col + GEMM, pooling -----------------------------------------------------------
// cols[row][tap] for the n * oh * ow output pixels (rows) and the kh * kw * c taps of each (group by
// group, each tap's c / groups channels); 0 in padding.
DTRAIN_KERNEL void dtrain_im2col(long long n, window g, const float* x, float* cols) {
  const long long taps = (long long)g.kh * g.kw * g.c, pixels = (long long)g.oh * g.ow;
  const int cg = g.c / g.groups, kg = g.kh * g.kw * cg;
  for (long long e = first_index(); e < n * pixels * taps; e += grid_stride()) {
    const long long row = quot(e, taps), t = e - row * taps;
    const int ti = (int)t, grp = ti / kg, r = ti - grp * kg, ky = r / (g.kw * cg), kx = r / cg % g.kw;
    const int ch = grp * cg + r % cg;
    const long long s = quot(row, pixels), p = row - s * pixels;
    const int iy = (int)(p / g.ow) * g.sh + ky * g.dh - g.pt, ix = (int)(p % g.ow) * g.sw + kx * g.dw - g.pl;
    const bool inside = iy >= 0 && ix >= 0 && iy < g.h && ix < g.w;
    cols[e] = inside ? x[((s * g.h + iy) * g.w + ix) * g.c + ch] : 0.0f;
  }
}
// The lowest output index along one axis whose window (size k, stride st, padding pad) covers input i.
DTRAIN_DEVICE int first_window(int i, int k, int st, int pad) {
  const int lo = i + pad - k + 1;
  return lo <= 0 ? 0 : (lo + st - 1) / st;
}
DTRAIN_DEVICE int last_window(int i, int st, int pad, int out) {
  const int hi = (i + pad) / st;
  return hi < out - 1 ? hi : out - 1;
}
// The output index along one axis whose tap at offset `tap` (already times the dilation) reads input
// i, or -1 (i + pad - tap not a multiple of the stride, or outside [0, out)).
DTRAIN_DEVICE int window_of(int i, int tap, int st, int pad, int out) {
  const int at = i + pad - tap;
  if (at < 0 || at % st != 0) return -1;
  return at / st < out ? at / st : -1;
}
// dx[s][iy][ix][ch] = the sum of the column gradients of every tap that read it (a gather: no atomics).
DTRAIN_KERNEL void dtrain_col2im(long long n, window g, const float* dcols, float* dx) {
  const long long taps = (long long)g.kh * g.kw * g.c, pixels = (long long)g.oh * g.ow;
  const int cg = g.c / g.groups, kg = g.kh * g.kw * cg;
  for (long long e = first_index(); e < n * g.h * g.w * g.c; e += grid_stride()) {
    const long long q = quot(e, g.c), q2 = quot(q, g.w), s = quot(q2, g.h);
    const int ch = (int)(e - q * g.c), ix = (int)(q - q2 * g.w), iy = (int)(q2 - s * g.h);
    const int column = ch / cg * kg + ch % cg;
    float acc = 0.0f;
    for (int ky = 0; ky < g.kh; ++ky) {
      const int oy = window_of(iy, ky * g.dh, g.sh, g.pt, g.oh);
      if (oy < 0) continue;
      for (int kx = 0; kx < g.kw; ++kx) {
        const int ox = window_of(ix, kx * g.dw, g.sw, g.pl, g.ow);
        if (ox >= 0)
          acc += dcols[(s * pixels + (long long)oy * g.ow + ox) * taps + (ky * g.kw + kx) * cg + column];
      }
    }
    dx[e] = acc;
  }
}
// One output value per thread: the max (first maximum wins; its index within the sample kept) or the
// mean over the window's cells inside the input.
DTRAIN_KERNEL void dtrain_pool_forward(long long n, window g, int is_max, const float* x, float* y,
                                       unsigned int* arg) {
  for (long long e = first_index(); e < n * g.oh * g.ow * g.c; e += grid_stride()) {
    const long long q = quot(e, g.c), q2 = quot(q, g.ow), s = quot(q2, g.oh);
    const int ch = (int)(e - q * g.c), ox = (int)(q - q2 * g.ow), oy = (int)(q2 - s * g.oh);
    const int y0 = oy * g.sh - g.pt > 0 ? oy * g.sh - g.pt : 0, x0 = ox * g.sw - g.pl > 0 ? ox * g.sw - g.pl : 0;
    const int y1 = oy * g.sh + g.kh - g.pt < g.h ? oy * g.sh + g.kh - g.pt : g.h;
    const int x1 = ox * g.sw + g.kw - g.pl < g.w ? ox * g.sw + g.kw - g.pl : g.w;
    float acc = 0.0f;
    long long best = 0;
    for (int iy = y0; iy < y1; ++iy)
      for (int ix = x0; ix < x1; ++ix) {
        const long long at = ((long long)iy * g.w + ix) * g.c + ch;
        const float v = x[s * g.h * g.w * g.c + at];
        if (!is_max) acc += v;
        else if (v > acc || (iy == y0 && ix == x0)) { acc = v; best = at; }
      }
    if (is_max) { y[e] = acc; arg[e] = (unsigned int)best; }
    else y[e] = acc / (float)((y1 - y0) * (x1 - x0));
  }
}
// dx for one input value per thread: the dy of every window that took it (max: whose winner it was;
// average: its share).
DTRAIN_KERNEL void dtrain_pool_backward(long long n, window g, int is_max, const float* dy, const unsigned int* arg,
                                        float* dx) {
  for (long long e = first_index(); e < n * g.h * g.w * g.c; e += grid_stride()) {
    const long long q = quot(e, g.c), q2 = quot(q, g.w), s = quot(q2, g.h);
    const int ch = (int)(e - q * g.c), ix = (int)(q - q2 * g.w), iy = (int)(q2 - s * g.h);
    const unsigned int self = (unsigned int)(((long long)iy * g.w + ix) * g.c + ch);
    float acc = 0.0f;
    for (int oy = first_window(iy, g.kh, g.sh, g.pt); oy <= last_window(iy, g.sh, g.pt, g.oh); ++oy)
      for (int ox = first_window(ix, g.kw, g.sw, g.pl); ox <= last_window(ix, g.sw, g.pl, g.ow); ++ox) {
        const long long o = ((s * g.oh + oy) * g.ow + ox) * g.c + ch;
        if (is_max) {
          if (arg[o] == self) acc += dy[o];
        } else {
          const int y0 = oy * g.sh - g.pt > 0 ? oy * g.sh - g.pt : 0, x0 = ox * g.sw - g.pl > 0 ? ox * g.sw - g.pl : 0;
          const int y1 = oy * g.sh + g.kh - g.pt < g.h ? oy * g.sh + g.kh - g.pt : g.h;
          const int x1 = ox * g.sw + g.kw - g.pl < g.w ? ox * g.sw + g.kw - g.pl : g.w;
          acc += dy[o] / (float)((y1 - y0) * (x1 - x0));
        }
      }
    dx[e] = acc;
  }
}

// ---- zero padding (window g: the input at row pt, column pl of the oh x ow output) -------------------------
DTRAIN_KERNEL void dtrain_zero_pad_forward(long long n, window g, const float* x, float* y) {
  for (long long e = first_index(); e < n * g.oh * g.ow * g.c; e += grid_stride()) {
    const long long q = quot(e, g.c), q2 = quot(q, g.ow), s = quot(q2, g.oh);
    const int ch = (int)(e - q * g.c), ix = (int)(q - q2 * g.ow) - g.pl, iy = (int)(q2 - s * g.oh) - g.pt;
    y[e] = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w ? x[((s * g.h + iy) * g.w + ix) * g.c + ch] : 0.0f;
  }
}
DTRAIN_KERNEL void dtrain_zero_pad_backward(long long n, window g, const float* dy, float* dx) {
  for (long long e = first_index(); e < n * g.h * g.w * g.c; e += grid_stride()) {
    const long long q = quot(e, g.c), q2 = quot(q, g.w), s = quot(q2, g.h);
    const int ch = (int)(e - q * g.c), ix = (int)(q - q2 * g.w), iy = (int)(q2 - s * g.h);
    dx[e] = dy[((s * g.oh + iy + g.pt) * g.ow + ix + g.pl) * g.c + ch];
  }
}

// ---- up-sampling, nearest (window g: the factors kh x kw); backward sums each block row by row ------------
DTRAIN_KERNEL void dtrain_up_sample_forward(long long n, window g, const float* x, float* y) {
  for (long long e = first_index(); e < n * g.oh * g.ow * g.c; e += grid_stride()) {
    const long long q = quot(e, g.c), q2 = quot(q, g.ow), s = quot(q2, g.oh);
    const int ch = (int)(e - q * g.c), ox = (int)(q - q2 * g.ow), oy = (int)(q2 - s * g.oh);
    y[e] = x[((s * g.h + oy / g.kh) * g.w + ox / g.kw) * g.c + ch];
  }
}
DTRAIN_KERNEL void dtrain_up_sample_backward(long long n, window g, const float* dy, float* dx) {
  for (long long e = first_index(); e < n * g.h * g.w * g.c; e += grid_stride()) {
    const long long q = quot(e, g.c), q2 = quot(q, g.w), s = quot(q2, g.h);
    const int ch = (int)(e - q * g.c), ix = (int)(q - q2 * g.w), iy = (int)(q2 - s * g.h);
    float acc = 0.0f;
    for (int ky = 0; ky < g.kh; ++ky)
      for (int kx = 0; kx < g.kw; ++kx)
        acc += dy[((s * g.oh + (long long)iy * g.kh + ky) * g.ow + (long long)ix * g.kw + kx) * g.c + ch];
    dx[e] = acc;
  }
}

// ---- depthwise convolution (window g, f = c m outputs), zero padding -----------------------------------
DTRAIN_KERNEL void dtrain_depthwise_forward(long long n, window g, const float* x, const float* w, const float* b,
                                            float* y) {
  const int m = g.f / g.c;
  for (long long e = first_index(); e < n * g.oh * g.ow * g.f; e += grid_stride()) {
    const long long q = quot(e, g.f), q2 = quot(q, g.ow), s = quot(q2, g.oh);
    const int o = (int)(e - q * g.f), ox = (int)(q - q2 * g.ow), oy = (int)(q2 - s * g.oh), ch = o / m;
    float acc = b ? b[o] : 0.0f;
    for (int ky = 0; ky < g.kh; ++ky)
      for (int kx = 0; kx < g.kw; ++kx) {
        const int iy = oy * g.sh + ky - g.pt, ix = ox * g.sw + kx - g.pl;
        if (iy >= 0 && ix >= 0 && iy < g.h && ix < g.w)
          acc += x[((s * g.h + iy) * g.w + ix) * g.c + ch] * w[(ky * g.kw + kx) * g.f + o];
      }
    y[e] = acc;
  }
}
// The kernel's gradient, one thread per weight: the sum over samples and output pixels, in order.
DTRAIN_KERNEL void dtrain_depthwise_kernel_grad(long long n, window g, const float* x, const float* dy, float* gw) {
  const int m = g.f / g.c;
  for (long long e = first_index(); e < (long long)g.kh * g.kw * g.f; e += grid_stride()) {
    const int tap = (int)quot(e, g.f), o = (int)(e - (long long)tap * g.f), ky = tap / g.kw, kx = tap - ky * g.kw;
    const int ch = o / m;
    float acc = 0.0f;
    for (long long s = 0; s < n; ++s)
      for (int oy = 0; oy < g.oh; ++oy)
        for (int ox = 0; ox < g.ow; ++ox) {
          const int iy = oy * g.sh + ky - g.pt, ix = ox * g.sw + kx - g.pl;
          if (iy >= 0 && ix >= 0 && iy < g.h && ix < g.w)
            acc += x[((s * g.h + iy) * g.w + ix) * g.c + ch] * dy[((s * g.oh + oy) * g.ow + ox) * g.f + o];
        }
    gw[e] = acc;
  }
}
// dx, one thread per input value: every window and multiplier that read it (a gather).
DTRAIN_KERNEL void dtrain_depthwise_input_grad(long long n, window g, const float* w, const float* dy, float* dx) {
  const int m = g.f / g.c;
  for (long long e = first_index(); e < n * g.h * g.w * g.c; e += grid_stride()) {
    const long long q = quot(e, g.c), q2 = quot(q, g.w), s = quot(q2, g.h);
    const int ch = (int)(e - q * g.c), ix = (int)(q - q2 * g.w), iy = (int)(q2 - s * g.h);
    float acc = 0.0f;
    for (int oy = first_window(iy, g.kh, g.sh, g.pt); oy <= last_window(iy, g.sh, g.pt, g.oh); ++oy)
      for (int ox = first_window(ix, g.kw, g.sw, g.pl); ox <= last_window(ix, g.sw, g.pl, g.ow); ++ox) {
        const int ky = iy + g.pt - oy * g.sh, kx = ix + g.pl - ox * g.sw;
        for (int j = 0; j < m; ++j)
          acc += w[(ky * g.kw + kx) * g.f + ch * m + j] * dy[((s * g.oh + oy) * g.ow + ox) * g.f + ch * m + j];
      }
    dx[e] = acc;
  }
}


)
// clang-format on

/// The family's kernels, for the kernel list (cuda/kernels.hpp).
#define DTRAIN_CUDA_WINDOW_KERNELS(X)                                                                         \
  X(dtrain_im2col) X(dtrain_col2im) X(dtrain_pool_forward) X(dtrain_pool_backward)                            \
  X(dtrain_zero_pad_forward) X(dtrain_zero_pad_backward) X(dtrain_up_sample_forward)                          \
  X(dtrain_up_sample_backward) X(dtrain_depthwise_forward) X(dtrain_depthwise_kernel_grad)                    \
  X(dtrain_depthwise_input_grad)

namespace dtrain::cuda_detail {

template <class D>
class cuda_window_kernels {
  template <class T>
  using pointer = device_pointer<T>;
  const D& self() const { return static_cast<const D&>(*this); }

 public:
  template <window_geometry G>
  std::size_t conv2d_workspace(std::size_t n) const {
    return n * G.pixels() * G.taps();
  }
  template <window_geometry G>
  std::size_t conv2d_backward_workspace(std::size_t n, bool input_gradient) const {
    return input_gradient ? n * G.pixels() * G.taps() : 0;
  }
  /// im2col into the workspace, y = cols x kernel (one GEMM per group), then the bias (unless b is null)
  /// and the activation in one pass.
  template <window_geometry G, activation_kind A>
  void conv2d_forward(std::size_t n, pointer<const float> x, pointer<const float> w, pointer<const float> b,
                      pointer<float> y, pointer<float> z, pointer<float> work) const {
    const std::size_t m = n * G.pixels(), k = G.taps();
    self().template run<&kernels::dtrain_im2col>(m * k, n, geometry<G>(), x, work);
    grouped_gemm<G>(transpose::no, transpose::no, m, work, k, w, y);
    bias_activation<A>(m, G.f, b, z, y);
  }
  /// The activation's backward on dy, kernel gradient = cols^T dy, bias gradient (unless gb is null) =
  /// column sums of dy, and with dx: column gradients = dy kernel^T gathered back into dx (col2im).
  template <window_geometry G, activation_kind A>
  void conv2d_backward(std::size_t n, pointer<const float> z, pointer<const float> y, pointer<float> dy,
                       pointer<const float> w, pointer<const float> work, pointer<float> scratch, pointer<float> gw,
                       pointer<float> gb, pointer<float> dx) const {
    const std::size_t m = n * G.pixels(), k = G.taps();
    self().template activation_backward<A>(m, G.f, z, y, dy, dy);
    grouped_gemm<G>(transpose::yes, transpose::no, m, work, k, dy, gw);
    if (gb) self().column_sums(m, G.f, dy, gb);
    if (!dx) return;
    grouped_gemm<G>(transpose::no, transpose::yes, m, dy, G.f, w, scratch);
    self().template run<&kernels::dtrain_col2im>(n * G.in_size(), n, geometry<G>(), scratch, dx);
  }
  template <window_geometry G>
  std::size_t conv2d_transpose_workspace(std::size_t n) const {
    return n * G.pixels() * G.taps();
  }
  /// Column values = x kernel^T, gathered into y (col2im), then the bias and the activation.
  template <window_geometry G, activation_kind A>
  void conv2d_transpose_forward(std::size_t n, pointer<const float> x, pointer<const float> w,
                                pointer<const float> b, pointer<float> y, pointer<float> z, pointer<float> work) const {
    const std::size_t m = n * G.pixels();
    grouped_gemm<G>(transpose::no, transpose::yes, m, x, G.f, w, work);
    self().template run<&kernels::dtrain_col2im>(n * G.in_size(), n, geometry<G>(), work, y);
    bias_activation<A>(n * G.h * G.w, G.c, b, z, y);
  }
  /// The activation's backward on dy, the bias gradient, im2col of dy, then kernel gradient = cols^T x
  /// and dx = cols kernel.
  template <window_geometry G, activation_kind A>
  void conv2d_transpose_backward(std::size_t n, pointer<const float> x, pointer<const float> z,
                                 pointer<const float> y, pointer<float> dy, pointer<const float> w,
                                 pointer<float> work, pointer<float> gw, pointer<float> gb, pointer<float> dx) const {
    const std::size_t m = n * G.pixels(), k = G.taps(), rows = n * G.h * G.w;
    self().template activation_backward<A>(rows, G.c, z, y, dy, dy);
    if (gb) self().column_sums(rows, G.c, dy, gb);
    self().template run<&kernels::dtrain_im2col>(m * k, n, geometry<G>(), dy, work);
    grouped_gemm<G>(transpose::yes, transpose::no, m, work, k, x, gw);
    if (dx) grouped_gemm<G>(transpose::no, transpose::no, m, work, k, w, dx);
  }
  template <window_geometry G>
  void max_pooling2d_forward(std::size_t n, pointer<const float> x, pointer<float> y,
                             pointer<std::uint32_t> argmax) const {
    self().template run<&kernels::dtrain_pool_forward>(n * G.out_size(), n, geometry<G>(), 1, x, y, argmax);
  }
  template <window_geometry G>
  void max_pooling2d_backward(std::size_t n, pointer<const float> dy, pointer<const std::uint32_t> argmax,
                              pointer<float> dx) const {
    self().template run<&kernels::dtrain_pool_backward>(n * G.in_size(), n, geometry<G>(), 1, dy, argmax, dx);
  }
  template <window_geometry G>
  void average_pooling2d_forward(std::size_t n, pointer<const float> x, pointer<float> y) const {
    self().template run<&kernels::dtrain_pool_forward>(n * G.out_size(), n, geometry<G>(), 0, x, y,
                                                        pointer<std::uint32_t>{});
  }
  template <window_geometry G>
  void average_pooling2d_backward(std::size_t n, pointer<const float> dy, pointer<float> dx) const {
    self().template run<&kernels::dtrain_pool_backward>(n * G.in_size(), n, geometry<G>(), 0, dy,
                                                         pointer<const std::uint32_t>{}, dx);
  }
  template <window_geometry G>
  void zero_padding2d_forward(std::size_t n, pointer<const float> x, pointer<float> y) const {
    self().template run<&kernels::dtrain_zero_pad_forward>(n * G.out_size(), n, geometry<G>(), x, y);
  }
  template <window_geometry G>
  void zero_padding2d_backward(std::size_t n, pointer<const float> dy, pointer<float> dx) const {
    self().template run<&kernels::dtrain_zero_pad_backward>(n * G.in_size(), n, geometry<G>(), dy, dx);
  }
  template <window_geometry G>
  void up_sampling2d_forward(std::size_t n, pointer<const float> x, pointer<float> y) const {
    self().template run<&kernels::dtrain_up_sample_forward>(n * G.out_size(), n, geometry<G>(), x, y);
  }
  template <window_geometry G>
  void up_sampling2d_backward(std::size_t n, pointer<const float> dy, pointer<float> dx) const {
    self().template run<&kernels::dtrain_up_sample_backward>(n * G.in_size(), n, geometry<G>(), dy, dx);
  }
  template <window_geometry G>
  void depthwise_conv2d_forward(std::size_t n, pointer<const float> x, pointer<const float> w,
                                pointer<const float> b, pointer<float> y) const {
    self().template run<&kernels::dtrain_depthwise_forward>(n * G.out_size(), n, geometry<G>(), x, w, b, y);
  }
  template <window_geometry G>
  void depthwise_conv2d_backward(std::size_t n, pointer<const float> x, pointer<const float> w,
                                 pointer<const float> dy, pointer<float> gw, pointer<float> dx) const {
    self().template run<&kernels::dtrain_depthwise_kernel_grad>(G.kh * G.kw * G.f, n, geometry<G>(), x, dy, gw);
    if (dx)
      self().template run<&kernels::dtrain_depthwise_input_grad>(n * G.in_size(), n, geometry<G>(), w, dy, dx);
  }

 private:
  template <window_geometry G>
  static cuda_kernels::window geometry() {
    const auto i = [](std::size_t v) { return static_cast<int>(v); };
    return {i(G.h),  i(G.w),  i(G.c),  i(G.kh), i(G.kw), i(G.sh), i(G.sw),     i(G.pt),
            i(G.pl), i(G.oh), i(G.ow), i(G.f),  i(G.dh), i(G.dw), i(G.groups)};
  }
  /// One of a convolution's three products, one GEMM per group (each on its columns of the im2col rows,
  /// of the kernel and of the pixel rows), C overwritten:
  /// - (no, no): pixels (m x f) = cols (m x taps, ld lda) kernel;
  /// - (yes, no): kernel gradient = cols^T (ld lda) pixels (m x f);
  /// - (no, yes): cols (m x taps) = pixels (m x f, ld lda) kernel^T.
  template <window_geometry G>
  void grouped_gemm(transpose ta, transpose tb, std::size_t m, pointer<const float> a, std::size_t lda,
                    pointer<const float> b, pointer<float> c) const {
    const std::size_t kg = G.group_taps(), fg = G.f / G.groups, k = G.taps();
    for (std::size_t g = 0; g < G.groups; ++g) {
      if (tb == transpose::yes)  // cols = pixels kernel^T
        self().gemm(ta, tb, m, kg, fg, 1.0f, a + g * fg, lda, b + g * fg, G.f, 0.0f, c + g * kg, k);
      else if (ta == transpose::yes)  // kernel gradient = cols^T pixels
        self().gemm(ta, tb, kg, fg, m, 1.0f, a + g * kg, lda, b + g * fg, G.f, 0.0f, c + g * fg, G.f);
      else  // pixels = cols kernel
        self().gemm(ta, tb, m, fg, kg, 1.0f, a + g * kg, lda, b + g * fg, G.f, 0.0f, c + g * fg, G.f);
    }
  }
  /// y = A(y + b) over rows of `cols` values, the pre-activation kept in z when A needs it (else null).
  template <activation_kind A>
  void bias_activation(std::size_t rows, std::size_t cols, pointer<const float> b, pointer<float> z,
                       pointer<float> y) const {
    constexpr bool rowwise = A == activation_kind::softmax;
    self().template run<&kernels::dtrain_bias_activation>(rows * cols, rows, cols,
                                                           static_cast<int>(rowwise ? activation_kind::linear : A), b,
                                                           needs_input(A) ? z : pointer<float>{}, y);
    if constexpr (rowwise) self().template activation_forward<A>(rows, cols, y, y);
  }
};

}  // namespace dtrain::cuda_detail
