#pragma once
/// \file
/// The metric seam. Every metric's state is a (total, count) pair of floats and its result is
/// total / count, so the states of all workers can be summed by one all-reduce and every worker
/// reports the same numbers.
///
/// Metric contract (`metric_function`): `name()` is the Keras name; `update(y_true, y_pred)` validates
/// the shapes (throwing a `shape_error` naming the metric and both shapes) and returns the batch's
/// contribution `{total, count}`; it does not keep state itself.

#include <array>
#include <concepts>
#include <memory>
#include <string>
#include <utility>

#include "dtrain/core/error.hpp"
#include "dtrain/core/view.hpp"

namespace dtrain {

/// One batch's contribution to a metric.
struct metric_update {
  double total = 0.0;
  double count = 0.0;
};

template <class M>
concept metric_function = requires(M& m, batch_view v) {
  { m.name() } -> std::convertible_to<std::string>;
  { m.update(v, v) } -> std::same_as<metric_update>;
};

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
  void update_state(batch_view y_true, batch_view y_pred) { state_.add(fn_->update(y_true, y_pred)); }
  float result() const { return state_.result(); }
  void reset_state() { state_.reset(); }
  metric_state& state() { return state_; }
  const metric_state& state() const { return state_; }

 private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual std::string name() const = 0;
    virtual metric_update update(batch_view, batch_view) = 0;
    virtual std::unique_ptr<concept_t> clone() const = 0;
  };
  template <class M>
  struct model_t final : concept_t {
    explicit model_t(M m) : m_(std::move(m)) {}
    std::string name() const override { return m_.name(); }
    metric_update update(batch_view t, batch_view p) override { return m_.update(t, p); }
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
