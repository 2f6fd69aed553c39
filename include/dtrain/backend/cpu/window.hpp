#pragma once
/// \file
/// The cpu backend's sliding-window kernels: conv2d direct where it can be (stride 1, no dilation, one
/// group: products on a zero-padded copy of the input), else as im2col + GEMM in blocks of output rows
/// that stay in cache (spread over the thread budget), max / average pooling, zero padding and depthwise
/// conv2d.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "dtrain/backend/cpu/activations.hpp"
#include "dtrain/backend/cpu/gemm.hpp"
#include "dtrain/backend/cpu/reductions.hpp"

namespace dtrain::detail {

/// Runs `f(r0, r1)` on blocks of `rows` rows covering [0, m), spread over the thread budget (BLAS calls
/// inside run on their caller's thread). Blocks write disjoint memory; `f` must not throw.
template <class F>
void for_row_blocks(std::size_t m, std::size_t rows, F&& f) {
  const std::size_t blocks = (m + rows - 1) / rows;
  parallel_for(
      blocks, 1,
      [&](std::size_t first, std::size_t last) {
        for (std::size_t i = first; i < last; ++i) f(i * rows, std::min(m, (i + 1) * rows));
      },
      1);
}

/// Calls f(col_offset, input_offset or -1) for every tap and group of output rows [r0, r1) of window G
/// (row = sample, then output y, then output x; a tap outside the input is padding; one call covers
/// the tap's c / groups channels of one group, its columns at group * group_taps + tap * c / groups).
/// Inlined into its caller, so that `f` (a copy of those floats) is fused into the loop: called, it
/// costs im2col a fifth more work.
template <window_geometry G, class F>
[[gnu::always_inline]] inline void for_each_tap(std::size_t r0, std::size_t r1, F&& f) {
  constexpr std::size_t C = G.c, cg = C / G.groups, pixels = G.pixels(), k = G.taps(), kg = G.group_taps();
  std::size_t s = r0 / pixels, oy = r0 % pixels / G.ow, ox = r0 % G.ow;
  for (std::size_t row = r0; row < r1; ++row) {
    for (std::size_t ky = 0; ky < G.kh; ++ky) {
      const std::ptrdiff_t iy = std::ptrdiff_t(oy * G.sh + ky * G.dh) - std::ptrdiff_t(G.pt);
      for (std::size_t kx = 0; kx < G.kw; ++kx) {
        const std::ptrdiff_t ix = std::ptrdiff_t(ox * G.sw + kx * G.dw) - std::ptrdiff_t(G.pl);
        const std::size_t col = row * k + (ky * G.kw + kx) * cg;
        const bool inside = iy >= 0 && ix >= 0 && iy < std::ptrdiff_t(G.h) && ix < std::ptrdiff_t(G.w);
        const std::ptrdiff_t src = inside ? std::ptrdiff_t(((s * G.h + iy) * G.w + ix) * C) : std::ptrdiff_t(-1);
        for (std::size_t g = 0; g < G.groups; ++g)
          f(col + g * kg, src < 0 ? src : src + std::ptrdiff_t(g * cg));
      }
    }
    if (++ox == G.ow) {
      ox = 0;
      if (++oy == G.oh) oy = 0, ++s;
    }
  }
}

/// conv2d of window G (f filters) with activation A. Forward's workspace holds the im2col rows, which
/// backward reads; backward's holds the per-slice partial gradients and, for an input gradient, the
/// column gradients. With groups, each product is one GEMM per group on its columns of the im2col rows,
/// the kernel and the output.
template <window_geometry G, activation_kind A>
struct conv2d_kernels {
  static constexpr std::size_t k = G.taps(), kg = G.group_taps(), pixels = G.pixels(), filters = G.f,
                               fg = filters / G.groups, cg = G.c / G.groups;
  /// Output rows per block: ~64 KiB of output, so a block's im2col, GEMM and activation stay in cache.
  static constexpr std::size_t block_rows = std::max<std::size_t>(16, 16384 / filters);
  static constexpr std::size_t max_slices = 8;
  static constexpr std::size_t part = G.kernel_values() + filters;  // one slice's kernel and bias gradient

  static constexpr std::size_t workspace(std::size_t n) { return n * pixels * k; }
  static constexpr std::size_t backward_workspace(std::size_t n, bool input_gradient) {
    return max_slices * part + (input_gradient ? n * pixels * k : 0);
  }

