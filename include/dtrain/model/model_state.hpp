#pragma once
/// \file
/// `model_state<B, Graph>`: what a model is, apart from how it trains: its layers, their compile-time
/// layout, its weights and gradients in backend B's memory, its generator, and what describes it
/// (`layers()`, `summary()`). `basic_model` (model/basic_model.hpp) is a model_state that compiles and
/// steps.
///
/// All parameters live in ONE contiguous backend buffer and all gradients in another, layer after layer
/// in the order of the graph (kernel, then bias), then the non-trainable variables (moving statistics),
/// so an all-reduce, a bucket or a checkpoint is a span. The layout is computed at compile time.

#include <algorithm>
#include <array>
#include <cstdint>
#include <iostream>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "dtrain/backend/backend.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/random.hpp"
#include "dtrain/core/tensor.hpp"
#include "dtrain/core/threads.hpp"
#include "dtrain/layers/concepts.hpp"
#include "dtrain/model/dtype_policy.hpp"
#include "dtrain/model/graph.hpp"

namespace dtrain {

/// One variable of a model, as checkpoints name it.
struct variable_info {
  std::string name;  // "kernel", "bias", "moving_mean"
  std::vector<std::size_t> shape;
  std::size_t offset;  // into get_weights() (for a trainable one, also into parameters())
  std::size_t size;
  bool trainable = true;  // false: a non-trainable variable (Keras' non_trainable_weights)
  std::string keras_path{};  // under the layer in Keras' weight files, when not "vars/<index>" (param_spec)
};

/// One layer of a model, as `summary()` prints it.
struct layer_info {
  std::string name;        // "dense_1" (Keras numbering)
  std::string class_name;  // "Dense"
  std::string output_shape;
  std::size_t offset;  // of its first parameter
  std::size_t param_count;  // trainable and non-trainable, as Keras' summary counts them
  std::vector<variable_info> variables;
  std::vector<std::string> inbound;  // the layers whose outputs it takes ("input_layer": the model's input)
};

template <class B, class Graph>
class model_state {
  static_assert(model_backend<B>, "model: the first template argument must be a backend (dtrain::cpu) with the BLAS-like, loss and update kernels (model_backend)");

 protected:
  using ptr = pointer_t<B, float>;
  using cptr = pointer_t<B, const float>;

 public:
  using backend_type = B;
  using graph_type = Graph;
  using layer_types = typename Graph::template layers<B>;
  static constexpr std::size_t depth = Graph::depth;
  template <std::size_t I>
  using layer_type = std::tuple_element_t<I, layer_types>;

  /// How many inputs and outputs the model has. A model of one of each takes and returns tensors; any
  /// other takes a `std::vector<tensor>` for x (one per input, in order) and for y (one per output) and
  /// returns one for its predictions (Keras' lists).
  static constexpr std::size_t num_inputs = Graph::num_inputs, num_outputs = Graph::num_outputs;
  template <std::size_t K>
  using input_shape_at = std::tuple_element_t<K, typename Graph::input_shapes>;
  template <std::size_t O>
  using output_shape_at = typename layer_type<Graph::output_nodes[O]>::output_shape;
  using input_shape = input_shape_at<0>;
  using output_shape = output_shape_at<0>;
  /// What predictions are: a tensor, or one per output.
  using prediction_type = std::conditional_t<num_outputs == 1, tensor, std::vector<tensor>>;
  /// What `input_gradients()` returns: a tensor, or one per input.
  using input_gradient_type = std::conditional_t<num_inputs == 1, tensor, std::vector<tensor>>;

  /// Each input's per-sample shape.
  static const std::array<extents, num_inputs>& input_shapes() {
    static const auto t = []<std::size_t... K>(std::index_sequence<K...>) {
      return extents_of_shapes<input_shape_at<K>...>();
    }(std::make_index_sequence<num_inputs>{});
    return t;
  }
  /// Each output's per-sample shape.
  static const std::array<extents, num_outputs>& output_shapes() {
    static const auto t = []<std::size_t... O>(std::index_sequence<O...>) {
      return extents_of_shapes<output_shape_at<O>...>();
    }(std::make_index_sequence<num_outputs>{});
    return t;
  }

