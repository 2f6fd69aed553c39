#pragma once
/// \file
/// Distributing a dataset of GLOBAL batches among the replicas (`strategy.distribute_dataset`), with
/// tf.data's auto-shard policies:
/// - DATA: every worker runs the same pipeline (same seeds, so the same global batches) and keeps its
///   share of each: replica r of p takes rows [r B/p, (r+1) B/p). The union of the replicas' batches
///   at a step is exactly the global batch, so N workers train like one worker with batch B. (TF keeps
///   every p-th element instead; which replica holds which example differs, the step's global batch
///   does not.)
/// - FILE: each worker reads only its files: the pipeline's `list_files` keeps every p-th file from
///   the worker's index on, and its outermost `batch` takes the per-replica size (global / p). The
///   workers' pipelines then differ in length, so they agree at every batch as described below.
/// - AUTO: FILE when the pipeline reads from `list_files` and FILE can apply (at least p files, a
///   global batch that divides by p), else DATA, with one warning when a file-based pipeline falls back
///   (TF's rule).
/// - OFF: no sharding; every worker sees every example: each global batch is cut into p per-replica
///   batches that every worker takes in turn (TF's rebatching), so all replicas train on the same data.
/// A global batch whose rows do not divide by the number of replicas (the short last batch of an
/// epoch) is split as evenly as it goes, so a replica may get fewer rows or none; the iterator tells
/// the global batch's rows (`global_rows()`), by which training divides the summed loss, as TF does.
///
/// `per_replica_dataset` (from `distribute_datasets_from_function`) holds this worker's own pipeline,
/// which may yield more or fewer batches than the other workers'. Its iterator makes the workers agree:
/// at each batch a sum over the workers tells whether any worker still has data and the global rows (one
/// small all-reduce, or, in `fit`, a few floats riding with the previous step's gradients); a
/// worker that ran out yields empty batches (0 rows) until every worker has, and then all end at the
/// same step, so no worker ever issues a collective the others do not (TF's distributed iterator and
/// PyTorch's `Join` behave the same way).

#include <array>
#include <cstdio>
#include <optional>
#include <tuple>
#include <utility>

#include "dtrain/data/dataset.hpp"
#include "dtrain/data/sources.hpp"
#include "dtrain/data/stage_base.hpp"
#include "dtrain/distribute/replica_context.hpp"