  static void forward(std::size_t n, const float* x, const float* w, const float* b, float* y, float* z,
                      float* work, dtype inputs = dtype::float32) {
    const std::size_t m = n * pixels;
    float* cols = work;
    // block by block (rows of the output that stay in cache): im2col, bias, GEMM, activation
    for_row_blocks(m, block_rows, [&](std::size_t r0, std::size_t r1) {
      im2col(x, cols, r0, r1);
      float* yb = y + r0 * filters;
      if (b)
        for (std::size_t r = r0; r < r1; ++r) std::memcpy(y + r * filters, b, filters * sizeof(float));
      else
        std::fill(yb, yb + (r1 - r0) * filters, 0.0f);
      for (std::size_t g = 0; g < G.groups; ++g)
        planned_gemm(transpose::no, transpose::no, r1 - r0, fg, kg, 1.0f, cols + r0 * k + g * kg, k, w + g * fg,
                     filters, 1.0f, yb + g * fg, filters, inputs);
      if constexpr (needs_input(A)) std::memcpy(z + r0 * filters, yb, (r1 - r0) * filters * sizeof(float));
      activation_forward<A>(r1 - r0, filters, yb, yb);
    });
  }

  static void backward(std::size_t n, const float* z, const float* y, float* dy, const float* w, const float* cols,
                       float* scratch, float* gw, float* gb, float* dx, dtype inputs = dtype::float32) {
    const std::size_t m = n * pixels;
    float* parts = scratch;
    // Fixed slices of the rows (their count from m alone, so the sums do not depend on the thread
    // count), each block of a slice: activation backward, bias and kernel gradients into the slice's
    // partial sums while the block is in cache; then the slices are added in order.
    const std::size_t blocks = (m + block_rows - 1) / block_rows;
    const std::size_t slices = std::min(max_slices, blocks), per_slice = (blocks + slices - 1) / slices;
    for_row_blocks(slices * per_slice * block_rows, per_slice * block_rows, [&](std::size_t s0, std::size_t s1) {
      const std::size_t s = s0 / (per_slice * block_rows);
      float* pw = parts + s * part;
      float* pb = pw + G.kernel_values();
      std::fill(pw, pw + part, 0.0f);
      for (std::size_t r0 = s0; r0 < std::min(s1, m); r0 += block_rows) {
        const std::size_t r1 = std::min(m, r0 + block_rows);
        float* db = dy + r0 * filters;
        activation_backward<A>(r1 - r0, filters, z ? z + r0 * filters : nullptr, y + r0 * filters, db, db);
        for (std::size_t g = 0; g < G.groups; ++g)
          planned_gemm(transpose::yes, transpose::no, kg, fg, r1 - r0, 1.0f, cols + r0 * k + g * kg, k, db + g * fg,
                       filters, 1.0f, pw + g * fg, filters, inputs);
        if (gb)
          for (std::size_t r = 0; r < r1 - r0; ++r)
            for (std::size_t f = 0; f < filters; ++f) pb[f] += db[r * filters + f];
      }
    });
    const auto add_slices = [&](std::size_t from, std::size_t count, float* out) {
      std::copy(parts + from, parts + from + count, out);
      for (std::size_t s = 1; s < slices; ++s)
        for (std::size_t i = 0; i < count; ++i) out[i] += parts[s * part + from + i];
    };
    add_slices(0, G.kernel_values(), gw);
    if (gb) add_slices(G.kernel_values(), filters, gb);
    if (!dx) return;
    float* dcols = parts + max_slices * part;
    for (std::size_t g = 0; g < G.groups; ++g)
      planned_gemm(transpose::no, transpose::yes, m, kg, fg, 1.0f, dy + g * fg, filters, w + g * fg, filters, 0.0f,
                   dcols + g * kg, k, inputs);
    col2im(dcols, dx, n);
  }

