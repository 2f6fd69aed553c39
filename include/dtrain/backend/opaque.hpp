#pragma once
/// \file
/// `opaque`: a test backend whose memory cannot be reached from outside it. Its pointers are handles (an
/// allocation and an offset): they do not convert to host pointers and cannot be dereferenced or indexed
/// (each attempt fails to compile, saying why). Every kernel first checks that each range it touches
/// lies inside its allocation, then runs the cpu backend's kernel on it, so results are the cpu
/// backend's, bit for bit. Code that compiles and passes its tests on `opaque` touches no memory behind
/// its backend's back and stays inside its buffers: it runs on any backend that keeps the contract.
/// Not part of dtrain.hpp; include it to check a layer, loss or model of your own.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include "dtrain/backend/backend.hpp"
#include "dtrain/backend/cpu.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain {

class opaque {
  struct allocation {
    std::unique_ptr<std::byte[]> bytes;
    std::size_t size;  // elements
  };

 public:
  static constexpr const char* name = "opaque";
  static constexpr device_kind device = device_kind::cpu;

  /// An element of an allocation: no `*`, `[]` or conversion to a host pointer.
  template <class T>
  class pointer {
   public:
    pointer() = default;
    pointer(std::nullptr_t) {}
    template <class U>
      requires std::is_same_v<const U, T> && (!std::is_same_v<U, T>)
    pointer(pointer<U> p) : a_(p.a_), offset_(p.offset_) {}

    pointer operator+(std::size_t n) const { return pointer(a_, offset_ + n); }
    explicit operator bool() const { return a_ != nullptr; }
    bool operator!() const { return a_ == nullptr; }
    friend bool operator==(const pointer&, const pointer&) = default;

    T& operator*() const {
      static_assert(sizeof(T) == 0, "opaque backend: backend memory was dereferenced; call the backend's kernels");
      return *static_cast<T*>(nullptr);
    }
    T& operator[](std::size_t) const {
      static_assert(sizeof(T) == 0, "opaque backend: backend memory was indexed; call the backend's kernels");
      return *static_cast<T*>(nullptr);
    }
    template <class U>
    operator U*() const {
      static_assert(sizeof(U*) == 0, "opaque backend: backend memory was used as a host pointer; call the backend's kernels");
      return nullptr;
    }

   private:
    friend class opaque;
    template <class>
    friend class pointer;
    pointer(allocation* a, std::size_t offset) : a_(a), offset_(offset) {}
    allocation* a_ = nullptr;
    std::size_t offset_ = 0;
  };

  template <class T>
  class buffer {
   public:
    using value_type = T;
    buffer() = default;
    explicit buffer(std::size_t n) {
      if (n) a_.reset(new allocation{std::unique_ptr<std::byte[]>(new std::byte[n * sizeof(T)]), n});
    }
    pointer<T> data() const { return pointer<T>(a_.get(), 0); }
    std::size_t size() const { return a_ ? a_->size : 0; }

   private:
    std::unique_ptr<allocation> a_;
  };

  template <class T>
  buffer<T> allocate(std::size_t n) const {
    return buffer<T>(n);
  }
  template <class T>
  void upload(std::size_t n, const T* host, pointer<T> p) const {
    cpu_.upload(n, host, raw(p, n, "upload"));
  }
  template <class T>
  void download(std::size_t n, pointer<T> p, std::remove_const_t<T>* host) const {
    cpu_.download(n, raw(p, n, "download"), host);
  }
  void synchronize() const {}

