#pragma once
/// \file
/// tf.data's `Dataset.zip`, `Dataset.unbatch` and `Dataset.from_generator`:
/// - `zip(a, b)`: pairs of a's and b's elements, as long as the shorter (two tensor datasets zip into
///   (x, y) examples, what `fit` takes);
/// - `unbatch()`: each element's rows along its first axis, one element each (an (x, y) example's
///   rows in pairs);
/// - `from_generator(make)`: a source whose every pass calls `make()` for a generator, a callable that
///   returns the next element or nothing at the end. Resuming a saved iterator replays the pass, so the
///   generator must yield the same elements each time it is made.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>

#include "dtrain/core/error.hpp"
#include "dtrain/core/tensor.hpp"
#include "dtrain/data/dataset.hpp"
#include "dtrain/data/sources.hpp"
#include "dtrain/data/stage_base.hpp"

namespace dtrain::data {

/// `Dataset.zip((a, b))`.
template <dataset A, dataset B>
struct zip_dataset {
  using element_type = std::pair<typename A::element_type, typename B::element_type>;
  A a;
  B b;
  /// The shorter's (infinite only when both are; unknown when either is).
  std::int64_t cardinality() const {
    const std::int64_t x = a.cardinality(), y = b.cardinality();
    if (x == unknown || y == unknown) return unknown;
    if (x == infinite) return y;
    if (y == infinite) return x;
    return std::min(x, y);
  }
  data::options options() const { return a.options(); }
  class iterator {
   public:
    iterator(const zip_dataset& d, std::uint64_t pass) : a_(d.a.iterate(pass)), b_(d.b.iterate(pass)) {}
    std::optional<element_type> next() {
      auto x = a_.next();
      if (!x) return std::nullopt;
      auto y = b_.next();
      if (!y) return std::nullopt;
      return element_type{std::move(*x), std::move(*y)};
    }
    std::int64_t skip(std::int64_t n) { return std::min(a_.skip(n), b_.skip(n)); }

   private:
    detail::iter_t<A> a_;
    detail::iter_t<B> b_;
  };
  iterator iterate(std::uint64_t pass) const { return iterator(*this, pass); }
};
template <dataset A, dataset B>
zip_dataset<A, B> zip(A a, B b) {
  return {std::move(a), std::move(b)};
}

namespace detail {
inline std::size_t rows_in_element(const tensor& t, const char* what) {
  if (t.dimension() == 0) throw shape_error(std::string(what) + ": a scalar element has no rows to unbatch");
  return t.shape()[0];
}
}  // namespace detail

/// `Dataset.unbatch()`: over tensors or (x, y) examples (whose x and y have as many rows).
template <dataset D>
struct unbatch_dataset : detail::over<D> {
  using element_type = typename D::element_type;
  static_assert(std::is_same_v<element_type, tensor> || std::is_same_v<element_type, example>,
                "unbatch: the elements are tensors or (x, y) examples");
  std::int64_t cardinality() const {
    const auto c = this->up.cardinality();
    return c == 0 || c == infinite ? c : unknown;
  }
  class iterator {
   public:
    iterator(const D& d, std::uint64_t pass) : up_(d.iterate(pass)) {}
    std::optional<element_type> next() {
      while (!current_ || at_ == rows_) {
        current_ = up_.next();
        if (!current_) return std::nullopt;
        at_ = 0;
        if constexpr (std::is_same_v<element_type, tensor>) {
          rows_ = detail::rows_in_element(*current_, "unbatch");
        } else {
          rows_ = detail::rows_in_element(current_->first, "unbatch");
          if (detail::rows_in_element(current_->second, "unbatch") != rows_)
            throw shape_error("unbatch: an element's x has " + std::to_string(rows_) + " rows and its y " +
                              std::to_string(current_->second.shape()[0]));
        }
      }
      const std::size_t i = at_++;
      if constexpr (std::is_same_v<element_type, tensor>) return detail::row(*current_, i);
      else return example{detail::row(current_->first, i), detail::row(current_->second, i)};
    }
    std::int64_t skip(std::int64_t n) { return detail::skip_by_next(*this, n); }

   private:
    detail::iter_t<D> up_;
    std::optional<element_type> current_;
    std::size_t at_ = 0, rows_ = 0;
  };
  iterator iterate(std::uint64_t pass) const { return iterator(this->up, pass); }
};
struct unbatch_stage {
  template <dataset D>
  unbatch_dataset<D> apply(D d) const {
    return {{std::move(d)}};
  }
};
inline unbatch_stage unbatch() { return {}; }

/// `Dataset.from_generator(make)`: `make()` returns a generator, `std::optional<E>()`; `cardinality`
/// says how many elements a pass has when known.
template <class Make>
struct generator_dataset {
  using generator_type = std::invoke_result_t<const Make&>;
  using element_type = typename std::invoke_result_t<generator_type&>::value_type;
  Make make;
  std::int64_t count = unknown;
  std::int64_t cardinality() const { return count; }
  data::options options() const { return {}; }
  class iterator {
   public:
    explicit iterator(const Make& make) : g_(make()) {}
    std::optional<element_type> next() { return g_(); }
    std::int64_t skip(std::int64_t n) { return detail::skip_by_next(*this, n); }

   private:
    generator_type g_;
  };
  iterator iterate(std::uint64_t) const { return iterator(make); }
};
template <class Make>
  requires std::is_invocable_v<const Make&>
generator_dataset<Make> from_generator(Make make, std::int64_t cardinality = unknown) {
  return {std::move(make), cardinality};
}

}  // namespace dtrain::data
