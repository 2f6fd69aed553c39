#pragma once
/// \file
/// Pipeline stages, each a dataset over its upstream, applied with `|`:
/// shuffle, repeat, batch, map, filter, take, skip, shard, prefetch, cache (memory or file), with_options;
/// and `reduce`.
/// Semantics follow tf.data; where a seed would be random in TF it defaults to `default_seed` here.

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "dtrain/core/random.hpp"
#include "dtrain/core/threads.hpp"
#include "dtrain/data/sources.hpp"

namespace dtrain::data {

namespace detail {

/// splitmix64: derives independent per-pass seeds from (seed, pass).
constexpr std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a + 0x9e3779b97f4a7c15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <class D>
using iter_t = decltype(std::declval<const D&>().iterate(0));

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

/// Base of a stage dataset: holds the upstream, forwards cardinality and options.
template <class D>
struct over {
  D up;
  data::options options() const { return up.options(); }
};

}  // namespace detail

// ---- shuffle ------------------------------------------------------------------------------------------------

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

// ---- repeat -------------------------------------------------------------------------------------------------

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

// ---- batch --------------------------------------------------------------------------------------------------

/// `Dataset.batch(batch_size, drop_remainder)`: stacks consecutive elements along a new first axis.
template <dataset D>
struct batch_dataset : detail::over<D> {
  using element_type = typename D::element_type;
  std::size_t size;
  bool drop_remainder;

  std::int64_t cardinality() const {
    const std::int64_t c = this->up.cardinality(), b = static_cast<std::int64_t>(size);
    if (c < 0) return c;
    return drop_remainder ? c / b : (c + b - 1) / b;
  }

  class iterator {
   public:
    iterator(const D& d, std::uint64_t pass, std::size_t size, bool drop)
        : up_(d.iterate(pass)), size_(size), drop_(drop) {}
    std::optional<element_type> next() {
      parts_.clear();
      while (parts_.size() < size_) {
        auto e = up_.next();
        if (!e) break;
        parts_.push_back(std::move(*e));
      }
      if (parts_.empty() || (drop_ && parts_.size() < size_)) return std::nullopt;
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
    std::vector<element_type> parts_;
  };
  iterator iterate(std::uint64_t pass) const { return iterator(this->up, pass, size, drop_remainder); }
};

struct batch_stage {
  std::size_t size;
  bool drop_remainder;
  template <dataset D>
  batch_dataset<D> apply(D d) const {
    return {{std::move(d)}, size, drop_remainder};
  }
};
inline batch_stage batch(std::size_t batch_size, bool drop_remainder = false) {
  if (batch_size == 0) throw value_error("batch: batch_size must be positive");
  return {batch_size, drop_remainder};
}

// ---- map ----------------------------------------------------------------------------------------------------

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

// ---- filter, take, skip -------------------------------------------------------------------------------------

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

// ---- shard --------------------------------------------------------------------------------------------------

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

// ---- prefetch -----------------------------------------------------------------------------------------------

/// `Dataset.prefetch(buffer_size)`: a background thread keeps up to `buffer_size` elements ready.
/// The thread starts on the first `next()`, so a restored iterator skips synchronously first.
template <dataset D>
struct prefetch_dataset : detail::over<D> {
  using element_type = typename D::element_type;
  std::size_t buffer_size;
  std::int64_t cardinality() const { return this->up.cardinality(); }

  class iterator {
   public:
    iterator(const D& d, std::uint64_t pass, std::size_t n) : s_(std::make_unique<shared>(d.iterate(pass), n)) {}
    iterator(iterator&&) noexcept = default;
    iterator& operator=(iterator&& o) noexcept {
      stop();
      s_ = std::move(o.s_);
      return *this;
    }
    ~iterator() { stop(); }

    std::optional<element_type> next() {
      if (!s_->worker.joinable()) s_->start();
      std::unique_lock lk(s_->m);
      s_->cv.wait(lk, [&] { return !s_->q.empty() || s_->done; });
      if (s_->error) std::rethrow_exception(s_->error);
      if (s_->q.empty()) return std::nullopt;
      element_type e = std::move(s_->q.front());
      s_->q.pop_front();
      s_->cv.notify_all();
      return e;
    }
    std::int64_t skip(std::int64_t n) {
      if (!s_->worker.joinable()) return s_->up.skip(n);
      return detail::skip_by_next(*this, n);
    }

