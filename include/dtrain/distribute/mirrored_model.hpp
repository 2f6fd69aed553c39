#pragma once
/// \file
/// `mirrored_model<M>`: what `mirrored_strategy::make_model` returns, a model M (one replica) with
/// copies on the strategy's other devices, driven together: TF's mirrored variables for a whole model.
/// The user holds it as they would hold M, with M's members; it is replica 0, and it holds the others.
/// - A step called from outside `strategy.run` (what `fit`, `evaluate` and `predict` do) splits the
///   batch (replica i of N takes rows [i B/N, (i+1) B/N), as `distribute_dataset` does across
///   workers), runs every replica at once through the strategy's `local_replicas`, each summing its
///   gradients with the others' (their `gradient_sync`s), and adds the replicas' metric states into
///   replica 0's.
/// - Inside `strategy.run`, a call goes to the running replica's copy.
/// - What changes replica 0 from outside a step (`set_weights`, `compile`, the dtype policy, the optimizer, parameters
///   or generator reached through their accessors, a restored backup) is copied to the others before
///   the next step, between two barriers that keep the replicas out of the copies meanwhile.
/// M is a private base: a `mirrored_model` does not convert to M&, so no function taking M& can train
/// replica 0 alone by mistake; M's members that need no replica are brought in by name.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/core/logs.hpp"
#include "dtrain/core/random.hpp"
#include "dtrain/core/replica_group.hpp"
#include "dtrain/core/tensor.hpp"
#include "dtrain/core/trace.hpp"
#include "dtrain/distribute/replica_context.hpp"

namespace dtrain {

namespace detail {
/// The loops of `fit`, `evaluate` and `predict` for a model type (model/fit.hpp).
template <class Model>
struct trainer;
/// What a one-argument member function takes (M's `compile_options`, without naming model/ here).
template <class F>
struct argument_of;
template <class C, class A>
struct argument_of<void (C::*)(A)> {
  using type = A;
};
}  // namespace detail

template <class M>
class mirrored_model : private M {
  using tensors = std::span<const tensor>;
  // M's optimizer and loss types, named through M (distribute/ includes no model, loss or optimizer header)
  using any_optimizer = std::remove_cvref_t<decltype(std::declval<M&>().optimizer())>;
  using any_loss = std::remove_cvref_t<decltype(std::declval<const M&>().loss())>;

 public:
  using typename M::backend_type;
  using typename M::graph_type;
  using typename M::layer_types;
  using typename M::prediction_type;
  using typename M::input_gradient_type;
  template <std::size_t I>
  using layer_type = typename M::template layer_type<I>;
  template <std::size_t K>
  using input_shape_at = typename M::template input_shape_at<K>;
  template <std::size_t O>
  using output_shape_at = typename M::template output_shape_at<O>;
  using typename M::input_shape;
  using typename M::output_shape;
  using M::depth, M::num_inputs, M::num_outputs, M::param_count, M::weight_count;
  using M::input_shapes, M::output_shapes;

  /// Replica 0 is `first`, replica i >= 1 is `others[i - 1]` (models of the same type, each on its
  /// device, attached to the strategy); `local` runs them and `context` holds their barrier.
  mirrored_model(M first, std::vector<M> others, local_replicas& local, replica_context& context)
      : M(std::move(first)), others_(std::move(others)), local_(&local), context_(&context) {}
  mirrored_model(mirrored_model&&) noexcept = default;
  mirrored_model& operator=(mirrored_model&&) noexcept = default;

  // ---- what needs no replica: replica 0's -------------------------------------------------------------
  using M::device, M::non_trainable_weights, M::count_params, M::get_weights, M::source_name, M::output_name;
  using M::layers, M::summary, M::compiled, M::loss, M::metrics, M::metric_outputs, M::losses, M::loss_weights;
  using M::loss_tracker, M::output_loss_trackers, M::reset_metrics, M::metric_results, M::worker_results,
      M::regularization_loss, M::riders, M::rider_sums, M::step_dropped,
      M::sums_workers;
  using M::replica, M::replicas, M::check_batch, M::layer, M::layer_parameters, M::dtype_policy;

  // ---- what changes the replicas' shared state: copied to them before the next step -------------------
  void set_weights(std::span<const float> w) { M::set_weights(w), touch(); }
  void compile(typename detail::argument_of<decltype(&M::compile)>::type o) { M::compile(std::move(o)), touch(); }
  rng& generator() { return touch(), M::generator(); }
  template <class P>
  void set_dtype_policy(const P& p) { M::set_dtype_policy(p), touch(); }

