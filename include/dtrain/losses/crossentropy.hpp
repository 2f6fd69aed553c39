#pragma once
/// \file
/// Keras' probabilistic losses: the three crossentropies, on logits (`from_logits = true`, computed
/// stably) or on probabilities (clipped to [loss_epsilon, 1 - loss_epsilon] as Keras does; the clipped
/// region has zero gradient), and the Kullback-Leibler divergence. The arithmetic is the backend's
/// (backend/cpu/losses.hpp on the host).

#include <cmath>

#include "dtrain/losses/loss.hpp"

namespace dtrain {

struct crossentropy_options {
  bool from_logits = false;
  dtrain::reduction reduction = dtrain::reduction::sum_over_batch_size;
};
/// The categorical and binary crossentropies' options: Keras' `label_smoothing` too, in [0, 1] (the
/// targets become y (1 - s) + s / classes; binary: y (1 - s) + s / 2).
struct smoothed_crossentropy_options {
  bool from_logits = false;
  float label_smoothing = 0.0f;
  dtrain::reduction reduction = dtrain::reduction::sum_over_batch_size;
};

namespace detail {
inline void check_label_smoothing(const std::string& loss, float s) {
  if (!(s >= 0.0f && s <= 1.0f))
    throw value_error(loss + ": label_smoothing " + std::to_string(s) + " is not in [0, 1]");
}
}  // namespace detail

/// Keras `SparseCategoricalCrossentropy`: integer class labels (n) or (n, 1) against scores (n, classes).
struct sparse_categorical_crossentropy {
  crossentropy_options options{};

  std::string name() const { return "sparse_categorical_crossentropy"; }
  dtrain::reduction get_reduction() const { return options.reduction; }
  op::sparse_categorical_crossentropy kernel() const { return {options.from_logits}; }
  tensor operator()(const tensor& y_true, const tensor& y_pred) const { return detail::call_loss(*this, y_true, y_pred); }

  /// One class index in [0, classes) per row of y_pred.
  void validate(batch_view t, batch_view p) const {
    const std::size_t c = p.last(), rows = detail::loss_rows(p);
    if (p.rank() < 2 || t.size() != rows || t.batch() != p.batch())
      throw shape_error(name() + ": labels of shape " + t.str() + " do not fit predictions of shape " + p.str() +
                        " (expected one class index per row of y_pred)");
    for (std::size_t r = 0; r < rows; ++r) {
      const float lf = t.data[r];
      if (!(lf >= 0.0f && lf < static_cast<float>(c)) || lf != std::floor(lf))
        throw value_error(name() + ": label " + std::to_string(lf) + " at index " + std::to_string(r) +
                          " is not a class index in [0, " + std::to_string(c) + ") (y_true shape " + t.str() +
                          ", y_pred shape " + p.str() + ")");
    }
  }
};

/// Keras `CategoricalCrossentropy`: one-hot (or soft) targets of the same shape as the scores.
/// On probabilities the scores are first normalised to sum to one, as Keras does.
struct categorical_crossentropy {
  smoothed_crossentropy_options options{};

  std::string name() const { return "categorical_crossentropy"; }
  dtrain::reduction get_reduction() const { return options.reduction; }
  op::categorical_crossentropy kernel() const { return {options.from_logits, options.label_smoothing}; }
  tensor operator()(const tensor& y_true, const tensor& y_pred) const { return detail::call_loss(*this, y_true, y_pred); }
  void validate(batch_view t, batch_view p) const {
    detail::check_label_smoothing(name(), options.label_smoothing);
    detail::require_same_size("categorical_crossentropy", t, p);
  }
};

/// Keras `BinaryCrossentropy`: targets in [0, 1] of the same shape as the scores; the loss of a row
/// is the mean over its last axis.
struct binary_crossentropy {
  smoothed_crossentropy_options options{};

  std::string name() const { return "binary_crossentropy"; }
  dtrain::reduction get_reduction() const { return options.reduction; }
  op::binary_crossentropy kernel() const { return {options.from_logits, options.label_smoothing}; }
  tensor operator()(const tensor& y_true, const tensor& y_pred) const { return detail::call_loss(*this, y_true, y_pred); }
  void validate(batch_view t, batch_view p) const {
    detail::check_label_smoothing(name(), options.label_smoothing);
    detail::require_same_size("binary_crossentropy", t, p);
  }
};

struct kl_divergence_options {
  dtrain::reduction reduction = dtrain::reduction::sum_over_batch_size;
};

/// Keras `KLDivergence`: sum over the last axis of y log(y / y_pred), both clipped to [epsilon, 1].
struct kl_divergence {
  kl_divergence_options options{};

  std::string name() const { return "kl_divergence"; }
  dtrain::reduction get_reduction() const { return options.reduction; }
  op::kl_divergence kernel() const { return {}; }
  tensor operator()(const tensor& y_true, const tensor& y_pred) const { return detail::call_loss(*this, y_true, y_pred); }
  void validate(batch_view t, batch_view p) const { detail::require_same_size("kl_divergence", t, p); }
};

}  // namespace dtrain
