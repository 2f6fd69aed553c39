#pragma once
/// \file
/// `basic_cuda<Runtime>`: the CUDA backend written once over a runtime that owns one device and one
/// stream. `cuda` (backend/cuda.hpp) runs it on the CUDA runtime, cuBLAS and NVRTC; `cuda_emulated`
/// (cuda/emulator.hpp) runs the very same code, kernels included, on the host, so everything here but
/// the runtime calls is tested on machines without a GPU.
///
/// How a step runs. Kernels (cuda/kernels.hpp), GEMMs and uploads are recorded, not issued, until the
/// host needs a result (`download`, `synchronize`): a training step is one such segment. At that point
/// the segment is issued in one of three ways:
/// - it has the shape of a segment already captured as a CUDA graph (same kernels, GEMMs and copies in
///   the same order on the same buffers; kernel arguments such as Adam's step size or a dropout key may
///   differ and are patched into the graph's nodes): the graph is replayed;
/// - it has the shape of the segment before it (a step seen twice): it is captured into a graph, which
///   is instantiated and launched (kept for the next ones; four shapes are kept);
/// - else (or with `cuda_options::graphs` false, or when capture fails) every operation is launched.
/// The same kernels run with the same arguments in every case, so a graph step and a launched step
/// give the same bits. Uploads are staged through pinned host memory (the copy a graph replays reads
/// the staging slot the upload wrote), so `upload` returns at once, as the contract asks.
///
/// A backend object and its copies are used by one thread at a time; each thread's default-constructed
/// handles get a stream of their own.
///
/// Memory comes from a caching allocator (no cudaMalloc per step): freed blocks return to size-class
/// free lists of the backend's one stream, where stream order makes their reuse safe. Out of memory,
/// the cache is emptied and the allocation retried once; then the error names the device, the sizes
/// and what is cached and in use.
///
/// The runtime seam (`device_runtime`, cuda/runtime.hpp): what `cuda_runtime` and `emulated_runtime` provide.
///
/// This header defines `basic_cuda` (its buffers and the kernel forwarders, the member functions that
/// launch cuda/kernels.hpp's kernels) and includes its parts: the runtime seam (cuda/runtime.hpp), the
/// device pointer (cuda/device_pointer.hpp), the recorded operations (cuda/operation.hpp) and the
/// per-stream context (cuda/context.hpp), which puts the caching allocator (cuda/allocator.hpp) and the
/// recorder with its graphs (cuda/recorder.hpp) together.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "dtrain/backend/backend.hpp"
#include "dtrain/backend/cuda/context.hpp"
#include "dtrain/backend/cuda/device_pointer.hpp"
#include "dtrain/backend/cuda/kernels.hpp"
#include "dtrain/backend/cuda/operation.hpp"
#include "dtrain/backend/cuda/runtime.hpp"

namespace dtrain {

template <device_runtime Runtime>
class basic_cuda {
  using context = cuda_detail::context<Runtime>;
  using kernel = cuda_kernels::kernel;

 public:
  static constexpr const char* name = Runtime::name;
  static constexpr device_kind device = device_kind::gpu;

  template <class T>
  using pointer = cuda_detail::device_pointer<T>;

  /// Device memory, returned to the backend's cache when the buffer goes.
  template <class T>
  class buffer {
   public:
    using value_type = T;
    buffer() = default;
    buffer(std::shared_ptr<context> c, std::size_t n)
        : c_(std::move(c)), p_(n ? static_cast<T*>(c_->allocate(n * sizeof(T), "a buffer")) : nullptr), n_(n) {}
    buffer(buffer&& o) noexcept
        : c_(std::move(o.c_)), p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
    buffer& operator=(buffer&& o) noexcept {
      if (this != &o) {
        reset();
        c_ = std::move(o.c_), p_ = std::exchange(o.p_, nullptr), n_ = std::exchange(o.n_, 0);
      }
      return *this;
    }
    ~buffer() { reset(); }
    pointer<T> data() const { return pointer<T>(p_); }
    std::size_t size() const { return n_; }

   private:
    void reset() {
      if (c_ && p_) c_->release(p_, n_ * sizeof(T));
      p_ = nullptr, n_ = 0;
    }
    std::shared_ptr<context> c_;
    T* p_ = nullptr;
    std::size_t n_ = 0;
  };

