#pragma once
/// \file
/// Keras' `Precision` and `Recall` at one threshold: counts of true and false positives and negatives
/// over every value of the batch, as a (total, count) state (precision: tp / (tp + fp); recall:
/// tp / (tp + fn); 0 while nothing was predicted, or is, positive), so replicas and workers sum exactly.
/// Computed on the host (a model on another backend hands them host copies of its predictions).

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "dtrain/metrics/metric.hpp"

namespace dtrain {

/// Keras' arguments: `thresholds` (one; default 0.5, or with `top_k` every one of the top k), `top_k`
/// (only a row's k highest scores can be positive), `class_id` (only that class, the last axis' index).
struct confusion_options {
  std::optional<float> thresholds{};
  std::optional<int> top_k{};
  std::optional<int> class_id{};
};

namespace detail {
struct confusion_counts {
  double tp = 0, fp = 0, fn = 0;
};
/// The batch's counts, after Keras' update_confusion_matrix_variables: top_k first, then class_id.
inline confusion_counts confusion(const std::string& metric, const confusion_options& o, batch_view t, batch_view p) {
  if (t.size() != p.size() || t.batch() != p.batch())
    throw shape_error(metric + ": y_true shape " + t.str() + " does not fit y_pred shape " + p.str());
  const std::size_t c = std::max<std::size_t>(1, p.last()), rows = p.size() / c;
  if (o.top_k && *o.top_k < 1) throw value_error(metric + ": top_k " + std::to_string(*o.top_k) + " is not at least 1");
  if (o.class_id && (*o.class_id < 0 || std::size_t(*o.class_id) >= c))
    throw value_error(metric + ": class_id " + std::to_string(*o.class_id) + " is not an index of the last axis (" +
                      std::to_string(c) + " values)");
  const float threshold = o.thresholds ? *o.thresholds : o.top_k ? -std::numeric_limits<float>::infinity() : 0.5f;
  confusion_counts n;
  std::vector<float> row(c);
  for (std::size_t r = 0; r < rows; ++r) {
    const float* z = p.data + r * c;
    std::copy(z, z + c, row.begin());
    if (o.top_k && std::size_t(*o.top_k) < c) {  // everything below the k-th highest score is -inf
      std::vector<float> sorted(row);
      std::nth_element(sorted.begin(), sorted.begin() + (*o.top_k - 1), sorted.end(), std::greater<>());
      const float kth = sorted[std::size_t(*o.top_k - 1)];
      // (Keras keeps exactly k: the first of tied scores in index order)
      int kept = 0;
      for (std::size_t j = 0; j < c; ++j) kept += row[j] > kth ? 1 : 0;
      for (std::size_t j = 0; j < c; ++j)
        if (row[j] < kth || (row[j] == kth && kept++ >= *o.top_k)) row[j] = -std::numeric_limits<float>::infinity();
    }
    for (std::size_t j = 0; j < c; ++j) {
      if (o.class_id && j != std::size_t(*o.class_id)) continue;
      const bool predicted = row[j] > threshold, actual = t.data[r * c + j] != 0.0f;
      n.tp += predicted && actual, n.fp += predicted && !actual, n.fn += !predicted && actual;
    }
  }
  return n;
}
}  // namespace detail

/// Keras `metrics.Precision`: of the values predicted positive, the fraction that are.
struct precision {
  confusion_options options{};
  std::string name() const { return "precision"; }
  metric_update update(batch_view t, batch_view p) const {
    const auto n = detail::confusion(name(), options, t, p);
    return {n.tp, n.tp + n.fp};
  }
};

/// Keras `metrics.Recall`: of the values that are positive, the fraction predicted so.
struct recall {
  confusion_options options{};
  std::string name() const { return "recall"; }
  metric_update update(batch_view t, batch_view p) const {
    const auto n = detail::confusion(name(), options, t, p);
    return {n.tp, n.tp + n.fn};
  }
};

}  // namespace dtrain
