#pragma once
/// \file
/// The callback seam: Keras' hooks, called by `fit` / `evaluate` / `predict` with the logs so far.
/// Callbacks are called a few times per step at most, so they are type-erased (a virtual base);
/// the training step itself never goes through them.
///
/// Contract: `set_params` and the model come before `on_train_begin` / `on_test_begin` /
/// `on_predict_begin`, and the model is taken away when that loop ends (`bind_model`); `logs` carry the running
/// loss and metrics (training hooks) and, at epoch end, `val_*` results when validation ran.
/// A callback stops training by setting `model().stop_training`, as in Keras.

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "dtrain/checkpoint/training_state.hpp"
#include "dtrain/core/logs.hpp"
#include "dtrain/optimizers/optimizer.hpp"

namespace dtrain {

/// What `fit` tells its callbacks (Keras' `callback.params`).
struct callback_params {
  int epochs = 1;
  std::int64_t steps = -1;  // steps per epoch, -1 when unknown
  int verbose = 1;
};

using checkpoint::training_position;
using checkpoint::training_state;

/// What the chief tells every replica in one collective (`training_model::broadcast_from_chief`): a kind
/// the sender defines, a text and bytes (a backup's contents are sent as they are, in no envelope).
struct chief_message {
  int kind = 0;
  std::string text;
  std::vector<char> bytes;
};

/// What a callback sees of the model being trained (Keras' `callback.model`), including what saving
/// callbacks need: the training state in and out, and the replicas' collectives. Calls marked
/// "collective" must be made by every replica at the same point of training.
class training_model {
 public:
  virtual ~training_model() = default;
  /// Keras `model.get_weights()` / `set_weights()`: host copies of every parameter, flattened.
  virtual std::vector<float> get_weights() = 0;
  virtual void set_weights(std::span<const float> weights) = 0;
  virtual any_optimizer& optimizer() = 0;
  /// The optimizer's step count (Keras `model.optimizer.iterations`), read without giving write access
  /// (which under a mirrored strategy would mark the replicas' copies stale).
  virtual std::int64_t iterations() const = 0;
  /// Each variable as `<layer>/<variable>` (`dense/kernel`) and a host copy of its values.
  virtual std::vector<std::pair<std::string, std::vector<float>>> layer_weights() = 0;
  /// Collective: the training state now, with the metric states summed over the replicas and `position`.
  virtual training_state capture_state() = 0;
  /// The reader and writer of this model's training states (checkpoint/training_state.hpp): `write`
  /// (atomically; the chief calls it), `read` (a file's bytes, checked, the model untouched).
  virtual const checkpoint::state_io& states() = 0;
  /// Puts `s` into the model; the replica with id 0 takes the summed metric states, the others zero.
  virtual void apply_state(training_state s) = 0;
  /// Writes the weights alone (Keras save_weights; the chief calls it).
  virtual void save_weights(const std::filesystem::path& path) = 0;
  /// Collective: every replica gets the chief's message.
  virtual void broadcast_from_chief(chief_message& message) = 0;
  /// Collective: the chief's `decision` on every replica (for decisions taken on per-replica values).
  virtual bool chief_decides(bool decision) = 0;
  virtual bool is_chief() const = 0;
  virtual int num_replicas_in_sync() const = 0;
  /// Collective: returns once every replica has entered it.
  virtual void barrier() = 0;
  /// The processes training (the workers of a cluster; 1 otherwise) and this one's index among them.
  virtual int num_workers() const { return 1; }
  virtual int worker_index() const { return 0; }
  /// Collective over the workers: `values` becomes their element-wise sum.
  virtual void sum_over_workers(std::span<float>) {}

  /// Set to stop `fit` after the current batch (Keras' `model.stop_training`).
  bool stop_training = false;
  /// Kept current by `fit` before every hook.
  training_position position;
  /// Set by a callback in `on_train_begin` to make `fit` continue from a saved position.
  std::optional<training_position> resume;
};

/// Keras `callbacks.Callback`: override the hooks you need.
class callback {
 public:
  virtual ~callback() = default;

  void set_params(const callback_params& p) { params_ = p; }
  void set_model(training_model* m) { model_ = m; }
  const callback_params& params() const { return params_; }
  training_model& model() { return *model_; }
  bool has_model() const { return model_ != nullptr; }

  virtual void on_train_begin(const logs&) {}
  virtual void on_train_end(const logs&) {}
  virtual void on_epoch_begin(int /*epoch*/, const logs&) {}
  virtual void on_epoch_end(int /*epoch*/, const logs&) {}
  virtual void on_train_batch_begin(std::int64_t /*batch*/, const logs&) {}
  virtual void on_train_batch_end(std::int64_t /*batch*/, const logs&) {}
  virtual void on_test_begin(const logs&) {}
  virtual void on_test_end(const logs&) {}
  virtual void on_test_batch_begin(std::int64_t /*batch*/, const logs&) {}
  virtual void on_test_batch_end(std::int64_t /*batch*/, const logs&) {}
  virtual void on_predict_begin(const logs&) {}
  virtual void on_predict_end(const logs&) {}
  virtual void on_predict_batch_begin(std::int64_t /*batch*/, const logs&) {}
  virtual void on_predict_batch_end(std::int64_t /*batch*/, const logs&) {}
  /// The workers agreed to stop here because of a preemption (SIGTERM); `fit` throws `preempted` next.
  virtual void on_preemption(const logs&) {}

