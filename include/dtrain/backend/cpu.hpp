#pragma once
/// \file
/// `cpu`: the host backend. Its memory is host memory (pointers are plain pointers), GEMMs go to BLAS
/// through dtrain's plans (cpu/gemm.hpp), every other kernel is a loop of its own, and the large ones
/// (GEMM, conv2d, optimizer steps) are split over dtrain's thread budget (core/threads.hpp). Kernels run
/// on the caller's thread and are done when they return. The thread split never changes a result:
/// every split computes the same sums in the same order (for a GEMM split into blocks of C, as far as the
/// BLAS computes an element the same way in any block: OpenBLAS' AVX-512 kernels do, its Zen kernels
/// round differently by block).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "dtrain/backend/backend.hpp"
#include "dtrain/backend/cpu/activations.hpp"
#include "dtrain/backend/cpu/gemm.hpp"
#include "dtrain/backend/cpu/losses.hpp"
#include "dtrain/backend/cpu/updates.hpp"
#include "dtrain/backend/cpu/window.hpp"
#include "dtrain/core/random.hpp"
#include "dtrain/core/tensor.hpp"

namespace dtrain {

struct cpu {
  static constexpr const char* name = "cpu";
  static constexpr device_kind device = device_kind::cpu;

  template <class T>
  using pointer = T*;

  /// Host memory, uninitialised when allocated (pages a kernel never writes cost nothing).
  template <class T>
  class buffer {
   public:
    using value_type = T;
    buffer() = default;
    explicit buffer(std::size_t n) : data_(n ? new T[n] : nullptr), size_(n) {}
    T* data() const { return data_.get(); }
    std::size_t size() const { return size_; }

   private:
    std::unique_ptr<T[]> data_;
    std::size_t size_ = 0;
  };

  template <class T>
  buffer<T> allocate(std::size_t n) const {
    return buffer<T>(n);
  }
  template <class T>
  void upload(std::size_t n, const T* host, T* p) const {
    if (n) std::memcpy(p, host, n * sizeof(T));
  }
  template <class T>
  void download(std::size_t n, const T* p, T* host) const {
    if (n) std::memcpy(host, p, n * sizeof(T));
  }
  void synchronize() const {}

  // ---- BLAS-like ---------------------------------------------------------------------------------------
  void fill(std::size_t n, float value, float* x) const { std::fill_n(x, n, value); }
  void copy(std::size_t n, const float* x, float* y) const {
    if (n) std::memcpy(y, x, n * sizeof(float));
  }
  /// y[r][j] = x[r][j] for r < rows, j < cols, rows ldx and ldy floats apart.
  void copy_columns(std::size_t rows, std::size_t cols, const float* x, std::size_t ldx, float* y,
                    std::size_t ldy) const {
    for (std::size_t r = 0; r < rows; ++r) copy(cols, x + r * ldx, y + r * ldy);
  }
  /// y += alpha x
  void axpy(std::size_t n, float alpha, const float* x, float* y) const {
    for (std::size_t i = 0; i < n; ++i) y[i] += alpha * x[i];
  }
  /// z = x * y, element by element (z may be x or y)
  void multiply(std::size_t n, const float* x, const float* y, float* z) const {
    for (std::size_t i = 0; i < n; ++i) z[i] = x[i] * y[i];
  }
  /// Row-major C = alpha op(A) op(B) + beta C with op(A) m x k and op(B) k x n (cblas_sgemm's meaning).
  void gemm(transpose ta, transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
            std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc) const {
    detail::planned_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  /// Every row of y (rows x cols) = x (cols).
  void broadcast_rows(std::size_t rows, std::size_t cols, const float* x, float* y) const {
    for (std::size_t r = 0; r < rows; ++r) std::memcpy(y + r * cols, x, cols * sizeof(float));
  }
  /// y (cols) = the sum of the rows of x (rows x cols), row after row in float.
  void column_sums(std::size_t rows, std::size_t cols, const float* x, float* y) const {
    std::fill_n(y, cols, 0.0f);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t j = 0; j < cols; ++j) y[j] += x[r * cols + j];
  }
  /// out[0] = the sum of x, accumulated in double.
  void sum(std::size_t n, const float* x, float* out) const {
    double s = 0.0;
    for (std::size_t i = 0; i < n; ++i) s += x[i];
    *out = static_cast<float>(s);
  }

  // ---- layers ------------------------------------------------------------------------------------------
  template <activation_kind A>
  void activation_forward(std::size_t rows, std::size_t cols, float* v) const {
    detail::activation_forward<A>(rows, cols, v);
  }
  template <activation_kind A>
  void activation_backward(std::size_t rows, std::size_t cols, const float* z, const float* y, float* d) const {
    detail::activation_backward<A>(rows, cols, z, y, d);
  }

