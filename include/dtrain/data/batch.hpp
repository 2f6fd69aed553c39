#pragma once
/// \file
/// The `batch(batch_size, drop_remainder)` stage: tf.data's `Dataset.batch`, with what stacks a batch's
/// elements along a new first axis (`detail::stack`, and `detail::batcher` for tensors, (x, y) and
/// (x, y, sample_weight) examples and lists of them); and `padded_batch(batch_size, padding_value, drop_remainder)`, tf.data's
/// `Dataset.padded_batch`, which first pads every element to the batch's largest extent on each axis.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/core/shape.hpp"
#include "dtrain/core/tensor.hpp"
#include "dtrain/data/dataset.hpp"
#include "dtrain/data/sources.hpp"
#include "dtrain/data/stage_base.hpp"

namespace dtrain::data {

namespace detail {

/// Stacks equally shaped tensors along a new first axis (the batch).
inline tensor stack(const std::vector<tensor>& parts) {
  const auto& s0 = parts.front().shape();
  extents e{parts.size()};
  e.insert(e.end(), s0.begin(), s0.end());
  tensor out = zeros(e);
  const std::size_t n = parts.front().size();
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].shape() != s0)
      throw shape_error("batch: element " + std::to_string(i) + " has shape " + shape_str(parts[i].shape()) +
                        " but the first element of the batch has shape " + shape_str(s0));
    std::copy(parts[i].data(), parts[i].data() + n, out.data() + i * n);
  }
  return out;
}
template <class E>
struct batcher;
template <>
struct batcher<tensor> {
  static tensor make(std::vector<tensor>& es) { return stack(es); }
};
template <>
struct batcher<example> {
  static example make(std::vector<example>& es) {
    std::vector<tensor> xs, ys;
    xs.reserve(es.size()), ys.reserve(es.size());
    for (auto& [x, y] : es) xs.push_back(std::move(x)), ys.push_back(std::move(y));
    return {stack(xs), stack(ys)};
  }
};
template <>
struct batcher<std::vector<tensor>> {
  /// Each component stacked on its own (every element lists as many tensors as the first).
  static std::vector<tensor> make(std::vector<std::vector<tensor>>& es) {
    const std::size_t k = es.front().size();
    std::vector<tensor> out(k);
    std::vector<tensor> parts(es.size());
    for (std::size_t c = 0; c < k; ++c) {
      for (std::size_t i = 0; i < es.size(); ++i) {
        if (es[i].size() != k)
          throw shape_error("batch: element " + std::to_string(i) + " lists " + std::to_string(es[i].size()) +
                            " tensors but the first element of the batch lists " + std::to_string(k));
        parts[i] = std::move(es[i][c]);
      }
      out[c] = stack(parts);
    }
    return out;
  }
};
template <>
struct batcher<multi_example> {
  static multi_example make(std::vector<multi_example>& es) {
    std::vector<std::vector<tensor>> xs, ys;
    xs.reserve(es.size()), ys.reserve(es.size());
    for (auto& [x, y] : es) xs.push_back(std::move(x)), ys.push_back(std::move(y));
    return {batcher<std::vector<tensor>>::make(xs), batcher<std::vector<tensor>>::make(ys)};
  }
};
/// (x, y, sample_weight): each component stacked on its own.
template <class E>
  requires is_weighted_v<E>
struct batcher<E> {
  static E make(std::vector<E>& es) {
    using X = std::tuple_element_t<0, E>;
    std::vector<X> xs, ys, ws;
    xs.reserve(es.size()), ys.reserve(es.size()), ws.reserve(es.size());
    for (auto& [x, y, w] : es) xs.push_back(std::move(x)), ys.push_back(std::move(y)), ws.push_back(std::move(w));
    return {batcher<X>::make(xs), batcher<X>::make(ys), batcher<X>::make(ws)};
  }
};

