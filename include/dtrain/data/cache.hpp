#pragma once
/// \file
/// The `cache()` and `cache(filename)` stages: tf.data's `Dataset.cache`, the first complete pass kept in
/// memory or in a file that later passes (and later runs) replay. The file's binary format (`DTRC`, then
/// per tensor its rank, its extents and its floats) is private to this header (`detail::write_tensor`,
/// `detail::read_tensor`).

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <istream>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/core/tensor.hpp"
#include "dtrain/data/dataset.hpp"
#include "dtrain/data/sources.hpp"
#include "dtrain/data/stage_base.hpp"

namespace dtrain::data {

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

}  // namespace dtrain::data
