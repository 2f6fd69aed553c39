#pragma once
/// \file
/// `replica_context`: TF's `tf.distribute.ReplicaContext`, what a training loop, a callback, a layer or a
/// custom step sees of the strategy its model was made by: how many replicas there are, which one this
/// is, who is chief, and the small collectives among them (agreeing to stop, summing metric states, the
/// chief's broadcasts, synchronised batch statistics). Strategies implement it; a model made by
/// `strategy.make_model()` holds a pointer to it. A handful of virtual calls per step, none per element.
/// A model's gradients take another way, typed on its backend's memory (distribute/gradient_sync.hpp).
///
/// Also here: the strategy scope (`get_strategy()`'s thread-local), and TF's loss helpers that depend
/// on it (`compute_average_loss`, `scale_regularization_loss`).

#include <algorithm>
#include <cstddef>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/core/tensor.hpp"
#include "dtrain/distribute/comm/communicator.hpp"

namespace dtrain {

/// Contract: every replica calls the collectives in the same order with the same sizes; each returns
/// when it has every replica's part. Outside a replica's thread of a strategy of several replicas in one
/// process (`mirrored_strategy`), this process is the only participant and they leave the data as it is.
class replica_context {
 public:
  virtual ~replica_context() = default;
  virtual int num_replicas_in_sync() const = 0;
  /// TF's `replica_id_in_sync_group`.
  virtual int replica_id() const = 0;
  virtual bool is_chief() const = 0;
  /// Processes that each run the training loop (TF's `num_input_pipelines`): one per worker. The loop's
  /// own collectives are among these, and `fit` shards a dataset among them. The replicas of one process
  /// (`mirrored_strategy`) share one loop, which splits each batch among them.
  virtual int num_input_pipelines() const { return num_replicas_in_sync(); }
  virtual int input_pipeline_id() const { return replica_id(); }
  virtual void all_reduce(std::span<float> data, reduce_op op) = 0;
  /// Root's bytes to every replica.
  virtual void broadcast(std::span<std::byte> data, int root) = 0;
  /// Root's values of any trivially copyable type (its bytes) to every replica.
  template <class T>
    requires(!std::is_same_v<T, std::byte>)
  void broadcast(std::span<T> data, int root) {
    broadcast(std::as_writable_bytes(data), root);
  }
  /// Every replica's `in` (all the same size) into `out`, in replica order.
  virtual void all_gather(std::span<const float> in, std::span<float> out) = 0;
  /// Returns once every replica has entered it.
  virtual void barrier() = 0;
};

/// The replicas one process holds (`mirrored_strategy`), as the model that holds their copies sees them.
class local_replicas {
 public:
  virtual ~local_replicas() = default;
  /// Runs `f(i)` for every local replica i at once, each on its own thread, where
  /// `detail::current_local_replica()` is i and the replica context's collectives are among the local
  /// replicas. Returns when all have returned; the first exception is rethrown once the others are
  /// released from their collectives.
  virtual void run_each(const std::function<void(int)>& f) = 0;
};

namespace detail {
/// The replica context of the strategy whose scope this thread is in; null outside any (the default
/// strategy). Set by `strategy_scope`.
inline replica_context*& current_replica_context() {
  thread_local replica_context* current = nullptr;
  return current;
}
}  // namespace detail

/// TF's `with strategy.scope():` as an RAII guard: while it lives, `get_strategy()` on this thread is
/// `context`'s strategy. Strategies open one in `scope()`, `make_model`, `run`; `fit`, `evaluate` and
/// `predict` open one for the strategy their model was made by. Scopes nest; a null context (a model
/// no strategy made) leaves the scope as it is.
class strategy_scope {
 public:
  explicit strategy_scope(replica_context* context)
      : previous_(detail::current_replica_context()) {
    if (context) detail::current_replica_context() = context;
  }
  strategy_scope(const strategy_scope&) = delete;
  strategy_scope& operator=(const strategy_scope&) = delete;
  ~strategy_scope() { detail::current_replica_context() = previous_; }