  /// Pinned host memory (the device copies to and from it at full speed), freed when the buffer goes:
  /// what a host communicator's data is staged through.
  template <class T>
  class host_buffer {
   public:
    using value_type = T;
    host_buffer() = default;
    host_buffer(std::shared_ptr<context> c, std::size_t n) : c_(std::move(c)), n_(n) {
      if (n == 0) return;
      p_ = static_cast<T*>(c_->runtime().allocate_host(n * sizeof(T)));
      if (!p_)
        throw device_error(c_->describe() + ": cannot allocate " + cuda_detail::mib(n * sizeof(T)) +
                           " of pinned host memory");
    }
    host_buffer(host_buffer&& o) noexcept
        : c_(std::move(o.c_)), p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
    host_buffer& operator=(host_buffer&& o) noexcept {
      std::swap(c_, o.c_), std::swap(p_, o.p_), std::swap(n_, o.n_);
      return *this;
    }
    ~host_buffer() {
      if (p_) c_->runtime().deallocate_host(p_);
    }
    T* data() const { return p_; }
    std::size_t size() const { return n_; }
    operator std::span<T>() const { return {p_, n_}; }

   private:
    std::shared_ptr<context> c_;
    T* p_ = nullptr;
    std::size_t n_ = 0;
  };

  /// How many devices there are (0 without a driver).
  static int device_count() { return Runtime::device_count(); }
  /// Device 0 through this thread's stream (every default-constructed handle of a thread shares it).
  basic_cuda() : basic_cuda(0) {}
  /// Device `device` through this thread's stream for it.
  explicit basic_cuda(int device) : c_(shared(device)) {}
  /// A stream of its own on `device` (a replica's), issuing work as `o` says.
  basic_cuda(int device, cuda_options o) : c_(std::make_shared<context>(device, o)) {}

  /// "cuda device 0 (NVIDIA H100 80GB HBM3)".
  std::string describe() const { return c_->describe(); }
  /// Bytes of device memory the backend's buffers hold (its cache excluded).
  std::size_t bytes_in_use() const { return c_->bytes_in_use(); }
  /// The most bytes the backend's buffers held at once.
  std::size_t peak_bytes_in_use() const { return c_->peak_bytes_in_use(); }
  /// How the segments so far were issued (launched, captured as a graph, replayed).
  auto issued() const { return c_->work().issued(); }
  Runtime& runtime() const { return c_->runtime(); }

  template <class T>
  buffer<T> allocate(std::size_t n) const {
    return buffer<T>(c_, n);
  }
  template <class T>
  host_buffer<T> allocate_host(std::size_t n) const {
    return host_buffer<T>(c_, n);
  }
  /// Issues the recorded work, then runs `f(runtime)`: work of another library on the backend's stream
  /// (comm::nccl's collectives), in order with its kernels.
  template <class F>
  decltype(auto) enqueue(F&& f) const {
    return c_->work().enqueue(std::forward<F>(f));
  }
  template <class T>
  void upload(std::size_t n, const T* host, pointer<T> p) const {
    c_->work().upload(p.get(), host, n * sizeof(T));
  }
  template <class T>
  void download(std::size_t n, pointer<T> p, std::remove_const_t<T>* host) const {
    c_->work().download(host, p.get(), n * sizeof(T));
  }
  void synchronize() const { c_->work().synchronize(); }

