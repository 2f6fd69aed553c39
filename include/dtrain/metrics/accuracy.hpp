#pragma once
/// \file
/// Keras' accuracy metrics. `accuracy` is what the string 'accuracy' in `compile(metrics=[...])`
/// becomes: Keras picks binary, sparse categorical or categorical accuracy from the shapes it sees,
/// and so does `accuracy` on its first batch (reported under the name "accuracy").

#include <cmath>
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

namespace detail {
/// Checks a top-k metric: k >= 1 and, for class indices, one integer label in [0, classes) per row.
inline void check_top_k(const char* metric, int k, batch_view t, batch_view p, bool sparse) {
  if (k < 1) throw value_error(std::string(metric) + ": k " + std::to_string(k) + " is not at least 1");
  if (!sparse) {
    if (t.size() != p.size() || t.batch() != p.batch()) metric_shape_error(metric, t, p);
    return;
  }
  const std::size_t rows = std::size_t(metric_rows(p)), c = p.last();
  if (t.size() != rows || t.batch() != p.batch()) metric_shape_error(metric, t, p);
  for (std::size_t r = 0; r < rows; ++r)
    if (!(t.data[r] >= 0.0f && t.data[r] < float(c)) || t.data[r] != std::floor(t.data[r]))
      throw value_error(std::string(metric) + ": label " + std::to_string(t.data[r]) + " at index " + std::to_string(r) +
                        " is not a class index in [0, " + std::to_string(c) + ")");
}
}  // namespace detail

/// Keras `SparseTopKCategoricalAccuracy(k=5)`: the integer label is among the k highest scores (a
/// score tied with the k-th counts, as Keras' in_top_k).
struct sparse_top_k_categorical_accuracy {
  int k = 5;
  std::string name() const { return "sparse_top_k_categorical_accuracy"; }
  op::sparse_top_k_categorical_accuracy kernel(batch_view t, batch_view p) const {
    detail::check_top_k("sparse_top_k_categorical_accuracy", k, t, p, true);
    return {k};
  }
};

/// Keras `TopKCategoricalAccuracy(k=5)`: the one-hot target's class is among the k highest scores.
struct top_k_categorical_accuracy {
  int k = 5;
  std::string name() const { return "top_k_categorical_accuracy"; }
  op::top_k_categorical_accuracy kernel(batch_view t, batch_view p) const {
    detail::check_top_k("top_k_categorical_accuracy", k, t, p, false);
    return {k};
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
