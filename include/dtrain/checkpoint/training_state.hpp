#pragma once
/// \file
/// `training_state`: everything `fit` needs to continue exactly where it was, in one type with one
/// encoding, a safetensors file: the weights and optimizer state under Keras' names (model_io.hpp), the
/// metric states as the tensor `dtrain/metric_states`, and the rest as one JSON object in the metadata
/// under `dtrain.training_state`:
///   {"epoch": E, "step": S, "data": {iterator state}, "global_batch": B, "world_size": N, "generator": "..."}
/// `state_io` is the one reader and writer of these files: made from a model's layout, it writes a state
/// and parses a file's bytes, checking all of it against the layout (the model is not touched);
/// `capture_training_state` and `apply_training_state` take a state out of a model and put one in.
/// Under a strategy, restoring is: the chief reads the file and broadcasts its bytes, and every worker
/// runs the same read and apply.
///
/// What is global and what is not: the metric states are the SUM over the replicas (the replica that
/// restores with id 0 takes them, the others start from zero), and the data position counts batches of
/// the global pipeline, so a state resumes on another number of workers when the global batch is the
/// same (`fit` checks that, and that the position is global: FILE sharding's is per worker).

#include <climits>
#include <cstddef>
#include <filesystem>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dtrain/checkpoint/model_io.hpp"
#include "dtrain/core/random.hpp"
#include "dtrain/data/dataset.hpp"

namespace dtrain::checkpoint {

/// Where `fit` is, and the shape of the job it runs in.
struct training_position {
  int epoch = 0;
  std::int64_t step = 0;  // batches done in `epoch`
  data::iterator_state data{};  // the dataset iterator's (written out only with a backup)
  std::int64_t global_batch = 0;  // rows of the largest global batch so far (0: none yet)
  int world_size = 1;
};

struct training_state {
  model_values model;
  rng generator{};
  std::vector<float> metrics;  // the loss tracker's state, then each metric's, summed over the replicas
  training_position position;
};

/// The loss trackers' (the total's, then each output's of a model of several) and metrics' states of
/// `m`, one after the other.
template <class Model>
std::vector<float> metric_states(Model& m) {
  std::vector<float> v(m.loss_tracker().state().values.begin(), m.loss_tracker().state().values.end());
  for (auto& x : m.output_loss_trackers()) v.insert(v.end(), x.state().values.begin(), x.state().values.end());
  for (auto& x : m.metrics()) v.insert(v.end(), x.state().values.begin(), x.state().values.end());
  return v;
}
/// Sets what `metric_states` returns (`v` holds exactly as many values).
template <class Model>
void set_metric_states(Model& m, std::span<const float> v) {
  auto it = v.begin();
  for (float& x : m.loss_tracker().state().values) x = *it++;
  for (auto& tracker : m.output_loss_trackers())
    for (float& x : tracker.state().values) x = *it++;
  for (auto& metric : m.metrics())
    for (float& x : metric.state().values) x = *it++;
}

/// `m`'s state now, with this replica's metric states and an empty position (the caller fills both).
template <class Model>
training_state capture_training_state(Model& m) {
  return {values_of(m), m.generator(), metric_states(m), {}};
}

/// Reads and writes the training states of one model: its layout (model_io.hpp) and the number of metric
/// state values it keeps are all it needs of the model, so it is written once, not per model type.
class state_io {
 public:
  state_io(model_layout layout, std::size_t metric_values) : layout_(std::move(layout)), metric_values_(metric_values) {}
  template <class Model>
  explicit state_io(Model& m) : state_io(layout_of(m), metric_states(m).size()) {}

  const model_layout& layout() const { return layout_; }

  /// Writes `s` (a state of this model) to `path`, atomically.
  void write(const training_state& s, const std::filesystem::path& path) const {
    const nlohmann::json j = {{"epoch", s.position.epoch},
                              {"step", s.position.step},
                              {"data", data::to_json(s.position.data)},
                              {"global_batch", s.position.global_batch},
                              {"world_size", s.position.world_size},
                              {"generator", s.generator.state()}};
    save_values(layout_, s.model, path, {{"dtrain.training_state", j.dump()}},
                {{"dtrain/metric_states", {s.metrics.size()}, s.metrics}});
  }

  /// Parses `bytes` (the file `file`) as a training state of this model, checking everything before
  /// anything is used: a damaged file is an `io_error` naming the file and the damage, a state of another
  /// model or optimizer a `shape_error` / `value_error`.
  training_state read(std::span<const char> bytes, const std::string& file) const {
    const safetensors_file f = parse_safetensors(bytes, file);
    training_state s;
    s.model = read_values(layout_, f, file);
    const auto it = f.metadata.find("dtrain.training_state");
    if (it == f.metadata.end())
      throw io_error(file + " holds no training state (dtrain.training_state): it is not a backup of fit");
    auto damaged = [&](const std::string& what) { return io_error(file + ": the training state is damaged: " + what); };
    const auto j = nlohmann::json::parse(it->second, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw damaged("not a JSON object");
    auto integer = [&](const char* key, std::int64_t lo, std::int64_t hi) {
      const auto k = j.find(key);
      if (k == j.end() || !k->is_number_integer() || k->get<std::int64_t>() < lo || k->get<std::int64_t>() > hi)
        throw damaged(std::string("\"") + key + "\" is " + (k == j.end() ? "missing" : k->dump().substr(0, 40)) +
                      ", not a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
      return k->get<std::int64_t>();
    };
    constexpr std::int64_t most = std::numeric_limits<std::int64_t>::max();
    s.position.epoch = int(integer("epoch", 0, INT_MAX));
    s.position.step = integer("step", 0, most);
    s.position.global_batch = integer("global_batch", 0, most);
    s.position.world_size = int(integer("world_size", 1, INT_MAX));
    try {
      s.position.data = data::iterator_state_from_json(j.contains("data") ? j["data"] : nlohmann::json());
    } catch (const value_error& e) {
      throw damaged(std::string("\"data\" is not a dataset position: ") + e.what());
    }
    if (!j.contains("generator") || !j["generator"].is_string()) throw damaged("\"generator\" is not a string");
    try {
      s.generator.set_state(j["generator"].get<std::string>());
    } catch (const value_error&) {
      throw damaged("\"generator\" is not a generator state");
    }
    const named_tensor* t = f.find("dtrain/metric_states");
    if (!t || t->data.size() != metric_values_)
      throw damaged("the tensor dtrain/metric_states is " +
                    (t ? "of " + std::to_string(t->data.size()) + " values" : std::string("missing")) +
                    "; the model's loss and metrics keep " + std::to_string(metric_values_));
    s.metrics = t->data;
    return s;
  }

 private:
  model_layout layout_;
  std::size_t metric_values_;
};

/// Puts `s` into `m`; `with_metrics` false starts the metrics from zero (every replica but the one that
/// takes the summed states).
template <class Model>
void apply_training_state(Model& m, training_state s, bool with_metrics) {
  apply_values(m, std::move(s.model));
  m.generator() = s.generator;
  if (!with_metrics) std::fill(s.metrics.begin(), s.metrics.end(), 0.0f);
  set_metric_states(m, s.metrics);
}

}  // namespace dtrain::checkpoint
