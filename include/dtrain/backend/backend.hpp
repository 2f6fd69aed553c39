#pragma once
/// \file
/// The backend seam: where a model's memory lives and how every kernel runs. Layers, losses, metrics,
/// optimizers and the model reach memory only through a backend object, so a backend whose memory is
/// not host memory (a GPU's) replaces `cpu` without a change to any of them. `opaque.hpp` holds a test
/// backend whose pointers cannot be used as host pointers: code that compiles against it touches no
/// memory behind the backend's back.
///
/// Contract (`backend_memory`, then the kernel families), for a backend `B` and an object `b` of it:
/// - `B` is a cheap handle: copies refer to the same device and stream. `B::name` names it; `B::device`
///   declares its device kind (a `device_kind::gpu` backend is made from an ordinal, `B(i)`, and has
///   `B::device_count()`).
/// - Memory. `B::pointer<T>` addresses elements of type T (float; `std::uint32_t` for indices) in B's
///   memory. It is default-constructible (null), tests for null with `!p` / `bool(p)`, converts to
///   `pointer<const T>`, and moves by `p + n` elements; nothing else is promised (it need not be a host
///   pointer). `B::buffer<T>` (`value_type` T) owns `size()` elements at `data()`; `b.allocate<T>(n)`
///   returns one (contents unspecified; a backend may reuse freed memory). Buffers are movable.
/// - `b.upload(n, host, p)` and `b.download(n, p, host)` copy between host memory and B's; `upload`
///   returns once `host` may be reused, `download` once the host copy is complete (after every kernel
///   issued before it). `b.synchronize()` returns when every kernel issued so far has finished.
/// - Kernels. Every other member runs one kernel on B's memory. Sizes come first, then parameters, then
///   inputs, then outputs (BLAS' order). A kernel may run asynchronously: kernels issued through one
///   backend object run in the order issued, and memory freed while kernels that use it are pending is
///   not reused before they have run (the backend's job, so callers may drop a buffer at any time). An
///   output must not overlap an input unless the kernel says it works in place.
///
/// The kernel families, each a concept (`cpu.hpp` documents each kernel's exact arithmetic):
/// - `blas_kernels`: `fill`, `copy`, `copy_columns` (a block of columns between two row-major matrices),
///   `transpose_matrix` (y = x^T: BLAS' omatcopy, for a GEMM that reads one operand transposed many times),
///   `axpy`, `multiply`, `gemm` (row-major, as cblas_sgemm), `broadcast_rows` (every row of y = x),
///   `column_sums` (y = sum of the rows of x), `sum` (out[0] = sum of x), `round_to` (each value of x
///   rounded to the nearest one of a dtype, as core/float16.hpp rounds: a mixed-precision policy's casts),
///   `scale` (x *= alpha in place: BLAS' scal), `clip` (each value of x clamped to [lo, hi] in place, NaN
///   kept: Keras' `ops.clip`).
/// - `activation_kernels`: `activation_forward<A>` (y from x) / `activation_backward<A>` (dx from dy),
///   each also in place (y = x, dx = dy), and `leaky_relu_*`.
/// - `window_kernels`: `conv2d_forward<G, A>` / `conv2d_backward<G, A>` (the bias and its gradient
///   null for a convolution without bias) with the workspace sizes `conv2d_workspace<G>` (forward's,
///   which backward reads) and `conv2d_backward_workspace<G>` (backward's scratch);
///   `conv2d_transpose_*<G, A>` (the adjoint of conv2d over G: y, of G's input shape, from x, of G's
///   output shape) with its workspace `conv2d_transpose_workspace<G>`; `depthwise_conv2d_*<G>`,
///   `max_pooling2d_*` and `average_pooling2d_*<G>`, `zero_padding2d_*<G>`, `up_sampling2d_*<G>`
///   (nearest: each value repeated kh x kw times).
/// - `normalization_kernels`: `layer_normalization_*`, `batch_normalization_*` (forward, backward and
///   `_gradient_sums`: the sums of dy xhat and of dy in one pass), `squared_deviation_sums` (the
///   variance's sums around a given mean; the mean's come from `column_sums`) and `moving_average`.
/// - `embedding_kernels`: `embedding_*`.
/// - `regularization_kernels`: `dropout` (mask from a counter-based generator keyed by the model's), `l2`
///   (penalty and its gradient).
/// - `loss_kernels` and `update_kernels`, described by the `op::` values below: `loss(op, ...)`,
///   `metric(op, ...)`, `update(op, ...)`.
/// A model asks for `model_backend` (memory, BLAS-like, losses and metrics, updates) and each layer for
/// the families it runs; `backend` is every family.
///
/// Optional: `b.with_gemm_dtype(d)`, a copy of b whose `gemm` and convolutions multiply operands of dtype
/// `d` (rounded to it, products summed in float32) on the device's reduced-precision units; a mixed
/// policy's autocasting layers run on it (`detail::with_gemm_dtype`). Without it, or where the device has
/// no such units, they multiply in float32 the operands the model hands them (already cast).

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "dtrain/core/float16.hpp"