  // ---- what each replica has its own of: the running replica's inside `strategy.run` ------------------
  span_t<backend_type, float> parameters() {
    if (M* r = entry()) return r->parameters();
    return touch(), M::parameters();
  }
  span_t<backend_type, const float> parameters() const { return M::parameters(); }
  span_t<backend_type, float> gradients() {
    if (M* r = entry()) return r->gradients();
    return M::gradients();
  }
  span_t<backend_type, const float> gradients() const { return M::gradients(); }
  any_optimizer& optimizer() {
    if (M* r = entry()) return r->optimizer();
    return touch(), M::optimizer();
  }
  const any_optimizer& optimizer() const { return M::optimizer(); }

  // ---- steps: the running replica's inside `strategy.run`, split among the replicas outside ----------
  logs train_step(const tensor& x, const tensor& y, std::size_t global_rows = 0) {
    if (M* r = entry()) return r->train_step(x, y, global_rows);
    return train_on(one(x), one(y), global_rows);
  }
  template <class X, class Y>
    requires detail::tensor_lists<X, Y>
  logs train_step(const X& x, const Y& y, std::size_t global_rows = 0) {
    if (M* r = entry()) return r->train_step(x, y, global_rows);
    return train_on(detail::as_tensors(x), detail::as_tensors(y), global_rows);
  }
  logs train_step(const tensor& x, const tensor& y, const tensor& sample_weight, std::size_t global_rows = 0) {
    if (M* r = entry()) return r->train_step(x, y, sample_weight, global_rows);
    return train_on(one(x), one(y), global_rows, one(sample_weight));
  }
  template <class X, class Y>
    requires detail::tensor_args<X, Y>
  logs train_step(const X& x, const Y& y, const std::vector<tensor>& sample_weight, std::size_t global_rows = 0) {
    if (M* r = entry()) return r->train_step(x, y, sample_weight, global_rows);
    return train_on(detail::as_tensors(x), detail::as_tensors(y), global_rows, sample_weight);
  }
  logs test_step(const tensor& x, const tensor& y) {
    if (M* r = entry()) return r->test_step(x, y);
    return test_on(one(x), one(y));
  }
  template <class X, class Y>
    requires detail::tensor_lists<X, Y>
  logs test_step(const X& x, const Y& y) {
    if (M* r = entry()) return r->test_step(x, y);
    return test_on(detail::as_tensors(x), detail::as_tensors(y));
  }
  logs test_step(const tensor& x, const tensor& y, const tensor& sample_weight) {
    if (M* r = entry()) return r->test_step(x, y, sample_weight);
    return test_on(one(x), one(y), one(sample_weight));
  }
  template <class X, class Y>
    requires detail::tensor_args<X, Y>
  logs test_step(const X& x, const Y& y, const std::vector<tensor>& sample_weight) {
    if (M* r = entry()) return r->test_step(x, y, sample_weight);
    return test_on(detail::as_tensors(x), detail::as_tensors(y), sample_weight);
  }
  prediction_type predict_on_batch(const tensor& x) { return (*this)(x, false); }
  prediction_type predict_on_batch(const std::vector<tensor>& x) { return (*this)(x, false); }
  prediction_type operator()(const tensor& x, bool training = false) {
    if (M* r = entry()) return (*r)(x, training);
    return call_on(one(x), training);
  }
  prediction_type operator()(const std::vector<tensor>& x, bool training = false) {
    if (M* r = entry()) return (*r)(x, training);
    return call_on(x, training);
  }

  float value_and_gradients(const tensor& x, const tensor& y, const any_loss& loss_object,
                            std::size_t global_batch_size = 0, std::size_t num_replicas = 0) {
    if (M* r = entry()) return r->value_and_gradients(x, y, loss_object, global_batch_size, num_replicas);
    return gradients_on(one(x), one(y), loss_object, global_batch_size, num_replicas);
  }
  template <class X, class Y>
    requires detail::tensor_lists<X, Y>
  float value_and_gradients(const X& x, const Y& y, const any_loss& loss_object, std::size_t global_batch_size = 0,
                            std::size_t num_replicas = 0) {
    if (M* r = entry()) return r->value_and_gradients(x, y, loss_object, global_batch_size, num_replicas);
    return gradients_on(detail::as_tensors(x), detail::as_tensors(y), loss_object, global_batch_size, num_replicas);
  }
  template <class X, class F>
    requires detail::tensor_args<X, X> && std::is_invocable_r_v<float, F&, const prediction_type&, prediction_type&>
  float value_and_gradients(const X& x, F&& f) {
    if (M* r = entry()) return r->value_and_gradients(x, f);
    throw usage_error("value_and_gradients(x, f): this model has in-process replicas (mirrored_strategy); call it "
                      "inside strategy.run(...), where each replica calls f on its own rows");
  }

