#pragma once
/// \file
/// The cpu backend's regularization kernels: dropout's mask from the counter-based generator keyed by the
/// model's, and the l2 penalty with its gradient.

#include <cstddef>
#include <cstdint>

#include "dtrain/backend/backend.hpp"
#include "dtrain/core/random.hpp"

namespace dtrain::detail {

/// The cpu backend's regularization family (`regularization_kernels`).
struct cpu_regularization_kernels {
  /// mask[i] = 1 / (1 - rate) where the i-th uniform of `key`'s Philox stream is >= rate, else 0;
  /// y = x * mask.
  void dropout(std::size_t n, float rate, std::uint64_t key, const float* x, float* y, float* mask) const {
    const float keep = 1.0f / (1.0f - rate);
    for (std::size_t i = 0; i < n; i += 4) {
      const auto u = counter_uniform4(key, i / 4);
      for (std::size_t j = 0; j < 4 && i + j < n; ++j) {
        mask[i + j] = u[j] >= rate ? keep : 0.0f;
        y[i + j] = x[i + j] * mask[i + j];
      }
    }
  }

  /// penalty[0] += factor sum(w^2) (summed in double); when g is not null, g += scale 2 factor w.
  void l2(std::size_t n, float factor, float scale, const float* w, float* g, float* penalty) const {
    double s = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      s += static_cast<double>(w[i]) * w[i];
      if (g) g[i] += scale * 2.0f * factor * w[i];
    }
    *penalty += static_cast<float>(factor * s);
  }
  /// penalty[0] += factor sum(|w|) (summed in double); when g is not null, g += scale factor sign(w).
  void l1(std::size_t n, float factor, float scale, const float* w, float* g, float* penalty) const {
    double s = 0.0;
    const float a = scale * factor;
    for (std::size_t i = 0; i < n; ++i) {
      s += std::fabs(static_cast<double>(w[i]));
      if (g) g[i] += w[i] > 0.0f ? a : w[i] < 0.0f ? -a : 0.0f;
    }
    *penalty += static_cast<float>(factor * s);
  }
};

}  // namespace dtrain::detail
