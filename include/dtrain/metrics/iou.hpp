#pragma once
/// \file
/// Keras' `MeanIoU`: the intersection over union of each class, averaged, from a confusion matrix summed
/// over batches, replicas and workers (its state). Computed on the host.

#include <algorithm>
#include <cmath>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dtrain/metrics/metric.hpp"

namespace dtrain {

/// Keras' arguments of `metrics.MeanIoU`.
struct mean_iou_options {
  int num_classes = 0;                ///< required
  std::optional<int> ignore_class{};  ///< values labelled so are not counted
  bool sparse_y_true = true;          ///< y_true holds class ids (else one value per class: its argmax)
  bool sparse_y_pred = true;          ///< y_pred holds class ids (else scores per class: its argmax)
};

/// Keras `metrics.MeanIoU`: per class c, tp / (tp + fp + fn) over the summed confusion matrix (rows: the
/// true class, columns: the predicted one), averaged over the classes that occur in either.
class mean_iou {
 public:
  explicit mean_iou(mean_iou_options o) : o_(o) {
    if (o_.num_classes < 1) throw value_error("mean_iou: num_classes must be at least 1, not " + std::to_string(o_.num_classes));
  }
  std::string name() const { return "mean_iou"; }
  const mean_iou_options& options() const { return o_; }

  std::size_t state_size() const { return std::size_t(o_.num_classes) * std::size_t(o_.num_classes); }
  void update(batch_view t, batch_view p, std::span<float> s) const {
    const std::vector<double> truth = ids(t, o_.sparse_y_true), pred = ids(p, o_.sparse_y_pred);
    if (truth.size() != pred.size() || t.batch() != p.batch())
      throw shape_error("mean_iou: y_true shape " + t.str() + " does not fit y_pred shape " + p.str() + " (" +
                        std::to_string(truth.size()) + " and " + std::to_string(pred.size()) + " class ids)");
    const std::size_t c = std::size_t(o_.num_classes);
    for (std::size_t k = 0; k < truth.size(); ++k) {
      if (o_.ignore_class && truth[k] == double(*o_.ignore_class)) continue;
      for (const auto& [what, id] : {std::pair{"y_true", truth[k]}, std::pair{"y_pred", pred[k]}})
        if (!(id >= 0.0 && id < double(c)))
          throw value_error(std::string("mean_iou: ") + what + " holds class " + std::to_string(id) + " at value " +
                            std::to_string(k) + ", not one of the " + std::to_string(c) + " classes");
      s[std::size_t(truth[k]) * c + std::size_t(pred[k])] += 1.0f;
    }
  }
  float result(std::span<const float> s) const {
    const std::size_t c = std::size_t(o_.num_classes);
    double sum = 0.0;
    std::size_t valid = 0;
    for (std::size_t k = 0; k < c; ++k) {
      double predicted = 0.0, actual = 0.0;
      for (std::size_t i = 0; i < c; ++i) predicted += s[i * c + k], actual += s[k * c + i];
      const double tp = s[k * c + k], denominator = predicted + actual - tp;
      if (denominator != 0.0) sum += tp / denominator, ++valid;
    }
    return valid ? float(sum / double(valid)) : 0.0f;
  }

 private:
  /// Class ids: each value truncated (sparse, as Keras casts them), or each row's argmax (the first of
  /// equal highest).
  static std::vector<double> ids(batch_view v, bool sparse) {
    std::vector<double> out;
    if (sparse) {
      for (std::size_t k = 0; k < v.size(); ++k) out.push_back(std::trunc(double(v.data[k])));
      return out;
    }
    const std::size_t c = std::max<std::size_t>(1, v.last());
    for (std::size_t r = 0; r < v.size() / c; ++r)
      out.push_back(double(std::max_element(v.data + r * c, v.data + (r + 1) * c) - (v.data + r * c)));
    return out;
  }
  mean_iou_options o_;
};

}  // namespace dtrain
