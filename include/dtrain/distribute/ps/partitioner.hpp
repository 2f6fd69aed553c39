#pragma once
/// \file
/// Where a parameter server job keeps each variable: TF's variable partitioners
/// (`tf.distribute.experimental.partitioners`) and the round-robin placement of the shards on the ps
/// tasks.
///
/// A partitioner (`variable_partitioner`) says how many shards a variable of a given shape splits into
/// along its first axis; TF's three are here with their arithmetic. A shard of a row-major variable cut
/// along axis 0 is a contiguous range of the model's flat parameter buffer, so every ps task holds a
/// list of ranges (`region`s) of that buffer. Shard k of a variable of n rows cut into p gets
/// n / p rows, and one more when k < n % p (TF's rule); shards go to the ps tasks in turn, counting on
/// from the previous variable's last (TF's round robin), so without a partitioner whole variables
/// alternate between the ps tasks.

#include <algorithm>
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "dtrain/core/error.hpp"

namespace dtrain {

/// How many shards a variable of `shape` (float elements of `element_bytes` bytes) splits into along
/// its first axis: at least 1 and at most shape[0]. Empty: every variable whole.
using variable_partitioner = std::function<std::size_t(std::span<const std::size_t> shape, std::size_t element_bytes)>;

namespace detail {
inline std::size_t rows_of(std::span<const std::size_t> shape) { return shape.empty() ? 1 : shape[0]; }
inline std::size_t bytes_of(std::span<const std::size_t> shape, std::size_t element_bytes) {
  std::size_t n = element_bytes;
  for (std::size_t d : shape) n *= d;
  return n;
}
}  // namespace detail

/// TF's `FixedShardsPartitioner(num_shards)`: `num_shards` shards, or one per row of a smaller variable.
struct fixed_shards_partitioner {
  std::size_t num_shards = 1;
  std::size_t operator()(std::span<const std::size_t> shape, std::size_t) const {
    if (num_shards < 1) throw value_error("fixed_shards_partitioner: num_shards must be at least 1");
    return std::max<std::size_t>(1, std::min(num_shards, detail::rows_of(shape)));
  }
};

/// TF's `MinSizePartitioner(min_shard_bytes=256 KiB, max_shards=1)`: as many shards as keep each at
/// least `min_shard_bytes` (ceil(bytes / min_shard_bytes)), at most `max_shards` and one per row.
struct min_size_partitioner {
  std::size_t min_shard_bytes = std::size_t{256} << 10;
  std::size_t max_shards = 1;
  std::size_t operator()(std::span<const std::size_t> shape, std::size_t element_bytes) const {
    if (min_shard_bytes < 1 || max_shards < 1)
      throw value_error("min_size_partitioner: min_shard_bytes and max_shards must be at least 1");
    const std::size_t bytes = detail::bytes_of(shape, element_bytes);
    const std::size_t wanted = (bytes + min_shard_bytes - 1) / min_shard_bytes;
    return std::max<std::size_t>(1, std::min({detail::rows_of(shape), max_shards, wanted}));
  }
};

/// TF's `MaxSizePartitioner(max_shard_bytes, max_shards=None)`: shards of whole rows, each at most
/// `max_shard_bytes` (a row larger than that is a shard of its own), at most `max_shards` (0: no limit).
struct max_size_partitioner {
  std::size_t max_shard_bytes = 0;
  std::size_t max_shards = 0;
  std::size_t operator()(std::span<const std::size_t> shape, std::size_t element_bytes) const {
    if (max_shard_bytes < 1) throw value_error("max_size_partitioner: max_shard_bytes must be at least 1");
    const std::size_t rows = detail::rows_of(shape);
    if (rows == 0) return 1;
    const std::size_t row_bytes = detail::bytes_of(shape, element_bytes) / rows;
    const std::size_t rows_per_shard = std::max<std::size_t>(1, row_bytes ? max_shard_bytes / row_bytes : rows);
    std::size_t shards = (rows + rows_per_shard - 1) / rows_per_shard;
    if (max_shards > 0) shards = std::min(shards, max_shards);
    return std::max<std::size_t>(1, shards);
  }
};

namespace ps {

/// A variable as placement sees it: its name ("dense/kernel"), shape and range of the parameter buffer.
struct variable {
  std::string name;
  std::vector<std::size_t> shape;
  std::size_t offset = 0;
  std::size_t size = 0;
};

/// A range of the parameter buffer a ps task holds: shard `shard` of `variable`.
struct region {
  std::string variable;
  std::size_t shard = 0, offset = 0, size = 0;
};

/// Where every value of the parameter buffer lives: `tasks[j]` lists ps task j's regions, in the order
/// the task stores them (one contiguous buffer per task).
struct placement {
  std::vector<std::vector<region>> tasks;
  /// How many floats ps task j holds.
  std::size_t values_on(std::size_t j) const {
    std::size_t n = 0;
    for (const region& r : tasks.at(j)) n += r.size;
    return n;
  }
};

/// Cuts `variables` by `partitioner` (empty: none) and deals the shards to `num_ps` tasks in turn.
inline placement place(const std::vector<variable>& variables, std::size_t num_ps, const variable_partitioner& partitioner) {
  if (num_ps < 1) throw config_error("parameter_server_strategy: the cluster has no ps task to hold the variables");
  placement p;
  p.tasks.resize(num_ps);
  std::size_t next = 0;
  for (const variable& v : variables) {
    const std::size_t rows = detail::rows_of(v.shape);
    std::size_t shards = partitioner ? partitioner(v.shape, sizeof(float)) : 1;
    if (shards < 1 || shards > std::max<std::size_t>(1, rows))
      throw value_error("variable_partitioner: " + std::to_string(shards) + " shards for " + v.name + ", whose first axis has " +
                        std::to_string(rows) + " rows (a partitioner gives 1 to that many)");
    const std::size_t row_size = rows ? v.size / rows : v.size;
    std::size_t offset = v.offset;
    for (std::size_t k = 0; k < shards; ++k) {
      const std::size_t n = (rows / shards + (k < rows % shards ? 1 : 0)) * row_size;
      p.tasks[next].push_back({v.name, k, offset, n});
      offset += n;
      next = (next + 1) % num_ps;
    }
  }
  return p;
}

}  // namespace ps
}  // namespace dtrain
