#pragma once
/// \file
/// The layer graph of a model, fixed at compile time. A model is its inputs and a list of elements in
/// order; each element is a layer spec, which takes the element before it (the first input, for the
/// first), or a `node<Tag, Spec, From...>`, which names its output `Tag` and takes the outputs named
/// `From...` (`model_input` is the input of a one-input model; no `From` means the element before it).
/// The last element is the model's output, unless it is `outputs<Tags...>`, which lists them. A
/// `sequential` is a graph of plain specs; `functional` adds the names, so skip connections and merge
/// layers (`add`, `multiply`, `concatenate`) can take several earlier outputs, as Keras' functional
/// API does:
///
///     // x = Conv2D(16, 3, padding="same", activation="relu")(inputs)
///     // y = Conv2D(16, 3, padding="same")(x)
///     // outputs = Dense(10)(GlobalAveragePooling2D()(Add()([x, y])))
///     struct x; struct y;
///     using model = functional<input<28, 28, 1>, node<x, conv2d<16, 3, relu, padding::same>>,
///                              node<y, conv2d<16, 3, linear, padding::same>>, node<void, add, x, y>,
///                              global_average_pooling2d<>, dense<10>>;
///
/// Several inputs are `inputs<node<Tag, input<...>>...>` in the input's place, and several outputs
/// `outputs<Tags...>` last (Keras: `keras.Model(inputs=[image, meta], outputs=[label, score])`):
///
///     using model = functional<inputs<node<image, input<28, 28, 1>>, node<meta, input<4>>>,
///                              flatten, node<f, dense<32, relu>>, node<j, concatenate, f, meta>,
///                              node<label, dense<10>>, node<score, dense<1>, j>, outputs<label, score>>;
///
/// Binding checks the graph with `static_assert`s that say what is wrong: a name taken before it is
/// defined (a cycle, or a reference forward), a name no node defines (a dangling reference), a node whose
/// output nothing takes, an input nothing takes, and every layer's shapes (a merge of mismatched shapes
/// among them).

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

/// A run of graph elements spliced into the model in its place (blocks nest): what a Python function
/// that adds a few layers is to a Keras model, so a repeated piece is written once:
///
///     template <class In, class Out>  // a residual block from the output named In to one named Out
///     using residual = block<conv2d<16, 3, relu, padding::same>, node<Out, conv2d<16, 3, linear, padding::same>>,
///                            node<void, add, In, Out>>;
template <class... Elements>
struct block {};

/// The name of a one-input model's input, for a node that takes it explicitly.
struct model_input;

/// A model's several inputs, in the order its batches give them: `inputs<node<Tag, input<...>>...>`.
template <class... Named>
struct inputs {};

/// A model's several outputs, by name, in the order its predictions and targets list them (last element).
template <class... Tags>
struct outputs {};

