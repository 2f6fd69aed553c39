#pragma once
/// \file
/// Keras' merge layers, for functional models (model/graph.hpp): `add` and `multiply` (element by
/// element, every input of the same shape) and `concatenate` (along the last axis, the other axes
/// equal). A merge spec declares `merge` and binds with `bind_merge<B, In...>` to its inputs' shapes;
/// the bound layer keeps `merge_layer` (layers/concepts.hpp: inputs and their gradients as arrays).

#include <array>
#include <cstddef>

#include "dtrain/layers/concepts.hpp"

namespace dtrain {

namespace detail {

/// What every bound merge layer shares: no parameters, `arity` inputs of shapes `In...`.
template <class B, class... In>
struct merge_base : no_params {
  static_assert(sizeof...(In) >= 2, "merge layers (add, multiply, concatenate) take at least two inputs");
  static constexpr std::size_t arity = sizeof...(In);
  using ptr = pointer_t<B, float>;
  using cptr = pointer_t<B, const float>;
  using inputs = std::array<cptr, arity>;
  using input_gradients = std::array<ptr, arity>;
};

template <class S, class... T>
inline constexpr bool all_same_v = (std::is_same_v<S, T> && ...);

}  // namespace detail

/// Keras `layers.Add()`: the sum of its inputs.
struct add {
  static constexpr bool merge = true;
  template <class B, class In, class... More>
  struct bind_merge : detail::merge_base<B, In, More...> {
    static_assert(detail::all_same_v<In, More...>, "add: every input must have the same shape");
    using base = detail::merge_base<B, In, More...>;
    using output_shape = In;
    static constexpr const char* keras_name = "add";
    static constexpr bool supports_masking = true;
    static constexpr const char* class_name = "Add";
    template <class C>
    static void get_config(C&) {}

    void forward(layer_context<B>& ctx, const typename base::inputs& xs, typename base::ptr y, std::size_t n,
                 typename base::cptr) {
      ctx.device.copy(n * In::size, xs[0], y);
      for (std::size_t k = 1; k < base::arity; ++k) ctx.device.axpy(n * In::size, 1.0f, xs[k], y);
    }
    void backward(layer_context<B>& ctx, const typename base::inputs&, typename base::cptr, typename base::ptr dy,
                  const typename base::input_gradients& dxs, std::size_t n, typename base::cptr, typename base::ptr) {
      for (const auto& dx : dxs)
        if (dx) ctx.device.copy(n * In::size, dy, dx);
    }
  };
};

/// Keras `layers.Multiply()`: the element-wise product of its inputs.
struct multiply {
  static constexpr bool merge = true;
  template <class B, class In, class... More>
  struct bind_merge : detail::merge_base<B, In, More...> {
    static_assert(detail::all_same_v<In, More...>, "multiply: every input must have the same shape");
    using base = detail::merge_base<B, In, More...>;
    using output_shape = In;
    static constexpr const char* keras_name = "multiply";
    static constexpr bool supports_masking = true;
    static constexpr const char* class_name = "Multiply";
    template <class C>
    static void get_config(C&) {}

    void forward(layer_context<B>& ctx, const typename base::inputs& xs, typename base::ptr y, std::size_t n,
                 typename base::cptr) {
      ctx.device.multiply(n * In::size, xs[0], xs[1], y);
      for (std::size_t k = 2; k < base::arity; ++k) ctx.device.multiply(n * In::size, y, xs[k], y);
    }
    /// dx_k = dy times every other input.
    void backward(layer_context<B>& ctx, const typename base::inputs& xs, typename base::cptr, typename base::ptr dy,
                  const typename base::input_gradients& dxs, std::size_t n, typename base::cptr, typename base::ptr) {
      for (std::size_t k = 0; k < base::arity; ++k) {
        if (!dxs[k]) continue;
        ctx.device.copy(n * In::size, dy, dxs[k]);
        for (std::size_t j = 0; j < base::arity; ++j)
          if (j != k) ctx.device.multiply(n * In::size, dxs[k], xs[j], dxs[k]);
      }
    }
  };
};

/// Keras `layers.Concatenate(axis=-1)`: the inputs side by side along the last axis.
struct concatenate {
  static constexpr bool merge = true;
  template <class B, class In, class... More>
  struct bind_merge : detail::merge_base<B, In, More...> {
    static_assert(((In::rank == More::rank) && ...), "concatenate: every input must have the same rank");
    static constexpr std::size_t rank = In::rank;
    static_assert([] {
      bool same = true;
      for (std::size_t d = 0; d + 1 < rank; ++d) same = same && ((In::dims[d] == More::dims[d]) && ...);
      return same;
    }(), "concatenate: the inputs' shapes must match except along the last axis");
    using base = detail::merge_base<B, In, More...>;
    static constexpr std::array<std::size_t, base::arity> widths{In::dims[rank - 1], More::dims[rank - 1]...};
    static constexpr std::size_t width = (In::dims[rank - 1] + ... + More::dims[rank - 1]);
    using output_shape = typename detail::replace_last<In, width>::type;
    static constexpr std::size_t rows_per_sample = In::size / In::dims[rank - 1];
    static constexpr const char* keras_name = "concatenate";
    static constexpr bool supports_masking = true;
    static constexpr const char* class_name = "Concatenate";
    template <class C>
    static void get_config(C& c) {
      c.set("axis", -1);
    }

    void forward(layer_context<B>& ctx, const typename base::inputs& xs, typename base::ptr y, std::size_t n,
                 typename base::cptr) {
      std::size_t at = 0;
      for (std::size_t k = 0; k < base::arity; at += widths[k++])
        ctx.device.copy_columns(n * rows_per_sample, widths[k], xs[k], widths[k], y + at, width);
    }
    void backward(layer_context<B>& ctx, const typename base::inputs&, typename base::cptr, typename base::ptr dy,
                  const typename base::input_gradients& dxs, std::size_t n, typename base::cptr, typename base::ptr) {
      std::size_t at = 0;
      for (std::size_t k = 0; k < base::arity; at += widths[k++])
        if (dxs[k])
          ctx.device.copy_columns(n * rows_per_sample, widths[k], typename base::cptr(dy + at), width, dxs[k],
                                  widths[k]);
    }
  };
};

}  // namespace dtrain
