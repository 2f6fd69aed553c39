#pragma once
/// \file
/// In-memory sources: `from_tensor_slices` (one element per row of the first axis, as
/// `tf.data.Dataset.from_tensor_slices`) and `from_tensors` (the whole tensors as one element).
/// The tensors are shared, so copying a dataset copies no data.

#include <cstring>
#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "dtrain/core/tensor.hpp"
#include "dtrain/data/dataset.hpp"

namespace dtrain::data {

/// A supervised element or batch: features and labels.
using example = std::pair<tensor, tensor>;
/// The element of a model of several inputs or outputs: features (one tensor per input) and labels
/// (one per output), tf.data's nested `((x1, x2), (y1, y2))`.
using multi_example = std::pair<std::vector<tensor>, std::vector<tensor>>;

/// Keras' third element of a batch, `(x, y, sample_weight)`: a weight per example (or per loss row)
/// that multiplies its loss. The multi form has one weights tensor for all outputs or one per output.
using weighted_example = std::tuple<tensor, tensor, tensor>;
using weighted_multi_example = std::tuple<std::vector<tensor>, std::vector<tensor>, std::vector<tensor>>;

/// Whether `E` is a weighted element: (x, y, sample_weight) or lists of them.
template <class E>
inline constexpr bool is_weighted_v = std::is_same_v<E, weighted_example> || std::is_same_v<E, weighted_multi_example>;
/// Whether `E` is a supervised element: (x, y) or lists of them, weighted or not. Its components are
/// reached with std::get: features, labels, then the weights.
template <class E>
inline constexpr bool is_supervised_v = std::is_same_v<E, example> || std::is_same_v<E, multi_example> || is_weighted_v<E>;
/// The element `E` with sample weights (E itself if it has them).
template <class E>
using weighted_t = std::conditional_t<std::is_same_v<E, example> || std::is_same_v<E, weighted_example>,
                                      weighted_example, weighted_multi_example>;

namespace detail {
inline tensor row(const tensor& t, std::size_t i) {
  const auto& s = t.shape();
  extents e(s.begin() + 1, s.end());
  const std::size_t n = t.size() / s[0];
  tensor out = zeros(e);
  std::memcpy(out.data(), t.data() + i * n, n * sizeof(float));
  return out;
}
inline std::vector<tensor> row(const std::vector<tensor>& ts, std::size_t i) {
  std::vector<tensor> out;
  out.reserve(ts.size());
  for (const tensor& t : ts) out.push_back(row(t, i));
  return out;
}
}  // namespace detail

/// Slices of one tensor (element: tensor), of several (element: std::vector<tensor>), or of features
/// and labels together (element: example, or multi_example for lists), with sample weights (element:
/// weighted_example, weighted_multi_example).
template <class E>
class tensor_slices {
 public:
  using element_type = E;

  explicit tensor_slices(tensor x) : tensor_slices(list(std::move(x))) {}
  tensor_slices(tensor x, tensor y) : tensor_slices(list(std::move(x)), list(std::move(y))) {}
  tensor_slices(tensor x, tensor y, tensor w) : tensor_slices(list(std::move(x)), list(std::move(y)), list(std::move(w))) {}
  explicit tensor_slices(std::vector<tensor> x, std::vector<tensor> y = {}, std::vector<tensor> w = {}) {
    if (x.empty()) throw shape_error("from_tensor_slices: no features (an empty list of tensors)");
    if (is_supervised_v<E> && y.empty()) throw shape_error("from_tensor_slices: no labels (an empty list of tensors)");
    if (is_weighted_v<E> && w.empty()) throw shape_error("from_tensor_slices: no sample weights (an empty list of tensors)");
    if (x.front().dimension() == 0) throw shape_error("from_tensor_slices: a scalar has no first axis to slice");
    auto check = [&](const tensor& t, const char* what, std::size_t i) {
      if (t.dimension() == 0 || t.shape()[0] != x.front().shape()[0])
        throw shape_error("from_tensor_slices: features of shape " + shape_str(x.front().shape()) + " and " + what +
                          (x.size() + y.size() > 2 ? " " + std::to_string(i) : std::string()) + " of shape " +
                          shape_str(t.shape()) + " do not have the same first extent");
    };
    for (std::size_t i = 0; i < x.size(); ++i) check(x[i], "features", i);
    for (std::size_t i = 0; i < y.size(); ++i) check(y[i], "labels", i);
    for (std::size_t i = 0; i < w.size(); ++i) check(w[i], "sample weights", i);
    n_ = x.front().shape()[0];
    x_ = std::make_shared<const std::vector<tensor>>(std::move(x));
    y_ = std::make_shared<const std::vector<tensor>>(std::move(y));
    w_ = std::make_shared<const std::vector<tensor>>(std::move(w));
  }

  std::int64_t cardinality() const { return static_cast<std::int64_t>(n_); }
  data::options options() const { return {}; }

