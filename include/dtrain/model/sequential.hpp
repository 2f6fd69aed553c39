#pragma once
/// \file
/// `sequential<input<...>, layers...>`: Keras' `Sequential` with every shape fixed at compile time.
///
/// All parameters live in ONE contiguous buffer and all gradients in another, layer after layer in
/// the order of the stack (kernel, then bias), so an all-reduce, a bucket or a checkpoint is a span.
/// A training step allocates nothing once the batch size is stable: activations, deltas and layer
/// workspaces grow to the largest batch seen and are reused.

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "dtrain/core/backend.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/random.hpp"
#include "dtrain/core/tensor.hpp"
#include "dtrain/core/threads.hpp"
#include "dtrain/distribute/replica_context.hpp"
#include "dtrain/layers/concepts.hpp"
#include "dtrain/layers/input.hpp"
#include "dtrain/losses/loss.hpp"
#include "dtrain/metrics/metric.hpp"
#include "dtrain/model/fit.hpp"
#include "dtrain/core/logs.hpp"
#include "dtrain/optimizers/optimizer.hpp"

namespace dtrain {

/// What `compile` takes (Keras `model.compile(optimizer=, loss=, metrics=)`).
struct compile_options {
  any_optimizer optimizer{};
  any_loss loss{};
  std::vector<any_metric> metrics{};
};

/// One trainable variable of a model, as checkpoints name it.
struct variable_info {
  std::string name;  // "kernel", "bias"
  std::vector<std::size_t> shape;
  std::size_t offset;  // into parameters()
  std::size_t size;
};

/// One layer of a model, as `summary()` prints it.
struct layer_info {
  std::string name;        // "dense_1" (Keras numbering)
  std::string class_name;  // "Dense"
  std::string output_shape;
  std::size_t offset;  // of its first parameter
  std::size_t param_count;
  std::vector<variable_info> variables;
};

namespace detail {

/// Binds each layer spec to the output shape of the one before it.
template <class In, class... L>
struct chain {
  using type = std::tuple<>;
  using output = In;
};
template <class In, class L, class... R>
struct chain<In, L, R...> {
  using head = bind_t<L, In>;
  static_assert(layer<head>, "sequential: this layer does not keep the layer contract of dtrain/layers/concepts.hpp");
  using next = chain<typename head::output_shape, R...>;
  using type = decltype(std::tuple_cat(std::declval<std::tuple<head>>(), std::declval<typename next::type>()));
  using output = typename next::output;
};

}  // namespace detail

template <class Input, class... Specs>
class sequential {
  static_assert(detail::is_input<Input>::value,
                "sequential: the first template argument must be dtrain::input<...> (Keras: keras.Input(shape=...))");
  static_assert(sizeof...(Specs) > 0, "sequential: add at least one layer after the input");

 public:
  using input_shape = typename Input::shape;
  using layer_types = typename detail::chain<input_shape, Specs...>::type;
  using output_shape = typename detail::chain<input_shape, Specs...>::output;
  static constexpr std::size_t depth = sizeof...(Specs);

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
  static constexpr std::array<std::size_t, depth> param_sizes = sizes_of(std::make_index_sequence<depth>{});
  static constexpr std::array<std::size_t, depth> output_sizes = outputs_of(std::make_index_sequence<depth>{});
  static constexpr std::array<std::size_t, depth + 1> param_offsets = [] {
    std::array<std::size_t, depth + 1> o{};
    for (std::size_t i = 0; i < depth; ++i) o[i + 1] = o[i] + param_sizes[i];
    return o;
  }();
  /// Layer I needs d loss / d input only if a layer before it has parameters.
  static constexpr std::array<bool, depth> needs_input_grad = [] {
    std::array<bool, depth> r{};
    bool any = false;
    for (std::size_t i = 0; i < depth; ++i) r[i] = any, any = any || param_sizes[i] > 0;
    return r;
  }();
  static constexpr std::size_t max_width = [] {
    std::size_t m = input_shape::size;
    for (auto s : output_sizes) m = std::max(m, s);
    return m;
  }();

