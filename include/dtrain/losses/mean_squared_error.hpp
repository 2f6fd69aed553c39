#pragma once
/// \file
/// Keras `MeanSquaredError`: the loss of a row is the mean of (y_pred - y_true)^2 over its last axis.

#include "dtrain/losses/loss.hpp"

namespace dtrain {

struct mean_squared_error_options {
  dtrain::reduction reduction = dtrain::reduction::sum_over_batch_size;
};

struct mean_squared_error {
  mean_squared_error_options options{};

  std::string name() const { return "mean_squared_error"; }
  dtrain::reduction get_reduction() const { return options.reduction; }
  op::mean_squared_error kernel() const { return {}; }
  tensor operator()(const tensor& y_true, const tensor& y_pred) const { return detail::call_loss(*this, y_true, y_pred); }
  void validate(batch_view t, batch_view p) const { detail::require_same_size("mean_squared_error", t, p); }
};

}  // namespace dtrain
