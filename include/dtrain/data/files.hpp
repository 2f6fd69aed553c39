#pragma once
/// \file
/// File-based pipelines: `list_files(pattern)` (tf.data.Dataset.list_files: the matching names, sorted,
/// optionally shuffled per pass) and the `interleave(f, cycle_length, block_length)` stage that opens a
/// dataset per file and takes `block_length` elements from each of `cycle_length` open ones in turn.
/// Sharding the file list before interleave (`list_files(...) | shard(n, i) | interleave(...)`) is what
/// FILE auto-sharding means: each worker reads its own files.

#include <glob.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/core/random.hpp"
#include "dtrain/data/dataset.hpp"

namespace dtrain::data {

/// The file names matching a glob pattern.
class file_list {
 public:
  using element_type = std::string;

  file_list(std::string pattern, bool shuffle, std::uint64_t seed) : shuffle_(shuffle), seed_(seed) {
    glob_t g{};
    const int r = ::glob(pattern.c_str(), 0, nullptr, &g);
    if (r == 0)
      for (std::size_t i = 0; i < g.gl_pathc; ++i) names_->push_back(g.gl_pathv[i]);
    ::globfree(&g);
    if (names_->empty()) throw io_error("list_files: no file matches the pattern \"" + pattern + "\"");
    std::sort(names_->begin(), names_->end());
  }
  std::int64_t cardinality() const { return std::int64_t(names_->size()); }
  data::options options() const { return {}; }
  const std::vector<std::string>& names() const { return *names_; }

  class iterator {
   public:
    iterator(const file_list& l, std::uint64_t pass) : names_(l.names_), order_(l.names_->size()) {
      for (std::size_t i = 0; i < order_.size(); ++i) order_[i] = i;
      if (l.shuffle_) {
        rng r(l.seed_ ^ (0x9e3779b97f4a7c15ull * (pass + 1)));
        for (std::size_t i = order_.size(); i > 1; --i) std::swap(order_[i - 1], order_[r.below(i)]);
      }
    }
    std::optional<std::string> next() {
      if (i_ >= order_.size()) return std::nullopt;
      return (*names_)[order_[i_++]];
    }
    std::int64_t skip(std::int64_t n) {
      const auto k = std::min<std::int64_t>(n, std::int64_t(order_.size() - i_));
      i_ += std::size_t(k);
      return k;
    }

   private:
    std::shared_ptr<std::vector<std::string>> names_;
    std::vector<std::size_t> order_;
    std::size_t i_ = 0;
  };
  iterator iterate(std::uint64_t pass) const { return iterator(*this, pass); }

 private:
  std::shared_ptr<std::vector<std::string>> names_ = std::make_shared<std::vector<std::string>>();
  bool shuffle_;
  std::uint64_t seed_;
};

/// `Dataset.list_files(pattern, shuffle, seed)`; sorted unless shuffled (then reshuffled every pass).
inline file_list list_files(const std::string& pattern, bool shuffle = false, std::uint64_t seed = default_seed) {
  return file_list(pattern, shuffle, seed);
}

/// `Dataset.interleave(f, cycle_length, block_length)`.
template <dataset D, class F>
struct interleave_dataset {
  using inner_type = std::invoke_result_t<const F&, typename D::element_type>;
  using element_type = typename inner_type::element_type;
  D up;
  F f;
  std::size_t cycle_length, block_length;

  std::int64_t cardinality() const { return up.cardinality() == infinite ? infinite : unknown; }
  data::options options() const { return up.options(); }

  class iterator {
   public:
    iterator(const interleave_dataset& d, std::uint64_t pass)
        : f_(d.f), cycle_(d.cycle_length), block_(d.block_length), up_(d.up.iterate(pass)), pass_(pass) {}
    std::optional<element_type> next() {
      for (;;) {
        while (open_.size() < cycle_ && !up_done_) {  // fill the cycle
          auto name = up_.next();
          if (!name) {
            up_done_ = true;
            break;
          }
          open_.push_back(open(*name));
        }
        if (open_.empty()) return std::nullopt;
        if (at_ >= open_.size()) at_ = 0;
        if (auto e = open_[at_].next()) {
          if (++taken_ >= block_) taken_ = 0, ++at_;
          return e;
        }
        open_.erase(open_.begin() + std::ptrdiff_t(at_));  // exhausted: the next file takes its place
        taken_ = 0;
        if (!up_done_ && open_.size() < cycle_) {
          if (auto name = up_.next())
            open_.insert(open_.begin() + std::ptrdiff_t(at_), open(*name));
          else
            up_done_ = true;
        }
      }
    }
    std::int64_t skip(std::int64_t n) { return detail::skip_by_next(*this, n); }

   private:
    using inner_iterator = decltype(std::declval<const inner_type&>().iterate(0));
    /// A file's dataset and its pass, kept together (the iterator may refer to its dataset).
    struct opened {
      std::unique_ptr<inner_type> ds;
      inner_iterator it;
      std::optional<element_type> next() { return it.next(); }
    };
    opened open(const typename D::element_type& name) {
      auto ds = std::make_unique<inner_type>(f_(name));
      auto it = ds->iterate(pass_);
      return {std::move(ds), std::move(it)};
    }
    F f_;
    std::size_t cycle_, block_;
    decltype(std::declval<const D&>().iterate(0)) up_;
    std::uint64_t pass_;
    std::deque<opened> open_;
    std::size_t at_ = 0, taken_ = 0;
    bool up_done_ = false;
  };
  iterator iterate(std::uint64_t pass) const { return iterator(*this, pass); }
};

template <class F>
struct interleave_stage {
  F f;
  std::size_t cycle_length, block_length;
  template <dataset D>
  interleave_dataset<D, F> apply(D d) const {
    return {std::move(d), f, cycle_length, block_length};
  }
};
template <class F>
interleave_stage<F> interleave(F f, std::size_t cycle_length = 2, std::size_t block_length = 1) {
  if (cycle_length == 0 || block_length == 0) throw value_error("interleave: cycle_length and block_length must be positive");
  return {std::move(f), cycle_length, block_length};
}

}  // namespace dtrain::data
