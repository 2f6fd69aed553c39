#pragma once
/// \file
/// The cpu backend's normalization kernels: layer normalization per row, batch normalization per column
/// with the batch statistics' sums (in fixed slices of rows, cpu/reductions.hpp); every pass over the
/// thread budget.

#include <cmath>
#include <cstddef>

#include "dtrain/backend/backend.hpp"
#include "dtrain/backend/cpu/reductions.hpp"

namespace dtrain::detail {

/// The cpu backend's normalization family (`normalization_kernels`).
struct cpu_normalization_kernels {
  /// Per row of x (rows x cols), in float: mean, then the mean of squared deviations (a second pass);
  /// inv_std = 1 / sqrt(variance + epsilon), xhat = (x - mean) inv_std, y = xhat gamma + beta.
  void layer_normalization_forward(std::size_t rows, std::size_t cols, float epsilon, const float* x,
                                   const float* gamma, const float* beta, float* y, float* xhat, float* inv_std) const {
    for_rows(rows, cols, [&](std::size_t r0, std::size_t r1) {
      for (std::size_t r = r0; r < r1; ++r) {
        const float* xr = x + r * cols;
        float mean = 0.0f, var = 0.0f;
        for (std::size_t j = 0; j < cols; ++j) mean += xr[j];
        mean /= static_cast<float>(cols);
        for (std::size_t j = 0; j < cols; ++j) var += (xr[j] - mean) * (xr[j] - mean);
        const float inv = 1.0f / std::sqrt(var / static_cast<float>(cols) + epsilon);
        inv_std[r] = inv;
        for (std::size_t j = 0; j < cols; ++j) {
          xhat[r * cols + j] = (xr[j] - mean) * inv;
          y[r * cols + j] = xhat[r * cols + j] * gamma[j] + beta[j];
        }
      }
    });
  }
  /// Per row, with g = dy gamma: dx = inv_std (g - mean(g) - xhat mean(g xhat)) (the means in float).
  void layer_normalization_backward(std::size_t rows, std::size_t cols, const float* xhat, const float* inv_std,
                                    const float* gamma, const float* dy, float* dx) const {
    for_rows(rows, cols, [&](std::size_t r0, std::size_t r1) {
      for (std::size_t r = r0; r < r1; ++r) {
        const float *xr = xhat + r * cols, *dr = dy + r * cols;
        float mg = 0.0f, mgx = 0.0f;
        for (std::size_t j = 0; j < cols; ++j) mg += dr[j] * gamma[j], mgx += dr[j] * gamma[j] * xr[j];
        mg /= static_cast<float>(cols), mgx /= static_cast<float>(cols);
        for (std::size_t j = 0; j < cols; ++j) dx[r * cols + j] = inv_std[r] * (dr[j] * gamma[j] - mg - xr[j] * mgx);
      }
    });
  }

  /// out[j] = the sum over rows of (x - mean[j])^2 (batch normalization's variance, the second pass).
  void squared_deviation_sums(std::size_t rows, std::size_t cols, const float* x, const float* mean,
                              float* out) const {
    sum_rows(rows, cols, cols, out, [&](std::size_t r, float* acc) {
      const float* xr = x + r * cols;
      for (std::size_t j = 0; j < cols; ++j) acc[j] += (xr[j] - mean[j]) * (xr[j] - mean[j]);
    });
  }
  /// average = average momentum + value (1 - momentum) (Keras' moving statistics).
  void moving_average(std::size_t n, float momentum, const float* value, float* average) const {
    for (std::size_t i = 0; i < n; ++i) average[i] = average[i] * momentum + value[i] * (1.0f - momentum);
  }
  /// Per column j: inv_std[j] = 1 / sqrt(variance[j] + epsilon), xhat = (x - mean[j]) inv_std[j] (written
  /// when not null), y = xhat gamma[j] + beta[j].
  void batch_normalization_forward(std::size_t rows, std::size_t cols, float epsilon, const float* x,
                                   const float* mean, const float* variance, const float* gamma, const float* beta,
                                   float* y, float* xhat, float* inv_std) const {
    for (std::size_t j = 0; j < cols; ++j) inv_std[j] = 1.0f / std::sqrt(variance[j] + epsilon);
    for_rows(rows, cols, [&](std::size_t r0, std::size_t r1) {
      for (std::size_t r = r0; r < r1; ++r)
        for (std::size_t j = 0; j < cols; ++j) {
          const float h = (x[r * cols + j] - mean[j]) * inv_std[j];
          if (xhat) xhat[r * cols + j] = h;
          y[r * cols + j] = h * gamma[j] + beta[j];
        }
    });
  }
  /// The parameters' gradients in one pass: sums[j] = the sum over rows of dy xhat (gamma's), sums[cols + j]
  /// that of dy (beta's).
  void batch_normalization_gradient_sums(std::size_t rows, std::size_t cols, const float* dy, const float* xhat,
                                         float* sums) const {
    sum_rows(rows, cols, 2 * cols, sums, [&](std::size_t r, float* acc) {
      const float *d = dy + r * cols, *h = xhat + r * cols;
      for (std::size_t j = 0; j < cols; ++j) acc[j] += d[j] * h[j], acc[cols + j] += d[j];
    });
  }
  /// dx = gamma inv_std (dy - inv_count (sums[cols + j] + xhat sums[j])) per column j, with `sums` the
  /// batch's sums of dy xhat (cols), then of dy (cols); without `sums` (statistics held fixed: the
  /// moving ones) dx = gamma inv_std dy.
  void batch_normalization_backward(std::size_t rows, std::size_t cols, float inv_count, const float* xhat,
                                    const float* inv_std, const float* gamma, const float* sums, const float* dy,
                                    float* dx) const {
    for_rows(rows, cols, [&](std::size_t r0, std::size_t r1) {
      for (std::size_t r = r0; r < r1; ++r) {
        const float* d = dy + r * cols;
        float* out = dx + r * cols;
        if (sums)
          for (std::size_t j = 0; j < cols; ++j)
            out[j] = gamma[j] * inv_std[j] * (d[j] - inv_count * (sums[cols + j] + xhat[r * cols + j] * sums[j]));
        else
          for (std::size_t j = 0; j < cols; ++j) out[j] = gamma[j] * inv_std[j] * d[j];
      }
    });
  }
};

}  // namespace dtrain::detail
