#pragma once
/// \file
/// Kernel regularizers, given to `dense` / `conv2d` as an option: `dense<64, relu, l2<0.01f>>`.
/// The penalty is what Keras adds to `model.losses`; training adds it to the loss (divided by the
/// number of replicas under a strategy, as `scale_regularization_loss` does in the seeds).

#include <span>
#include <type_traits>

namespace dtrain {

/// No penalty (the default).
struct no_regularizer {
  static constexpr bool is_regularizer = true;
  static constexpr bool active = false;
  static float apply(std::span<const float>, std::span<float>, float) { return 0.0f; }
};

/// Keras `regularizers.L2(l2)`: penalty `l2 * sum(w^2)`, gradient `2 * l2 * w`.
template <float Factor = 0.01f>
struct l2 {
  static_assert(Factor >= 0.0f, "l2: the factor must not be negative");
  static constexpr bool is_regularizer = true;
  static constexpr bool active = true;
  static constexpr float factor = Factor;
  /// Returns the penalty and adds `scale` times its gradient to `grads`.
  static float apply(std::span<const float> w, std::span<float> grads, float scale) {
    double s = 0.0;
    for (std::size_t i = 0; i < w.size(); ++i) {
      s += static_cast<double>(w[i]) * w[i];
      grads[i] += scale * 2.0f * Factor * w[i];
    }
    return static_cast<float>(Factor * s);
  }
};

namespace detail {
template <class T, class = void>
struct is_regularizer : std::false_type {};
template <class T>
struct is_regularizer<T, std::void_t<decltype(T::is_regularizer)>> : std::true_type {};
}  // namespace detail

}  // namespace dtrain
