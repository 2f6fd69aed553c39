#pragma once
/// \file
/// `input<D...>`: the per-sample input shape, first in every `sequential` (Keras `keras.Input(shape=...)`).

#include "dtrain/core/shape.hpp"

namespace dtrain {

template <std::size_t... D>
struct input {
  static_assert(sizeof...(D) > 0, "input: give at least one extent, e.g. input<784>");
  static_assert(((D > 0) && ...), "input: every extent must be positive");
  using shape = dtrain::shape<D...>;
};

namespace detail {
template <class T>
struct is_input : std::false_type {};
template <std::size_t... D>
struct is_input<input<D...>> : std::true_type {};
}  // namespace detail

}  // namespace dtrain
