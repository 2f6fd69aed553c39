#pragma once
/// \file
/// The metric seam. Every metric's state is a (total, count) pair of floats and its result is
/// total / count, so the states of all workers can be summed by one all-reduce and every worker
/// reports the same numbers.
///
/// Metric contract (`metric_function`): `name()` is the Keras name. A batch's contribution
/// `{total, count}` (count = rows of y_pred) comes in one of two ways:
/// - on the model's backend: `kernel(y_true, y_pred)` checks the shapes (extents only; throwing a
///   `shape_error` naming the metric and both shapes) and returns the `metric_op` every backend
///   implements, which writes the total (the built-in metrics);
/// - on the host: `update(y_true, y_pred)` checks and returns `{total, count}` from host views (a metric
///   of the user's own).
/// Neither keeps state: the state lives in `any_metric`.

#include <array>
#include <concepts>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "dtrain/backend/cpu.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/view.hpp"

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
concept metric_function = requires(M& m) {
  { m.name() } -> std::convertible_to<std::string>;
} && (kernel_metric<M> || host_metric<M>);

/// (total, count): what `update_state` accumulates and what an all-reduce sums.
struct metric_state {
  std::array<float, 2> values{0.0f, 0.0f};

  float& total() { return values[0]; }
  float& count() { return values[1]; }
  float result() const { return values[1] > 0.0f ? values[0] / values[1] : 0.0f; }
  void add(metric_update u) {
    values[0] = static_cast<float>(values[0] + u.total);
    values[1] = static_cast<float>(values[1] + u.count);
  }
  void reset() { values = {0.0f, 0.0f}; }
};

namespace detail {
/// Rows a metric counts in a batch of predictions.
inline double metric_rows(batch_view y_pred) {
  return static_cast<double>(y_pred.size() / std::max<std::size_t>(1, y_pred.last()));
}
}  // namespace detail

/// A metric of any type with its state (what `compile` stores; Keras' `Metric` object).
class any_metric {
 public:
  template <metric_function M>
    requires(!std::same_as<std::remove_cvref_t<M>, any_metric>)
  any_metric(M m) : fn_(std::make_unique<model_t<M>>(std::move(m))) {}
  any_metric(const any_metric& o) : fn_(o.fn_->clone()), state_(o.state_) {}
  any_metric& operator=(const any_metric& o) {
    if (this != &o) fn_ = o.fn_->clone(), state_ = o.state_;
    return *this;
  }
  any_metric(any_metric&&) noexcept = default;
  any_metric& operator=(any_metric&&) noexcept = default;

  std::string name() const { return fn_->name(); }
  /// The backend kernel for a batch of these shapes (checked), or nothing for a host metric.
  std::optional<metric_op> kernel(batch_view y_true, batch_view y_pred) { return fn_->kernel(y_true, y_pred); }
  /// Adds a batch of host values (Keras `update_state(y_true, y_pred)`).
  void update_state(batch_view y_true, batch_view y_pred) { state_.add(fn_->update(y_true, y_pred)); }
  float result() const { return state_.result(); }
  void reset_state() { state_.reset(); }
  metric_state& state() { return state_; }
  const metric_state& state() const { return state_; }

 private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual std::string name() const = 0;
    virtual std::optional<metric_op> kernel(batch_view, batch_view) = 0;
    virtual metric_update update(batch_view, batch_view) = 0;
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
    metric_update update(batch_view t, batch_view p) override {
      if constexpr (kernel_metric<M>) {
        float total = 0.0f;
        std::visit([&](const auto& o) { cpu{}.metric(o, std::size_t(detail::metric_rows(p)), p.last(), t.data, p.data, &total); },
                   metric_op(m_.kernel(t, p)));
        return {total, detail::metric_rows(p)};
      } else {
        return m_.update(t, p);
      }
    }
    std::unique_ptr<concept_t> clone() const override { return std::make_unique<model_t>(m_); }
    M m_;
  };
  std::unique_ptr<concept_t> fn_;
  metric_state state_;
};

/// Keras `metrics.Mean`: the weighted mean of the values given to `update_state` (the `loss` column).
class mean {
 public:
  explicit mean(std::string name = "mean") : name_(std::move(name)) {}
  const std::string& name() const { return name_; }
  void update_state(double value, double weight = 1.0) {
    state_.add({value * weight, weight});
  }
  float result() const { return state_.result(); }
  void reset_state() { state_.reset(); }
  metric_state& state() { return state_; }
  const metric_state& state() const { return state_; }

 private:
  std::string name_;
  metric_state state_;
};

}  // namespace dtrain