  // ---- BLAS-like ---------------------------------------------------------------------------------------
  void fill(std::size_t n, float v, pointer<float> x) const { run<kernel::dtrain_fill>(n, n, v, x); }
  void copy(std::size_t n, pointer<const float> x, pointer<float> y) const { run<kernel::dtrain_copy>(n, n, x, y); }
  void copy_columns(std::size_t rows, std::size_t cols, pointer<const float> x, std::size_t ldx, pointer<float> y,
                    std::size_t ldy) const {
    run<kernel::dtrain_copy_columns>(rows * cols, rows, cols, x, ldx, y, ldy);
  }
  void axpy(std::size_t n, float a, pointer<const float> x, pointer<float> y) const {
    run<kernel::dtrain_axpy>(n, n, a, x, y);
  }
  void multiply(std::size_t n, pointer<const float> x, pointer<const float> y, pointer<float> z) const {
    run<kernel::dtrain_multiply>(n, n, x, y, z);
  }
  /// Row-major C = alpha op(A) op(B) + beta C, as cuBLAS' column-major C^T = op(B)^T op(A)^T.
  void gemm(transpose ta, transpose tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
            pointer<const float> a, std::size_t lda, pointer<const float> b, std::size_t ldb, float beta,
            pointer<float> c, std::size_t ldc) const {
    if (m == 0 || n == 0) return;
    for (std::size_t v : {m, n, k, lda, ldb, ldc})
      if (v > std::size_t(std::numeric_limits<int>::max()))
        throw device_error(describe() + ": a GEMM of " + std::to_string(m) + " x " + std::to_string(n) + " x " +
                           std::to_string(k) + " (leading dimensions " + std::to_string(lda) + ", " +
                           std::to_string(ldb) + ", " + std::to_string(ldc) + ") exceeds cuBLAS' 32-bit sizes");
    const auto i = [](std::size_t v) { return static_cast<int>(std::max<std::size_t>(v, 1)); };
    c_->work().gemm({tb == transpose::yes, ta == transpose::yes, static_cast<int>(n), static_cast<int>(m),
              static_cast<int>(k), alpha, b.get(), i(ldb), a.get(), i(lda), beta, c.get(), i(ldc)});
  }
  void broadcast_rows(std::size_t rows, std::size_t cols, pointer<const float> x, pointer<float> y) const {
    run<kernel::dtrain_broadcast_rows>(rows * cols, rows, cols, x, y);
  }
  /// y = the column sums of x, as a tree: each level adds at most `fan_in` rows of the one below
  /// (rows ch, ch + chunks, ...: coalesced), the last level into y.
  void column_sums(std::size_t rows, std::size_t cols, pointer<const float> x, pointer<float> y) const {
    if (cols == 0) return;
    std::size_t below = 0;
    for (std::size_t r = rows; r > fan_in; r = parts_of(r)) below += parts_of(r) * cols;
    auto* part = static_cast<float*>(c_->scratch(below * sizeof(float)));
    const float* from = x.get();
    for (; rows > fan_in; rows = parts_of(rows)) {
      const std::size_t chunks = parts_of(rows);
      run<kernel::dtrain_column_partials>(chunks * cols, rows, cols, chunks, from, part);
      from = part, part += chunks * cols;
    }
    run<kernel::dtrain_column_partials>(cols, rows, cols, 1, from, y);
  }
  void sum(std::size_t n, pointer<const float> x, pointer<float> out) const { reduce(n, x, false, 1.0, 0.0f, false, out); }

