#pragma once
/// \file
/// Regularizers, given to `dense`, `conv2d` and `conv2d_transpose` as options: of the kernel as is
/// (`dense<64, relu, l2<0.01f>>`, Keras' `kernel_regularizer`), of the bias wrapped
/// (`bias_regularizer<l1<0.01f>>`), of the layer's output wrapped (`activity_regularizer<l2<0.01f>>`: its
/// penalty divided by the batch's rows, as Keras 3 divides it). The penalty is what Keras adds to
/// `model.losses`; training adds it to the loss (divided by the number of replicas under a strategy, as
/// TF's `scale_regularization_loss` does).
///
/// Regularizer contract: `apply(device, n, w, g, scale, penalty)` adds the penalty of the `n` weights `w`
/// to `penalty[0]` and, when `g` is not null, `scale` times its gradient to `g`; `active` is false for
/// the one that does nothing.

#include <cstddef>
#include <type_traits>

#include "dtrain/backend/backend.hpp"
#include "dtrain/layers/concepts.hpp"

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
  static constexpr const char* class_name = "L2";
  template <class C>
  static void get_config(C& c) {
    c.set("l2", Factor);
  }
  template <class B, class C, class P>
  static void apply(const B& device, std::size_t n, C w, P g, float scale, P penalty) {
    static_assert(regularization_kernels<B>, "l2: the backend lacks the regularization kernels (regularization_kernels)");
    device.l2(n, Factor, scale, w, g, penalty);
  }
};

/// Keras `regularizers.L1(l1)`: penalty `l1 * sum(|w|)`, gradient `l1 * sign(w)`.
template <float Factor = 0.01f>
struct l1 {
  static_assert(Factor >= 0.0f, "l1: the factor must not be negative");
  static constexpr bool is_regularizer = true;
  static constexpr bool active = true;
  static constexpr float factor = Factor;
  static constexpr const char* class_name = "L1";
  template <class C>
  static void get_config(C& c) {
    c.set("l1", Factor);
  }
  template <class B, class C, class P>
  static void apply(const B& device, std::size_t n, C w, P g, float scale, P penalty) {
    static_assert(regularization_kernels<B>, "l1: the backend lacks the regularization kernels (regularization_kernels)");
    device.l1(n, Factor, scale, w, g, penalty);
  }
};

/// Keras `regularizers.L1L2(l1, l2)`: both penalties (a zero factor's is skipped).
template <float L1 = 0.0f, float L2 = 0.0f>
struct l1_l2 {
  static_assert(L1 >= 0.0f && L2 >= 0.0f, "l1_l2: the factors must not be negative");
  static constexpr bool is_regularizer = true;
  static constexpr bool active = L1 > 0.0f || L2 > 0.0f;
  static constexpr const char* class_name = "L1L2";
  template <class C>
  static void get_config(C& c) {
    c.set("l1", L1);
    c.set("l2", L2);
  }
  template <class B, class C, class P>
  static void apply(const B& device, std::size_t n, C w, P g, float scale, P penalty) {
    if constexpr (L1 > 0.0f) l1<L1>::apply(device, n, w, g, scale, penalty);
    if constexpr (L2 > 0.0f) l2<L2>::apply(device, n, w, g, scale, penalty);
  }
};

namespace detail {
template <class T, class = void>
struct is_regularizer : std::false_type {};
template <class T>
struct is_regularizer<T, std::void_t<decltype(T::is_regularizer)>> : std::true_type {};
}  // namespace detail

/// Keras' `bias_regularizer=`: regularizer R on the layer's bias instead of its kernel.
template <class R>
struct bias_regularizer {
  static_assert(detail::is_regularizer<R>::value, "bias_regularizer<R>: R is a regularizer such as l2<0.01f>");
  static constexpr bool is_bias_regularizer = true;
  using type = R;
};

namespace detail {
template <class T, class = void>
struct is_bias_regularizer : std::false_type {};
template <class T>
struct is_bias_regularizer<T, std::void_t<decltype(T::is_bias_regularizer)>> : std::true_type {};
/// A layer's bias regularizer (no_regularizer when none is given).
template <class... Options>
using bias_regularizer_of = typename find_option<is_bias_regularizer, bias_regularizer<no_regularizer>, Options...>::type::type;
}  // namespace detail

/// Keras' `activity_regularizer=`: regularizer R on the layer's output (after its activation), the
/// penalty of a batch divided by its rows; the model adds it and its gradient in backward.
template <class R>
struct activity_regularizer {
  static_assert(detail::is_regularizer<R>::value, "activity_regularizer<R>: R is a regularizer such as l2<0.01f>");
  static constexpr bool is_activity_regularizer = true;
  using type = R;
};

namespace detail {
template <class T, class = void>
struct is_activity_regularizer : std::false_type {};
template <class T>
struct is_activity_regularizer<T, std::void_t<decltype(T::is_activity_regularizer)>> : std::true_type {};
/// A layer's activity regularizer (no_regularizer when none is given).
template <class... Options>
using activity_regularizer_of =
    typename find_option<is_activity_regularizer, activity_regularizer<no_regularizer>, Options...>::type::type;
/// A bound layer's activity regularizer: its `activity_regularizer` type, else no_regularizer.
template <class L, class = void>
struct activity_of {
  using type = no_regularizer;
};
template <class L>
struct activity_of<L, std::void_t<typename L::activity_regularizer>> {
  using type = typename L::activity_regularizer;
};

/// Writes regularizer R under `key` of a layer's Keras config (None when R is inactive).
template <class R, class C>
void regularizer_config(C& c, const char* key) {
  if constexpr (R::active) {
    auto o = c.object(key, "keras.regularizers", R::class_name);
    R::get_config(o);
  } else {
    c.set(key, nullptr);
  }
}
/// The regularizer entries of a layer with a kernel (Keras' kernel_, bias_ and activity_regularizer).
template <class Kernel, class Bias, class Activity, class C>
void regularizers_config(C& c) {
  regularizer_config<Kernel>(c, "kernel_regularizer");
  regularizer_config<Bias>(c, "bias_regularizer");
  regularizer_config<Activity>(c, "activity_regularizer");
}
}  // namespace detail

}  // namespace dtrain