  /// TF's `tape.watch(x)`, on every replica.
  void watch_inputs(bool on = true) {
    M::watch_inputs(on);
    for (M& r : others_) r.watch_inputs(on);
  }
  /// The running replica's d loss / d x inside `strategy.run`; outside, every replica's rows in order.
  input_gradient_type input_gradients() {
    if (M* r = entry()) return r->input_gradients();
    std::vector<input_gradient_type> parts{M::input_gradients()};
    for (M& r : others_) parts.push_back(r.input_gradients());
    if constexpr (num_inputs == 1) {
      return detail::concatenate_rows(parts);
    } else {
      std::vector<tensor> g(num_inputs);
      for (std::size_t k = 0; k < num_inputs; ++k) {
        std::vector<tensor> column;
        for (auto& p : parts) column.push_back(std::move(p[k]));
        g[k] = detail::concatenate_rows(column);
      }
      return g;
    }
  }

  // ---- fit, evaluate, predict (model/fit.hpp): the loops see the replicas as one model -----------------
  template <class D, class T = detail::trainer<mirrored_model>>
    requires(!std::same_as<D, tensor> && !std::same_as<D, std::vector<tensor>>)
  auto fit(const D& ds, typename T::fit_options o = {}) {
    return T::fit(*this, ds, std::move(o));
  }
  template <class X, class Y, class T = detail::trainer<mirrored_model>>
    requires detail::tensor_args<X, Y>
  auto fit(const X& x, const Y& y, typename T::fit_options o = {}) {
    return T::fit(*this, detail::as_tensors(x), detail::as_tensors(y), std::move(o));
  }
  template <class D, class T = detail::trainer<mirrored_model>>
    requires(!std::same_as<D, tensor> && !std::same_as<D, std::vector<tensor>>)
  logs evaluate(const D& ds, typename T::evaluate_options o = {}) {
    return T::evaluate(*this, ds, std::move(o));
  }
  template <class X, class Y, class T = detail::trainer<mirrored_model>>
    requires detail::tensor_args<X, Y>
  logs evaluate(const X& x, const Y& y, typename T::evaluate_options o = {}) {
    return T::evaluate(*this, detail::as_tensors(x), detail::as_tensors(y), std::move(o));
  }
  template <class D, class T = detail::trainer<mirrored_model>>
    requires(!std::same_as<D, tensor> && !std::same_as<D, std::vector<tensor>>)
  prediction_type predict(const D& ds, typename T::predict_options o = {}) {
    return T::predict(*this, ds, std::move(o));
  }
  template <class X, class T = detail::trainer<mirrored_model>>
    requires detail::tensor_args<X, X>
  prediction_type predict(const X& x, typename T::predict_options o = {}) {
    return T::predict(*this, detail::as_tensors(x), std::move(o));
  }

 private:
  /// Replica i's copy inside replica i's thread (`strategy.run`), null outside. Every replica enters
  /// the same calls, so a change made outside since the last step is copied to the others at the first.
  M* entry() {
    const int i = detail::current_local_replica();
    if (i < 0) return nullptr;
    if (stale_) {  // read by every replica before the first barrier, written after it
      context_->barrier();
      if (i == 0) sync();
      context_->barrier();
    }
    return &at(std::size_t(i));
  }
  M& at(std::size_t i) { return i == 0 ? static_cast<M&>(*this) : others_[i - 1]; }
  void touch() {
    if (detail::current_local_replica() < 0) stale_ = true;
  }
  /// Gives the other replicas replica 0's weights, compile settings and optimizer (with its state).
  void sync() {
    if (!stale_) return;
    for (M& r : others_) r.replicate(static_cast<const M&>(*this));
    stale_ = false;
  }
  /// A step's random streams: one draw of replica 0's generator seeds the others', so replicas draw
  /// different dropout masks and a resumed run (which restores that generator) the same ones.
  void seed() {
    const std::uint64_t base = M::generator().next();
    for (std::size_t i = 0; i < others_.size(); ++i) others_[i].generator() = rng(base + 0x9e3779b97f4a7c15ull * (i + 1));
  }
  /// Runs `step(replica, i, x rows, y rows, sample weight rows)` for every replica i at once, then adds
  /// the others' metric states into replica 0's.
  template <class Step>
  void on_replicas(tensors x, const tensors* y, Step&& step, tensors w = {}) {
    sync();
    const std::size_t b = x[0].shape()[0], p = others_.size() + 1;
    for (const tensor& t : w)
      if (t.dimension() == 0 || t.shape()[0] != b)
        throw shape_error("mirrored_strategy: sample_weight of shape " + shape_str(t.shape()) +
                          " does not fit a batch of " + std::to_string(b) + " samples");
    const auto traced = trace::current_trace();
    local_->run_each([&](int index) {
      const trace::adopt adopted(traced);
      if (traced && index > 0) trace::name_thread("replica " + std::to_string(index));  // replica 0: the caller's
      const std::size_t i = std::size_t(index), lo = b * i / p, hi = b * (i + 1) / p;
      const std::vector<tensor> xs = detail::rows_of(x, lo, hi);
      const std::vector<tensor> ys = y ? detail::rows_of(*y, lo, hi) : std::vector<tensor>{};
      step(at(i), i, xs, ys, detail::rows_of(w, lo, hi));
    });
    auto add = [](auto& to, auto& from) { to.state().add(from.state()); };
    for (M& r : others_) {
      add(M::loss_tracker(), r.loss_tracker());
      for (std::size_t k = 0; k < M::output_loss_trackers().size(); ++k)
        add(M::output_loss_trackers()[k], r.output_loss_trackers()[k]);
      for (std::size_t k = 0; k < M::metrics().size(); ++k) add(M::metrics()[k], r.metrics()[k]);
      r.reset_metrics();
    }
  }