  // ---- layers ------------------------------------------------------------------------------------------
  template <activation_kind A>
  void activation_forward(std::size_t rows, std::size_t cols, pointer<float> v) const {
    if constexpr (A != activation_kind::linear)
      run<kernel::dtrain_activation_forward>(A == activation_kind::softmax ? rows : rows * cols, rows, cols,
                                             static_cast<int>(A), v);
  }
  template <activation_kind A>
  void activation_backward(std::size_t rows, std::size_t cols, pointer<const float> z, pointer<const float> y,
                           pointer<float> d) const {
    if constexpr (A != activation_kind::linear)
      run<kernel::dtrain_activation_backward>(A == activation_kind::softmax ? rows : rows * cols, rows, cols,
                                              static_cast<int>(A), z, y, d);
  }
  template <window_geometry G>
  std::size_t conv2d_workspace(std::size_t n) const {
    return n * G.pixels() * G.taps();
  }
  template <window_geometry G>
  std::size_t conv2d_backward_workspace(std::size_t n, bool input_gradient) const {
    return input_gradient ? n * G.pixels() * G.taps() : 0;
  }
  /// im2col into the workspace, y = cols x kernel, then the bias and the activation in one pass.
  template <window_geometry G, activation_kind A>
  void conv2d_forward(std::size_t n, pointer<const float> x, pointer<const float> w, pointer<const float> b,
                      pointer<float> y, pointer<float> z, pointer<float> work) const {
    const std::size_t m = n * G.pixels(), k = G.taps();
    run<kernel::dtrain_im2col>(m * k, n, geometry<G>(), x, work);
    gemm(transpose::no, transpose::no, m, G.f, k, 1.0f, work, k, w, G.f, 0.0f, y, G.f);
    constexpr bool rowwise = A == activation_kind::softmax;
    run<kernel::dtrain_bias_activation>(m * G.f, m, G.f, static_cast<int>(rowwise ? activation_kind::linear : A), b,
                                        needs_input(A) ? z : pointer<float>{}, y);
    if constexpr (rowwise) activation_forward<A>(m, G.f, y);
  }
  /// The activation's backward on dy, kernel gradient = cols^T dy, bias gradient = column sums of dy,
  /// and with dx: column gradients = dy kernel^T gathered back into dx (col2im).
  template <window_geometry G, activation_kind A>
  void conv2d_backward(std::size_t n, pointer<const float> z, pointer<const float> y, pointer<float> dy,
                       pointer<const float> w, pointer<const float> work, pointer<float> scratch, pointer<float> g,
                       pointer<float> dx) const {
    const std::size_t m = n * G.pixels(), k = G.taps();
    activation_backward<A>(m, G.f, z, y, dy);
    gemm(transpose::yes, transpose::no, k, G.f, m, 1.0f, work, k, dy, G.f, 0.0f, g, G.f);
    column_sums(m, G.f, dy, g + k * G.f);
    if (!dx) return;
    gemm(transpose::no, transpose::yes, m, k, G.f, 1.0f, dy, G.f, w, G.f, 0.0f, scratch, k);
    run<kernel::dtrain_col2im>(n * G.in_size(), n, geometry<G>(), scratch, dx);
  }
  template <window_geometry G>
  void max_pooling2d_forward(std::size_t n, pointer<const float> x, pointer<float> y,
                             pointer<std::uint32_t> argmax) const {
    run<kernel::dtrain_pool_forward>(n * G.out_size(), n, geometry<G>(), 1, x, y, argmax);
  }
  template <window_geometry G>
  void max_pooling2d_backward(std::size_t n, pointer<const float> dy, pointer<const std::uint32_t> argmax,
                              pointer<float> dx) const {
    run<kernel::dtrain_pool_backward>(n * G.in_size(), n, geometry<G>(), 1, dy, argmax, dx);
  }
  template <window_geometry G>
  void average_pooling2d_forward(std::size_t n, pointer<const float> x, pointer<float> y) const {
    run<kernel::dtrain_pool_forward>(n * G.out_size(), n, geometry<G>(), 0, x, y, pointer<std::uint32_t>{});
  }
  template <window_geometry G>
  void average_pooling2d_backward(std::size_t n, pointer<const float> dy, pointer<float> dx) const {
    run<kernel::dtrain_pool_backward>(n * G.in_size(), n, geometry<G>(), 0, dy, pointer<const std::uint32_t>{}, dx);
  }
  template <window_geometry G>
  void zero_padding2d_forward(std::size_t n, pointer<const float> x, pointer<float> y) const {
    run<kernel::dtrain_zero_pad_forward>(n * G.out_size(), n, geometry<G>(), x, y);
  }
  template <window_geometry G>
  void zero_padding2d_backward(std::size_t n, pointer<const float> dy, pointer<float> dx) const {
    run<kernel::dtrain_zero_pad_backward>(n * G.in_size(), n, geometry<G>(), dy, dx);
  }
  void leaky_relu_forward(std::size_t n, float slope, pointer<const float> x, pointer<float> y) const {
    run<kernel::dtrain_leaky_relu_forward>(n, n, slope, x, y);
  }
  void leaky_relu_backward(std::size_t n, float slope, pointer<const float> x, pointer<const float> dy,
                           pointer<float> dx) const {
    run<kernel::dtrain_leaky_relu_backward>(n, n, slope, x, dy, dx);
  }
  void layer_normalization_forward(std::size_t rows, std::size_t cols, float epsilon, pointer<const float> x,
                                   pointer<const float> gamma, pointer<const float> beta, pointer<float> y,
                                   pointer<float> xhat, pointer<float> inv_std) const {
    run<kernel::dtrain_layer_norm_forward>(rows, rows, cols, epsilon, x, gamma, beta, y, xhat, inv_std);
  }
  void layer_normalization_backward(std::size_t rows, std::size_t cols, pointer<const float> xhat,
                                    pointer<const float> inv_std, pointer<const float> gamma,
                                    pointer<const float> dy, pointer<float> dx) const {
    run<kernel::dtrain_layer_norm_backward>(rows, rows, cols, xhat, inv_std, gamma, dy, dx);
  }
  void squared_deviations(std::size_t rows, std::size_t cols, pointer<const float> x, pointer<const float> mean,
                          pointer<float> out) const {
    run<kernel::dtrain_squared_deviations>(rows * cols, rows, cols, x, mean, out);
  }
  void moving_average(std::size_t n, float momentum, pointer<const float> value, pointer<float> average) const {
    run<kernel::dtrain_moving_average>(n, n, momentum, value, average);
  }
  void batch_normalization_forward(std::size_t rows, std::size_t cols, float epsilon, pointer<const float> x,
                                   pointer<const float> mean, pointer<const float> variance,
                                   pointer<const float> gamma, pointer<const float> beta, pointer<float> y,
                                   pointer<float> xhat, pointer<float> inv_std) const {
    run<kernel::dtrain_batch_norm_forward>(rows * cols, rows, cols, epsilon, x, mean, variance, gamma, beta, y, xhat,
                                           inv_std);
  }
  void batch_normalization_backward(std::size_t rows, std::size_t cols, float inv_count, pointer<const float> xhat,
                                    pointer<const float> inv_std, pointer<const float> gamma,
                                    pointer<const float> sums, pointer<const float> dy, pointer<float> dx) const {
    run<kernel::dtrain_batch_norm_backward>(rows * cols, rows, cols, inv_count, xhat, inv_std, gamma, sums, dy, dx);
  }
  template <window_geometry G>
  void depthwise_conv2d_forward(std::size_t n, pointer<const float> x, pointer<const float> w,
                                pointer<const float> b, pointer<float> y) const {
    run<kernel::dtrain_depthwise_forward>(n * G.out_size(), n, geometry<G>(), x, w, b, y);
  }
  template <window_geometry G>
  void depthwise_conv2d_backward(std::size_t n, pointer<const float> x, pointer<const float> w,
                                 pointer<const float> dy, pointer<float> gw, pointer<float> dx) const {
    run<kernel::dtrain_depthwise_kernel_grad>(G.kh * G.kw * G.f, n, geometry<G>(), x, dy, gw);
    if (dx) run<kernel::dtrain_depthwise_input_grad>(n * G.in_size(), n, geometry<G>(), w, dy, dx);
  }
  void embedding_forward(std::size_t rows, std::size_t dim, std::size_t vocab, pointer<const float> x,
                         pointer<const float> table, pointer<float> y) const {
    run<kernel::dtrain_embedding_forward>(rows * dim, rows, dim, vocab, x, table, y);
  }
  void embedding_backward(std::size_t vocab, std::size_t dim, pointer<const std::uint32_t> order,
                          pointer<const std::uint32_t> starts, pointer<const float> dy, pointer<float> grad) const {
    run<kernel::dtrain_embedding_backward>(vocab * dim, vocab, dim, order, starts, dy, grad);
  }
  void dropout(std::size_t n, float rate, std::uint64_t key, pointer<const float> x, pointer<float> y,
               pointer<float> mask) const {
    run<kernel::dtrain_dropout>((n + 3) / 4, n, rate, key, x, y, mask);
  }
  /// penalty[0] += factor sum(w^2) (in double); g += scale 2 factor w.
  void l2(std::size_t n, float factor, float scale, pointer<const float> w, pointer<float> g,
          pointer<float> penalty) const {
    reduce(n, w, true, 1.0, factor, true, penalty);
    if (g) axpy(n, scale * 2.0f * factor, w, g);
  }

