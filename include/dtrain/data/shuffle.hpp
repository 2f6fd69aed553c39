#pragma once
/// \file
/// The `shuffle(buffer_size, seed, reshuffle_each_iteration)` stage: tf.data's `Dataset.shuffle`, its
/// seed `default_seed` where TF's would be random.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/core/random.hpp"
#include "dtrain/data/dataset.hpp"
#include "dtrain/data/stage_base.hpp"

namespace dtrain::data {

struct shuffle_options {
  std::size_t buffer_size = 0;
  std::uint64_t seed = default_seed;
  bool reshuffle_each_iteration = true;
};

/// `Dataset.shuffle(buffer_size, seed, reshuffle_each_iteration)`: TF's buffer algorithm (fill the
/// buffer, emit a uniformly chosen slot, refill it from upstream).
template <dataset D>
struct shuffle_dataset : detail::over<D> {
  using element_type = typename D::element_type;
  shuffle_options opt;

  std::int64_t cardinality() const { return this->up.cardinality(); }

  class iterator {
   public:
    iterator(const D& d, std::uint64_t pass, const shuffle_options& o)
        : up_(d.iterate(pass)), rng_(o.reshuffle_each_iteration ? detail::mix(o.seed, pass) : o.seed),
          size_(o.buffer_size) {}
    std::optional<element_type> next() {
      if (!filled_) {
        filled_ = true;
        buf_.reserve(std::min<std::size_t>(size_, 1 << 16));
        while (buf_.size() < size_) {
          auto e = up_.next();
          if (!e) break;
          buf_.push_back(std::move(*e));
        }
      }
      if (buf_.empty()) return std::nullopt;
      const std::size_t j = rng_.below(buf_.size());
      element_type out = std::move(buf_[j]);
      if (auto e = up_.next())
        buf_[j] = std::move(*e);
      else {
        buf_[j] = std::move(buf_.back());
        buf_.pop_back();
      }
      return out;
    }
    std::int64_t skip(std::int64_t n) { return detail::skip_by_next(*this, n); }

   private:
    detail::iter_t<D> up_;
    rng rng_;
    std::size_t size_;
    std::vector<element_type> buf_;
    bool filled_ = false;
  };
  iterator iterate(std::uint64_t pass) const { return iterator(this->up, pass, opt); }
};

struct shuffle_stage {
  shuffle_options opt;
  template <dataset D>
  shuffle_dataset<D> apply(D d) const {
    return {{std::move(d)}, opt};
  }
};
inline shuffle_stage shuffle(std::size_t buffer_size, std::uint64_t seed = default_seed,
                             bool reshuffle_each_iteration = true) {
  if (buffer_size == 0) throw value_error("shuffle: buffer_size must be positive");
  return {{buffer_size, seed, reshuffle_each_iteration}};
}

}  // namespace dtrain::data
