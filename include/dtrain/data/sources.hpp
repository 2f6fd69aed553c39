#pragma once
/// \file
/// In-memory sources: `from_tensor_slices` (one element per row of the first axis, as
/// `tf.data.Dataset.from_tensor_slices`) and `from_tensors` (the whole tensors as one element).
/// The tensors are shared, so copying a dataset copies no data.

#include <cstring>
#include <memory>
#include <optional>
#include <utility>

#include "dtrain/core/tensor.hpp"
#include "dtrain/data/dataset.hpp"

namespace dtrain::data {

/// A supervised element or batch: features and labels.
using example = std::pair<tensor, tensor>;

namespace detail {
inline tensor row(const tensor& t, std::size_t i) {
  const auto& s = t.shape();
  extents e(s.begin() + 1, s.end());
  const std::size_t n = t.size() / s[0];
  tensor out = zeros(e);
  std::memcpy(out.data(), t.data() + i * n, n * sizeof(float));
  return out;
}
}  // namespace detail

/// Slices of one tensor (element: tensor) or of features and labels together (element: example).
template <class E>
class tensor_slices {
 public:
  using element_type = E;

  explicit tensor_slices(tensor x) : x_(std::make_shared<const tensor>(std::move(x))) {
    if (x_->dimension() == 0) throw shape_error("from_tensor_slices: a scalar has no first axis to slice");
    n_ = x_->shape()[0];
  }
  tensor_slices(tensor x, tensor y) : tensor_slices(std::move(x)) {
    if (y.dimension() == 0 || y.shape()[0] != n_)
      throw shape_error("from_tensor_slices: features of shape " + shape_str(x_->shape()) + " and labels of shape " +
                        shape_str(y.shape()) + " do not have the same first extent");
    y_ = std::make_shared<const tensor>(std::move(y));
  }

  std::int64_t cardinality() const { return static_cast<std::int64_t>(n_); }
  data::options options() const { return {}; }

  class iterator {
   public:
    iterator(const tensor_slices* s) : s_(*s) {}
    std::optional<E> next() {
      if (i_ >= s_.n_) return std::nullopt;
      const std::size_t i = i_++;
      if constexpr (std::is_same_v<E, example>)
        return example{detail::row(*s_.x_, i), detail::row(*s_.y_, i)};
      else
        return detail::row(*s_.x_, i);
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
  std::shared_ptr<const tensor> x_, y_;
  std::size_t n_ = 0;
};

/// `Dataset.from_tensor_slices(x)`.
inline tensor_slices<tensor> from_tensor_slices(tensor x) { return tensor_slices<tensor>(std::move(x)); }
/// `Dataset.from_tensor_slices((x, y))`.
inline tensor_slices<example> from_tensor_slices(tensor x, tensor y) {
  return tensor_slices<example>(std::move(x), std::move(y));
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

}  // namespace dtrain::data
