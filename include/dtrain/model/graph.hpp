#pragma once
/// \file
/// The layer graph of a model, fixed at compile time. A model is an input and a list of elements in
/// order; each element is a layer spec, which takes the element before it (the input, for the first),
/// or a `node<Tag, Spec, From...>`, which names its output `Tag` and takes the outputs named `From...`
/// (`model_input` is the input; no `From` means the element before it). The last element is the model's
/// output. A `sequential` is a graph of plain specs; `functional` adds the names, so skip connections and
/// merge layers (`add`, `multiply`, `concatenate`) can take several earlier outputs, as Keras'
/// functional API does:
///
///     // x = Conv2D(16, 3, padding="same", activation="relu")(inputs)
///     // y = Conv2D(16, 3, padding="same")(x)
///     // outputs = Dense(10)(GlobalAveragePooling2D()(Add()([x, y])))
///     struct x; struct y;
///     using model = functional<input<28, 28, 1>, node<x, conv2d<16, 3, relu, padding::same>>,
///                              node<y, conv2d<16, 3, linear, padding::same>>, node<void, add, x, y>,
///                              global_average_pooling2d<>, dense<10>>;
///
/// Binding checks the graph with `static_assert`s that say what is wrong: a name taken before it is
/// defined (a cycle, or a reference forward), a name no node defines (a dangling reference), a node whose
/// output nothing takes, and every layer's shapes (a merge of mismatched shapes among them).

#include <array>
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "dtrain/layers/concepts.hpp"
#include "dtrain/layers/input.hpp"

namespace dtrain {

/// A graph element with a name and explicit inputs (see the file comment). `Tag` may be `void` for a
/// node nothing refers to by name.
template <class Tag, class Spec, class... From>
struct node {};

/// The name of a model's input, for a node that takes it explicitly.
struct model_input;

namespace detail {

/// A merge layer's spec (`merge`).
template <class T>
inline constexpr bool is_merge_v = requires { T::merge; };

/// An element's name, spec and named inputs (`From...`; none: the element before it).
template <class E, std::size_t I>
struct element {
  struct anonymous;  // unique per position
  using tag = anonymous;
  using spec = E;
  using from = std::tuple<>;
};
template <class Tag, class Spec, class... From, std::size_t I>
struct element<node<Tag, Spec, From...>, I> {
  struct anonymous;
  using tag = std::conditional_t<std::is_void_v<Tag>, anonymous, Tag>;
  using spec = Spec;
  using from = std::tuple<From...>;
};

/// Position of `T` among `Ts...` (sizeof...(Ts) when absent).
template <class T, class... Ts>
constexpr std::size_t position_of() {
  constexpr bool same[] = {std::is_same_v<T, Ts>..., false};
  for (std::size_t i = 0; i < sizeof...(Ts); ++i)
    if (same[i]) return i;
  return sizeof...(Ts);
}

/// Where node `I` takes input `From` from: 0 for the model's input, j + 1 for node j's output.
template <std::size_t I, class From, class... Tags>
constexpr std::size_t source_of() {
  if constexpr (std::is_same_v<From, model_input>) {
    return 0;
  } else {
    constexpr std::size_t at = position_of<From, Tags...>();
    static_assert(at < sizeof...(Tags), "functional: a node takes an input that no node of the model is named "
                                        "(a dangling reference: name it with node<Tag, ...>)");
    static_assert(at < I, "functional: a node takes the output of a node defined after it (a cycle, or a "
                          "forward reference: list nodes in the order they compute)");
    return at + 1;
  }
}

/// The sources of element I (one per input).
template <std::size_t I, class From, class... Tags>
struct sources_of;
template <std::size_t I, class... Tags>
struct sources_of<I, std::tuple<>, Tags...> {
  // the element before: source I is node I - 1's output (the input for I = 0)
  static constexpr std::array<std::size_t, 1> value{I};
};
template <std::size_t I, class... From, class... Tags>
struct sources_of<I, std::tuple<From...>, Tags...> {
  static constexpr std::array<std::size_t, sizeof...(From)> value{source_of<I, From, Tags...>()...};
};

/// Binds elements in order: node I's input shapes are its sources' output shapes (the model input's for
/// source 0).
template <class B, class In, class Bound, class Srcs, class Specs>
struct bind_nodes {
  using type = Bound;
};
template <class B, class In, class... Bound, class Src, class... Srcs, class Spec, class... Specs>
struct bind_nodes<B, In, std::tuple<Bound...>, std::tuple<Src, Srcs...>, std::tuple<Spec, Specs...>> {
  template <std::size_t S>
  using shape_of = typename std::tuple_element_t<S, std::tuple<In, typename Bound::output_shape...>>;
  static constexpr auto src = Src::value;
  static auto bind_one() {
    if constexpr (is_merge_v<Spec>) {
      return [&]<std::size_t... K>(std::index_sequence<K...>) {
        return std::type_identity<typename Spec::template bind_merge<B, shape_of<src[K]>...>>{};
      }(std::make_index_sequence<src.size()>{});
    } else {
      static_assert(src.size() == 1, "functional: this layer takes one input; merge layers (add, multiply, "
                                     "concatenate) take several");
      return std::type_identity<bind_t<Spec, shape_of<src[0]>, B>>{};
    }
  }
  using head = typename decltype(bind_one())::type;
  static_assert(is_merge_v<Spec> ? merge_layer<head, B> : layer<head, B>,
                "functional: this layer does not keep the layer contract of dtrain/layers/concepts.hpp");
  using type = typename bind_nodes<B, In, std::tuple<Bound..., head>, std::tuple<Srcs...>, std::tuple<Specs...>>::type;
};

template <class S>
struct source_list {
  static constexpr auto value = S::value;
};

/// The graph of a model: `Input`, then `Elements...` (plain specs or `node<...>`); `Name` is Keras' model
/// name ("sequential", "functional").
template <const char* Name, class Input, class... Elements>
struct graph {
  static_assert(detail::is_input<Input>::value,
                "model: the first template argument must be dtrain::input<...> (Keras: keras.Input(shape=...))");
  static_assert(sizeof...(Elements) > 0, "model: add at least one layer after the input");
  static constexpr const char* name = Name;
  static constexpr std::size_t depth = sizeof...(Elements);
  using input_shape = typename Input::shape;