  // The steps outside `strategy.run`: the batch is checked whole (the errors a step on it would give),
  // then every replica takes its rows.
  using rows_t = const std::vector<tensor>&;
  logs train_on(tensors x, tensors y, std::size_t global_rows, tensors w = {}) {
    M::require_compiled("train_step");
    const std::size_t b = M::check_batch(x, &y);
    seed();
    on_replicas(x, &y, [&](M& r, std::size_t, rows_t xs, rows_t ys, rows_t ws) {
      if (ws.empty()) r.train_step(xs, ys, global_rows ? global_rows : b);
      else r.train_step(xs, ys, ws, global_rows ? global_rows : b);
    }, w);
    return M::metric_results();
  }
  logs test_on(tensors x, tensors y, tensors w = {}) {
    M::require_compiled("test_step");
    M::check_batch(x, &y);
    on_replicas(x, &y, [](M& r, std::size_t, rows_t xs, rows_t ys, rows_t ws) {
      if (xs[0].shape()[0] == 0) return;
      if (ws.empty()) r.test_step(xs, ys);
      else r.test_step(xs, ys, ws);
    }, w);
    return M::metric_results();
  }
  prediction_type call_on(tensors x, bool training) {
    M::check_batch(x, nullptr);
    if (training) seed();
    std::vector<std::vector<tensor>> parts(others_.size() + 1);
    on_replicas(x, nullptr, [&](M& r, std::size_t i, rows_t xs, rows_t, rows_t) {
      if (xs[0].shape()[0] > 0) parts[i] = as_list(r(xs, training));
    });
    std::vector<tensor> out(num_outputs);
    for (std::size_t o = 0; o < num_outputs; ++o) {
      std::vector<tensor> rows;
      for (auto& p : parts)
        if (!p.empty()) rows.push_back(std::move(p[o]));
      out[o] = detail::concatenate_rows(rows);
    }
    if constexpr (num_outputs == 1) return std::move(out.front());
    else return out;
  }
  /// Every replica its rows; the replicas' losses add up to the global one.
  float gradients_on(tensors x, tensors y, const any_loss& loss_object, std::size_t global_batch_size,
                     std::size_t num_replicas) {
    const std::size_t b = M::check_batch(x, &y);
    seed();
    std::vector<float> losses(others_.size() + 1);
    on_replicas(x, &y, [&](M& r, std::size_t i, rows_t xs, rows_t ys, rows_t) {
      losses[i] = r.value_and_gradients(xs, ys, loss_object, global_batch_size ? global_batch_size : b, num_replicas);
    });
    float total = 0.0f;
    for (float l : losses) total += l;
    return total;
  }

  static tensors one(const tensor& t) { return tensors(&t, 1); }
  static std::vector<tensor> as_list(tensor t) {
    std::vector<tensor> v;
    v.push_back(std::move(t));
    return v;
  }
  static std::vector<tensor> as_list(std::vector<tensor> t) { return t; }

  std::vector<M> others_;  // replicas 1..N-1
  local_replicas* local_;
  replica_context* context_;
  bool stale_ = true;  // the others miss a change made to replica 0 outside a step
};

}  // namespace dtrain