namespace dtrain {

namespace detail {
/// The features of a dataset element: x of an (x, y) batch, or the batch itself (a tensor, or one per
/// input of a model).
template <class E>
const auto& features(const E& e) {
  if constexpr (data::is_supervised_v<E>) return std::get<0>(e);
  else return e;
}
/// A supervised element's components (x, y[, sample_weight]) mapped by `f` into a new element.
template <class E, class F>
E map_components(const E& e, F f) {
  return [&]<std::size_t... K>(std::index_sequence<K...>) { return E{f(std::get<K>(e), K)...}; }(
      std::make_index_sequence<std::tuple_size_v<E>>{});
}
/// Rows of a tensor or of a list of them (its first's; 0 for an empty element).
inline std::size_t rows_in(const tensor& t) { return t.dimension() ? t.shape()[0] : 0; }
inline std::size_t rows_in(const std::vector<tensor>& ts) { return ts.empty() ? 0 : rows_in(ts.front()); }
/// Rows of a batch (0 for the empty element a worker whose pipeline ran out gets).
template <class E>
std::size_t batch_rows(const E& e) {
  return rows_in(features(e));
}
/// The extents of a tensor, or of each of a list.
inline std::vector<extents> shapes_of(const tensor& t) { return {extents_of(t)}; }
inline std::vector<extents> shapes_of(const std::vector<tensor>& ts) {
  std::vector<extents> e;
  for (const tensor& t : ts) e.push_back(extents_of(t));
  return e;
}
/// Keeps workers whose pipelines differ in length in step (see the file comment): for each element, one
/// all-reduce of (has data, rows) over `rc`; a worker that ran out gets an empty element while any
/// other has data, and the pass ends for all when none has. Without `rc` elements pass through.
/// `pull()` reads this worker's next element.
///
/// A caller that already sums a few values over the workers at every step (`fit`, with the gradients)
/// can carry the agreement there instead: `ahead(pull)` reads the next element early and returns this
/// worker's part of the agreement on it, `agreed(sums)` takes the workers' sums, and the `next` that
/// yields that element then makes no collective of its own.
template <class E>
class step_agreement {
 public:
  using part = std::array<float, 2>;  // (has data, rows)
  explicit step_agreement(replica_context* rc) : rc_(rc) {}
  template <class Pull>
  std::optional<E> next(Pull pull) {
    std::optional<E> e = peeked_ ? std::move(*peeked_) : read(pull);
    peeked_.reset();
    done_ = !e;
    if (e && shapes_[0].empty()) remember(*e);  // past the batch axis, every batch has the same shape
    if (!rc_) {
      global_rows_ = e ? batch_rows(*e) : 0;
      return e;
    }
    part f = part_of(e);  // summed: workers with data, global rows
    if (agreed_) f = *std::exchange(agreed_, std::nullopt);
    else rc_->all_reduce(std::span<float>(f), reduce_op::sum);
    if (f[0] == 0.0f) return std::nullopt;  // every worker is out: the pass ends on all
    global_rows_ = std::size_t(f[1]);
    if (e) return e;
    return empty();  // this worker is out, another is not: an empty element keeps it in step
  }
  /// Reads the next element now; this worker's part of the agreement on it, for the caller to sum.
  template <class Pull>
  part ahead(Pull pull) {
    if (!peeked_) peeked_.emplace(read(pull));
    return part_of(*peeked_);
  }
  /// The workers' sums of `ahead`'s parts: the next `next` agrees without a collective.
  void agreed(part sums) { agreed_ = sums; }
  /// Skips `n` elements (`skip_up(n)` skips this worker's own and says how many it got): the position
  /// the workers agree on (the furthest).
  template <class SkipUp>
  std::int64_t skip(SkipUp skip_up, std::int64_t n) {
    const std::int64_t got = done_ ? 0 : skip_up(n);
    done_ = got < n;
    if (!rc_) return got;
    float f = float(got);
    rc_->all_reduce(std::span<float>(&f, 1), reduce_op::max);
    return std::int64_t(f);
  }
  std::size_t global_rows() const { return global_rows_; }

 private:
  void remember(const E& e) {
    if constexpr (data::is_supervised_v<E>)
      [&]<std::size_t... K>(std::index_sequence<K...>) {
        ((shapes_[K] = shapes_of(std::get<K>(e))), ...);
      }(std::make_index_sequence<std::tuple_size_v<E>>{});
    else shapes_[0] = shapes_of(e);
  }
  template <class Pull>
  std::optional<E> read(Pull& pull) {
    if (done_) return std::nullopt;
    return pull();
  }
  static part part_of(const std::optional<E>& e) { return {e ? 1.0f : 0.0f, e ? float(batch_rows(*e)) : 0.0f}; }
  static tensor no_rows(extents e) {
    if (e.empty()) e.push_back(0);
    e[0] = 0;
    return zeros(e);
  }
  template <class T>
  static T no_rows(const std::vector<extents>& es) {
    if constexpr (std::is_same_v<T, tensor>) {
      return no_rows(es.front());
    } else {
      std::vector<tensor> ts;
      for (const extents& e : es) ts.push_back(no_rows(e));
      return ts;
    }
  }
  E empty() const {
    if constexpr (data::is_supervised_v<E>)
      return [&]<std::size_t... K>(std::index_sequence<K...>) {
        return E{no_rows<std::tuple_element_t<K, E>>(shapes_[K])...};
      }(std::make_index_sequence<std::tuple_size_v<E>>{});
    else return no_rows<E>(shapes_[0]);
  }
  replica_context* rc_;
  bool done_ = false;
  std::size_t global_rows_ = 0;
  std::optional<std::optional<E>> peeked_;  // the element `ahead` read
  std::optional<part> agreed_;              // the sums of its parts
  std::array<std::vector<extents>, 3> shapes_;  // of each component (x, y, sample_weight)
};

}  // namespace detail

template <data::dataset D>
class distributed_dataset {
 public:
  using element_type = typename D::element_type;
  static_assert(data::is_supervised_v<element_type> || std::is_same_v<element_type, tensor> ||
                    std::is_same_v<element_type, std::vector<tensor>>,
                "distribute_dataset: the dataset must yield batches: (x, y) (data::example or data::multi_example), "
                "(x, y, sample_weight) (data::weighted_example or data::weighted_multi_example) "
                "or x (a tensor or std::vector<tensor>)");

