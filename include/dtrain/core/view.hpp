#pragma once
/// \file
/// `batch_view`: a read-only look at a batch (data plus extents, batch first). Losses and metrics take
/// views, so the model can hand them its own buffers without copying into tensors.

#include <cstddef>
#include <span>
#include <string>

#include "dtrain/core/shape.hpp"

namespace dtrain {

struct batch_view {
  const float* data = nullptr;
  std::span<const std::size_t> extents;  // extents[0] is the batch

  std::size_t rank() const { return extents.size(); }
  std::size_t batch() const { return extents.empty() ? 1 : extents[0]; }
  std::size_t size() const {
    std::size_t s = 1;
    for (auto e : extents) s *= e;
    return s;
  }
  /// Extent of the last axis (1 for a scalar per sample).
  std::size_t last() const { return extents.size() < 2 ? 1 : extents.back(); }
  std::string str() const { return shape_str(extents); }
};

}  // namespace dtrain
