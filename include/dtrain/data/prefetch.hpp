#pragma once
/// \file
/// The `prefetch(buffer_size)` stage: tf.data's `Dataset.prefetch`, a background thread that keeps
/// elements ready (`data::autotune` picks the buffer size).

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "dtrain/data/dataset.hpp"
#include "dtrain/data/stage_base.hpp"

namespace dtrain::data {

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

}  // namespace dtrain::data