  /// `agree`: the replica context FILE sharding keeps the workers in step with (null: FILE cannot apply).
  distributed_dataset(D d, int replicas, int replica_id, replica_context* agree = nullptr)
      : p_(std::size_t(replicas)), r_(std::size_t(replica_id)), policy_(d.options().auto_shard), agree_(agree),
        up_(policy_ == data::auto_shard_policy::auto_ || policy_ == data::auto_shard_policy::file
                ? shard_files(std::move(d))
                : std::move(d)) {}

  std::int64_t cardinality() const {
    const auto c = up_.cardinality();
    if (policy_ == data::auto_shard_policy::file) return c >= 0 ? data::unknown : c;  // ends with the longest
    return policy_ == data::auto_shard_policy::off && c >= 0 ? c * std::int64_t(p_) : c;
  }
  /// The policy in effect: DATA, FILE or OFF (AUTO resolved).
  data::auto_shard_policy policy() const { return policy_; }
  data::options options() const { return up_.options(); }
  std::size_t replicas() const { return p_; }

  class iterator {
   public:
    iterator(const distributed_dataset& d, std::uint64_t pass)
        : p_(d.p_), r_(d.r_), policy_(d.policy_), up_(d.up_.iterate(pass)), agree_(d.agree_) {}
    std::optional<element_type> next() {
      if (policy_ == data::auto_shard_policy::file) {  // this worker's own files, already per replica
        auto e = agree_.next([&] { return up_.next(); });
        global_rows_ = agree_.global_rows();
        return e;
      }
      if (policy_ != data::auto_shard_policy::off) {
        auto b = up_.next();
        if (!b) return std::nullopt;
        global_rows_ = detail::batch_rows(*b);
        return slice(*b, r_);
      }
      if (piece_ == 0 || piece_ == p_) {
        held_ = up_.next();
        piece_ = 0;
      }
      if (!held_) return std::nullopt;
      auto piece = slice(*held_, piece_++);
      global_rows_ = detail::batch_rows(piece) * p_;  // every replica takes this same piece
      return piece;
    }
    /// Rows of the global batch the last element is this replica's share of.
    std::size_t global_rows() const { return global_rows_; }
    /// FILE sharding: the agreement on the next element, to be summed by the caller (see
    /// step_agreement); no value where the workers need none.
    std::optional<typename detail::step_agreement<element_type>::part> ahead() {
      if (policy_ != data::auto_shard_policy::file) return std::nullopt;
      return agree_.ahead([&] { return up_.next(); });
    }
    void agreed(typename detail::step_agreement<element_type>::part sums) { agree_.agreed(sums); }
    std::int64_t skip(std::int64_t n) {
      if (policy_ == data::auto_shard_policy::file) return agree_.skip([&](std::int64_t k) { return up_.skip(k); }, n);
      if (policy_ != data::auto_shard_policy::off) return up_.skip(n);
      return data::detail::skip_by_next(*this, n);
    }

   private:
    element_type slice(const element_type& b, std::size_t part) const {
      const std::size_t rows = detail::batch_rows(b), from = part * rows / p_, to = (part + 1) * rows / p_;
      if constexpr (data::is_supervised_v<element_type>) {
        return detail::map_components(b, [&](const auto& c, std::size_t k) {
          for (const extents& e : detail::shapes_of(c))
            if (e.empty() || e[0] != rows)
              throw shape_error("distribute_dataset: a batch's x has " + std::to_string(rows) + " rows but its " +
                                (k == 0 ? "x" : k == 1 ? "y" : "sample_weight") + " has shape " + shape_str(e));
          return detail::rows_of(c, from, to);
        });
      } else {
        return detail::rows_of(b, from, to);
      }
    }
    std::size_t p_, r_;
    data::auto_shard_policy policy_;
    decltype(std::declval<const D&>().iterate(0)) up_;
    detail::step_agreement<element_type> agree_;
    std::optional<element_type> held_;
    std::size_t piece_ = 0, global_rows_ = 0;
  };
  iterator iterate(std::uint64_t pass) const { return iterator(*this, pass); }

