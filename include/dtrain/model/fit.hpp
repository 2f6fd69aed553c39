#pragma once
/// \file
/// `fit`, `evaluate` and `predict` over datasets and in-memory arrays, with Keras' semantics:
/// - without `steps_per_epoch`, an epoch is one full pass of the dataset (a new pass each epoch, so
///   `shuffle` reshuffles); a dataset that repeats forever needs `steps_per_epoch`;
/// - with `steps_per_epoch`, one iterator runs across epochs (so a repeated dataset continues where
///   the last epoch stopped); if it runs out, training stops with Keras' warning;
/// - validation runs every `validation_freq` epochs and adds `val_*` entries to the epoch's logs;
/// - a progress bar (`progbar_logger`) is added when verbose > 0 and a `history` is returned.
/// The loops are templates over the model type, gathered in `detail::trainer<Model>`, which the model's
/// `fit` / `evaluate` / `predict` members call (model/basic_model.hpp declares it; this header defines it).

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "dtrain/callbacks/callback.hpp"
#include "dtrain/checkpoint/training_state.hpp"
#include "dtrain/core/preemption.hpp"
#include "dtrain/core/trace.hpp"
#include "dtrain/callbacks/history.hpp"
#include "dtrain/callbacks/progbar_logger.hpp"
#include "dtrain/data/any_dataset.hpp"
#include "dtrain/data/stages.hpp"
#include "dtrain/distribute/input.hpp"
#include "dtrain/distribute/replica_context.hpp"

namespace dtrain {

/// `fit`'s validation data: a dataset of batches of (x, y), or of (x, y, sample_weight) (Keras'
/// `validation_data=(x_val, y_val, val_sample_weights)`), whose loss is then weighted.
template <class E>
class validation_dataset {
 public:
  validation_dataset() = default;
  template <class D>  // itself first: checking dataset<validation_dataset> here would recurse
    requires(!std::same_as<D, validation_dataset>) && data::dataset<D> &&
            (std::is_same_v<typename D::element_type, E> || std::is_same_v<typename D::element_type, data::weighted_t<E>>)
  validation_dataset(D d) {
    if constexpr (data::is_weighted_v<typename D::element_type>) weighted_ = std::move(d);
    else plain_ = std::move(d);
  }
  explicit operator bool() const { return plain_ || weighted_; }
  /// `f(dataset)` with the dataset held.
  template <class F>
  auto visit(F f) const {
    return plain_ ? f(plain_) : f(weighted_);
  }

