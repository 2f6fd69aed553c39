#pragma once
/// \file
/// The layer seam. A layer is written as a *spec* (`dense<128, relu>`) whose nested template
/// `bind<In, B>` is the *bound layer* for a per-sample input shape `In` on backend `B`. Binding is where
/// shapes are checked: a spec that cannot take `In` fails a `static_assert` that says why, so a
/// mismatched `sequential<...>` does not compile.
///
/// A bound layer `L` on backend `B` (contract, `layer<L, B>`), with `cptr` / `ptr` the backend's const
/// and mutable float pointers:
/// - `L::input_shape`, `L::output_shape`: `shape<...>`; `L::keras_name` ("dense"), `L::class_name` ("Dense");
/// - `L::params`: a `std::array<param_spec, K>` of its variables in Keras order (kernel, then bias),
///   laid out back to back in the model's single parameter buffer;
/// - `initialize(params, rng)`: Keras' default initialisers (glorot_uniform kernels, zero biases), on a
///   host copy of the layer's parameters (the model uploads them), so every backend starts from the
///   same weights;
/// - `forward(ctx, x, y, n, params)`: writes `y` (n x output) from `x` (n x input);
/// - `backward(ctx, x, y, dy, dx, n, params, grads)`: overwrites `grads` with d loss / d params and,
///   when `dx` is not null, writes d loss / d x. `x` and `y` are what the last `forward` saw and wrote;
///   `dy` is scratch and may be overwritten; the call follows a `forward` with the same `n`;
/// - `regularization(ctx, params, grads, scale, penalty)`: adds the layer's penalty (Keras `layer.losses`)
///   to `penalty[0]` and, when `grads` is not null, `scale` times its gradient to `grads`.
/// Every access to memory goes through `ctx.device`; `backend/opaque.hpp` proves it at compile time. A
/// layer needs the backend's memory core (and the BLAS-like kernels every model has); it asserts any other
/// kernel family it runs when it binds (`static_assert(window_kernels<B>, "conv2d: ...")`).
/// Buffers a layer keeps between forward and backward grow to the largest batch seen and are reused:
/// a layer allocates nothing on a training step once the batch size is stable.
///
/// Optional: `static constexpr bool relabels = true` says the output holds the input's values in the same
/// order (reshape, flatten). A model may then skip the layer's `forward` and `backward` and let its output
/// alias its input, and its input gradient alias its output gradient (`detail::relabels_v`).
///
/// Optional: `static constexpr bool autocast = false` says the layer computes in float32 whatever the
/// model's dtype policy (model/dtype_policy.hpp): its inputs and weights are read uncast (Keras' layers
/// that turn autocast off, or compute in float32 inside: normalization, an embedding's index inputs).
/// Under a mixed policy every other layer's `ctx.device` is the model's device with its GEMMs taking
/// the compute dtype (backend.hpp's `with_gemm_dtype`), this one's the float32 device.
///
/// Optional: non-trainable variables (Keras `non_trainable_weights`: batch normalization's moving
/// statistics). `L::state` is a `std::array<param_spec, K>` of them (Keras order, after `params`), and
/// `initialize_state(host)` sets their initial values. The model keeps them after every layer's trainable
/// parameters (`get_weights()` holds both; optimizers and gradient sums see only the trainable ones) and
/// hands the layer its own in `ctx.state` for `forward` and `backward`; a training `forward` may update
/// them. A layer whose training pass talks to the other replicas (batch statistics summed across them)
/// does so through `ctx.replicas`, and declares `join_forward(ctx)` and `join_backward(ctx, dx)`: what a
/// replica without rows in a step runs in place of `forward` and `backward` (`dx`: whether backward would
/// compute an input gradient), so that every replica enters the same collectives in the same order.
///
/// Optional: masks over steps (Keras' masking: `embedding<..., mask_zero<true>>` marks the steps whose index
/// is 0 as padding). A bound layer with `static constexpr bool makes_mask = true` computes its output's
/// mask from its input on the host, `static void compute_mask(std::span<const float> x, float* mask)`
/// (one value per input row of its last axis: 1 a real step, 0 padding); the model computes it from the
/// batch itself, so such a layer takes a model input. A bound layer with `static constexpr bool
/// supports_masking = true` (Keras' attribute) takes masked inputs: `ctx.masks` holds its inputs' masks
/// (one per input, empty for an input without) in `forward` and `backward`, and its output carries the same mask (a merge layer's: the one its masked
/// inputs share; one with `static constexpr bool mask_of_first = true`, its first input's: attention's,
/// the query's) unless it declares `static constexpr bool keeps_mask = false`
/// (a pooling over the steps, an RNN that returns its last step). At a layer without
/// `supports_masking` a mask ends, as in Keras.
///
/// A merge layer (Keras' Add, Multiply, Concatenate: several inputs) is a spec with `merge` whose
/// `bind_merge<B, In...>` keeps `merge_layer<L, B>` below; functional models (model/graph.hpp) use them.
///
/// Optional: `static void get_config(C& c)`, the layer's Keras config (Keras' `layer.get_config()` less
/// the name, dtype and build shapes: the constructor arguments that decide what the layer computes),
/// written through a `config_writer` C. Writing and reading Keras' `.keras` files needs it of every
/// layer (checkpoint/keras_file.hpp); a layer without one makes them a compile error naming it.

