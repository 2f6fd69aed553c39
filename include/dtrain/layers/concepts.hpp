#pragma once
/// \file
/// The layer seam. A layer is written as a *spec* (`dense<128, relu>`) whose nested template
/// `bind<In>` is the *bound layer* for a per-sample input shape `In`. Binding is where shapes are
/// checked: a spec that cannot take `In` fails a `static_assert` that says why, so a mismatched
/// `sequential<...>` does not compile.
///
/// A bound layer `B` (contract):
/// - `B::input_shape`, `B::output_shape`: `shape<...>`; `B::keras_name` ("dense"), `B::class_name` ("Dense");
/// - `B::params`: a `std::array<param_spec, K>` of its variables in Keras order (kernel, then bias),
///   laid out back to back in the model's single parameter buffer;
/// - `initialize(params, rng)`: Keras' default initialisers (glorot_uniform kernels, zero biases);
/// - `forward(ctx, x, y, n, params)`: writes `y` (n x output) from `x` (n x input);
/// - `backward(ctx, x, y, dy, dx, n, params, grads)`: overwrites `grads` with d loss / d params and,
///   when `dx` is not null, writes d loss / d x. `x` and `y` are what the last `forward` saw and wrote;
///   `dy` is scratch and may be overwritten; the call follows a `forward` with the same `n`;
/// - `regularization(params, grads)`: returns the layer's penalty (Keras `layer.losses`) and adds
///   `scale` times its gradient to `grads`.
/// Buffers a layer keeps between forward and backward grow to the largest batch seen and are reused:
/// no allocation happens on a training step once the batch size is stable.
///
/// Optional: `static constexpr bool relabels = true` says the output holds the input's values in the same
/// order (reshape, flatten). A model may then skip the layer's `forward` and `backward` and let its output
/// alias its input, and its input gradient alias its output gradient (`detail::relabels_v`).

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "dtrain/core/backend.hpp"
#include "dtrain/core/random.hpp"
#include "dtrain/core/shape.hpp"

namespace dtrain {

/// What a layer sees of the model during one pass.
template <backend B = cpu>
struct layer_context {
  const B& device;
  rng& random;
  bool training = false;
};

/// One trainable variable of a layer: its Keras name and shape.
struct param_spec {
  const char* name;
  std::size_t rank;
  std::array<std::size_t, 4> dims;

  constexpr std::size_t size() const {
    std::size_t s = 1;
    for (std::size_t i = 0; i < rank; ++i) s *= dims[i];
    return s;
  }
};

/// Total parameter count of a bound layer.
template <class B>
inline constexpr std::size_t param_count_v = [] {
  std::size_t s = 0;
  for (const auto& p : B::params) s += p.size();
  return s;
}();

/// The bound layer of spec `L` for input shape `In`.
template <class L, class In>
using bind_t = typename L::template bind<In>;

/// Satisfied by a bound layer that keeps the contract above.
template <class B>
concept layer = requires(B& l, const B& cl, layer_context<cpu>& ctx, rng& r, const float* cx, float* x,
                         std::size_t n, std::span<float> p, std::span<const float> cp, float scale) {
  requires static_shape<typename B::input_shape>;
  requires static_shape<typename B::output_shape>;
  { B::keras_name } -> std::convertible_to<const char*>;
  { B::class_name } -> std::convertible_to<const char*>;
  { B::params.size() } -> std::convertible_to<std::size_t>;
  l.initialize(p, r);
  l.forward(ctx, cx, x, n, cp);
  l.backward(ctx, cx, cx, x, x, n, cp, p);
  { cl.regularization(cp, p, scale) } -> std::convertible_to<float>;
};

namespace detail {

/// True for a bound layer whose output is its input relabelled (see the contract above).
template <class B>
inline constexpr bool relabels_v = [] {
  if constexpr (requires { B::relabels; })
    return static_cast<bool>(B::relabels);
  else
    return false;
}();

/// Runs `f(r0, r1)` on blocks of `rows` rows covering [0, m): spread over the thread budget when the
/// backend offers `for_blocks` (the cpu backend; BLAS calls inside then run on their caller's thread),
/// else one block after another. Blocks write disjoint memory; `f` must not throw.
template <class B, class F>
void for_row_blocks(const B& device, std::size_t m, std::size_t rows, F&& f) {
  const std::size_t blocks = (m + rows - 1) / rows;
  auto run = [&](std::size_t first, std::size_t last) {
    for (std::size_t i = first; i < last; ++i) f(i * rows, std::min(m, (i + 1) * rows));
  };
  if constexpr (requires { device.for_blocks(blocks, run); })
    device.for_blocks(blocks, run);
  else
    run(0, blocks);
}

/// Grows a reusable buffer to at least `n` floats and returns its data.
inline float* ensure(std::vector<float>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

/// A layer without variables or regularizer.
struct no_params {
  static constexpr std::array<param_spec, 0> params{};
  void initialize(std::span<float>, rng&) {}
  float regularization(std::span<const float>, std::span<float>, float) const { return 0.0f; }
};

/// Glorot (Xavier) uniform: U(-l, l) with l = sqrt(6 / (fan_in + fan_out)), Keras' default kernel init.
inline void glorot_uniform(std::span<float> w, std::size_t fan_in, std::size_t fan_out, rng& r) {
  const float limit = std::sqrt(6.0f / static_cast<float>(fan_in + fan_out));
  for (auto& v : w) v = r.uniform(-limit, limit);
}

/// Picks the first option in `Os...` satisfying `Pred`, else `Default`.
template <template <class> class Pred, class Default, class... Os>
struct find_option {
  using type = Default;
};
template <template <class> class Pred, class Default, class O, class... Os>
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