  static void im2col(const float* x, float* cols, std::size_t r0, std::size_t r1) {
    for_each_tap<G>(r0, r1, [&](std::size_t col, std::ptrdiff_t src) {
      if (src < 0)
        std::fill(cols + col, cols + col + cg, 0.0f);
      else
        std::memcpy(cols + col, x + src, cg * sizeof(float));
    });
  }
  static void col2im(const float* dcols, float* dx, std::size_t n) {
    std::fill(dx, dx + n * G.in_size(), 0.0f);
    for_each_tap<G>(0, n * pixels, [&](std::size_t col, std::ptrdiff_t dst) {
      if (dst < 0) return;
      for (std::size_t c = 0; c < cg; ++c) dx[dst + c] += dcols[col + c];
    });
  }
};

/// Whether conv2d of window G runs direct (direct_conv2d_kernels): stride 1, no dilation, one group, and at
/// most kernel - 1 of padding on every side (Keras' valid and same).
constexpr bool direct_conv2d_eligible(window_geometry G) {
  return G.sh == 1 && G.sw == 1 && G.dh == 1 && G.dw == 1 && G.groups == 1 && G.pt < G.kh && G.pl < G.kw &&
         G.oh + G.kh - 1 >= G.h + G.pt && G.ow + G.kw - 1 >= G.w + G.pl && G.oh + G.kh - 1 - G.h - G.pt < G.kh &&
         G.ow + G.kw - 1 - G.w - G.pl < G.kw;
}

namespace direct_conv {

/// to (n samples of hp x wp x c) = from (n of h x w x c) placed at row `top`, column `left`, zero around.
inline void pad(std::size_t n, std::size_t h, std::size_t w, std::size_t c, std::size_t top, std::size_t left,
                std::size_t hp, std::size_t wp, const float* from, float* to) {
  for_rows(n * hp, wp * c, [&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) {
      const std::size_t s = r / hp, y = r % hp;
      float* row = to + r * wp * c;
      if (y < top || y >= top + h) {
        std::fill(row, row + wp * c, 0.0f);
        continue;
      }
      std::fill(row, row + left * c, 0.0f);
      std::memcpy(row + left * c, from + (s * h + y - top) * w * c, w * c * sizeof(float));
      std::fill(row + (left + w) * c, row + wp * c, 0.0f);
    }
  });
}

/// out[s][oy][ox][0..f) = bias (zero when null) + the sum over ky, kx, ch of in[s][oy + ky][ox + kx][ch]
/// k[ky][kx][ch][0..f), for n samples of `in` padded to (oh + kh - 1) x (ow + kw - 1) x c. One product per
/// output row and kernel row: a pixel's kw taps are kw c consecutive values of `in`, the pixels c apart.
/// `then(r0, r1)` runs on each block of output rows (sample, oy) once it is done, while it is in cache.
/// With `inputs` bfloat16, an even c and the CPU's bfloat16 GEMM: the products on bfloat16 operands (the
/// input packed in pairs of channels, which a pixel's taps never split; the kernel as the GEMM packs B).
template <class Then>
void rows(cpu_isa isa, std::size_t n, std::size_t oh, std::size_t ow, std::size_t kh, std::size_t kw, std::size_t c,
          std::size_t f, const float* in, const float* k, const float* bias, float* out, Then&& then,
          dtype inputs = dtype::float32) {
  const std::size_t hp = oh + kh - 1, wp = ow + kw - 1;
  // bfloat16: the input and the kernel rows packed once, then the same loop with the paired tiles
  const bool paired = DTRAIN_CPU_AVX && inputs == dtype::bfloat16 && c % 2 == 0 && bf16_gemm_available();
  thread_local std::vector<std::uint32_t> in_pairs, kernel_pairs;
  [[maybe_unused]] const std::size_t pairs = kw * c / 2;
  [[maybe_unused]] std::size_t ldp = 0;
#if DTRAIN_CPU_AVX
  if (paired) {
    ldp = bf16::packed_columns(f);
    const std::size_t values = n * hp * wp * c;
    in_pairs.resize(values / 2);
    kernel_pairs.resize(kh * pairs * ldp);
    std::uint32_t* into = in_pairs.data();
    for_rows(values / 2, 1, [&](std::size_t q0, std::size_t q1) {
      for (std::size_t q = q0; q < q1; ++q) into[q] = bf16::pair(in[2 * q], in[2 * q + 1]);
    });
    for (std::size_t ky = 0; ky < kh; ++ky)
      bf16::pack_b(transpose::no, kw * c, f, 1.0f, k + ky * kw * c * f, f, kernel_pairs.data() + ky * pairs * ldp, ldp);
  }
#endif
  // (this thread's buffers: the pool's threads have buffers of their own under the same names)
  [[maybe_unused]] const std::uint32_t *ip = in_pairs.data(), *kp = kernel_pairs.data();
  for_row_blocks(n * oh, std::max<std::size_t>(1, 16384 / (ow * f)), [&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) {
      float* o = out + r * ow * f;
      if (bias)
        for (std::size_t x = 0; x < ow; ++x) std::memcpy(o + x * f, bias, f * sizeof(float));
      const std::size_t first = (r / oh * hp + r % oh) * wp * c;  // the row's first input value
      for (std::size_t ky = 0; ky < kh; ++ky) {
        const std::size_t at = first + ky * wp * c;
#if DTRAIN_CPU_AVX
        if (paired) {
          bf16::product({ow, f, pairs, ip + at / 2, c / 2, 1, kp + ky * pairs * ldp, ldp, o, f, bias || ky > 0}, 0,
                        ow, 0, f);
          continue;
        }
#endif
        product_block(isa, {ow, f, kw * c, in + at, c, 1, k + ky * kw * c * f, f, o, f, bias || ky > 0}, 0, ow, 0,
                        f);
      }
    }
    then(r0 * ow, r1 * ow);
  });
}

}  // namespace direct_conv

