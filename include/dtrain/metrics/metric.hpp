#pragma once
/// \file
/// The metric seam. Every value of a metric's state is a sum (most metrics: a (total, count) pair whose
/// result is total / count), so the states of all replicas and workers add up by one all-reduce and every
/// worker reports the same numbers.
///
/// Metric contract (`metric_function`): `name()` is the Keras name. A batch's contribution comes in one
/// of three ways:
/// - on the model's backend: `kernel(y_true, y_pred)` checks the shapes (extents only; throwing a
///   `shape_error` naming the metric and both shapes) and returns the `metric_op` every backend
///   implements, which writes the total; the count is the rows of y_pred (the built-in metrics);
/// - on the host: `update(y_true, y_pred)` checks and returns `{total, count}` from host views (precision,
///   recall, a loss as a metric, a metric of the user's own);
/// - on the host, with a state of its own (`state_metric`: AUC's confusion counts, MeanIoU's confusion
///   matrix): `state_size()` values, `update(y_true, y_pred, state)` adds the batch's sums into them and
///   `result(state)` is the metric's value.
/// None keeps state: the state lives in `any_metric`. A loss given as a metric is Keras'
/// `MeanMetricWrapper` (`metrics=["mae"]`): the mean of its per-row values (`loss_metric`).

#include <algorithm>
#include <concepts>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/backend/cpu/losses.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/replica_group.hpp"
#include "dtrain/core/tensor.hpp"
#include "dtrain/core/view.hpp"
#include "dtrain/losses/loss.hpp"

namespace dtrain {

/// One batch's contribution to a metric.
struct metric_update {
  double total = 0.0;
  double count = 0.0;
};

template <class M>
concept kernel_metric = requires(M& m, batch_view v) {
  { m.kernel(v, v) } -> std::convertible_to<metric_op>;
};

template <class M>
concept host_metric = requires(M& m, batch_view v) {
  { m.update(v, v) } -> std::same_as<metric_update>;
};

template <class M>
concept state_metric = requires(const M& m, batch_view v, std::span<float> s, std::span<const float> r) {
  { m.state_size() } -> std::convertible_to<std::size_t>;
  m.update(v, v, s);
  { m.result(r) } -> std::convertible_to<float>;
};

template <class M>
concept metric_function = requires(M& m) {
  { m.name() } -> std::convertible_to<std::string>;
} && (kernel_metric<M> || host_metric<M> || state_metric<M>);

namespace detail {
/// The result of a (total, count) state.
inline float mean_result(std::span<const float> v) { return v[1] > 0.0f ? v[0] / v[1] : 0.0f; }
/// Adds a batch's (total, count) to a (total, count) state.
inline void add_update(std::span<float> v, metric_update u) {
  v[0] = static_cast<float>(v[0] + u.total);
  v[1] = static_cast<float>(v[1] + u.count);
}
}  // namespace detail

/// What `update_state` accumulates and what an all-reduce sums: (total, count), or a state metric's values.
struct metric_state {
  std::vector<float> values = std::vector<float>(2, 0.0f);

  metric_state() = default;
  explicit metric_state(std::size_t size) : values(size, 0.0f) {}
  float& total() { return values[0]; }
  float& count() { return values[1]; }
  /// total / count (a state metric's result is its own: any_metric::result).
  float result() const { return detail::mean_result(values); }
  void add(metric_update u) { detail::add_update(values, u); }
  /// Adds another replica's state of the same metric.
  void add(const metric_state& o) {
    for (std::size_t i = 0; i < values.size(); ++i) values[i] += o.values[i];
  }
  void reset() { std::fill(values.begin(), values.end(), 0.0f); }
};

namespace detail {
/// A standalone metric's state, kept as TF keeps a metric's sync-on-read variables: inside
/// `strategy.run` every replica updates (and reads) its own; outside, `read()` is the sum over all
/// replicas of this process and, when the metric was updated under a multi-worker strategy, over every
/// worker (a collective: each worker reads it at the same point, as each prints or logs it).
/// A model's compiled metrics are one per replica already, and `fit` sums them itself: it uses `own()`.
class synced_metric_state {
 public:
  explicit synced_metric_state(std::size_t size = 2) : own_(size) {}
  metric_state& own() { return own_; }
  const metric_state& own() const { return own_; }
  /// The calling replica's state, for an update.
  metric_state& local() {
    if (current_local_replica() == 0 && current_replica_group()) group_ = current_replica_group();  // one writer
    return copies_.get(own_, [](const metric_state& o) { return metric_state(o.values.size()); });
  }
  metric_state read() const {
    const int r = current_local_replica();
    if (r > 0)
      return std::size_t(r) <= copies_.others().size() ? copies_.others()[std::size_t(r) - 1] : metric_state(own_.values.size());
    if (r == 0) return own_;
    metric_state s = own_;
    for (const auto& c : copies_.others()) s.add(c);
    if (const auto g = group_.lock()) g->sum_over_workers(s.values);
    return s;
  }
  /// Outside a run: every replica's state; inside: the calling replica's.
  void reset() {
    if (current_local_replica() >= 0) return local().reset();
    own_.reset();
    copies_.clear();
  }

