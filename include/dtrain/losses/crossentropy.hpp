#pragma once
/// \file
/// The three crossentropies of Keras, on logits (`from_logits = true`, computed stably) or on
/// probabilities (clipped to [epsilon, 1 - epsilon] as Keras does; the clipped region has zero gradient).

#include <algorithm>
#include <cmath>

#include "dtrain/losses/loss.hpp"

namespace dtrain {

struct crossentropy_options {
  bool from_logits = false;
  dtrain::reduction reduction = dtrain::reduction::sum_over_batch_size;
};

/// Keras `SparseCategoricalCrossentropy`: integer class labels (n) or (n, 1) against scores (n, classes).
struct sparse_categorical_crossentropy {
  crossentropy_options options{};

  std::string name() const { return "sparse_categorical_crossentropy"; }
  dtrain::reduction get_reduction() const { return options.reduction; }
  tensor operator()(const tensor& y_true, const tensor& y_pred) const { return detail::call_loss(*this, y_true, y_pred); }

  void per_example(batch_view t, batch_view p, float* out, float* d, float scale) const {
    const std::size_t c = p.last(), rows = detail::loss_rows(p);
    if (p.rank() < 2 || t.size() != rows || t.batch() != p.batch())
      throw shape_error(name() + ": labels of shape " + t.str() + " do not fit predictions of shape " + p.str() +
                        " (expected one class index per row of y_pred)");
    for (std::size_t r = 0; r < rows; ++r) {
      const float lf = t.data[r];
      const auto label = static_cast<std::size_t>(lf);
      if (!(lf >= 0.0f) || lf != static_cast<float>(label) || label >= c)
        throw value_error(name() + ": label " + std::to_string(lf) + " at index " + std::to_string(r) +
                          " is not a class index in [0, " + std::to_string(c) + ") (y_true shape " + t.str() +
                          ", y_pred shape " + p.str() + ")");
      const float* z = p.data + r * c;
      float* g = d ? d + r * c : nullptr;
      if (options.from_logits) {
        const float m = *std::max_element(z, z + c);
        double s = 0.0;
        for (std::size_t j = 0; j < c; ++j) s += std::exp(static_cast<double>(z[j] - m));
        out[r] = static_cast<float>(m + std::log(s) - z[label]);
        if (g) {
          for (std::size_t j = 0; j < c; ++j) g[j] = scale * static_cast<float>(std::exp(z[j] - m) / s);
          g[label] -= scale;
        }
      } else {
        const float q = z[label];
        const float qc = std::clamp(q, loss_epsilon, 1.0f - loss_epsilon);
        out[r] = -std::log(qc);
        if (g) {
          std::fill(g, g + c, 0.0f);
          if (q == qc) g[label] = -scale / q;
        }
      }
    }
  }
};

/// Keras `CategoricalCrossentropy`: one-hot (or soft) targets of the same shape as the scores.
/// On probabilities the scores are first normalised to sum to one, as Keras does.
struct categorical_crossentropy {
  crossentropy_options options{};

  std::string name() const { return "categorical_crossentropy"; }
  dtrain::reduction get_reduction() const { return options.reduction; }
  tensor operator()(const tensor& y_true, const tensor& y_pred) const { return detail::call_loss(*this, y_true, y_pred); }

  void per_example(batch_view t, batch_view p, float* out, float* d, float scale) const {
    detail::require_same_size("categorical_crossentropy", t, p);
    const std::size_t c = p.last(), rows = detail::loss_rows(p);
    std::vector<float> gq(d ? c : 0);
    for (std::size_t r = 0; r < rows; ++r) {
      const float* z = p.data + r * c;
      const float* y = t.data + r * c;
      float* g = d ? d + r * c : nullptr;
      if (options.from_logits) {
        const float m = *std::max_element(z, z + c);
        double s = 0.0, ysum = 0.0, l = 0.0;
        for (std::size_t j = 0; j < c; ++j) s += std::exp(static_cast<double>(z[j] - m));
        const double lse = m + std::log(s);
        for (std::size_t j = 0; j < c; ++j) l += y[j] * (lse - z[j]), ysum += y[j];
        out[r] = static_cast<float>(l);
        if (g)
          for (std::size_t j = 0; j < c; ++j)
            g[j] = scale * static_cast<float>(ysum * std::exp(z[j] - m) / s - y[j]);
      } else {
        double s = 0.0, l = 0.0;
        for (std::size_t j = 0; j < c; ++j) s += z[j];
        for (std::size_t j = 0; j < c; ++j) {
          const float q = static_cast<float>(z[j] / s);
          const float qc = std::clamp(q, loss_epsilon, 1.0f - loss_epsilon);
          l -= y[j] * std::log(qc);
          if (g) gq[j] = q == qc ? -y[j] / q : 0.0f;  // d loss / d q
        }
        out[r] = static_cast<float>(l);
        if (g) {  // q = z / sum(z): d loss / d z_k = (gq_k - sum_j gq_j q_j) / s
          double dot = 0.0;
          for (std::size_t j = 0; j < c; ++j) dot += gq[j] * (z[j] / s);
          for (std::size_t j = 0; j < c; ++j) g[j] = scale * static_cast<float>((gq[j] - dot) / s);
        }
      }
    }
  }
};

/// Keras `BinaryCrossentropy`: targets in [0, 1] of the same shape as the scores; the loss of a row
/// is the mean over its last axis.
struct binary_crossentropy {
  crossentropy_options options{};

  std::string name() const { return "binary_crossentropy"; }
  dtrain::reduction get_reduction() const { return options.reduction; }
  tensor operator()(const tensor& y_true, const tensor& y_pred) const { return detail::call_loss(*this, y_true, y_pred); }

  void per_example(batch_view t, batch_view p, float* out, float* d, float scale) const {
    detail::require_same_size("binary_crossentropy", t, p);
    const std::size_t c = p.last(), rows = detail::loss_rows(p);
    const float inv_c = 1.0f / static_cast<float>(c);
    for (std::size_t r = 0; r < rows; ++r) {
      double l = 0.0;
      for (std::size_t j = r * c; j < (r + 1) * c; ++j) {
        const float z = p.data[j], y = t.data[j];
        if (options.from_logits) {
          l += std::max(z, 0.0f) - z * y + std::log1p(std::exp(-std::fabs(z)));
          if (d) d[j] = scale * inv_c * (1.0f / (1.0f + std::exp(-z)) - y);
        } else {
          const float q = std::clamp(z, loss_epsilon, 1.0f - loss_epsilon);
          l -= y * std::log(q + loss_epsilon) + (1.0f - y) * std::log(1.0f - q + loss_epsilon);
          if (d) d[j] = q == z ? -scale * inv_c * (y / (q + loss_epsilon) - (1.0f - y) / (1.0f - q + loss_epsilon)) : 0.0f;
        }
      }
      out[r] = static_cast<float>(l) * inv_c;
    }
  }
};

}  // namespace dtrain