  class iterator {
   public:
    iterator(const tensor_slices* s) : s_(*s) {}
    std::optional<E> next() {
      if (i_ >= s_.n_) return std::nullopt;
      const std::size_t i = i_++;
      const std::vector<tensor>&x = *s_.x_, &y = *s_.y_, &w = *s_.w_;
      if constexpr (std::is_same_v<E, example>) return example{detail::row(x[0], i), detail::row(y[0], i)};
      else if constexpr (std::is_same_v<E, multi_example>) return multi_example{detail::row(x, i), detail::row(y, i)};
      else if constexpr (std::is_same_v<E, weighted_example>)
        return weighted_example{detail::row(x[0], i), detail::row(y[0], i), detail::row(w[0], i)};
      else if constexpr (std::is_same_v<E, weighted_multi_example>)
        return weighted_multi_example{detail::row(x, i), detail::row(y, i), detail::row(w, i)};
      else if constexpr (std::is_same_v<E, tensor>) return detail::row(x[0], i);
      else return detail::row(x, i);
    }
    std::int64_t skip(std::int64_t n) {
      const auto k = std::min<std::int64_t>(n, static_cast<std::int64_t>(s_.n_ - i_));
      i_ += static_cast<std::size_t>(k);
      return k;
    }

   private:
    tensor_slices s_;  // shares the tensors
    std::size_t i_ = 0;
  };
  iterator iterate(std::uint64_t) const { return iterator(this); }

 private:
  static std::vector<tensor> list(tensor t) {  // without the copy an initializer list makes
    std::vector<tensor> v;
    v.push_back(std::move(t));
    return v;
  }
  std::shared_ptr<const std::vector<tensor>> x_, y_, w_;
  std::size_t n_ = 0;
};

/// `Dataset.from_tensor_slices(x)`.
inline tensor_slices<tensor> from_tensor_slices(tensor x) { return tensor_slices<tensor>(std::move(x)); }
/// `Dataset.from_tensor_slices((x, y))`.
inline tensor_slices<example> from_tensor_slices(tensor x, tensor y) {
  return tensor_slices<example>(std::move(x), std::move(y));
}
/// `Dataset.from_tensor_slices((x1, x2, ...))`: elements are lists of rows (a several-input model's x).
inline tensor_slices<std::vector<tensor>> from_tensor_slices(std::vector<tensor> xs) {
  return tensor_slices<std::vector<tensor>>(std::move(xs));
}
/// `Dataset.from_tensor_slices(((x1, x2, ...), (y1, y2, ...)))`: the elements of a model of several
/// inputs or outputs.
inline tensor_slices<multi_example> from_tensor_slices(std::vector<tensor> xs, std::vector<tensor> ys) {
  return tensor_slices<multi_example>(std::move(xs), std::move(ys));
}
/// `Dataset.from_tensor_slices((x, y, sample_weight))`: what `fit` weights each example's loss by.
inline tensor_slices<weighted_example> from_tensor_slices(tensor x, tensor y, tensor sample_weight) {
  return tensor_slices<weighted_example>(std::move(x), std::move(y), std::move(sample_weight));
}
/// The same for a model of several inputs or outputs: one weights tensor for all outputs, or one per output.
inline tensor_slices<weighted_multi_example> from_tensor_slices(std::vector<tensor> xs, std::vector<tensor> ys,
                                                                 std::vector<tensor> sample_weights) {
  return tensor_slices<weighted_multi_example>(std::move(xs), std::move(ys), std::move(sample_weights));
}

/// `Dataset.from_tensors(...)`: one element holding the whole value.
template <class E>
class single_element {
 public:
  using element_type = E;
  explicit single_element(E e) : e_(std::make_shared<const E>(std::move(e))) {}
  std::int64_t cardinality() const { return 1; }
  data::options options() const { return {}; }
  class iterator {
   public:
    explicit iterator(std::shared_ptr<const E> e) : e_(std::move(e)) {}
    std::optional<E> next() {
      if (done_) return std::nullopt;
      done_ = true;
      return *e_;
    }
    std::int64_t skip(std::int64_t n) {
      if (done_ || n <= 0) return 0;
      done_ = true;
      return 1;
    }

   private:
    std::shared_ptr<const E> e_;
    bool done_ = false;
  };
  iterator iterate(std::uint64_t) const { return iterator(e_); }

 private:
  std::shared_ptr<const E> e_;
};

inline single_element<tensor> from_tensors(tensor x) { return single_element<tensor>(std::move(x)); }
inline single_element<example> from_tensors(tensor x, tensor y) {
  return single_element<example>(example{std::move(x), std::move(y)});
}
inline single_element<multi_example> from_tensors(std::vector<tensor> xs, std::vector<tensor> ys) {
  return single_element<multi_example>(multi_example{std::move(xs), std::move(ys)});
}

}  // namespace dtrain::data
