#pragma once
/// \file
/// `basic_model<B, Graph>`: one replica of a model on backend B: its state (model/model_state.hpp)
/// plus compile and the steps. `sequential` and `functional` (model/sequential.hpp) are its graphs.
///
/// Once the batch size is stable a training step allocates no tensor memory: activations, deltas and
/// layer workspaces grow to the largest batch seen and are reused; what remains is a few small vectors
/// of bookkeeping and the logs it returns (a count that depends on neither the batch nor the model).
/// Host memory meets the backend at the API edge only: a batch (an xtensor `tensor`) goes in,
/// predictions come out, and each step brings its loss, penalty and metric totals back in one small
/// download. Under a strategy the model is attached to it (`set_strategy`): its replica context for the
/// loop's collectives and a `gradient_sync` that sums its gradients during backward. Several replicas
/// in one process are the strategy's business (distribute/mirrored_model.hpp), not the model's.
///
/// `fit`, `evaluate` and `predict` are members whose loops live in model/fit.hpp (dtrain.hpp includes
/// it): this header brings in no data pipeline, callback or checkpoint code.

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
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
#include "dtrain/core/trace.hpp"
#include "dtrain/core/view.hpp"
#include "dtrain/distribute/gradient_sync.hpp"
#include "dtrain/distribute/replica_context.hpp"
#include "dtrain/layers/concepts.hpp"
#include "dtrain/layers/input.hpp"
#include "dtrain/layers/regularizers.hpp"
#include "dtrain/model/model_state.hpp"
#include "dtrain/model/graph.hpp"
#include "dtrain/losses/loss.hpp"
#include "dtrain/metrics/metric.hpp"
#include "dtrain/optimizers/loss_scale_optimizer.hpp"
#include "dtrain/optimizers/optimizer.hpp"

