#pragma once
/// \file
/// The `filter(predicate)` stage: tf.data's `Dataset.filter`.

#include <cstdint>
#include <optional>
#include <utility>

#include "dtrain/data/dataset.hpp"
#include "dtrain/data/stage_base.hpp"

namespace dtrain::data {

/// `Dataset.filter(predicate)`.
template <dataset D, class P>
struct filter_dataset : detail::over<D> {
  using element_type = typename D::element_type;
  P pred;
  std::int64_t cardinality() const {
    const auto c = this->up.cardinality();
    return c == infinite ? infinite : (c == 0 ? 0 : unknown);
  }
  class iterator {
   public:
    iterator(const D& d, std::uint64_t pass, const P& p) : up_(d.iterate(pass)), p_(p) {}
    std::optional<element_type> next() {
      while (auto e = up_.next())
        if (p_(std::as_const(*e))) return e;
      return std::nullopt;
    }
    std::int64_t skip(std::int64_t n) { return detail::skip_by_next(*this, n); }

   private:
    detail::iter_t<D> up_;
    P p_;
  };
  iterator iterate(std::uint64_t pass) const { return iterator(this->up, pass, pred); }
};
template <class P>
struct filter_stage {
  P pred;
  template <dataset D>
  filter_dataset<D, P> apply(D d) const {
    return {{std::move(d)}, pred};
  }
};
template <class P>
filter_stage<P> filter(P predicate) {
  return {std::move(predicate)};
}

}  // namespace dtrain::data
