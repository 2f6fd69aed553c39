#pragma once
/// \file
/// The CUDA backend's losses (one thread per row) and metrics (per-row hits, then a tree sum,
/// cuda/blas.hpp): source and launches.

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "dtrain/backend/backend.hpp"
#include "dtrain/backend/cuda/blas.hpp"  // sum_of: the tree sums this family launches
#include "dtrain/backend/cuda/device_pointer.hpp"
#include "dtrain/backend/cuda/kernel_source.hpp"

// clang-format off
DTRAIN_CUDA_SOURCE(losses,

// ---- losses: one thread per row (kind: 0 sparse categorical, 1 categorical, 2 binary crossentropy,
// 3 mean squared error, 4 mean absolute error, 5 Huber, 6 KL divergence, 7 cosine similarity; `param`:
// the label smoothing of 1 and 2, the delta of 5); `d` may be null --------------------------------------------
DTRAIN_DEVICE float smoothed_target(int kind, float param, long long c, float y) {
  return param == 0.0f ? y : kind == 1 ? y * (1.0f - param) + param / (float)c : y * (1.0f - param) + 0.5f * param;
}
DTRAIN_KERNEL void dtrain_loss(long long rows, long long c, int kind, int from_logits, float scale, float eps,
                               float param, const float* t, const float* p, float* out, float* d) {
  for (long long r = first_index(); r < rows; r += grid_stride()) {
    const float* z = p + r * c;
    float* g = d ? d + r * c : (float*)0;
    if (kind == 7) {  // cosine similarity
      const float* y = t + r * c;
      double yy = 0.0, qq = 0.0, yq = 0.0;
      for (long long j = 0; j < c; ++j) { yy += (double)y[j] * y[j]; qq += (double)z[j] * z[j]; yq += (double)y[j] * z[j]; }
      const double ny = sqrt(yy > eps ? yy : (double)eps), nq = sqrt(qq > eps ? qq : (double)eps);
      const double cosine = yq / (ny * nq);
      out[r] = (float)-cosine;
      if (g)
        for (long long j = 0; j < c; ++j) g[j] = -scale * (float)((y[j] / ny - (qq > eps ? cosine * z[j] / nq : 0.0)) / nq);
    } else if (kind == 0 || kind == 1) {
      const float* y = kind == 1 ? t + r * c : t;
      const long long label = kind == 0 ? (long long)t[r] : 0;
      if (from_logits) {
        float m = z[0];
        for (long long j = 1; j < c; ++j) m = z[j] > m ? z[j] : m;
        double s = 0.0;
        for (long long j = 0; j < c; ++j) s += exp((double)(z[j] - m));
        const double lse = m + log(s);
        double l = 0.0, ysum = 0.0;
        if (kind == 0) l = lse - z[label], ysum = 1.0;
        else for (long long j = 0; j < c; ++j) { const float yj = smoothed_target(1, param, c, y[j]); l += yj * (lse - z[j]); ysum += yj; }
        out[r] = (float)l;
        if (g)
          for (long long j = 0; j < c; ++j) {
            const double yj = kind == 0 ? (j == label ? 1.0 : 0.0) : (double)smoothed_target(1, param, c, y[j]);
            g[j] = scale * (float)(ysum * exp((double)(z[j] - m)) / s - yj);
          }
      } else if (kind == 0) {
        const float q = z[label];
        const float qc = q < eps ? eps : (q > 1.0f - eps ? 1.0f - eps : q);
        out[r] = -logf(qc);
        if (g) {
          for (long long j = 0; j < c; ++j) g[j] = 0.0f;
          if (q == qc) g[label] = -scale / q;
        }
      } else {  // probabilities, normalised to sum to one first (as Keras)
        double s = 0.0, l = 0.0, dot = 0.0;
        for (long long j = 0; j < c; ++j) s += z[j];
        for (long long j = 0; j < c; ++j) {
          const float q = (float)(z[j] / s), yj = smoothed_target(1, param, c, y[j]);
          const float qc = q < eps ? eps : (q > 1.0f - eps ? 1.0f - eps : q);
          l -= yj * logf(qc);
          dot += (q == qc ? -yj / q : 0.0f) * (z[j] / s);
        }
        out[r] = (float)l;
        if (g)
          for (long long j = 0; j < c; ++j) {
            const float q = (float)(z[j] / s), yj = smoothed_target(1, param, c, y[j]);
            const float qc = q < eps ? eps : (q > 1.0f - eps ? 1.0f - eps : q);
            g[j] = scale * (float)(((q == qc ? -yj / q : 0.0f) - dot) / s);
          }
      }
    } else {  // elementwise losses, a row's loss the mean over its c values (KL divergence: the sum)
      const float inv_c = kind == 6 ? 1.0f : 1.0f / (float)c;
      double l = 0.0;
      for (long long j = r * c; j < (r + 1) * c; ++j) {
        const float zj = p[j], y = kind == 2 ? smoothed_target(2, param, c, t[j]) : t[j];
        if (kind == 3) {
          const float e = zj - y;
          l += (double)e * e;
          if (d) d[j] = scale * 2.0f * inv_c * e;
        } else if (kind == 4) {
          const float e = zj - y;
          l += fabsf(e);
          if (d) d[j] = e > 0.0f ? scale * inv_c : (e < 0.0f ? -scale * inv_c : 0.0f);
        } else if (kind == 5) {
          const float e = zj - y, a = fabsf(e);
          l += a <= param ? 0.5 * (double)e * e : (double)param * a - 0.5 * (double)param * param;
          if (d) d[j] = scale * inv_c * (a <= param ? e : (e > 0.0f ? param : -param));
        } else if (kind == 6) {
          const float yc = y < eps ? eps : (y > 1.0f ? 1.0f : y), q = zj < eps ? eps : (zj > 1.0f ? 1.0f : zj);
          l += yc * logf(yc / q);
          if (d) d[j] = q == zj ? -scale * yc / q : 0.0f;
        } else if (from_logits) {
          l += fmaxf(zj, 0.0f) - zj * y + log1pf(expf(-fabsf(zj)));
          if (d) d[j] = scale * inv_c * (1.0f / (1.0f + expf(-zj)) - y);
        } else {
          const float q = zj < eps ? eps : (zj > 1.0f - eps ? 1.0f - eps : zj);
          l -= y * logf(q + eps) + (1.0f - y) * logf(1.0f - q + eps);
          if (d) d[j] = q == zj ? -scale * inv_c * (y / (q + eps) - (1.0f - y) / (1.0f - q + eps)) : 0.0f;
        }
      }
      out[r] = (float)l * inv_c;
    }
  }
}

// ---- metrics: per-row hits (kind: 0 sparse categorical, 1 categorical, 2 binary accuracy, 3 sparse top-k,
// 4 top-k categorical accuracy, `k` for 3 and 4), summed after ---------------------------------------------
DTRAIN_DEVICE long long argmax_row(const float* v, long long n) {
  long long best = 0;
  for (long long j = 1; j < n; ++j) best = v[j] > v[best] ? j : best;
  return best;
}
DTRAIN_KERNEL void dtrain_metric_hits(long long rows, long long c, int kind, float threshold, int k, const float* t,
                                      const float* p, float* hits) {
  for (long long r = first_index(); r < rows; r += grid_stride()) {
    const float* z = p + r * c;
    if (kind == 3 || kind == 4) {
      const long long label = kind == 3 ? (long long)t[r] : argmax_row(t + r * c, c);
      long long above = 0;
      for (long long j = 0; j < c; ++j) above += z[j] > z[label] ? 1 : 0;
      hits[r] = above < k ? 1.0f : 0.0f;
    } else if (kind == 0) hits[r] = (float)argmax_row(z, c) == t[r] ? 1.0f : 0.0f;
    else if (kind == 1) hits[r] = argmax_row(z, c) == argmax_row(t + r * c, c) ? 1.0f : 0.0f;
    else {
      float h = 0.0f;
      for (long long j = 0; j < c; ++j) h += (z[j] > threshold ? 1.0f : 0.0f) == t[r * c + j] ? 1.0f : 0.0f;
      hits[r] = h;
    }
  }
}


)
// clang-format on