/// conv2d of window G (direct_conv2d_eligible) with activation A, without im2col: forward pads x into its
/// workspace (which backward reads) and runs direct_conv::rows; the kernel gradient is one product per
/// sample, output row and kernel row (A the padded input read strided), summed over the samples by
/// sum_rows (fixed slices); the input gradient is the convolution of dy, padded by kernel - 1 - padding,
/// with the kernel flipped and its channels swapped. The same interface as conv2d_kernels. With `inputs`
/// bfloat16, forward and the input gradient multiply bfloat16 operands (direct_conv::rows); the kernel
/// gradient multiplies float32 ones (its operands' pairs of k are pixels apart, not packed).
template <window_geometry G, activation_kind A>
struct direct_conv2d_kernels {
  static_assert(direct_conv2d_eligible(G));
  static constexpr std::size_t hp = G.oh + G.kh - 1, wp = G.ow + G.kw - 1;  // x padded
  static constexpr std::size_t dhp = G.h + G.kh - 1, dwp = G.w + G.kw - 1;  // dy padded, for dx
  static constexpr std::size_t filters = G.f, kernel = G.kernel_values();

  static constexpr std::size_t workspace(std::size_t n) { return n * hp * wp * G.c; }
  static constexpr std::size_t backward_workspace(std::size_t n, bool input_gradient) {
    return input_gradient ? n * dhp * dwp * filters + kernel : 0;
  }

  static void forward(std::size_t n, const float* x, const float* w, const float* b, float* y, float* z,
                      float* work, dtype inputs = dtype::float32) {
    direct_conv::pad(n, G.h, G.w, G.c, G.pt, G.pl, hp, wp, x, work);
    direct_conv::rows(best_cpu_isa(), n, G.oh, G.ow, G.kh, G.kw, G.c, filters, work, w, b, y,
                      [&](std::size_t p0, std::size_t p1) {
                        float* yb = y + p0 * filters;
                        if constexpr (needs_input(A))
                          std::memcpy(z + p0 * filters, yb, (p1 - p0) * filters * sizeof(float));
                        activation_forward<A>(p1 - p0, filters, yb, yb);
                      },
                      inputs);
  }

  static void backward(std::size_t n, const float* z, const float* y, float* dy, const float* w, const float* xp,
                       float* scratch, float* gw, float* gb, float* dx, dtype inputs = dtype::float32) {
    const cpu_isa isa = best_cpu_isa();
    const std::size_t m = n * G.pixels();
    for_rows(m, filters, [&](std::size_t r0, std::size_t r1) {
      float* d = dy + r0 * filters;
      activation_backward<A>(r1 - r0, filters, z ? z + r0 * filters : nullptr, y + r0 * filters, d, d);
    });
    if (gb) column_sums(m, filters, dy, gb);
    // the kernel gradient, sample by sample: one product per output row and kernel row
    sum_rows(n, G.out_size(), kernel, gw, [&](std::size_t sample, float* acc) {
      const std::size_t rows = G.kw * G.c;
      for (std::size_t oy = 0; oy < G.oh; ++oy)
        for (std::size_t ky = 0; ky < G.kh; ++ky) {
          const float* a = xp + ((sample * hp + oy + ky) * wp) * G.c;
          const float* d = dy + (sample * G.oh + oy) * G.ow * filters;
          product_block(isa, {rows, filters, G.ow, a, 1, G.c, d, filters, acc + ky * rows * filters, filters, true}, 0,
                        rows, 0, filters);
        }
    });
    if (!dx) return;
    float* dyp = scratch;
    float* flipped = dyp + n * dhp * dwp * filters;  // [ky][kx][f][c] = w[kh - 1 - ky][kw - 1 - kx][c][f]
    for (std::size_t ky = 0; ky < G.kh; ++ky)
      for (std::size_t kx = 0; kx < G.kw; ++kx)
        for (std::size_t ch = 0; ch < G.c; ++ch)
          for (std::size_t j = 0; j < filters; ++j)
            flipped[((ky * G.kw + kx) * filters + j) * G.c + ch] =
                w[(((G.kh - 1 - ky) * G.kw + (G.kw - 1 - kx)) * G.c + ch) * filters + j];
    direct_conv::pad(n, G.oh, G.ow, filters, G.kh - 1 - G.pt, G.kw - 1 - G.pl, dhp, dwp, dy, dyp);
    direct_conv::rows(isa, n, G.h, G.w, G.kh, G.kw, filters, G.c, dyp, flipped, nullptr, dx,
                      [](std::size_t, std::size_t) {}, inputs);
  }
};

