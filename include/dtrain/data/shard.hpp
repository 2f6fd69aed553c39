#pragma once
/// \file
/// The `shard(num_shards, index)` stage: tf.data's `Dataset.shard`, every `num_shards`-th element from
/// `index` (what DATA auto-sharding applies, and FILE auto-sharding to a file list).

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "dtrain/core/error.hpp"
#include "dtrain/data/dataset.hpp"
#include "dtrain/data/stage_base.hpp"

namespace dtrain::data {

/// `Dataset.shard(num_shards, index)`: elements index, index + num_shards, ...
template <dataset D>
struct shard_dataset : detail::over<D> {
  using element_type = typename D::element_type;
  std::int64_t num_shards, index;
  std::int64_t cardinality() const {
    const auto c = this->up.cardinality();
    if (c < 0) return c;
    return c > index ? (c - index + num_shards - 1) / num_shards : 0;
  }
  class iterator {
   public:
    iterator(const D& d, std::uint64_t pass, std::int64_t n, std::int64_t i) : up_(d.iterate(pass)), n_(n), i_(i) {}
    std::optional<element_type> next() {
      if (!align()) return std::nullopt;
      auto e = up_.next();
      gap_ = n_ - 1;
      return e;
    }
    std::int64_t skip(std::int64_t n) {
      std::int64_t k = 0;
      while (k < n && align() && up_.skip(1) == 1) ++k, gap_ = n_ - 1;
      return k;
    }

   private:
    bool align() {  // skips the other shards' elements before this shard's next one
      const std::int64_t want = std::exchange(gap_, 0);
      return up_.skip(want) == want;
    }
    detail::iter_t<D> up_;
    std::int64_t n_, i_, gap_ = i_;
  };
  iterator iterate(std::uint64_t pass) const { return iterator(this->up, pass, num_shards, index); }
};
struct shard_stage {
  std::int64_t num_shards, index;
  template <dataset D>
  shard_dataset<D> apply(D d) const {
    return {{std::move(d)}, num_shards, index};
  }
};
inline shard_stage shard(std::int64_t num_shards, std::int64_t index) {
  if (num_shards <= 0 || index < 0 || index >= num_shards)
    throw value_error("shard: need 0 <= index < num_shards, got num_shards " + std::to_string(num_shards) +
                      ", index " + std::to_string(index));
  return {num_shards, index};
}

}  // namespace dtrain::data