 private:
  metric_state own_;
  replica_copies<metric_state> copies_;
  std::weak_ptr<replica_group> group_;  // the strategy that last ran an update (weak: it may end first)
};

/// Rows a metric counts in a batch of predictions.
inline double metric_rows(batch_view y_pred) {
  return static_cast<double>(y_pred.size() / std::max<std::size_t>(1, y_pred.last()));
}
}  // namespace detail

/// A loss as a metric (Keras' `MeanMetricWrapper`): the mean over the rows of its per-row values, under
/// the loss's name.
struct loss_metric {
  any_loss loss;
  std::string name() const { return loss.name(); }
  metric_update update(batch_view t, batch_view p) const {
    std::vector<float> per(detail::loss_rows(p));
    loss.per_example(t, p, per.data(), nullptr, 1.0f);
    double total = 0.0;
    for (float v : per) total += v;
    return {total, static_cast<double>(per.size())};
  }
};

/// A metric of any type with its state (what `compile` stores; Keras' `Metric` object).
class any_metric {
 public:
  template <metric_function M>
    requires(!std::same_as<std::remove_cvref_t<M>, any_metric>)
  any_metric(M m) : fn_(std::make_unique<model_t<M>>(std::move(m))), state_(fn_->state_size()) {}
  /// A loss, as a metric of its mean (`.metrics = {mean_absolute_error{}}`).
  template <loss_function L>
    requires(!metric_function<L>)
  any_metric(L l) : any_metric(loss_metric{any_loss(std::move(l))}) {}
  any_metric(const any_metric& o) : fn_(o.fn_->clone()), state_(o.state_), weighted_(o.weighted_) {}
  any_metric& operator=(const any_metric& o) {
    if (this != &o) fn_ = o.fn_->clone(), state_ = o.state_, weighted_ = o.weighted_;
    return *this;
  }
  any_metric(any_metric&&) noexcept = default;
  any_metric& operator=(any_metric&&) noexcept = default;