/// The family's kernels, for the kernel list (cuda/kernels.hpp).
#define DTRAIN_CUDA_LOSS_KERNELS(X)                                                                           \
  X(dtrain_loss) X(dtrain_metric_hits)

namespace dtrain::cuda_detail {

template <class D>
class cuda_loss_kernels {
  template <class T>
  using pointer = device_pointer<T>;
  const D& self() const { return static_cast<const D&>(*this); }

 public:
  template <class Op>
  void loss(const Op& o, std::size_t rows, std::size_t cols, float scale, pointer<const float> y_true,
            pointer<const float> y_pred, pointer<float> losses, pointer<float> d) const {
    int kind = 3, logits = 0;
    float param = 0.0f;
    if constexpr (requires { o.from_logits; }) logits = o.from_logits ? 1 : 0;
    if constexpr (requires { o.label_smoothing; }) param = o.label_smoothing;
    if constexpr (std::is_same_v<Op, op::sparse_categorical_crossentropy>) kind = 0;
    else if constexpr (std::is_same_v<Op, op::categorical_crossentropy>) kind = 1;
    else if constexpr (std::is_same_v<Op, op::binary_crossentropy>) kind = 2;
    else if constexpr (std::is_same_v<Op, op::mean_absolute_error>) kind = 4;
    else if constexpr (std::is_same_v<Op, op::huber>) kind = 5, param = o.delta;
    else if constexpr (std::is_same_v<Op, op::kl_divergence>) kind = 6;
    else if constexpr (std::is_same_v<Op, op::cosine_similarity>) kind = 7;
    self().template run<&kernels::dtrain_loss>(rows, rows, cols, kind, logits, scale, loss_epsilon, param, y_true,
                                                y_pred, losses, d);
  }
  /// out[0] = the batch's correct rows (binary accuracy: correct values / cols).
  template <class Op>
  void metric(const Op& o, std::size_t rows, std::size_t cols, pointer<const float> y_true,
              pointer<const float> y_pred, pointer<float> out) const {
    int kind = 0, k = 0;
    float threshold = 0.0f;
    if constexpr (std::is_same_v<Op, op::categorical_accuracy>) kind = 1;
    if constexpr (std::is_same_v<Op, op::binary_accuracy>) kind = 2, threshold = o.threshold;
    if constexpr (std::is_same_v<Op, op::sparse_top_k_categorical_accuracy>) kind = 3, k = o.k;
    if constexpr (std::is_same_v<Op, op::top_k_categorical_accuracy>) kind = 4, k = o.k;
    // the hits after the reduction's partials in one scratch block
    const std::size_t parts = D::tree_size(rows);
    auto* part = static_cast<double*>(self().scratch(parts * sizeof(double) + rows * sizeof(float)));
    auto* hits = reinterpret_cast<float*>(part + parts);
    self().template run<&kernels::dtrain_metric_hits>(rows, rows, cols, kind, threshold, k, y_true, y_pred, hits);
    self().reduce(rows, pointer<const float>(hits), sum_of::values, kind == 2 ? static_cast<double>(cols) : 1.0, 0.0f, false,
                  out, part);
  }
};

}  // namespace dtrain::cuda_detail
