#pragma once
/// \file
/// File-based pipelines: `list_files(pattern)` (tf.data.Dataset.list_files: the matching names, sorted,
/// optionally shuffled per pass) and the `interleave(f, cycle_length, block_length)` stage that opens a
/// dataset per file and takes `block_length` elements from each of `cycle_length` open ones in turn.
/// Sharding the file list before interleave (`list_files(...) | shard(n, i) | interleave(...)`) is what
/// FILE auto-sharding means: each worker opens only its own files.
///
/// Both are deterministic given the pass, like every stage, so an iterator over them resumes exactly:
/// list_files skips without work; interleave must open the files to know where a position falls, but
/// then skips inside each file with that file's dataset's own skip.

#include <glob.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "dtrain/core/random.hpp"
#include "dtrain/data/dataset.hpp"
#include "dtrain/data/stage_base.hpp"

namespace dtrain::data {

/// The file names matching a glob pattern (a dataset of std::string).
class file_list {
 public:
  using element_type = std::string;

  file_list(std::string pattern, bool shuffle, std::uint64_t seed)
      : pattern_(std::move(pattern)), shuffle_(shuffle), seed_(seed) {
    glob_t g{};
    const int r = ::glob(pattern_.c_str(), 0, nullptr, &g);
    std::vector<std::string> names;
    if (r == 0)
      for (std::size_t i = 0; i < g.gl_pathc; ++i) names.emplace_back(g.gl_pathv[i]);
    const int err = errno;
    ::globfree(&g);
    if (r == GLOB_NOMATCH || (r == 0 && names.empty()))
      throw io_error("list_files: no file matches the pattern \"" + pattern_ + "\"");
    if (r == GLOB_ABORTED)
      throw io_error("list_files: cannot read a folder while matching \"" + pattern_ + "\" (" + std::strerror(err) + ")");
    if (r != 0) throw io_error("list_files: glob failed for \"" + pattern_ + "\" (out of memory)");
    // Byte order, not the locale's collation glob(3) uses: every worker must see the same list.
    std::sort(names.begin(), names.end());
    names_ = std::make_shared<const std::vector<std::string>>(std::move(names));
  }
  std::int64_t cardinality() const { return std::int64_t(names_->size()); }
  data::options options() const { return {}; }
  /// The matching names, sorted (the order of a pass when not shuffled).
  const std::vector<std::string>& names() const { return *names_; }
  /// FILE auto-sharding: keeps every `s.workers`-th name from `s.worker` on.
  void shard_by_files(file_sharding& s) {
    s.files = names_->size();
    auto kept = std::make_shared<std::vector<std::string>>();
    for (std::size_t i = s.worker; i < names_->size(); i += s.workers) kept->push_back((*names_)[i]);
    names_ = std::move(kept);
  }
  const std::string& pattern() const { return pattern_; }

  class iterator {
   public:
    iterator(const file_list& l, std::uint64_t pass) : names_(l.names_), order_(l.names_->size()) {
      for (std::size_t i = 0; i < order_.size(); ++i) order_[i] = i;
      if (l.shuffle_) {  // Fisher-Yates with a per-pass seed: reshuffled every pass, reproducibly
        rng r(detail::mix(l.seed_, pass));
        for (std::size_t i = order_.size(); i > 1; --i) std::swap(order_[i - 1], order_[r.below(i)]);
      }
    }
    std::optional<std::string> next() {
      if (i_ >= order_.size()) return std::nullopt;
      return (*names_)[order_[i_++]];
    }
    std::int64_t skip(std::int64_t n) {
      const auto k = std::clamp<std::int64_t>(n, 0, std::int64_t(order_.size() - i_));
      i_ += std::size_t(k);
      return k;
    }

   private:
    std::shared_ptr<const std::vector<std::string>> names_;
    std::vector<std::size_t> order_;
    std::size_t i_ = 0;
  };
  iterator iterate(std::uint64_t pass) const { return iterator(*this, pass); }