namespace dtrain {

/// The kind of device a backend's memory lives on (TF's device types "CPU" and "GPU").
enum class device_kind { cpu, gpu };

/// Whether a GEMM operand is used as stored or transposed.
enum class transpose : bool { no = false, yes = true };

/// The activation functions every backend implements (Keras' names).
enum class activation_kind { linear, relu, sigmoid, tanh, softmax, gelu };

/// Whether an activation's backward needs its input (the pre-activation), not only its output.
constexpr bool needs_input(activation_kind a) { return a == activation_kind::gelu; }

/// A 2-D sliding window (conv2d, pooling) over one (h, w, c) sample, channels last: window kh x kw,
/// strides sh x sw, pt rows and pl columns of padding before the first, output oh x ow x f (f = filters
/// for conv2d, c for pooling); conv2d's dilation dh x dw (tap (ky, kx) reads input row oy * sh + ky * dh -
/// pt) and groups (output channels [g f / groups, (g + 1) f / groups) see input channels [g c / groups,
/// (g + 1) c / groups)). A structural type, so kernels take it as a template argument.
struct window_geometry {
  std::size_t h, w, c, kh, kw, sh, sw, pt, pl, oh, ow, f, dh = 1, dw = 1, groups = 1;

  constexpr std::size_t in_size() const { return h * w * c; }
  constexpr std::size_t out_size() const { return oh * ow * f; }
  constexpr std::size_t pixels() const { return oh * ow; }
  /// Values one output pixel sees (the length of one im2col row: group by group, each tap's channels).
  constexpr std::size_t taps() const { return kh * kw * c; }
  /// One group's share of an im2col row, and the values of a convolution's kernel (kh, kw, c / groups, f).
  constexpr std::size_t group_taps() const { return taps() / groups; }
  constexpr std::size_t kernel_values() const { return group_taps() * f; }
};

/// The losses, metrics and optimizer steps a backend implements, as values: `compile()` chooses them at
/// run time, and the model hands the chosen one to its backend.
/// Keras' fuzz factor (`keras.backend.epsilon()`): crossentropies on probabilities clip them to
/// [loss_epsilon, 1 - loss_epsilon].
inline constexpr float loss_epsilon = 1e-7f;

namespace op {

/// Per-row losses of `rows` rows of `cols` scores; `y_true` holds one class index per row.
struct sparse_categorical_crossentropy {
  bool from_logits = false;
};
/// `y_true` holds a (soft) one-hot row per row, smoothed first: y (1 - label_smoothing) + label_smoothing / cols.
struct categorical_crossentropy {
  bool from_logits = false;
  float label_smoothing = 0.0f;
};
/// `y_true` holds targets in [0, 1], smoothed first: y (1 - label_smoothing) + label_smoothing / 2; a row's
/// loss is the mean over its `cols` values.
struct binary_crossentropy {
  bool from_logits = false;
  float label_smoothing = 0.0f;
};
/// A row's loss is the mean of (y_pred - y_true)^2 over its `cols` values.
struct mean_squared_error {};
/// A row's loss is the mean of |y_pred - y_true| over its `cols` values (gradient sign(e), 0 at 0).
struct mean_absolute_error {};
/// A row's loss is the mean over its values of e^2 / 2 where |e| <= delta, else delta (|e| - delta / 2),
/// e = y_pred - y_true.
struct huber {
  float delta = 1.0f;
};
/// A row's loss is the sum over its values of y log(y / q), y and q clipped to [epsilon, 1] (a clipped q
/// has zero gradient).
struct kl_divergence {};
/// A row's loss is minus the cosine of y_true and y_pred: -(y / |y|) . (q / |q|), a norm below
/// sqrt(epsilon) replaced by sqrt(epsilon) (Keras' l2 normalisation).
struct cosine_similarity {};

/// Correct rows: argmax of the scores equals the class index.
struct sparse_categorical_accuracy {};
/// Correct rows: argmax of the scores equals argmax of the one-hot target.
struct categorical_accuracy {};
/// Correct values (y_pred > threshold equals y_true), divided by `cols`.
struct binary_accuracy {
  float threshold = 0.5f;
};
/// Correct rows: fewer than k scores exceed the score of the class index (ties count as correct).
struct sparse_top_k_categorical_accuracy {
  int k = 5;
};
/// Correct rows: fewer than k scores exceed the score of the one-hot target's argmax.
struct top_k_categorical_accuracy {
  int k = 5;
};

/// Keras' SGD step: m = momentum m - lr g; p += m (Nesterov: p += momentum m - lr g); plain: p -= lr g.
/// Slots: m when momentum > 0.
struct sgd {
  float learning_rate = 0.01f, momentum = 0.0f;
  bool nesterov = false;
};
/// Keras' Adam step with alpha = lr sqrt(1 - beta_2^t) / (1 - beta_1^t) already applied: p *= decay
/// (AdamW's weight decay; 1 for Adam); m += (g - m) one_minus_beta_1; v += (g^2 - v) one_minus_beta_2;
/// v_hat = max(v_hat, v) with amsgrad; p -= alpha m / (sqrt(v or v_hat) + epsilon).
/// Slots: m, v, then v_hat with amsgrad.
struct adam {
  float alpha = 0.001f, one_minus_beta_1 = 0.1f, one_minus_beta_2 = 0.001f, epsilon = 1e-7f, decay = 1.0f;
  bool amsgrad = false;
};
/// Keras' RMSprop step: v = rho v + (1 - rho) g^2; (centered: a = rho a + (1 - rho) g, v - a^2 below);
/// step = lr g / sqrt(v + epsilon); with momentum m = momentum m + step, p -= m; else p -= step.
/// Slots: v, then m when momentum > 0, then a when centered.
struct rmsprop {
  float learning_rate = 0.001f, rho = 0.9f, momentum = 0.0f, epsilon = 1e-7f;
  bool centered = false;
};
/// Keras' Adagrad step: a += g^2; p -= lr g / sqrt(a + initial_accumulator_value + epsilon). The slot
/// holds the accumulator less its initial value (slots start at zero).
struct adagrad {
  float learning_rate = 0.001f, initial_accumulator_value = 0.1f, epsilon = 1e-7f;
};
/// Keras' Adamax step with alpha = lr / (1 - beta_1^t): m += (g - m) one_minus_beta_1;
/// u = max(beta_2 u, |g|); p -= alpha m / (u + epsilon). Slots: m, u.
struct adamax {
  float alpha = 0.001f, one_minus_beta_1 = 0.1f, beta_2 = 0.999f, epsilon = 1e-7f;
};
/// Keras' Nadam step, its momentum schedule folded into two factors: m += (g - m) one_minus_beta_1;
/// v += (g^2 - v) one_minus_beta_2; p -= lr (m_factor m + g_factor g) / (sqrt(v v_factor) + epsilon).
/// Slots: m, v.
struct nadam {
  float learning_rate = 0.001f, one_minus_beta_1 = 0.1f, one_minus_beta_2 = 0.001f, epsilon = 1e-7f;
  float m_factor = 0.0f, g_factor = 0.0f, v_factor = 1.0f;
};
/// Keras' Lion step: p -= lr sign(beta_1 m + (1 - beta_1) g); m = beta_2 m + (1 - beta_2) g. Slot: m.
struct lion {
  float learning_rate = 0.001f, beta_1 = 0.9f, beta_2 = 0.99f;
};
/// Keras' moving average of the weights (`use_ema`), after a step: a = momentum a + (1 - momentum) g,
/// where `g` is given the parameters; with `overwrite` the parameters take a. Slot: a.
struct ema {
  float momentum = 0.99f;
  bool overwrite = false;
};

/// Whether an op's y_true holds one class index per row (else one value per prediction).
template <class Op>
inline constexpr bool class_index_targets =
    std::is_same_v<Op, sparse_categorical_crossentropy> || std::is_same_v<Op, sparse_categorical_accuracy> ||
    std::is_same_v<Op, sparse_top_k_categorical_accuracy>;

}  // namespace op

/// A loss, a metric and an optimizer step as a backend receives them.
using loss_op = std::variant<op::sparse_categorical_crossentropy, op::categorical_crossentropy,
                             op::binary_crossentropy, op::mean_squared_error, op::mean_absolute_error, op::huber,
                             op::kl_divergence, op::cosine_similarity>;
using metric_op = std::variant<op::sparse_categorical_accuracy, op::categorical_accuracy, op::binary_accuracy,
                               op::sparse_top_k_categorical_accuracy, op::top_k_categorical_accuracy>;
using optimizer_op = std::variant<op::sgd, op::adam, op::rmsprop, op::adagrad, op::adamax, op::nadam, op::lion>;

/// Slot values an optimizer step keeps per parameter.
constexpr std::size_t slot_count(const op::sgd& s) { return s.momentum > 0.0f ? 1 : 0; }
constexpr std::size_t slot_count(const op::adam& s) { return s.amsgrad ? 3 : 2; }
constexpr std::size_t slot_count(const op::rmsprop& s) {
  return 1 + (s.momentum > 0.0f ? 1 : 0) + (s.centered ? 1 : 0);
}
constexpr std::size_t slot_count(const op::adagrad&) { return 1; }
constexpr std::size_t slot_count(const op::adamax&) { return 2; }
constexpr std::size_t slot_count(const op::nadam&) { return 2; }
constexpr std::size_t slot_count(const op::lion&) { return 1; }
constexpr std::size_t slot_count(const op::ema&) { return 1; }

/// The default backend (backend/cpu.hpp): what `sequential<...>` and `bind_t<...>` use unless told.
struct cpu;

template <class B, class T>
using pointer_t = typename B::template pointer<T>;
template <class B, class T>
using buffer_t = typename B::template buffer<T>;

namespace detail {
/// One geometry for the concept's checks (any valid one would do).
inline constexpr window_geometry probe_window{4, 4, 1, 2, 2, 2, 2, 0, 0, 2, 2, 1};
}  // namespace detail

/// The memory core every backend has; kernels come in families (below), each a concept of its own, so
/// that a layer, loss or optimizer asks only for the families it runs and a new backend can be brought up
/// family by family. Capabilities are declared, not guessed: `B::device` says which kind of device B's
/// memory is on; a `device_kind::gpu` backend is made from a device ordinal, `B(i)`, and counts its devices
/// with `B::device_count()` (the strategies place replicas by them).
template <class B>
concept backend_memory =
    std::copyable<B> &&
    requires(const B& b, std::size_t n, const float* host_in, float* host_out, pointer_t<B, float> p,
             pointer_t<B, const float> cp) {
      { B::name } -> std::convertible_to<const char*>;
      { B::device } -> std::convertible_to<device_kind>;
      requires B::device != device_kind::gpu || requires {
        B(0);
        { B::device_count() } -> std::convertible_to<int>;
      };
      { b.template allocate<float>(n) } -> std::same_as<buffer_t<B, float>>;
      { b.template allocate<std::uint32_t>(n) } -> std::same_as<buffer_t<B, std::uint32_t>>;
      { std::as_const(std::declval<buffer_t<B, float>&>()).data() } -> std::convertible_to<pointer_t<B, float>>;
      { std::declval<buffer_t<B, float>&>().size() } -> std::convertible_to<std::size_t>;
      requires std::same_as<typename buffer_t<B, float>::value_type, float>;
      { p + n } -> std::same_as<pointer_t<B, float>>;
      { cp + n } -> std::same_as<pointer_t<B, const float>>;
      { !p } -> std::convertible_to<bool>;
      static_cast<bool>(p);  // null or not, as `if (p)` asks
      requires std::convertible_to<pointer_t<B, float>, pointer_t<B, const float>>;
      requires std::is_nothrow_move_constructible_v<buffer_t<B, float>>;
      b.upload(n, host_in, p);
      b.download(n, cp, host_out);
      b.synchronize();
    };

/// BLAS-like kernels: what a model's own step and every dense layer run.
template <class B>
concept blas_kernels = backend_memory<B> && requires(const B& b, std::size_t n, float s, pointer_t<B, float> p,
                                                     pointer_t<B, const float> cp) {
  b.fill(n, s, p);
  b.copy(n, cp, p);
  b.copy_columns(n, n, cp, n, p, n);
  b.transpose_matrix(n, n, cp, n, p, n);
  b.axpy(n, s, cp, p);
  b.multiply(n, cp, cp, p);
  b.gemm(transpose::no, transpose::yes, n, n, n, s, cp, n, cp, n, s, p, n);
  b.broadcast_rows(n, n, cp, p);
  b.column_sums(n, n, cp, p);
  b.sum(n, cp, p);
  b.round_to(n, dtype::bfloat16, cp, p);
  b.scale(n, s, p);
  b.clip(n, s, s, p);
};

/// Elementwise activations (out of place or in place) and leaky_relu.
template <class B>
concept activation_kernels = backend_memory<B> && requires(const B& b, std::size_t n, float s, pointer_t<B, float> p,
                                                           pointer_t<B, const float> cp) {
  b.template activation_forward<activation_kind::relu>(n, n, cp, p);
  b.template activation_backward<activation_kind::relu>(n, n, cp, cp, cp, p);
  b.leaky_relu_forward(n, s, cp, p);
  b.leaky_relu_backward(n, s, cp, cp, p);
};

/// Sliding windows over images: conv2d and conv2d_transpose (with their workspaces), depthwise conv2d,
/// pooling, zero padding, up-sampling.
template <class B>
concept window_kernels = backend_memory<B> && requires(const B& b, std::size_t n, pointer_t<B, float> p,
                                                       pointer_t<B, const float> cp, pointer_t<B, std::uint32_t> ip,
                                                       pointer_t<B, const std::uint32_t> cip) {
  { b.template conv2d_workspace<detail::probe_window>(n) } -> std::convertible_to<std::size_t>;
  { b.template conv2d_backward_workspace<detail::probe_window>(n, true) } -> std::convertible_to<std::size_t>;
  b.template conv2d_forward<detail::probe_window, activation_kind::relu>(n, cp, cp, cp, p, p, p);
  b.template conv2d_backward<detail::probe_window, activation_kind::relu>(n, cp, cp, p, cp, cp, p, p, p, p);
  { b.template conv2d_transpose_workspace<detail::probe_window>(n) } -> std::convertible_to<std::size_t>;
  b.template conv2d_transpose_forward<detail::probe_window, activation_kind::relu>(n, cp, cp, cp, p, p, p);
  b.template conv2d_transpose_backward<detail::probe_window, activation_kind::relu>(n, cp, cp, cp, p, cp, p, p, p, p);
  b.template depthwise_conv2d_forward<detail::probe_window>(n, cp, cp, cp, p);
  b.template depthwise_conv2d_backward<detail::probe_window>(n, cp, cp, cp, p, p);
  b.template max_pooling2d_forward<detail::probe_window>(n, cp, p, ip);
  b.template max_pooling2d_backward<detail::probe_window>(n, cp, cip, p);
  b.template average_pooling2d_forward<detail::probe_window>(n, cp, p);
  b.template average_pooling2d_backward<detail::probe_window>(n, cp, p);
  b.template zero_padding2d_forward<detail::probe_window>(n, cp, p);
  b.template zero_padding2d_backward<detail::probe_window>(n, cp, p);
  b.template up_sampling2d_forward<detail::probe_window>(n, cp, p);
  b.template up_sampling2d_backward<detail::probe_window>(n, cp, p);
};

/// Layer and batch normalization, and the batch statistics' helpers.
template <class B>
concept normalization_kernels = backend_memory<B> && requires(const B& b, std::size_t n, float s, pointer_t<B, float> p,
                                                              pointer_t<B, const float> cp) {
  b.layer_normalization_forward(n, n, s, cp, cp, cp, p, p, p);
  b.layer_normalization_backward(n, n, cp, cp, cp, cp, p);
  b.squared_deviation_sums(n, n, cp, cp, p);
  b.moving_average(n, s, cp, p);
  b.batch_normalization_forward(n, n, s, cp, cp, cp, cp, cp, p, p, p);
  b.batch_normalization_gradient_sums(n, n, cp, cp, p);
  b.batch_normalization_backward(n, n, s, cp, cp, cp, cp, cp, p);
};

/// Table lookups by index (embedding) and their gradient's scatter.
template <class B>
concept embedding_kernels = backend_memory<B> && requires(const B& b, std::size_t n, pointer_t<B, float> p,
                                                          pointer_t<B, const float> cp,
                                                          pointer_t<B, const std::uint32_t> cip) {
  b.embedding_forward(n, n, n, cp, cp, p);
  b.embedding_backward(n, n, cip, cip, cp, p);
};

/// Keras' regularization: dropout's mask and the l2 and l1 penalties.
template <class B>
concept regularization_kernels = backend_memory<B> && requires(const B& b, std::size_t n, float s, std::uint64_t key,
                                                               pointer_t<B, float> p, pointer_t<B, const float> cp) {
  b.dropout(n, s, key, cp, p, p);
  b.l2(n, s, s, cp, p, p);
  b.l1(n, s, s, cp, p, p);
};

/// The losses and metrics `compile()` chooses (the `op::` values above).
template <class B>
concept loss_kernels = backend_memory<B> && requires(const B& b, std::size_t n, float s, pointer_t<B, float> p,
                                                     pointer_t<B, const float> cp) {
  b.loss(op::sparse_categorical_crossentropy{}, n, n, s, cp, cp, p, p);
  b.loss(op::categorical_crossentropy{}, n, n, s, cp, cp, p, p);
  b.loss(op::binary_crossentropy{}, n, n, s, cp, cp, p, p);
  b.loss(op::mean_squared_error{}, n, n, s, cp, cp, p, p);
  b.loss(op::mean_absolute_error{}, n, n, s, cp, cp, p, p);
  b.loss(op::huber{}, n, n, s, cp, cp, p, p);
  b.loss(op::kl_divergence{}, n, n, s, cp, cp, p, p);
  b.loss(op::cosine_similarity{}, n, n, s, cp, cp, p, p);
  b.metric(op::sparse_categorical_accuracy{}, n, n, cp, cp, p);
  b.metric(op::categorical_accuracy{}, n, n, cp, cp, p);
  b.metric(op::binary_accuracy{}, n, n, cp, cp, p);
  b.metric(op::sparse_top_k_categorical_accuracy{}, n, n, cp, cp, p);
  b.metric(op::top_k_categorical_accuracy{}, n, n, cp, cp, p);
};

/// The optimizers' steps.
template <class B>
concept update_kernels = backend_memory<B> && requires(const B& b, std::size_t n, pointer_t<B, float> p,
                                                       pointer_t<B, const float> cp) {
  b.update(op::sgd{}, n, cp, p, p);
  b.update(op::adam{}, n, cp, p, p);
  b.update(op::rmsprop{}, n, cp, p, p);
  b.update(op::adagrad{}, n, cp, p, p);
  b.update(op::adamax{}, n, cp, p, p);
  b.update(op::nadam{}, n, cp, p, p);
  b.update(op::lion{}, n, cp, p, p);
  b.update(op::ema{}, n, cp, p, p);
};

/// What a model needs of its backend for itself (its layers ask for their own families): memory, the
/// BLAS-like kernels, losses and metrics, and the optimizer steps.
template <class B>
concept model_backend = blas_kernels<B> && loss_kernels<B> && update_kernels<B>;

/// A complete backend: every family (cpu, cuda and opaque are).
template <class B>
concept backend = model_backend<B> && activation_kernels<B> && window_kernels<B> && normalization_kernels<B> &&
                  embedding_kernels<B> && regularization_kernels<B>;

/// Whether B's memory is host memory (its pointers are plain pointers): host code may then read and
/// write it, and the model passes host arrays to its kernels without copying them.
template <class B>
inline constexpr bool host_addressable_v = std::is_same_v<pointer_t<B, float>, float*>;

/// Grows `buf` to at least `n` elements (dropping its contents when it grows) and returns its data: the
/// reusable workspaces of layers and models, allocated once the batch size is stable.
template <class B, class Buffer>
auto ensure(const B& b, Buffer& buf, std::size_t n) {
  if (buf.size() < n) buf = b.template allocate<typename Buffer::value_type>(n);
  return buf.data();
}

namespace detail {
/// b with its GEMMs taking operands of dtype d where B offers that (see the file comment), else b.
template <class B>
B with_gemm_dtype(const B& b, dtype d) {
  if constexpr (requires { { b.with_gemm_dtype(d) } -> std::same_as<B>; }) return b.with_gemm_dtype(d);
  else return b;
}
/// `n` values of host memory that backend B copies to and from best: its pinned `host_buffer` where it
/// has one (`b.allocate_host<T>(n)`), else a vector.
template <class B, class T = float>
auto host_staging(const B& b, std::size_t n) {
  if constexpr (requires { b.template allocate_host<T>(n); }) return b.template allocate_host<T>(n);
  else return std::vector<T>(n);
}
template <class B, class T = float>
using host_staging_t = decltype(host_staging<B, T>(std::declval<const B&>(), 0));
}  // namespace detail

/// `n` values in a backend's memory together with the backend: what a model whose memory is not host
/// memory hands out for its parameters and gradients (a host-memory model hands out `std::span`).
template <class T, class B>
class device_span {
 public:
  device_span(const B& device, pointer_t<B, T> data, std::size_t size) : device_(&device), data_(data), size_(size) {}
  const B& device() const { return *device_; }
  pointer_t<B, T> data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  device_span subspan(std::size_t offset, std::size_t count) const { return {*device_, data_ + offset, count}; }
  device_span first(std::size_t count) const { return subspan(0, count); }
  operator device_span<const T, B>() const
    requires(!std::is_const_v<T>)
  {
    return {*device_, data_, size_};
  }

 private:
  const B* device_;
  pointer_t<B, T> data_;
  std::size_t size_;
};

/// What a model on B hands out for a run of its memory: `std::span` for host memory, else `device_span`.
template <class B, class T>
using span_t = std::conditional_t<host_addressable_v<B>, std::span<T>, device_span<T, B>>;

}  // namespace dtrain