/// Stacks tensors of one rank but any extents, each padded with `value` to the largest extent of each
/// axis in the batch (padding after the values, as tf.data pads).
inline tensor padded_stack(const std::vector<tensor>& parts, float value) {
  const std::size_t rank = parts.front().dimension();
  extents most(parts.front().shape().begin(), parts.front().shape().end());
  for (std::size_t i = 1; i < parts.size(); ++i) {
    if (parts[i].dimension() != rank)
      throw shape_error("padded_batch: element " + std::to_string(i) + " has shape " + shape_str(parts[i].shape()) +
                        " but the first element of the batch has shape " + shape_str(parts.front().shape()) +
                        " (elements must have the same rank)");
    for (std::size_t a = 0; a < rank; ++a) most[a] = std::max<std::size_t>(most[a], parts[i].shape()[a]);
  }
  extents e{parts.size()};
  e.insert(e.end(), most.begin(), most.end());
  tensor out = zeros(e);
  std::fill(out.begin(), out.end(), value);
  std::vector<std::size_t> stride(rank, 1);  // of the padded element
  for (std::size_t a = rank; a-- > 1;) stride[a - 1] = stride[a] * most[a];
  const std::size_t per = rank ? stride[0] * most[0] : 1;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const tensor& t = parts[i];
    for (std::size_t k = 0; k < t.size(); ++k) {
      std::size_t rest = k, at = 0;
      for (std::size_t a = rank; a-- > 0;) {
        const std::size_t n = t.shape()[a];
        at += (rest % n) * stride[a];
        rest /= n;
      }
      out.data()[i * per + at] = t.data()[k];
    }
  }
  return out;
}
template <class E>
inline constexpr bool paddable_v = std::is_same_v<E, tensor> || std::is_same_v<E, example>;
template <class E>
E padded_batch_of(std::vector<E>& es, float value) {
  if constexpr (std::is_same_v<E, tensor>) {
    return padded_stack(es, value);
  } else {
    std::vector<tensor> xs, ys;
    for (auto& [x, y] : es) xs.push_back(std::move(x)), ys.push_back(std::move(y));
    return {padded_stack(xs, value), padded_stack(ys, value)};
  }
}

}  // namespace detail

/// `Dataset.batch(batch_size, drop_remainder)`: stacks consecutive elements along a new first axis
/// (`padding`: `padded_batch`'s value, the elements padded to the batch's largest first).
template <dataset D>
struct batch_dataset : detail::over<D> {
  using element_type = typename D::element_type;
  std::size_t size;
  bool drop_remainder;
  std::optional<float> padding{};

  std::int64_t cardinality() const {
    const std::int64_t c = this->up.cardinality(), b = static_cast<std::int64_t>(size);
    if (c < 0) return c;
    return drop_remainder ? c / b : (c + b - 1) / b;
  }
  /// FILE sharding: the outermost batch becomes the per-replica batch (when the global one divides).
  void shard_by_files(file_sharding& s)
    requires file_shardable<D>
  {
    if (!s.global_batch) {
      s.global_batch = size;
      if (size % s.workers == 0) size /= s.workers;
    }
    this->up.shard_by_files(s);
  }

  class iterator {
   public:
    iterator(const D& d, std::uint64_t pass, std::size_t size, bool drop, std::optional<float> padding)
        : up_(d.iterate(pass)), size_(size), drop_(drop), padding_(padding) {}
    std::optional<element_type> next() {
      parts_.clear();
      while (parts_.size() < size_) {
        auto e = up_.next();
        if (!e) break;
        parts_.push_back(std::move(*e));
      }
      if (parts_.empty() || (drop_ && parts_.size() < size_)) return std::nullopt;
      if constexpr (detail::paddable_v<element_type>)
        if (padding_) return detail::padded_batch_of(parts_, *padding_);
      return detail::batcher<element_type>::make(parts_);
    }
    std::int64_t skip(std::int64_t n) {
      const auto b = static_cast<std::int64_t>(size_);
      const std::int64_t got = up_.skip(n * b);
      return drop_ ? got / b : (got + b - 1) / b;
    }

   private:
    detail::iter_t<D> up_;
    std::size_t size_;
    bool drop_;
    std::optional<float> padding_;
    std::vector<element_type> parts_;
  };
  iterator iterate(std::uint64_t pass) const { return iterator(this->up, pass, size, drop_remainder, padding); }
};

struct batch_stage {
  std::size_t size;
  bool drop_remainder;
  std::optional<float> padding{};
  template <dataset D>
  batch_dataset<D> apply(D d) const {
    if constexpr (!detail::paddable_v<typename D::element_type>)
      if (padding) throw value_error("padded_batch: the elements are tensors or (x, y) examples");
    return {{std::move(d)}, size, drop_remainder, padding};
  }
};
inline batch_stage batch(std::size_t batch_size, bool drop_remainder = false) {
  if (batch_size == 0) throw value_error("batch: batch_size must be positive");
  return {batch_size, drop_remainder};
}
/// `Dataset.padded_batch(batch_size, padding_values=value, drop_remainder)`, each element padded to the
/// batch's largest extent on every axis.
inline batch_stage padded_batch(std::size_t batch_size, float padding_value = 0.0f, bool drop_remainder = false) {
  if (batch_size == 0) throw value_error("padded_batch: batch_size must be positive");
  return {batch_size, drop_remainder, padding_value};
}

}  // namespace dtrain::data