 private:
  data::any_dataset<E> plain_;
  data::any_dataset<data::weighted_t<E>> weighted_;
};

/// `fit`'s options; `E` is the model's batch: `data::example`, or `data::multi_example` for a model of
/// several inputs or outputs (`fit_options` and `multi_fit_options`). The dataset `fit` takes may also
/// yield (x, y, sample_weight) batches (`data::weighted_example`, `data::weighted_multi_example`).
template <class E>
struct basic_fit_options {
  int epochs = 1;
  std::int64_t steps_per_epoch = 0;  // 0: one full pass of the dataset per epoch
  int initial_epoch = 0;
  validation_dataset<E> validation_data{};
  std::int64_t validation_steps = 0;  // 0: the whole validation dataset
  int validation_freq = 1;
  callback_list callbacks{};
  int verbose = 1;  // 0 silent, 1 progress bar, 2 one line per epoch
  // for fit(x, y, ...) on in-memory arrays only:
  std::size_t batch_size = 32;
  bool shuffle = true;
  double validation_split = 0.0;  // the LAST fraction of the arrays, taken before shuffling (Keras)
  std::uint64_t seed = default_seed;  // of the per-epoch shuffle
  /// Keras' `sample_weight` (arrays only; a dataset yields it as the batches' third element): one tensor
  /// for every output or one per output, of one weight per sample (see train_step).
  std::vector<tensor> sample_weight{};
  /// Keras' `class_weight` (arrays and datasets; a model of one output): each sample's loss is weighted
  /// by the weight of its class, the class being y's value (y of shape (n) or (n, 1)) or the index of
  /// the largest value of its row (one-hot y); a class not listed weighs 1.
  std::map<int, float> class_weight{};
};
using fit_options = basic_fit_options<data::example>;
using multi_fit_options = basic_fit_options<data::multi_example>;

struct evaluate_options {
  std::int64_t steps = 0;  // 0: the whole dataset
  int verbose = 1;
  callback_list callbacks{};
  std::size_t batch_size = 32;  // for evaluate(x, y) only
  std::vector<tensor> sample_weight{};  // for evaluate(x, y) only: as fit's
};

struct predict_options {
  std::int64_t steps = 0;
  int verbose = 0;
  std::size_t batch_size = 32;  // for predict(x) only
  callback_list callbacks{};
};

namespace detail {

/// What a model's datasets yield: (x, y) tensors, or lists of them for a model of several inputs or outputs.
template <class Model>
using element_of = std::conditional_t<Model::num_inputs == 1 && Model::num_outputs == 1, data::example,
                                      data::multi_example>;
template <class Model, class E>
constexpr void check_element() {
  static_assert(std::is_same_v<E, element_of<Model>> || std::is_same_v<E, data::weighted_t<element_of<Model>>>,
                "fit/evaluate: the dataset must yield (x, y) batches: data::example for a model of one input and one "
                "output, data::multi_example (a std::vector<tensor> per input and per output) for any other; or "
                "(x, y, sample_weight) batches: data::weighted_example, data::weighted_multi_example");
}

/// Keras' class_weight as sample weights: each sample's class is y's value (y of shape (n) or (n, 1),
/// rounded) or the index of its largest value along the last axis; an unlisted class weighs 1.
inline tensor class_sample_weights(const tensor& y, const std::map<int, float>& class_weight) {
  const std::size_t width = y.dimension() > 1 ? y.shape()[y.dimension() - 1] : 1;
  extents e(y.shape().begin(), y.shape().end() - (y.dimension() > 1 ? 1 : 0));
  tensor w = zeros(e);
  for (std::size_t i = 0; i < w.size(); ++i) {
    const float* row = y.data() + i * width;
    const double c = width == 1 ? std::nearbyint(double(row[0])) : double(std::max_element(row, row + width) - row);
    const auto it = c >= INT_MIN && c <= INT_MAX ? class_weight.find(int(c)) : class_weight.end();  // (not NaN either)
    w.data()[i] = it == class_weight.end() ? 1.0f : it->second;
  }
  return w;
}

/// Checks `class_weight` against the model and the batches' element `E`, as Keras does.
template <class Model, class E>
void check_class_weight(const std::map<int, float>& class_weight) {
  if (class_weight.empty()) return;
  if (Model::num_outputs != 1) throw value_error("fit: class_weight is only supported for models of one output");
  if (data::is_weighted_v<E>)
    throw value_error("fit: class_weight and sample_weight cannot be used together (the batches carry sample weights)");
  for (const auto& [c, w] : class_weight)
    if (!std::isfinite(w))
      throw value_error("fit: class_weight of class " + std::to_string(c) + " is " + std::to_string(w) + ", not finite");
}

/// A training step on a batch `b` (with its sample weights, or the weights of `class_weight`) into `l`.
template <class Model, class E>
void train_on_batch(Model& m, const E& b, const std::map<int, float>& class_weight, std::size_t global_rows, logs& l) {
  if constexpr (data::is_weighted_v<E>) {
    l = m.train_step(std::get<0>(b), std::get<1>(b), std::get<2>(b), global_rows);
  } else if constexpr (Model::num_outputs == 1) {
    if (class_weight.empty()) {
      l = m.train_step(b.first, b.second, global_rows);
    } else {
      const std::vector<tensor> w{class_sample_weights(as_tensors(b.second)[0], class_weight)};
      l = m.train_step(b.first, b.second, w, global_rows);
    }
  } else {
    l = m.train_step(b.first, b.second, global_rows);
  }
}
/// A test step on a batch `b` (with its sample weights).
template <class Model, class E>
logs test_on_batch(Model& m, const E& b) {
  if constexpr (data::is_weighted_v<E>) return m.test_step(std::get<0>(b), std::get<1>(b), std::get<2>(b));
  else return m.test_step(b.first, b.second);
}

template <class Model>
bool replicated(const Model& m) {
  return m.replica() && m.replica()->num_input_pipelines() > 1;
}
/// The processes running this loop (each worker of a cluster; the one process of a mirrored strategy).
template <class Model>
int workers(const Model& m) {
  return m.replica() ? m.replica()->num_input_pipelines() : 1;
}

template <class Model>
class model_handle : public training_model {
 public:
  explicit model_handle(Model& m) : m_(m) {}
  std::vector<float> get_weights() override { return m_.get_weights(); }
  void set_weights(std::span<const float> w) override { m_.set_weights(w); }
  any_optimizer& optimizer() override { return m_.optimizer(); }
  std::int64_t iterations() const override { return std::as_const(m_).optimizer().iterations(); }
  std::vector<std::pair<std::string, std::vector<float>>> layer_weights() override {
    const std::vector<float> w = m_.get_weights();
    std::vector<std::pair<std::string, std::vector<float>>> out;
    for (const auto& l : m_.layers())
      for (const auto& v : l.variables)
        out.emplace_back(l.name + "/" + v.name, std::vector<float>(w.begin() + std::ptrdiff_t(v.offset),
                                                                    w.begin() + std::ptrdiff_t(v.offset + v.size)));
    return out;
  }

