#pragma once
// A loss of the user's own, computed on the host (no backend kernel): what the host path of any_loss and
// of the model is tested with. Half the squared error, summed over a row's values: its gradient with
// respect to y_pred is the error itself.
#include <dtrain/losses/loss.hpp>

namespace dtrain_test {

struct half_squared_error {
  std::string name() const { return "half_squared_error"; }
  dtrain::reduction get_reduction() const { return dtrain::reduction::sum_over_batch_size; }
  void per_example(dtrain::batch_view t, dtrain::batch_view p, float* out, float* d, float scale) const {
    if (t.size() != p.size()) throw dtrain::shape_error("half_squared_error: y_true " + t.str() + " vs y_pred " + p.str());
    const std::size_t c = p.last();
    for (std::size_t r = 0; r < p.size() / c; ++r) {
      double l = 0;
      for (std::size_t j = r * c; j < (r + 1) * c; ++j) {
        const float e = p.data[j] - t.data[j];
        l += 0.5 * e * e;
        if (d) d[j] = scale * e;
      }
      out[r] = static_cast<float>(l);
    }
  }
};
static_assert(dtrain::loss_function<half_squared_error> && dtrain::host_loss<half_squared_error> &&
              !dtrain::kernel_loss<half_squared_error>);

}  // namespace dtrain_test
