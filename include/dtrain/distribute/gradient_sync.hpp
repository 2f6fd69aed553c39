#pragma once
/// \file
/// How a model's gradients are summed over the replicas: `gradient_sync<B>`, typed on the memory of the
/// model's backend B, which a strategy hands to each model it makes. Its contract:
/// - `begin(g, side)` before backward, `g` being the model's gradient buffer, under a multi-worker
///   strategy with `side` values in front that the step sums with the gradients: its running metric
///   states (counts and totals, which must add exactly: never compressed);
/// - `ready(offset, count)` each time a region of `g` is final. Backward goes from the last layer to
///   the first, so the ready region grows from the end of `g` towards its start; a model whose memory
///   is not host memory calls it layer by layer once backward is done (its kernels run on ahead);
/// - `finish()` returns when `g` holds the SUM of every replica's gradients, identical on all replicas
///   (for device memory: in order with the model's kernels on its stream);
/// - `applies_update()`: true when someone else applies the update with the summed gradients (a
///   parameter server; the replica holding central_storage_strategy's variables); the model then makes
///   no optimizer step of its own;
/// - `updated(p)` after the step's update (made or not), `p` being the model's parameters: a strategy
///   that keeps the variables in one place gives the replica their new values here.
/// A host implementation launches fixed buckets as they fill (`gradient_buckets`), so communication
/// overlaps backward; `staged_gradient_sync` carries a device model's gradients through pinned host
/// memory to one; a device communicator (comm::nccl) sums device memory where it is.

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>

#include "dtrain/backend/backend.hpp"
#include "dtrain/backend/cpu.hpp"

namespace dtrain {

template <class B>
class gradient_sync {
 public:
  virtual ~gradient_sync() = default;
  virtual void begin(span_t<B, float> g, std::size_t side) = 0;
  virtual void ready(std::size_t offset, std::size_t count) = 0;
  virtual void finish() = 0;
  virtual bool applies_update() const { return false; }
  virtual void updated(span_t<B, float>) {}
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

namespace detail {
/// A device model's gradients summed by a host `gradient_sync`: each ready region is copied into pinned
/// host memory and handed on (its copy overlapping the communicator's work on the buckets already
/// complete), and the sum is copied back at the end.
template <class B>
class staged_gradient_sync final : public gradient_sync<B> {
 public:
  explicit staged_gradient_sync(gradient_sync<cpu>& host) : host_(host) {}
  void begin(span_t<B, float> g, std::size_t side) override {
    g_.emplace(g);
    if (stage_.size() != g.size()) stage_ = host_staging<B>(g.device(), g.size());
    host_.begin(std::span<float>(stage_.data(), g.size()), side);
  }
  void ready(std::size_t offset, std::size_t count) override {
    if (count == 0) return;
    g_->device().download(count, pointer_t<B, const float>(g_->data() + offset), stage_.data() + offset);
    host_.ready(offset, count);
  }
  void finish() override {
    host_.finish();
    g_->device().upload(g_->size(), static_cast<const float*>(stage_.data()), g_->data());
  }

 private:
  gradient_sync<cpu>& host_;
  std::optional<span_t<B, float>> g_;
  host_staging_t<B> stage_;
};
}  // namespace detail

}  // namespace dtrain
