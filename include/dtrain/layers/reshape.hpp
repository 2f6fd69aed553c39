#pragma once
/// \file
/// `reshape<D...>` and `flatten`: new per-sample shape, same values in the same (row-major) order.
/// They declare `relabels`, so `sequential` lets their output alias their input (no copy either way);
/// `forward` and `backward` copy for callers that use the layer on its own.

#include <cstring>

#include "dtrain/layers/concepts.hpp"

namespace dtrain {

namespace detail {
template <class In, class Out, const char* Name, const char* Class>
struct relabel_layer : no_params {
  using input_shape = In;
  using output_shape = Out;
  static constexpr const char* keras_name = Name;
  static constexpr const char* class_name = Class;
  static constexpr bool relabels = true;
  template <class Ctx>
  void forward(Ctx&, const float* x, float* y, std::size_t n, std::span<const float>) {
    std::memcpy(y, x, n * In::size * sizeof(float));
  }
  template <class Ctx>
  void backward(Ctx&, const float*, const float*, float* dy, float* dx, std::size_t n, std::span<const float>,
                std::span<float>) {
    if (dx) std::memcpy(dx, dy, n * In::size * sizeof(float));
  }
};
inline constexpr char reshape_name[] = "reshape";
inline constexpr char reshape_class[] = "Reshape";
inline constexpr char flatten_name[] = "flatten";
inline constexpr char flatten_class[] = "Flatten";
}  // namespace detail

/// Keras `layers.Reshape(target_shape)`.
template <std::size_t... D>
struct reshape {
  template <class In>
  struct bind : detail::relabel_layer<In, shape<D...>, detail::reshape_name, detail::reshape_class> {
    static_assert(shape<D...>::size == In::size,
                  "reshape: the target shape must hold exactly as many values as the layer's input");
  };
};

/// Keras `layers.Flatten()`: (h, w, c) becomes (h * w * c).
struct flatten {
  template <class In>
  using bind = detail::relabel_layer<In, shape<In::size>, detail::flatten_name, detail::flatten_class>;
};

}  // namespace dtrain