  /// Floats of workspace a conv2d of window G needs for a batch of n: forward's (what it leaves there,
  /// backward reads: the im2col rows) and backward's own (scratch; larger with an input gradient).
  template <window_geometry G>
  std::size_t conv2d_workspace(std::size_t n) const {
    return detail::conv2d_kernels<G, activation_kind::linear>::workspace(n);
  }
  template <window_geometry G>
  std::size_t conv2d_backward_workspace(std::size_t n, bool input_gradient) const {
    return detail::conv2d_kernels<G, activation_kind::linear>::backward_workspace(n, input_gradient);
  }
  /// y = A(conv(x, w) + b) for n samples; z = the pre-activation when A needs it (else null).
  template <window_geometry G, activation_kind A>
  void conv2d_forward(std::size_t n, const float* x, const float* w, const float* b, float* y, float* z,
                      float* work) const {
    detail::conv2d_kernels<G, A>::forward(n, x, w, b, y, z, work);
  }
  /// From d loss / d y (`dy`, overwritten): the kernel and bias gradients into `g` and, when `dx` is not
  /// null, d loss / d x. `work` is what the last forward left; `scratch` is backward's workspace.
  template <window_geometry G, activation_kind A>
  void conv2d_backward(std::size_t n, const float* z, const float* y, float* dy, const float* w, const float* work,
                       float* scratch, float* g, float* dx) const {
    detail::conv2d_kernels<G, A>::backward(n, z, y, dy, w, work, scratch, g, dx);
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

  /// Zero padding (window G: kh = kw = 1): y (oh x ow x c) is zero but for the input, placed at row pt,
  /// column pl.
  template <window_geometry G>
  void zero_padding2d_forward(std::size_t n, const float* x, float* y) const {
    std::fill_n(y, n * G.out_size(), 0.0f);
    for (std::size_t s = 0; s < n; ++s)
      for (std::size_t iy = 0; iy < G.h; ++iy)
        copy(G.w * G.c, x + (s * G.h + iy) * G.w * G.c, y + padded_row<G>(s, iy));
  }
  /// dx = the input's place in dy (the crop).
  template <window_geometry G>
  void zero_padding2d_backward(std::size_t n, const float* dy, float* dx) const {
    for (std::size_t s = 0; s < n; ++s)
      for (std::size_t iy = 0; iy < G.h; ++iy)
        copy(G.w * G.c, dy + padded_row<G>(s, iy), dx + (s * G.h + iy) * G.w * G.c);
  }
  /// y = x where x > 0, else slope x (TF's LeakyRelu).
  void leaky_relu_forward(std::size_t n, float slope, const float* x, float* y) const {
    for (std::size_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : slope * x[i];
  }
  /// dx = dy where x > 0, else slope dy (TF's LeakyReluGrad; dx may be dy).
  void leaky_relu_backward(std::size_t n, float slope, const float* x, const float* dy, float* dx) const {
    for (std::size_t i = 0; i < n; ++i) dx[i] = x[i] > 0.0f ? dy[i] : slope * dy[i];
  }
  /// Per row of x (rows x cols), in float: mean, then the mean of squared deviations (a second pass);
  /// inv_std = 1 / sqrt(variance + epsilon), xhat = (x - mean) inv_std, y = xhat gamma + beta.
  void layer_normalization_forward(std::size_t rows, std::size_t cols, float epsilon, const float* x,
                                   const float* gamma, const float* beta, float* y, float* xhat, float* inv_std) const {
    for (std::size_t r = 0; r < rows; ++r) {
      const float* xr = x + r * cols;
      float mean = 0.0f, var = 0.0f;
      for (std::size_t j = 0; j < cols; ++j) mean += xr[j];
      mean /= static_cast<float>(cols);
      for (std::size_t j = 0; j < cols; ++j) var += (xr[j] - mean) * (xr[j] - mean);
      const float inv = 1.0f / std::sqrt(var / static_cast<float>(cols) + epsilon);
      inv_std[r] = inv;
      for (std::size_t j = 0; j < cols; ++j) {
        xhat[r * cols + j] = (xr[j] - mean) * inv;
        y[r * cols + j] = xhat[r * cols + j] * gamma[j] + beta[j];
      }
    }
  }
  /// Per row, with g = dy gamma: dx = inv_std (g - mean(g) - xhat mean(g xhat)) (the means in float).
  void layer_normalization_backward(std::size_t rows, std::size_t cols, const float* xhat, const float* inv_std,
                                    const float* gamma, const float* dy, float* dx) const {
    for (std::size_t r = 0; r < rows; ++r) {
      const float *xr = xhat + r * cols, *dr = dy + r * cols;
      float mg = 0.0f, mgx = 0.0f;
      for (std::size_t j = 0; j < cols; ++j) mg += dr[j] * gamma[j], mgx += dr[j] * gamma[j] * xr[j];
      mg /= static_cast<float>(cols), mgx /= static_cast<float>(cols);
      for (std::size_t j = 0; j < cols; ++j) dx[r * cols + j] = inv_std[r] * (dr[j] * gamma[j] - mg - xr[j] * mgx);
    }
  }

  /// out = (x - mean)^2, mean per column (batch normalization's second pass).
  void squared_deviations(std::size_t rows, std::size_t cols, const float* x, const float* mean, float* out) const {
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t j = 0; j < cols; ++j) {
        const float d = x[r * cols + j] - mean[j];
        out[r * cols + j] = d * d;
      }
  }
  /// average = average momentum + value (1 - momentum) (Keras' moving statistics).
  void moving_average(std::size_t n, float momentum, const float* value, float* average) const {
    for (std::size_t i = 0; i < n; ++i) average[i] = average[i] * momentum + value[i] * (1.0f - momentum);
  }
  /// Per column j: inv_std[j] = 1 / sqrt(variance[j] + epsilon), xhat = (x - mean[j]) inv_std[j] (written
  /// when not null), y = xhat gamma[j] + beta[j].
  void batch_normalization_forward(std::size_t rows, std::size_t cols, float epsilon, const float* x,
                                   const float* mean, const float* variance, const float* gamma, const float* beta,
                                   float* y, float* xhat, float* inv_std) const {
    for (std::size_t j = 0; j < cols; ++j) inv_std[j] = 1.0f / std::sqrt(variance[j] + epsilon);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t j = 0; j < cols; ++j) {
        const float h = (x[r * cols + j] - mean[j]) * inv_std[j];
        if (xhat) xhat[r * cols + j] = h;
        y[r * cols + j] = h * gamma[j] + beta[j];
      }
  }
  /// dx = gamma inv_std (dy - inv_count (sums[cols + j] + xhat sums[j])) per column j, with `sums` the
  /// batch's sums of dy xhat (cols), then of dy (cols); without `sums` (statistics held fixed: the
  /// moving ones) dx = gamma inv_std dy.
  void batch_normalization_backward(std::size_t rows, std::size_t cols, float inv_count, const float* xhat,
                                    const float* inv_std, const float* gamma, const float* sums, const float* dy,
                                    float* dx) const {
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t j = 0; j < cols; ++j) {
        const std::size_t e = r * cols + j;
        const float centred = sums ? dy[e] - inv_count * (sums[cols + j] + xhat[e] * sums[j]) : dy[e];
        dx[e] = gamma[j] * inv_std[j] * centred;
      }
  }
  /// Depthwise convolution, window G with f = c m outputs (m per channel), zero padding:
  /// y[s][oy][ox][ch m + j] = b[ch m + j] (0 without b) + the sum over the window's taps inside the input,
  /// row by row, of x[s][iy][ix][ch] w[ky][kx][ch][j].
  template <window_geometry G>
  void depthwise_conv2d_forward(std::size_t n, const float* x, const float* w, const float* b, float* y) const {
    constexpr std::size_t m = G.f / G.c;
    for_each_depthwise_tap<G>(n, [&](std::size_t out, std::size_t in, std::size_t tap, bool first) {
      for (std::size_t ch = 0; ch < G.c; ++ch)
        for (std::size_t j = 0; j < m; ++j) {
          float& o = y[out + ch * m + j];
          if (first) o = b ? b[ch * m + j] : 0.0f;
          if (in != npos) o += x[in + ch] * w[tap + ch * m + j];
        }
    });
  }
  /// From dy: gw (the kernel's gradient, w's layout; summed over samples and pixels in order) and, when
  /// not null, dx.
  template <window_geometry G>
  void depthwise_conv2d_backward(std::size_t n, const float* x, const float* w, const float* dy, float* gw,
                                 float* dx) const {
    constexpr std::size_t m = G.f / G.c;
    std::fill_n(gw, G.kh * G.kw * G.f, 0.0f);
    if (dx) std::fill_n(dx, n * G.in_size(), 0.0f);
    for_each_depthwise_tap<G>(n, [&](std::size_t out, std::size_t in, std::size_t tap, bool) {
      if (in == npos) return;
      for (std::size_t ch = 0; ch < G.c; ++ch)
        for (std::size_t j = 0; j < m; ++j) {
          const float d = dy[out + ch * m + j];
          gw[tap + ch * m + j] += x[in + ch] * d;
          if (dx) dx[in + ch] += w[tap + ch * m + j] * d;
        }
    });
  }
  /// y row r = table row x[r] (dim values), or zeros where x[r] is not an index in [0, vocab).
  void embedding_forward(std::size_t rows, std::size_t dim, std::size_t vocab, const float* x, const float* table,
                         float* y) const {
    for (std::size_t r = 0; r < rows; ++r) {
      if (x[r] >= 0.0f && x[r] < float(vocab)) copy(dim, table + std::size_t(x[r]) * dim, y + r * dim);
      else std::fill_n(y + r * dim, dim, 0.0f);
    }
  }
  /// grad row v = the sum of dy rows order[starts[v]], ..., order[starts[v + 1] - 1], in that order.
  void embedding_backward(std::size_t vocab, std::size_t dim, const std::uint32_t* order, const std::uint32_t* starts,
                          const float* dy, float* grad) const {
    for (std::size_t v = 0; v < vocab; ++v) {
      float* g = grad + v * dim;
      std::fill_n(g, dim, 0.0f);
      for (std::uint32_t k = starts[v]; k < starts[v + 1]; ++k)
        for (std::size_t d = 0; d < dim; ++d) g[d] += dy[std::size_t(order[k]) * dim + d];
    }
  }
  /// mask[i] = 1 / (1 - rate) where the i-th uniform of `key`'s Philox stream is >= rate, else 0;
  /// y = x * mask.
  void dropout(std::size_t n, float rate, std::uint64_t key, const float* x, float* y, float* mask) const {
    const float keep = 1.0f / (1.0f - rate);
    for (std::size_t i = 0; i < n; i += 4) {
      const auto u = counter_uniform4(key, i / 4);
      for (std::size_t j = 0; j < 4 && i + j < n; ++j) {
        mask[i + j] = u[j] >= rate ? keep : 0.0f;
        y[i + j] = x[i + j] * mask[i + j];
      }
    }
  }