   private:
    struct shared {
      shared(detail::iter_t<D> u, std::size_t n) : up(std::move(u)), cap(std::max<std::size_t>(1, n)) {}
      void start() {
        worker = std::thread([this] {
          try {
            for (;;) {
              auto e = up.next();
              std::unique_lock lk(m);
              if (!e) break;
              q.push_back(std::move(*e));
              cv.notify_all();
              cv.wait(lk, [&] { return q.size() < cap || stopping; });
              if (stopping) break;
            }
          } catch (...) {
            std::lock_guard lk(m);
            error = std::current_exception();
          }
          std::lock_guard lk(m);
          done = true;
          cv.notify_all();
        });
      }
      detail::iter_t<D> up;
      std::size_t cap;
      std::deque<element_type> q;
      std::mutex m;
      std::condition_variable cv;
      std::thread worker;
      std::exception_ptr error;
      bool done = false, stopping = false;
    };
    void stop() {
      if (!s_ || !s_->worker.joinable()) return;
      {
        std::lock_guard lk(s_->m);
        s_->stopping = true;
      }
      s_->cv.notify_all();
      s_->worker.join();
    }
    std::unique_ptr<shared> s_;
  };
  iterator iterate(std::uint64_t pass) const { return iterator(this->up, pass, buffer_size); }
};
struct prefetch_stage {
  std::size_t buffer_size;
  template <dataset D>
  prefetch_dataset<D> apply(D d) const {
    return {{std::move(d)}, buffer_size};
  }
};
/// `prefetch(n)`; `data::autotune` picks 2.
inline constexpr std::size_t autotune = 2;
inline prefetch_stage prefetch(std::size_t buffer_size = autotune) { return {buffer_size}; }

// ---- cache --------------------------------------------------------------------------------------------------

/// `Dataset.cache()` in memory: the first complete pass is recorded, later passes replay it.
template <dataset D>
struct cache_dataset : detail::over<D> {
  using element_type = typename D::element_type;
  struct store {
    std::mutex m;
    bool complete = false;
    std::vector<element_type> items;
  };
  std::shared_ptr<store> cached = std::make_shared<store>();

  std::int64_t cardinality() const { return this->up.cardinality(); }

  class iterator {
   public:
    iterator(const cache_dataset& d, std::uint64_t pass) : c_(d.cached) {
      std::lock_guard lk(c_->m);
      if (!c_->complete) up_.emplace(d.up.iterate(pass));
    }
    std::optional<element_type> next() {
      if (!up_) {
        if (i_ >= c_->items.size()) return std::nullopt;
        return c_->items[i_++];
      }
      auto e = up_->next();
      if (e)
        record_.push_back(*e);
      else if (!skipped_) {
        std::lock_guard lk(c_->m);
        if (!c_->complete) c_->items = std::move(record_), c_->complete = true;
      }
      return e;
    }
    std::int64_t skip(std::int64_t n) {
      if (!up_) {
        const auto k = std::min<std::int64_t>(n, static_cast<std::int64_t>(c_->items.size() - i_));
        i_ += static_cast<std::size_t>(k);
        return k;
      }
      skipped_ = skipped_ || n > 0;  // a partial recording is never published
      return up_->skip(n);
    }

   private:
    std::shared_ptr<store> c_;
    std::optional<detail::iter_t<D>> up_;
    std::vector<element_type> record_;
    std::size_t i_ = 0;
    bool skipped_ = false;
  };
  iterator iterate(std::uint64_t pass) const { return iterator(*this, pass); }
};
namespace detail {
inline void write_tensor(std::ostream& o, const tensor& t) {
  const std::uint32_t rank = std::uint32_t(t.dimension());
  o.write(reinterpret_cast<const char*>(&rank), 4);
  for (auto d : t.shape()) {
    const std::uint64_t v = d;
    o.write(reinterpret_cast<const char*>(&v), 8);
  }
  o.write(reinterpret_cast<const char*>(t.data()), std::streamsize(t.size() * 4));
}
inline std::optional<tensor> read_tensor(std::istream& in, const std::string& file) {
  std::uint32_t rank = 0;
  if (!in.read(reinterpret_cast<char*>(&rank), 4)) return std::nullopt;
  if (rank > 8) throw io_error(file + ": corrupt cache file (rank " + std::to_string(rank) + ")");
  extents e(rank);
  std::size_t n = 1;
  for (auto& d : e) {
    std::uint64_t v = 0;
    if (!in.read(reinterpret_cast<char*>(&v), 8) || v > (std::uint64_t{1} << 32)) throw io_error(file + ": corrupt cache file");
    d = std::size_t(v), n *= d;
  }
  if (n > (std::size_t{1} << 32)) throw io_error(file + ": corrupt cache file");
  tensor t = zeros(e);
  if (!in.read(reinterpret_cast<char*>(t.data()), std::streamsize(n * 4))) throw io_error(file + ": truncated cache file");
  return t;
}
}  // namespace detail

/// `Dataset.cache(filename)`: the first complete pass is written to `filename` (under a temporary name,
/// renamed when the pass is complete, so an interrupted pass never leaves a partial cache); every pass
/// that starts once the file exists reads it instead of the upstream. For tensor and (x, y) elements.
template <dataset D>
struct file_cache_dataset : detail::over<D> {
  using element_type = typename D::element_type;
  static_assert(std::is_same_v<element_type, tensor> || std::is_same_v<element_type, example>,
                "cache(filename): elements must be tensors or (x, y) examples");
  std::string filename;