  std::string name() const { return fn_->name(); }
  /// The metric function held, if it is an `M` (as `std::function::target`).
  template <class M>
  const M* target() const {
    const auto* m = dynamic_cast<const model_t<M>*>(fn_.get());
    return m ? &m->m_ : nullptr;
  }
  /// The backend kernel for a batch of these shapes (checked), or nothing for a host metric.
  std::optional<metric_op> kernel(batch_view y_true, batch_view y_pred) { return fn_->kernel(y_true, y_pred); }
  /// Adds a batch of host values (Keras `update_state(y_true, y_pred)`).
  void update_state(batch_view y_true, batch_view y_pred) { add_batch(y_true, y_pred, state_.local()); }
  void update_state(const tensor& y_true, const tensor& y_pred) {
    const extents t = extents_of(y_true), p = extents_of(y_pred);
    update_state(batch_view{y_true.data(), t}, batch_view{y_pred.data(), p});
  }
  /// Adds a batch of host values to `state` (one of this metric's: a replica's, or a sum of them).
  void add_batch(batch_view y_true, batch_view y_pred, metric_state& state) { fn_->add(y_true, y_pred, state.values); }
  /// The same with a weight per sample (Keras' `update_state(y_true, y_pred, sample_weight)`): each
  /// sample's contribution to the state's sums (its count, its confusion counts) times its weight. A
  /// weight per row of y_pred (a masked sequence's: per step) weighs each row, as a sample of its own.
  void add_batch(batch_view y_true, batch_view y_pred, std::span<const float> sample_weight, metric_state& state) {
    std::size_t n = y_pred.batch();
    const std::size_t rows = detail::loss_rows(y_pred);
    const bool per_row = sample_weight.size() == rows && rows != n && rows > 0 && y_true.size() % rows == 0;
    if ((sample_weight.size() != n && !per_row) || y_true.batch() != n || y_true.rank() == 0 || y_pred.rank() == 0)
      throw shape_error(name() + ": " + std::to_string(sample_weight.size()) + " sample weights for y_true of shape " +
                        y_true.str() + " and y_pred of shape " + y_pred.str() + " (expected one per sample)");
    extents te(y_true.extents.begin(), y_true.extents.end()), pe(y_pred.extents.begin(), y_pred.extents.end());
    te[0] = pe[0] = 1;
    if (per_row) {  // each row a sample: (1, its values)
      n = rows;
      te = y_true.size() == rows ? extents{1} : extents{1, y_true.size() / rows};
      pe = {1, y_pred.last()};
    }
    const std::size_t ts = y_true.size() / std::max<std::size_t>(1, n), ps = y_pred.size() / std::max<std::size_t>(1, n);
    metric_state one(state.values.size());
    for (std::size_t i = 0; i < n; ++i) {
      one.reset();
      fn_->add({y_true.data + i * ts, te}, {y_pred.data + i * ps, pe}, one.values);
      for (std::size_t k = 0; k < one.values.size(); ++k) state.values[k] += sample_weight[i] * one.values[k];
    }
  }
  void update_state(const tensor& y_true, const tensor& y_pred, const tensor& sample_weight) {
    const extents t = extents_of(y_true), p = extents_of(y_pred);
    add_batch({y_true.data(), t}, {y_pred.data(), p}, {sample_weight.data(), sample_weight.size()}, state_.local());
  }
  /// Whether `compile` took it as a weighted metric (Keras' `weighted_metrics`): a step's sample
  /// weights then weigh its states.
  bool weighted() const { return weighted_; }
  void set_weighted(bool w) { weighted_ = w; }
  /// The result over every replica outside `strategy.run`, the replica's own inside (see
  /// `detail::synced_metric_state`: under a multi-worker strategy every worker calls it).
  float result() const { return fn_->result(state_.read().values); }
  /// The result of a state of this metric (the values of `state()`, or their sum over replicas).
  float result_of(std::span<const float> state) const { return fn_->result(state); }
  void reset_state() { state_.reset(); }
  /// This replica's state (total and count, or a state metric's values), which a model and its checkpoints keep.
  metric_state& state() { return state_.own(); }
  const metric_state& state() const { return state_.own(); }

 private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual std::string name() const = 0;
    virtual std::optional<metric_op> kernel(batch_view, batch_view) = 0;
    virtual void add(batch_view, batch_view, std::span<float>) = 0;
    virtual std::size_t state_size() const = 0;
    virtual float result(std::span<const float>) const = 0;
    virtual std::unique_ptr<concept_t> clone() const = 0;
  };
  template <class M>
  struct model_t final : concept_t {
    explicit model_t(M m) : m_(std::move(m)) {}
    std::string name() const override { return m_.name(); }
    std::optional<metric_op> kernel(batch_view t, batch_view p) override {
      if constexpr (kernel_metric<M>) return m_.kernel(t, p);
      else return std::nullopt;
    }
    void add(batch_view t, batch_view p, std::span<float> s) override {
      metric_update u;
      if constexpr (kernel_metric<M>) {
        const float total = std::visit(
            [&](const auto& o) { return detail::metric_kernel(o, std::size_t(detail::metric_rows(p)), p.last(), t.data, p.data); },
            metric_op(m_.kernel(t, p)));
        u = {total, detail::metric_rows(p)};
      } else if constexpr (host_metric<M>) {
        u = m_.update(t, p);
      } else {
        return m_.update(t, p, s);
      }
      detail::add_update(s, u);
    }
    std::size_t state_size() const override {
      if constexpr (state_metric<M>) return m_.state_size();
      else return 2;
    }
    float result(std::span<const float> s) const override {
      if constexpr (state_metric<M>) return m_.result(s);
      else return detail::mean_result(s);
    }
    std::unique_ptr<concept_t> clone() const override { return std::make_unique<model_t>(m_); }
    M m_;
  };
  std::unique_ptr<concept_t> fn_;
  detail::synced_metric_state state_;
  bool weighted_ = false;
};

/// Keras `metrics.Mean`: the weighted mean of the values given to `update_state` (the `loss` column).
class mean {
 public:
  explicit mean(std::string name = "mean") : name_(std::move(name)) {}
  const std::string& name() const { return name_; }
  void update_state(double value, double weight = 1.0) { state_.local().add({value * weight, weight}); }
  /// As any_metric's: over every replica outside `strategy.run`.
  float result() const { return state_.read().result(); }
  void reset_state() { state_.reset(); }
  metric_state& state() { return state_.own(); }
  const metric_state& state() const { return state_.own(); }

 private:
  std::string name_;
  detail::synced_metric_state state_;
};

}  // namespace dtrain
