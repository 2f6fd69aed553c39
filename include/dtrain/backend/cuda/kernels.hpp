#pragma once
/// \file
/// The CUDA backend's kernels, written once and used twice. `DTRAIN_CUDA_KERNELS(...)` turns its
/// argument into (1) `kernels::source`, the CUDA C++ text that NVRTC compiles at run time (with the
/// preamble below), and (2) the same functions compiled for the host in `kernels::host`, which the
/// emulated runtime (cuda/emulator.hpp) runs thread by thread and from whose signatures every launch
/// takes its argument types. So a kernel's indexing is tested on any machine, and a launch can never
/// pass an argument of the wrong type or in the wrong place.
///
/// Rules the source keeps so that a sequential emulation is exact: no shared memory, no
/// `__syncthreads`, no atomics, no warp intrinsics: each thread writes its own outputs. Reductions run
/// as trees of fixed shape (each level's threads add a few dozen values of the level below in a fixed
/// order into scratch), so every result is deterministic: the same bits on every run and graph replay.
/// Sizes are `long long`; a 2-D window is the `window` struct (the host's `window_geometry` as ints).

#include <cmath>
#include <cstdint>

namespace dtrain::cuda_kernels {

/// What NVRTC sees before the kernels: the macros the host copy defines its own way.
inline constexpr const char* preamble =
    "#define DTRAIN_KERNEL extern \"C\" __global__\n"
    "#define DTRAIN_DEVICE __device__ __forceinline__\n";

/// The thread indices of the emulation (the emulated runtime sets them before each thread runs).
struct dim3_ {
  unsigned int x = 0, y = 0, z = 0;
};
inline thread_local dim3_ threadIdx, blockIdx, blockDim, gridDim;

/// `__umulhi`: the high 32 bits of a 32 x 32 bit product (a CUDA intrinsic).
inline unsigned int host_umulhi(unsigned int a, unsigned int b) {
  return static_cast<unsigned int>((static_cast<unsigned long long>(a) * b) >> 32);
}

}  // namespace dtrain::cuda_kernels

#define DTRAIN_CUDA_KERNELS(...)                                                         \
  namespace dtrain::cuda_kernels {                                                       \
  inline constexpr const char* source = #__VA_ARGS__;                                     \
  namespace host {                                                                       \
  using ::dtrain::cuda_kernels::threadIdx, ::dtrain::cuda_kernels::blockIdx;             \
  using ::dtrain::cuda_kernels::blockDim, ::dtrain::cuda_kernels::gridDim;               \
  inline unsigned int __umulhi(unsigned int a, unsigned int b) { return host_umulhi(a, b); } \
  __VA_ARGS__                                                                            \
  }                                                                                      \
  }

#define DTRAIN_KERNEL inline
#define DTRAIN_DEVICE inline

