#pragma once
/// \file
/// The user-facing tensor type: xtensor's row-major `xarray<float>`. Batches go into a model as
/// tensors whose first extent is the batch; predictions come back as tensors. This folder is the
/// only one that includes xtensor, so the rest of dtrain is insulated from it.

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include <xtensor/xstorage.hpp>
#include <xtensor/xutils.hpp>

// xtensor before 0.25 (Debian 12 ships 0.24) has two partial specializations of `rebind_container` for
// its small vector, `svector<T, N>`, which clang 19's relaxed template template arguments (P0522, on by
// default) both match: a third, more specialized than both, for the svector every shape and stride uses,
// lets a plain `clang++ -std=c++20` compile dtrain (GCC and older rules pick it too, with the same type).
#if XTENSOR_VERSION_MAJOR == 0 && XTENSOR_VERSION_MINOR < 25
namespace xt {
template <class X, class T, std::size_t N>
struct rebind_container<X, svector<T, N, std::allocator<T>, true>> {
  using type = svector<X, N, std::allocator<X>, true>;
};
}  // namespace xt
#endif

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
/// The same extents, viewed where the tensor keeps them (no copy: what a step's checks use).
inline std::span<const std::size_t> dims_of(const tensor& t) { return {t.shape().data(), t.shape().size()}; }

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

namespace detail {
/// Rows [from, to) of `t` (along its first extent) as a new tensor.
inline tensor rows_of(const tensor& t, std::size_t from, std::size_t to) {
  extents e = extents_of(t);
  const std::size_t per = e[0] ? t.size() / e[0] : 0;
  e[0] = to - from;
  return from_span({t.data() + from * per, (to - from) * per}, e);
}

/// Rows [from, to) of each tensor.
inline std::vector<tensor> rows_of(std::span<const tensor> ts, std::size_t from, std::size_t to) {
  std::vector<tensor> out;
  out.reserve(ts.size());
  for (const tensor& t : ts) out.push_back(rows_of(t, from, to));
  return out;
}
inline std::vector<tensor> rows_of(const std::vector<tensor>& ts, std::size_t from, std::size_t to) {
  return rows_of(std::span<const tensor>(ts), from, to);
}

/// A batch argument: one tensor, or a list of them (one per input or output of a model).
template <class T>
concept tensor_arg = std::same_as<T, tensor> || std::same_as<T, std::vector<tensor>>;
/// Arguments a model's list overloads take: any mix with at least one list.
template <class X, class Y>
concept tensor_lists = tensor_arg<X> && tensor_arg<Y> && (std::same_as<X, std::vector<tensor>> || std::same_as<Y, std::vector<tensor>>);
/// Arguments of the members that take tensors or lists alike.
template <class X, class Y>
concept tensor_args = tensor_arg<X> && tensor_arg<Y>;
/// One tensor or a list of them, as a list.
inline std::span<const tensor> as_tensors(const tensor& t) { return {&t, 1}; }
inline std::span<const tensor> as_tensors(const std::vector<tensor>& ts) { return ts; }

/// The tensors' rows one after the other (all of the same trailing shape); empty parts are skipped.
inline tensor concatenate_rows(const std::vector<tensor>& parts) {
  extents e;
  std::vector<float> all;
  for (const tensor& p : parts) {
    if (p.dimension() == 0 || p.shape()[0] == 0) continue;
    const extents pe = extents_of(p);
    if (e.empty()) e = pe, e[0] = 0;
    else if (!std::equal(pe.begin() + 1, pe.end(), e.begin() + 1, e.end()))
      throw shape_error("concatenate_rows: rows of shape " + shape_str(pe) + " after rows of shape " + shape_str(e));
    e[0] += pe[0];
    all.insert(all.end(), p.data(), p.data() + p.size());
  }
  if (e.empty()) return parts.empty() ? tensor{} : parts.front();
  return from_span(all, e);
}
}  // namespace detail

}  // namespace dtrain
