#pragma once
/// \file
/// `reshape<D...>` and `flatten`: new per-sample shape, same values in the same (row-major) order.
/// They declare `relabels`, so `sequential` lets their output alias their input (no copy either way);
/// `forward` and `backward` copy for callers that use the layer on its own.

#include "dtrain/layers/concepts.hpp"

namespace dtrain {

namespace detail {
template <class In, class Out, class B, const char* Name, const char* Class>
struct relabel_layer : no_params {
  using input_shape = In;
  using output_shape = Out;
  using ptr = pointer_t<B, float>;
  using cptr = pointer_t<B, const float>;
  static constexpr const char* keras_name = Name;
  static constexpr const char* class_name = Class;
  static constexpr bool relabels = true;
  template <class C>
  static void get_config(C& c) {  // Flatten's (Reshape has its own)
    c.set("data_format", "channels_last");
  }
  void forward(layer_context<B>& ctx, cptr x, ptr y, std::size_t n, cptr) { ctx.device.copy(n * In::size, x, y); }
  void backward(layer_context<B>& ctx, cptr, cptr, ptr dy, ptr dx, std::size_t n, cptr, ptr) {
    if (dx) ctx.device.copy(n * In::size, dy, dx);
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
  template <class In, class B>
  struct bind : detail::relabel_layer<In, shape<D...>, B, detail::reshape_name, detail::reshape_class> {
    static_assert(shape<D...>::size == In::size,
                  "reshape: the target shape must hold exactly as many values as the layer's input");
    template <class C>
    static void get_config(C& c) {
      c.set("target_shape", std::array<std::size_t, sizeof...(D)>{D...});
    }
  };
};

/// Keras `layers.Flatten()`: (h, w, c) becomes (h * w * c).
struct flatten {
  template <class In, class B>
  using bind = detail::relabel_layer<In, shape<In::size>, B, detail::flatten_name, detail::flatten_class>;
};

}  // namespace dtrain