/// The conv2d kernels of window G: direct where it can be, else im2col + GEMM.
template <window_geometry G, activation_kind A>
using conv2d_kernels_of =
    std::conditional_t<direct_conv2d_eligible(G), direct_conv2d_kernels<G, A>, conv2d_kernels<G, A>>;

/// conv2d_transpose over window G (the convolution it is the adjoint of): x holds G's outputs (f
/// channels), y its inputs (c channels). Forward: column values x kernel^T, scattered back by col2im,
/// then the bias and the activation; backward: the activation's backward, the bias gradient, im2col of
/// dy, then kernel gradient = cols^T x and dx = cols kernel. One workspace of im2col rows serves both.
template <window_geometry G, activation_kind A>
struct conv2d_transpose_kernels {
  using conv = conv2d_kernels<G, activation_kind::linear>;
  static constexpr std::size_t k = G.taps(), kg = G.group_taps(), f = G.f, fg = conv::fg;

  static constexpr std::size_t workspace(std::size_t n) { return conv::workspace(n); }

  static void forward(std::size_t n, const float* x, const float* w, const float* b, float* y, float* z,
                      float* cols, dtype inputs = dtype::float32) {
    const std::size_t m = n * G.pixels(), rows = n * G.h * G.w;
    for (std::size_t g = 0; g < G.groups; ++g)
      planned_gemm(transpose::no, transpose::yes, m, kg, fg, 1.0f, x + g * fg, f, w + g * fg, f, 0.0f,
                   cols + g * kg, k, inputs);
    conv::col2im(cols, y, n);
    if (b)
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < G.c; ++c) y[r * G.c + c] += b[c];
    if constexpr (needs_input(A)) std::memcpy(z, y, rows * G.c * sizeof(float));
    activation_forward<A>(rows, G.c, y, y);
  }

  static void backward(std::size_t n, const float* x, const float* z, const float* y, float* dy, const float* w,
                       float* cols, float* gw, float* gb, float* dx, dtype inputs = dtype::float32) {
    const std::size_t m = n * G.pixels(), rows = n * G.h * G.w;
    activation_backward<A>(rows, G.c, z, y, dy, dy);
    if (gb) {
      std::fill(gb, gb + G.c, 0.0f);
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < G.c; ++c) gb[c] += dy[r * G.c + c];
    }
    for_row_blocks(m, conv::block_rows, [&](std::size_t r0, std::size_t r1) { conv::im2col(dy, cols, r0, r1); });
    for (std::size_t g = 0; g < G.groups; ++g) {
      planned_gemm(transpose::yes, transpose::no, kg, fg, m, 1.0f, cols + g * kg, k, x + g * fg, f, 0.0f, gw + g * fg,
                   f, inputs);
      if (dx)
        planned_gemm(transpose::no, transpose::no, m, fg, kg, 1.0f, cols + g * kg, k, w + g * fg, f, 0.0f,
                     dx + g * fg, f, inputs);
    }
  }
};

/// Calls f(output_pixel, sample, y0, y1, x0, x1) for every output pixel of window G, the window clipped
/// to the input.
template <window_geometry G, class F>
void for_each_window(std::size_t n, F&& f) {
  std::size_t out = 0;
  for (std::size_t s = 0; s < n; ++s)
    for (std::size_t oy = 0; oy < G.oh; ++oy)
      for (std::size_t ox = 0; ox < G.ow; ++ox, ++out) {
        const auto y0 = std::max<std::ptrdiff_t>(0, std::ptrdiff_t(oy * G.sh) - std::ptrdiff_t(G.pt));
        const auto x0 = std::max<std::ptrdiff_t>(0, std::ptrdiff_t(ox * G.sw) - std::ptrdiff_t(G.pl));
        const auto y1 = std::min<std::ptrdiff_t>(std::ptrdiff_t(G.h), std::ptrdiff_t(oy * G.sh + G.kh) - std::ptrdiff_t(G.pt));
        const auto x1 = std::min<std::ptrdiff_t>(std::ptrdiff_t(G.w), std::ptrdiff_t(ox * G.sw + G.kw) - std::ptrdiff_t(G.pl));
        f(out, s, std::size_t(y0), std::size_t(y1), std::size_t(x0), std::size_t(x1));
      }
}

