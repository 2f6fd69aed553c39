#pragma once
/// \file
/// The cpu backend's loss and metric kernels. A loss writes one value per row of `rows` rows of `cols`
/// predictions and, when `d` is not null, `scale` times each row's gradient with respect to the
/// predictions. Crossentropies on logits are computed stably; on probabilities they clip to
/// [epsilon, 1 - epsilon] as Keras does (the clipped region has zero gradient). The caller has checked
/// the shapes and, for class indices, that each is an integer in [0, cols).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "dtrain/backend/backend.hpp"

namespace dtrain::detail {

inline std::size_t argmax_row(const float* v, std::size_t n) {
  return static_cast<std::size_t>(std::max_element(v, v + n) - v);
}

inline void loss_kernel(op::sparse_categorical_crossentropy o, std::size_t rows, std::size_t c, float scale,
                        const float* t, const float* p, float* out, float* d) {
  for (std::size_t r = 0; r < rows; ++r) {
    const auto label = static_cast<std::size_t>(t[r]);
    const float* z = p + r * c;
    float* g = d ? d + r * c : nullptr;
    if (o.from_logits) {
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

/// On probabilities the scores are first normalised to sum to one, as Keras does.
inline void loss_kernel(op::categorical_crossentropy o, std::size_t rows, std::size_t c, float scale,
                        const float* t, const float* p, float* out, float* d) {
  std::vector<float> gq(d && !o.from_logits ? c : 0), smoothed(o.label_smoothing != 0.0f ? c : 0);
  const float keep = 1.0f - o.label_smoothing, spread = o.label_smoothing / static_cast<float>(c);
  for (std::size_t r = 0; r < rows; ++r) {
    const float* z = p + r * c;
    const float* y = t + r * c;
    if (!smoothed.empty()) {
      for (std::size_t j = 0; j < c; ++j) smoothed[j] = y[j] * keep + spread;
      y = smoothed.data();
    }
    float* g = d ? d + r * c : nullptr;
    if (o.from_logits) {
      const float m = *std::max_element(z, z + c);
      double s = 0.0, ysum = 0.0, l = 0.0;
      for (std::size_t j = 0; j < c; ++j) s += std::exp(static_cast<double>(z[j] - m));
      const double lse = m + std::log(s);
      for (std::size_t j = 0; j < c; ++j) l += y[j] * (lse - z[j]), ysum += y[j];
      out[r] = static_cast<float>(l);
      if (g)
        for (std::size_t j = 0; j < c; ++j) g[j] = scale * static_cast<float>(ysum * std::exp(z[j] - m) / s - y[j]);
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

/// A row's loss is the mean over its `c` values.
inline void loss_kernel(op::binary_crossentropy o, std::size_t rows, std::size_t c, float scale, const float* t,
                        const float* p, float* out, float* d) {
  const float inv_c = 1.0f / static_cast<float>(c);
  const float keep = 1.0f - o.label_smoothing, spread = 0.5f * o.label_smoothing;
  for (std::size_t r = 0; r < rows; ++r) {
    double l = 0.0;
    for (std::size_t j = r * c; j < (r + 1) * c; ++j) {
      const float z = p[j], y = o.label_smoothing != 0.0f ? t[j] * keep + spread : t[j];
      if (o.from_logits) {
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

inline void loss_kernel(op::mean_squared_error, std::size_t rows, std::size_t c, float scale, const float* t,
                        const float* p, float* out, float* d) {
  const float inv_c = 1.0f / static_cast<float>(c);
  for (std::size_t r = 0; r < rows; ++r) {
    double l = 0.0;
    for (std::size_t j = r * c; j < (r + 1) * c; ++j) {
      const float e = p[j] - t[j];
      l += static_cast<double>(e) * e;
      if (d) d[j] = scale * 2.0f * inv_c * e;
    }
    out[r] = static_cast<float>(l) * inv_c;
  }
}

inline void loss_kernel(op::mean_absolute_error, std::size_t rows, std::size_t c, float scale, const float* t,
                        const float* p, float* out, float* d) {
  const float inv_c = 1.0f / static_cast<float>(c);
  for (std::size_t r = 0; r < rows; ++r) {
    double l = 0.0;
    for (std::size_t j = r * c; j < (r + 1) * c; ++j) {
      const float e = p[j] - t[j];
      l += std::fabs(e);
      if (d) d[j] = e > 0.0f ? scale * inv_c : e < 0.0f ? -scale * inv_c : 0.0f;
    }
    out[r] = static_cast<float>(l) * inv_c;
  }
}

inline void loss_kernel(op::huber o, std::size_t rows, std::size_t c, float scale, const float* t, const float* p,
                        float* out, float* d) {
  const float inv_c = 1.0f / static_cast<float>(c);
  for (std::size_t r = 0; r < rows; ++r) {
    double l = 0.0;
    for (std::size_t j = r * c; j < (r + 1) * c; ++j) {
      const float e = p[j] - t[j], a = std::fabs(e);
      const bool quadratic = a <= o.delta;
      l += quadratic ? 0.5 * static_cast<double>(e) * e : static_cast<double>(o.delta) * a - 0.5 * static_cast<double>(o.delta) * o.delta;
      if (d) d[j] = scale * inv_c * (quadratic ? e : (e > 0.0f ? o.delta : -o.delta));
    }
    out[r] = static_cast<float>(l) * inv_c;
  }
}

inline void loss_kernel(op::kl_divergence, std::size_t rows, std::size_t c, float scale, const float* t, const float* p,
                        float* out, float* d) {
  for (std::size_t r = 0; r < rows; ++r) {
    double l = 0.0;
    for (std::size_t j = r * c; j < (r + 1) * c; ++j) {
      const float y = std::clamp(t[j], loss_epsilon, 1.0f), q = std::clamp(p[j], loss_epsilon, 1.0f);
      l += y * std::log(y / q);
      if (d) d[j] = q == p[j] ? -scale * y / q : 0.0f;
    }
    out[r] = static_cast<float>(l);
  }
}

inline void loss_kernel(op::cosine_similarity, std::size_t rows, std::size_t c, float scale, const float* t,
                        const float* p, float* out, float* d) {
  for (std::size_t r = 0; r < rows; ++r) {
    const float* y = t + r * c;
    const float* q = p + r * c;
    double yy = 0.0, qq = 0.0, yq = 0.0;
    for (std::size_t j = 0; j < c; ++j) yy += double(y[j]) * y[j], qq += double(q[j]) * q[j], yq += double(y[j]) * q[j];
    const double ny = std::sqrt(std::max(yy, double(loss_epsilon))), nq = std::sqrt(std::max(qq, double(loss_epsilon)));
    const double cosine = yq / (ny * nq);
    out[r] = static_cast<float>(-cosine);
    if (d)  // d/dq of -(y.q)/(ny nq): -(y / ny - cosine q / nq) / nq, the second term only where |q| is not the floor
      for (std::size_t j = 0; j < c; ++j)
        d[r * c + j] = -scale * static_cast<float>((y[j] / ny - (qq > loss_epsilon ? cosine * q[j] / nq : 0.0)) / nq);
  }
}

inline float metric_kernel(op::sparse_categorical_accuracy, std::size_t rows, std::size_t c, const float* t,
                           const float* p) {
  double hits = 0.0;
  for (std::size_t r = 0; r < rows; ++r) hits += static_cast<float>(argmax_row(p + r * c, c)) == t[r] ? 1.0 : 0.0;
  return static_cast<float>(hits);
}

inline float metric_kernel(op::categorical_accuracy, std::size_t rows, std::size_t c, const float* t, const float* p) {
  double hits = 0.0;
  for (std::size_t r = 0; r < rows; ++r) hits += argmax_row(p + r * c, c) == argmax_row(t + r * c, c) ? 1.0 : 0.0;
  return static_cast<float>(hits);
}

inline float metric_kernel(op::binary_accuracy o, std::size_t rows, std::size_t c, const float* t, const float* p) {
  double hits = 0.0;
  for (std::size_t i = 0; i < rows * c; ++i) hits += (p[i] > o.threshold ? 1.0f : 0.0f) == t[i] ? 1.0 : 0.0;
  return static_cast<float>(hits / static_cast<double>(c));
}

/// Whether fewer than k of the row's `c` scores exceed the score at `label` (Keras' in_top_k).
inline bool in_top_k(const float* z, std::size_t c, std::size_t label, int k) {
  std::size_t above = 0;
  for (std::size_t j = 0; j < c; ++j) above += z[j] > z[label] ? 1 : 0;
  return above < static_cast<std::size_t>(k);
}

inline float metric_kernel(op::sparse_top_k_categorical_accuracy o, std::size_t rows, std::size_t c, const float* t,
                           const float* p) {
  double hits = 0.0;
  for (std::size_t r = 0; r < rows; ++r) hits += in_top_k(p + r * c, c, static_cast<std::size_t>(t[r]), o.k) ? 1.0 : 0.0;
  return static_cast<float>(hits);
}

inline float metric_kernel(op::top_k_categorical_accuracy o, std::size_t rows, std::size_t c, const float* t,
                           const float* p) {
  double hits = 0.0;
  for (std::size_t r = 0; r < rows; ++r) hits += in_top_k(p + r * c, c, argmax_row(t + r * c, c), o.k) ? 1.0 : 0.0;
  return static_cast<float>(hits);
}

/// The cpu backend's loss and metric family (`loss_kernels`).
struct cpu_loss_kernels {
  template <class Op>
  void loss(const Op& o, std::size_t rows, std::size_t cols, float scale, const float* y_true, const float* y_pred,
            float* losses, float* d) const {
    detail::loss_kernel(o, rows, cols, scale, y_true, y_pred, losses, d);
  }
  /// out[0] = the batch's metric total (correct rows; binary accuracy: correct values / cols).
  template <class Op>
  void metric(const Op& o, std::size_t rows, std::size_t cols, const float* y_true, const float* y_pred,
              float* out) const {
    *out = detail::metric_kernel(o, rows, cols, y_true, y_pred);
  }
};

}  // namespace dtrain::detail
