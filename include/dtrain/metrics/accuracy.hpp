#pragma once
/// \file
/// Keras' accuracy metrics. `accuracy` is what the string 'accuracy' in `compile(metrics=[...])`
/// becomes: Keras picks binary, sparse categorical or categorical accuracy from the shapes it sees,
/// and so does `accuracy` on its first batch (reported under the name "accuracy").

#include <cstddef>

#include "dtrain/metrics/metric.hpp"

namespace dtrain {

namespace detail {
[[noreturn]] inline void metric_shape_error(const char* metric, batch_view t, batch_view p) {
  throw shape_error(std::string(metric) + ": y_true shape " + t.str() + " does not fit y_pred shape " + p.str());
}
}  // namespace detail

/// Keras `SparseCategoricalAccuracy`: argmax of the scores equals the integer label.
struct sparse_categorical_accuracy {
  std::string name() const { return "sparse_categorical_accuracy"; }
  op::sparse_categorical_accuracy kernel(batch_view t, batch_view p) const {
    if (t.size() != std::size_t(detail::metric_rows(p)) || t.batch() != p.batch())
      detail::metric_shape_error("sparse_categorical_accuracy", t, p);
    return {};
  }
};

/// Keras `CategoricalAccuracy`: argmax of the scores equals argmax of the one-hot target.
struct categorical_accuracy {
  std::string name() const { return "categorical_accuracy"; }
  op::categorical_accuracy kernel(batch_view t, batch_view p) const {
    if (t.size() != p.size() || t.batch() != p.batch()) detail::metric_shape_error("categorical_accuracy", t, p);
    return {};
  }
};

/// Keras `BinaryAccuracy(threshold=0.5)`: (y_pred > threshold) equals y_true, averaged over the last axis.
struct binary_accuracy {
  float threshold = 0.5f;
  std::string name() const { return "binary_accuracy"; }
  op::binary_accuracy kernel(batch_view t, batch_view p) const {
    if (t.size() != p.size() || t.batch() != p.batch()) detail::metric_shape_error("binary_accuracy", t, p);
    return {threshold};
  }
};

/// The string 'accuracy', resolved as Keras resolves it on the first batch:
/// binary if y_pred's last axis is 1; sparse categorical if y_true has lower rank than y_pred or a last
/// axis of 1 (with y_pred's larger); categorical otherwise.
struct accuracy {
  enum class kind { unresolved, binary, sparse, categorical };
  kind resolved = kind::unresolved;

  std::string name() const { return "accuracy"; }
  metric_op kernel(batch_view t, batch_view p) {
    if (resolved == kind::unresolved) {
      if (p.last() == 1)
        resolved = kind::binary;
      else if (t.rank() < p.rank() || (t.last() == 1 && p.last() > 1))
        resolved = kind::sparse;
      else
        resolved = kind::categorical;
    }
    switch (resolved) {
      case kind::binary: return binary_accuracy{}.kernel(t, p);
      case kind::sparse: return sparse_categorical_accuracy{}.kernel(t, p);
      default: return categorical_accuracy{}.kernel(t, p);
    }
  }
};

}  // namespace dtrain