 private:
  template <class Seq>
  struct with_positions;
  template <std::size_t... I>
  struct with_positions<std::index_sequence<I...>> {
    using elements = std::tuple<element<Elements, I>...>;
    using specs = std::tuple<typename element<Elements, I>::spec...>;
    using sources = std::tuple<source_list<sources_of<I, typename element<Elements, I>::from,
                                                      typename element<Elements, I>::tag...>>...>;
  };
  using positioned = with_positions<std::make_index_sequence<depth>>;

 public:
  /// The bound layers on backend B, in order.
  template <class B>
  using layers = typename bind_nodes<B, input_shape, std::tuple<>, typename positioned::sources,
                                     typename positioned::specs>::type;
  /// Node I's sources (0: the input, j + 1: node j's output), one per input.
  template <std::size_t I>
  static constexpr auto sources = std::tuple_element_t<I, typename positioned::sources>::value;

  /// How many inputs take each source's output (the last node's is the model's output: counted once).
  static constexpr std::array<std::size_t, depth + 1> consumers = [] {
    std::array<std::size_t, depth + 1> c{};
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((
           [&] {
             for (std::size_t s : sources<I>) ++c[s];
           }()),
       ...);
    }(std::make_index_sequence<depth>{});
    ++c[depth];
    return c;
  }();
  static_assert([] {
    for (std::size_t s = 1; s <= depth; ++s)
      if (consumers[s] == 0) return false;
    return true;
  }(), "functional: a node's output is taken by no later node and is not the model's output (a dangling node)");
};

inline constexpr char sequential_name[] = "sequential";
inline constexpr char functional_name[] = "functional";

}  // namespace detail
}  // namespace dtrain
