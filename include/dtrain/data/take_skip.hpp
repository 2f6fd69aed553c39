#pragma once
/// \file
/// The `take(count)` and `skip(count)` stages: tf.data's `Dataset.take` / `Dataset.skip`, one
/// `slice_dataset` that keeps or drops the first `count` elements.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>

#include "dtrain/data/dataset.hpp"
#include "dtrain/data/stage_base.hpp"

namespace dtrain::data {

/// `Dataset.take(count)` (Drop = false) and `Dataset.skip(count)` (Drop = true).
template <dataset D, bool Drop>
struct slice_dataset : detail::over<D> {
  using element_type = typename D::element_type;
  std::int64_t count;
  std::int64_t cardinality() const {
    const auto c = this->up.cardinality();
    if constexpr (Drop) return c < 0 ? c : std::max<std::int64_t>(0, c - count);
    else return c == infinite ? count : (c < 0 ? (count == 0 ? 0 : unknown) : std::min(c, count));
  }
  class iterator {
   public:
    iterator(const D& d, std::uint64_t pass, std::int64_t count) : up_(d.iterate(pass)), left_(count) {}
    std::optional<element_type> next() {
      if constexpr (Drop) {
        if (left_ > 0) up_.skip(std::exchange(left_, 0));
        return up_.next();
      } else {
        if (left_ <= 0) return std::nullopt;
        --left_;
        return up_.next();
      }
    }
    std::int64_t skip(std::int64_t n) {
      if constexpr (Drop) {
        if (left_ > 0) up_.skip(std::exchange(left_, 0));
        return up_.skip(n);
      } else {
        const std::int64_t k = up_.skip(std::min(n, left_));
        left_ -= k;
        return k;
      }
    }

   private:
    detail::iter_t<D> up_;
    std::int64_t left_;
  };
  iterator iterate(std::uint64_t pass) const { return iterator(this->up, pass, count); }
};
template <bool Drop>
struct slice_stage {
  std::int64_t count;
  template <dataset D>
  slice_dataset<D, Drop> apply(D d) const {
    return {{std::move(d)}, count};
  }
};
inline slice_stage<false> take(std::int64_t count) { return {std::max<std::int64_t>(0, count)}; }
inline slice_stage<true> skip(std::int64_t count) { return {std::max<std::int64_t>(0, count)}; }

}  // namespace dtrain::data
