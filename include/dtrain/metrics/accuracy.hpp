#pragma once
/// \file
/// Keras' accuracy metrics. `accuracy` is what the string 'accuracy' in `compile(metrics=[...])`
/// becomes: Keras picks binary, sparse categorical or categorical accuracy from the shapes it sees,
/// and so does `accuracy` on its first batch (reported under the name "accuracy").

#include <algorithm>
#include <cstddef>

#include "dtrain/metrics/metric.hpp"

namespace dtrain {

namespace detail {
inline std::size_t argmax_row(const float* v, std::size_t n) {
  return static_cast<std::size_t>(std::max_element(v, v + n) - v);
}
inline void metric_shape_error(const char* metric, batch_view t, batch_view p) {
  throw shape_error(std::string(metric) + ": y_true shape " + t.str() + " does not fit y_pred shape " + p.str());
}
}  // namespace detail

/// Keras `SparseCategoricalAccuracy`: argmax of the scores equals the integer label.
struct sparse_categorical_accuracy {
  std::string name() const { return "sparse_categorical_accuracy"; }
  metric_update update(batch_view t, batch_view p) const {
    const std::size_t c = p.last(), rows = p.size() / std::max<std::size_t>(1, c);
    if (t.size() != rows || t.batch() != p.batch()) detail::metric_shape_error("sparse_categorical_accuracy", t, p);
    double hits = 0.0;
    for (std::size_t r = 0; r < rows; ++r)
      hits += static_cast<float>(detail::argmax_row(p.data + r * c, c)) == t.data[r] ? 1.0 : 0.0;
    return {hits, static_cast<double>(rows)};
  }
};

/// Keras `CategoricalAccuracy`: argmax of the scores equals argmax of the one-hot target.
struct categorical_accuracy {
  std::string name() const { return "categorical_accuracy"; }
  metric_update update(batch_view t, batch_view p) const {
    const std::size_t c = p.last(), rows = p.size() / std::max<std::size_t>(1, c);
    if (t.size() != p.size() || t.batch() != p.batch()) detail::metric_shape_error("categorical_accuracy", t, p);
    double hits = 0.0;
    for (std::size_t r = 0; r < rows; ++r)
      hits += detail::argmax_row(p.data + r * c, c) == detail::argmax_row(t.data + r * c, c) ? 1.0 : 0.0;
    return {hits, static_cast<double>(rows)};
  }
};

/// Keras `BinaryAccuracy(threshold=0.5)`: (y_pred > threshold) equals y_true, averaged over the last axis.
struct binary_accuracy {
  float threshold = 0.5f;
  std::string name() const { return "binary_accuracy"; }
  metric_update update(batch_view t, batch_view p) const {
    const std::size_t c = p.last(), rows = p.size() / std::max<std::size_t>(1, c);
    if (t.size() != p.size() || t.batch() != p.batch()) detail::metric_shape_error("binary_accuracy", t, p);
    double hits = 0.0;
    for (std::size_t i = 0; i < p.size(); ++i) hits += (p.data[i] > threshold ? 1.0f : 0.0f) == t.data[i] ? 1.0 : 0.0;
    return {hits / static_cast<double>(c), static_cast<double>(rows)};
  }
};

/// The string 'accuracy', resolved as Keras resolves it on the first batch:
/// binary if y_pred's last axis is 1; sparse categorical if y_true has lower rank than y_pred or a last
/// axis of 1 (with y_pred's larger); categorical otherwise.
struct accuracy {
  enum class kind { unresolved, binary, sparse, categorical };
  kind resolved = kind::unresolved;

  std::string name() const { return "accuracy"; }
  metric_update update(batch_view t, batch_view p) {
    if (resolved == kind::unresolved) {
      if (p.last() == 1)
        resolved = kind::binary;
      else if (t.rank() < p.rank() || (t.last() == 1 && p.last() > 1))
        resolved = kind::sparse;
      else
        resolved = kind::categorical;
    }
    switch (resolved) {
      case kind::binary: return binary_accuracy{}.update(t, p);
      case kind::sparse: return sparse_categorical_accuracy{}.update(t, p);
      default: return categorical_accuracy{}.update(t, p);
    }
  }
};

}  // namespace dtrain