  training_state capture_state() override {
    training_state s = checkpoint::capture_training_state(m_);
    // at an epoch's start there are no running metrics (at its end every replica holds the sums already)
    if (position.step == 0) std::fill(s.metrics.begin(), s.metrics.end(), 0.0f);
    else if (replicated(m_)) m_.replica()->all_reduce(s.metrics, reduce_op::sum);
    s.position = position;
    s.position.world_size = workers(m_);
    return s;
  }
  const checkpoint::state_io& states() override {
    if (!states_) states_.emplace(m_);  // (the model is compiled by now; its layout stays while fit runs)
    return *states_;
  }
  void apply_state(training_state s) override {
    checkpoint::apply_training_state(m_, std::move(s), !m_.replica() || m_.replica()->replica_id() == 0);
  }
  void save_weights(const std::filesystem::path& path) override { checkpoint::save_weights(m_, path); }
  void broadcast_from_chief(chief_message& message) override {
    if (!replicated(m_)) return;
    replica_context& rc = *m_.replica();
    std::int64_t head[3] = {message.kind, std::int64_t(message.text.size()), std::int64_t(message.bytes.size())};
    rc.broadcast(std::as_writable_bytes(std::span<std::int64_t>(head)), 0);
    message.kind = int(head[0]);
    message.text.resize(std::size_t(head[1]));
    message.bytes.resize(std::size_t(head[2]));
    if (head[1] > 0) rc.broadcast(std::as_writable_bytes(std::span<char>(message.text)), 0);
    if (head[2] > 0) rc.broadcast(std::as_writable_bytes(std::span<char>(message.bytes)), 0);
  }
  bool chief_decides(bool decision) override {
    if (!replicated(m_)) return decision;
    std::byte b{decision};
    m_.replica()->broadcast(std::span<std::byte>(&b, 1), 0);
    return b != std::byte{0};
  }
  bool is_chief() const override { return !m_.replica() || m_.replica()->is_chief(); }
  int num_replicas_in_sync() const override { return m_.replicas(); }
  void barrier() override {
    if (m_.replica()) m_.replica()->barrier();
  }
  int num_workers() const override { return workers(m_); }
  int worker_index() const override { return replicated(m_) ? m_.replica()->input_pipeline_id() : 0; }
  void sum_over_workers(std::span<float> values) override {
    if (replicated(m_)) m_.replica()->all_reduce(values, reduce_op::sum);
  }

