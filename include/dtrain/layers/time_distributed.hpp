#pragma once
/// \file
/// `time_distributed<L>`: Keras `layers.TimeDistributed(layer)`, layer L applied to every step of a
/// sequence with the same weights: an input (steps, ...) is L's input shape behind a leading axis of
/// steps, and the output is L's output at every step, (steps, L's output). A batch of n sequences is L's
/// batch of n * steps rows (the steps of a sample lie one after another), so L runs once on all of them.
/// Keras keeps L's variables under the wrapper's `layer` (layers/time_distributed/layer/vars/0).

#include <utility>

#include "dtrain/layers/concepts.hpp"

namespace dtrain {

namespace detail {
template <class S, class Seq = std::make_index_sequence<S::rank - 1>>
struct drop_first;
template <class S, std::size_t... I>
struct drop_first<S, std::index_sequence<I...>> {
  using type = shape<S::dims[I + 1]...>;
};
template <std::size_t First, class S, class Seq = std::make_index_sequence<S::rank>>
struct prepend;
template <std::size_t First, class S, std::size_t... I>
struct prepend<First, S, std::index_sequence<I...>> {
  using type = shape<First, S::dims[I]...>;
};
}  // namespace detail

template <class L>
struct time_distributed {
  static_assert(!requires { L::merge; }, "time_distributed: merge layers (add, multiply, concatenate) are not supported");

  template <class In, class B>
  struct bind : bind_t<L, typename detail::drop_first<In>::type, B> {
    static_assert(In::rank >= 2, "time_distributed expects a sequence: an input of rank 2 or more (steps, ...)");
    using base = bind_t<L, typename detail::drop_first<In>::type, B>;
    using ptr = pointer_t<B, float>;
    using cptr = pointer_t<B, const float>;
    static constexpr std::size_t steps = In::dims[0];
    using input_shape = In;
    using output_shape = typename detail::prepend<steps, typename base::output_shape>::type;
    static constexpr const char* keras_name = "time_distributed";
    // the steps' mask passes the wrapper; L sees none (its own traits do not apply: its rows are frames)
    static constexpr bool supports_masking = true, keeps_mask = true, makes_mask = false;
    static constexpr const char* class_name = "TimeDistributed";
    static constexpr const char* keras_sublayer = "layer";  // where Keras keeps L's variables
    static constexpr bool relabels = false;

    template <class C>
    static void get_config(C& c) {
      auto inner = c.object("layer", "keras.layers", base::class_name);
      base::get_config(inner);
    }
    void forward(layer_context<B>& ctx, cptr x, ptr y, std::size_t n, cptr p) {
      const auto masks = std::exchange(ctx.masks, {});
      base::forward(ctx, x, y, n * steps, p);
      ctx.masks = masks;
    }
    void backward(layer_context<B>& ctx, cptr x, cptr y, ptr dy, ptr dx, std::size_t n, cptr p, ptr g) {
      const auto masks = std::exchange(ctx.masks, {});
      base::backward(ctx, x, y, dy, dx, n * steps, p, g);
      ctx.masks = masks;
    }
  };
};

}  // namespace dtrain