  /// penalty[0] += factor sum(w^2) (summed in double); when g is not null, g += scale 2 factor w.
  void l2(std::size_t n, float factor, float scale, const float* w, float* g, float* penalty) const {
    double s = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      s += static_cast<double>(w[i]) * w[i];
      if (g) g[i] += scale * 2.0f * factor * w[i];
    }
    *penalty += static_cast<float>(factor * s);
  }

  // ---- losses, metrics, optimizer steps (cpu/losses.hpp, cpu/updates.hpp) --------------------------------
  template <class Op>
  void loss(const Op& o, std::size_t rows, std::size_t cols, float scale, const float* y_true, const float* y_pred,
            float* losses, float* d) const {
    detail::loss_kernel(o, rows, cols, scale, y_true, y_pred, losses, d);
  }
  /// out[0] = the batch's metric total (correct rows; binary accuracy: correct values / cols).
  template <class Op>
  void metric(const Op& o, std::size_t rows, std::size_t cols, const float* y_true, const float* y_pred,
              float* out) const {
    *out = detail::metric_kernel(o, rows, cols, y_true, y_pred);
  }
  template <class Op>
  void update(const Op& o, std::size_t n, const float* g, float* slots, float* p) const {
    detail::update_kernel(o, n, g, slots, p);
  }

 private:
  static constexpr std::size_t npos = std::size_t(-1);
  /// Calls f(output pixel offset, input pixel offset or npos (padding), tap offset in w, first tap) for
  /// every tap of every output pixel of window G, taps in the kernel's row-major order.
  template <window_geometry G, class F>
  static void for_each_depthwise_tap(std::size_t n, F&& f) {
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
  /// Where input row iy of sample s starts in zero padding G's output.
  template <window_geometry G>
  static constexpr std::size_t padded_row(std::size_t s, std::size_t iy) {
    return ((s * G.oh + iy + G.pt) * G.ow + G.pl) * G.c;
  }
};

static_assert(backend<cpu>);

/// Matrix product of two rank-2 tensors on the host (`keras.ops.matmul`), by the cpu backend's GEMM.
inline tensor matmul(const tensor& a, const tensor& b) {
  if (a.dimension() != 2 || b.dimension() != 2 || a.shape()[1] != b.shape()[0])
    throw shape_error("matmul: cannot multiply " + shape_str(a.shape()) + " by " + shape_str(b.shape()));
  const std::size_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  tensor c = zeros({m, n});
  if (k > 0) cpu{}.gemm(transpose::no, transpose::no, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  return c;
}

}  // namespace dtrain