 private:
  callback_params params_;
  training_model* model_ = nullptr;
};

/// A callback given to `fit`: a value (copied) or a shared pointer (kept by the caller too, e.g. to
/// read a `history` afterwards).
class callback_ref {
 public:
  template <class C>
    requires std::is_base_of_v<callback, std::remove_cvref_t<C>>
  callback_ref(C&& c) : p_(std::make_shared<std::remove_cvref_t<C>>(std::forward<C>(c))) {}
  template <class C>
    requires std::is_base_of_v<callback, C>
  callback_ref(std::shared_ptr<C> c) : p_(std::move(c)) {}
  callback* operator->() const { return p_.get(); }
  callback& operator*() const { return *p_; }
  const std::shared_ptr<callback>& get() const { return p_; }

 private:
  std::shared_ptr<callback> p_;
};

/// Keras' CallbackList: calls every callback's hook in order.
class callback_list {
 public:
  callback_list() = default;
  callback_list(std::initializer_list<callback_ref> cs) : cs_(cs) {}
  explicit callback_list(std::vector<callback_ref> cs) : cs_(std::move(cs)) {}

  void push_back(callback_ref c) { cs_.push_back(std::move(c)); }
  void push_front(callback_ref c) { cs_.insert(cs_.begin(), std::move(c)); }
  std::size_t size() const { return cs_.size(); }
  auto begin() const { return cs_.begin(); }
  auto end() const { return cs_.end(); }

  void set_params(const callback_params& p) const {
    for (auto& c : cs_) c->set_params(p);
  }
  /// Gives `m` to every callback that has no model yet, until the returned guard goes (an exception
  /// included), so no callback keeps a model that is gone. Nested loops (validation inside `fit`)
  /// leave the outer loop's model in place.
  [[nodiscard]] auto bind_model(training_model* m) const {
    std::vector<callback*> bound;
    for (auto& c : cs_)
      if (!c->has_model()) c->set_model(m), bound.push_back(c.get().get());
    struct guard {
      std::vector<callback*> bound;
      guard(std::vector<callback*> b) : bound(std::move(b)) {}
      guard(const guard&) = delete;
      guard& operator=(const guard&) = delete;
      ~guard() {
        for (callback* c : bound) c->set_model(nullptr);
      }
    };
    return guard(std::move(bound));
  }
  void on_train_begin(const logs& l) const { each([&](callback& c) { c.on_train_begin(l); }); }
  void on_train_end(const logs& l) const { each([&](callback& c) { c.on_train_end(l); }); }
  void on_epoch_begin(int e, const logs& l) const { each([&](callback& c) { c.on_epoch_begin(e, l); }); }
  void on_epoch_end(int e, const logs& l) const { each([&](callback& c) { c.on_epoch_end(e, l); }); }
  void on_train_batch_begin(std::int64_t b, const logs& l) const {
    each([&](callback& c) { c.on_train_batch_begin(b, l); });
  }
  void on_train_batch_end(std::int64_t b, const logs& l) const { each([&](callback& c) { c.on_train_batch_end(b, l); }); }
  void on_test_begin(const logs& l) const { each([&](callback& c) { c.on_test_begin(l); }); }
  void on_test_end(const logs& l) const { each([&](callback& c) { c.on_test_end(l); }); }
  void on_test_batch_begin(std::int64_t b, const logs& l) const { each([&](callback& c) { c.on_test_batch_begin(b, l); }); }
  void on_test_batch_end(std::int64_t b, const logs& l) const { each([&](callback& c) { c.on_test_batch_end(b, l); }); }
  void on_predict_begin(const logs& l) const { each([&](callback& c) { c.on_predict_begin(l); }); }
  void on_predict_end(const logs& l) const { each([&](callback& c) { c.on_predict_end(l); }); }
  void on_predict_batch_begin(std::int64_t b, const logs& l) const {
    each([&](callback& c) { c.on_predict_batch_begin(b, l); });
  }
  void on_predict_batch_end(std::int64_t b, const logs& l) const {
    each([&](callback& c) { c.on_predict_batch_end(b, l); });
  }
  void on_preemption(const logs& l) const { each([&](callback& c) { c.on_preemption(l); }); }

 private:
  template <class F>
  void each(F&& f) const {
    for (auto& c : cs_) f(*c);
  }
  std::vector<callback_ref> cs_;
};

}  // namespace dtrain
