#pragma once
/// \file
/// `sequential<input<...>, layers...>`: Keras' `Sequential` with every shape fixed at compile time, on
/// the cpu backend; `basic_sequential<B, input<...>, layers...>` is the same model on backend B (what a
/// strategy's `make_model` returns). `functional<input<...>, elements...>` / `basic_functional` is
/// Keras' functional `Model`: named nodes, skip connections and merge layers (model/graph.hpp). Both are
/// `basic_model<B, Graph>`: everything below works the same for either.
///
/// All parameters live in ONE contiguous backend buffer and all gradients in another, layer after layer
/// in the order of the stack (kernel, then bias), so an all-reduce, a bucket or a checkpoint is a span.
/// A training step allocates nothing once the batch size is stable: activations, deltas and layer
/// workspaces grow to the largest batch seen and are reused. Host memory meets the backend at the API
/// edge only: a batch (an xtensor `tensor`) goes in, predictions come out, and each step brings its loss,
/// penalty and metric totals back in one small download.
///
/// `fit`, `evaluate` and `predict` are members whose loops live in model/fit.hpp (dtrain.hpp includes
/// it): this header brings in no data pipeline, callback or checkpoint code.

#include <algorithm>
#include <array>
#include <cstdint>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "dtrain/backend/cpu.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/logs.hpp"
#include "dtrain/core/random.hpp"
#include "dtrain/core/tensor.hpp"
#include "dtrain/core/threads.hpp"
#include "dtrain/core/view.hpp"
#include "dtrain/distribute/replica_context.hpp"
#include "dtrain/layers/concepts.hpp"
#include "dtrain/layers/input.hpp"
#include "dtrain/model/graph.hpp"
#include "dtrain/losses/loss.hpp"
#include "dtrain/metrics/metric.hpp"
#include "dtrain/optimizers/optimizer.hpp"

namespace dtrain {

/// What `compile` takes (Keras `model.compile(optimizer=, loss=, metrics=)`).
struct compile_options {
  any_optimizer optimizer{};
  any_loss loss{};
  std::vector<any_metric> metrics{};
};

/// One variable of a model, as checkpoints name it.
struct variable_info {
  std::string name;  // "kernel", "bias", "moving_mean"
  std::vector<std::size_t> shape;
  std::size_t offset;  // into get_weights() (for a trainable one, also into parameters())
  std::size_t size;
  bool trainable = true;  // false: a non-trainable variable (Keras' non_trainable_weights)
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

namespace detail {

/// The loops of `fit`, `evaluate` and `predict` for a model type (model/fit.hpp).
template <class Model>
struct trainer;

}  // namespace detail

template <class B, class Graph>
class basic_model {
  static_assert(backend<B>, "model: the first template argument must be a backend (dtrain::cpu)");

  using ptr = pointer_t<B, float>;
  using cptr = pointer_t<B, const float>;

 public:
  using backend_type = B;
  using graph_type = Graph;
  using input_shape = typename Graph::input_shape;
  using layer_types = typename Graph::template layers<B>;
  static constexpr std::size_t depth = Graph::depth;
  using output_shape = typename std::tuple_element_t<depth - 1, layer_types>::output_shape;
  /// The same model on backend B2 (what `strategy.make_model<Model>()` builds).
  template <class B2>
  using rebind = basic_model<B2, Graph>;

  template <std::size_t I>
  using layer_type = std::tuple_element_t<I, layer_types>;