  // ---- BLAS-like ---------------------------------------------------------------------------------------
  void fill(std::size_t n, float v, pointer<float> x) const { cpu_.fill(n, v, raw(x, n, "fill")); }
  void copy(std::size_t n, pointer<const float> x, pointer<float> y) const {
    cpu_.copy(n, raw(x, n, "copy"), raw(y, n, "copy"));
  }
  void copy_columns(std::size_t rows, std::size_t cols, pointer<const float> x, std::size_t ldx, pointer<float> y,
                    std::size_t ldy) const {
    if (rows == 0 || cols == 0) return;
    cpu_.copy_columns(rows, cols, raw(x, (rows - 1) * ldx + cols, "copy_columns x"), ldx,
                      raw(y, (rows - 1) * ldy + cols, "copy_columns y"), ldy);
  }
  void axpy(std::size_t n, float alpha, pointer<const float> x, pointer<float> y) const {
    cpu_.axpy(n, alpha, raw(x, n, "axpy"), raw(y, n, "axpy"));
  }
  void multiply(std::size_t n, pointer<const float> x, pointer<const float> y, pointer<float> z) const {
    cpu_.multiply(n, raw(x, n, "multiply"), raw(y, n, "multiply"), raw(z, n, "multiply"));
  }
  void gemm(transpose ta, transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
            pointer<const float> a, std::size_t lda, pointer<const float> b, std::size_t ldb, float beta,
            pointer<float> c, std::size_t ldc) const {
    if (m == 0 || n == 0) return;
    cpu_.gemm(ta, tb, m, n, k, alpha, raw(a, matrix(ta, m, k, lda), "gemm A"), lda,
              raw(b, matrix(tb, k, n, ldb), "gemm B"), ldb, beta, raw(c, (m - 1) * ldc + n, "gemm C"), ldc);
  }
  void broadcast_rows(std::size_t rows, std::size_t cols, pointer<const float> x, pointer<float> y) const {
    cpu_.broadcast_rows(rows, cols, raw(x, cols, "broadcast_rows"), raw(y, rows * cols, "broadcast_rows"));
  }
  void column_sums(std::size_t rows, std::size_t cols, pointer<const float> x, pointer<float> y) const {
    cpu_.column_sums(rows, cols, raw(x, rows * cols, "column_sums"), raw(y, cols, "column_sums"));
  }
  void sum(std::size_t n, pointer<const float> x, pointer<float> out) const {
    cpu_.sum(n, raw(x, n, "sum"), raw(out, 1, "sum"));
  }