  // ---- losses, metrics, optimizer steps ------------------------------------------------------------------
  template <class Op>
  void loss(const Op& o, std::size_t rows, std::size_t cols, float scale, pointer<const float> y_true,
            pointer<const float> y_pred, pointer<float> losses, pointer<float> d) const {
    int kind = 3, logits = 0;
    if constexpr (requires { o.from_logits; }) logits = o.from_logits ? 1 : 0;
    if constexpr (std::is_same_v<Op, op::sparse_categorical_crossentropy>) kind = 0;
    else if constexpr (std::is_same_v<Op, op::categorical_crossentropy>) kind = 1;
    else if constexpr (std::is_same_v<Op, op::binary_crossentropy>) kind = 2;
    run<kernel::dtrain_loss>(rows, rows, cols, kind, logits, scale, loss_epsilon, y_true, y_pred, losses, d);
  }
  /// out[0] = the batch's correct rows (binary accuracy: correct values / cols).
  template <class Op>
  void metric(const Op& o, std::size_t rows, std::size_t cols, pointer<const float> y_true,
              pointer<const float> y_pred, pointer<float> out) const {
    int kind = 0;
    float threshold = 0.0f;
    if constexpr (std::is_same_v<Op, op::categorical_accuracy>) kind = 1;
    if constexpr (std::is_same_v<Op, op::binary_accuracy>) kind = 2, threshold = o.threshold;
    // the hits after the reduction's partials in one scratch block
    const std::size_t parts = tree_size(rows);
    auto* part = static_cast<double*>(c_->scratch(parts * sizeof(double) + rows * sizeof(float)));
    auto* hits = reinterpret_cast<float*>(part + parts);
    run<kernel::dtrain_metric_hits>(rows, rows, cols, kind, threshold, y_true, y_pred, hits);
    reduce(rows, pointer<const float>(hits), false, kind == 2 ? static_cast<double>(cols) : 1.0, 0.0f, false, out, part);
  }
  void update(const op::sgd& o, std::size_t n, pointer<const float> g, pointer<float> s, pointer<float> p) const {
    run<kernel::dtrain_sgd>(n, n, o.learning_rate, o.momentum, o.nesterov ? 1 : 0, g, o.momentum > 0 ? s : nullptr, p);
  }
  void update(const op::adam& o, std::size_t n, pointer<const float> g, pointer<float> s, pointer<float> p) const {
    run<kernel::dtrain_adam>(n, n, o.alpha, o.one_minus_beta_1, o.one_minus_beta_2, o.epsilon, o.decay,
                             o.amsgrad ? 1 : 0, g, s, s + n, o.amsgrad ? s + 2 * n : nullptr, p);
  }
  void update(const op::rmsprop& o, std::size_t n, pointer<const float> g, pointer<float> s, pointer<float> p) const {
    const bool momentum = o.momentum > 0.0f;
    run<kernel::dtrain_rmsprop>(n, n, o.learning_rate, o.rho, o.momentum, o.epsilon, o.centered ? 1 : 0, g, s,
                                momentum ? s + n : nullptr, o.centered ? s + n * (momentum ? 2 : 1) : nullptr, p);
  }