 private:
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
  static constexpr std::array<std::size_t, depth> param_sizes = sizes_of(std::make_index_sequence<depth>{});
  static constexpr std::array<std::size_t, depth> state_sizes = state_sizes_of(std::make_index_sequence<depth>{});
  static constexpr std::array<std::size_t, depth> output_sizes = outputs_of(std::make_index_sequence<depth>{});
  static constexpr std::array<std::size_t, depth + 1> param_offsets = [] {
    std::array<std::size_t, depth + 1> o{};
    for (std::size_t i = 0; i < depth; ++i) o[i + 1] = o[i] + param_sizes[i];
    return o;
  }();
  /// Non-trainable variables follow every trainable parameter in the weights buffer.
  static constexpr std::array<std::size_t, depth + 1> state_offsets = [] {
    std::array<std::size_t, depth + 1> o{};
    o[0] = param_offsets[depth];
    for (std::size_t i = 0; i < depth; ++i) o[i + 1] = o[i] + state_sizes[i];
    return o;
  }();
  /// Whether a trainable parameter lies at or before source s (0: the input, j + 1: node j's output):
  /// only then does backward need d loss / d that output.
  static constexpr std::array<bool, depth + 1> trains_upstream = [] {
    std::array<bool, depth + 1> r{};
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((
           [&] {
             r[I + 1] = param_sizes[I] > 0;
             for (std::size_t s : Graph::template sources<I>) r[I + 1] = r[I + 1] || r[s];
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
  explicit basic_model(std::uint64_t seed = default_seed, B device = {})
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
  basic_model(basic_model&&) noexcept = default;
  basic_model& operator=(basic_model&&) noexcept = default;

  /// The backend the model computes on.
  const B& device() const { return device_; }

  // ---- weights ----------------------------------------------------------------------------------

  /// Every parameter of the model, layer by layer (Keras `model.trainable_variables`, flattened), in the
  /// backend's memory: a `std::span` on the cpu backend.
  span_t<B, float> parameters() {
    if (auto* r = replica_entry()) return r->parameters();
    touch();
    return span_of<float>(params_.data(), param_count);
  }
  span_t<B, const float> parameters() const { return span_of<const float>(params_.data(), param_count); }
  /// Gradients of the last `train_step` / `value_and_gradients`, laid out like `parameters()`.
  span_t<B, float> gradients() {
    if (auto* r = replica_entry()) return r->gradients();
    return span_of<float>(grads_.data(), param_count);
  }
  span_t<B, const float> gradients() const { return span_of<const float>(grads_.data(), param_count); }
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
    touch();
  }

  /// Names, shapes and parameter ranges of the layers, in order.
  std::vector<layer_info> layers() const {
    std::vector<layer_info> out;
    each([&]<std::size_t I>() {
      using L = layer_type<I>;
      layer_info li{names_[I], L::class_name, L::output_shape::str(), param_offsets[I],
                    param_sizes[I] + state_sizes[I], {}, {}};
      auto add = [&](const auto& specs, std::size_t at, bool trainable) {
        for (const auto& p : specs) {
          li.variables.push_back(
              {p.name, std::vector<std::size_t>(p.dims.begin(), p.dims.begin() + p.rank), at, p.size(), trainable});
          at += p.size();
        }
      };
      add(L::params, param_offsets[I], true);
      if constexpr (state_sizes[I] > 0) add(L::state, state_offsets[I], false);
      for (std::size_t s : Graph::template sources<I>) li.inbound.push_back(s == 0 ? "input_layer" : names_[s - 1]);
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
    if (functional) {
      row("input_layer (InputLayer)", input_shape::str(), "0", "-");
      os << std::string(width, ' ') << '\n';
    }
    const auto ls = layers();
    for (std::size_t i = 0; i < ls.size(); ++i) {
      std::string from;
      for (const auto& in : ls[i].inbound) from += (from.empty() ? "" : ", ") + in + "[0][0]";
      row(ls[i].name + " (" + ls[i].class_name + ")", ls[i].output_shape, std::to_string(ls[i].param_count), from);
      if (i + 1 < ls.size()) os << std::string(width, ' ') << '\n';
    }
    os << std::string(width, '=') << '\n'
       << "Total params: " << thousands(weight_count) << '\n'
       << "Trainable params: " << thousands(param_count) << '\n'
       << "Non-trainable params: " << thousands(weight_count - param_count) << '\n'
       << std::string(width, '_') << '\n';
  }

  // ---- compile and steps ------------------------------------------------------------------------

  /// Keras `model.compile`: optimizer, loss and metrics (the loss is required).
  void compile(compile_options o) {
    if (!o.optimizer) throw usage_error("compile: an optimizer is required, e.g. .optimizer = dtrain::adam{}");
    if (!o.loss) throw usage_error("compile: a loss is required, e.g. .loss = dtrain::sparse_categorical_crossentropy{}");
    opt_ = std::move(o.optimizer);
    loss_ = std::move(o.loss);
    metrics_ = std::move(o.metrics);
    compiled_ = true;
    touch();
  }
  bool compiled() const { return compiled_; }
  any_optimizer& optimizer() {
    if (auto* r = replica_entry()) return r->optimizer();
    touch();
    return require_compiled("optimizer"), opt_;
  }
  const any_optimizer& optimizer() const { return require_compiled("optimizer"), opt_; }
  const any_loss& loss() const { return require_compiled("loss"), loss_; }
  std::vector<any_metric>& metrics() { return metrics_; }
  mean& loss_tracker() { return loss_tracker_; }

  /// Keras `model.reset_metrics()`.
  void reset_metrics() {
    loss_tracker_.reset_state();
    for (auto& m : metrics_) m.reset_state();
  }
  /// The running loss and metric results (what a step returns).
  dtrain::logs metric_results() const {
    dtrain::logs l;
    l.set("loss", loss_tracker_.result());
    for (const auto& m : metrics_) l.set(m.name(), m.result());
    return l;
  }

  /// One optimisation step on a batch (Keras `train_on_batch` / `train_step`): forward, loss averaged
  /// over the batch plus the regularization penalty, backward, optimizer step, running metrics.
  /// Under a strategy, `x` is this replica's share of a global batch of `global_rows` rows (default:
  /// this batch's rows times the number of replicas): the loss is summed over the share and divided by
  /// the global rows, so replicas with unequal shares (a short last batch) still give the global mean.
  /// A replica whose share is empty (0 rows) adds no gradient but takes part in the step.
  dtrain::logs train_step(const tensor& x, const tensor& y, std::size_t global_rows = 0) {
    require_compiled("train_step");
    if (auto* r = replica_entry()) return r->train_step(x, y, global_rows);
    if (cross_replica()) {
      const std::size_t b = check_batch(x, &y);
      seed_mirrors();
      on_replicas(x, &y, [&](basic_model& r, std::size_t, const tensor& xs, const tensor& ys) {
        r.train_step(xs, ys, global_rows ? global_rows : b);
      });
      return metric_results();
    }
    if (empty_share(x)) {
      zero_gradients_step();
      apply_update();
      return metric_results();
    }
    const std::size_t n = check_batch(x, &y);
    const step_plan plan = plan_step(loss_, y, n);
    forward(to_device(x, x_stage_), n, true);
    const cptr t = to_device(y, y_stage_);
    float scale = plan.loss_scale / static_cast<float>(replicas());
    if (global_rows != 0 && global_rows != n * std::size_t(replicas()) && loss_.get_reduction() != reduction::sum)
      scale = plan.loss_scale * static_cast<float>(n) / static_cast<float>(global_rows);
    compute_loss(loss_, y, t, n, scale, true);
    compute_metrics(plan, t, n);
    synced_backward(n);
    apply_update();
    const float* s = read_scalars();
    const float reg = regularization_scale_ * s[penalty_slot] * static_cast<float>(replicas());  // the whole penalty
    track(plan, y, n, s[loss_slot] * plan.loss_scale + reg, s);
    return metric_results();
  }

  /// Loss and metrics on a batch without training (Keras `test_on_batch` / `test_step`).
  dtrain::logs test_step(const tensor& x, const tensor& y) {
    require_compiled("test_step");
    if (auto* r = replica_entry()) return r->test_step(x, y);
    if (cross_replica()) {
      check_batch(x, &y);
      on_replicas(x, &y, [](basic_model& r, std::size_t, const tensor& xs, const tensor& ys) {
        if (xs.shape()[0] > 0) r.test_step(xs, ys);
      });
      return metric_results();
    }
    const std::size_t n = check_batch(x, &y);
    const step_plan plan = plan_step(loss_, y, n);
    forward(to_device(x, x_stage_), n, false);
    const cptr t = to_device(y, y_stage_);
    compute_loss(loss_, y, t, n, 1.0f, false);
    compute_metrics(plan, t, n);
    add_penalties(ptr{}, 0.0f);
    const float* s = read_scalars();
    track(plan, y, n, s[loss_slot] * plan.loss_scale + s[penalty_slot], s);
    return metric_results();
  }

  // ---- fit, evaluate, predict (model/fit.hpp has the loops and their Keras semantics) ----------------

  /// Keras `model.fit(dataset, ...)`: trains on batches of (x, y) and returns the history.
  template <class D, class T = detail::trainer<basic_model>>
    requires(!std::same_as<D, tensor>)
  auto fit(const D& ds, typename T::fit_options o = {}) {
    return T::fit(*this, ds, std::move(o));
  }
  /// Keras `model.fit(x, y, batch_size=, shuffle=, validation_split=, ...)` on in-memory arrays.
  template <class T = detail::trainer<basic_model>>
  auto fit(const tensor& x, const tensor& y, typename T::fit_options o = {}) {
    return T::fit(*this, x, y, std::move(o));
  }
  /// Keras `model.evaluate(dataset, steps=)`: the loss and metrics over the dataset.
  template <class D, class T = detail::trainer<basic_model>>
    requires(!std::same_as<D, tensor>)
  dtrain::logs evaluate(const D& ds, typename T::evaluate_options o = {}) {
    return T::evaluate(*this, ds, std::move(o));
  }
  template <class T = detail::trainer<basic_model>>
  dtrain::logs evaluate(const tensor& x, const tensor& y, typename T::evaluate_options o = {}) {
    return T::evaluate(*this, x, y, std::move(o));
  }
  /// Keras `model.predict(dataset)`: the outputs of every batch, concatenated.
  template <class D, class T = detail::trainer<basic_model>>
    requires(!std::same_as<D, tensor>)
  tensor predict(const D& ds, typename T::predict_options o = {}) {
    return T::predict(*this, ds, std::move(o));
  }
  template <class T = detail::trainer<basic_model>>
  tensor predict(const tensor& x, typename T::predict_options o = {}) {
    return T::predict(*this, x, std::move(o));
  }

  /// The model's outputs for a batch, in inference mode (Keras `predict_on_batch`).
  tensor predict_on_batch(const tensor& x) { return (*this)(x, false); }

  /// Keras `model(x, training=...)`.
  tensor operator()(const tensor& x, bool training = false) {
    if (auto* r = replica_entry()) return (*r)(x, training);
    if (cross_replica()) {  // each replica its rows, gathered in order
      check_batch(x, nullptr);
      if (training) seed_mirrors();
      std::vector<tensor> parts(mirrors_.size() + 1);
      on_replicas(x, nullptr, [&](basic_model& r, std::size_t i, const tensor& xs, const tensor&) {
        if (xs.shape()[0] > 0) parts[i] = r(xs, training);
      });
      return detail::concatenate_rows(parts);
    }
    const std::size_t n = check_batch(x, nullptr);
    forward(to_device(x, x_stage_), n, training);
    return output_tensor(n);
  }

  /// The GradientTape step of a custom training loop: forward in training mode, per-example losses,
  /// `compute_average_loss(per_example, global_batch_size)` plus the regularization penalty scaled by
  /// `scale_regularization_loss(..., num_replicas)`, and backward. Fills `gradients()`, returns the loss.
  /// As in TF, `global_batch_size = 0` means this batch's size times the number of replicas and
  /// `num_replicas = 0` the number of replicas (of the strategy that made the model; 1 without one).
  /// No optimizer step and no metric is touched. Under a strategy an empty batch (this replica's share
  /// of a short last batch) gives only its share of the penalty's gradient.
  float value_and_gradients(const tensor& x, const tensor& y, const any_loss& loss_object,
                            std::size_t global_batch_size = 0, std::size_t num_replicas = 0) {
    if (auto* r = replica_entry()) return r->value_and_gradients(x, y, loss_object, global_batch_size, num_replicas);
    if (cross_replica()) {  // every replica its rows; the replicas' losses add up to the global one
      const std::size_t b = check_batch(x, &y);
      seed_mirrors();
      std::vector<float> losses(mirrors_.size() + 1);
      on_replicas(x, &y, [&](basic_model& r, std::size_t i, const tensor& xs, const tensor& ys) {
        losses[i] = r.value_and_gradients(xs, ys, loss_object, global_batch_size ? global_batch_size : b, num_replicas);
      });
      float total = 0.0f;
      for (float l : losses) total += l;
      return total;
    }
    const float scale = 1.0f / static_cast<float>(num_replicas ? num_replicas : std::size_t(replicas()));
    const float saved = std::exchange(regularization_scale_, scale);
    if (empty_share(x)) {
      zero_gradients_step();
      regularization_scale_ = saved;
      return scale * read_scalars()[penalty_slot];
    }
    const std::size_t n = check_batch(x, &y);
    const step_plan plan = plan_step(loss_object, y, n, false);
    forward(to_device(x, x_stage_), n, true);
    if (global_batch_size == 0) global_batch_size = plan.rows * std::size_t(replicas());
    compute_loss(loss_object, y, to_device(y, y_stage_), n, 1.0f / static_cast<float>(global_batch_size), true);
    synced_backward(n);
    regularization_scale_ = saved;
    const float* s = read_scalars();
    return static_cast<float>(s[loss_slot] / static_cast<double>(global_batch_size)) + scale * s[penalty_slot];
  }

  /// The same with any differentiable loss: `f(predictions, d_predictions) -> loss`, where f writes
  /// d loss / d predictions into its second argument (same shape as the first), on the host.
  template <class F>
    requires std::is_invocable_r_v<float, F&, const tensor&, tensor&>
  float value_and_gradients(const tensor& x, F&& f) {
    if (auto* r = replica_entry()) return r->value_and_gradients(x, f);
    if (cross_replica())
      throw usage_error("value_and_gradients(x, f): this model has in-process replicas (mirrored_strategy); call it "
                        "inside strategy.run(...), where each replica calls f on its own rows");
    const std::size_t n = check_batch(x, nullptr);
    forward(to_device(x, x_stage_), n, true);
    const tensor pred = output_tensor(n);
    tensor dpred = zeros(extents_of(pred));
    const float l = f(pred, dpred);
    if (extents_of(dpred) != extents_of(pred))
      throw shape_error("value_and_gradients: the loss function changed d_predictions' shape to " +
                        shape_str(dpred.shape()) + " (predictions are " + shape_str(pred.shape()) + ")");
    device_.upload(dpred.size(), dpred.data(), ensure(device_, delta_a_, n * output_shape::size));
    synced_backward(n);
    return l + regularization_scale_ * read_scalars()[penalty_slot];
  }

  /// Sum of the layers' regularization penalties (Keras `sum(model.losses)`).
  float regularization_loss() {
    add_penalties(ptr{}, 0.0f);
    return read_scalars()[penalty_slot];
  }

  /// Runs backward from the loss gradient held in the delta buffer, adding the layers' penalties (and
  /// their gradients, scaled by the regularization scale) on the way, and calling
  /// `on_ready(I, offset, count)` as soon as layer I's gradients are final (last layer first): the hook
  /// distributed training uses to launch the all-reduce of a bucket while backward goes on.
  ///
  /// Node by node from the last, each node's output gradient is complete when it runs (every node that
  /// takes its output comes after it): the first input gradient a source receives is written in place,
  /// later ones (a source several nodes take) are added to it, and a relabelling layer hands its output
  /// gradient to its source as is.
  template <class Hook>
  void backward(std::size_t n, Hook&& on_ready) {
    grad_at_.fill(ptr{});
    grad_at_[depth] = delta_a_.data();  // the loss gradient
    const ptr penalty = scalar_ptr() + penalty_slot;
    device_.fill(1, 0.0f, penalty);
    layer_context<B> ctx = context(true);
    each_reversed([&]<std::size_t I>() {
      constexpr auto src = Graph::template sources<I>;
      ctx.state = state_ptr<I>();
      const ptr dy = grad_at_[I + 1];
      auto& l = std::get<I>(layers_);
      if constexpr (detail::relabels_v<layer_type<I>>) {
        if (wants_gradient(src[0])) {
          if (!grad_at_[src[0]]) grad_at_[src[0]] = dy;
          else device_.axpy(n * source_size(src[0]), 1.0f, dy, grad_at_[src[0]]);
        }
        on_ready(I, param_offsets[I], param_sizes[I]);
        return;
      }
      std::array<ptr, src.size()> dx{};
      std::array<bool, src.size()> add{};
      for (std::size_t k = 0; k < src.size(); ++k) {
        if (!wants_gradient(src[k])) continue;
        const std::size_t e = n * source_size(src[k]);
        if ((add[k] = bool(grad_at_[src[k]]))) {
          if (scratch_grads_.size() <= k) scratch_grads_.resize(k + 1);
          dx[k] = ensure(device_, scratch_grads_[k], e);
        } else {
          dx[k] = grad_at_[src[k]] = ensure(device_, source_grads_[src[k]], e);
        }
      }
      if constexpr (detail::merges_v<layer_type<I>>)
        l.backward(ctx, source_outputs<src>(), out_[I], dy, dx, n, param_ptr<I>(), grad_ptr<I>());
      else
        l.backward(ctx, source_output(src[0]), out_[I], dy, dx[0], n, param_ptr<I>(), grad_ptr<I>());
      for (std::size_t k = 0; k < src.size(); ++k)
        if (add[k]) device_.axpy(n * source_size(src[k]), 1.0f, dx[k], grad_at_[src[k]]);
      l.regularization(ctx, param_ptr<I>(), grad_ptr<I>(), regularization_scale_, penalty);
      on_ready(I, param_offsets[I], param_sizes[I]);
    });
    input_gradient_ = {watch_inputs_ ? grad_at_[0] : ptr{}, n};
  }

  /// TF's `tape.watch(x)`: while on, every backward (`train_step`, `value_and_gradients`) also computes
  /// the gradient of the loss with respect to the model's inputs, which `input_gradients()` returns
  /// (adversarial examples, saliency, a generator trained through a discriminator). Every replica of a
  /// strategy must watch alike.
  void watch_inputs(bool on = true) {
    watch_inputs_ = on;
    for (auto& r : mirrors_) r.watch_inputs_ = on;
  }
  /// d loss / d x of the last backward made while watching inputs (TF: `tape.gradient(loss, x)`): a host
  /// tensor shaped like that x, every replica's rows in order when called outside `strategy.run`.
  tensor input_gradients() {
    if (auto* r = replica_entry()) return r->input_gradients();
    if (cross_replica()) {
      std::vector<tensor> parts{own_input_gradients()};
      for (auto& r : mirrors_) parts.push_back(r.own_input_gradients());
      return detail::concatenate_rows(parts);
    }
    return own_input_gradients();
  }

  /// Attaches the model to a strategy (what `strategy.make_model()` does): gradients are then summed over
  /// the replicas in buckets during backward, the loss is averaged over the GLOBAL batch and the
  /// regularization penalty divided by the number of replicas (the seeds' scale_regularization_loss).
  void set_replica_context(replica_context* r) {
    replica_ = r;
    regularization_scale_ = 1.0f / static_cast<float>(replicas());
  }
  replica_context* replica() const { return replica_; }
  /// The model's generator (dropout masks); saved with backups so a resumed run draws the same masks.
  rng& generator() { return touch(), rng_; }
  int replicas() const { return replica_ ? replica_->num_replicas_in_sync() : 1; }

  /// Gives the model the other replicas of its process (what `mirrored_strategy::make_model` does):
  /// replica i >= 1 is `mirrors[i - 1]`, a model of the same type on its own device, attached to the
  /// same strategy. A step on this model then splits the batch among all replicas (replica i of N takes
  /// rows [i B/N, (i+1) B/N), as `distribute_dataset` does across workers), runs them at once, and
  /// gathers their metric states here; each replica applies the summed gradients to its own weights, so
  /// they stay equal. Inside a replica's thread (`strategy.run`) calls on this model go to that
  /// replica's copy. Weights, optimizer state or compile settings changed here from outside a step are
  /// copied to the replicas before the next step.
  void set_mirrors(std::vector<basic_model> mirrors) {
    mirrors_ = std::move(mirrors);
    mirrors_stale_ = true;
  }

 private:
  /// The step's scalars in backend memory: the loss sum, the penalty sum, then each metric's total.
  static constexpr std::size_t loss_slot = 0, penalty_slot = 1, metric_slot = 2;

  /// What a step computes for a batch of targets, decided (and the targets checked) before it runs.
  struct step_plan {
    std::size_t rows;   // loss rows of the predictions
    float loss_scale;   // 1 / rows, or 1 for a summed loss
    std::vector<std::optional<metric_op>> metric_ops;  // per metric: its kernel, or none for a host metric
  };

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
  template <std::size_t I>
  ptr grad_ptr() const {
    return grads_.data() + param_offsets[I];
  }
  /// Layer I's non-trainable variables (null for a layer without).
  template <std::size_t I>
  ptr state_ptr() const {
    if constexpr (state_sizes[I] == 0) return ptr{};
    else return params_.data() + state_offsets[I];
  }
  /// A pass' context; a training pass' layers may sum values over the replicas.
  layer_context<B> context(bool training) {
    layer_context<B> ctx{device_, rng_, training};
    if (training && replica_ && replicas() > 1)
      ctx.replicas = {replicas(), replica_, [](void* r, std::span<float> v) {
                        static_cast<replica_context*>(r)->all_reduce(v, reduce_op::sum);
                      }};
    return ctx;
  }
  template <class T>
  span_t<B, T> span_of(pointer_t<B, T> p, std::size_t n) const {
    if constexpr (host_addressable_v<B>) return span_t<B, T>(p, n);
    else return span_t<B, T>(device_, p, n);
  }
  /// The optimizer's step with this replica's (summed) gradients.
  void apply_update() {
    opt_.apply_gradients(span_of<float>(grads_.data(), param_count), span_of<float>(params_.data(), param_count));
  }
  void require_compiled(const char* what) const {
    if (!compiled_) throw usage_error(std::string(what) + ": call compile() first (the model has no loss or optimizer)");
  }

  /// Validates x (and y) against the model and returns the batch size.
  std::size_t check_batch(const tensor& x, const tensor* y) const {
    const auto ex = extents_of(x);
    bool ok = ex.size() == input_shape::rank + 1;
    for (std::size_t i = 0; ok && i < input_shape::rank; ++i) ok = ex[i + 1] == input_shape::dims[i];
    if (!ok)
      throw shape_error(std::string(Graph::name) + ": input batch of shape " + shape_str(ex) +
                        " does not match the model's input " + input_shape::str() + " (layer '" + names_[0] +
                        "' takes it)");
    if (ex[0] == 0) throw value_error(std::string(Graph::name) + ": the batch is empty");
    each([&]<std::size_t I>() {  // layers that read the input's values as indices check them first
      if constexpr (requires { layer_type<I>::check_input(std::span<const float>{}, std::string{}); })
        for (std::size_t s : Graph::template sources<I>)
          if (s == 0) layer_type<I>::check_input(std::span<const float>(x.data(), x.size()), names_[I]);
    });
    if (y && (y->dimension() == 0 || y->shape()[0] != ex[0]))
      throw shape_error(std::string(Graph::name) + ": x has " + std::to_string(ex[0]) + " samples (shape " +
                        shape_str(ex) + ") but y has shape " + shape_str(y->shape()));
    return ex[0];
  }

  /// Checks the targets against the loss (and the compiled metrics) before anything runs.
  step_plan plan_step(const any_loss& loss, const tensor& y, std::size_t n, bool with_metrics = true) {
    const auto ey = extents_of(y);
    const batch_view tv{y.data(), ey}, pv = output_view(n, nullptr);
    loss.validate(tv, pv);
    step_plan p{detail::loss_rows(pv), 1.0f, {}};
    if (loss.get_reduction() != reduction::sum) p.loss_scale = 1.0f / static_cast<float>(p.rows);
    if (with_metrics)
      for (auto& m : metrics_) p.metric_ops.push_back(m.kernel(tv, pv));
    return p;
  }

  /// A host array as the backend reads it: the array itself when the backend's memory is host memory,
  /// else a copy in `staging`.
  cptr to_device(const tensor& t, buffer_t<B, float>& staging) {
    if constexpr (host_addressable_v<B>) {
      return t.data();
    } else {
      const ptr p = ensure(device_, staging, t.size());
      device_.upload(t.size(), t.data(), p);
      return p;
    }
  }

  void forward(cptr x, std::size_t n, bool training) {
    input_ = x;
    layer_context<B> ctx = context(training);
    each([&]<std::size_t I>() {
      constexpr auto src = Graph::template sources<I>;
      if constexpr (detail::relabels_v<layer_type<I>>) {  // reshape, flatten: the output is the input
        out_[I] = source_output(src[0]);
        return;
      }
      const ptr out = ensure(device_, outputs_[I], n * output_sizes[I]);
      ctx.state = state_ptr<I>();
      if constexpr (detail::merges_v<layer_type<I>>)
        std::get<I>(layers_).forward(ctx, source_outputs<src>(), out, n, param_ptr<I>());
      else
        std::get<I>(layers_).forward(ctx, source_output(src[0]), out, n, param_ptr<I>());
      out_[I] = out;
    });
  }
  /// Source s's output of the last forward (0: the model's input, j + 1: node j's).
  cptr source_output(std::size_t s) const { return s == 0 ? input_ : out_[s - 1]; }
  template <auto Src>
  std::array<cptr, Src.size()> source_outputs() const {
    std::array<cptr, Src.size()> xs;
    for (std::size_t k = 0; k < Src.size(); ++k) xs[k] = source_output(Src[k]);
    return xs;
  }

  /// Backward, with the replicas' gradients summed when under a strategy: bucket by bucket during
  /// backward when the gradients are in host memory, else once backward is done.
  void synced_backward(std::size_t n) {
    if (!replica_) return backward(n, [](std::size_t, std::size_t, std::size_t) {});
    if constexpr (host_addressable_v<B>) {
      replica_->begin_gradients(std::span<float>(grads_.data(), param_count));
      backward(n, [&](std::size_t, std::size_t offset, std::size_t count) { replica_->gradients_ready(offset, count); });
      replica_->finish_gradients();
    } else {
      backward(n, [](std::size_t, std::size_t, std::size_t) {});
      sync_gradients();
    }
  }
  /// Sums the whole gradient buffer over the replicas. A non-host model's is summed where it is when the
  /// strategy can (comm::nccl), else staged through pinned host memory layer by layer from the last,
  /// each layer's copy overlapping the communicator's work on the buckets already complete.
  void sync_gradients() {
    if constexpr (host_addressable_v<B>) {
      replica_->begin_gradients(std::span<float>(grads_.data(), param_count));
      replica_->gradients_ready(0, param_count);
      replica_->finish_gradients();
    } else if (replica_->reduces_device_gradients()) {
      replica_->begin_device_gradients(device_gradients{device_address(grads_.data()), param_count});
      replica_->gradients_ready(0, param_count);
      replica_->finish_gradients();
    } else {
      if (host_grads_.size() != param_count) host_grads_ = detail::host_staging<B>(device_, param_count);
      float* const stage = host_grads_.data();
      replica_->begin_gradients(std::span<float>(stage, param_count));
      for (std::size_t i = depth; i-- > 0;) {
        if (param_sizes[i] == 0) continue;
        device_.download(param_sizes[i], cptr(grads_.data() + param_offsets[i]), stage + param_offsets[i]);
        replica_->gradients_ready(param_offsets[i], param_sizes[i]);
      }
      replica_->finish_gradients();
      device_.upload(param_count, static_cast<const float*>(stage), grads_.data());
    }
  }
  /// The device address behind a pointer of B (for a backend whose pointers expose it).
  static float* device_address(ptr p) {
    if constexpr (requires { { p.get() } -> std::convertible_to<float*>; }) return p.get();
    else throw usage_error(std::string("a strategy asked for the device address of ") + B::name + "'s gradients");
  }

  /// Whether `x` is an empty share of a global batch: under a strategy, a replica may have no rows in a
  /// step (the short last batch, or its own data ran out before the other workers').
  bool empty_share(const tensor& x) const { return replica_ && x.dimension() > 0 && x.shape()[0] == 0; }
  /// Whether backward computes d loss / d source s's output (0: the input, j + 1: node j's output).
  bool wants_gradient(std::size_t s) const { return trains_upstream[s] || watch_inputs_; }
  static constexpr std::size_t source_size(std::size_t s) { return s == 0 ? input_shape::size : output_sizes[s - 1]; }
  tensor own_input_gradients() {
    if (!watch_inputs_)
      throw usage_error(
          "input_gradients: call watch_inputs() before the step (TF: tape.watch(x)); nothing was recorded");
    extents e{input_gradient_.rows};
    for (std::size_t d : input_shape::dims) e.push_back(d);
    tensor g = zeros(e);
    if (input_gradient_.rows > 0 && input_gradient_.data)
      device_.download(g.size(), cptr(input_gradient_.data), g.data());
    return g;
  }

  /// The gradients of a replica without rows: only its share of the penalties' (so the replicas' sum
  /// still counts them once), summed with the other replicas' gradients. Layers that talk to the other
  /// replicas join their collectives where their forward and backward would (`join_forward`,
  /// `join_backward`), in the order a step with rows issues them among the gradient buckets.
  void zero_gradients_step() {
    input_gradient_ = {};
    device_.fill(param_count, 0.0f, grads_.data());
    add_penalties(grads_.data(), regularization_scale_);
    if constexpr (!joins_replicas) {
      sync_gradients();
    } else {
      layer_context<B> ctx = context(true);
      each([&]<std::size_t I>() {
        if constexpr (detail::joins_replicas_v<layer_type<I>>) {
          ctx.state = state_ptr<I>();
          std::get<I>(layers_).join_forward(ctx);
        }
      });
      auto join_backward = [&]<std::size_t I>() {
        if constexpr (detail::joins_replicas_v<layer_type<I>>) {
          ctx.state = state_ptr<I>();
          std::get<I>(layers_).join_backward(ctx, wants_gradient(Graph::template sources<I>[0]));
        }
      };
      if constexpr (host_addressable_v<B>) {
        replica_->begin_gradients(std::span<float>(grads_.data(), param_count));
        each_reversed([&]<std::size_t I>() {
          join_backward.template operator()<I>();
          replica_->gradients_ready(param_offsets[I], param_sizes[I]);
        });
        replica_->finish_gradients();
      } else {
        each_reversed(join_backward);
        sync_gradients();
      }
    }
  }

  /// Adds every layer's penalty (and, with `grads`, `scale` times its gradient) into the penalty slot.
  void add_penalties(ptr grads, float scale) {
    const ptr penalty = scalar_ptr() + penalty_slot;
    device_.fill(1, 0.0f, penalty);
    layer_context<B> ctx{device_, rng_, false};
    each([&]<std::size_t I>() {
      std::get<I>(layers_).regularization(ctx, param_ptr<I>(), grads ? grads + param_offsets[I] : ptr{}, scale,
                                          penalty);
    });
  }

  /// Extents of the last forward's predictions (batch first) with `data`.
  batch_view output_view(std::size_t n, const float* data) {
    out_extents_[0] = n;
    for (std::size_t i = 0; i < output_shape::rank; ++i) out_extents_[i + 1] = output_shape::dims[i];
    return {data, out_extents_};
  }
  /// A host copy of the last forward's predictions.
  batch_view host_predictions(std::size_t n) {
    host_pred_.resize(n * output_shape::size);
    device_.download(host_pred_.size(), out_[depth - 1], host_pred_.data());
    return output_view(n, host_pred_.data());
  }
  tensor output_tensor(std::size_t n) {
    const batch_view v = host_predictions(n);
    return from_span({v.data, v.size()}, extents(out_extents_.begin(), out_extents_.end()));
  }

  /// The loss of the last forward on this replica's rows, summed into the loss slot; with `grad`, `scale`
  /// times its gradient into the delta buffer.
  void compute_loss(const any_loss& loss, const tensor& y, cptr t, std::size_t n, float scale, bool grad) {
    const batch_view pv = output_view(n, nullptr);
    const std::size_t rows = detail::loss_rows(pv);
    const ptr per = ensure(device_, per_example_, rows);
    const ptr d = grad ? ensure(device_, delta_a_, n * output_shape::size) : ptr{};
    if (const auto k = loss.kernel()) {
      std::visit([&](const auto& o) { device_.loss(o, rows, pv.last(), scale, t, out_[depth - 1], per, d); }, *k);
    } else {  // a host loss: on host copies of the predictions
      const auto ey = extents_of(y);
      const batch_view hp = host_predictions(n);
      std::vector<float> hl(rows), hd(grad ? hp.size() : 0);
      loss.per_example({y.data(), ey}, hp, hl.data(), grad ? hd.data() : nullptr, scale);
      device_.upload(rows, hl.data(), per);
      if (grad) device_.upload(hd.size(), hd.data(), d);
    }
    device_.sum(rows, per, scalar_ptr() + loss_slot);
  }

  /// Each kernel metric's batch total into its slot (host metrics are updated in `track`).
  void compute_metrics(const step_plan& plan, cptr t, std::size_t n) {
    const batch_view pv = output_view(n, nullptr);
    for (std::size_t i = 0; i < plan.metric_ops.size(); ++i)
      if (plan.metric_ops[i])
        std::visit([&](const auto& o) {
          device_.metric(o, plan.rows, pv.last(), t, out_[depth - 1], scalar_ptr() + metric_slot + i);
        }, *plan.metric_ops[i]);
  }

  void track(const step_plan& plan, const tensor& y, std::size_t n, float loss, const float* s) {
    loss_tracker_.update_state(loss, static_cast<double>(n));
    std::optional<batch_view> hp;
    const auto ey = extents_of(y);
    for (std::size_t i = 0; i < plan.metric_ops.size(); ++i) {
      if (plan.metric_ops[i]) {
        metrics_[i].state().add({s[metric_slot + i], static_cast<double>(plan.rows)});
      } else {
        if (!hp) hp = host_predictions(n);
        metrics_[i].update_state({y.data(), ey}, *hp);
      }
    }
  }

  ptr scalar_ptr() { return ensure(device_, scalars_, metric_slot + metrics_.size()); }
  /// The step's scalars, downloaded (the step's one synchronisation with the host).
  const float* read_scalars() {
    scalar_values_.resize(metric_slot + metrics_.size());
    device_.download(scalar_values_.size(), scalar_ptr(), scalar_values_.data());
    return scalar_values_.data();
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

  // ---- in-process replicas (set_mirrors) ---------------------------------------------------------------

  /// What a public step or accessor of a model with in-process replicas runs on inside replica i's
  /// thread (`strategy.run`): replica i's copy (null: this model, replica 0). Every replica enters the
  /// same calls, so a change made here since the last step is copied to the others at the first one,
  /// between two barriers that keep the replicas out of the copies meanwhile.
  basic_model* replica_entry() {
    const int i = detail::current_local_replica();
    if (mirrors_.empty() || i < 0) return nullptr;
    if (mirrors_stale_) {  // read by every replica before the first barrier, written after it
      replica_->barrier();
      if (i == 0) sync_mirrors();
      replica_->barrier();
    }
    return i == 0 ? nullptr : &mirrors_[std::size_t(i) - 1];
  }
  /// Whether a step called here is to be run by all of the process's replicas (TF's cross-replica context).
  bool cross_replica() const { return !mirrors_.empty() && detail::current_local_replica() < 0; }
  /// Something outside a step may change what the replicas must share: copy it to them before the next.
  void touch() {
    if (cross_replica()) mirrors_stale_ = true;
  }
  /// Gives the replicas this model's weights, optimizer (with its state), loss and metrics, if changed.
  void sync_mirrors() {
    if (!mirrors_stale_) return;
    const std::vector<float> w = get_weights();
    for (auto& r : mirrors_) {
      r.set_weights(w);
      r.opt_ = opt_;
      if (opt_) r.opt_.set_state(opt_.state());
      r.loss_ = loss_;
      r.metrics_ = metrics_;
      r.compiled_ = compiled_;
      r.reset_metrics();
    }
    mirrors_stale_ = false;
  }
  /// A training step's random streams: one draw of this model's generator seeds each replica's, so
  /// replicas draw different dropout masks and a resumed run (which restores this generator) the same.
  void seed_mirrors() {
    const std::uint64_t base = rng_.next();
    for (std::size_t i = 0; i < mirrors_.size(); ++i) mirrors_[i].rng_ = rng(base + 0x9e3779b97f4a7c15ull * (i + 1));
  }
  /// Runs `step(replica, i, x rows, y rows)` for every replica i at once (each on its thread, replica 0
  /// being this model), then adds the replicas' metric states into this model's.
  template <class Step>
  void on_replicas(const tensor& x, const tensor* y, Step&& step) {
    sync_mirrors();
    const std::size_t b = x.shape()[0], p = mirrors_.size() + 1;
    replica_->for_each_local_replica([&](int index) {
      const std::size_t i = std::size_t(index), lo = b * i / p, hi = b * (i + 1) / p;
      basic_model& r = i == 0 ? *this : mirrors_[i - 1];
      step(r, i, detail::rows_of(x, lo, hi), y ? detail::rows_of(*y, lo, hi) : tensor{});
    });
    for (auto& r : mirrors_) {
      loss_tracker_.state().add({r.loss_tracker_.state().values[0], r.loss_tracker_.state().values[1]});
      for (std::size_t k = 0; k < metrics_.size(); ++k)
        metrics_[k].state().add({r.metrics_[k].state().values[0], r.metrics_[k].state().values[1]});
      r.reset_metrics();
    }
  }

  B device_;
  layer_types layers_;
  std::array<std::string, depth> names_;
  buffer_t<B, float> params_, grads_;
  std::array<buffer_t<B, float>, depth> outputs_;  // layer outputs (unused by relabelling layers)
  std::array<cptr, depth> out_{};                  // where each layer's output of the last forward is
  buffer_t<B, float> delta_a_, per_example_, scalars_, x_stage_, y_stage_;
  std::array<buffer_t<B, float>, depth + 1> source_grads_;  // d loss / d each source's output (backward)
  std::array<ptr, depth + 1> grad_at_{};                    // where each source's gradient is (backward)
  std::vector<buffer_t<B, float>> scratch_grads_;           // input gradients to add to a source's
  std::vector<float> scalar_values_, host_pred_;
  detail::host_staging_t<B> host_grads_;  // a non-host model's gradients on their way to a host communicator
  std::array<std::size_t, output_shape::rank + 1> out_extents_{};
  cptr input_{};
  rng rng_;
  any_optimizer opt_;
  any_loss loss_;
  std::vector<any_metric> metrics_;
  mean loss_tracker_{"loss"};
  float regularization_scale_ = 1.0f;
  replica_context* replica_ = nullptr;
  bool compiled_ = false;
  std::vector<basic_model> mirrors_;  // the process's other replicas (set_mirrors)
  bool mirrors_stale_ = false;             // they miss a change made here outside a step
  bool watch_inputs_ = false;              // backward computes d loss / d inputs (watch_inputs)
  struct {
    ptr data{};
    std::size_t rows = 0;
  } input_gradient_;  // where the last backward left d loss / d inputs
};

/// Keras' `Sequential` on backend B: every layer takes the one before it.
template <class B, class Input, class... Specs>
using basic_sequential = basic_model<B, detail::graph<detail::sequential_name, Input, Specs...>>;

/// Keras' `Sequential` on the cpu backend: `sequential<input<28, 28>, flatten, dense<10>>`.
template <class Input, class... Specs>
using sequential = basic_sequential<cpu, Input, Specs...>;

/// Keras' functional `Model` on backend B: `input<...>` then layer specs and `node<Tag, Spec, From...>`
/// (model/graph.hpp).
template <class B, class Input, class... Elements>
using basic_functional = basic_model<B, detail::graph<detail::functional_name, Input, Elements...>>;

/// Keras' functional `Model` on the cpu backend.
template <class Input, class... Elements>
using functional = basic_functional<cpu, Input, Elements...>;

}  // namespace dtrain