 private:
  std::string pattern_;
  std::shared_ptr<const std::vector<std::string>> names_;
  bool shuffle_;
  std::uint64_t seed_;
};

/// `Dataset.list_files(pattern, shuffle, seed)`: sorted unless shuffled, then reshuffled every pass.
/// Unlike TF, `shuffle` defaults to false and the seed to `default_seed`, so runs are reproducible.
inline file_list list_files(const std::string& pattern, bool shuffle = false, std::uint64_t seed = default_seed) {
  return file_list(pattern, shuffle, seed);
}

/// `Dataset.interleave(f, cycle_length, block_length)`, in TF's order: a cycle of `cycle_length` slots,
/// visited round robin, each yielding up to `block_length` elements per visit. A slot that is empty when
/// visited opens the next upstream element's dataset `f(e)`; a dataset that ends frees its slot and the
/// turn passes to the next slot (the freed one refills when the cycle comes back to it).
template <dataset D, class F>
struct interleave_dataset {
  using inner_type = std::remove_cvref_t<std::invoke_result_t<const F&, const typename D::element_type&>>;
  static_assert(dataset<inner_type>, "interleave: f must map an upstream element to a dataset");
  using element_type = typename inner_type::element_type;
  D up;
  F f;
  std::size_t cycle_length, block_length;

  std::int64_t cardinality() const {
    const auto c = up.cardinality();
    return c == 0 ? 0 : c == infinite ? infinite : unknown;
  }
  data::options options() const { return up.options(); }
  void shard_by_files(file_sharding& s)
    requires file_shardable<D>
  {
    up.shard_by_files(s);
  }

  class iterator {
   public:
    iterator(const interleave_dataset& d, std::uint64_t pass)
        : f_(d.f), block_(d.block_length), up_(d.up.iterate(pass)), pass_(pass), slots_(d.cycle_length) {}

    std::optional<element_type> next() {
      while (!up_done_ || open_ > 0) {
        auto& slot = slots_[at_];
        if (!slot) {
          visit_empty_slot();
        } else if (auto e = slot->it.next()) {
          if (++taken_ == block_) advance();
          return e;
        } else {
          close_slot();
        }
      }
      return std::nullopt;
    }
    /// Skips as `n` calls of next() would, but hands each slot's share to its dataset's own skip (cheap
    /// for slices and files), as TF's SkipInternal does.
    std::int64_t skip(std::int64_t n) {
      std::int64_t k = 0;
      while (k < n && (!up_done_ || open_ > 0)) {
        auto& slot = slots_[at_];
        if (!slot) {
          visit_empty_slot();
          continue;
        }
        const auto want = std::min<std::int64_t>(n - k, std::int64_t(block_ - taken_));
        const auto got = std::max<std::int64_t>(0, slot->it.skip(want));
        k += got;
        taken_ += std::size_t(got);
        if (got < want)
          close_slot();  // it ended inside the block
        else if (taken_ == block_)
          advance();
      }
      return k;
    }

   private:
    /// A file's dataset and its pass, kept together on the heap: the pass may refer to its dataset, and
    /// neither ever moves.
    struct opened {
      inner_type ds;
      detail::iter_t<inner_type> it;
      opened(inner_type d, std::uint64_t pass) : ds(std::move(d)), it(ds.iterate(pass)) {}
    };
    void advance() {
      taken_ = 0;
      at_ = (at_ + 1) % slots_.size();
    }
    /// An empty slot opens the next upstream element's dataset, or is passed over once upstream ended.
    void visit_empty_slot() {
      if (up_done_) return advance();
      if (auto in = up_.next()) {
        slots_[at_] = std::make_unique<opened>(std::invoke(f_, *in), pass_);
        ++open_;
      } else {
        up_done_ = true;
      }
    }
    /// The slot's dataset ended: free the slot, the turn passes on.
    void close_slot() {
      slots_[at_].reset();
      --open_;
      advance();
    }
    F f_;
    std::size_t block_;
    detail::iter_t<D> up_;
    std::uint64_t pass_;
    std::vector<std::unique_ptr<opened>> slots_;
    std::size_t at_ = 0, taken_ = 0, open_ = 0;
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

/// `interleave(f, cycle_length, block_length)`. TF's default cycle_length is the number of cores; a
/// fixed default keeps the element order the same on every machine.
template <class F>
interleave_stage<F> interleave(F f, std::size_t cycle_length = 2, std::size_t block_length = 1) {
  if (cycle_length == 0 || block_length == 0)
    throw value_error("interleave: cycle_length and block_length must be positive, got " + std::to_string(cycle_length) +
                      " and " + std::to_string(block_length));
  return {std::move(f), cycle_length, block_length};
}

}  // namespace dtrain::data
