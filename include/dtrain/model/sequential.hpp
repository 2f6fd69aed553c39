#pragma once
/// \file
/// `sequential<input<...>, layers...>`: Keras' `Sequential` with every shape fixed at compile time, on
/// the cpu backend; `basic_sequential<B, input<...>, layers...>` is the same model on backend B (what a
/// strategy's `make_model` returns). `functional<input<...>, elements...>` / `basic_functional` is
/// Keras' functional `Model`: named nodes, skip connections and merge layers (model/graph.hpp). Both are
/// `basic_model<B, Graph>` (model/basic_model.hpp): everything works the same for either.

#include "dtrain/backend/cpu.hpp"
#include "dtrain/model/basic_model.hpp"
#include "dtrain/model/graph.hpp"

namespace dtrain {

/// Keras' `Sequential` on backend B: every layer takes the one before it.
template <class B, class Input, class... Specs>
using basic_sequential = basic_model<B, detail::graph<detail::sequential_name, Input, Specs...>>;

/// Keras' `Sequential` on the cpu backend: `sequential<input<28, 28>, flatten, dense<10>>`.
template <class Input, class... Specs>
using sequential = basic_sequential<cpu, Input, Specs...>;

/// Keras' functional `Model` on backend B: `input<...>` then layer specs, `node<Tag, Spec, From...>` and
/// `block<...>`s of them (model/graph.hpp).
template <class B, class Input, class... Elements>
using basic_functional =
    basic_model<B, typename detail::spliced_graph<detail::functional_name, Input, std::tuple<>, Elements...>::type>;

/// Keras' functional `Model` on the cpu backend.
template <class Input, class... Elements>
using functional = basic_functional<cpu, Input, Elements...>;

}  // namespace dtrain
