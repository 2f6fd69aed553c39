#pragma once
/// \file
/// What every pipeline stage is built on: `detail::over`, the base that holds a stage's upstream and
/// forwards its options and FILE sharding; `detail::iter_t`, the type of an upstream's iterator;
/// `detail::mix`, which derives the per-pass seeds of the stages that draw random numbers; and the FILE
/// sharding protocol (`file_sharding`, `file_shardable`, `sharded_by_files`). Each stage's header
/// (data/shuffle.hpp, data/batch.hpp, ...) includes this one; data/stages.hpp includes them all.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>

#include "dtrain/data/dataset.hpp"

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

}  // namespace detail

/// FILE auto-sharding (`distribute_dataset`), as the stages of a pipeline serve it: worker `worker` of
/// `workers` reads only its files and yields per-replica batches. The request travels from the
/// outermost stage to the source, each stage adjusting itself and noting what it found:
/// - the source that lists files (`list_files`) keeps every `workers`-th file from `worker` on, and
///   notes how many it listed;
/// - the outermost `batch` divides its size by `workers` (when it divides) and notes the global batch;
/// - every other stage passes the request to its upstream.
struct file_sharding {
  std::size_t workers = 1, worker = 0;
  std::size_t files = 0;                    // the files the source listed
  std::optional<std::size_t> global_batch;  // the outermost batch's size (none: no batch stage)
};
/// A pipeline that can serve FILE sharding: each of its stages down to a source that lists files does.
template <class D>
concept file_shardable = requires(D& d, file_sharding& s) { d.shard_by_files(s); };

/// A copy of `d` sharded for worker r of p, with what its stages noted (`d` itself is left as it is, so
/// the caller keeps it where FILE sharding cannot apply).
template <file_shardable D>
std::pair<D, file_sharding> sharded_by_files(const D& d, std::size_t p, std::size_t r) {
  std::pair<D, file_sharding> out{d, file_sharding{}};
  out.second.workers = p, out.second.worker = r;
  out.first.shard_by_files(out.second);
  return out;
}

namespace detail {

/// Base of a stage dataset: holds the upstream, forwards its options and FILE sharding.
template <class D>
struct over {
  D up;
  data::options options() const { return up.options(); }
  void shard_by_files(file_sharding& s)
    requires file_shardable<D>
  {
    up.shard_by_files(s);
  }
};

}  // namespace detail

}  // namespace dtrain::data
