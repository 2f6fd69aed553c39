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
  tensor operator()(const tensor& y_true, const tensor& y_pred) const { return detail::call_loss(*this, y_true, y_pred); }

  void per_example(batch_view t, batch_view p, float* out, float* d, float scale) const {
    detail::require_same_size("mean_squared_error", t, p);
    const std::size_t c = p.last(), rows = detail::loss_rows(p);
    const float inv_c = 1.0f / static_cast<float>(c);
    for (std::size_t r = 0; r < rows; ++r) {
      double l = 0.0;
      for (std::size_t j = r * c; j < (r + 1) * c; ++j) {
        const float e = p.data[j] - t.data[j];
        l += static_cast<double>(e) * e;
        if (d) d[j] = scale * 2.0f * inv_c * e;
      }
      out[r] = static_cast<float>(l) * inv_c;
    }
  }
};

}  // namespace dtrain