 private:
  Model& m_;
  std::optional<checkpoint::state_io> states_;
};

inline void ran_out_warning(std::int64_t steps, int epochs) {
  std::fprintf(stderr,
               "WARNING: Your input ran out of data; interrupting training. Make sure that your dataset can generate "
               "at least `steps_per_epoch * epochs` batches (in this case, %lld batches). You may need to use the "
               "repeat() stage when building your dataset.\n",
               static_cast<long long>(steps) * epochs);
}

/// Under a strategy: sums the loss and metric states of all replicas, so every worker reports the same.
template <class Model>
void aggregate_metrics(Model& m) {
  if (!replicated(m)) return;
  std::vector<float> v = checkpoint::metric_states(m);
  m.replica()->all_reduce(v, reduce_op::sum);
  checkpoint::set_metric_states(m, v);
}

/// Under a strategy: stop (or take a preemption) when any replica asks to, so all replicas run the
/// same steps: at an epoch's end (within one, the flags ride with the steps' gradients, see run_fit).
template <class Model>
std::pair<bool, bool> agree_to_stop(Model& m, bool stop, bool preempt) {
  if (!replicated(m)) return {stop, preempt};
  float flags[2] = {stop ? 1.0f : 0.0f, preempt ? 1.0f : 0.0f};
  m.replica()->all_reduce(std::span<float>(flags, 2), reduce_op::max);
  return {flags[0] > 0.0f, flags[1] > 0.0f};
}

/// `ds` split among the replicas of the strategy that made `m`, by the dataset's auto-shard policy.
template <class Model, data::dataset D>
distributed_dataset<D> distributed(Model& m, const D& ds) {
  return distributed_dataset<D>(ds, m.replica()->num_input_pipelines(), m.replica()->input_pipeline_id(), m.replica());
}

template <class Model, data::dataset D>
logs run_evaluate(Model& m, const D& ds, evaluate_options o) {
  check_element<Model, typename D::element_type>();
  if constexpr (!is_distributed<D>::value)
    if (replicated(m))
      return run_evaluate(m, distributed(m, ds), o);
  strategy_scope scope(m.replica());
  if (m.replica() && !m.replica()->is_chief()) o.verbose = 0;  // the chief reports
  m.reset_metrics();
  const std::int64_t card = ds.cardinality();
  if (o.steps <= 0 && card == data::infinite)
    throw usage_error("evaluate: the dataset repeats forever; pass steps");
  const std::int64_t target = o.steps > 0 ? o.steps : (card >= 0 ? card : -1);
  progbar bar(target, o.verbose);
  model_handle<Model> handle(m);
  const auto bound = o.callbacks.bind_model(&handle);
  o.callbacks.on_test_begin({});
  auto it = ds.iterate(0);
  std::int64_t step = 0;
  logs l = m.metric_results();
  while (target < 0 || step < target) {
    o.callbacks.on_test_batch_begin(step, l);
    auto b = [&] {
      const trace::scope traced("data", "next batch");
      return it.next();
    }();
    if (!b) {
      if (o.steps > 0)
        std::fprintf(stderr, "WARNING: Your input ran out of data after %lld of %lld evaluation steps.\n",
                     static_cast<long long>(step), static_cast<long long>(o.steps));
      break;
    }
    if (batch_rows(*b) > 0) {  // a replica's share may be empty
      const trace::scope traced("step", "test_step");
      l = test_on_batch(m, *b);
    }
    o.callbacks.on_test_batch_end(step, l);
    bar.update(++step, l);
  }
  aggregate_metrics(m);
  l = m.metric_results();
  bar.update(step, l, true);
  o.callbacks.on_test_end(l);
  return l;
}

/// Under a strategy, the replicas' predictions in the order of the global batches: `local` holds this
/// replica's rows of each batch (`counts[step]` of them), batch after batch; every replica gets all.
/// `width`: values per row.
template <class Model>
std::vector<float> gather_predictions(Model& m, const std::vector<float>& local, const std::vector<float>& counts,
                                      std::size_t width) {
  replica_context* rc = m.replica();
  const std::size_t p = std::size_t(rc->num_input_pipelines()), me = std::size_t(rc->input_pipeline_id());
  // every replica learns every replica's rows per batch: a steps x p table, one column each
  std::vector<float> rows(counts.size() * p, 0.0f);
  for (std::size_t s = 0; s < counts.size(); ++s) rows[s * p + me] = counts[s];
  rc->all_reduce(rows, reduce_op::sum);
  std::vector<std::size_t> total(p, 0);
  for (std::size_t s = 0; s < counts.size(); ++s)
    for (std::size_t r = 0; r < p; ++r) total[r] += std::size_t(rows[s * p + r]);
  std::vector<std::vector<float>> of(p);  // each replica's rows, broadcast by it
  for (std::size_t r = 0; r < p; ++r) {
    of[r] = r == me ? local : std::vector<float>(total[r] * width);
    rc->broadcast(std::span<float>(of[r]), int(r));
  }
  std::vector<float> out;
  std::vector<std::size_t> at(p, 0);
  for (std::size_t s = 0; s < counts.size(); ++s)
    for (std::size_t r = 0; r < p; ++r) {
      const std::size_t n = std::size_t(rows[s * p + r]) * width;
      out.insert(out.end(), of[r].begin() + std::ptrdiff_t(at[r]), of[r].begin() + std::ptrdiff_t(at[r] + n));
      at[r] += n;
    }
  return out;
}


/// Keras `predict`: under a strategy each replica predicts its share of every global batch (DATA
/// sharding whatever the dataset's options), and the shares are gathered in order, so every worker
/// returns the predictions of the whole dataset in the dataset's order.
template <class Model, data::dataset D>
typename Model::prediction_type run_predict(Model& m, const D& ds, const predict_options& o) {
  if constexpr (!is_distributed<D>::value)
    if (replicated(m))
      return run_predict(m, distributed(m, ds | data::with_options({.auto_shard = data::auto_shard_policy::data})), o);
  strategy_scope scope(m.replica());
  const std::int64_t card = ds.cardinality();
  if (o.steps <= 0 && card == data::infinite) throw usage_error("predict: the dataset repeats forever; pass steps");
  const std::int64_t target = o.steps > 0 ? o.steps : (card >= 0 ? card : -1);
  progbar bar(target, m.replica() && !m.replica()->is_chief() ? 0 : o.verbose);
  model_handle<Model> handle(m);
  const auto bound = o.callbacks.bind_model(&handle);
  o.callbacks.on_predict_begin({});
  auto it = ds.iterate(0);
  constexpr std::size_t outputs = Model::num_outputs;
  std::array<std::vector<float>, outputs> out;  // each output's rows
  std::vector<float> counts;
  std::size_t rows = 0;
  std::int64_t step = 0;
  while (target < 0 || step < target) {
    o.callbacks.on_predict_batch_begin(step, {});
    auto b = it.next();
    if (!b) break;
    const std::size_t n = batch_rows(*b);
    if (n > 0) {  // a replica's share may be empty
      const auto p = m.predict_on_batch(features(*b));
      const std::span<const tensor> ps = as_tensors(p);
      for (std::size_t k = 0; k < outputs; ++k) out[k].insert(out[k].end(), ps[k].data(), ps[k].data() + ps[k].size());
    }
    rows += n;
    counts.push_back(float(n));
    o.callbacks.on_predict_batch_end(step, {});
    bar.update(++step, {});
  }
  bar.update(step, {}, true);
  o.callbacks.on_predict_end({});
  std::vector<tensor> result(outputs);
  for (std::size_t k = 0; k < outputs; ++k) {
    const extents& shape = Model::output_shapes()[k];
    std::size_t width = 1;
    for (std::size_t d : shape) width *= d;
    if (replicated(m)) {
      out[k] = gather_predictions(m, out[k], counts, width);
      rows = out[k].size() / width;
    }
    extents e{rows};
    e.insert(e.end(), shape.begin(), shape.end());
    result[k] = from_span(out[k], e);
  }
  if constexpr (outputs == 1) return std::move(result.front());
  else return result;
}

template <class D>
struct is_per_replica : std::false_type {};
template <class D>
struct is_per_replica<per_replica_dataset<D>> : std::true_type {};

/// Whether `ds`'s iterator state counts batches of the global pipeline, the same on every worker
/// whatever their number: DATA sharding's does; FILE sharding's, OFF's and a per-worker pipeline's do not.
template <class D>
bool position_is_global(const D& ds) {
  if constexpr (is_per_replica<D>::value) return false;
  else if constexpr (requires { ds.policy(); }) return ds.policy() == data::auto_shard_policy::data;
  else return true;
}

/// A state saved by another number of workers resumes only where its data position is global.
template <class D>
void check_resumable(const training_position& p, const D& ds, int workers) {
  if (p.world_size != workers && !position_is_global(ds))
    throw config_error("fit: the backup was written by " + std::to_string(p.world_size) + " workers but this run has " +
                       std::to_string(workers) + ", and its data position is per worker (FILE or OFF sharding, or "
                       "distribute_datasets_from_function); resume with " + std::to_string(p.world_size) +
                       " workers, shard by DATA, or delete the backup to start over");
}

/// After a resume, the global batch must be the one the state was saved with (a smaller last batch of
/// a pass excepted): the data position counts batches, so another batch size would skip or repeat data.
struct global_batch_check {
  std::int64_t saved = 0;  // 0: nothing (more) to check
  int saved_world = 1;
  bool smaller_seen = false;
  void operator()(std::int64_t rows, int world) {
    if (saved == 0) return;
    if (rows > saved || (rows < saved && smaller_seen))
      throw config_error("fit: the backup was written with a global batch of " + std::to_string(saved) + " rows (" +
                         std::to_string(saved_world) + " workers) but this run's global batch is " +
                         std::to_string(rows) + " rows (" + std::to_string(world) +
                         " workers); resuming needs the same global batch: make the per-worker batch " +
                         std::to_string(saved) + " / " + std::to_string(world) + " (the global batch must divide among "
                         "the workers), or delete the backup to start over");
    smaller_seen = rows < saved;
    if (rows == saved) saved = 0;
  }
};

template <class Model, data::dataset D>
history run_fit(Model& m, const D& ds, basic_fit_options<element_of<Model>> o) {
  check_element<Model, typename D::element_type>();
  if constexpr (!is_distributed<D>::value)
    if (replicated(m))  // Keras distributes the dataset of a model made in a strategy's scope
      return run_fit(m, distributed(m, ds), std::move(o));
  strategy_scope scope(m.replica());
  if (!m.compiled()) throw usage_error("fit: call compile() first (the model has no loss or optimizer)");
  check_class_weight<Model, typename D::element_type>(o.class_weight);
  if (o.epochs < 0 || o.initial_epoch < 0 || o.validation_freq < 1)
    throw value_error("fit: epochs and initial_epoch must not be negative, validation_freq must be positive");
  const std::int64_t card = ds.cardinality();
  if (o.steps_per_epoch <= 0 && card == data::infinite)
    throw usage_error("fit: the dataset repeats forever (repeat() without a count), so an epoch never ends; "
                      "pass steps_per_epoch");
  const std::int64_t steps = o.steps_per_epoch > 0 ? o.steps_per_epoch : (card >= 0 ? card : -1);

  auto hist = std::make_shared<history>();
  callback_list cbs = o.callbacks;
  if (m.replica() && !m.replica()->is_chief()) o.verbose = 0;  // progress is printed by the chief only
  if (o.verbose > 0) cbs.push_front(progbar_logger{});
  cbs.push_back(hist);
  model_handle<Model> handle(m);
  const auto bound = cbs.bind_model(&handle);
  cbs.set_params({o.epochs, steps, o.verbose});
  // where the next backup resumes: `data` is the dataset iterator's state there
  auto at = [&](int epoch, std::int64_t step, const data::iterator_state& data) {
    handle.position.epoch = epoch, handle.position.step = step, handle.position.data = data;
  };

  std::optional<data::iterator<D>> it;
  if (o.steps_per_epoch > 0) it.emplace(ds, 0);
  logs l;
  cbs.on_train_begin(l);
  std::optional<training_position> resume = std::exchange(handle.resume, std::nullopt);  // from a backup
  global_batch_check same_batch;
  if (resume) {
    check_resumable(*resume, ds, workers(m));
    if (steps >= 0 && resume->step > steps)  // after its last batch, an epoch has step == steps (its end is to come)
      throw config_error("fit: the backup's position, epoch " + std::to_string(resume->epoch + 1) + " after batch " +
                         std::to_string(resume->step) + ", is not a position of this run, whose epochs have " +
                         std::to_string(steps) + " steps; resume with the steps_per_epoch the backup was written "
                         "with, or delete the backup to start over");
    handle.position.global_batch = same_batch.saved = resume->global_batch;
    same_batch.saved_world = resume->world_size;
  }
  bool ran_out = false;
  for (int epoch = resume ? resume->epoch : o.initial_epoch; epoch < o.epochs && !ran_out; ++epoch) {
    std::int64_t step = 0;
    // a resumed epoch keeps the restored running metrics, unless it resumes at its start
    if (!resume || resume->step == 0) m.reset_metrics();
    cbs.on_epoch_begin(epoch, l);
    if (o.steps_per_epoch <= 0) it.emplace(ds, static_cast<std::uint64_t>(epoch));
    if (resume) {
      it->restore(resume->data);
      step = resume->step;
      resume.reset();
    }
    at(epoch, step, it->state());
    l = m.metric_results();
    // Under a multi-worker strategy the stop and preemption flags and the data's agreement on the next
    // batch ride with each step's gradients (the model's riders): a worker whose callbacks stop after a
    // batch says so in the next step, which every worker then drops, so all stop after the same batch
    // (the others' callbacks saw that next batch begin). A SIGTERM counts at the next step on all.
    const bool rides = replicated(m) && m.sums_workers();
    bool stopping = false;  // this worker's callbacks stopped after the last batch; the others learn it now
    bool dropped = false;   // ...and the step that told them read a batch no step trained on
    while (steps < 0 || step < steps) {
      if (!stopping) cbs.on_train_batch_begin(step, l);
      auto b = [&] {
        const trace::scope traced("data", "next batch");
        return it->next();
      }();
      if (!b) {
        if (o.steps_per_epoch > 0) ran_out = true, ran_out_warning(o.steps_per_epoch, o.epochs);
        break;
      }
      const auto rows = static_cast<std::int64_t>(it->global_rows() ? it->global_rows() : batch_rows(*b));
      same_batch(rows, workers(m));  // before the step: a refused resume changes nothing
      auto take_preemption = [&] {
        cbs.on_preemption(l);  // the backup at this step boundary
        throw preempted("fit: preempted (SIGTERM) after epoch " + std::to_string(epoch + 1) + ", batch " +
                        std::to_string(step) + "; the job can restart and resume from its backup");
      };
      bool preempt = false;
      if (rides) {
        const auto ahead = it->ahead();
        const auto r = m.riders();
        r[0] = stopping ? 1.0f : 0.0f, r[1] = preemption_requested() ? 1.0f : 0.0f;
        r[2] = ahead ? (*ahead)[0] : 0.0f, r[3] = ahead ? (*ahead)[1] : 0.0f;
        {
          const trace::scope traced("step", "train_step");
          train_on_batch(m, *b, o.class_weight, it->global_rows(), l);
        }
        const auto sums = m.rider_sums();
        preempt = sums[1] > 0.0f;
        if (m.step_dropped()) {  // a worker stopped after the last batch: this step never happened
          handle.stop_training = dropped = true;
          if (preempt) take_preemption();
          break;
        }
        if (ahead) it->agreed({sums[2], sums[3]});
        // the batch logs are every worker's running values, as tf.keras shows them each step: the step
        // summed the states with its last gradients (the model keeps its own)
        l = m.worker_results();
      } else {
        const trace::scope traced("step", "train_step");
        train_on_batch(m, *b, o.class_weight, it->global_rows(), l);
      }
      handle.position.global_batch = std::max(handle.position.global_batch, rows);
      at(epoch, step + 1, it->state());
      cbs.on_train_batch_end(step++, l);
      if (rides) {
        if (preempt) take_preemption();
        stopping = handle.stop_training;
        continue;
      }
      // a SIGTERM during the step or its callbacks counts at this step
      std::tie(handle.stop_training, preempt) = agree_to_stop(m, handle.stop_training, preemption_requested());
      if (preempt) take_preemption();
      if (handle.stop_training) break;
    }
    if (step == 0) break;  // nothing was trained this epoch: no logs to report
    aggregate_metrics(m);
    l = m.metric_results();
    // at the epoch's end a backup resumes at the next epoch's start
    if (o.steps_per_epoch > 0) at(epoch + 1, 0, dropped ? handle.position.data : it->state());
    else at(epoch + 1, 0, data::iterator_state{std::uint64_t(epoch + 1), 0});
    if (o.validation_data && (epoch + 1) % o.validation_freq == 0) {
      const logs v = o.validation_data.visit([&](const auto& vd) {
        return run_evaluate(m, vd, {.steps = o.validation_steps, .verbose = 0, .callbacks = cbs});
      });
      for (const auto& [k, x] : v) l.set("val_" + k, x);
    }
    cbs.on_epoch_end(epoch, l);
    handle.stop_training = agree_to_stop(m, handle.stop_training, false).first;  // one replica's stop is all's
    if (handle.stop_training) break;
  }
  m.optimizer().finalize_variable_values(m.parameters());  // use_ema: the weights become their average
  cbs.on_train_end(l);
  return *hist;
}

/// The arrays (x: one per input, y: one per output) as the model's dataset: rows [from, to).
template <class Model>
auto slices(std::span<const tensor> x, std::span<const tensor> y, std::size_t from, std::size_t to) {
  if constexpr (std::is_same_v<element_of<Model>, data::example>) {
    if (x.size() != 1 || y.size() != 1)
      throw shape_error("fit: the model takes one input and one output but got " + std::to_string(x.size()) +
                        " input and " + std::to_string(y.size()) + " target arrays");
    return data::from_tensor_slices(rows_of(x[0], from, to), rows_of(y[0], from, to));
  } else {
    return data::from_tensor_slices(rows_of(x, from, to), rows_of(y, from, to));
  }
}
/// The same with sample weights `w` (one tensor for all outputs, or one per output).
template <class Model>
auto weighted_slices(const char* what, std::span<const tensor> x, std::span<const tensor> y, std::span<const tensor> w,
                     std::size_t from, std::size_t to) {
  if constexpr (std::is_same_v<element_of<Model>, data::example>) {
    if (x.size() != 1 || y.size() != 1 || w.size() != 1)
      throw shape_error(std::string(what) + ": the model takes one input and one output but got " + std::to_string(x.size()) + " input, " +
                        std::to_string(y.size()) + " target and " + std::to_string(w.size()) + " sample_weight arrays");
    return data::from_tensor_slices(rows_of(x[0], from, to), rows_of(y[0], from, to), rows_of(w[0], from, to));
  } else {
    return data::from_tensor_slices(rows_of(x, from, to), rows_of(y, from, to), rows_of(w, from, to));
  }
}
/// `f(slice)` with `slice(from, to)` the dataset of rows [from, to) of the arrays, weighted by `w` if
/// given (checked for `what`: fit, evaluate).
template <class Model, class F>
auto with_slices(const char* what, std::span<const tensor> x, std::span<const tensor> y, std::span<const tensor> w, F f) {
  for (const tensor& t : w)
    if (t.dimension() == 0 || x[0].dimension() == 0 || t.shape()[0] != x[0].shape()[0])
      throw shape_error(std::string(what) + ": x of shape " + shape_str(x[0].shape()) + " and sample_weight of shape " + shape_str(t.shape()) +
                        " do not hold the same number of samples");
  if (w.empty()) return f([&](std::size_t from, std::size_t to) { return slices<Model>(x, y, from, to); });
  return f([&](std::size_t from, std::size_t to) { return weighted_slices<Model>(what, x, y, w, from, to); });
}

template <class Model>
history run_fit_arrays(Model& m, std::span<const tensor> x, std::span<const tensor> y,
                       basic_fit_options<element_of<Model>> o) {
  if (x.empty() || y.empty()) throw shape_error("fit: no x or no y arrays");
  for (const auto* list : {&x, &y})
    for (const tensor& t : *list)
      if (t.dimension() == 0 || x[0].dimension() == 0 || t.shape()[0] != x[0].shape()[0])
        throw shape_error("fit: x of shape " + shape_str(x[0].shape()) + " and " + (list == &x ? "x" : "y") +
                          " of shape " + shape_str(t.shape()) + " do not hold the same number of samples");
  if (!(o.validation_split >= 0.0 && o.validation_split < 1.0))
    throw value_error("fit: validation_split must be in [0, 1)");
  if (o.batch_size == 0) throw value_error("fit: batch_size must be positive");
  const std::size_t n = x[0].shape()[0];
  const auto split = static_cast<std::size_t>(static_cast<double>(n) * (1.0 - o.validation_split));
  if (o.validation_split > 0.0 && (split == n || split == 0))
    throw value_error("fit: validation_split " + std::to_string(o.validation_split) + " of " + std::to_string(n) +
                      " samples leaves an empty training or validation set");
  const std::vector<tensor> w = std::exchange(o.sample_weight, {});
  return with_slices<Model>("fit", x, y, w, [&](auto slice) {
    if (o.validation_split > 0.0) o.validation_data = slice(split, n) | data::batch(o.batch_size);  // weighted too
    auto train = slice(0, split);
    o.validation_split = 0.0;
    if (o.shuffle) return run_fit(m, train | data::shuffle(split, o.seed) | data::batch(o.batch_size), std::move(o));
    return run_fit(m, train | data::batch(o.batch_size), std::move(o));
  });
}

/// What the model's `fit`, `evaluate` and `predict` members call.
template <class Model>
struct trainer {
  using fit_options = basic_fit_options<element_of<Model>>;
  using evaluate_options = dtrain::evaluate_options;
  using predict_options = dtrain::predict_options;
  using prediction_type = typename Model::prediction_type;