/// Max pooling keeps, per output value, the index (within its sample) of the input that won; average
/// pooling divides by the window's cells inside the input (TF's rule for 'same' padding).
template <window_geometry G, bool Max>
struct pooling_kernels {
  static void forward(std::size_t n, const float* x, float* y, std::uint32_t* arg) {
    constexpr std::size_t C = G.c;
    for_each_window<G>(n, [&](std::size_t out, std::size_t s, std::size_t y0, std::size_t y1, std::size_t x0,
                              std::size_t x1) {
      for (std::size_t c = 0; c < C; ++c) {
        float acc = Max ? -std::numeric_limits<float>::infinity() : 0.0f;
        std::size_t best = 0;
        for (std::size_t iy = y0; iy < y1; ++iy)
          for (std::size_t ix = x0; ix < x1; ++ix) {
            const std::size_t at = ((s * G.h + iy) * G.w + ix) * C + c;
            if constexpr (Max) {
              if (x[at] > acc || (iy == y0 && ix == x0)) acc = x[at], best = at;
            } else {
              acc += x[at];
            }
          }
        if constexpr (Max) {
          y[out * C + c] = acc;
          arg[out * C + c] = static_cast<std::uint32_t>(best - s * G.in_size());
        } else {
          y[out * C + c] = acc / static_cast<float>((y1 - y0) * (x1 - x0));
        }
      }
    });
  }

  static void backward(std::size_t n, const float* dy, const std::uint32_t* arg, float* dx) {
    constexpr std::size_t C = G.c;
    std::fill(dx, dx + n * G.in_size(), 0.0f);
    for_each_window<G>(n, [&](std::size_t out, std::size_t s, std::size_t y0, std::size_t y1, std::size_t x0,
                              std::size_t x1) {
      for (std::size_t c = 0; c < C; ++c) {
        const float d = dy[out * C + c];
        if constexpr (Max) {
          dx[s * G.in_size() + arg[out * C + c]] += d;
        } else {
          const float share = d / static_cast<float>((y1 - y0) * (x1 - x0));
          for (std::size_t iy = y0; iy < y1; ++iy)
            for (std::size_t ix = x0; ix < x1; ++ix) dx[((s * G.h + iy) * G.w + ix) * C + c] += share;
        }
      }
    });
  }
};

/// Zero padding (window G: kh = kw = 1): y (oh x ow x c) is zero but for the input, placed at row pt,
/// column pl; backward crops the input's place out of dy.
template <window_geometry G>
struct zero_padding2d_kernels {
  static void forward(std::size_t n, const float* x, float* y) {
    std::fill_n(y, n * G.out_size(), 0.0f);
    for (std::size_t s = 0; s < n; ++s)
      for (std::size_t iy = 0; iy < G.h; ++iy) std::copy_n(x + (s * G.h + iy) * G.w * G.c, G.w * G.c, y + row(s, iy));
  }
  static void backward(std::size_t n, const float* dy, float* dx) {
    for (std::size_t s = 0; s < n; ++s)
      for (std::size_t iy = 0; iy < G.h; ++iy) std::copy_n(dy + row(s, iy), G.w * G.c, dx + (s * G.h + iy) * G.w * G.c);
  }
  /// Where input row iy of sample s starts in the output.
  static constexpr std::size_t row(std::size_t s, std::size_t iy) { return ((s * G.oh + iy + G.pt) * G.ow + G.pl) * G.c; }
};

/// Nearest-neighbour up-sampling (window G: the factors kh x kw, oh = h kh, ow = w kw, f = c): every input
/// value fills its kh x kw block of y; backward sums each block of dy, row by row, into its input value.
template <window_geometry G>
struct up_sampling2d_kernels {
  static void forward(std::size_t n, const float* x, float* y) {
    for (std::size_t s = 0; s < n; ++s)
      for (std::size_t oy = 0; oy < G.oh; ++oy) {
        const float* in = x + (s * G.h + oy / G.kh) * G.w * G.c;
        float* out = y + (s * G.oh + oy) * G.ow * G.c;
        for (std::size_t ox = 0; ox < G.ow; ++ox) std::copy_n(in + ox / G.kw * G.c, G.c, out + ox * G.c);
      }
  }
  static void backward(std::size_t n, const float* dy, float* dx) {
    for (std::size_t s = 0; s < n; ++s)
      for (std::size_t iy = 0; iy < G.h; ++iy)
        for (std::size_t ix = 0; ix < G.w; ++ix) {
          float* d = dx + ((s * G.h + iy) * G.w + ix) * G.c;
          std::fill_n(d, G.c, 0.0f);
          for (std::size_t ky = 0; ky < G.kh; ++ky)
            for (std::size_t kx = 0; kx < G.kw; ++kx) {
              const float* g = dy + ((s * G.oh + iy * G.kh + ky) * G.ow + ix * G.kw + kx) * G.c;
              for (std::size_t ch = 0; ch < G.c; ++ch) d[ch] += g[ch];
            }
        }
  }
};

