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
/// `fit` / `evaluate` / `predict` members call (model/sequential.hpp declares it; this header defines it).

#include <bit>
#include <cstdio>
#include <memory>
#include <optional>
#include <cstdlib>
#include <sstream>

#include "dtrain/callbacks/callback.hpp"
#include "dtrain/checkpoint/model_io.hpp"
#include "dtrain/core/preemption.hpp"
#include "dtrain/callbacks/history.hpp"
#include "dtrain/callbacks/progbar_logger.hpp"
#include "dtrain/data/any_dataset.hpp"
#include "dtrain/data/stages.hpp"
#include "dtrain/distribute/input.hpp"
#include "dtrain/distribute/replica_context.hpp"

namespace dtrain {

struct fit_options {
  int epochs = 1;
  std::int64_t steps_per_epoch = 0;  // 0: one full pass of the dataset per epoch
  int initial_epoch = 0;
  data::any_dataset<data::example> validation_data{};
  std::int64_t validation_steps = 0;  // 0: the whole validation dataset
  int validation_freq = 1;
  callback_list callbacks{};
  int verbose = 1;  // 0 silent, 1 progress bar, 2 one line per epoch
  // for fit(x, y, ...) on in-memory arrays only:
  std::size_t batch_size = 32;
  bool shuffle = true;
  double validation_split = 0.0;  // the LAST fraction of the arrays, taken before shuffling (Keras)
  std::uint64_t seed = default_seed;  // of the per-epoch shuffle
};

struct evaluate_options {
  std::int64_t steps = 0;  // 0: the whole dataset
  int verbose = 1;
  callback_list callbacks{};
  std::size_t batch_size = 32;  // for evaluate(x, y) only
};

struct predict_options {
  std::int64_t steps = 0;
  int verbose = 0;
  std::size_t batch_size = 32;  // for predict(x) only
};

namespace detail {

template <class Model>
class model_handle final : public training_model {
 public:
  explicit model_handle(Model& m) : m_(m) {}
  std::vector<float> get_weights() override { return m_.get_weights(); }
  void set_weights(std::span<const float> w) override { m_.set_weights(w); }
  any_optimizer& optimizer() override { return m_.optimizer(); }

  void save_state(const std::filesystem::path& path, const std::map<std::string, std::string>& extra) override {
    auto meta = extra;
    meta["dtrain.rng"] = m_.generator().state();
    meta["dtrain.metrics"] = metric_text();
    checkpoint::save_model(m_, path, meta);
  }
  void save_weights(const std::filesystem::path& path) override { checkpoint::save_weights(m_, path); }
  std::map<std::string, std::string> load_state(const std::filesystem::path& path) override {
    // the generator and metric states are checked before restore_model changes anything
    std::optional<rng> generator;
    std::optional<std::vector<float>> metric_states;
    auto meta = checkpoint::restore_model(m_, path, [&](const std::map<std::string, std::string>& meta) {
      if (const auto it = meta.find("dtrain.rng"); it != meta.end()) try {
          generator.emplace().set_state(it->second);
        } catch (const value_error&) {
          throw io_error(path.string() + ": the generator state (dtrain.rng) is damaged");
        }
      if (const auto it = meta.find("dtrain.metrics"); it != meta.end())
        if (!(metric_states = parse_metric_text(it->second)))
          throw io_error(path.string() + ": the metric states (dtrain.metrics) are damaged: expected " +
                         std::to_string(metric_values()) + " numbers");
    });
    if (generator) m_.generator() = *generator;
    if (metric_states) set_metric_states(*metric_states);
    return meta;
  }
  void sync_from_chief(std::string& text) override {
    replica_context* rc = m_.replica();
    if (!rc || rc->num_replicas_in_sync() == 1) return;
    // everything but the parameters and optimizer slots travels as one text
    optimizer_state st = m_.optimizer().state();
    std::string blob = rc->is_chief() ? std::to_string(st.iterations) + "\n" + std::to_string(st.slots.size()) + "\n" +
                                            m_.generator().state() + "\n" + metric_text() + "\n" +
                                            std::to_string(std::bit_cast<std::uint32_t>(m_.optimizer().learning_rate())) +
                                            "\n" + text
                                      : std::string();
    std::uint64_t len = blob.size();
    rc->broadcast_bytes(std::as_writable_bytes(std::span<std::uint64_t>(&len, 1)), 0);
    blob.resize(len);
    rc->broadcast_bytes(std::as_writable_bytes(std::span<char>(blob.data(), blob.size())), 0);
    std::istringstream in(blob);
    std::string line, slots;
    std::getline(in, line), st.iterations = std::stoll(line);
    std::getline(in, slots);
    st.slots.resize(std::stoull(slots));
    std::getline(in, line), m_.generator().set_state(line);
    std::getline(in, line), set_metric_states(parse_metric_text(line).value());  // the chief's own text
    std::getline(in, line);
    if (m_.optimizer().learning_rate_is_constant())
      m_.optimizer().set_learning_rate(std::bit_cast<float>(std::uint32_t(std::stoul(line))));
    std::getline(in, text, '\0');
    std::vector<float> weights = m_.get_weights();
    rc->broadcast(weights, 0);
    m_.set_weights(weights);
    rc->broadcast(st.slots, 0);
    m_.optimizer().set_state(std::move(st));
  }
  bool is_chief() const override { return !m_.replica() || m_.replica()->is_chief(); }
  int num_replicas_in_sync() const override { return m_.replicas(); }
  void barrier() override {
    if (!m_.replica()) return;
    float f = 0.0f;
    m_.replica()->all_reduce(std::span<float>(&f, 1), reduce_op::sum);
  }

