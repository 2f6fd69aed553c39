#pragma once
/// \file
/// The `map(f, num_parallel_calls)` stage: tf.data's `Dataset.map`, elements mapped in parallel on
/// dtrain's thread pool when asked, in order.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "dtrain/core/threads.hpp"
#include "dtrain/data/dataset.hpp"
#include "dtrain/data/stage_base.hpp"

namespace dtrain::data {

/// `Dataset.map(f, num_parallel_calls)`: f must be a pure function of the element (it is skipped, not
/// called, when an iterator is restored). With num_parallel_calls > 1, that many elements are mapped at
/// a time on dtrain's thread pool (so within the process' thread budget; when the pool is busy with a
/// training step, on the iterator's own thread); the order of elements is kept, and an exception f
/// throws reaches the caller of next().
template <dataset D, class F>
struct map_dataset : detail::over<D> {
  using element_type = std::invoke_result_t<const F&, typename D::element_type>;
  F f;
  std::size_t parallel = 1;

  std::int64_t cardinality() const { return this->up.cardinality(); }

  class iterator {
   public:
    iterator(const D& d, std::uint64_t pass, const F& f, std::size_t p) : up_(d.iterate(pass)), f_(f), p_(p) {}
    std::optional<element_type> next() {
      if (p_ <= 1) {
        auto e = up_.next();
        if (!e) return std::nullopt;
        return f_(std::move(*e));
      }
      if (ready_.empty()) fill();
      if (ready_.empty()) return std::nullopt;
      element_type out = std::move(ready_.front());
      ready_.pop_front();
      return out;
    }
    std::int64_t skip(std::int64_t n) {
      std::int64_t k = 0;
      while (k < n && !ready_.empty()) ready_.pop_front(), ++k;
      return k + up_.skip(n - k);
    }

   private:
    void fill() {
      std::vector<typename D::element_type> in;
      while (in.size() < p_) {
        auto e = up_.next();
        if (!e) break;
        in.push_back(std::move(*e));
      }
      std::vector<std::optional<element_type>> out(in.size());
      std::vector<std::exception_ptr> failed(in.size());
      ::dtrain::detail::parallel_for(
          in.size(), 1,
          [&](std::size_t b, std::size_t e) {
            for (std::size_t i = b; i < e; ++i) try {
                out[i].emplace(f_(std::move(in[i])));
              } catch (...) {
                failed[i] = std::current_exception();
              }
          },
          1);
      for (auto& x : failed)
        if (x) std::rethrow_exception(x);
      for (auto& o : out) ready_.push_back(std::move(*o));
    }
    detail::iter_t<D> up_;
    F f_;
    std::size_t p_;
    std::deque<element_type> ready_;
  };
  iterator iterate(std::uint64_t pass) const { return iterator(this->up, pass, f, parallel); }
};

template <class F>
struct map_stage {
  F f;
  std::size_t parallel;
  template <dataset D>
  map_dataset<D, F> apply(D d) const {
    return {{std::move(d)}, f, parallel};
  }
};
template <class F>
map_stage<F> map(F f, std::size_t num_parallel_calls = 1) {
  return {std::move(f), std::max<std::size_t>(1, num_parallel_calls)};
}

}  // namespace dtrain::data