/// Depthwise convolution, window G with f = c m outputs (m per channel), zero padding:
/// y[s][oy][ox][ch m + j] = b[ch m + j] (0 without b) + the sum over the window's taps inside the input,
/// row by row, of x[s][iy][ix][ch] w[ky][kx][ch][j]. Backward: gw (the kernel's gradient, w's layout;
/// summed over samples and pixels in order) and, when not null, dx.
template <window_geometry G>
struct depthwise_conv2d_kernels {
  static constexpr std::size_t m = G.f / G.c;
  static constexpr std::size_t npos = std::size_t(-1);

  static void forward(std::size_t n, const float* x, const float* w, const float* b, float* y) {
    for_each_tap(n, [&](std::size_t out, std::size_t in, std::size_t tap, bool first) {
      for (std::size_t ch = 0; ch < G.c; ++ch)
        for (std::size_t j = 0; j < m; ++j) {
          float& o = y[out + ch * m + j];
          if (first) o = b ? b[ch * m + j] : 0.0f;
          if (in != npos) o += x[in + ch] * w[tap + ch * m + j];
        }
    });
  }
  static void backward(std::size_t n, const float* x, const float* w, const float* dy, float* gw, float* dx) {
    std::fill_n(gw, G.kh * G.kw * G.f, 0.0f);
    if (dx) std::fill_n(dx, n * G.in_size(), 0.0f);
    for_each_tap(n, [&](std::size_t out, std::size_t in, std::size_t tap, bool) {
      if (in == npos) return;
      for (std::size_t ch = 0; ch < G.c; ++ch)
        for (std::size_t j = 0; j < m; ++j) {
          const float d = dy[out + ch * m + j];
          gw[tap + ch * m + j] += x[in + ch] * d;
          if (dx) dx[in + ch] += w[tap + ch * m + j] * d;
        }
    });
  }
  /// Calls f(output pixel offset, input pixel offset or npos (padding), tap offset in w, first tap) for
  /// every tap of every output pixel, taps in the kernel's row-major order.
  template <class F>
  static void for_each_tap(std::size_t n, F&& f) {
    for (std::size_t s = 0; s < n; ++s)
      for (std::size_t oy = 0; oy < G.oh; ++oy)
        for (std::size_t ox = 0; ox < G.ow; ++ox) {
          const std::size_t out = ((s * G.oh + oy) * G.ow + ox) * G.f;
          for (std::size_t ky = 0; ky < G.kh; ++ky)
            for (std::size_t kx = 0; kx < G.kw; ++kx) {
              const std::ptrdiff_t iy = std::ptrdiff_t(oy * G.sh + ky) - std::ptrdiff_t(G.pt);
              const std::ptrdiff_t ix = std::ptrdiff_t(ox * G.sw + kx) - std::ptrdiff_t(G.pl);
              const bool inside = iy >= 0 && ix >= 0 && iy < std::ptrdiff_t(G.h) && ix < std::ptrdiff_t(G.w);
              f(out, inside ? ((s * G.h + std::size_t(iy)) * G.w + std::size_t(ix)) * G.c : npos,
                (ky * G.kw + kx) * G.f, ky == 0 && kx == 0);
            }
        }
  }
};

/// The cpu backend's window family (`window_kernels`).
/// Which operands a cpu backend value's GEMMs, and the convolutions made of them, multiply: float32 as
/// given, or (`dtype::bfloat16`) rounded to bfloat16 on the CPU's bfloat16 dot products where it has
/// them (cpu/bf16_gemm.hpp; float32 elsewhere). `cpu::with_gemm_dtype` sets it.
class cpu_gemm_dtype {
 public:
  dtype gemm_dtype() const { return gemm_dtype_; }

 protected:
  dtype gemm_dtype_ = dtype::float32;
};

