#pragma once
/// \file
/// Distributing a dataset of GLOBAL batches among the replicas (`strategy.distribute_dataset`), with
/// tf.data's auto-shard policies:
/// - DATA (and AUTO, which is DATA here): every worker runs the same pipeline (same seeds, so the same
///   global batches) and keeps its share of each: replica r of p takes rows [r B/p, (r+1) B/p). The
///   union of the replicas' batches at a step is exactly the global batch, so N workers train like one
///   worker with batch B. (TF keeps every p-th element instead; which replica holds which example
///   differs, the step's global batch does not.)
/// - OFF: no sharding; every worker sees every example: each global batch is cut into p per-replica
///   batches that every worker takes in turn (TF's rebatching), so all replicas train on the same data.
/// - FILE: shard by input file. It needs a pipeline built per worker, which
///   `distribute_datasets_from_function` provides (TF's way for custom sharding); asking
///   `distribute_dataset` for FILE is refused with that advice.
/// A global batch whose rows do not divide by the number of replicas is an error for training; for
/// evaluation (`even = false`) the rows are split as evenly as they go and the metrics, which are
/// aggregated by counts, come out exact.

#include <optional>

#include "dtrain/data/dataset.hpp"
#include "dtrain/data/sources.hpp"

namespace dtrain {

template <data::dataset D>
class distributed_dataset {
 public:
  using element_type = data::example;
  static_assert(std::is_same_v<typename D::element_type, data::example>,
                "distribute_dataset: the dataset must yield (x, y) batches (data::example)");

  distributed_dataset(D d, int replicas, int replica_id, bool even = true)
      : up_(std::move(d)), p_(std::size_t(replicas)), r_(std::size_t(replica_id)), policy_(up_.options().auto_shard),
        even_(even) {
    if (policy_ == data::auto_shard_policy::file)
      throw config_error(
          "distribute_dataset: auto_shard_policy::file needs a per-worker pipeline; build it with "
          "distribute_datasets_from_function(f), sharding your file list with input_context");
  }

  std::int64_t cardinality() const {
    const auto c = up_.cardinality();
    return policy_ == data::auto_shard_policy::off && c >= 0 ? c * std::int64_t(p_) : c;
  }
  data::options options() const { return up_.options(); }
  std::size_t replicas() const { return p_; }

  class iterator {
   public:
    iterator(const distributed_dataset& d, std::uint64_t pass)
        : p_(d.p_), r_(d.r_), policy_(d.policy_), even_(d.even_), up_(d.up_.iterate(pass)) {}
    std::optional<data::example> next() {
      if (policy_ != data::auto_shard_policy::off) {
        auto b = up_.next();
        if (!b) return std::nullopt;
        return slice(*b, r_);
      }
      if (piece_ == 0 || piece_ == p_) {
        held_ = up_.next();
        piece_ = 0;
      }
      if (!held_) return std::nullopt;
      return slice(*held_, piece_++);
    }
    std::int64_t skip(std::int64_t n) {
      if (policy_ != data::auto_shard_policy::off) return up_.skip(n);
      return data::detail::skip_by_next(*this, n);
    }

   private:
    data::example slice(const data::example& b, std::size_t part) const {
      const std::size_t rows = b.first.shape()[0], p = p_;
      if ((even_ && rows % p != 0) || b.second.shape()[0] != rows)
        throw value_error("distribute_dataset: a global batch of " + std::to_string(rows) + " rows does not split into " +
                          std::to_string(p) + " equal per-replica batches; make the global batch a multiple of " +
                          "num_replicas_in_sync (drop_remainder = true drops a short last batch)");
      const std::size_t from = part * rows / p, to = (part + 1) * rows / p;
      return {rows_of(b.first, from, to - from), rows_of(b.second, from, to - from)};
    }
    static tensor rows_of(const tensor& t, std::size_t from, std::size_t count) {
      extents e = extents_of(t);
      const std::size_t per = t.size() / e[0];
      e[0] = count;
      return from_span({t.data() + from * per, count * per}, e);
    }
    std::size_t p_, r_;
    data::auto_shard_policy policy_;
    bool even_;
    decltype(std::declval<const D&>().iterate(0)) up_;
    std::optional<data::example> held_;
    std::size_t piece_ = 0;
  };
  iterator iterate(std::uint64_t pass) const { return iterator(*this, pass); }

 private:
  D up_;
  std::size_t p_, r_;
  data::auto_shard_policy policy_;
  bool even_;
};

namespace detail {
template <class D>
struct is_distributed : std::false_type {};
template <class D>
struct is_distributed<distributed_dataset<D>> : std::true_type {};
}  // namespace detail

/// What `distribute_datasets_from_function` hands the user's function (TF's `tf.distribute.InputContext`).
struct input_context {
  int num_input_pipelines = 1;
  int input_pipeline_id = 0;
  int num_replicas_in_sync = 1;
  /// The per-replica batch size for a global batch size (which must divide).
  std::size_t get_per_replica_batch_size(std::size_t global_batch_size) const {
    if (global_batch_size % std::size_t(num_replicas_in_sync) != 0)
      throw value_error("input_context: the global batch size " + std::to_string(global_batch_size) +
                        " does not divide among " + std::to_string(num_replicas_in_sync) + " replicas");
    return global_batch_size / std::size_t(num_replicas_in_sync);
  }
};

/// A per-worker pipeline that already yields per-replica batches (from `distribute_datasets_from_function`).
template <data::dataset D>
struct per_replica_dataset {
  using element_type = typename D::element_type;
  D up;
  std::int64_t cardinality() const { return up.cardinality(); }
  data::options options() const { return up.options(); }
  auto iterate(std::uint64_t pass) const { return up.iterate(pass); }
};
namespace detail {
template <class D>
struct is_distributed<per_replica_dataset<D>> : std::true_type {};
}  // namespace detail

}  // namespace dtrain