 protected:
  template <std::size_t... I>
  static constexpr auto sizes_of(std::index_sequence<I...>) {
    return std::array<std::size_t, depth>{param_count_v<layer_type<I>>...};
  }
  template <std::size_t... I>
  static constexpr auto outputs_of(std::index_sequence<I...>) {
    return std::array<std::size_t, depth>{layer_type<I>::output_shape::size...};
  }
  template <std::size_t... I>
  static constexpr auto state_sizes_of(std::index_sequence<I...>) {
    return std::array<std::size_t, depth>{state_count_v<layer_type<I>>...};
  }
  template <class... S>
  static std::array<extents, sizeof...(S)> extents_of_shapes() {
    return {extents(S::dims.begin(), S::dims.end())...};
  }
  template <std::size_t... K>
  static constexpr auto input_sizes_of(std::index_sequence<K...>) {
    return std::array<std::size_t, num_inputs>{input_shape_at<K>::size...};
  }
  static constexpr std::array<std::size_t, depth> param_sizes = sizes_of(std::make_index_sequence<depth>{});
  static constexpr std::array<std::size_t, num_inputs> input_sizes = input_sizes_of(std::make_index_sequence<num_inputs>{});
  static constexpr std::array<std::size_t, depth> state_sizes = state_sizes_of(std::make_index_sequence<depth>{});
  static constexpr std::array<std::size_t, depth> output_sizes = outputs_of(std::make_index_sequence<depth>{});
  static constexpr std::array<std::size_t, depth + 1> param_offsets = [] {
    std::array<std::size_t, depth + 1> o{};
    for (std::size_t i = 0; i < depth; ++i) o[i + 1] = o[i] + param_sizes[i];
    return o;
  }();
  static constexpr auto variable_sizes = [] {
    constexpr std::size_t count = [] {
      std::size_t c = 0;
      [&]<std::size_t... I>(std::index_sequence<I...>) { ((c += layer_type<I>::params.size()), ...); }
      (std::make_index_sequence<depth>{});
      return c;
    }();
    std::array<std::size_t, count> sizes{};
    std::size_t at = 0;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((
           [&] {
             for (const auto& p : layer_type<I>::params) sizes[at++] = p.size();
           }()),
       ...);
    }(std::make_index_sequence<depth>{});
    return sizes;
  }();
  /// Non-trainable variables follow every trainable parameter in the weights buffer.
  static constexpr std::array<std::size_t, depth + 1> state_offsets = [] {
    std::array<std::size_t, depth + 1> o{};
    o[0] = param_offsets[depth];
    for (std::size_t i = 0; i < depth; ++i) o[i + 1] = o[i] + state_sizes[i];
    return o;
  }();
  /// Sources: k < K is input k, K + j node j's output.
  static constexpr std::size_t num_sources = num_inputs + depth;
  /// Whether a trainable parameter lies at or before source s: only then does backward need
  /// d loss / d that output.
  static constexpr std::array<bool, num_sources> trains_upstream = [] {
    std::array<bool, num_sources> r{};
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((
           [&] {
             r[num_inputs + I] = param_sizes[I] > 0;
             for (std::size_t s : Graph::template sources<I>) r[num_inputs + I] = r[num_inputs + I] || r[s];
           }()),
       ...);
    }(std::make_index_sequence<depth>{});
    return r;
  }();
  /// Whether a layer talks to the other replicas in training (synchronised batch statistics).
  static constexpr bool joins_replicas = [] {
    bool any = false;
    [&]<std::size_t... I>(std::index_sequence<I...>) { ((any = any || detail::joins_replicas_v<layer_type<I>>), ...); }
    (std::make_index_sequence<depth>{});
    return any;
  }();

 public:
  /// Number of trainable parameters (what the optimizer updates and the replicas' gradients sum).
  static constexpr std::size_t param_count = param_offsets[depth];
  /// Number of every weight: the trainable ones, then the non-trainable (moving statistics).
  static constexpr std::size_t weight_count = state_offsets[depth];

  /// Builds the model on `device` and initialises its weights from `seed` (Keras' default initialisers,
  /// drawn on the host: every backend starts from the same weights).
  explicit model_state(std::uint64_t seed = default_seed, B device = {})
      : device_(std::move(device)), rng_(seed) {
    detail::apply_thread_env();
    params_ = device_.template allocate<float>(weight_count);
    grads_ = device_.template allocate<float>(param_count);
    std::vector<float> staging;  // a host copy, for a backend whose memory is not host memory
    float* host;
    if constexpr (host_addressable_v<B>) {
      host = params_.data();
    } else {
      staging.resize(weight_count);
      host = staging.data();
    }
    std::map<std::string, int> seen;
    each([&]<std::size_t I>() {
      using L = layer_type<I>;
      const int k = seen[L::keras_name]++;
      names_[I] = k == 0 ? std::string(L::keras_name) : std::string(L::keras_name) + "_" + std::to_string(k);
      std::get<I>(layers_).initialize(std::span<float>(host + param_offsets[I], param_sizes[I]), rng_);
      if constexpr (state_sizes[I] > 0)
        std::get<I>(layers_).initialize_state(std::span<float>(host + state_offsets[I], state_sizes[I]));
    });
    if constexpr (!host_addressable_v<B>) device_.upload(weight_count, host, params_.data());
  }
  model_state(model_state&&) noexcept = default;
  model_state& operator=(model_state&&) noexcept = default;

  /// The backend the model computes on.
  const B& device() const { return device_; }

  /// The precision the layers compute in (Keras' `model.dtype_policy`; float32 unless set). Set it before
  /// training: a policy changed mid-run changes the arithmetic from that step on.
  const ::dtrain::dtype_policy& dtype_policy() const { return policy_; }
  void set_dtype_policy(const ::dtrain::dtype_policy& p) { policy_ = p; }

  // ---- weights ----------------------------------------------------------------------------------

  /// Every parameter of the model, layer by layer (Keras `model.trainable_variables`, flattened), in the
  /// backend's memory: a `std::span` on the cpu backend.
  span_t<B, float> parameters() { return span_of<float>(params_.data(), param_count); }
  span_t<B, const float> parameters() const { return span_of<const float>(params_.data(), param_count); }
  /// The sizes of the variables `parameters()` holds, in order (Keras' `trainable_variables`, each
  /// flattened): what an optimizer's `clipnorm` clips one by one.
  static constexpr std::span<const std::size_t> trainable_variable_sizes() { return variable_sizes; }
  /// Gradients of the last `train_step` / `value_and_gradients`, laid out like `parameters()`.
  span_t<B, float> gradients() { return span_of<float>(grad_base(), param_count); }
  span_t<B, const float> gradients() const { return span_of<const float>(grad_base(), param_count); }
  /// Parameters of layer I.
  template <std::size_t I>
  span_t<B, float> layer_parameters() {
    return span_of<float>(param_ptr<I>(), param_sizes[I]);
  }
  /// Layer I itself.
  template <std::size_t I>
  layer_type<I>& layer() {
    return std::get<I>(layers_);
  }
  /// Keras `model.non_trainable_weights`, flattened: the layers' non-trainable variables (moving
  /// statistics), layer by layer, after every trainable parameter in the weights.
  span_t<B, const float> non_trainable_weights() const {
    return span_of<const float>(params_.data() + param_count, weight_count - param_count);
  }
  /// Keras `model.count_params()`: every weight, trainable or not.
  std::size_t count_params() const { return weight_count; }
  /// Keras `model.get_weights()`, flattened: a host copy of `parameters()`, then of
  /// `non_trainable_weights()` (`layers()` says where each variable is).
  std::vector<float> get_weights() const {
    std::vector<float> w(weight_count);
    device_.download(weight_count, params_.data(), w.data());
    return w;
  }
  /// Keras `model.set_weights(w)`: all `count_params()` values at once.
  void set_weights(std::span<const float> w) {
    if (w.size() != weight_count)
      throw shape_error("set_weights: got " + std::to_string(w.size()) + " values for a model of " +
                        std::to_string(weight_count) + " weights");
    device_.upload(weight_count, w.data(), params_.data());
  }

  /// Names, shapes and parameter ranges of the layers, in order.
  /// Keras' name of source s: an input layer ("input_layer", "input_layer_1") or a layer.
  std::string source_name(std::size_t s) const {
    if (s >= num_inputs) return names_[s - num_inputs];
    return s == 0 ? "input_layer" : "input_layer_" + std::to_string(s);
  }
  /// The names of the layers whose outputs are the model's (what multi-output logs are prefixed with).
  std::string output_name(std::size_t o) const { return names_[Graph::output_nodes[o]]; }

  std::vector<layer_info> layers() const {
    std::vector<layer_info> out;
    each([&]<std::size_t I>() {
      using L = layer_type<I>;
      layer_info li{names_[I], L::class_name, L::output_shape::str(), param_offsets[I],
                    param_sizes[I] + state_sizes[I], {}, {}};
      std::size_t index = 0;  // Keras numbers a layer's variables, trainable and not, in one sequence
      auto add = [&](const auto& specs, std::size_t at, bool trainable) {
        for (const auto& p : specs) {
          std::string path = p.keras_path ? p.keras_path : "";
          if constexpr (requires { L::keras_sublayer; }) {  // a wrapper's: under Keras' attribute for the layer
            std::string own = path.empty() ? std::string("vars/").append(std::to_string(index)) : path;
            path.assign(L::keras_sublayer).append("/").append(own);
          }
          li.variables.push_back({p.name, std::vector<std::size_t>(p.dims.begin(), p.dims.begin() + p.rank), at,
                                  p.size(), trainable, std::move(path)});
          at += p.size(), ++index;
        }
      };
      add(L::params, param_offsets[I], true);
      if constexpr (state_sizes[I] > 0) add(L::state, state_offsets[I], false);
      for (std::size_t s : Graph::template sources<I>) li.inbound.push_back(source_name(s));
      out.push_back(std::move(li));
    });
    return out;
  }

  /// Keras' `model.summary()` table.
  /// A functional model's has Keras' "Connected to" column and its input layer.
  void summary(std::ostream& os = std::cout) const {
    constexpr bool functional = Graph::name == detail::functional_name;
    constexpr int c1 = 28, c2 = 26, c3 = 11, c4 = functional ? 30 : 0, width = c1 + c2 + c3 + c4;
    auto cell = [&](std::string s, int w) {
      s = " " + s;
      if (static_cast<int>(s.size()) > w) s = s.substr(0, w);
      os << s << std::string(w - s.size(), ' ');
    };
    auto row = [&](const std::string& a, const std::string& b, const std::string& c, const std::string& d) {
      cell(a, c1), cell(b, c2), cell(c, c3);
      if (functional) cell(d, c4);
      os << '\n';
    };
    os << "Model: \"" << Graph::name << "\"\n" << std::string(width, '_') << '\n';
    row("Layer (type)", "Output Shape", "Param #", "Connected to");
    os << std::string(width, '=') << '\n';
    if (functional)
      for (std::size_t k = 0; k < num_inputs; ++k) {
        row(source_name(k) + " (InputLayer)", input_str(k), "0", "-");
        os << std::string(width, ' ') << '\n';
      }
    const auto ls = layers();
    for (std::size_t i = 0; i < ls.size(); ++i) {
      // Keras lists a layer's inputs one per line
      const auto& in = ls[i].inbound;
      for (std::size_t k = 0; k < std::max<std::size_t>(in.size(), 1); ++k) {
        const std::string from = k < in.size() ? in[k] + "[0][0]" + (k + 1 < in.size() ? "," : "") : "";
        if (k == 0) row(ls[i].name + " (" + ls[i].class_name + ")", ls[i].output_shape, std::to_string(ls[i].param_count), from);
        else row("", "", "", from);
      }
      if (i + 1 < ls.size()) os << std::string(width, ' ') << '\n';
    }
    os << std::string(width, '=') << '\n'
       << "Total params: " << thousands(weight_count) << '\n'
       << "Trainable params: " << thousands(param_count) << '\n'
       << "Non-trainable params: " << thousands(weight_count - param_count) << '\n'
       << (policy_.mixed() ? std::string("Dtype policy: ") + policy_.name() + "\n" : std::string())
       << std::string(width, '_') << '\n';
  }

 protected:
  /// Keras' spelling of input k's batched shape.
  static std::string input_str(std::size_t k) {
    std::string s;
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      ((K == k ? void(s = input_shape_at<K>::str()) : void()), ...);
    }(std::make_index_sequence<num_inputs>{});
    return s;
  }
  template <class F>
  static void each(F&& f) {
    [&]<std::size_t... I>(std::index_sequence<I...>) { (f.template operator()<I>(), ...); }
    (std::make_index_sequence<depth>{});
  }
  template <class F>
  static void each_reversed(F&& f) {
    [&]<std::size_t... I>(std::index_sequence<I...>) { (f.template operator()<depth - 1 - I>(), ...); }
    (std::make_index_sequence<depth>{});
  }
  template <std::size_t I>
  ptr param_ptr() const {
    return params_.data() + param_offsets[I];
  }
  /// Where the gradients start in grads_, and the k floats right before them (k <= the reserved prefix).
  ptr grad_base() const { return grads_.data() + grad_prefix_; }
  ptr gradient_prefix(std::size_t k) const { return grads_.data() + (grad_prefix_ - k); }
  /// Room for at least k floats right before the gradients, which a step can sum over the replicas in
  /// the same collective as the gradients (basic_model's worker sums). Keeps the gradients 64-byte aligned.
  void reserve_gradient_prefix(std::size_t k) {
    if (k <= grad_prefix_) return;
    grad_prefix_ = (k + 15) / 16 * 16;
    grads_ = device_.template allocate<float>(grad_prefix_ + param_count);
  }
  template <std::size_t I>
  ptr grad_ptr() const {
    return grad_base() + param_offsets[I];
  }
  /// Layer I's non-trainable variables (null for a layer without).
  template <std::size_t I>
  ptr state_ptr() const {
    if constexpr (state_sizes[I] == 0) return ptr{};
    else return params_.data() + state_offsets[I];
  }
  template <class T>
  span_t<B, T> span_of(pointer_t<B, T> p, std::size_t n) const {
    if constexpr (host_addressable_v<B>) return span_t<B, T>(p, n);
    else return span_t<B, T>(device_, p, n);
  }
  static std::string thousands(std::size_t v) {
    const std::string digits = std::to_string(v);
    std::string s;
    for (std::size_t i = 0; i < digits.size(); ++i) {  // appends only: GCC 12 misreads insert (-Wrestrict)
      if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
      s += digits[i];
    }
    return s;
  }

  B device_;
  layer_types layers_;
  std::array<std::string, depth> names_;
  buffer_t<B, float> params_, grads_;
  std::size_t grad_prefix_ = 0;  // floats before the gradients in grads_ (see reserve_gradient_prefix)
  rng rng_;
  ::dtrain::dtype_policy policy_;
};

}  // namespace dtrain