 private:
  /// AUTO and FILE: the pipeline sharded by files (its stages' own protocol, data/stage_base.hpp) when FILE
  /// can apply, else AUTO falls back to DATA (with a warning when the pipeline reads files) and FILE is
  /// refused.
  D shard_files(D d) {
    const bool asked = policy_ == data::auto_shard_policy::file;
    policy_ = data::auto_shard_policy::data;
    if constexpr (!data::file_shardable<D>) {
      if (asked) throw config_error("distribute_dataset: auto_shard_policy::file cannot apply: the pipeline does not "
                                    "read from list_files (for other sources, build a per-worker pipeline with "
                                    "distribute_datasets_from_function)");
    } else if (p_ > 1) {
      auto [mine, found] = data::sharded_by_files(d, p_, r_);
      const std::size_t n = found.files;
      std::string why;
      if (n < p_) why = "it lists " + std::to_string(n) + (n == 1 ? " file" : " files") + " for " + std::to_string(p_) + " workers";
      else if (!found.global_batch) why = "it has no batch stage after list_files to cut into per-replica batches";
      else if (*found.global_batch % p_ != 0)
        why = "its global batch of " + std::to_string(*found.global_batch) + " does not divide among " + std::to_string(p_) + " workers";
      else if (!agree_) why = "it was not made by a strategy (strategy.distribute_dataset), which keeps workers in step";
      if (why.empty()) {
        policy_ = data::auto_shard_policy::file;
        return std::move(mine);
      }
      if (asked) throw config_error("distribute_dataset: auto_shard_policy::file cannot apply: " + why);
      std::fprintf(stderr, "WARNING: distribute_dataset: AUTO sharding by file is not possible (%s); sharding by "
                   "data instead: every worker reads every file and keeps its share of each batch.\n", why.c_str());
    }
    return d;
  }

  std::size_t p_, r_;
  data::auto_shard_policy policy_;
  replica_context* agree_;
  D up_;  // (last: built from the members above)
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

/// A per-worker pipeline that already yields per-replica batches (from `distribute_datasets_from_function`);
/// with a replica context, its iterator makes the workers agree on every batch (see the file comment).
template <data::dataset D>
struct per_replica_dataset {
  using element_type = typename D::element_type;
  D up;
  replica_context* agree = nullptr;  // null: one worker, nothing to agree on
  std::int64_t cardinality() const {  // the workers' passes end together, at the longest one
    const std::int64_t c = up.cardinality();
    return agree && c >= 0 ? data::unknown : c;
  }
  data::options options() const { return up.options(); }

  class iterator {
   public:
    iterator(const per_replica_dataset& d, std::uint64_t pass) : up_(d.up.iterate(pass)), agree_(d.agree) {}
    std::optional<element_type> next() { return agree_.next([&] { return up_.next(); }); }
    std::int64_t skip(std::int64_t n) { return agree_.skip([&](std::int64_t k) { return up_.skip(k); }, n); }
    /// Rows of the global batch the last element is this worker's share of (summed over the workers).
    std::size_t global_rows() const { return agree_.global_rows(); }
    /// The agreement on the next element, to be summed by the caller (see step_agreement).
    std::optional<typename detail::step_agreement<element_type>::part> ahead() {
      return agree_.ahead([&] { return up_.next(); });
    }
    void agreed(typename detail::step_agreement<element_type>::part sums) { agree_.agreed(sums); }

   private:
    decltype(std::declval<const D&>().iterate(0)) up_;
    detail::step_agreement<element_type> agree_;
  };
  iterator iterate(std::uint64_t pass) const { return iterator(*this, pass); }
};
namespace detail {
template <class D>
struct is_distributed<per_replica_dataset<D>> : std::true_type {};
}  // namespace detail

}  // namespace dtrain
