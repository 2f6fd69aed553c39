#pragma once
/// \file
/// Keras' regression losses besides the mean squared error: `MeanAbsoluteError`, `Huber` and
/// `CosineSimilarity` (over the last axis), each a row's value from its last axis. The arithmetic is
/// the backend's (backend/cpu/losses.hpp on the host).

#include <cmath>

#include "dtrain/losses/loss.hpp"

namespace dtrain {

struct regression_loss_options {
  dtrain::reduction reduction = dtrain::reduction::sum_over_batch_size;
};

/// Keras `MeanAbsoluteError`: the mean of |y_pred - y_true| over the last axis.
struct mean_absolute_error {
  regression_loss_options options{};

  std::string name() const { return "mean_absolute_error"; }
  dtrain::reduction get_reduction() const { return options.reduction; }
  op::mean_absolute_error kernel() const { return {}; }
  tensor operator()(const tensor& y_true, const tensor& y_pred) const { return detail::call_loss(*this, y_true, y_pred); }
  void validate(batch_view t, batch_view p) const { detail::require_same_size("mean_absolute_error", t, p); }
};

struct huber_options {
  float delta = 1.0f;
  dtrain::reduction reduction = dtrain::reduction::sum_over_batch_size;
};

/// Keras `Huber(delta)`: quadratic within delta of the target, linear beyond, averaged over the last axis.
struct huber {
  huber_options options{};

  std::string name() const { return "huber"; }
  dtrain::reduction get_reduction() const { return options.reduction; }
  op::huber kernel() const { return {options.delta}; }
  tensor operator()(const tensor& y_true, const tensor& y_pred) const { return detail::call_loss(*this, y_true, y_pred); }
  void validate(batch_view t, batch_view p) const {
    if (!(options.delta > 0.0f) || !std::isfinite(options.delta))
      throw value_error("huber: delta " + std::to_string(options.delta) + " is not a positive number");
    detail::require_same_size("huber", t, p);
  }
};

/// Keras `CosineSimilarity(axis=-1)`: minus the cosine of y_true and y_pred along the last axis (from -1,
/// the same direction, to 1).
struct cosine_similarity {
  regression_loss_options options{};

  std::string name() const { return "cosine_similarity"; }
  dtrain::reduction get_reduction() const { return options.reduction; }
  op::cosine_similarity kernel() const { return {}; }
  tensor operator()(const tensor& y_true, const tensor& y_pred) const { return detail::call_loss(*this, y_true, y_pred); }
  void validate(batch_view t, batch_view p) const { detail::require_same_size("cosine_similarity", t, p); }
};

}  // namespace dtrain
