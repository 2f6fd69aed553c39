#pragma once
/// \file
/// The `repeat(count)` stage: tf.data's `Dataset.repeat`, each repetition a new pass of the upstream.

#include <cstdint>
#include <optional>

#include "dtrain/data/dataset.hpp"
#include "dtrain/data/stage_base.hpp"

namespace dtrain::data {

/// `Dataset.repeat(count)`; each repetition is a new pass of the upstream (so shuffles reshuffle).
template <dataset D>
struct repeat_dataset : detail::over<D> {
  using element_type = typename D::element_type;
  std::int64_t count = -1;  // -1: forever

  std::int64_t cardinality() const {
    const std::int64_t c = this->up.cardinality();
    if (c == 0 || count == 0) return 0;
    if (count < 0) return c == unknown ? unknown : infinite;
    return c < 0 ? c : c * count;
  }

  class iterator {
   public:
    iterator(const D& d, std::uint64_t pass, std::int64_t count) : d_(d), pass_(pass), count_(count) { start(); }
    std::optional<element_type> next() {
      while (it_) {
        if (auto e = it_->next()) {
          got_ = true;
          return e;
        }
        if (!got_) break;  // an empty pass would repeat forever
        ++rep_;
        start();
      }
      it_.reset();
      return std::nullopt;
    }
    std::int64_t skip(std::int64_t n) {
      std::int64_t done = 0;
      while (it_ && done < n) {
        const std::int64_t k = it_->skip(n - done);
        done += k;
        got_ = got_ || k > 0;
        if (done == n) break;
        if (!got_) {  // an empty pass: the repetition is over
          it_.reset();
          break;
        }
        ++rep_;
        start();
      }
      return done;
    }

   private:
    void start() {
      got_ = false;
      if (count_ >= 0 && rep_ >= count_)
        it_.reset();
      else
        it_.emplace(d_.iterate(detail::mix(pass_, static_cast<std::uint64_t>(rep_))));
    }
    D d_;
    std::uint64_t pass_;
    std::int64_t count_, rep_ = 0;
    bool got_ = false;
    std::optional<detail::iter_t<D>> it_;
  };
  iterator iterate(std::uint64_t pass) const { return iterator(this->up, pass, count); }
};

struct repeat_stage {
  std::int64_t count;
  template <dataset D>
  repeat_dataset<D> apply(D d) const {
    return {{std::move(d)}, count};
  }
};
/// `repeat()` forever, or `repeat(count)` times.
inline repeat_stage repeat(std::int64_t count = -1) { return {count < 0 ? -1 : count}; }

}  // namespace dtrain::data
