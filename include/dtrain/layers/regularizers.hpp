#pragma once
/// \file
/// Kernel regularizers, given to `dense` / `conv2d` as an option: `dense<64, relu, l2<0.01f>>`.
/// The penalty is what Keras adds to `model.losses`; training adds it to the loss (divided by the
/// number of replicas under a strategy, as TF's `scale_regularization_loss` does).
///
/// Regularizer contract: `apply(device, n, w, g, scale, penalty)` adds the penalty of the `n` weights `w`
/// to `penalty[0]` and, when `g` is not null, `scale` times its gradient to `g`; `active` is false for
/// the one that does nothing.

#include <cstddef>
#include <type_traits>

#include "dtrain/backend/backend.hpp"

namespace dtrain {

/// No penalty (the default).
struct no_regularizer {
  static constexpr bool is_regularizer = true;
  static constexpr bool active = false;
  template <class B, class C, class P>
  static void apply(const B&, std::size_t, C, P, float, P) {}
};

/// Keras `regularizers.L2(l2)`: penalty `l2 * sum(w^2)`, gradient `2 * l2 * w`.
template <float Factor = 0.01f>
struct l2 {
  static_assert(Factor >= 0.0f, "l2: the factor must not be negative");
  static constexpr bool is_regularizer = true;
  static constexpr bool active = true;
  static constexpr float factor = Factor;
  template <class B, class C, class P>
  static void apply(const B& device, std::size_t n, C w, P g, float scale, P penalty) {
    static_assert(regularization_kernels<B>, "l2: the backend lacks the regularization kernels (regularization_kernels)");
    device.l2(n, Factor, scale, w, g, penalty);
  }
};

namespace detail {
template <class T, class = void>
struct is_regularizer : std::false_type {};
template <class T>
struct is_regularizer<T, std::void_t<decltype(T::is_regularizer)>> : std::true_type {};
}  // namespace detail

}  // namespace dtrain