  std::int64_t cardinality() const { return this->up.cardinality(); }

  class iterator {
   public:
    iterator(const file_cache_dataset& d, std::uint64_t pass) : file_(d.filename) {
      if (std::filesystem::exists(file_)) {
        in_.emplace(file_, std::ios::binary);
        char magic[4] = {};
        in_->read(magic, 4);
        if (std::string(magic, 4) != "DTRC") throw io_error(file_ + ": not a dtrain cache file");
      } else {
        up_.emplace(d.up.iterate(pass));
        tmp_ = file_ + ".tmp" + std::to_string(::getpid()) + "_" + std::to_string(reinterpret_cast<std::uintptr_t>(this));
        out_.emplace(tmp_, std::ios::binary | std::ios::trunc);
        if (!*out_) throw io_error(file_ + ": cannot write the cache");
        out_->write("DTRC", 4);
      }
    }
    iterator(iterator&&) = default;
    ~iterator() {
      if (out_) {
        out_.reset();
        std::error_code ec;
        std::filesystem::remove(tmp_, ec);  // an unfinished pass publishes nothing
      }
    }
    std::optional<element_type> next() {
      if (in_) {
        auto x = detail::read_tensor(*in_, file_);
        if (!x) return std::nullopt;
        if constexpr (std::is_same_v<element_type, example>) {
          auto y = detail::read_tensor(*in_, file_);
          if (!y) throw io_error(file_ + ": truncated cache file");
          return example{std::move(*x), std::move(*y)};
        } else {
          return x;
        }
      }
      auto e = up_->next();
      if (e && out_) {
        if constexpr (std::is_same_v<element_type, example>) detail::write_tensor(*out_, e->first), detail::write_tensor(*out_, e->second);
        else detail::write_tensor(*out_, *e);
      } else if (!e && out_) {
        out_->flush();
        const bool ok = bool(*out_);
        out_.reset();
        std::error_code ec;
        if (ok && !std::filesystem::exists(file_)) std::filesystem::rename(tmp_, file_, ec);
        std::filesystem::remove(tmp_, ec);
      }
      return e;
    }
    std::int64_t skip(std::int64_t n) {
      if (out_) {  // a skipped stretch is not recorded, so this pass will not publish a cache
        out_.reset();
        std::error_code ec;
        std::filesystem::remove(tmp_, ec);
      }
      if (in_) return detail::skip_by_next(*this, n);
      return up_->skip(n);
    }

   private:
    std::string file_, tmp_;
    std::optional<std::ifstream> in_;
    std::optional<std::ofstream> out_;
    std::optional<detail::iter_t<D>> up_;
  };
  iterator iterate(std::uint64_t pass) const { return iterator(*this, pass); }
};

struct cache_stage {
  template <dataset D>
  cache_dataset<D> apply(D d) const {
    return {{std::move(d)}};
  }
};
struct file_cache_stage {
  std::string filename;
  template <dataset D>
  file_cache_dataset<D> apply(D d) const {
    return {{std::move(d)}, filename};
  }
};
/// `cache()`: in memory.
inline cache_stage cache() { return {}; }
/// `cache(filename)`: in a file, reused by later passes and later runs.
inline file_cache_stage cache(std::string filename) {
  if (filename.empty()) throw value_error("cache: the file name is empty (use cache() for memory)");
  return {std::move(filename)};
}

// ---- with_options, reduce -----------------------------------------------------------------------------------

/// `Dataset.with_options(options)`: what `distribute_dataset` reads to shard.
template <dataset D>
struct options_dataset {
  using element_type = typename D::element_type;
  D up;
  data::options opt;
  std::int64_t cardinality() const { return up.cardinality(); }
  data::options options() const { return opt; }
  auto iterate(std::uint64_t pass) const { return up.iterate(pass); }
};
struct options_stage {
  data::options opt;
  template <dataset D>
  options_dataset<D> apply(D d) const {
    return {std::move(d), opt};
  }
};
inline options_stage with_options(data::options o) { return {o}; }

/// `Dataset.reduce(initial, f)`: folds one pass.
template <dataset D, class T, class F>
T reduce(const D& d, T initial, F f) {
  auto it = d.iterate(0);
  while (auto e = it.next()) initial = f(std::move(initial), std::move(*e));
  return initial;
}

}  // namespace dtrain::data