  template <data::dataset D>
  static history fit(Model& m, const D& ds, fit_options o) {
    if (o.validation_split > 0.0)
      throw usage_error("fit: validation_split is only supported for in-memory arrays; pass validation_data");
    if (!o.sample_weight.empty())
      throw usage_error("fit: sample_weight is only supported for in-memory arrays; a dataset yields (x, y, "
                        "sample_weight) batches instead");
    return run_fit(m, ds, std::move(o));
  }
  static history fit(Model& m, std::span<const tensor> x, std::span<const tensor> y, fit_options o) {
    return run_fit_arrays(m, x, y, std::move(o));
  }
  template <data::dataset D>
  static logs evaluate(Model& m, const D& ds, evaluate_options o) {
    if (!m.compiled()) throw usage_error("evaluate: call compile() first (the model has no loss or optimizer)");
    if (!o.sample_weight.empty())
      throw usage_error("evaluate: sample_weight is only supported for in-memory arrays; a dataset yields (x, y, "
                        "sample_weight) batches instead");
    return run_evaluate(m, ds, o);
  }
  static logs evaluate(Model& m, std::span<const tensor> x, std::span<const tensor> y, evaluate_options o) {
    if (x.empty() || y.empty()) throw shape_error("evaluate: no x or no y arrays");
    const std::vector<tensor> w = std::exchange(o.sample_weight, {});
    return with_slices<Model>("evaluate", x, y, w, [&](auto slice) {
      return evaluate(m, slice(0, x[0].dimension() ? x[0].shape()[0] : 0) | data::batch(o.batch_size), o);
    });
  }
  template <data::dataset D>
  static prediction_type predict(Model& m, const D& ds, predict_options o) {
    return run_predict(m, ds, o);
  }
  static prediction_type predict(Model& m, std::span<const tensor> x, predict_options o) {
    if constexpr (Model::num_inputs == 1) {
      if (x.size() != 1)
        throw shape_error("predict: the model takes one input but got " + std::to_string(x.size()) + " arrays");
      return run_predict(m, data::from_tensor_slices(x[0]) | data::batch(o.batch_size), o);
    } else {
      return run_predict(m, data::from_tensor_slices(std::vector<tensor>(x.begin(), x.end())) | data::batch(o.batch_size), o);
    }
  }
};

}  // namespace detail
}  // namespace dtrain