#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>

#include "dtrain/backend/backend.hpp"
#include "dtrain/core/random.hpp"
#include "dtrain/core/shape.hpp"

namespace dtrain {

/// The replicas a model trains with, as a layer sees them: `sum(values)` adds host values element by
/// element over every replica in sync (each replica calls it with the same sizes, in the same order), and
/// `count` is their number. A model that trains alone has count 1 and a sum that leaves values as they are.
struct replica_sum {
  int count = 1;
  void* context = nullptr;
  void (*sum_fn)(void*, std::span<float>) = nullptr;

  void sum(std::span<float> values) const {
    if (sum_fn) sum_fn(context, values);
  }
};

/// A mask over the steps of a batch (Keras' `_keras_mask`): per sample and step 1 (a real step) or 0
/// (padding), n x steps values row-major, on the device and the same values on the host (what a layer
/// plans its kernel calls by). An empty one (null pointers) is an input that carries no mask.
template <class B>
struct step_mask {
  pointer_t<B, const float> device{};
  const float* host = nullptr;
  explicit operator bool() const { return host != nullptr; }
};

/// What a layer sees of the model during one pass: its backend, its generator, the mode, its
/// non-trainable variables (null for a layer without), the replicas, and its inputs' masks (one per
/// input for a layer that `supports_masking`, each empty where that input carries none).
template <class B>
struct layer_context {
  const B& device;
  rng& random;
  bool training = false;
  pointer_t<B, float> state{};
  replica_sum replicas{};
  std::span<const step_mask<B>> masks{};

  /// Input i's mask, or an empty one.
  step_mask<B> mask(std::size_t i = 0) const { return i < masks.size() ? masks[i] : step_mask<B>{}; }
  /// Whether any input carries a mask.
  bool masked() const {
    for (const auto& m : masks)
      if (m) return true;
    return false;
  }
};

/// What a layer's `get_config` writes to (checkpoint/keras_file.hpp has the JSON one): `c.set(key, v)` with
/// v a whole number, a float, a bool, a string, `nullptr` (Keras' None) or a `std::array` of those (nested
/// too: ZeroPadding2D's ((top, bottom), (left, right))), and
/// `c.object(key, module, class_name)`, the writer of a nested Keras object (a regularizer:
/// `{"module": "keras.regularizers", "class_name": "L2", "config": {...}}`) under `key`.
template <class C>
concept config_writer = requires(C& c, std::remove_cvref_t<C>& nested) {
  c.set("key", std::size_t{1});
  c.set("key", 1.0f);
  c.set("key", true);
  c.set("key", "text");
  c.set("key", nullptr);
  c.set("key", std::array<std::size_t, 2>{});
  { c.object("key", "module", "Class") } -> std::same_as<std::remove_cvref_t<C>>;
};

/// One trainable variable of a layer: its Keras name and shape, and where Keras' weight files keep it
/// under the layer when that is in a sublayer of Keras' (an LSTM's "cell/vars/0"; null: "vars/<index>").
struct param_spec {
  const char* name;
  std::size_t rank;
  std::array<std::size_t, 4> dims;
  const char* keras_path;

  constexpr param_spec(const char* n, std::size_t r, std::array<std::size_t, 4> d, const char* path = nullptr)
      : name(n), rank(r), dims(d), keras_path(path) {}

