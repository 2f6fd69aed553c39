#pragma once
/// \file
/// The user-facing tensor type: xtensor's row-major `xarray<float>`. Batches go into a model as
/// tensors whose first extent is the batch; predictions come back as tensors. This folder is the
/// only one that includes xtensor, so the rest of dtrain is insulated from it.

#include <cstddef>
#include <span>
#include <vector>

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xio.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include "dtrain/core/error.hpp"
#include "dtrain/core/shape.hpp"

namespace dtrain {

/// A dense row-major float tensor of any rank.
using tensor = xt::xarray<float, xt::layout_type::row_major>;

/// Extents of a tensor as a vector (what error messages and checks use).
using extents = std::vector<std::size_t>;

inline extents extents_of(const tensor& t) { return extents(t.shape().begin(), t.shape().end()); }

/// A tensor of the given extents, filled with zeros.
inline tensor zeros(const extents& e) { return tensor(tensor::shape_type(e.begin(), e.end()), 0.0f); }

/// A tensor copied from a span, with the given extents (whose product must equal the span's size).
inline tensor from_span(std::span<const float> data, const extents& e) {
  std::size_t n = 1;
  for (auto d : e) n *= d;
  if (n != data.size())
    throw shape_error("from_span: " + std::to_string(data.size()) + " values do not fill shape " + shape_str(e));
  tensor t = zeros(e);
  std::copy(data.begin(), data.end(), t.data());
  return t;
}

}  // namespace dtrain