struct cpu_window_kernels : cpu_gemm_dtype {
  /// Floats of workspace a conv2d of window G needs for a batch of n: forward's (what it leaves there,
  /// backward reads: the im2col rows) and backward's own (scratch; larger with an input gradient).
  template <window_geometry G>
  std::size_t conv2d_workspace(std::size_t n) const {
    return detail::conv2d_kernels_of<G, activation_kind::linear>::workspace(n);
  }
  template <window_geometry G>
  std::size_t conv2d_backward_workspace(std::size_t n, bool input_gradient) const {
    return detail::conv2d_kernels_of<G, activation_kind::linear>::backward_workspace(n, input_gradient);
  }
  /// y = A(conv(x, w) + b) for n samples (no bias when `b` is null); z = the pre-activation when A needs it
  /// (else null).
  template <window_geometry G, activation_kind A>
  void conv2d_forward(std::size_t n, const float* x, const float* w, const float* b, float* y, float* z,
                      float* work) const {
    detail::conv2d_kernels_of<G, A>::forward(n, x, w, b, y, z, work, gemm_dtype_);
  }
  /// From d loss / d y (`dy`, overwritten): the kernel's gradient into `gw`, the bias' into `gb` (unless
  /// null: a convolution without bias) and, when `dx` is not null, d loss / d x. `work` is what the last
  /// forward left; `scratch` is backward's workspace.
  template <window_geometry G, activation_kind A>
  void conv2d_backward(std::size_t n, const float* z, const float* y, float* dy, const float* w, const float* work,
                       float* scratch, float* gw, float* gb, float* dx) const {
    detail::conv2d_kernels_of<G, A>::backward(n, z, y, dy, w, work, scratch, gw, gb, dx, gemm_dtype_);
  }
  template <window_geometry G>
  std::size_t conv2d_transpose_workspace(std::size_t n) const {
    return detail::conv2d_transpose_kernels<G, activation_kind::linear>::workspace(n);
  }
  /// y = A(conv2d_transpose(x, w) + b): the adjoint of conv2d over G (x of G's output shape, y of its
  /// input shape; no bias when `b` is null); z = the pre-activation when A needs it.
  template <window_geometry G, activation_kind A>
  void conv2d_transpose_forward(std::size_t n, const float* x, const float* w, const float* b, float* y, float* z,
                                float* work) const {
    detail::conv2d_transpose_kernels<G, A>::forward(n, x, w, b, y, z, work, gemm_dtype_);
  }
  /// From d loss / d y (`dy`, overwritten) and the input x: the kernel's gradient into `gw`, the bias'
  /// into `gb` (unless null) and, when `dx` is not null, d loss / d x.
  template <window_geometry G, activation_kind A>
  void conv2d_transpose_backward(std::size_t n, const float* x, const float* z, const float* y, float* dy,
                                 const float* w, float* work, float* gw, float* gb, float* dx) const {
    detail::conv2d_transpose_kernels<G, A>::backward(n, x, z, y, dy, w, work, gw, gb, dx, gemm_dtype_);
  }
  template <window_geometry G>
  void max_pooling2d_forward(std::size_t n, const float* x, float* y, std::uint32_t* argmax) const {
    detail::pooling_kernels<G, true>::forward(n, x, y, argmax);
  }
  template <window_geometry G>
  void max_pooling2d_backward(std::size_t n, const float* dy, const std::uint32_t* argmax, float* dx) const {
    detail::pooling_kernels<G, true>::backward(n, dy, argmax, dx);
  }
  template <window_geometry G>
  void average_pooling2d_forward(std::size_t n, const float* x, float* y) const {
    detail::pooling_kernels<G, false>::forward(n, x, y, nullptr);
  }
  template <window_geometry G>
  void average_pooling2d_backward(std::size_t n, const float* dy, float* dx) const {
    detail::pooling_kernels<G, false>::backward(n, dy, nullptr, dx);
  }

  template <window_geometry G>
  void zero_padding2d_forward(std::size_t n, const float* x, float* y) const {
    detail::zero_padding2d_kernels<G>::forward(n, x, y);
  }
  template <window_geometry G>
  void zero_padding2d_backward(std::size_t n, const float* dy, float* dx) const {
    detail::zero_padding2d_kernels<G>::backward(n, dy, dx);
  }
  template <window_geometry G>
  void up_sampling2d_forward(std::size_t n, const float* x, float* y) const {
    detail::up_sampling2d_kernels<G>::forward(n, x, y);
  }
  template <window_geometry G>
  void up_sampling2d_backward(std::size_t n, const float* dy, float* dx) const {
    detail::up_sampling2d_kernels<G>::backward(n, dy, dx);
  }
  template <window_geometry G>
  void depthwise_conv2d_forward(std::size_t n, const float* x, const float* w, const float* b, float* y) const {
    detail::depthwise_conv2d_kernels<G>::forward(n, x, w, b, y);
  }
  template <window_geometry G>
  void depthwise_conv2d_backward(std::size_t n, const float* x, const float* w, const float* dy, float* gw,
                                 float* dx) const {
    detail::depthwise_conv2d_kernels<G>::backward(n, x, w, dy, gw, dx);
  }
};

}  // namespace dtrain::detail