namespace detail {

/// A merge layer's spec (`merge`).
template <class T>
inline constexpr bool is_merge_v = requires { T::merge; };
/// Whether a node of `Sources` sources binds its spec as a merge layer: a merge spec always, one that
/// takes one input or several (`optional_merge`: multi_head_attention's self- and cross-attention) when
/// it has several.
template <class T, std::size_t Sources>
inline constexpr bool binds_merge_v = is_merge_v<T> || (Sources > 1 && requires { T::optional_merge; });

/// The model's inputs: their names and shapes (one unnamed input: `model_input`).
template <class In>
struct input_list {
  static_assert(is_input<In>::value, "model: the first template argument must be dtrain::input<...> (Keras: "
                                     "keras.Input(shape=...)) or inputs<node<Tag, input<...>>...>");
  using tags = std::tuple<model_input>;
  using shapes = std::tuple<typename In::shape>;
};
template <class... Tags, class... Ins>
struct input_list<inputs<node<Tags, Ins>...>> {
  static_assert(sizeof...(Ins) > 0, "inputs: list at least one node<Tag, input<...>>");
  static_assert((is_input<Ins>::value && ...), "inputs: each input is node<Tag, input<...>>");
  static_assert((!std::is_void_v<Tags> && ...), "inputs: name each input (node<Tag, input<...>>, Tag not void)");
  using tags = std::tuple<Tags...>;
  using shapes = std::tuple<typename Ins::shape...>;
};
template <class... Other>
struct input_list<inputs<Other...>> {
  static_assert(sizeof...(Other) < 0, "inputs: each input is node<Tag, input<...>> (Keras: keras.Input(shape=..., "
                                      "name=...))");
};

template <class T>
struct is_outputs : std::false_type {};
template <class... Tags>
struct is_outputs<outputs<Tags...>> : std::true_type {};

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

/// Where node `I` takes input `From` from: k < K for input k (of K), K + j for node j's output.
template <std::size_t I, class From, class InTags, class... Tags>
struct source_of;
template <std::size_t I, class From, class... InTags, class... Tags>
struct source_of<I, From, std::tuple<InTags...>, Tags...> {
  static constexpr std::size_t value = [] {
    constexpr std::size_t k = position_of<From, InTags...>();
    if constexpr (k < sizeof...(InTags)) {
      return k;
    } else {
      static_assert(!std::is_same_v<From, model_input>,
                    "functional: model_input names the input of a one-input model; a model of several inputs "
                    "names each (inputs<node<Tag, input<...>>...>)");
      constexpr std::size_t at = position_of<From, Tags...>();
      static_assert(at < sizeof...(Tags), "functional: a node takes an input that no node of the model is named "
                                          "(a dangling reference: name it with node<Tag, ...>)");
      static_assert(at < I, "functional: a node takes the output of a node defined after it (a cycle, or a "
                            "forward reference: list nodes in the order they compute)");
      return sizeof...(InTags) + at;
    }
  }();
};

/// The sources of element I (one per input) in a graph of K inputs.
template <std::size_t I, std::size_t K, class From, class InTags, class... Tags>
struct sources_of;
template <std::size_t I, std::size_t K, class InTags, class... Tags>
struct sources_of<I, K, std::tuple<>, InTags, Tags...> {
  // the element before: node I - 1's output (the first input for I = 0)
  static constexpr std::array<std::size_t, 1> value{I == 0 ? 0 : K + I - 1};
};
template <std::size_t I, std::size_t K, class... From, class InTags, class... Tags>
struct sources_of<I, K, std::tuple<From...>, InTags, Tags...> {
  static constexpr std::array<std::size_t, sizeof...(From)> value{source_of<I, From, InTags, Tags...>::value...};
};

/// Binds elements in order: node I's input shapes are its sources' output shapes (the inputs' first).
template <class B, class Ins, class Bound, class Srcs, class Specs>
struct bind_nodes {
  using type = Bound;
};
template <class B, class... Ins, class... Bound, class Src, class... Srcs, class Spec, class... Specs>
struct bind_nodes<B, std::tuple<Ins...>, std::tuple<Bound...>, std::tuple<Src, Srcs...>, std::tuple<Spec, Specs...>> {
  template <std::size_t S>
  using shape_of = typename std::tuple_element_t<S, std::tuple<Ins..., typename Bound::output_shape...>>;
  static constexpr auto src = Src::value;
  static auto bind_one() {
    if constexpr (binds_merge_v<Spec, src.size()>) {
      return [&]<std::size_t... K>(std::index_sequence<K...>) {
        return std::type_identity<typename Spec::template bind_merge<B, shape_of<src[K]>...>>{};
      }(std::make_index_sequence<src.size()>{});
    } else {
      static_assert(src.size() == 1, "functional: this layer takes one input; merge layers (add, multiply, concatenate) and "
                                     "multi_head_attention take several");
      return std::type_identity<bind_t<Spec, shape_of<src[0]>, B>>{};
    }
  }
  using head = typename decltype(bind_one())::type;
  static_assert(binds_merge_v<Spec, src.size()> ? merge_layer<head, B> : layer<head, B>,
                "this layer does not keep the layer contract of dtrain/layers/concepts.hpp");
  using type = typename bind_nodes<B, std::tuple<Ins...>, std::tuple<Bound..., head>, std::tuple<Srcs...>,
                                   std::tuple<Specs...>>::type;
};

template <class S>
struct source_list {
  static constexpr auto value = S::value;
};

/// The nodes that are the model's outputs: `outputs<Tags...>`'s, or the last node.
template <class Last, std::size_t Depth, class... Tags>
struct output_list {
  static constexpr std::array<std::size_t, 1> value{Depth - 1};
};
template <class... Out, std::size_t Depth, class... Tags>
struct output_list<outputs<Out...>, Depth, Tags...> {
  static_assert(sizeof...(Out) > 0, "outputs: name at least one node");
  static_assert(((position_of<Out, Tags...>() < sizeof...(Tags)) && ...),
                "outputs: a name no node of the model has (name the output nodes with node<Tag, ...>)");
  static constexpr std::array<std::size_t, sizeof...(Out)> value{position_of<Out, Tags...>()...};
  static_assert([] {
    for (std::size_t i = 0; i < value.size(); ++i)
      for (std::size_t j = 0; j < i; ++j)
        if (value[i] == value[j]) return false;
    return true;
  }(), "outputs: a node is listed twice");
};

/// The graph of a model: `Input` (`input<...>` or `inputs<...>`), then `Elements...` (plain specs or
/// `node<...>`, perhaps `outputs<...>` last); `Name` is Keras' model name ("sequential", "functional").
template <const char* Name, class Input, class... Elements>
struct graph {
  static constexpr const char* name = Name;
  using input_tags = typename input_list<Input>::tags;
  using input_shapes = typename input_list<Input>::shapes;
  /// How many inputs the model takes (K); sources k < K are the inputs, K + j node j's output.
  static constexpr std::size_t num_inputs = std::tuple_size_v<input_shapes>;
  using input_shape = std::tuple_element_t<0, input_shapes>;

