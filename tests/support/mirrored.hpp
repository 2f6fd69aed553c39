#pragma once
// What the strategy tests train on several workers and compare with one: a small classifier, a seeded
// 3-class problem of 6 features, and weight equality up to the rounding of a different summation order.
#include <cmath>
#include <utility>
#include <vector>

#include <dtrain/dtrain.hpp>

namespace dtrain_test {

using small_net = dtrain::sequential<dtrain::input<6>, dtrain::dense<16, dtrain::tanh, dtrain::l2<0.001f>>, dtrain::dense<3>>;

/// n examples of 6 normal features and a label in 0..2 (the same for a given n on every worker).
inline std::pair<dtrain::tensor, dtrain::tensor> three_class_problem(std::size_t n) {
  dtrain::rng r(5);
  dtrain::tensor x = dtrain::zeros({n, 6}), y = dtrain::zeros({n});
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < 6; ++j) x(i, j) = r.normal();
    y(i) = float(r.below(3));
  }
  return {x, y};
}

/// Whether every weight of `a` is within float rounding of `b`: |a - b| <= 1e-5 + 1e-4 |b| (the
/// replicas' gradients are summed in another order than one worker's GEMMs sum them).
inline bool weights_close(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::abs(a[i] - b[i]) > 1e-5f + 1e-4f * std::abs(b[i])) return false;
  return true;
}

}  // namespace dtrain_test
