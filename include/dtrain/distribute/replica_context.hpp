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

#include <cstddef>
#include <span>

#include "dtrain/distribute/comm/communicator.hpp"

namespace dtrain {

class replica_context {
 public:
  virtual ~replica_context() = default;
  virtual int num_replicas_in_sync() const = 0;
  virtual int replica_id() const = 0;
  virtual bool is_chief() const = 0;
  virtual void begin_gradients(std::span<float> grads) = 0;
  virtual void gradients_ready(std::size_t offset, std::size_t count) = 0;
  virtual void finish_gradients() = 0;
  virtual void all_reduce(std::span<float> data, reduce_op op) = 0;
  virtual void broadcast(std::span<float> data, int root) = 0;
  virtual void broadcast_bytes(std::span<std::byte> data, int root) = 0;
};

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