// clang-format off
DTRAIN_CUDA_KERNELS(

struct window { int h, w, c, kh, kw, sh, sw, pt, pl, oh, ow, f; };

DTRAIN_DEVICE long long first_index() { return (long long)blockIdx.x * blockDim.x + threadIdx.x; }
DTRAIN_DEVICE long long grid_stride() { return (long long)gridDim.x * blockDim.x; }
// a / b and a % b for non-negative a, b: in 32 bits where both fit (a 64-bit division is a long
// instruction sequence on a GPU; index arithmetic is most of a gather's work).
DTRAIN_DEVICE long long quot(long long a, long long b) {
  return (a | b) < 2147483648LL ? (long long)((unsigned int)a / (unsigned int)b) : a / b;
}
DTRAIN_DEVICE long long rem(long long a, long long b) {
  return (a | b) < 2147483648LL ? (long long)((unsigned int)a % (unsigned int)b) : a % b;
}

// ---- BLAS-like -----------------------------------------------------------------------------------------
DTRAIN_KERNEL void dtrain_fill(long long n, float v, float* x) {
  for (long long i = first_index(); i < n; i += grid_stride()) x[i] = v;
}
DTRAIN_KERNEL void dtrain_copy(long long n, const float* x, float* y) {
  for (long long i = first_index(); i < n; i += grid_stride()) y[i] = x[i];
}
DTRAIN_KERNEL void dtrain_copy_columns(long long rows, long long cols, const float* x, long long ldx, float* y,
                                      long long ldy) {
  for (long long i = first_index(); i < rows * cols; i += grid_stride()) {
    const long long r = quot(i, cols), j = i - r * cols;
    y[r * ldy + j] = x[r * ldx + j];
  }
}
DTRAIN_KERNEL void dtrain_axpy(long long n, float a, const float* x, float* y) {
  for (long long i = first_index(); i < n; i += grid_stride()) y[i] += a * x[i];
}
DTRAIN_KERNEL void dtrain_multiply(long long n, const float* x, const float* y, float* z) {
  for (long long i = first_index(); i < n; i += grid_stride()) z[i] = x[i] * y[i];
}
DTRAIN_KERNEL void dtrain_broadcast_rows(long long rows, long long cols, const float* x, float* y) {
  for (long long i = first_index(); i < rows * cols; i += grid_stride()) y[i] = x[rem(i, cols)];
}
// Reductions run as a tree of these levels (the host picks `parts` so that no thread adds more than a
// few dozen values: a long chain of dependent loads is what a GPU does slowest).
// v[i] + v[i + stride] + ... (count values, squared when `square`) in the accumulator type S, added in
// order with four loads in flight.
template <class S, class T>
DTRAIN_DEVICE S strided_sum(const T* v, long long i, long long count, long long stride, int square) {
  S s = 0;
  long long k = 0;
  for (; k + 4 <= count; k += 4) {
    const S a = v[i + k * stride], b = v[i + (k + 1) * stride], c = v[i + (k + 2) * stride],
            d = v[i + (k + 3) * stride];
    if (square) { s += a * a; s += b * b; s += c * c; s += d * d; }
    else { s += a; s += b; s += c; s += d; }
  }
  for (; k < count; ++k) {
    const S a = v[i + k * stride];
    s += square ? a * a : a;
  }
  return s;
}
// Column sums, one level: part[ch * cols + j] = the sum of x[r][j] over the rows r = ch, ch + chunks, ...
DTRAIN_KERNEL void dtrain_column_partials(long long rows, long long cols, long long chunks, const float* x,
                                          float* part) {
  for (long long t = first_index(); t < chunks * cols; t += grid_stride()) {
    const long long ch = quot(t, cols);
    part[t] = strided_sum<float>(x, t, quot(rows - ch + chunks - 1, chunks), chunks * cols, 0);
  }
}
// Sum, the first level (in double): part[t] = the sum of x[t], x[t + parts], ... (squared when `square`).
DTRAIN_KERNEL void dtrain_sum_partials(long long n, long long parts, int square, const float* x, double* part) {
  for (long long t = first_index(); t < parts; t += grid_stride())
    part[t] = strided_sum<double>(x, t, quot(n - t + parts - 1, parts), parts, square);
}
// The next levels: part[t] = the sum of x[t], x[t + parts], ... (doubles).
DTRAIN_KERNEL void dtrain_sum_doubles(long long n, long long parts, const double* x, double* part) {
  for (long long t = first_index(); t < parts; t += grid_stride())
    part[t] = strided_sum<double>(x, t, quot(n - t + parts - 1, parts), parts, 0);
}
// The last level, one thread: out[0] = float(sum / divisor); with `accumulate`, out[0] += float(factor * sum).
DTRAIN_KERNEL void dtrain_sum_finish(long long parts, double divisor, float factor, int accumulate,
                                     const double* part, float* out) {
  if (first_index() != 0) return;
  double s = 0.0;
  for (long long t = 0; t < parts; ++t) s += part[t];
  if (accumulate) out[0] += (float)(factor * s);
  else out[0] = (float)(s / divisor);
}

// ---- activations (kind: 0 linear, 1 relu, 2 sigmoid, 3 tanh, 4 softmax, 5 gelu) -------------------------
DTRAIN_DEVICE float activate(int kind, float x) {
  if (kind == 1) return x > 0.0f ? x : 0.0f;
  if (kind == 2) return 1.0f / (1.0f + expf(-x));
  if (kind == 3) return tanhf(x);
  if (kind == 5) return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  return x;
}
DTRAIN_KERNEL void dtrain_activation_forward(long long rows, long long cols, int kind, float* v) {
  if (kind == 4) {  // softmax along each row, the row maximum subtracted first
    for (long long r = first_index(); r < rows; r += grid_stride()) {
      float* row = v + r * cols;
      float m = row[0];
      for (long long j = 1; j < cols; ++j) m = row[j] > m ? row[j] : m;
      float s = 0.0f;
      for (long long j = 0; j < cols; ++j) s += (row[j] = expf(row[j] - m));
      const float inv = 1.0f / s;
      for (long long j = 0; j < cols; ++j) row[j] *= inv;
    }
    return;
  }
  for (long long i = first_index(); i < rows * cols; i += grid_stride()) v[i] = activate(kind, v[i]);
}
// y = activation(y + b[column]) for the elementwise kinds (not softmax); z = y + b first where z is given
// (the pre-activations, for gelu's backward).
DTRAIN_KERNEL void dtrain_bias_activation(long long rows, long long cols, int kind, const float* b, float* z,
                                          float* y) {
  for (long long i = first_index(); i < rows * cols; i += grid_stride()) {
    const float v = y[i] + b[rem(i, cols)];
    if (z) z[i] = v;
    y[i] = activate(kind, v);
  }
}
// d (d loss / d output, in place) becomes d loss / d input, from the input z (gelu) and the output y.
DTRAIN_KERNEL void dtrain_activation_backward(long long rows, long long cols, int kind, const float* z,
                                              const float* y, float* d) {
  if (kind == 4) {
    for (long long r = first_index(); r < rows; r += grid_stride()) {
      const float* yr = y + r * cols;
      float* dr = d + r * cols;
      float dot = 0.0f;
      for (long long j = 0; j < cols; ++j) dot += dr[j] * yr[j];
      for (long long j = 0; j < cols; ++j) dr[j] = yr[j] * (dr[j] - dot);
    }
    return;
  }
  for (long long i = first_index(); i < rows * cols; i += grid_stride()) {
    if (kind == 1) d[i] = y[i] > 0.0f ? d[i] : 0.0f;
    else if (kind == 2) d[i] *= y[i] * (1.0f - y[i]);
    else if (kind == 3) d[i] *= 1.0f - y[i] * y[i];
    else if (kind == 5) {
      const float x = z[i];
      const float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
      d[i] *= cdf + x * 0.39894228040143268f * expf(-0.5f * x * x);
    }
  }
}

// ---- windows: conv2d as im2col + GEMM, pooling -----------------------------------------------------------
// cols[row][tap] for the n * oh * ow output pixels (rows) and the kh * kw * c taps of each; 0 in padding.
DTRAIN_KERNEL void dtrain_im2col(long long n, window g, const float* x, float* cols) {
  const long long taps = (long long)g.kh * g.kw * g.c, pixels = (long long)g.oh * g.ow;
  for (long long e = first_index(); e < n * pixels * taps; e += grid_stride()) {
    const long long row = quot(e, taps), t = e - row * taps;
    const int ti = (int)t, ky = ti / (g.kw * g.c), kx = ti / g.c % g.kw, ch = ti % g.c;
    const long long s = quot(row, pixels), p = row - s * pixels;
    const int iy = (int)(p / g.ow) * g.sh + ky - g.pt, ix = (int)(p % g.ow) * g.sw + kx - g.pl;
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
// dx[s][iy][ix][ch] = the sum of the column gradients of every tap that read it (a gather: no atomics).
DTRAIN_KERNEL void dtrain_col2im(long long n, window g, const float* dcols, float* dx) {
  const long long taps = (long long)g.kh * g.kw * g.c, pixels = (long long)g.oh * g.ow;
  for (long long e = first_index(); e < n * g.h * g.w * g.c; e += grid_stride()) {
    const long long q = quot(e, g.c), q2 = quot(q, g.w), s = quot(q2, g.h);
    const int ch = (int)(e - q * g.c), ix = (int)(q - q2 * g.w), iy = (int)(q2 - s * g.h);
    float acc = 0.0f;
    for (int oy = first_window(iy, g.kh, g.sh, g.pt); oy <= last_window(iy, g.sh, g.pt, g.oh); ++oy)
      for (int ox = first_window(ix, g.kw, g.sw, g.pl); ox <= last_window(ix, g.sw, g.pl, g.ow); ++ox) {
        const int ky = iy + g.pt - oy * g.sh, kx = ix + g.pl - ox * g.sw;
        acc += dcols[(s * pixels + (long long)oy * g.ow + ox) * taps + ((long long)ky * g.kw + kx) * g.c + ch];
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

// ---- leaky ReLU -----------------------------------------------------------------------------------------
DTRAIN_KERNEL void dtrain_leaky_relu_forward(long long n, float slope, const float* x, float* y) {
  for (long long i = first_index(); i < n; i += grid_stride()) y[i] = x[i] > 0.0f ? x[i] : slope * x[i];
}
DTRAIN_KERNEL void dtrain_leaky_relu_backward(long long n, float slope, const float* x, const float* dy, float* dx) {
  for (long long i = first_index(); i < n; i += grid_stride()) dx[i] = x[i] > 0.0f ? dy[i] : slope * dy[i];
}

// ---- layer normalization: one thread per row, the cpu backend's sums in its order -------------------------
DTRAIN_KERNEL void dtrain_layer_norm_forward(long long rows, long long cols, float epsilon, const float* x,
                                             const float* gamma, const float* beta, float* y, float* xhat,
                                             float* inv_std) {
  for (long long r = first_index(); r < rows; r += grid_stride()) {
    const float* xr = x + r * cols;
    float mean = 0.0f, var = 0.0f;
    for (long long j = 0; j < cols; ++j) mean += xr[j];
    mean /= (float)cols;
    for (long long j = 0; j < cols; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    const float inv = 1.0f / sqrtf(var / (float)cols + epsilon);
    inv_std[r] = inv;
    for (long long j = 0; j < cols; ++j) {
      const float h = (xr[j] - mean) * inv;
      xhat[r * cols + j] = h;
      y[r * cols + j] = h * gamma[j] + beta[j];
    }
  }
}
DTRAIN_KERNEL void dtrain_layer_norm_backward(long long rows, long long cols, const float* xhat, const float* inv_std,
                                              const float* gamma, const float* dy, float* dx) {
  for (long long r = first_index(); r < rows; r += grid_stride()) {
    const float *xr = xhat + r * cols, *dr = dy + r * cols;
    float mg = 0.0f, mgx = 0.0f;
    for (long long j = 0; j < cols; ++j) { mg += dr[j] * gamma[j]; mgx += dr[j] * gamma[j] * xr[j]; }
    mg /= (float)cols;
    mgx /= (float)cols;
    for (long long j = 0; j < cols; ++j) dx[r * cols + j] = inv_std[r] * (dr[j] * gamma[j] - mg - xr[j] * mgx);
  }
}

// ---- batch normalization: element-wise (the batch statistics are column sums) ----------------------------
DTRAIN_KERNEL void dtrain_squared_deviations(long long rows, long long cols, const float* x, const float* mean,
                                             float* out) {
  for (long long e = first_index(); e < rows * cols; e += grid_stride()) {
    const float d = x[e] - mean[rem(e, cols)];
    out[e] = d * d;
  }
}
DTRAIN_KERNEL void dtrain_moving_average(long long n, float momentum, const float* value, float* average) {
  for (long long i = first_index(); i < n; i += grid_stride())
    average[i] = average[i] * momentum + value[i] * (1.0f - momentum);
}
DTRAIN_KERNEL void dtrain_batch_norm_forward(long long rows, long long cols, float epsilon, const float* x,
                                             const float* mean, const float* variance, const float* gamma,
                                             const float* beta, float* y, float* xhat, float* inv_std) {
  for (long long e = first_index(); e < rows * cols; e += grid_stride()) {
    const long long j = rem(e, cols);
    const float inv = 1.0f / sqrtf(variance[j] + epsilon);
    const float h = (x[e] - mean[j]) * inv;
    if (xhat) xhat[e] = h;
    if (e < cols) inv_std[j] = inv;
    y[e] = h * gamma[j] + beta[j];
  }
}
DTRAIN_KERNEL void dtrain_batch_norm_backward(long long rows, long long cols, float inv_count, const float* xhat,
                                              const float* inv_std, const float* gamma, const float* sums,
                                              const float* dy, float* dx) {
  for (long long e = first_index(); e < rows * cols; e += grid_stride()) {
    const long long j = rem(e, cols);
    const float centred = sums ? dy[e] - inv_count * (sums[cols + j] + xhat[e] * sums[j]) : dy[e];
    dx[e] = gamma[j] * inv_std[j] * centred;
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

// ---- embedding: rows of a table by index; the table's gradient by index in a host-sorted order ------------
DTRAIN_KERNEL void dtrain_embedding_forward(long long rows, long long dim, long long vocab, const float* x,
                                            const float* table, float* y) {
  for (long long e = first_index(); e < rows * dim; e += grid_stride()) {
    const long long r = quot(e, dim), d = e - r * dim;
    const float v = x[r];
    y[e] = v >= 0.0f && v < (float)vocab ? table[(long long)v * dim + d] : 0.0f;
  }
}
DTRAIN_KERNEL void dtrain_embedding_backward(long long vocab, long long dim, const unsigned int* order,
                                             const unsigned int* starts, const float* dy, float* grad) {
  for (long long e = first_index(); e < vocab * dim; e += grid_stride()) {
    const long long v = quot(e, dim), d = e - v * dim;
    float s = 0.0f;
    for (unsigned int k = starts[v]; k < starts[v + 1]; ++k) s += dy[(long long)order[k] * dim + d];
    grad[e] = s;
  }
}

// ---- dropout: the mask from Philox4x32-10, as core/random.hpp's counter_uniform4 ------------------------
DTRAIN_KERNEL void dtrain_dropout(long long n, float rate, unsigned long long key, const float* x, float* y,
                                  float* mask) {
  const float keep = 1.0f / (1.0f - rate);
  for (long long b = first_index(); b * 4 < n; b += grid_stride()) {
    unsigned int c0 = (unsigned int)b, c1 = (unsigned int)((unsigned long long)b >> 32), c2 = 0u, c3 = 0u;
    unsigned int k0 = (unsigned int)key, k1 = (unsigned int)(key >> 32);
    for (int round = 0; round < 10; ++round) {
      const unsigned int h0 = __umulhi(0xD2511F53u, c0), l0 = 0xD2511F53u * c0;
      const unsigned int h1 = __umulhi(0xCD9E8D57u, c2), l1 = 0xCD9E8D57u * c2;
      c0 = h1 ^ c1 ^ k0; c1 = l1; c2 = h0 ^ c3 ^ k1; c3 = l0;
      k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
    }
    const unsigned int words[4] = {c0, c1, c2, c3};
    for (int j = 0; j < 4 && b * 4 + j < n; ++j) {
      const long long i = b * 4 + j;
      const float u = (float)(words[j] >> 8) * 5.9604644775390625e-8f;  // 2^-24
      mask[i] = u >= rate ? keep : 0.0f;
      y[i] = x[i] * mask[i];
    }
  }
}

// ---- losses: one thread per row (kind: 0 sparse categorical, 1 categorical, 2 binary crossentropy,
// 3 mean squared error); `d` may be null -----------------------------------------------------------------
DTRAIN_KERNEL void dtrain_loss(long long rows, long long c, int kind, int from_logits, float scale, float eps,
                               const float* t, const float* p, float* out, float* d) {
  for (long long r = first_index(); r < rows; r += grid_stride()) {
    const float* z = p + r * c;
    float* g = d ? d + r * c : (float*)0;
    if (kind == 0 || kind == 1) {
      const float* y = kind == 1 ? t + r * c : t;
      const long long label = kind == 0 ? (long long)t[r] : 0;
      if (from_logits) {
        float m = z[0];
        for (long long j = 1; j < c; ++j) m = z[j] > m ? z[j] : m;
        double s = 0.0;
        for (long long j = 0; j < c; ++j) s += exp((double)(z[j] - m));
        const double lse = m + log(s);
        double l = 0.0, ysum = 0.0;
        if (kind == 0) l = lse - z[label], ysum = 1.0;
        else for (long long j = 0; j < c; ++j) { l += y[j] * (lse - z[j]); ysum += y[j]; }
        out[r] = (float)l;
        if (g)
          for (long long j = 0; j < c; ++j) {
            const double yj = kind == 0 ? (j == label ? 1.0 : 0.0) : (double)y[j];
            g[j] = scale * (float)(ysum * exp((double)(z[j] - m)) / s - yj);
          }
      } else if (kind == 0) {
        const float q = z[label];
        const float qc = q < eps ? eps : (q > 1.0f - eps ? 1.0f - eps : q);
        out[r] = -logf(qc);
        if (g) {
          for (long long j = 0; j < c; ++j) g[j] = 0.0f;
          if (q == qc) g[label] = -scale / q;
        }
      } else {  // probabilities, normalised to sum to one first (as Keras)
        double s = 0.0, l = 0.0, dot = 0.0;
        for (long long j = 0; j < c; ++j) s += z[j];
        for (long long j = 0; j < c; ++j) {
          const float q = (float)(z[j] / s);
          const float qc = q < eps ? eps : (q > 1.0f - eps ? 1.0f - eps : q);
          l -= y[j] * logf(qc);
          dot += (q == qc ? -y[j] / q : 0.0f) * (z[j] / s);
        }
        out[r] = (float)l;
        if (g)
          for (long long j = 0; j < c; ++j) {
            const float q = (float)(z[j] / s);
            const float qc = q < eps ? eps : (q > 1.0f - eps ? 1.0f - eps : q);
            g[j] = scale * (float)(((q == qc ? -y[j] / q : 0.0f) - dot) / s);
          }
      }
    } else {  // elementwise losses, a row's loss the mean over its c values
      const float inv_c = 1.0f / (float)c;
      double l = 0.0;
      for (long long j = r * c; j < (r + 1) * c; ++j) {
        const float zj = p[j], y = t[j];
        if (kind == 3) {
          const float e = zj - y;
          l += (double)e * e;
          if (d) d[j] = scale * 2.0f * inv_c * e;
        } else if (from_logits) {
          l += fmaxf(zj, 0.0f) - zj * y + log1pf(expf(-fabsf(zj)));
          if (d) d[j] = scale * inv_c * (1.0f / (1.0f + expf(-zj)) - y);
        } else {
          const float q = zj < eps ? eps : (zj > 1.0f - eps ? 1.0f - eps : zj);
          l -= y * logf(q + eps) + (1.0f - y) * logf(1.0f - q + eps);
          if (d) d[j] = q == zj ? -scale * inv_c * (y / (q + eps) - (1.0f - y) / (1.0f - q + eps)) : 0.0f;
        }
      }
      out[r] = (float)l * inv_c;
    }
  }
}

// ---- metrics: per-row hits (kind: 0 sparse categorical, 1 categorical, 2 binary accuracy), summed after --
DTRAIN_DEVICE long long argmax_row(const float* v, long long n) {
  long long best = 0;
  for (long long j = 1; j < n; ++j) best = v[j] > v[best] ? j : best;
  return best;
}
DTRAIN_KERNEL void dtrain_metric_hits(long long rows, long long c, int kind, float threshold, const float* t,
                                      const float* p, float* hits) {
  for (long long r = first_index(); r < rows; r += grid_stride()) {
    const float* z = p + r * c;
    if (kind == 0) hits[r] = (float)argmax_row(z, c) == t[r] ? 1.0f : 0.0f;
    else if (kind == 1) hits[r] = argmax_row(z, c) == argmax_row(t + r * c, c) ? 1.0f : 0.0f;
    else {
      float h = 0.0f;
      for (long long j = 0; j < c; ++j) h += (z[j] > threshold ? 1.0f : 0.0f) == t[r * c + j] ? 1.0f : 0.0f;
      hits[r] = h;
    }
  }
}

// ---- optimizer steps: one fused pass over parameters, gradients and slots --------------------------------
DTRAIN_KERNEL void dtrain_sgd(long long n, float lr, float mu, int nesterov, const float* g, float* m, float* p) {
  for (long long i = first_index(); i < n; i += grid_stride()) {
    if (mu == 0.0f) {
      p[i] -= lr * g[i];
    } else {
      const float mi = m[i] = mu * m[i] - lr * g[i];
      p[i] += nesterov ? mu * mi - lr * g[i] : mi;
    }
  }
}
DTRAIN_KERNEL void dtrain_adam(long long n, float alpha, float b1, float b2, float eps, float decay, int amsgrad,
                               const float* g, float* m, float* v, float* vh, float* p) {
  for (long long i = first_index(); i < n; i += grid_stride()) {
    const float gi = g[i];
    float mi = m[i], vi = v[i], pi = p[i];
    if (decay != 1.0f) pi = pi * decay;
    mi += (gi - mi) * b1;
    vi += (gi * gi - vi) * b2;
    m[i] = mi;
    v[i] = vi;
    if (amsgrad) {
      vi = vh[i] > vi ? vh[i] : vi;
      vh[i] = vi;
    }
    p[i] = pi - alpha * mi / (sqrtf(vi) + eps);
  }
}
DTRAIN_KERNEL void dtrain_rmsprop(long long n, float lr, float rho, float mu, float eps, int centered,
                                  const float* g, float* vel, float* mom, float* avg, float* p) {
  for (long long i = first_index(); i < n; i += grid_stride()) {
    const float gi = g[i];
    const float vi = vel[i] = rho * vel[i] + (1.0f - rho) * gi * gi;
    float denom = vi;
    if (centered) {
      const float ai = avg[i] = rho * avg[i] + (1.0f - rho) * gi;
      denom -= ai * ai;
    }
    const float inc = lr * gi / sqrtf(denom + eps);
    if (mu > 0.0f) p[i] -= (mom[i] = mu * mom[i] + inc);
    else p[i] -= inc;
  }
}

)
// clang-format on

#undef DTRAIN_KERNEL
#undef DTRAIN_DEVICE

namespace dtrain::cuda_kernels {

/// Every kernel, by name: X(name) for each, in one list (ids, names and host functions come from it).
#define DTRAIN_CUDA_KERNEL_LIST(X)                                                                            \
  X(dtrain_fill) X(dtrain_copy) X(dtrain_copy_columns) X(dtrain_axpy) X(dtrain_multiply)                      \
  X(dtrain_broadcast_rows) X(dtrain_column_partials) X(dtrain_sum_partials) X(dtrain_sum_doubles)             \
  X(dtrain_sum_finish) X(dtrain_activation_forward) X(dtrain_bias_activation)                                 \
  X(dtrain_activation_backward) X(dtrain_im2col) X(dtrain_col2im) X(dtrain_pool_forward)                      \
  X(dtrain_pool_backward) X(dtrain_zero_pad_forward) X(dtrain_zero_pad_backward)                              \
  X(dtrain_leaky_relu_forward) X(dtrain_leaky_relu_backward) X(dtrain_layer_norm_forward)                     \
  X(dtrain_layer_norm_backward) X(dtrain_squared_deviations) X(dtrain_moving_average)                         \
  X(dtrain_batch_norm_forward) X(dtrain_batch_norm_backward) X(dtrain_embedding_forward)                      \
  X(dtrain_embedding_backward) X(dtrain_depthwise_forward) X(dtrain_depthwise_kernel_grad)                    \
  X(dtrain_depthwise_input_grad) X(dtrain_dropout) X(dtrain_loss) X(dtrain_metric_hits) X(dtrain_sgd)         \
  X(dtrain_adam) X(dtrain_rmsprop)

enum class kernel : int {
#define DTRAIN_CUDA_ENUM_(k) k,
  DTRAIN_CUDA_KERNEL_LIST(DTRAIN_CUDA_ENUM_)
#undef DTRAIN_CUDA_ENUM_
  count_
};
inline constexpr int kernel_count = static_cast<int>(kernel::count_);

inline constexpr const char* kernel_names[] = {
#define DTRAIN_CUDA_NAME_(k) #k,
    DTRAIN_CUDA_KERNEL_LIST(DTRAIN_CUDA_NAME_)
#undef DTRAIN_CUDA_NAME_
};

/// The host copy of kernel K (its signature is every launch's argument list).
template <kernel K>
inline constexpr auto host_function = nullptr;
#define DTRAIN_CUDA_HOST_(k) \
  template <>                \
  inline constexpr auto host_function<kernel::k> = &host::k;
DTRAIN_CUDA_KERNEL_LIST(DTRAIN_CUDA_HOST_)
#undef DTRAIN_CUDA_HOST_

using window = host::window;

}  // namespace dtrain::cuda_kernels
