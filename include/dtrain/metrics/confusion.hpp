#pragma once
/// \file
/// Keras' `Precision` and `Recall` at one threshold: counts of true and false positives and negatives
/// over every value of the batch, as a (total, count) state (precision: tp / (tp + fp); recall:
/// tp / (tp + fn); 0 while nothing was predicted, or is, positive), so replicas and workers sum exactly.
/// Keras' `AUC`: the same counts at many thresholds (its state), the area under the curve they trace.
/// Computed on the host (a model on another backend hands them host copies of its predictions).

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <string>
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

/// `auc_options::curve`: Keras' "ROC" (true positive rate over false positive rate) or "PR" (precision
/// over recall).
enum class auc_curve { roc, pr };
/// `auc_options::summation_method`: Keras' Riemann sums ("interpolation": trapezoids, for PR the
/// interpolation of Davis & Goadrich; "minoring" / "majoring": the lower / upper of each pair of heights).
enum class auc_summation { interpolation, minoring, majoring };

/// Keras' arguments of `metrics.AUC`.
struct auc_options {
  int num_thresholds = 200;  ///< evenly spaced over [0, 1] (the ends just outside it)
  auc_curve curve = auc_curve::roc;
  auc_summation summation_method = auc_summation::interpolation;
  std::vector<float> thresholds{};  ///< instead: these (in [0, 1]; num_thresholds is then their count + 2)
  bool multi_label = false;         ///< one curve per label (the last axis), their AUCs averaged
  std::optional<int> num_labels{};  ///< with multi_label: the last axis' size (required)
  std::vector<float> label_weights{};  ///< per label: weights of its values, or with multi_label of its AUC
  bool from_logits = false;            ///< y_pred are logits (a sigmoid first)
};

/// Keras `metrics.AUC`: the area under the ROC or PR curve, from true and false positives and negatives
/// at each threshold, summed over batches, replicas and workers (the state: tp, fp, tn, fn, each
/// thresholds x labels, as Keras' variables). Labels are 0 or 1 (with the default thresholds Keras counts a
/// label as that fraction of a positive).
class auc {
 public:
  explicit auc(auc_options o = {}) : o_(std::move(o)) {
    if (o_.thresholds.empty()) {
      if (o_.num_thresholds <= 1)
        throw value_error("auc: num_thresholds must be greater than 1, not " + std::to_string(o_.num_thresholds));
      thresholds_.push_back(-1e-7f);  // Keras' [0 - epsilon, 1/(n-1), ..., 1 + epsilon]
      for (int i = 1; i + 1 < o_.num_thresholds; ++i) thresholds_.push_back(float(i) / float(o_.num_thresholds - 1));
      thresholds_.push_back(1.0f + 1e-7f);
    } else {
      for (float t : o_.thresholds)
        if (!(t >= 0.0f && t <= 1.0f)) throw value_error("auc: threshold " + std::to_string(t) + " is not in [0, 1]");
      thresholds_ = o_.thresholds;
      thresholds_.insert(thresholds_.begin(), -1e-7f);
      thresholds_.push_back(1.0f + 1e-7f);
      o_.num_thresholds = int(thresholds_.size());
    }
    even_ = o_.thresholds.empty() || evenly_spaced(o_.thresholds);
    if (o_.multi_label && !(o_.num_labels && *o_.num_labels >= 1))
      throw value_error("auc: multi_label needs num_labels (the size of the last axis), at least 1");
    if (o_.num_labels && !o_.multi_label) throw value_error("auc: num_labels is for multi_label");
    if (o_.multi_label && !o_.label_weights.empty() && o_.label_weights.size() != std::size_t(*o_.num_labels))
      throw value_error("auc: " + std::to_string(o_.label_weights.size()) + " label_weights for " +
                        std::to_string(*o_.num_labels) + " labels");
    for (float w : o_.label_weights)
      if (!(w >= 0.0f)) throw value_error("auc: label weight " + std::to_string(w) + " is negative");
  }
  std::string name() const { return "auc"; }
  const auc_options& options() const { return o_; }
  /// The thresholds, with Keras' two outside [0, 1].
  const std::vector<float>& thresholds() const { return thresholds_; }

