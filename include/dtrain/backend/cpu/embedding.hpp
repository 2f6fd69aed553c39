#pragma once
/// \file
/// The cpu backend's embedding kernels: rows looked up by index, and their gradient summed per table row
/// in the order the model sorted the batch's indices.

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "dtrain/backend/backend.hpp"

namespace dtrain::detail {

/// The cpu backend's embedding family (`embedding_kernels`).
struct cpu_embedding_kernels {
  /// y row r = table row x[r] (dim values), or zeros where x[r] is not an index in [0, vocab).
  void embedding_forward(std::size_t rows, std::size_t dim, std::size_t vocab, const float* x, const float* table,
                         float* y) const {
    for (std::size_t r = 0; r < rows; ++r) {
      if (x[r] >= 0.0f && x[r] < float(vocab)) std::copy_n(table + std::size_t(x[r]) * dim, dim, y + r * dim);
      else std::fill_n(y + r * dim, dim, 0.0f);
    }
  }
  /// grad row v = the sum of dy rows order[starts[v]], ..., order[starts[v + 1] - 1], in that order.
  void embedding_backward(std::size_t vocab, std::size_t dim, const std::uint32_t* order, const std::uint32_t* starts,
                          const float* dy, float* grad) const {
    for (std::size_t v = 0; v < vocab; ++v) {
      float* g = grad + v * dim;
      std::fill_n(g, dim, 0.0f);
      for (std::uint32_t k = starts[v]; k < starts[v + 1]; ++k)
        for (std::size_t d = 0; d < dim; ++d) g[d] += dy[std::size_t(order[k]) * dim + d];
    }
  }
};

}  // namespace dtrain::detail