  // ---- layers ------------------------------------------------------------------------------------------
  template <activation_kind A>
  void activation_forward(std::size_t rows, std::size_t cols, pointer<float> v) const {
    cpu_.activation_forward<A>(rows, cols, raw(v, rows * cols, "activation_forward"));
  }
  template <activation_kind A>
  void activation_backward(std::size_t rows, std::size_t cols, pointer<const float> z, pointer<const float> y,
                           pointer<float> d) const {
    const std::size_t e = rows * cols;
    cpu_.activation_backward<A>(rows, cols, needs_input(A) ? raw(z, e, "activation_backward z") : nullptr,
                                raw(y, e, "activation_backward y"), raw(d, e, "activation_backward d"));
  }
  template <window_geometry G>
  std::size_t conv2d_workspace(std::size_t n) const {
    return cpu_.conv2d_workspace<G>(n);
  }
  template <window_geometry G>
  std::size_t conv2d_backward_workspace(std::size_t n, bool input_gradient) const {
    return cpu_.conv2d_backward_workspace<G>(n, input_gradient);
  }
  template <window_geometry G, activation_kind A>
  void conv2d_forward(std::size_t n, pointer<const float> x, pointer<const float> w, pointer<const float> b,
                      pointer<float> y, pointer<float> z, pointer<float> work) const {
    const std::size_t out = n * G.out_size();
    cpu_.conv2d_forward<G, A>(n, raw(x, n * G.in_size(), "conv2d x"), raw(w, G.taps() * G.f, "conv2d kernel"),
                              raw(b, G.f, "conv2d bias"), raw(y, out, "conv2d y"),
                              needs_input(A) ? raw(z, out, "conv2d z") : nullptr,
                              raw(work, conv2d_workspace<G>(n), "conv2d workspace"));
  }
  template <window_geometry G, activation_kind A>
  void conv2d_backward(std::size_t n, pointer<const float> z, pointer<const float> y, pointer<float> dy,
                       pointer<const float> w, pointer<const float> work, pointer<float> scratch, pointer<float> g,
                       pointer<float> dx) const {
    const std::size_t out = n * G.out_size();
    cpu_.conv2d_backward<G, A>(n, needs_input(A) ? raw(z, out, "conv2d z") : nullptr, raw(y, out, "conv2d y"),
                               raw(dy, out, "conv2d dy"), raw(w, G.taps() * G.f, "conv2d kernel"),
                               raw(work, conv2d_workspace<G>(n), "conv2d workspace"),
                               raw(scratch, conv2d_backward_workspace<G>(n, bool(dx)), "conv2d backward workspace"),
                               raw(g, G.taps() * G.f + G.f, "conv2d gradients"),
                               dx ? raw(dx, n * G.in_size(), "conv2d dx") : nullptr);
  }
  template <window_geometry G>
  void max_pooling2d_forward(std::size_t n, pointer<const float> x, pointer<float> y,
                             pointer<std::uint32_t> argmax) const {
    cpu_.max_pooling2d_forward<G>(n, raw(x, n * G.in_size(), "max_pooling2d x"),
                                  raw(y, n * G.out_size(), "max_pooling2d y"),
                                  raw(argmax, n * G.out_size(), "max_pooling2d argmax"));
  }
  template <window_geometry G>
  void max_pooling2d_backward(std::size_t n, pointer<const float> dy, pointer<const std::uint32_t> argmax,
                              pointer<float> dx) const {
    cpu_.max_pooling2d_backward<G>(n, raw(dy, n * G.out_size(), "max_pooling2d dy"),
                                   raw(argmax, n * G.out_size(), "max_pooling2d argmax"),
                                   raw(dx, n * G.in_size(), "max_pooling2d dx"));
  }
  template <window_geometry G>
  void average_pooling2d_forward(std::size_t n, pointer<const float> x, pointer<float> y) const {
    cpu_.average_pooling2d_forward<G>(n, raw(x, n * G.in_size(), "average_pooling2d x"),
                                      raw(y, n * G.out_size(), "average_pooling2d y"));
  }
  template <window_geometry G>
  void average_pooling2d_backward(std::size_t n, pointer<const float> dy, pointer<float> dx) const {
    cpu_.average_pooling2d_backward<G>(n, raw(dy, n * G.out_size(), "average_pooling2d dy"),
                                       raw(dx, n * G.in_size(), "average_pooling2d dx"));
  }
  template <window_geometry G>
  void zero_padding2d_forward(std::size_t n, pointer<const float> x, pointer<float> y) const {
    cpu_.zero_padding2d_forward<G>(n, raw(x, n * G.in_size(), "zero_padding2d x"),
                                   raw(y, n * G.out_size(), "zero_padding2d y"));
  }
  template <window_geometry G>
  void zero_padding2d_backward(std::size_t n, pointer<const float> dy, pointer<float> dx) const {
    cpu_.zero_padding2d_backward<G>(n, raw(dy, n * G.out_size(), "zero_padding2d dy"),
                                    raw(dx, n * G.in_size(), "zero_padding2d dx"));
  }
  void leaky_relu_forward(std::size_t n, float slope, pointer<const float> x, pointer<float> y) const {
    cpu_.leaky_relu_forward(n, slope, raw(x, n, "leaky_relu x"), raw(y, n, "leaky_relu y"));
  }
  void leaky_relu_backward(std::size_t n, float slope, pointer<const float> x, pointer<const float> dy,
                           pointer<float> dx) const {
    cpu_.leaky_relu_backward(n, slope, raw(x, n, "leaky_relu x"), raw(dy, n, "leaky_relu dy"),
                             raw(dx, n, "leaky_relu dx"));
  }
  void layer_normalization_forward(std::size_t rows, std::size_t cols, float epsilon, pointer<const float> x,
                                   pointer<const float> gamma, pointer<const float> beta, pointer<float> y,
                                   pointer<float> xhat, pointer<float> inv_std) const {
    const std::size_t e = rows * cols;
    cpu_.layer_normalization_forward(rows, cols, epsilon, raw(x, e, "layer_normalization x"),
                                     raw(gamma, cols, "layer_normalization gamma"),
                                     raw(beta, cols, "layer_normalization beta"), raw(y, e, "layer_normalization y"),
                                     raw(xhat, e, "layer_normalization xhat"),
                                     raw(inv_std, rows, "layer_normalization inv_std"));
  }
  void layer_normalization_backward(std::size_t rows, std::size_t cols, pointer<const float> xhat,
                                    pointer<const float> inv_std, pointer<const float> gamma,
                                    pointer<const float> dy, pointer<float> dx) const {
    const std::size_t e = rows * cols;
    cpu_.layer_normalization_backward(rows, cols, raw(xhat, e, "layer_normalization xhat"),
                                      raw(inv_std, rows, "layer_normalization inv_std"),
                                      raw(gamma, cols, "layer_normalization gamma"),
                                      raw(dy, e, "layer_normalization dy"), raw(dx, e, "layer_normalization dx"));
  }
  void squared_deviations(std::size_t rows, std::size_t cols, pointer<const float> x, pointer<const float> mean,
                          pointer<float> out) const {
    cpu_.squared_deviations(rows, cols, raw(x, rows * cols, "squared_deviations x"),
                            raw(mean, cols, "squared_deviations mean"), raw(out, rows * cols, "squared_deviations out"));
  }
  void moving_average(std::size_t n, float momentum, pointer<const float> value, pointer<float> average) const {
    cpu_.moving_average(n, momentum, raw(value, n, "moving_average value"), raw(average, n, "moving_average average"));
  }
  void batch_normalization_forward(std::size_t rows, std::size_t cols, float epsilon, pointer<const float> x,
                                   pointer<const float> mean, pointer<const float> variance,
                                   pointer<const float> gamma, pointer<const float> beta, pointer<float> y,
                                   pointer<float> xhat, pointer<float> inv_std) const {
    const std::size_t e = rows * cols;
    cpu_.batch_normalization_forward(
        rows, cols, epsilon, raw(x, e, "batch_normalization x"), raw(mean, cols, "batch_normalization mean"),
        raw(variance, cols, "batch_normalization variance"), raw(gamma, cols, "batch_normalization gamma"),
        raw(beta, cols, "batch_normalization beta"), raw(y, e, "batch_normalization y"),
        xhat ? raw(xhat, e, "batch_normalization xhat") : nullptr,
        raw(inv_std, cols, "batch_normalization inv_std"));
  }
  void batch_normalization_backward(std::size_t rows, std::size_t cols, float inv_count, pointer<const float> xhat,
                                    pointer<const float> inv_std, pointer<const float> gamma,
                                    pointer<const float> sums, pointer<const float> dy, pointer<float> dx) const {
    const std::size_t e = rows * cols;
    cpu_.batch_normalization_backward(rows, cols, inv_count, sums ? raw(xhat, e, "batch_normalization xhat") : nullptr,
                                      raw(inv_std, cols, "batch_normalization inv_std"),
                                      raw(gamma, cols, "batch_normalization gamma"),
                                      sums ? raw(sums, 2 * cols, "batch_normalization sums") : nullptr,
                                      raw(dy, e, "batch_normalization dy"), raw(dx, e, "batch_normalization dx"));
  }
  template <window_geometry G>
  void depthwise_conv2d_forward(std::size_t n, pointer<const float> x, pointer<const float> w,
                                pointer<const float> b, pointer<float> y) const {
    cpu_.depthwise_conv2d_forward<G>(n, raw(x, n * G.in_size(), "depthwise_conv2d x"),
                                     raw(w, G.kh * G.kw * G.f, "depthwise_conv2d kernel"),
                                     b ? raw(b, G.f, "depthwise_conv2d bias") : nullptr,
                                     raw(y, n * G.out_size(), "depthwise_conv2d y"));
  }
  template <window_geometry G>
  void depthwise_conv2d_backward(std::size_t n, pointer<const float> x, pointer<const float> w,
                                 pointer<const float> dy, pointer<float> gw, pointer<float> dx) const {
    cpu_.depthwise_conv2d_backward<G>(n, raw(x, n * G.in_size(), "depthwise_conv2d x"),
                                      raw(w, G.kh * G.kw * G.f, "depthwise_conv2d kernel"),
                                      raw(dy, n * G.out_size(), "depthwise_conv2d dy"),
                                      raw(gw, G.kh * G.kw * G.f, "depthwise_conv2d kernel gradient"),
                                      dx ? raw(dx, n * G.in_size(), "depthwise_conv2d dx") : nullptr);
  }
  void embedding_forward(std::size_t rows, std::size_t dim, std::size_t vocab, pointer<const float> x,
                         pointer<const float> table, pointer<float> y) const {
    cpu_.embedding_forward(rows, dim, vocab, raw(x, rows, "embedding indices"), raw(table, vocab * dim, "embedding table"),
                           raw(y, rows * dim, "embedding y"));
  }
  void embedding_backward(std::size_t vocab, std::size_t dim, pointer<const std::uint32_t> order,
                          pointer<const std::uint32_t> starts, pointer<const float> dy, pointer<float> grad) const {
    const std::uint32_t* s = raw(starts, vocab + 1, "embedding starts");
    const std::size_t rows = s[vocab];
    const std::uint32_t* o = raw(order, rows, "embedding order");
    std::size_t dy_rows = 0;
    for (std::size_t k = 0; k < rows; ++k) dy_rows = std::max<std::size_t>(dy_rows, std::size_t(o[k]) + 1);
    cpu_.embedding_backward(vocab, dim, o, s, raw(dy, dy_rows * dim, "embedding dy"), raw(grad, vocab * dim, "embedding grad"));
  }
  void dropout(std::size_t n, float rate, std::uint64_t key, pointer<const float> x, pointer<float> y,
               pointer<float> mask) const {
    cpu_.dropout(n, rate, key, raw(x, n, "dropout x"), raw(y, n, "dropout y"), raw(mask, n, "dropout mask"));
  }
  void l2(std::size_t n, float factor, float scale, pointer<const float> w, pointer<float> g,
          pointer<float> penalty) const {
    cpu_.l2(n, factor, scale, raw(w, n, "l2 weights"), g ? raw(g, n, "l2 gradients") : nullptr,
            raw(penalty, 1, "l2 penalty"));
  }