 private:
  std::string metric_text() {
    std::ostringstream o;
    o.precision(9);
    for (float v : m_.loss_tracker().state().values) o << v << ' ';
    for (auto& x : m_.metrics())
      for (float v : x.state().values) o << v << ' ';
    return o.str();
  }
  std::size_t metric_values() {
    std::size_t n = m_.loss_tracker().state().values.size();
    for (auto& x : m_.metrics()) n += x.state().values.size();
    return n;
  }
  /// What metric_text wrote, when it is exactly metric_values() numbers.
  std::optional<std::vector<float>> parse_metric_text(const std::string& t) {
    std::istringstream in(t);
    std::vector<float> values(metric_values());
    std::string word;
    for (float& v : values) {  // strtof, unlike >>, reads back the "nan" and "inf" a diverged loss writes
      char* end = nullptr;
      if (!(in >> word) || (v = std::strtof(word.c_str(), &end), *end)) return std::nullopt;
    }
    if (in >> word) return std::nullopt;
    return values;
  }
  void set_metric_states(const std::vector<float>& values) {
    auto it = values.begin();
    for (float& v : m_.loss_tracker().state().values) v = *it++;
    for (auto& x : m_.metrics())
      for (float& v : x.state().values) v = *it++;
  }
  Model& m_;
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
  replica_context* rc = m.replica();
  if (!rc || rc->num_replicas_in_sync() == 1) return;
  std::vector<float> v(m.loss_tracker().state().values.begin(), m.loss_tracker().state().values.end());
  for (auto& x : m.metrics()) v.insert(v.end(), x.state().values.begin(), x.state().values.end());
  rc->all_reduce(v, reduce_op::sum);
  m.loss_tracker().state().values = {v[0], v[1]};
  for (std::size_t i = 0; i < m.metrics().size(); ++i) m.metrics()[i].state().values = {v[2 + 2 * i], v[3 + 2 * i]};
}

/// Under a strategy: stop (or take a preemption) when any replica asks to, so all replicas run the
/// same steps. One tiny all-reduce per step carries both flags.
template <class Model>
std::pair<bool, bool> agree_to_stop(Model& m, bool stop, bool preempt) {
  replica_context* rc = m.replica();
  if (!rc || rc->num_replicas_in_sync() == 1) return {stop, preempt};
  float flags[2] = {stop ? 1.0f : 0.0f, preempt ? 1.0f : 0.0f};
  rc->all_reduce(std::span<float>(flags, 2), reduce_op::max);
  return {flags[0] > 0.0f, flags[1] > 0.0f};
}

template <class Model>
bool replicated(const Model& m) {
  return m.replica() && m.replica()->num_replicas_in_sync() > 1;
}

/// `ds` split among the replicas of the strategy that made `m`, by the dataset's auto-shard policy.
template <class Model, data::dataset D>
distributed_dataset<D> distributed(Model& m, const D& ds) {
  return distributed_dataset<D>(ds, m.replica()->num_replicas_in_sync(), m.replica()->replica_id(), m.replica());
}

template <class Model, data::dataset D>
logs run_evaluate(Model& m, const D& ds, evaluate_options o) {
  static_assert(std::is_same_v<typename D::element_type, data::example>,
                "evaluate: the dataset must yield (x, y) batches (data::example)");
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
  o.callbacks.on_test_begin({});
  auto it = ds.iterate(0);
  std::int64_t step = 0;
  logs l = m.metric_results();
  while (target < 0 || step < target) {
    o.callbacks.on_test_batch_begin(step, l);
    auto b = it.next();
    if (!b) {
      if (o.steps > 0)
        std::fprintf(stderr, "WARNING: Your input ran out of data after %lld of %lld evaluation steps.\n",
                     static_cast<long long>(step), static_cast<long long>(o.steps));
      break;
    }
    if (b->first.shape()[0] > 0) l = m.test_step(b->first, b->second);  // a replica's share may be empty
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
template <class Model>
std::vector<float> gather_predictions(Model& m, const std::vector<float>& local, const std::vector<float>& counts) {
  replica_context* rc = m.replica();
  const std::size_t p = std::size_t(rc->num_replicas_in_sync()), me = std::size_t(rc->replica_id());
  const std::size_t width = Model::output_shape::size;
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
    rc->broadcast(of[r], int(r));
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
tensor run_predict(Model& m, const D& ds, const predict_options& o) {
  if constexpr (!is_distributed<D>::value)
    if (replicated(m))
      return run_predict(m, distributed(m, ds | data::with_options({.auto_shard = data::auto_shard_policy::data})), o);
  strategy_scope scope(m.replica());
  const std::int64_t card = ds.cardinality();
  if (o.steps <= 0 && card == data::infinite) throw usage_error("predict: the dataset repeats forever; pass steps");
  const std::int64_t target = o.steps > 0 ? o.steps : (card >= 0 ? card : -1);
  progbar bar(target, m.replica() && !m.replica()->is_chief() ? 0 : o.verbose);
  auto it = ds.iterate(0);
  std::vector<float> out, counts;
  std::size_t rows = 0;
  std::int64_t step = 0;
  while (target < 0 || step < target) {
    auto b = it.next();
    if (!b) break;
    const std::size_t n = batch_rows(*b);
    if (n > 0) {  // a replica's share may be empty
      const tensor p = m.predict_on_batch(features(*b));
      out.insert(out.end(), p.data(), p.data() + p.size());
    }
    rows += n;
    counts.push_back(float(n));
    bar.update(++step, {});
  }
  bar.update(step, {}, true);
  if (m.replica() && m.replica()->num_replicas_in_sync() > 1) {
    out = gather_predictions(m, out, counts);
    rows = out.size() / Model::output_shape::size;
  }
  extents e{rows};
  for (std::size_t i = 0; i < Model::output_shape::rank; ++i) e.push_back(Model::output_shape::dims[i]);
  return from_span(out, e);
}

template <class Model, data::dataset D>
history run_fit(Model& m, const D& ds, fit_options o) {
  static_assert(std::is_same_v<typename D::element_type, data::example>,
                "fit: the dataset must yield (x, y) batches (data::example)");
  if constexpr (!is_distributed<D>::value)
    if (replicated(m))  // Keras distributes the dataset of a model made in a strategy's scope
      return run_fit(m, distributed(m, ds), std::move(o));
  strategy_scope scope(m.replica());
  if (!m.compiled()) throw usage_error("fit: call compile() first (the model has no loss or optimizer)");
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
  cbs.set_model(&handle);
  cbs.set_params({o.epochs, steps, o.verbose});

  std::optional<data::iterator<D>> it;
  if (o.steps_per_epoch > 0) it.emplace(ds, 0);
  logs l;
  cbs.on_train_begin(l);
  std::optional<training_position> resume = std::exchange(handle.resume, std::nullopt);  // from a backup
  bool ran_out = false;
  for (int epoch = resume ? resume->epoch : o.initial_epoch; epoch < o.epochs && !ran_out; ++epoch) {
    std::int64_t step = 0;
    if (!resume) m.reset_metrics();  // a resumed epoch keeps the restored running metrics
    cbs.on_epoch_begin(epoch, l);
    if (o.steps_per_epoch <= 0) it.emplace(ds, static_cast<std::uint64_t>(epoch));
    if (resume) {
      it->restore(nlohmann::json::parse(resume->data_state));
      step = resume->step;
      resume.reset();
    }
    handle.position = {epoch, step, it->save().dump()};
    l = m.metric_results();
    while (steps < 0 || step < steps) {
      cbs.on_train_batch_begin(step, l);
      auto b = it->next();
      if (!b) {
        if (o.steps_per_epoch > 0) ran_out = true, ran_out_warning(o.steps_per_epoch, o.epochs);
        break;
      }
      l = m.train_step(b->first, b->second, it->global_rows());
      handle.position = {epoch, step + 1, it->save().dump()};
      cbs.on_train_batch_end(step++, l);
      const auto [stop, preempt] = agree_to_stop(m, handle.stop_training, preemption_requested());
      if (preempt) {
        cbs.on_preemption(l);  // the backup at this step boundary
        throw preempted("fit: preempted (SIGTERM) after epoch " + std::to_string(epoch + 1) + ", batch " +
                        std::to_string(step) + "; the job can restart and resume from its backup");
      }
      handle.stop_training = stop;
      if (handle.stop_training) break;
    }
    if (step == 0) break;  // nothing was trained this epoch: no logs to report
    aggregate_metrics(m);
    l = m.metric_results();
    // at the epoch's end a backup resumes at the next epoch's start
    if (o.steps_per_epoch > 0) handle.position = {epoch + 1, 0, it->save().dump()};
    else handle.position = {epoch + 1, 0, data::to_json(data::iterator_state{std::uint64_t(epoch + 1), 0}).dump()};
    if (o.validation_data && (epoch + 1) % o.validation_freq == 0) {
      const logs v = run_evaluate(m, o.validation_data, {.steps = o.validation_steps, .verbose = 0, .callbacks = cbs});
      for (const auto& [k, x] : v) l.set("val_" + k, x);
    }
    cbs.on_epoch_end(epoch, l);
    if (handle.stop_training) break;
  }
  cbs.on_train_end(l);
  cbs.set_model(nullptr);
  return *hist;
}

template <class Model>
history run_fit_arrays(Model& m, const tensor& x, const tensor& y, fit_options o) {
  if (x.dimension() == 0 || y.dimension() == 0 || x.shape()[0] != y.shape()[0])
    throw shape_error("fit: x of shape " + shape_str(x.shape()) + " and y of shape " + shape_str(y.shape()) +
                      " do not hold the same number of samples");
  if (!(o.validation_split >= 0.0 && o.validation_split < 1.0))
    throw value_error("fit: validation_split must be in [0, 1)");
  if (o.batch_size == 0) throw value_error("fit: batch_size must be positive");
  const std::size_t n = x.shape()[0];
  const auto split = static_cast<std::size_t>(static_cast<double>(n) * (1.0 - o.validation_split));
  if (o.validation_split > 0.0) {
    if (split == n || split == 0)
      throw value_error("fit: validation_split " + std::to_string(o.validation_split) + " of " + std::to_string(n) +
                        " samples leaves an empty training or validation set");
    o.validation_data = data::from_tensor_slices(rows_of(x, split, n), rows_of(y, split, n)) | data::batch(o.batch_size);
  }
  auto train = data::from_tensor_slices(rows_of(x, 0, split), rows_of(y, 0, split));
  o.validation_split = 0.0;
  if (o.shuffle) return run_fit(m, train | data::shuffle(split, o.seed) | data::batch(o.batch_size), std::move(o));
  return run_fit(m, train | data::batch(o.batch_size), std::move(o));
}

/// What the model's `fit`, `evaluate` and `predict` members call.
template <class Model>
struct trainer {
  using fit_options = dtrain::fit_options;
  using evaluate_options = dtrain::evaluate_options;
  using predict_options = dtrain::predict_options;

  template <data::dataset D>
  static history fit(Model& m, const D& ds, fit_options o) {
    if (o.validation_split > 0.0)
      throw usage_error("fit: validation_split is only supported for in-memory arrays; pass validation_data");
    return run_fit(m, ds, std::move(o));
  }
  static history fit(Model& m, const tensor& x, const tensor& y, fit_options o) {
    return run_fit_arrays(m, x, y, std::move(o));
  }
  template <data::dataset D>
  static logs evaluate(Model& m, const D& ds, evaluate_options o) {
    if (!m.compiled()) throw usage_error("evaluate: call compile() first (the model has no loss or optimizer)");
    return run_evaluate(m, ds, o);
  }
  static logs evaluate(Model& m, const tensor& x, const tensor& y, evaluate_options o) {
    return evaluate(m, data::from_tensor_slices(x, y) | data::batch(o.batch_size), o);
  }
  template <data::dataset D>
  static tensor predict(Model& m, const D& ds, predict_options o) {
    return run_predict(m, ds, o);
  }
  static tensor predict(Model& m, const tensor& x, predict_options o) {
    return run_predict(m, data::from_tensor_slices(x) | data::batch(o.batch_size), o);
  }
};

}  // namespace detail
}  // namespace dtrain