  constexpr std::size_t size() const {
    std::size_t s = 1;
    for (std::size_t i = 0; i < rank; ++i) s *= dims[i];
    return s;
  }
};

/// Total parameter count of a bound layer.
template <class L>
inline constexpr std::size_t param_count_v = [] {
  std::size_t s = 0;
  for (const auto& p : L::params) s += p.size();
  return s;
}();

/// The bound layer of spec `L` for input shape `In` on backend `B`.
template <class L, class In, class B = cpu>
using bind_t = typename L::template bind<In, B>;

/// Satisfied by a bound layer that keeps the contract above on backend B.
template <class L, class B>
concept layer = backend_memory<B> && requires(L& l, const L& cl, layer_context<B>& ctx, rng& r, std::span<float> host,
                                       pointer_t<B, const float> cx, pointer_t<B, float> x, std::size_t n, float scale) {
  requires static_shape<typename L::input_shape>;
  requires static_shape<typename L::output_shape>;
  { L::keras_name } -> std::convertible_to<const char*>;
  { L::class_name } -> std::convertible_to<const char*>;
  { L::params.size() } -> std::convertible_to<std::size_t>;
  l.initialize(host, r);
  l.forward(ctx, cx, x, n, cx);
  l.backward(ctx, cx, cx, x, x, n, cx, x);
  cl.regularization(ctx, cx, x, scale, x);
};

/// The bound form of a merge layer (several inputs of shapes `In...`, one output): `arity`, `output_shape`,
/// names and parameters as a layer has them, and
/// - `forward(ctx, xs, y, n, params)` with `xs` a `std::array` of `arity` input pointers;
/// - `backward(ctx, xs, y, dy, dxs, n, params, grads)` writing each non-null `dxs[i]`.
template <class L, class B>
concept merge_layer = backend_memory<B> && requires(L& l, const L& cl, layer_context<B>& ctx, rng& r, std::span<float> host,
                                             const std::array<pointer_t<B, const float>, L::arity>& xs,
                                             const std::array<pointer_t<B, float>, L::arity>& dxs,
                                             pointer_t<B, const float> cx, pointer_t<B, float> x, std::size_t n,
                                             float scale) {
  requires static_shape<typename L::output_shape>;
  { L::keras_name } -> std::convertible_to<const char*>;
  { L::class_name } -> std::convertible_to<const char*>;
  l.initialize(host, r);
  l.forward(ctx, xs, x, n, cx);
  l.backward(ctx, xs, cx, x, dxs, n, cx, x);
  cl.regularization(ctx, cx, x, scale, x);
};

/// Total count of a bound layer's non-trainable variables (0 for a layer without `state`).
template <class L>
inline constexpr std::size_t state_count_v = [] {
  std::size_t s = 0;
  if constexpr (requires { L::state; })
    for (const auto& p : L::state) s += p.size();
  return s;
}();

namespace detail {

/// True for a bound layer whose output is its input relabelled (see the contract above).
template <class L>
inline constexpr bool relabels_v = [] {
  if constexpr (requires { L::relabels; })
    return static_cast<bool>(L::relabels);
  else
    return false;
}();

/// True for a bound layer that computes in a mixed policy's compute dtype (see the contract above).
template <class L>
inline constexpr bool autocasts_v = [] {
  if constexpr (requires { L::autocast; })
    return static_cast<bool>(L::autocast);
  else
    return true;
}();

/// Whether a bound layer computes a mask (`makes_mask`), takes masked inputs (`supports_masking`), and
/// passes the mask on to its output (see the contract above).
template <class L>
inline constexpr bool makes_mask_v = [] {
  if constexpr (requires { L::makes_mask; }) return static_cast<bool>(L::makes_mask);
  else return false;
}();
template <class L>
inline constexpr bool supports_masking_v = [] {
  if constexpr (requires { L::supports_masking; }) return static_cast<bool>(L::supports_masking);
  else return false;
}();
template <class L>
inline constexpr bool keeps_mask_v = [] {
  if constexpr (requires { L::keeps_mask; }) return supports_masking_v<L> && static_cast<bool>(L::keeps_mask);
  else return supports_masking_v<L>;
}();

/// A merge layer whose output carries its first input's mask (`mask_of_first`: attention, the query's).
template <class L>
inline constexpr bool mask_of_first_v = requires { L::mask_of_first; };

/// True for a bound merge layer (`arity` inputs).
template <class L>
inline constexpr bool merges_v = requires { L::arity; };

/// True for a bound layer that joins the other replicas' collectives in training (see the contract above).
template <class L>
inline constexpr bool joins_replicas_v = requires { &L::join_forward; };

/// A layer without variables or regularizer.
struct no_params {
  static constexpr std::array<param_spec, 0> params{};
  void initialize(std::span<float>, rng&) {}
  template <class Ctx, class C, class P>
  void regularization(Ctx&, C, P, float, P) const {}
};

/// Glorot (Xavier) uniform: U(-l, l) with l = sqrt(6 / (fan_in + fan_out)), Keras' default kernel init.
inline void glorot_uniform(std::span<float> w, std::size_t fan_in, std::size_t fan_out, rng& r) {
  const float limit = std::sqrt(6.0f / static_cast<float>(fan_in + fan_out));
  for (auto& v : w) v = r.uniform(-limit, limit);
}

}  // namespace detail

/// Keras' `use_bias=` of a layer that has a bias: `use_bias<false>` leaves it out (as before batch
/// normalization, whose beta is the bias).
template <bool Use>
struct use_bias {
  static constexpr bool is_use_bias = true;
  static constexpr bool value = Use;
};

namespace detail {
template <class T, class = void>
struct is_use_bias : std::false_type {};
template <class T>
struct is_use_bias<T, std::void_t<decltype(T::is_use_bias)>> : std::true_type {};

/// Picks the first option in `Os...` satisfying `Pred`, else `Default`.
template <template <class...> class Pred, class Default, class... Os>
struct find_option {
  using type = Default;
};
template <template <class...> class Pred, class Default, class O, class... Os>
struct find_option<Pred, Default, O, Os...> {
  using type = std::conditional_t<Pred<O>::value, O, typename find_option<Pred, Default, Os...>::type>;
};

/// Copies a shape with its last extent replaced.
template <class S, std::size_t Last, class Seq = std::make_index_sequence<S::rank - 1>>
struct replace_last;
template <class S, std::size_t Last, std::size_t... I>
struct replace_last<S, Last, std::index_sequence<I...>> {
  using type = shape<S::dims[I]..., Last>;
};

}  // namespace detail
}  // namespace dtrain