  std::size_t state_size() const { return 4 * thresholds_.size() * labels(); }
  void update(batch_view t, batch_view p, std::span<float> s) const {
    if (t.size() != p.size() || t.batch() != p.batch())
      throw shape_error("auc: y_true shape " + t.str() + " does not fit y_pred shape " + p.str());
    const std::size_t c = std::max<std::size_t>(1, p.last()), n = thresholds_.size(), l = labels();
    if (o_.multi_label && c != l)
      throw shape_error("auc: y_pred shape " + p.str() + " has " + std::to_string(c) + " labels, num_labels is " + std::to_string(l));
    if (!o_.multi_label && !o_.label_weights.empty() && o_.label_weights.size() != c)
      throw shape_error("auc: " + std::to_string(o_.label_weights.size()) + " label_weights for y_pred shape " + p.str());
    // per (threshold, label): tp, fp, tn, fn, accumulated in double, added once
    std::vector<double> at(4 * n * l, 0.0), total_true(l, 0.0), total_false(l, 0.0);
    auto cell = [&](int which, std::size_t i, std::size_t j) -> double& { return at[(std::size_t(which) * n + i) * l + j]; };
    for (std::size_t k = 0; k < p.size(); ++k) {
      const std::size_t j = o_.multi_label ? k % c : 0;
      const double w = !o_.multi_label && !o_.label_weights.empty() ? o_.label_weights[k % c] : 1.0;
      float y = p.data[k];
      if (o_.from_logits) y = 1.0f / (1.0f + std::exp(-y));
      const float truth = t.data[k];
      if (even_) {  // Keras' buckets: the value counts at every threshold below it
        const double pos = double(truth) * w, neg = (1.0 - double(truth)) * w;
        total_true[j] += pos, total_false[j] += neg;
        const float b = std::ceil(y * float(n - 1)) - 1.0f;
        if (b >= float(n)) continue;
        const std::size_t bucket = b > 0.0f ? std::size_t(b) : 0;
        cell(0, bucket, j) += pos, cell(1, bucket, j) += neg;
      } else {
        const bool actual = truth != 0.0f;
        for (std::size_t i = 0; i < n; ++i) {
          const bool predicted = y > thresholds_[i];
          cell(predicted ? (actual ? 0 : 1) : (actual ? 3 : 2), i, j) += w;
        }
      }
    }
    if (even_)  // buckets to counts at each threshold: tp(i) = positives in buckets i.., fn = the rest
      for (std::size_t j = 0; j < l; ++j) {
        for (std::size_t i = n - 1; i-- > 0;) cell(0, i, j) += cell(0, i + 1, j), cell(1, i, j) += cell(1, i + 1, j);
        for (std::size_t i = 0; i < n; ++i)
          cell(3, i, j) = total_true[j] - cell(0, i, j), cell(2, i, j) = total_false[j] - cell(1, i, j);
      }
    for (std::size_t k = 0; k < at.size(); ++k) s[k] = static_cast<float>(s[k] + at[k]);
  }
  float result(std::span<const float> s) const {
    const std::size_t n = thresholds_.size(), l = labels();
    auto get = [&](int which, std::size_t i, std::size_t j) { return double(s[(std::size_t(which) * n + i) * l + j]); };
    auto div = [](double a, double b) { return b == 0.0 ? 0.0 : a / b; };  // Keras' divide_no_nan
    std::vector<double> per_label(l, 0.0);
    for (std::size_t j = 0; j < l; ++j) {
      double sum = 0.0;
      if (o_.curve == auc_curve::pr && o_.summation_method == auc_summation::interpolation) {
        for (std::size_t i = 0; i + 1 < n; ++i) {  // Keras' interpolate_pr_auc
          const double tp0 = get(0, i, j), tp1 = get(0, i + 1, j), p0 = tp0 + get(1, i, j), p1 = tp1 + get(1, i + 1, j);
          const double dtp = tp0 - tp1, slope = div(dtp, std::max(p0 - p1, 0.0)), intercept = tp1 - slope * p1;
          const double ratio = p0 > 0.0 && p1 > 0.0 ? div(p0, std::max(p1, 0.0)) : 1.0;
          sum += div(slope * (dtp + intercept * std::log(ratio)), std::max(tp1 + get(3, i + 1, j), 0.0));
        }
      } else {
        auto point = [&](std::size_t i) {  // (x, y) of threshold i
          const double tp = get(0, i, j), fp = get(1, i, j), tn = get(2, i, j), fn = get(3, i, j);
          const double recall = div(tp, tp + fn);
          return o_.curve == auc_curve::roc ? std::pair{div(fp, fp + tn), recall} : std::pair{recall, div(tp, tp + fp)};
        };
        for (std::size_t i = 0; i + 1 < n; ++i) {
          const auto [x0, y0] = point(i);
          const auto [x1, y1] = point(i + 1);
          const double h = o_.summation_method == auc_summation::interpolation ? (y0 + y1) / 2
                           : o_.summation_method == auc_summation::minoring    ? std::min(y0, y1)
                                                                                : std::max(y0, y1);
          sum += (x0 - x1) * h;
        }
      }
      per_label[j] = sum;
    }
    if (!o_.multi_label) return float(per_label[0]);
    double total = 0.0, weights = 0.0;
    for (std::size_t j = 0; j < l; ++j) {
      const double w = o_.label_weights.empty() ? 1.0 : o_.label_weights[j];
      total += w * per_label[j], weights += w;
    }
    return float(div(total, weights));
  }

 private:
  std::size_t labels() const { return o_.multi_label ? std::size_t(*o_.num_labels) : 1; }
  /// Keras' is_evenly_distributed_thresholds on [0, thresholds..., 1].
  static bool evenly_spaced(const std::vector<float>& t) {
    const std::size_t m = t.size() + 2;
    for (std::size_t i = 0; i < m; ++i) {
      const double v = i == 0 ? 0.0 : i + 1 == m ? 1.0 : t[i - 1], even = double(float(i) / float(m - 1));
      if (std::abs(v - even) > 1e-7 + 1e-5 * std::abs(even)) return false;
    }
    return true;
  }
  auc_options o_;
  std::vector<float> thresholds_;
  bool even_ = true;
};

}  // namespace dtrain