 private:
  template <kernel K, class... A>
  void run(std::size_t threads, A... a) const {
    if (threads == 0) return;
    c_->work().template launch<K>(threads, a...);
  }
  template <window_geometry G>
  static cuda_kernels::window geometry() {
    const auto i = [](std::size_t v) { return static_cast<int>(v); };
    return {i(G.h), i(G.w), i(G.c), i(G.kh), i(G.kw), i(G.sh), i(G.sw), i(G.pt), i(G.pl), i(G.oh), i(G.ow), i(G.f)};
  }
  /// A reduction tree's fan-in: no thread adds more values than this.
  static constexpr std::size_t fan_in = 32;
  static std::size_t parts_of(std::size_t n) { return (n + fan_in - 1) / fan_in; }
  /// The doubles a sum of n values keeps between its levels.
  static std::size_t tree_size(std::size_t n) {
    std::size_t total = std::max<std::size_t>(parts_of(n), 1);
    for (std::size_t p = total; p > fan_in; p = parts_of(p)) total += parts_of(p);
    return total;
  }
  /// out[0] = sum(x) (of squares with `square`) / divisor; with `accumulate`, out[0] += factor sum. In
  /// double, as a tree (levels in `part`, tree_size(n) doubles; the scratch block when null).
  void reduce(std::size_t n, pointer<const float> x, bool square, double divisor, float factor, bool accumulate,
              pointer<float> out, double* part = nullptr) const {
    if (!part) part = static_cast<double*>(c_->scratch(tree_size(n) * sizeof(double)));
    std::size_t parts = std::max<std::size_t>(parts_of(n), 1);
    run<kernel::dtrain_sum_partials>(parts, n, parts, square ? 1 : 0, x, part);
    for (; parts > fan_in; part += parts, parts = parts_of(parts))
      run<kernel::dtrain_sum_doubles>(parts_of(parts), parts, parts_of(parts), part, part + parts);
    run<kernel::dtrain_sum_finish>(1, parts, divisor, factor, accumulate ? 1 : 0, part, out);
  }

  /// This thread's stream on `device` (made on first use, kept while the thread lives).
  static std::shared_ptr<context> shared(int device) {
    thread_local std::map<int, std::shared_ptr<context>> contexts;
    auto& c = contexts[device];
    if (!c) c = std::make_shared<context>(device, cuda_options{});
    return c;
  }

  std::shared_ptr<context> c_;
};

}  // namespace dtrain