 public:
  /// Total number of parameters (all trainable).
  static constexpr std::size_t param_count = param_offsets[depth];

  /// Builds the model and initialises its weights from `seed` (Keras' default initialisers).
  explicit sequential(std::uint64_t seed = default_seed) : params_(param_count), grads_(param_count), rng_(seed) {
    detail::apply_thread_env();
    std::map<std::string, int> seen;
    each([&]<std::size_t I>() {
      using L = layer_type<I>;
      const int k = seen[L::keras_name]++;
      names_[I] = k == 0 ? std::string(L::keras_name) : std::string(L::keras_name) + "_" + std::to_string(k);
      std::get<I>(layers_).initialize(param_span<I>(), rng_);
    });
  }

  // ---- weights ----------------------------------------------------------------------------------

  /// Every parameter of the model, layer by layer (Keras `model.trainable_variables`, flattened).
  std::span<float> parameters() { return params_; }
  std::span<const float> parameters() const { return params_; }
  /// Gradients of the last `train_step` / `value_and_gradients`, laid out like `parameters()`.
  std::span<float> gradients() { return grads_; }
  std::span<const float> gradients() const { return grads_; }
  /// Parameters of layer I.
  template <std::size_t I>
  std::span<float> layer_parameters() {
    return param_span<I>();
  }
  /// Layer I itself.
  template <std::size_t I>
  layer_type<I>& layer() {
    return std::get<I>(layers_);
  }
  std::size_t count_params() const { return param_count; }
  /// Keras `model.get_weights()` flattened / `set_weights`.
  std::vector<float> get_weights() const { return params_; }
  void set_weights(std::span<const float> w) {
    if (w.size() != param_count)
      throw shape_error("set_weights: got " + std::to_string(w.size()) + " values for a model of " +
                        std::to_string(param_count) + " parameters");
    std::copy(w.begin(), w.end(), params_.begin());
  }

  /// Names, shapes and parameter ranges of the layers, in order.
  std::vector<layer_info> layers() const {
    std::vector<layer_info> out;
    each([&]<std::size_t I>() {
      using L = layer_type<I>;
      layer_info li{names_[I], L::class_name, L::output_shape::str(), param_offsets[I], param_sizes[I], {}};
      std::size_t at = param_offsets[I];
      for (const auto& p : L::params) {
        li.variables.push_back({p.name, std::vector<std::size_t>(p.dims.begin(), p.dims.begin() + p.rank), at, p.size()});
        at += p.size();
      }
      out.push_back(std::move(li));
    });
    return out;
  }

  /// Keras' `model.summary()` table.
  void summary(std::ostream& os = std::cout) const {
    constexpr int c1 = 28, c2 = 26, c3 = 11, width = c1 + c2 + c3;
    auto cell = [&](std::string s, int w) {
      s = " " + s;
      if (static_cast<int>(s.size()) > w) s = s.substr(0, w);
      os << s << std::string(w - s.size(), ' ');
    };
    auto row = [&](const std::string& a, const std::string& b, const std::string& c) {
      cell(a, c1), cell(b, c2), cell(c, c3), os << '\n';
    };
    os << "Model: \"sequential\"\n" << std::string(width, '_') << '\n';
    row("Layer (type)", "Output Shape", "Param #");
    os << std::string(width, '=') << '\n';
    const auto ls = layers();
    for (std::size_t i = 0; i < ls.size(); ++i) {
      row(ls[i].name + " (" + ls[i].class_name + ")", ls[i].output_shape, std::to_string(ls[i].param_count));
      if (i + 1 < ls.size()) os << std::string(width, ' ') << '\n';
    }
    os << std::string(width, '=') << '\n'
       << "Total params: " << thousands(param_count) << '\n'
       << "Trainable params: " << thousands(param_count) << '\n'
       << "Non-trainable params: 0\n"
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
  }
  bool compiled() const { return compiled_; }
  any_optimizer& optimizer() { return require_compiled("optimizer"), opt_; }
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
  dtrain::logs train_step(const tensor& x, const tensor& y) {
    require_compiled("train_step");
    const std::size_t n = check_batch(x, &y);
    forward(x.data(), n, true);
    const float loss = data_loss(y, n, true);
    const float reg = synced_backward(n) * static_cast<float>(replicas());  // the whole penalty, for the logs
    opt_.apply_gradients(grads_, params_);
    track(y, n, loss + reg);
    return metric_results();
  }