 private:
  replica_context* previous_;
};

/// The number of replicas of the strategy in scope (1 outside any).
inline int replicas_in_scope() {
  const replica_context* c = detail::current_replica_context();
  return c ? c->num_replicas_in_sync() : 1;
}

/// `tf.nn.compute_average_loss`: the sum of per-example losses divided by the GLOBAL batch size. As in
/// TF, `global_batch_size = 0` means this replica's batch times the number of replicas of the strategy
/// in scope (inside `strategy.run`), so a custom loop that equal-sized replicas run gets the global
/// mean without saying the global batch size.
inline float compute_average_loss(std::span<const float> per_example_loss, std::size_t global_batch_size = 0) {
  if (global_batch_size == 0) global_batch_size = per_example_loss.size() * std::size_t(replicas_in_scope());
  if (global_batch_size == 0) return 0.0f;
  double s = 0.0;
  for (float v : per_example_loss) s += v;
  return static_cast<float>(s / static_cast<double>(global_batch_size));
}
inline float compute_average_loss(const tensor& per_example_loss, std::size_t global_batch_size = 0) {
  return compute_average_loss(std::span<const float>(per_example_loss.data(), per_example_loss.size()),
                              global_batch_size);
}

/// `tf.nn.scale_regularization_loss`: a regularization loss divided by the number of replicas (default:
/// the strategy in scope's), so that summing the replicas' gradients counts it once.
inline float scale_regularization_loss(float regularization_loss, int num_replicas_in_sync = 0) {
  if (num_replicas_in_sync < 0) throw value_error("scale_regularization_loss: num_replicas_in_sync must be positive");
  if (num_replicas_in_sync == 0) num_replicas_in_sync = replicas_in_scope();
  return regularization_loss / static_cast<float>(num_replicas_in_sync);
}

namespace detail {
/// `strategy.reduce(op, value, axis)` for a tensor, over the replicas reached through `rc` (null: this
/// replica alone). Without an axis, element by element across replicas (every replica's tensor must
/// have the same shape); with axis 0, over this replica's rows as well, where replicas may hold
/// different numbers of rows and `mean` divides by their total (TF's semantics). Collective: every
/// replica calls it with the same op and axis, and a shape mismatch is an error on all of them.
inline tensor reduce_tensor(replica_context* rc, reduce_op op, const tensor& value, std::optional<std::size_t> axis) {
  if (axis && *axis != 0)
    throw value_error("strategy.reduce: axis must be none or 0 (the batch axis), got " + std::to_string(*axis));
  if (axis && value.dimension() == 0) throw value_error("strategy.reduce: axis 0 of a scalar");
  const extents e = extents_of(value);
  const extents out_e = axis ? extents(e.begin() + 1, e.end()) : e;
  std::size_t width = 1;
  for (std::size_t d : out_e) width *= d;
  const std::size_t rows = axis ? e[0] : 1;
  if (rc) {  // every replica must hold the same (trailing) shape: compare the largest and smallest
    float w[2] = {float(width), -float(width)};
    rc->all_reduce(std::span<float>(w, 2), reduce_op::max);
    if (w[0] != -w[1])
      throw value_error("strategy.reduce: the replicas' values have different shapes (" +
                        std::to_string(std::size_t(-w[1])) + " and " + std::to_string(std::size_t(w[0])) +
                        " elements" + (axis ? " per row" : "") + "); this replica's is " + shape_str(e));
  }
  const bool extreme = op == reduce_op::max || op == reduce_op::min;
  const float identity = op == reduce_op::max   ? -std::numeric_limits<float>::infinity()
                         : op == reduce_op::min ? std::numeric_limits<float>::infinity()
                                                : 0.0f;
  std::vector<float> acc(width + 1, identity);  // the last entry counts rows (for mean)
  acc[width] = float(rows);
  const float* d = value.data();
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t j = 0; j < width; ++j) {
      const float v = d[r * width + j];
      acc[j] = op == reduce_op::max ? std::max(acc[j], v) : op == reduce_op::min ? std::min(acc[j], v) : acc[j] + v;
    }
  float count = acc[width];
  if (rc) {
    if (extreme) {
      rc->all_reduce(std::span<float>(acc.data(), width), op);
    } else {
      rc->all_reduce(std::span<float>(acc), reduce_op::sum);
      count = acc[width];
    }
  }
  if (op == reduce_op::mean)  // by the rows of all replicas (axis 0) or the number of replicas
    for (std::size_t j = 0; j < width; ++j) acc[j] = count > 0 ? acc[j] / count : std::numeric_limits<float>::quiet_NaN();
  return from_span(std::span<const float>(acc.data(), width), out_e);
}
}  // namespace detail

}  // namespace dtrain