 private:
  using all = std::tuple<Elements...>;
  static constexpr bool listed_outputs = [] {
    if constexpr (sizeof...(Elements) == 0) return false;
    else return is_outputs<std::tuple_element_t<sizeof...(Elements) - 1, all>>::value;
  }();

 public:
  static constexpr std::size_t depth = sizeof...(Elements) - (listed_outputs ? 1 : 0);
  static_assert(depth > 0, "model: add at least one layer after the input");

 private:
  template <class Seq>
  struct with_positions;
  template <std::size_t... I>
  struct with_positions<std::index_sequence<I...>> {
    template <std::size_t J>
    using at = element<std::tuple_element_t<J, all>, J>;
    using specs = std::tuple<typename at<I>::spec...>;
    using sources = std::tuple<
        source_list<sources_of<I, num_inputs, typename at<I>::from, input_tags, typename at<I>::tag...>>...>;
    using outs = output_list<std::tuple_element_t<sizeof...(Elements) - 1, all>, depth, typename at<I>::tag...>;
  };
  using positioned = with_positions<std::make_index_sequence<depth>>;

 public:
  /// The bound layers on backend B, in order.
  template <class B>
  using layers = typename bind_nodes<B, input_shapes, std::tuple<>, typename positioned::sources,
                                     typename positioned::specs>::type;
  /// Node I's sources (k < K: input k, K + j: node j's output), one per input.
  template <std::size_t I>
  static constexpr auto sources = std::tuple_element_t<I, typename positioned::sources>::value;
  /// The nodes whose outputs are the model's, in order.
  static constexpr auto output_nodes = positioned::outs::value;
  static constexpr std::size_t num_outputs = output_nodes.size();

  /// How many inputs take each source's output (a model output counts as one).
  static constexpr std::array<std::size_t, num_inputs + depth> consumers = [] {
    std::array<std::size_t, num_inputs + depth> c{};
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((
           [&] {
             for (std::size_t s : sources<I>) ++c[s];
           }()),
       ...);
    }(std::make_index_sequence<depth>{});
    for (std::size_t o : output_nodes) ++c[num_inputs + o];
    return c;
  }();
  static_assert([] {
    for (std::size_t s = num_inputs; s < num_inputs + depth; ++s)
      if (consumers[s] == 0) return false;
    return true;
  }(), "functional: a node's output is taken by no later node and is not a model output (a dangling node)");
  static_assert([] {
    for (std::size_t s = 0; s < num_inputs; ++s)
      if (consumers[s] == 0) return false;
    return true;
  }(), "functional: an input of the model is taken by no node (a dangling input)");
};

/// `graph<Name, Input, Elements...>` with every `block<...>` among the elements spliced in place.
template <const char* Name, class Input, class Done, class... Rest>
struct spliced_graph;
template <const char* Name, class Input, class... Done>
struct spliced_graph<Name, Input, std::tuple<Done...>> {
  using type = graph<Name, Input, Done...>;
};
template <const char* Name, class Input, class... Done, class First, class... Rest>
struct spliced_graph<Name, Input, std::tuple<Done...>, First, Rest...>
    : spliced_graph<Name, Input, std::tuple<Done..., First>, Rest...> {};
template <const char* Name, class Input, class... Done, class... Inner, class... Rest>
struct spliced_graph<Name, Input, std::tuple<Done...>, block<Inner...>, Rest...>
    : spliced_graph<Name, Input, std::tuple<Done...>, Inner..., Rest...> {};

inline constexpr char sequential_name[] = "sequential";
inline constexpr char functional_name[] = "functional";

}  // namespace detail
}  // namespace dtrain