  /// Loss and metrics on a batch without training (Keras `test_on_batch` / `test_step`).
  dtrain::logs test_step(const tensor& x, const tensor& y) {
    require_compiled("test_step");
    const std::size_t n = check_batch(x, &y);
    forward(x.data(), n, false);
    track(y, n, data_loss(y, n, false) + regularization_loss());
    return metric_results();
  }

  // ---- fit, evaluate, predict (model/fit.hpp has the loops and their Keras semantics) ----------------

  /// Keras `model.fit(dataset, ...)`: trains on batches of (x, y) and returns the history.
  template <data::dataset D>
  history fit(const D& ds, fit_options o = {}) {
    if (o.validation_split > 0.0)
      throw usage_error("fit: validation_split is only supported for in-memory arrays; pass validation_data");
    return detail::run_fit(*this, ds, std::move(o));
  }
  /// Keras `model.fit(x, y, batch_size=, shuffle=, validation_split=, ...)` on in-memory arrays.
  history fit(const tensor& x, const tensor& y, fit_options o = {}) { return detail::run_fit_arrays(*this, x, y, std::move(o)); }

  /// Keras `model.evaluate(dataset, steps=)`: the loss and metrics over the dataset.
  template <data::dataset D>
  dtrain::logs evaluate(const D& ds, evaluate_options o = {}) {
    require_compiled("evaluate");
    return detail::run_evaluate(*this, ds, o);
  }
  dtrain::logs evaluate(const tensor& x, const tensor& y, evaluate_options o = {}) {
    return evaluate(data::from_tensor_slices(x, y) | data::batch(o.batch_size), o);
  }

  /// Keras `model.predict(dataset)`: the outputs of every batch, concatenated.
  template <data::dataset D>
  tensor predict(const D& ds, predict_options o = {}) {
    return detail::run_predict(*this, ds, o);
  }
  tensor predict(const tensor& x, predict_options o = {}) {
    return predict(data::from_tensor_slices(x) | data::batch(o.batch_size), o);
  }

  /// The model's outputs for a batch, in inference mode (Keras `predict_on_batch`).
  tensor predict_on_batch(const tensor& x) { return (*this)(x, false); }

  /// Keras `model(x, training=...)`.
  tensor operator()(const tensor& x, bool training = false) {
    const std::size_t n = check_batch(x, nullptr);
    forward(x.data(), n, training);
    return output_tensor(n);
  }

  /// The GradientTape step of a custom training loop: forward in training mode, per-example losses,
  /// `compute_average_loss(per_example, global_batch_size)` plus the regularization penalty scaled by
  /// `scale_regularization_loss(..., num_replicas)`, and backward. Fills `gradients()`, returns the loss.
  /// `global_batch_size = 0` means this batch's size. No optimizer step and no metric is touched.
  float value_and_gradients(const tensor& x, const tensor& y, const any_loss& loss_object,
                            std::size_t global_batch_size = 0, std::size_t num_replicas = 1) {
    const std::size_t n = check_batch(x, &y);
    forward(x.data(), n, true);
    const auto ey = extents_of(y);
    const batch_view pv = output_view(n), tv{y.data(), ey};
    const std::size_t rows = detail::loss_rows(pv);
    if (global_batch_size == 0) global_batch_size = rows;
    per_example_.resize(rows);
    float* d = detail::ensure(delta_a_, n * max_width);
    loss_object.per_example(tv, pv, per_example_.data(), d, 1.0f / static_cast<float>(global_batch_size));
    const float avg = compute_average_loss(per_example_, global_batch_size);
    const float saved = std::exchange(regularization_scale_, 1.0f / static_cast<float>(num_replicas));
    const float reg = synced_backward(n);
    regularization_scale_ = saved;
    return avg + reg;
  }