namespace dtrain {

/// What `compile` takes (Keras `model.compile(optimizer=, loss=, metrics=)`).
/// A model of several outputs takes `loss` for every output or `losses`, one per output, and weighs
/// them by `loss_weights` (default 1); `metrics` are computed on every output (as tf.keras 2 does with a
/// flat list; Keras 3 refuses one for several outputs) or `output_metrics` on each its own (Keras' list
/// of lists). Its logs name them "<output layer>_<metric>", each output's loss (unweighted, as Keras 3
/// logs it) "<output layer>_loss", and the weighted sum "loss".
struct compile_options {
  any_optimizer optimizer{};
  any_loss loss{};
  std::vector<any_metric> metrics{};
  std::vector<any_loss> losses{};                     // one per output (Keras: loss=[...])
  std::vector<float> loss_weights{};                  // one per output (Keras: loss_weights=[...])
  std::vector<std::vector<any_metric>> output_metrics{};  // one list per output (Keras: metrics=[[...], [...]])
  /// Metrics weighted by the steps' sample weights (Keras' `weighted_metrics`), on every output; logged
  /// under their names, or "weighted_<name>" where an unweighted metric of the output has that name.
  std::vector<any_metric> weighted_metrics{};
  /// Keras' `auto_scale_loss`: under a mixed_float16 policy (set before compile) the optimizer is wrapped
  /// in a `loss_scale_optimizer` unless it is one.
  bool auto_scale_loss = true;
};


namespace detail {

/// The loops of `fit`, `evaluate` and `predict` for a model type (model/fit.hpp).
template <class Model>
struct trainer;

}  // namespace detail

template <class B, class Graph>class basic_model : public model_state<B, Graph> {
  using state = model_state<B, Graph>;
  using typename state::ptr, typename state::cptr;
  using state::input_str, state::each, state::each_reversed;
  // the layout (model_state.hpp), by name here: a dependent base's names are not found in the lambdas
  static constexpr auto param_sizes = state::param_sizes;
  static constexpr auto param_offsets = state::param_offsets;
  static constexpr auto state_sizes = state::state_sizes;
  static constexpr auto state_offsets = state::state_offsets;
  static constexpr auto input_sizes = state::input_sizes;
  static constexpr auto output_sizes = state::output_sizes;
  static constexpr auto trains_upstream = state::trains_upstream;
  static constexpr std::size_t num_sources = state::num_sources;
  static constexpr bool joins_replicas = state::joins_replicas;

 public:
  using typename state::layer_types, typename state::prediction_type, typename state::input_gradient_type;
  template <std::size_t I>
  using layer_type = typename state::template layer_type<I>;
  static constexpr std::size_t depth = state::depth, num_inputs = state::num_inputs, num_outputs = state::num_outputs;
  static constexpr std::size_t param_count = state::param_count, weight_count = state::weight_count;
  using state::input_shapes, state::output_shapes, state::output_name;
  /// The same model on backend B2 (what `strategy.make_model<Model>()` builds).
  template <class B2>
  using rebind = basic_model<B2, Graph>;

  /// Builds the model on `device` and initialises its weights from `seed` (Keras' default initialisers,
  /// drawn on the host: every backend starts from the same weights).
  explicit basic_model(std::uint64_t seed = default_seed, B device = {}) : state(seed, std::move(device)) {}
  basic_model(basic_model&&) noexcept = default;
  basic_model& operator=(basic_model&&) noexcept = default;

  // ---- compile and steps ------------------------------------------------------------------------

  /// Keras `model.compile`: optimizer, loss (or one per output) and metrics (the loss is required).
  void compile(compile_options o) {
    if (!o.optimizer) throw usage_error("compile: an optimizer is required, e.g. .optimizer = dtrain::adam{}");
    if (o.losses.empty()) {
      if (!o.loss)
        throw usage_error("compile: a loss is required, e.g. .loss = dtrain::sparse_categorical_crossentropy{}");
      o.losses.assign(num_outputs, o.loss);
    } else {
      if (o.loss) throw usage_error("compile: give .loss (for every output) or .losses (one per output), not both");
      if (o.losses.size() != num_outputs)
        throw usage_error("compile: .losses has " + std::to_string(o.losses.size()) + " entries but the model has " +
                          std::to_string(num_outputs) + " outputs");
      for (std::size_t i = 0; i < o.losses.size(); ++i)
        if (!o.losses[i]) throw usage_error("compile: .losses[" + std::to_string(i) + "] holds no loss");
    }
    if (o.loss_weights.empty()) o.loss_weights.assign(num_outputs, 1.0f);
    if (o.loss_weights.size() != num_outputs)
      throw usage_error("compile: .loss_weights has " + std::to_string(o.loss_weights.size()) +
                        " entries but the model has " + std::to_string(num_outputs) + " outputs");
    for (float w : o.loss_weights)
      if (!std::isfinite(w)) throw value_error("compile: .loss_weights holds " + std::to_string(w));
    if (!o.output_metrics.empty() && !o.metrics.empty())
      throw usage_error("compile: give .metrics (for every output) or .output_metrics (a list per output), not both");
    if (!o.output_metrics.empty() && o.output_metrics.size() != num_outputs)
      throw usage_error("compile: .output_metrics has " + std::to_string(o.output_metrics.size()) +
                        " lists but the model has " + std::to_string(num_outputs) + " outputs");
    if (o.output_metrics.empty()) o.output_metrics.assign(num_outputs, o.metrics);
    opt_ = std::move(o.optimizer);
    if (o.auto_scale_loss && this->dtype_policy().compute_dtype() == dtype::float16 && !loss_scaling())
      opt_ = loss_scale_optimizer(std::move(opt_));
    opt_.set_replica_owned();  // each replica's model has its own
    if (loss_scale_optimizer* ls = loss_scaling()) {
      if (sync_ && sync_->applies_update())
        throw usage_error("compile: loss scaling (loss_scale_optimizer, or mixed_float16 with auto_scale_loss) is not "
                          "supported where parameter servers apply the updates: compile with .auto_scale_loss = "
                          "false and an unwrapped optimizer");
      ls->inner_optimizer().set_replica_owned();
    }
    losses_ = std::move(o.losses);
    loss_weights_ = std::move(o.loss_weights);
    metrics_.clear(), metric_output_.clear(), output_loss_trackers_.clear();
    for (std::size_t out = 0; out < num_outputs; ++out) {
      for (any_metric& m : o.output_metrics[out]) {
        metric_output_.push_back(out);
        metrics_.push_back(std::move(m));
      }
      for (const any_metric& m : o.weighted_metrics) {
        metric_output_.push_back(out);
        metrics_.push_back(m);
        metrics_.back().set_weighted(true);
      }
    }
    if (num_outputs > 1)
      for (std::size_t out = 0; out < num_outputs; ++out) output_loss_trackers_.emplace_back(output_name(out) + "_loss");
    compiled_ = true;
    step_logs_ = metric_results();  // the names a step's logs keep
  }
  bool compiled() const { return compiled_; }
  any_optimizer& optimizer() { return require_compiled("optimizer"), opt_; }
  const any_optimizer& optimizer() const { return require_compiled("optimizer"), opt_; }
  /// The loss (of the first output).
  const any_loss& loss() const { return require_compiled("loss"), losses_.front(); }
  /// The compiled metrics, output by output.
  std::vector<any_metric>& metrics() { return metrics_; }
  const std::vector<any_metric>& metrics() const { return metrics_; }
  /// The output each compiled metric is computed on.
  const std::vector<std::size_t>& metric_outputs() const { return metric_output_; }
  /// Each output's loss and its weight, as compiled.
  const std::vector<any_loss>& losses() const { return losses_; }
  const std::vector<float>& loss_weights() const { return loss_weights_; }
  mean& loss_tracker() { return loss_tracker_; }
  /// Each output's loss (before its weight, as Keras 3 logs it), tracked as "<output layer>_loss" (none
  /// for a model of one output).
  std::vector<mean>& output_loss_trackers() { return output_loss_trackers_; }

  /// Keras `model.reset_metrics()`.
  void reset_metrics() {
    loss_tracker_.state().reset();  // this replica's: each replica's model has its own
    for (auto& t : output_loss_trackers_) t.state().reset();
    for (auto& m : metrics_) m.state().reset();
  }
  /// The running loss and metric results (what a step returns) of this replica's states: `fit` and
  /// `evaluate` sum the replicas' states themselves.
  dtrain::logs metric_results() const {
    return results_of([&](std::size_t i) { return std::span<const float>(state_at(i).values); });
  }
  /// After a training step under a multi-worker strategy: the running loss and metrics over every
  /// worker, which the step summed with its gradients (what `fit` reports each step, as tf.keras does).
  /// Otherwise this replica's.
  dtrain::logs worker_results() const {
    if (worker_sums_.size() != state_values() + rider_count) return metric_results();
    std::size_t at = 0;  // (results_of asks for the states in order)
    return results_of([&](std::size_t i) {
      const std::span<const float> v(worker_sums_.data() + at, state_at(i).values.size());
      return at += v.size(), v;
    });
  }

  /// Under a multi-worker strategy a training step sums a few floats of the caller's over the workers in
  /// its last gradient collective, at no round trip of their own (`fit` sends its stop and preemption
  /// flags and the data's agreement on the next batch there): set `riders()` before the step (which
  /// consumes them: they are zero after it), read `rider_sums()` after it. The first is a veto: when any
  /// worker's is non-zero, every worker drops the step, which then changes nothing a checkpoint holds (no
  /// update; moving statistics, running metrics and the generator as before it), and `step_dropped()`
  /// says so. So one worker's decision to stop reaches the others with the next step, which they all drop.
  static constexpr std::size_t rider_count = 4;
  std::span<float, rider_count> riders() { return riders_; }
  std::span<const float, rider_count> rider_sums() const { return rider_sums_; }
  bool step_dropped() const { return dropped_; }
  /// Whether training steps sum the workers' running states and riders with the gradients (a model of a
  /// multi-worker strategy).
  bool sums_workers() const { return sync_ && replica_ && replica_->num_input_pipelines() > 1; }

  /// One optimisation step on a batch (Keras `train_on_batch` / `train_step`): forward, loss averaged
  /// over the batch plus the regularization penalty, backward, optimizer step, running metrics.
  /// Under a strategy, `x` is this replica's share of a global batch of `global_rows` rows (default:
  /// this batch's rows times the number of replicas): the loss is summed over the share and divided by
  /// the global rows, so replicas with unequal shares (a short last batch) still give the global mean.
  /// A replica whose share is empty (0 rows) adds no gradient but takes part in the step.
  /// A model of several inputs or outputs takes `std::vector<tensor>`s: x one per input, y one per output.
  /// The logs returned are the model's, updated in place by the next step (a step allocates nothing).
  const dtrain::logs& train_step(const tensor& x, const tensor& y, std::size_t global_rows = 0) {
    return train_on(one(x), one(y), global_rows);
  }
  template <class X, class Y>
    requires detail::tensor_lists<X, Y>
  const dtrain::logs& train_step(const X& x, const Y& y, std::size_t global_rows = 0) {
    return train_on(detail::as_tensors(x), detail::as_tensors(y), global_rows);
  }

  /// The same with Keras' `sample_weight`: a weight per sample (shape (n) or (n, 1)) or per loss row
  /// (shape (n, t) for predictions (n, t, classes)), which multiplies the row's loss and its gradient.
  /// The mean over the batch still divides by the rows, as Keras' `sum_over_batch_size` does. A model of
  /// several outputs takes one weights tensor for all outputs or one per output. Compile's `metrics` are
  /// not weighted, its `weighted_metrics` are (as Keras has them).
  const dtrain::logs& train_step(const tensor& x, const tensor& y, const tensor& sample_weight,
                                 std::size_t global_rows = 0) {
    return train_on(one(x), one(y), global_rows, one(sample_weight));
  }
  template <class X, class Y>
    requires detail::tensor_args<X, Y>
  const dtrain::logs& train_step(const X& x, const Y& y, const std::vector<tensor>& sample_weight,
                                 std::size_t global_rows = 0) {
    return train_on(detail::as_tensors(x), detail::as_tensors(y), global_rows, sample_weight);
  }

  /// Loss and metrics on a batch without training (Keras `test_on_batch` / `test_step`), with sample
  /// weights as train_step takes them.
  dtrain::logs test_step(const tensor& x, const tensor& y) { return test_on(one(x), one(y)); }
  template <class X, class Y>
    requires detail::tensor_lists<X, Y>
  dtrain::logs test_step(const X& x, const Y& y) {
    return test_on(detail::as_tensors(x), detail::as_tensors(y));
  }
  dtrain::logs test_step(const tensor& x, const tensor& y, const tensor& sample_weight) {
    return test_on(one(x), one(y), one(sample_weight));
  }
  template <class X, class Y>
    requires detail::tensor_args<X, Y>
  dtrain::logs test_step(const X& x, const Y& y, const std::vector<tensor>& sample_weight) {
    return test_on(detail::as_tensors(x), detail::as_tensors(y), sample_weight);
  }

  // ---- fit, evaluate, predict (model/fit.hpp has the loops and their Keras semantics) ----------------

  /// Keras `model.fit(dataset, ...)`: trains on batches of (x, y) and returns the history.
  template <class D, class T = detail::trainer<basic_model>>
    requires(!std::same_as<D, tensor> && !std::same_as<D, std::vector<tensor>>)
  auto fit(const D& ds, typename T::fit_options o = {}) {
    return T::fit(*this, ds, std::move(o));
  }
  /// Keras `model.fit(x, y, batch_size=, shuffle=, validation_split=, ...)` on in-memory arrays (lists
  /// of them for a model of several inputs or outputs).
  template <class X, class Y, class T = detail::trainer<basic_model>>
    requires detail::tensor_args<X, Y>
  auto fit(const X& x, const Y& y, typename T::fit_options o = {}) {
    return T::fit(*this, detail::as_tensors(x), detail::as_tensors(y), std::move(o));
  }
  /// Keras `model.evaluate(dataset, steps=)`: the loss and metrics over the dataset.
  template <class D, class T = detail::trainer<basic_model>>
    requires(!std::same_as<D, tensor> && !std::same_as<D, std::vector<tensor>>)
  dtrain::logs evaluate(const D& ds, typename T::evaluate_options o = {}) {
    return T::evaluate(*this, ds, std::move(o));
  }
  template <class X, class Y, class T = detail::trainer<basic_model>>
    requires detail::tensor_args<X, Y>
  dtrain::logs evaluate(const X& x, const Y& y, typename T::evaluate_options o = {}) {
    return T::evaluate(*this, detail::as_tensors(x), detail::as_tensors(y), std::move(o));
  }
  /// Keras `model.predict(dataset)`: the outputs of every batch, concatenated.
  template <class D, class T = detail::trainer<basic_model>>
    requires(!std::same_as<D, tensor> && !std::same_as<D, std::vector<tensor>>)
  prediction_type predict(const D& ds, typename T::predict_options o = {}) {
    return T::predict(*this, ds, std::move(o));
  }
  template <class X, class T = detail::trainer<basic_model>>
    requires detail::tensor_args<X, X>
  prediction_type predict(const X& x, typename T::predict_options o = {}) {
    return T::predict(*this, detail::as_tensors(x), std::move(o));
  }

  /// The model's outputs for a batch, in inference mode (Keras `predict_on_batch`).
  prediction_type predict_on_batch(const tensor& x) { return (*this)(x, false); }
  prediction_type predict_on_batch(const std::vector<tensor>& x) { return (*this)(x, false); }

  /// Keras `model(x, training=...)`.
  prediction_type operator()(const tensor& x, bool training = false) { return prediction(call_on(one(x), training)); }
  prediction_type operator()(const std::vector<tensor>& x, bool training = false) {
    return prediction(call_on(x, training));
  }

  /// The GradientTape step of a custom training loop: forward in training mode, the loss, plus the
  /// regularization penalty scaled by `scale_regularization_loss(..., num_replicas)`, and backward.
  /// Fills `gradients()`, returns the loss. The loss follows `loss_object`'s reduction as TF's custom
  /// loops do: `none` gives `compute_average_loss(per_example, global_batch_size)` (the guide's form;
  /// as in TF, `global_batch_size = 0` means this batch's size times the number of replicas); `sum` the
  /// sum over this replica's batch; `sum_over_batch_size` the mean over the batch, which under a strategy
  /// of several replicas is an error (TF raises too: each replica would average its own share).
  /// `num_replicas = 0` means the number of replicas (of the strategy that made the model; 1 without one).
  /// No optimizer step and no metric is touched. Under a strategy an empty batch (this replica's share
  /// of a short last batch) gives only its share of the penalty's gradient. A model of several outputs
  /// adds `loss_object`'s loss of every output.
  float value_and_gradients(const tensor& x, const tensor& y, const any_loss& loss_object,
                            std::size_t global_batch_size = 0, std::size_t num_replicas = 0) {
    return gradients_on(one(x), one(y), loss_object, global_batch_size, num_replicas);
  }
  template <class X, class Y>
    requires detail::tensor_lists<X, Y>
  float value_and_gradients(const X& x, const Y& y, const any_loss& loss_object, std::size_t global_batch_size = 0,
                            std::size_t num_replicas = 0) {
    return gradients_on(detail::as_tensors(x), detail::as_tensors(y), loss_object, global_batch_size, num_replicas);
  }

  /// The same with any differentiable loss: `f(predictions, d_predictions) -> loss`, where f writes
  /// d loss / d predictions into its second argument (same shape as the first), on the host; both are
  /// `prediction_type` (one tensor per output for a model of several).
  template <class X, class F>
    requires detail::tensor_args<X, X> && std::is_invocable_r_v<float, F&, const prediction_type&, prediction_type&>
  float value_and_gradients(const X& x_arg, F&& f) {
    const std::span<const tensor> x = detail::as_tensors(x_arg);
    const std::size_t n = check_batch(x, nullptr);
    forward(x, n, true);
    std::vector<tensor> preds(num_outputs), dpreds(num_outputs);
    for (std::size_t o = 0; o < num_outputs; ++o) preds[o] = output_tensor(o, n), dpreds[o] = zeros(extents_of(preds[o]));
    prediction_type pred = prediction(std::move(preds)), dpred = prediction(std::move(dpreds));
    const float l = f(std::as_const(pred), dpred);
    const std::span<const tensor> ps = detail::as_tensors(pred), ds = detail::as_tensors(dpred);
    if (ds.size() != num_outputs)
      throw shape_error("value_and_gradients: the loss function left " + std::to_string(ds.size()) +
                        " d_predictions for a model of " + std::to_string(num_outputs) + " outputs");
    for (std::size_t o = 0; o < num_outputs; ++o) {
      if (extents_of(ds[o]) != extents_of(ps[o]))
        throw shape_error("value_and_gradients: the loss function changed d_predictions' shape to " +
                          shape_str(ds[o].shape()) + " (predictions are " + shape_str(ps[o].shape()) + ")");
      this->device_.upload(ds[o].size(), ds[o].data(), ensure(this->device_, deltas_[o], ds[o].size()));
    }
    synced_backward(n);
    return l + regularization_scale_ * read_scalars()[penalty_slot];
  }

  /// Sum of the layers' regularization penalties (Keras `sum(model.losses)`).
  float regularization_loss() {
    add_penalties(ptr{}, 0.0f);
    return read_scalars()[penalty_slot];
  }

  /// Runs backward from the loss gradients held in the delta buffers (one per output), adding the
  /// layers' penalties (and their gradients, scaled by the regularization scale) on the way, and calling
  /// `on_ready(I, offset, count)` as soon as layer I's gradients are final (last layer first): the hook
  /// distributed training uses to launch the all-reduce of a bucket while backward goes on.
  ///
  /// Node by node from the last, each node's output gradient is complete when it runs (every node that
  /// takes its output comes after it): the first input gradient a source receives is written in place
  /// (an output's is its loss gradient), later ones (a source several nodes take) are added to it, and a
  /// relabelling layer hands its output gradient to its source as is.
  template <class Hook>
  void backward(std::size_t n, Hook&& on_ready) {
    grad_at_.fill(ptr{});
    for (std::size_t o = 0; o < num_outputs; ++o) grad_at_[num_inputs + Graph::output_nodes[o]] = deltas_[o].data();
    const ptr penalty = scalar_ptr() + penalty_slot;
    this->device_.fill(1, 0.0f, penalty);
    layer_context<B> plain_ctx = context(true), cast_ctx = cast_context(plain_ctx);
    each_reversed([&]<std::size_t I>() {
      const trace::scope traced("backward", this->names_[I]);
      constexpr auto src = Graph::template sources<I>;
      layer_context<B>& ctx = context_of<I>(plain_ctx, cast_ctx);
      ctx.state = this->template state_ptr<I>();
      const auto in_masks = input_masks<I>();
      ctx.masks = in_masks;
      const ptr dy = grad_at_[num_inputs + I];
      add_activity_penalty<I>(n, dy, regularization_scale_ * loss_scale_);  // its gradient joins dy before the layer's backward
      auto& l = std::get<I>(this->layers_);
      if constexpr (detail::relabels_v<layer_type<I>>) {
        if (wants_gradient(src[0])) {
          if (!grad_at_[src[0]]) grad_at_[src[0]] = dy;
          else this->device_.axpy(n * source_size(src[0]), 1.0f, dy, grad_at_[src[0]]);
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
          dx[k] = ensure(this->device_, scratch_grads_[k], e);
        } else {
          dx[k] = grad_at_[src[k]] = ensure(this->device_, source_grads_[src[k]], e);
        }
      }
      // under a mixed policy, the gradient into a layer whose output was cast is cast too, and so are an
      // autocasting layer's weight gradients (Keras: the casts' gradients)
      const dtype compute = this->policy_.compute_dtype();
      if (dy && cast_[num_inputs + I]) this->device_.round_to(n * output_sizes[I], compute, dy, dy);  // (null: not wanted)
      if constexpr (detail::merges_v<layer_type<I>>)
        l.backward(ctx, layer_inputs<I>(n), out_[I], dy, dx, n, weights<I>(), this->template grad_ptr<I>());
      else
        l.backward(ctx, layer_input<I>(src[0], n), out_[I], dy, dx[0], n, weights<I>(), this->template grad_ptr<I>());
      if (this->policy_.mixed() && detail::autocasts_v<layer_type<I>> && param_sizes[I] > 0)
        this->device_.round_to(param_sizes[I], compute, this->template grad_ptr<I>(), this->template grad_ptr<I>());
      for (std::size_t k = 0; k < src.size(); ++k)
        if (add[k]) this->device_.axpy(n * source_size(src[k]), 1.0f, dx[k], grad_at_[src[k]]);
      l.regularization(ctx, this->template param_ptr<I>(), this->template grad_ptr<I>(), regularization_scale_ * loss_scale_,
                       penalty);
      on_ready(I, param_offsets[I], param_sizes[I]);
    });
    input_gradient_.rows = n;
    for (std::size_t k = 0; k < num_inputs; ++k) input_gradient_.data[k] = watch_inputs_ ? grad_at_[k] : ptr{};
  }

  /// TF's `tape.watch(x)`: while on, every backward (`train_step`, `value_and_gradients`) also computes
  /// the gradient of the loss with respect to the model's inputs, which `input_gradients()` returns
  /// (adversarial examples, saliency, a generator trained through a discriminator). Every replica of a
  /// strategy must watch alike.
  void watch_inputs(bool on = true) { watch_inputs_ = on; }
  /// d loss / d x of the last backward made while watching inputs (TF: `tape.gradient(loss, x)`): a host
  /// tensor shaped like that x (one per input for a model of several).
  input_gradient_type input_gradients() {
    if (!watch_inputs_)
      throw usage_error(
          "input_gradients: call watch_inputs() before the step (TF: tape.watch(x)); nothing was recorded");
    std::vector<tensor> g(num_inputs);
    for (std::size_t k = 0; k < num_inputs; ++k) {
      extents e{input_gradient_.rows};
      e.insert(e.end(), input_shapes()[k].begin(), input_shapes()[k].end());
      g[k] = zeros(e);
      if (input_gradient_.rows > 0 && input_gradient_.data[k])
        this->device_.download(g[k].size(), cptr(input_gradient_.data[k]), g[k].data());
    }
    if constexpr (num_inputs == 1) return std::move(g.front());
    else return g;
  }

  /// Attaches the model to a strategy (what `strategy.make_model()` does): `r` is the strategy as the
  /// training loop sees it, `g` sums this replica's gradients with the others' during backward (both
  /// owned by the strategy, which outlives the model). The loss is then averaged over the GLOBAL batch
  /// and the regularization penalty divided by the number of replicas (TF's scale_regularization_loss).
  void set_strategy(replica_context* r, gradient_sync<B>* g) {
    replica_ = r;
    sync_ = g;
    regularization_scale_ = 1.0f / static_cast<float>(replicas());
  }
  replica_context* replica() const { return replica_; }
  /// The model's generator (dropout masks); saved with backups so a resumed run draws the same masks.
  rng& generator() { return this->rng_; }
  int replicas() const { return replica_ ? replica_->num_replicas_in_sync() : 1; }

  /// Makes this model a replica of `from` (what `mirrored_strategy`'s model does before a step when
  /// replica 0 changed): its weights, compile settings and optimizer with its state; metric states reset.
  void replicate(const basic_model& from) {
    this->set_weights(from.get_weights());
    this->set_dtype_policy(from.dtype_policy());
    opt_ = from.opt_;
    if (opt_) opt_.set_state(from.opt_.state());
    losses_ = from.losses_;
    loss_weights_ = from.loss_weights_;
    metrics_ = from.metrics_;
    metric_output_ = from.metric_output_;
    output_loss_trackers_ = from.output_loss_trackers_;
    compiled_ = from.compiled_;
    step_logs_ = from.step_logs_;
    reset_metrics();
  }

  /// Validates x (and y) against the model and returns the batch size: the errors a step on them gives.
  std::size_t check_batch(std::span<const tensor> x, const std::span<const tensor>* y) const {
    const std::string model = Graph::name;
    if (x.size() != num_inputs)
      throw shape_error(model + ": got " + std::to_string(x.size()) + " input arrays but the model takes " +
                        std::to_string(num_inputs) +
                        (num_inputs > 1 ? " (pass a std::vector<tensor>: one batch per input, in order)" : ""));
    std::size_t rows = 0;
    for (std::size_t k = 0; k < num_inputs; ++k) {
      const auto ex = dims_of(x[k]);
      const extents& want = input_shapes()[k];
      if (ex.size() != want.size() + 1 || !std::equal(want.begin(), want.end(), ex.begin() + 1))
        throw shape_error(model + ": input batch of shape " + shape_str(ex) + " does not match the model's input " +
                          (num_inputs > 1 ? std::to_string(k) + " " : std::string()) + input_str(k) + " (layer '" +
                          first_taker(k) + "' takes it)");
      if (k > 0 && ex[0] != rows)
        throw shape_error(model + ": input 0 has " + std::to_string(rows) + " samples but input " + std::to_string(k) +
                          " has shape " + shape_str(ex));
      rows = ex[0];
    }
    if (rows == 0) throw value_error(model + ": the batch is empty");
    each([&]<std::size_t I>() {  // layers that read an input's values as indices check them first
      if constexpr (requires { layer_type<I>::check_input(std::span<const float>{}, std::string{}); })
        for (std::size_t s : Graph::template sources<I>)
          if (s < num_inputs) layer_type<I>::check_input(std::span<const float>(x[s].data(), x[s].size()), this->names_[I]);
    });
    if (!y) return rows;
    if (y->size() != num_outputs)
      throw shape_error(model + ": got " + std::to_string(y->size()) + " target arrays but the model has " +
                        std::to_string(num_outputs) + " outputs" +
                        (num_outputs > 1 ? " (pass a std::vector<tensor>: one per output, in order)" : ""));
    for (std::size_t o = 0; o < num_outputs; ++o) {
      const tensor& t = (*y)[o];
      if (t.dimension() == 0 || t.shape()[0] != rows)
        throw shape_error(model + ": x has " + std::to_string(rows) + " samples (shape " + shape_str(x[0].shape()) +
                          ") but y" + (num_outputs > 1 ? "[" + std::to_string(o) + "]" : std::string()) +
                          " has shape " + shape_str(t.shape()));
    }
    return rows;
  }
  void require_compiled(const char* what) const {
    if (!compiled_) throw usage_error(std::string(what) + ": call compile() first (the model has no loss or optimizer)");
  }

 private:
  using tensors = std::span<const tensor>;

  /// The step's scalars in backend memory: the penalty sum, each output's loss sum, then each metric's
  /// total (and a scratch slot after them, for an activity penalty before its division).
  static constexpr std::size_t penalty_slot = 0, loss_slot = 1, metric_slot = 1 + num_outputs;

  /// What a step computes for a batch of targets, decided (and the targets checked) before it runs.
  struct step_plan {
    std::array<std::size_t, num_outputs> rows;  // loss rows of each output's predictions
    std::array<float, num_outputs> loss_scale;  // 1 / rows, or 1 for a summed loss
    std::vector<std::optional<metric_op>> metric_ops;  // per metric: its kernel, or none for a host metric
  };


  static tensors one(const tensor& t) { return tensors(&t, 1); }
  static prediction_type prediction(std::vector<tensor> p) {
    if constexpr (num_outputs == 1) return std::move(p.front());
    else return p;
  }

  const dtrain::logs& train_on(tensors x, tensors y, std::size_t global_rows, tensors w = {}) {
    require_compiled("train_step");
    begin_transaction();
    // loss scaling: this step's gradients (the loss's and the penalties') are scaled, no other pass's
    loss_scale_ = loss_scaling() ? loss_scaling()->dynamic_scale() : 1.0f;
    const struct reset {
      float& s;
      ~reset() { s = 1.0f; }
    } reset_scale{loss_scale_};
    if (empty_share(x)) {
      zero_gradients_step(worker_side());
      if (stands()) apply_update();
      return step_results();
    }
    const std::size_t n = check_batch(x, &y);
    const step_plan& plan = plan_step(losses_, y, n, true, !w.empty());
    check_weights(plan, w, n);
    forward(x, n, true);
    const auto t = targets(y);
    const bool uneven = global_rows != 0 && global_rows != n * std::size_t(replicas());
    for (std::size_t o = 0; o < num_outputs; ++o) {
      float scale = plan.loss_scale[o] / static_cast<float>(replicas());
      if (uneven && losses_[o].get_reduction() != reduction::sum)
        scale = plan.loss_scale[o] * static_cast<float>(n) / static_cast<float>(global_rows);
      compute_loss(o, losses_[o], y[o], t[o], n, loss_weights_[o] * scale * loss_scale_, true,
                   loss_weights_of(w, o, losses_[o].get_reduction()));
    }
    compute_metrics(plan, t, n);
    auto track_step = [&] {
      const float* s = read_scalars();
      const float reg = regularization_scale_ * s[penalty_slot] * static_cast<float>(replicas());  // the whole penalty
      track(plan, y, n, reg, s, w);
    };
    if (sums_workers()) {  // the running states go out with the last gradients
      synced_backward(n, worker_side(), [&] {
        track_step();
        pack_worker_states();
      });
      if (stands()) apply_update();
    } else {  // the scalars are read once the update is queued (a device runs on meanwhile)
      synced_backward(n);
      apply_update();
      track_step();
    }
    return step_results();
  }

  dtrain::logs test_on(tensors x, tensors y, tensors w = {}) {
    require_compiled("test_step");
    const std::size_t n = check_batch(x, &y);
    const step_plan& plan = plan_step(losses_, y, n, true, !w.empty());
    check_weights(plan, w, n);
    forward(x, n, false);
    const auto t = targets(y);
    for (std::size_t o = 0; o < num_outputs; ++o)
      compute_loss(o, losses_[o], y[o], t[o], n, 1.0f, false, loss_weights_of(w, o, losses_[o].get_reduction()));
    compute_metrics(plan, t, n);
    add_penalties(ptr{}, 0.0f, n);
    const float* s = read_scalars();
    track(plan, y, n, s[penalty_slot], s, w);
    return metric_results();
  }

  /// Every output's predictions for a batch.
  std::vector<tensor> call_on(tensors x, bool training) {
    std::vector<tensor> out(num_outputs);
    const std::size_t n = check_batch(x, nullptr);
    forward(x, n, training);
    for (std::size_t o = 0; o < num_outputs; ++o) out[o] = output_tensor(o, n);
    return out;
  }

  float gradients_on(tensors x, tensors y, const any_loss& loss_object, std::size_t global_batch_size,
                     std::size_t num_replicas) {
    const reduction red = loss_object.get_reduction();
    if (red == reduction::sum_over_batch_size && replicas() > 1)  // TF raises the same
      throw value_error("value_and_gradients: the loss '" + loss_object.name() + "' has reduction sum_over_batch_size, "
                        "which under a strategy of " + std::to_string(replicas()) + " replicas would average over "
                        "each replica's batch only; use reduction::none (value_and_gradients then averages over "
                        "the global batch, as compute_average_loss does) or reduction::sum");
    const float scale = 1.0f / static_cast<float>(num_replicas ? num_replicas : std::size_t(replicas()));
    const float saved = std::exchange(regularization_scale_, scale);
    if (empty_share(x)) {
      zero_gradients_step();
      regularization_scale_ = saved;
      return scale * read_scalars()[penalty_slot];
    }
    const std::size_t n = check_batch(x, &y);
    const step_plan& plan = plan_step({&loss_object, 1}, y, n, false);
    forward(x, n, true);
    const auto t = targets(y);
    std::array<double, num_outputs> divisor{};  // none: the global batch; sum: 1; sum_over_batch_size: the batch
    for (std::size_t o = 0; o < num_outputs; ++o) {
      divisor[o] = red == reduction::sum                  ? 1.0
                   : red == reduction::sum_over_batch_size ? double(plan.rows[o])
                   : global_batch_size                     ? double(global_batch_size)
                                                           : double(plan.rows[o] * std::size_t(replicas()));
      compute_loss(o, loss_object, y[o], t[o], n, static_cast<float>(1.0 / divisor[o]), true,
                   loss_weights_of({}, o, red));
    }
    synced_backward(n);
    regularization_scale_ = saved;
    const float* s = read_scalars();
    float total = 0.0f;
    for (std::size_t o = 0; o < num_outputs; ++o) total += static_cast<float>(s[loss_slot + o] / divisor[o]);
    return total + scale * s[penalty_slot];
  }

  /// A pass' context; a training pass' layers may sum values over the replicas.
  layer_context<B> context(bool training) {
    layer_context<B> ctx{this->device_, this->rng_, training};
    if (training && replica_ && replicas() > 1)
      ctx.replicas = {replicas(), replica_, [](void* r, std::span<float> v) {
                        static_cast<replica_context*>(r)->all_reduce(v, reduce_op::sum);
                      }};
    return ctx;
  }
  /// `ctx` on the device whose GEMMs multiply in the policy's compute dtype (detail::with_gemm_dtype), for
  /// the autocasting layers of a mixed policy; `ctx` itself under float32.
  layer_context<B> cast_context(const layer_context<B>& ctx) {
    if (!this->policy_.mixed()) return ctx;
    cast_device_.emplace(detail::with_gemm_dtype(this->device_, this->policy_.compute_dtype()));
    layer_context<B> cast{*cast_device_, ctx.random, ctx.training};
    cast.replicas = ctx.replicas;
    return cast;
  }
  /// The context layer I runs in: the cast one when it autocasts.
  template <std::size_t I>
  layer_context<B>& context_of(layer_context<B>& plain, layer_context<B>& cast) const {
    return detail::autocasts_v<layer_type<I>> ? cast : plain;
  }
  /// The optimizer's step with this replica's (summed) gradients, unless someone else applies it (a
  /// parameter server, the central copy of the variables), whose values the strategy then hands over.
  void apply_update() {
    const trace::scope traced("optimizer", "apply_gradients");
    loss_scale_optimizer* ls = loss_scaling();
    if (!sync_ || !sync_->applies_update()) {
      if (ls) apply_scaled(*ls);
      else opt_.apply_gradients(this->gradients(), this->parameters(), this->trainable_variable_sizes());
    } else if (ls) {
      ls->update_scale(gradients_finite());  // another replica steps (central storage): the scale follows alike
    }
    if (sync_) sync_->updated(this->parameters());
  }
  /// The compiled loss_scale_optimizer, if the optimizer is one.
  loss_scale_optimizer* loss_scaling() { return opt_.template target<loss_scale_optimizer>(); }
  /// Whether the (summed) gradients are all finite: in host memory, whether none has an all-ones
  /// exponent (adding one to the exponent then carries into the top bit; an OR of 32-bit words, which
  /// vectorizes); elsewhere, whether their sum (the backend's tree) is finite, an inf or a NaN making it
  /// non-finite (finite gradients whose sum overflows a float count as an overflow too).
  bool gradients_finite() {
    if constexpr (host_addressable_v<B>) {
      const float* g = this->grad_base();
      std::uint32_t carried = 0;
      for (std::size_t i = 0; i < param_count; ++i) carried |= (std::bit_cast<std::uint32_t>(g[i]) & 0x7f800000u) + 0x00800000u;
      return (carried >> 31) == 0;
    }
    const ptr slot = scalar_ptr() + metric_slot + metrics_.size();  // the scratch slot
    this->device_.sum(param_count, this->grad_base(), slot);
    float total = 0.0f;
    this->device_.download(1, cptr(slot), &total);
    return std::isfinite(total);
  }
  /// A loss-scaled step: finite gradients are divided by the scale (exact for a power of two) and the
  /// inner optimizer steps; else the step is skipped.
  void apply_scaled(loss_scale_optimizer& ls) {
    const float s = ls.dynamic_scale();
    if (!ls.update_scale(gradients_finite())) return;
    this->device_.scale(param_count, 1.0f / s, this->grad_base());
    ls.inner_optimizer().apply_gradients(this->gradients(), this->parameters(), this->trainable_variable_sizes());
  }
  /// The first layer that takes input k.
  std::string first_taker(std::size_t k) const {
    std::string name;
    each([&]<std::size_t I>() {
      for (std::size_t s : Graph::template sources<I>)
        if (s == k && name.empty()) name = this->names_[I];
    });
    return name;
  }

  /// Checks the targets against the losses (one, or one per output) and the compiled metrics before
  /// anything runs.
  /// The plan is the model's (`plan_`), reused by every step so that a step allocates nothing.
  /// With `weighted`, the weighted metrics are computed on the host (with the sample weights, in `track`).
  const step_plan& plan_step(std::span<const any_loss> losses, tensors y, std::size_t n, bool with_metrics = true,
                             bool weighted = false) {
    step_plan& p = plan_;
    p.metric_ops.clear();
    for (std::size_t o = 0; o < num_outputs; ++o) {
      const batch_view tv{y[o].data(), dims_of(y[o])}, pv = output_view(o, n, nullptr);
      const any_loss& loss = losses[losses.size() == 1 ? 0 : o];
      try {
        loss.validate(tv, pv);
      } catch (const shape_error& e) {
        if (num_outputs == 1) throw;
        throw shape_error("output " + std::to_string(o) + " ('" + output_name(o) + "'): " + e.what());
      } catch (const value_error& e) {
        if (num_outputs == 1) throw;
        throw value_error("output " + std::to_string(o) + " ('" + output_name(o) + "'): " + e.what());
      }
      p.rows[o] = detail::loss_rows(pv);
      p.loss_scale[o] = loss.get_reduction() != reduction::sum ? 1.0f / static_cast<float>(p.rows[o]) : 1.0f;
    }
    if (with_metrics)
      for (std::size_t i = 0; i < metrics_.size(); ++i) {
        const std::size_t o = metric_output_[i];
        auto op = metrics_[i].kernel({y[o].data(), dims_of(y[o])}, output_view(o, n, nullptr));  // checks the shapes
        // (a masked output's metrics weigh its rows by the mask: on the host)
        p.metric_ops.push_back((weighted && metrics_[i].weighted()) || output_masked(o) ? std::nullopt : op);
      }
    return p;
  }

  /// Checks sample weights (none, one tensor for every output, or one per output) against the batch's
  /// n samples and each output's loss rows.
  void check_weights(const step_plan& plan, tensors w, std::size_t n) const {
    if (w.empty()) return;
    if (w.size() != 1 && w.size() != num_outputs)
      throw shape_error(std::string(Graph::name) + ": got " + std::to_string(w.size()) + " sample_weight arrays but the "
                        "model has " + std::to_string(num_outputs) + " outputs (pass one for all, or one per output)");
    for (std::size_t o = 0; o < num_outputs; ++o) {
      const tensor& wt = *weights_of(w, o);
      const std::string which = "sample_weight" + (w.size() > 1 ? "[" + std::to_string(o) + "]" : std::string());
      if (wt.dimension() == 0 || wt.shape()[0] != n || (wt.size() != n && wt.size() != plan.rows[o]))
        throw shape_error(std::string(Graph::name) + ": " + which + " of shape " + shape_str(wt.shape()) + " does not fit a "
                          "batch of " + std::to_string(n) + " samples" + (num_outputs > 1 ? " at output '" + output_name(o) + "'" : "") +
                          " (expected one weight per sample, shape " + shape_str(extents{n}) +
                          (plan.rows[o] != n ? ", or one per loss row, " + std::to_string(plan.rows[o]) + " values" : "") + ")");
      if (wt.size() != n)
        for (std::size_t i = 0; i < metrics_.size(); ++i)
          if (metrics_[i].weighted() && metric_output_[i] == o)
            throw shape_error(std::string(Graph::name) + ": " + which + " of shape " + shape_str(wt.shape()) +
                              " weighs each loss row, but the weighted metric '" + metrics_[i].name() +
                              "' takes one weight per sample, shape " + shape_str(extents{n}));
      for (std::size_t i = 0; i < wt.size(); ++i)
        if (!std::isfinite(wt.data()[i]))
          throw value_error(std::string(Graph::name) + ": " + which + " value " + std::to_string(wt.data()[i]) +
                            " at index " + std::to_string(i) + " is not finite");
    }
  }
  /// Output o's sample weights among `w` (checked), or null.
  static const tensor* weights_of(tensors w, std::size_t o) {
    return w.empty() ? nullptr : &w[w.size() == 1 ? 0 : o];
  }

  /// Whether output o's predictions carry a mask (Keras' `_keras_mask` on y_pred).
  static constexpr bool output_masked(std::size_t o) { return mask_origin[num_inputs + Graph::output_nodes[o]] < num_sources; }
  /// The weights of output o's loss rows, as Keras' losses apply the mask of a masked output: the sample
  /// weights (if any) times the mask, and under sum_over_batch_size times rows / unmasked rows, so that
  /// the loss is the mean over the unmasked rows (none unmasked: 0); else `w`'s (or null).
  const tensor* loss_weights_of(tensors w, std::size_t o, reduction red) {
    const tensor* sw = weights_of(w, o);
    if (!output_masked(o)) return sw;
    tensor& m = masked_weights(sw, o);
    if (red == reduction::sum_over_batch_size) {
      double valid = 0.0;
      for (std::size_t r = 0; r < m.size(); ++r) valid += masks_[num_inputs + Graph::output_nodes[o]].host[r];
      const float scale = valid > 0.0 ? static_cast<float>(double(m.size()) / valid) : 0.0f;
      for (float& v : m) v *= scale;
    }
    return &m;
  }
  /// The weights of output o's rows for its metrics: the sample weights `w` (if any) times the mask of a
  /// masked output (Keras' metrics take the mask as weights), else `w`'s (or null).
  const tensor* metric_weights_of(tensors w, std::size_t o) {
    const tensor* sw = weights_of(w, o);
    return output_masked(o) ? &masked_weights(sw, o) : sw;
  }
  /// Output o's mask as row weights, times the sample weights `sw` (one per sample or per row) if any.
  tensor& masked_weights(const tensor* sw, std::size_t o) {
    const step_mask<B>& mask = masks_[num_inputs + Graph::output_nodes[o]];
    const std::size_t rows = mask_host_[mask_origin[num_inputs + Graph::output_nodes[o]] - num_inputs].size();
    const batch_view pv{nullptr, out_extents_[o]};  // (this step's)
    if (detail::loss_rows(pv) != rows)
      throw shape_error(std::string(Graph::name) + ": output '" + output_name(o) + "' of shape " + pv.str() +
                        " carries a mask of " + std::to_string(rows) + " steps, which does not give one weight per "
                        "row of its loss");
    tensor& m = masked_weights_[o];
    if (m.size() != rows) m = zeros(extents{rows});
    const std::size_t per_sample = sw && sw->size() < rows ? rows / sw->size() : 1;
    for (std::size_t r = 0; r < rows; ++r) m.data()[r] = mask.host[r] * (sw ? sw->data()[r / per_sample] : 1.0f);
    return m;
  }

  /// Host values as the backend reads them: the values themselves when the backend's memory is host
  /// memory, else a copy in `staging`.
  cptr to_device(std::span<const float> h, buffer_t<B, float>& staging) {
    if constexpr (host_addressable_v<B>) {
      return h.data();
    } else {
      const ptr p = ensure(this->device_, staging, h.size());
      this->device_.upload(h.size(), h.data(), p);
      return p;
    }
  }
  cptr to_device(const tensor& t, buffer_t<B, float>& staging) { return to_device({t.data(), t.size()}, staging); }
  /// Each output's targets as the backend reads them.
  std::array<cptr, num_outputs> targets(tensors y) {
    std::array<cptr, num_outputs> t;
    for (std::size_t o = 0; o < num_outputs; ++o) t[o] = to_device(y[o], y_stage_[o]);
    return t;
  }

  void forward(tensors x, std::size_t n, bool training) {
    for (std::size_t k = 0; k < num_inputs; ++k) input_[k] = to_device(x[k], x_stage_[k]);
    layer_context<B> plain_ctx = context(training), cast_ctx = cast_context(plain_ctx);
    const bool mixed = this->policy_.mixed();
    if (mixed) cast_weights();
    cast_at_.fill(cptr{});
    each([&]<std::size_t I>() {
      const trace::scope traced("forward", this->names_[I]);
      constexpr auto src = Graph::template sources<I>;
      if constexpr (mask_origin[num_inputs + I] == num_inputs + I) {  // a mask from the batch's own values
        std::vector<float>& m = mask_host_[I];
        m.resize(x[src[0]].size());
        layer_type<I>::compute_mask(std::span<const float>(x[src[0]].data(), m.size()), m.data());
        masks_[num_inputs + I] = {to_device(m, mask_stage_[I]), m.data()};
      } else if constexpr (mask_origin[num_inputs + I] < num_sources) {
        masks_[num_inputs + I] = masks_[mask_origin[num_inputs + I]];
      }
      const auto in_masks = input_masks<I>();
      plain_ctx.masks = cast_ctx.masks = in_masks;
      if constexpr (detail::relabels_v<layer_type<I>>) {  // reshape, flatten: the output is the input
        out_[I] = source_output(src[0]);
        cast_[num_inputs + I] = cast_[src[0]];
        return;
      }
      const ptr out = ensure(this->device_, outputs_[I], n * output_sizes[I]);
      layer_context<B>& ctx = context_of<I>(plain_ctx, cast_ctx);
      ctx.state = this->template state_ptr<I>();
      if constexpr (detail::merges_v<layer_type<I>>)
        std::get<I>(this->layers_).forward(ctx, layer_inputs<I>(n), out, n, weights<I>());
      else
        std::get<I>(this->layers_).forward(ctx, layer_input<I>(src[0], n), out, n, weights<I>());
      out_[I] = out;
      // a mixed policy's layers output the compute dtype; the model's outputs stay float32 for the loss
      cast_[num_inputs + I] = mixed && !is_output_node(I);
      if (cast_[num_inputs + I]) this->device_.round_to(n * output_sizes[I], this->policy_.compute_dtype(), out, out);
    });
  }
  /// Calls f.template operator()<I>() for every node I (in constant expressions too).
  template <class F>
  static constexpr void each_index(F&& f) {
    [&]<std::size_t... I>(std::index_sequence<I...>) { (f.template operator()<I>(), ...); }(std::make_index_sequence<depth>{});
  }
  /// Where each source's output takes its mask from (compile time): the node that computes it from a
  /// model input (itself), the source a layer that keeps masks has it from, or num_sources (none). A
  /// merge layer's output has a mask when every input has one (Keras': their OR, here one mask they
  /// share); attention's is the query's.
  static constexpr std::array<std::size_t, num_sources> mask_origin = [] {
    std::array<std::size_t, num_sources> o;
    o.fill(num_sources);
    each_index([&]<std::size_t I>() {
      using L = layer_type<I>;
      constexpr auto src = Graph::template sources<I>;
      if constexpr (detail::makes_mask_v<L>) {
        o[num_inputs + I] = num_inputs + I;
      } else if constexpr (detail::keeps_mask_v<L>) {  // a merge's only when every input has one (Keras')
        o[num_inputs + I] = o[src[0]];
        if constexpr (!detail::mask_of_first_v<L>)
          for (std::size_t s : src)
            if (o[s] == num_sources) o[num_inputs + I] = num_sources;
      }
    });
    return o;
  }();
  static_assert([] {
    bool ok = true;
    each_index([&]<std::size_t I>() {
      if constexpr (detail::makes_mask_v<layer_type<I>>) ok = ok && Graph::template sources<I>[0] < num_inputs;
    });
    return ok;
  }(), "model: a layer that makes a mask (embedding<..., mask_zero<true>>) takes a model input (its mask is the "
       "batch's own indices)");
  static_assert([] {
    bool ok = true;
    each_index([&]<std::size_t I>() {
      using L = layer_type<I>;
      if constexpr (detail::keeps_mask_v<L> && !detail::mask_of_first_v<L>)
        for (std::size_t s : Graph::template sources<I>)
          ok = ok && (mask_origin[num_inputs + I] == num_sources || mask_origin[s] == mask_origin[num_inputs + I]);
    });
    return ok;
  }(), "model: the inputs of a merge layer carry one mask (inputs masked by different embeddings, whose masks "
       "Keras ORs, are not supported)");
  /// The masks of node I's inputs in the last forward (for a layer that supports masking, else none).
  template <std::size_t I>
  auto input_masks() const {
    constexpr auto src = Graph::template sources<I>;
    std::array<step_mask<B>, detail::supports_masking_v<layer_type<I>> ? src.size() : 0> m{};
    for (std::size_t k = 0; k < m.size(); ++k) m[k] = masks_[src[k]];
    return m;
  }

  /// Source s's output of the last forward (k < K: input k, K + j: node j's).
  cptr source_output(std::size_t s) const { return s < num_inputs ? input_[s] : out_[s - num_inputs]; }
  /// What layer I reads of source s: its output, cast to the compute dtype (once per forward) for a
  /// layer that autocasts under a mixed policy.
  template <std::size_t I>
  cptr layer_input(std::size_t s, std::size_t n) {
    if (!this->policy_.mixed() || !detail::autocasts_v<layer_type<I>> || cast_[s]) return source_output(s);
    if (!cast_at_[s]) {
      const ptr c = ensure(this->device_, cast_sources_[s], n * source_size(s));
      this->device_.round_to(n * source_size(s), this->policy_.compute_dtype(), source_output(s), c);
      cast_at_[s] = c;
    }
    return cast_at_[s];
  }
  template <std::size_t I>
  std::array<cptr, Graph::template sources<I>.size()> layer_inputs(std::size_t n) {
    constexpr auto src = Graph::template sources<I>;
    std::array<cptr, src.size()> xs;
    for (std::size_t k = 0; k < src.size(); ++k) xs[k] = layer_input<I>(src[k], n);
    return xs;
  }
  /// The weights layer I computes with: under a mixed policy, an autocasting layer's cast copy.
  template <std::size_t I>
  cptr weights() const {
    if (this->policy_.mixed() && detail::autocasts_v<layer_type<I>>) return compute_params_.data() + param_offsets[I];
    return this->template param_ptr<I>();
  }
  /// The autocasting layers' weights cast to the compute dtype, for a forward and its backward.
  void cast_weights() {
    ensure(this->device_, compute_params_, param_count);
    each([&]<std::size_t I>() {
      if constexpr (detail::autocasts_v<layer_type<I>> && param_sizes[I] > 0)
        this->device_.round_to(param_sizes[I], this->policy_.compute_dtype(), this->template param_ptr<I>(),
                               compute_params_.data() + param_offsets[I]);
    });
  }
  static constexpr bool is_output_node(std::size_t i) {
    return std::find(Graph::output_nodes.begin(), Graph::output_nodes.end(), i) != Graph::output_nodes.end();
  }

  /// Backward, with the replicas' gradients summed when under a strategy: bucket by bucket during
  /// backward when the gradients are in host memory, else once backward is done. `side` (host floats)
  /// is summed in the same collective as the last gradients, once `local_done()` has filled it.
  template <class Local = void (*)()>
  void synced_backward(std::size_t n, std::span<float> side = {}, Local local_done = [] {}) {
    if (!sync_) {
      backward(n, [](std::size_t, std::size_t, std::size_t) {});
      return local_done();
    }
    if constexpr (host_addressable_v<B>) {
      sync_begin(side.size());
      backward(n, [&](std::size_t, std::size_t offset, std::size_t count) { sync_ready(offset, count); });
    } else {
      backward(n, [](std::size_t, std::size_t, std::size_t) {});
      sync_begin(side.size());
      for (std::size_t i = depth; i-- > 0;) sync_ready(param_offsets[i], param_sizes[i]);
    }
    local_done();
    sync_finish(side);
  }
  /// Sums the whole gradient buffer (and `side`) over the replicas, handing it over layer by layer from
  /// the last.
  void sync_gradients(std::span<float> side = {}) {
    sync_begin(side.size());
    for (std::size_t i = depth; i-- > 0;) sync_ready(param_offsets[i], param_sizes[i]);
    sync_finish(side);
  }
  /// The gradient sync sees the gradients with k side values in front: the region backward completes
  /// last, so they ride in the last collective.
  void sync_begin(std::size_t k) {
    side_count_ = k;  // (worker_side() reserved the room)
    sync_->begin(this->template span_of<float>(this->gradient_prefix(k), k + param_count), k);
  }
  void sync_ready(std::size_t offset, std::size_t count) { sync_->ready(side_count_ + offset, count); }
  void sync_finish(std::span<float> side) {
    const std::size_t k = std::exchange(side_count_, 0);
    if (k) {
      this->device_.upload(k, static_cast<const float*>(side.data()), this->gradient_prefix(k));
      sync_->ready(0, k);
    }
    {
      const trace::scope traced("comm", "wait for gradients");  // the communication backward did not hide
      sync_->finish();
    }
    if (k) this->device_.download(k, cptr(this->gradient_prefix(k)), side.data());
  }

  /// Under a multi-worker strategy a training step sums every worker's running loss and metric states
  /// (and the riders) with its gradients, so `fit` shows the global running values each step at no extra
  /// round trip: `worker_side()` is where they go, filled at the end of backward and holding the sums
  /// after the step.
  std::span<float> worker_side() {
    if (!sums_workers()) return {};
    worker_sums_.resize(state_values() + rider_count);
    this->reserve_gradient_prefix(worker_sums_.size());  // before backward writes the gradients
    return worker_sums_;
  }
  /// Copies the running states (in the order of state_at), then the riders, into `worker_sums_`.
  void pack_worker_states() {
    auto to = worker_sums_.begin();
    for (std::size_t i = 0; i < state_count(); ++i) to = std::copy(state_at(i).values.begin(), state_at(i).values.end(), to);
    std::copy(riders_.begin(), riders_.end(), worker_sums_.end() - rider_count);
  }

  /// A step any worker may veto (see riders()) keeps what it changes before its update, a checkpoint's
  /// worth apart from the weights: the generator, the running states and the moving statistics.
  void begin_transaction() {
    dropped_ = false;
    if (!sums_workers()) return;
    undo_.generator = this->rng_;
    undo_.states.resize(state_count());
    for (std::size_t i = 0; i < state_count(); ++i) undo_.states[i] = state_at(i);
    if constexpr (moving_count > 0)
      this->device_.copy(moving_count, cptr(this->params_.data() + param_count),
                         ensure(this->device_, undo_.moving, moving_count));
  }
  /// After the step's collectives: whether it stands (no worker vetoed it); if not, it is undone.
  bool stands() {
    if (!sums_workers()) return true;
    std::copy(worker_sums_.end() - rider_count, worker_sums_.end(), rider_sums_.begin());
    riders_ = {};
    if (rider_sums_[0] == 0.0f) return true;
    dropped_ = true;
    this->rng_ = undo_.generator;
    for (std::size_t i = 0; i < state_count(); ++i) mutable_state_at(i) = undo_.states[i];
    if constexpr (moving_count > 0)
      this->device_.copy(moving_count, cptr(undo_.moving.data()), this->params_.data() + param_count);
    return false;
  }
  static constexpr std::size_t moving_count = weight_count - param_count;  // the non-trainable variables

  /// Whether `x` is an empty share of a global batch: under a strategy, a replica may have no rows in a
  /// step (the short last batch, or its own data ran out before the other workers').
  bool empty_share(tensors x) const {
    return replica_ && !x.empty() && x[0].dimension() > 0 && x[0].shape()[0] == 0;
  }
  /// Whether backward computes d loss / d source s's output.
  bool wants_gradient(std::size_t s) const { return trains_upstream[s] || watch_inputs_; }
  static constexpr std::size_t source_size(std::size_t s) {
    return s < num_inputs ? input_sizes[s] : output_sizes[s - num_inputs];
  }

  /// The gradients of a replica without rows: only its share of the penalties' (so the replicas' sum
  /// still counts them once), summed with the other replicas' gradients. Layers that talk to the other
  /// replicas join their collectives where their forward and backward would (`join_forward`,
  /// `join_backward`), in the order a step with rows issues them among the gradient buckets.
  void zero_gradients_step(std::span<float> side = {}) {
    input_gradient_ = {};
    this->device_.fill(param_count, 0.0f, this->grad_base());
    add_penalties(this->grad_base(), regularization_scale_ * loss_scale_);
    if (!side.empty()) pack_worker_states();
    if constexpr (!joins_replicas) {
      sync_gradients(side);
    } else {
      layer_context<B> ctx = context(true);
      each([&]<std::size_t I>() {
        if constexpr (detail::joins_replicas_v<layer_type<I>>) {
          ctx.state = this->template state_ptr<I>();
          std::get<I>(this->layers_).join_forward(ctx);
        }
      });
      auto join_backward = [&]<std::size_t I>() {
        if constexpr (detail::joins_replicas_v<layer_type<I>>) {
          ctx.state = this->template state_ptr<I>();
          std::get<I>(this->layers_).join_backward(ctx, wants_gradient(Graph::template sources<I>[0]));
        }
      };
      if constexpr (host_addressable_v<B>) {
        sync_begin(side.size());
        each_reversed([&]<std::size_t I>() {
          join_backward.template operator()<I>();
          sync_ready(param_offsets[I], param_sizes[I]);
        });
        sync_finish(side);
      } else {
        each_reversed(join_backward);
        sync_gradients(side);
      }
    }
  }

  /// Adds every layer's penalty (and, with `grads`, `scale` times its gradient) into the penalty slot;
  /// with `rows`, the activity penalties of the last forward (of that many rows) too.
  void add_penalties(ptr grads, float scale, std::size_t rows = 0) {
    const ptr penalty = scalar_ptr() + penalty_slot;
    this->device_.fill(1, 0.0f, penalty);
    layer_context<B> ctx{this->device_, this->rng_, false};
    each([&]<std::size_t I>() {
      std::get<I>(this->layers_).regularization(ctx, this->template param_ptr<I>(), grads ? grads + param_offsets[I] : ptr{}, scale,
                                          penalty);
      add_activity_penalty<I>(rows, ptr{}, 0.0f);
    });
  }
  /// Layer I's activity penalty on its last output (n rows), R(y) / n as Keras 3 has it, into the penalty
  /// slot; with `dy`, `scale / n` times its gradient into dy.
  template <std::size_t I>
  void add_activity_penalty(std::size_t n, ptr dy, float scale) {
    using R = typename detail::activity_of<layer_type<I>>::type;
    if constexpr (R::active) {
      if (n == 0) return;
      const ptr own = scalar_ptr() + metric_slot + metrics_.size();  // the scratch slot
      this->device_.fill(1, 0.0f, own);
      R::apply(this->device_, n * output_sizes[I], out_[I], dy, scale / static_cast<float>(n), own);
      this->device_.axpy(1, 1.0f / static_cast<float>(n), cptr(own), scalar_ptr() + penalty_slot);
    }
  }

  /// Extents of the last forward's predictions of output o (batch first) with `data`.
  batch_view output_view(std::size_t o, std::size_t n, const float* data) {
    out_extents_[o][0] = n;
    return {data, out_extents_[o]};
  }
  /// Where output o's predictions of the last forward are.
  cptr output_ptr(std::size_t o) const { return out_[Graph::output_nodes[o]]; }
  /// A host copy of the last forward's predictions of output o.
  batch_view host_predictions(std::size_t o, std::size_t n) {
    const batch_view v = output_view(o, n, nullptr);
    host_pred_.resize(v.size());
    this->device_.download(host_pred_.size(), output_ptr(o), host_pred_.data());
    return output_view(o, n, host_pred_.data());
  }
  tensor output_tensor(std::size_t o, std::size_t n) {
    const batch_view v = host_predictions(o, n);
    return from_span({v.data, v.size()}, extents(v.extents.begin(), v.extents.end()));
  }

  /// The loss of output o of the last forward on this replica's rows, summed into its loss slot; with
  /// `grad`, `scale` times its gradient into the output's delta buffer. With sample weights `w` (checked),
  /// each row's loss and gradient are multiplied by its weight first.
  void compute_loss(std::size_t o, const any_loss& loss, const tensor& y, cptr t, std::size_t n, float scale, bool grad,
                    const tensor* w = nullptr) {
    const trace::scope traced("loss", trace::active() ? loss.name() : std::string());  // (no name to build untraced)
    const batch_view pv = output_view(o, n, nullptr);
    const std::size_t rows = detail::loss_rows(pv);
    const ptr per = ensure(this->device_, per_example_, rows);
    const ptr d = grad ? ensure(this->device_, deltas_[o], pv.size()) : ptr{};
    if (const auto k = loss.kernel()) {
      std::visit([&](const auto& op) { this->device_.loss(op, rows, pv.last(), scale, t, output_ptr(o), per, d); }, *k);
    } else {  // a host loss: on host copies of the predictions
      const batch_view hp = host_predictions(o, n);
      std::vector<float> hl(rows), hd(grad ? hp.size() : 0);
      loss.per_example({y.data(), dims_of(y)}, hp, hl.data(), grad ? hd.data() : nullptr, scale);
      this->device_.upload(rows, hl.data(), per);
      if (grad) this->device_.upload(hd.size(), hd.data(), d);
    }
    if (w) {  // the weight of each row, then of each of its values
      const std::size_t width = pv.last(), per_sample = w->size() == n ? rows / n : 1;
      row_weights_.resize(rows + (grad ? rows * width : 0));
      for (std::size_t r = 0; r < rows; ++r) row_weights_[r] = w->data()[r / per_sample];
      if (grad)
        for (std::size_t r = 0; r < rows; ++r)
          std::fill_n(row_weights_.begin() + std::ptrdiff_t(rows + r * width), width, row_weights_[r]);
      const cptr wd = to_device(row_weights_, weight_stage_);
      this->device_.multiply(rows, per, wd, per);
      if (grad) this->device_.multiply(rows * width, d, wd + rows, d);
    }
    this->device_.sum(rows, per, scalar_ptr() + loss_slot + o);
  }

  /// Each kernel metric's batch total into its slot (host metrics are updated in `track`).
  void compute_metrics(const step_plan& plan, const std::array<cptr, num_outputs>& t, std::size_t n) {
    for (std::size_t i = 0; i < plan.metric_ops.size(); ++i)
      if (plan.metric_ops[i]) {
        const std::size_t o = metric_output_[i];
        const batch_view pv = output_view(o, n, nullptr);
        std::visit([&](const auto& op) {
          this->device_.metric(op, plan.rows[o], pv.last(), t[o], output_ptr(o), scalar_ptr() + metric_slot + i);
        }, *plan.metric_ops[i]);
      }
  }

  /// The running states: the loss tracker's, then each output's loss tracker's, then each metric's.
  std::size_t state_count() const { return 1 + output_loss_trackers_.size() + metrics_.size(); }
  const metric_state& state_at(std::size_t i) const {
    if (i == 0) return loss_tracker_.state();
    if (i <= output_loss_trackers_.size()) return output_loss_trackers_[i - 1].state();
    return metrics_[i - 1 - output_loss_trackers_.size()].state();
  }
  metric_state& mutable_state_at(std::size_t i) { return const_cast<metric_state&>(state_at(i)); }
  /// The values of all running states together.
  std::size_t state_values() const {
    std::size_t n = 0;
    for (std::size_t i = 0; i < state_count(); ++i) n += state_at(i).values.size();
    return n;
  }
  /// The result of the i-th state's values `v` (see state_at).
  float result_at(std::size_t i, std::span<const float> v) const {
    const std::size_t trackers = 1 + output_loss_trackers_.size();
    return i < trackers ? detail::mean_result(v) : metrics_[i - trackers].result_of(v);
  }
  /// The running results in `step_logs_`, whose names compile() set.
  const dtrain::logs& step_results() {
    for (std::size_t i = 0; i < step_logs_.size(); ++i) step_logs_.value_at(i) = result_at(i, state_at(i).values);
    return step_logs_;
  }
  /// The logs of the loss trackers' and metrics' states, `state(i)` being the values of the i-th (see
  /// state_at), asked for in order.
  template <class State>
  dtrain::logs results_of(State state) const {
    dtrain::logs l;
    l.set("loss", result_at(0, state(0)));
    std::size_t i = 1;
    for (const auto& t : output_loss_trackers_) l.set(t.name(), result_at(i, state(i))), ++i;
    for (std::size_t k = 0; k < metrics_.size(); ++k, ++i) {
      const std::string prefix = num_outputs == 1 ? "" : output_name(metric_output_[k]) + "_";
      const bool taken = metrics_[k].weighted() && l.contains(prefix + metrics_[k].name());
      l.set(prefix + (taken ? "weighted_" : "") + metrics_[k].name(), result_at(i, state(i)));
    }
    return l;
  }

  /// Adds a step's losses (the total: each output's weighted, plus `penalty`; each output's as it is,
  /// as Keras 3 logs them) and metrics to the running ones.
  void track(const step_plan& plan, tensors y, std::size_t n, float penalty, const float* s, tensors w) {
    float loss = penalty;
    for (std::size_t o = 0; o < num_outputs; ++o) {
      const float lo = s[loss_slot + o] * plan.loss_scale[o];
      loss += loss_weights_[o] * lo;
      if constexpr (num_outputs > 1) output_loss_trackers_[o].state().add({double(lo) * double(n), double(n)});
    }
    loss_tracker_.state().add({double(loss) * double(n), double(n)});
    std::optional<batch_view> hp;  // the host copy of output hp_of's predictions
    std::size_t hp_of = num_outputs;
    for (std::size_t i = 0; i < plan.metric_ops.size(); ++i) {
      const std::size_t o = metric_output_[i];
      if (plan.metric_ops[i]) {
        metrics_[i].state().add({s[metric_slot + i], static_cast<double>(plan.rows[o])});
      } else {
        if (hp_of != o) hp = host_predictions(o, n), hp_of = o;
        const batch_view t{y[o].data(), dims_of(y[o])};
        if (const tensor* wo = metric_weights_of(metrics_[i].weighted() ? w : tensors{}, o))
          metrics_[i].add_batch(t, *hp, {wo->data(), wo->size()}, metrics_[i].state());
        else
          metrics_[i].add_batch(t, *hp, metrics_[i].state());
      }
    }
  }

  ptr scalar_ptr() { return ensure(this->device_, scalars_, metric_slot + metrics_.size() + 1); }  // + a scratch slot
  /// The step's scalars, downloaded (the step's one synchronisation with the host).
  const float* read_scalars() {
    scalar_values_.resize(metric_slot + metrics_.size());
    this->device_.download(scalar_values_.size(), scalar_ptr(), scalar_values_.data());
    return scalar_values_.data();
  }


  std::array<buffer_t<B, float>, depth> outputs_;  // layer outputs (unused by relabelling layers)
  std::array<cptr, depth> out_{};                  // where each layer's output of the last forward is
  buffer_t<B, float> per_example_, scalars_;
  std::array<buffer_t<B, float>, num_inputs> x_stage_;              // inputs, for a non-host backend
  std::array<buffer_t<B, float>, num_outputs> y_stage_, deltas_;    // targets; d loss / d each output
  std::array<buffer_t<B, float>, num_sources> source_grads_;  // d loss / d each source's output (backward)
  std::array<ptr, num_sources> grad_at_{};                    // where each source's gradient is (backward)
  std::vector<buffer_t<B, float>> scratch_grads_;           // input gradients to add to a source's
  std::vector<float> scalar_values_, host_pred_, row_weights_;  // row_weights_: a step's sample weights, expanded
  buffer_t<B, float> weight_stage_;                              // ...on a non-host backend
  std::array<extents, num_outputs> out_extents_ = [] {  // each output's, batch first (set per step)
    std::array<extents, num_outputs> e;
    for (std::size_t o = 0; o < num_outputs; ++o) {
      e[o] = {0};
      e[o].insert(e[o].end(), output_shapes()[o].begin(), output_shapes()[o].end());
    }
    return e;
  }();
  std::array<cptr, num_inputs> input_{};
  // masks (see mask_origin): what each source's output carries in the last forward; the host values and
  // device copies of those the model computes
  std::array<step_mask<B>, num_sources> masks_{};
  std::array<std::vector<float>, depth> mask_host_;
  std::array<buffer_t<B, float>, depth> mask_stage_;
  std::array<tensor, num_outputs> masked_weights_;  // a step's masked outputs' row weights (masked_weights)
  // a mixed policy's casts (see forward): the autocasting layers' weights; sources cast for them (where
  // the source's output is not already in the compute dtype: an input, a model output); whether each
  // source's output of the last forward is in the compute dtype
  buffer_t<B, float> compute_params_;
  std::optional<B> cast_device_;  // the device of cast_context
  std::array<buffer_t<B, float>, num_sources> cast_sources_;
  std::array<cptr, num_sources> cast_at_{};
  std::array<bool, num_sources> cast_{};
  any_optimizer opt_;
  std::vector<any_loss> losses_;  // one per output
  std::vector<float> loss_weights_;
  std::vector<any_metric> metrics_;        // every output's, output by output
  std::vector<std::size_t> metric_output_;  // the output each metric is computed on
  mean loss_tracker_{"loss"};
  std::vector<mean> output_loss_trackers_;
  float regularization_scale_ = 1.0f;
  float loss_scale_ = 1.0f;  // what a training step's gradients are scaled by (loss_scale_optimizer)
  replica_context* replica_ = nullptr;
  gradient_sync<B>* sync_ = nullptr;  // how gradients are summed over the replicas (null: no strategy)
  step_plan plan_;                     // the step's (see plan_step)
  dtrain::logs step_logs_;             // what train_step returns, updated in place
  std::size_t side_count_ = 0;         // side values in front of the gradients in the sync under way
  std::vector<float> worker_sums_;     // the running states and riders, summed over the workers by a step
  std::array<float, rider_count> riders_{}, rider_sums_{};  // this worker's, for the next step; the last sums
  bool dropped_ = false;  // the last training step was vetoed
  struct {
    rng generator;
    std::vector<metric_state> states;
    buffer_t<B, float> moving;
  } undo_;  // what a vetoed step restores (see begin_transaction)
  bool compiled_ = false;
  bool watch_inputs_ = false;              // backward computes d loss / d inputs (watch_inputs)
  struct {
    std::array<ptr, num_inputs> data{};
    std::size_t rows = 0;
  } input_gradient_;  // where the last backward left d loss / d inputs
};


}  // namespace dtrain
