#pragma once
/// \file
/// What a model trained under a strategy sees of it: the number of replicas, who is chief, and the
/// collectives it needs (gradient buckets during backward, metric states at epoch end). Strategies
/// implement it; `sequential` holds a pointer when made by `strategy.make_model()`. A handful of
/// virtual calls per step, none per element.
///
/// Gradient contract: `begin_gradients(g)` before backward; `gradients_ready(offset, count)` each time a
/// layer's gradients are final (backward goes from the last layer to the first, so the ready region
/// grows from the end of `g` towards its start); `finish_gradients()` returns when `g` holds the SUM of
/// every replica's gradients, identical on all replicas.
///
/// A model whose gradients are not in host memory (a GPU model's) either stages them through host
/// memory for that same contract, or, where `reduces_device_gradients()` (comm::nccl), hands over the
/// device buffer itself with `begin_device_gradients(g)`: then `finish_gradients()` leaves the
/// sum there, in order with the model's kernels on its stream.

#include <algorithm>
#include <cstddef>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/core/tensor.hpp"
#include "dtrain/core/replica_group.hpp"
#include "dtrain/distribute/comm/communicator.hpp"

namespace dtrain {

/// A model's gradients in its device's memory: the address is the device's (never read on the host),
/// of the backend the strategy made the model on.
struct device_gradients {
  float* address = nullptr;
  std::size_t count = 0;
};

class replica_context {
 public:
  virtual ~replica_context() = default;
  virtual int num_replicas_in_sync() const = 0;
  virtual int replica_id() const = 0;
  virtual bool is_chief() const = 0;
  virtual void begin_gradients(std::span<float> grads) = 0;
  virtual void gradients_ready(std::size_t offset, std::size_t count) = 0;
  virtual void finish_gradients() = 0;
  /// Whether gradients in device memory are summed where they are (begin_device_gradients instead of
  /// begin_gradients).
  virtual bool reduces_device_gradients() const { return false; }
  virtual void begin_device_gradients(device_gradients) {
    throw usage_error("this strategy sums gradients in host memory only (reduces_device_gradients() is false)");
  }
  virtual void all_reduce(std::span<float> data, reduce_op op) = 0;
  virtual void broadcast(std::span<float> data, int root) = 0;
  virtual void broadcast_bytes(std::span<std::byte> data, int root) = 0;
  /// Every replica's `in` (all the same size) into `out`, in replica order.
  virtual void all_gather(std::span<const float> in, std::span<float> out) = 0;
  /// Returns once every replica has entered it.
  virtual void barrier() = 0;

  /// Processes that each run the training loop (TF's `num_input_pipelines`): one per worker. The loop's
  /// own collectives (agreeing to stop, summing metric states, the chief's broadcasts) are among these,
  /// and `fit` shards a dataset among them. The replicas of one process (`mirrored_strategy`) share one
  /// loop, which splits each batch among them.
  virtual int num_input_pipelines() const { return num_replicas_in_sync(); }
  virtual int input_pipeline_id() const { return replica_id(); }
  /// Runs `f(i)` for every local replica i at once, each on its own thread, where
  /// `detail::current_local_replica()` is i (a model made by the strategy then acts as replica i's copy)
  /// and the collectives above are among the local replicas. Returns when all have returned; the first
  /// exception is rethrown once the others are released from their collectives.
  virtual void for_each_local_replica(const std::function<void(int)>& f) { f(0); }
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

/// Splits a gradient buffer into fixed all-reduce buckets from its END (where backward starts): the
/// first `first_bytes` (small, so communication starts early), then `bucket_bytes` each. As the ready
/// region grows, every bucket it fully covers is launched, in this fixed order on every replica.
template <class Launch>
class gradient_buckets {
 public:
  gradient_buckets(std::size_t first_bytes, std::size_t bucket_bytes) : first_(first_bytes / 4), rest_(bucket_bytes / 4) {
    if (first_ == 0) first_ = 1;
    if (rest_ == 0) rest_ = 1;
  }
  void begin(std::size_t n) {
    n_ = n;
    next_end_ = n;  // the next bucket to launch ends here
    ready_from_ = n;
    first_done_ = false;
  }
  /// [offset, offset + count) is final; launch(begin, end) every bucket now complete.
  void ready(std::size_t offset, std::size_t count, Launch& launch) {
    if (count == 0) return;
    ready_from_ = std::min(ready_from_, offset);
    while (next_end_ > 0) {
      const std::size_t size = first_done_ ? rest_ : first_;
      const std::size_t begin = next_end_ > size ? next_end_ - size : 0;
      if (ready_from_ > begin) break;
      launch(begin, next_end_);
      first_done_ = true;
      next_end_ = begin;
    }
  }
  /// Launches what is left (everything is ready now).
  void flush(Launch& launch) { ready(0, n_, launch); }

 private:
  std::size_t first_, rest_, n_ = 0, next_end_ = 0, ready_from_ = 0;
  bool first_done_ = false;
};

}  // namespace dtrain