  /// The same with any differentiable loss: `f(predictions, d_predictions) -> loss`, where f writes
  /// d loss / d predictions into its second argument (same shape as the first).
  template <class F>
    requires std::is_invocable_r_v<float, F&, const tensor&, tensor&>
  float value_and_gradients(const tensor& x, F&& f) {
    const std::size_t n = check_batch(x, nullptr);
    forward(x.data(), n, true);
    const tensor pred = output_tensor(n);
    tensor dpred = zeros(extents_of(pred));
    const float l = f(pred, dpred);
    if (extents_of(dpred) != extents_of(pred))
      throw shape_error("value_and_gradients: the loss function changed d_predictions' shape to " +
                        shape_str(dpred.shape()) + " (predictions are " + shape_str(pred.shape()) + ")");
    std::copy(dpred.begin(), dpred.end(), detail::ensure(delta_a_, n * max_width));
    return l + synced_backward(n);
  }

  /// Sum of the layers' regularization penalties (Keras `sum(model.losses)`).
  float regularization_loss() {
    float s = 0.0f;
    each([&]<std::size_t I>() { s += std::get<I>(layers_).regularization(param_span<I>(), grad_span<I>(), 0.0f); });
    return s;
  }

  /// Runs backward from the loss gradient held in the delta buffer, calling `on_ready(I, offset, count)`
  /// as soon as layer I's gradients are final (last layer first): the hook distributed training uses
  /// to launch the all-reduce of a bucket while backward goes on.
  template <class Hook>
  float backward(std::size_t n, Hook&& on_ready) {
    float reg = 0.0f;
    float* dy = delta_a_.data();
    float* other = detail::ensure(delta_b_, n * max_width);
    layer_context<cpu> ctx{device_, rng_, true};
    each_reversed([&]<std::size_t I>() {
      if constexpr (detail::relabels_v<layer_type<I>>) {  // its input gradient is dy itself
        on_ready(I, param_offsets[I], param_sizes[I]);
        return;
      }
      const float* x = I == 0 ? input_ : out_[I - 1];
      float* dx = needs_input_grad[I] ? other : nullptr;
      auto& l = std::get<I>(layers_);
      l.backward(ctx, x, out_[I], dy, dx, n, param_span<I>(), grad_span<I>());
      reg += l.regularization(param_span<I>(), grad_span<I>(), regularization_scale_);
      on_ready(I, param_offsets[I], param_sizes[I]);
      if (dx) std::swap(dy, other);
    });
    // keep delta_a_ pointing at the buffer backward started from
    return regularization_scale_ * reg;
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
  rng& generator() { return rng_; }
  int replicas() const { return replica_ ? replica_->num_replicas_in_sync() : 1; }

 private:
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
  std::span<float> param_span() {
    return std::span<float>(params_).subspan(param_offsets[I], param_sizes[I]);
  }
  template <std::size_t I>
  std::span<float> grad_span() {
    return std::span<float>(grads_).subspan(param_offsets[I], param_sizes[I]);
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
      throw shape_error("sequential: input batch of shape " + shape_str(ex) + " does not match the model's input " +
                        input_shape::str() + " (layer '" + names_[0] + "' takes it)");
    if (ex[0] == 0) throw value_error("sequential: the batch is empty");
    if (y && (y->dimension() == 0 || y->shape()[0] != ex[0]))
      throw shape_error("sequential: x has " + std::to_string(ex[0]) + " samples (shape " + shape_str(ex) +
                        ") but y has shape " + shape_str(y->shape()));
    return ex[0];
  }

  void forward(const float* x, std::size_t n, bool training) {
    input_ = x;
    layer_context<cpu> ctx{device_, rng_, training};
    const float* in = x;
    each([&]<std::size_t I>() {
      if constexpr (detail::relabels_v<layer_type<I>>) {  // reshape, flatten: the output is the input
        out_[I] = in;
      } else {
        float* out = detail::ensure(outputs_[I], n * output_sizes[I]);
        std::get<I>(layers_).forward(ctx, in, out, n, param_span<I>());
        out_[I] = out;
      }
      in = out_[I];
    });
  }
  /// Backward, with the replicas' gradients summed when under a strategy.
  float synced_backward(std::size_t n) {
    if (!replica_) return backward(n, [](std::size_t, std::size_t, std::size_t) {});
    replica_->begin_gradients(grads_);
    const float reg = backward(n, [&](std::size_t, std::size_t offset, std::size_t count) {
      replica_->gradients_ready(offset, count);
    });
    replica_->finish_gradients();
    return reg;
  }

  batch_view output_view(std::size_t n) {
    out_extents_[0] = n;
    for (std::size_t i = 0; i < output_shape::rank; ++i) out_extents_[i + 1] = output_shape::dims[i];
    return {out_[depth - 1], out_extents_};
  }
  tensor output_tensor(std::size_t n) {
    const batch_view v = output_view(n);
    return from_span({v.data, v.size()}, extents(out_extents_.begin(), out_extents_.end()));
  }

  /// The compiled loss of the last forward on this replica's rows. With `grad`, its gradient goes to the
  /// delta buffer, divided by the number of replicas: summed over them it is the gradient of the loss
  /// averaged over the global batch.
  float data_loss(const tensor& y, std::size_t n, bool grad) {
    const auto ey = extents_of(y);
    const batch_view pv = output_view(n), tv{y.data(), ey};
    const std::size_t rows = detail::loss_rows(pv);
    per_example_.resize(rows);
    const float scale = loss_.get_reduction() == reduction::sum ? 1.0f : 1.0f / static_cast<float>(rows);
    loss_.per_example(tv, pv, per_example_.data(), grad ? detail::ensure(delta_a_, n * max_width) : nullptr,
                      scale / static_cast<float>(replicas()));
    double s = 0.0;
    for (float v : per_example_) s += v;
    return static_cast<float>(s) * scale;
  }
  void track(const tensor& y, std::size_t n, float loss) {
    const auto ey = extents_of(y);
    const batch_view pv = output_view(n), tv{y.data(), ey};
    loss_tracker_.update_state(loss, static_cast<double>(n));
    for (auto& m : metrics_) m.update_state(tv, pv);
  }
  static std::string thousands(std::size_t v) {
    std::string s = std::to_string(v);
    for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<std::size_t>(i), ",");
    return s;
  }

  cpu device_;
  layer_types layers_;
  std::array<std::string, depth> names_;
  std::vector<float> params_, grads_;
  std::array<std::vector<float>, depth> outputs_;  // layer outputs (unused by relabelling layers)
  std::array<const float*, depth> out_{};           // where each layer's output of the last forward is
  std::vector<float> delta_a_, delta_b_, per_example_;
  std::array<std::size_t, output_shape::rank + 1> out_extents_{};
  const float* input_ = nullptr;
  rng rng_;
  any_optimizer opt_;
  any_loss loss_;
  std::vector<any_metric> metrics_;
  mean loss_tracker_{"loss"};
  float regularization_scale_ = 1.0f;
  replica_context* replica_ = nullptr;
  bool compiled_ = false;
};

}  // namespace dtrain