  // ---- losses, metrics, optimizer steps ------------------------------------------------------------------
  template <class Op>
  void loss(const Op& o, std::size_t rows, std::size_t cols, float scale, pointer<const float> y_true,
            pointer<const float> y_pred, pointer<float> losses, pointer<float> d) const {
    const std::size_t targets = std::is_same_v<Op, op::sparse_categorical_crossentropy> ? rows : rows * cols;
    cpu_.loss(o, rows, cols, scale, raw(y_true, targets, "loss y_true"), raw(y_pred, rows * cols, "loss y_pred"),
              raw(losses, rows, "loss values"), d ? raw(d, rows * cols, "loss gradient") : nullptr);
  }
  template <class Op>
  void metric(const Op& o, std::size_t rows, std::size_t cols, pointer<const float> y_true,
              pointer<const float> y_pred, pointer<float> out) const {
    const std::size_t targets = std::is_same_v<Op, op::sparse_categorical_accuracy> ? rows : rows * cols;
    cpu_.metric(o, rows, cols, raw(y_true, targets, "metric y_true"), raw(y_pred, rows * cols, "metric y_pred"),
                raw(out, 1, "metric total"));
  }
  template <class Op>
  void update(const Op& o, std::size_t n, pointer<const float> g, pointer<float> slots, pointer<float> p) const {
    cpu_.update(o, n, raw(g, n, "update gradients"), raw(slots, slot_count(o) * n, "update slots"),
                raw(p, n, "update parameters"));
  }

 private:
  /// Elements a row-major operand spans: op(M) is rows x cols, stored transposed or not.
  static std::size_t matrix(transpose t, std::size_t rows, std::size_t cols, std::size_t ld) {
    if (t == transpose::yes) std::swap(rows, cols);
    return rows == 0 || cols == 0 ? 0 : (rows - 1) * ld + cols;
  }
  /// The host address of [p, p + n), after checking that the range lies inside p's allocation.
  template <class T>
  static T* raw(pointer<T> p, std::size_t n, const char* what) {
    if (n == 0) return nullptr;
    if (!p) throw error(std::string("opaque backend: ") + what + " reads or writes " + std::to_string(n) +
                        " elements through a null pointer");
    if (p.offset_ > p.a_->size || n > p.a_->size - p.offset_)
      throw error(std::string("opaque backend: ") + what + " touches elements [" + std::to_string(p.offset_) + ", " +
                  std::to_string(p.offset_ + n) + ") of an allocation of " + std::to_string(p.a_->size));
    using element = std::remove_const_t<T>;
    return reinterpret_cast<element*>(p.a_->bytes.get()) + p.offset_;
  }

  cpu cpu_;
};

static_assert(backend<opaque>);

}  // namespace dtrain
