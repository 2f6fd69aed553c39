#pragma once
/// \file
/// Saving and loading models: weights under Keras' `.weights.h5` paths (`layers/dense/vars/0`,
/// `optimizer/vars/N`) in a safetensors file, with the dtrain version and the model's signature (its
/// layers, classes and variable shapes) in the metadata, so a file is never loaded into a model of
/// another architecture: the error names the first difference.
///
/// Works on any model type with `layers()`, `get_weights()` / `set_weights()` (host copies, whatever the
/// model's backend) and (for the optimizer) `optimizer()`, so this folder does not depend on model/.

#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/checkpoint/compile_config.hpp"
#include "dtrain/checkpoint/safetensors.hpp"
#include "dtrain/core/random.hpp"
#include "dtrain/data/npy.hpp"
#include "dtrain/optimizers/optimizer.hpp"
#include "dtrain/version.hpp"

namespace dtrain::checkpoint {

/// The model's architecture as text: one `name:Class[shape|shape]` entry per layer.
template <class Model>
std::string signature(const Model& m) {
  std::string s;
  for (const auto& l : m.layers()) {  // appends only: GCC 12 misreads `"x" + string` (-Wstringop-overflow)
    if (!s.empty()) s += ';';
    s.append(l.name).append(":").append(l.class_name).append("[");
    for (std::size_t v = 0; v < l.variables.size(); ++v) s.append(v ? "|" : "").append(shape_str(l.variables[v].shape));
    s += ']';
  }
  return s;
}

/// What reading and writing a model's values needs of the model, taken from it once: its signature, its
/// variables (Keras' names, shapes, where each lies in `get_weights()`) and, when it is compiled, its
/// optimizer. The reader and writer below work on a layout, so they are written once, not per model type.
struct model_layout {
  struct variable {
    std::string name;  // layers/<layer>/vars/<i> (or a sublayer's path: layers/lstm/cell/vars/<i>)
    std::vector<std::size_t> shape;
    std::size_t offset = 0, size = 0;
    bool trainable = true;
  };
  struct optimizer_info {
    std::string name;
    bool constant_rate = true;  // a constant rate is state (a callback may change it); a schedule's is not
    std::optional<std::string> compile_config;  // nothing when a part of the compile has none
  };
  std::string signature;
  std::vector<variable> variables;  // in get_weights() order
  std::size_t weight_count = 0;     // get_weights().size()
  std::size_t trainable_count = 0;  // parameters().size(): the optimizer's slots are copies of these
  std::optional<optimizer_info> optimizer;  // when the model is compiled
};

/// The layout of `m` now (its optimizer as compiled).
template <class Model>
model_layout layout_of(const Model& m) {
  model_layout l{signature(m), {}, 0, m.parameters().size(), std::nullopt};
  for (const auto& layer : m.layers())
    for (std::size_t v = 0; v < layer.variables.size(); ++v) {
      const auto& var = layer.variables[v];
      const std::string path = var.keras_path.empty() ? "vars/" + std::to_string(v) : var.keras_path;
      l.variables.push_back({"layers/" + layer.name + "/" + path, var.shape, var.offset, var.size, var.trainable});
      l.weight_count = std::max(l.weight_count, var.offset + var.size);
    }
  if (m.compiled())
    l.optimizer = model_layout::optimizer_info{m.optimizer().name(), m.optimizer().learning_rate_is_constant(),
                                               compile_config(m)};
  return l;
}

/// The weights `p` (a host copy of every weight: `get_weights()`), named as Keras' .weights.h5 names them.
inline std::vector<tensor_view> weight_views(const model_layout& l, std::span<const float> p) {
  std::vector<tensor_view> out;
  for (const auto& v : l.variables) out.push_back({v.name, v.shape, p.subspan(v.offset, v.size)});
  return out;
}
template <class Model>
std::vector<tensor_view> weight_views(const Model& m, std::span<const float> p) {
  return weight_views(layout_of(m), p);
}

/// The two scalars that lead the optimizer's variables, as Keras types them.
struct optimizer_scalars {
  std::int64_t iterations = 0;
  float learning_rate = 0;
};

/// The optimizer's variables in Keras' order and types: vars/0 iterations (int64), vars/1 learning rate,
/// then for each trainable variable its slots (Adam: momentum, velocity). `scalars` keeps the two scalars alive.
/// (A wrapping optimizer's own values, `optimizer_state::extra`, go in "optimizer/extra" beside them.)
inline std::vector<tensor_view> optimizer_views(const model_layout& l, const optimizer_state& st,
                                                optimizer_scalars& scalars) {
  std::vector<tensor_view> out{{"optimizer/vars/0", {}, {}, std::span<const std::int64_t>(&scalars.iterations, 1)},
                               {"optimizer/vars/1", {}, std::span<const float>(&scalars.learning_rate, 1)}};
  const std::size_t n = l.trainable_count;
  const std::size_t slots = n ? st.slots.size() / n : 0;
  std::size_t k = 2;
  for (const auto& var : l.variables)
    for (std::size_t s = 0; var.trainable && s < slots; ++s)
      out.push_back({"optimizer/vars/" + std::to_string(k++), var.shape,
                     std::span<const float>(st.slots).subspan(s * n + var.offset, var.size)});
  return out;
}

namespace detail {
inline std::map<std::string, std::string> metadata(const model_layout& l, const std::string& kind) {
  return {{"format", "keras"}, {"dtrain.version", version}, {"dtrain.kind", kind}, {"dtrain.signature", l.signature}};
}

/// Compares the file's signature with the model's and names the first difference (a `shape_error`:
/// the file is fine, the model is another one).
inline void check_signature(const model_layout& l, const safetensors_file& f, const std::string& file,
                            const char* what) {
  auto it = f.metadata.find("dtrain.signature");
  if (it == f.metadata.end()) return;  // a file from elsewhere: the per-tensor checks below decide
  const std::string& mine = l.signature;
  const std::string& theirs = it->second;
  if (mine == theirs) return;
  auto split = [](const std::string& s) {
    std::vector<std::string> v;
    std::size_t i = 0;
    for (;;) {
      const auto j = s.find(';', i);
      v.push_back(s.substr(i, j - i));
      if (j == std::string::npos) break;
      i = j + 1;
    }
    return v;
  };
  const auto a = split(mine), b = split(theirs);
  for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i)
    if (i >= a.size() || i >= b.size() || a[i] != b[i])
      throw shape_error(std::string(what) + ": " + file + " holds another architecture: layer " + std::to_string(i) + " is " +
                     (i < b.size() ? b[i] : "absent") + " in the file but " + (i < a.size() ? a[i] : "absent") +
                     " in the model");
}

/// Copies the file's tensors into `base`, where the `want` views point, naming the first missing or
/// mis-shaped one.
inline void copy_in(const safetensors_file& f, const std::vector<tensor_view>& want, std::span<float> base,
                    const std::string& file, const char* what) {
  for (const auto& w : want) {
    const named_tensor* t = f.find(w.name);
    if (!t) throw io_error(std::string(what) + ": " + file + " has no tensor '" + w.name + "'");
    if (t->shape != w.shape)
      throw shape_error(std::string(what) + ": " + file + ": tensor '" + w.name + "' has shape " + shape_str(t->shape) +
                     " but the model expects " + shape_str(w.shape));
    if (!t->int64.empty()) throw io_error(std::string(what) + ": " + file + ": tensor '" + w.name + "' is I64, not F32");
    std::copy(t->data.begin(), t->data.end(), base.begin() + (w.data.data() - base.data()));
  }
}
}  // namespace detail

/// Keras `model.save_weights(path)`.
template <class Model>
void save_weights(const Model& m, const std::filesystem::path& path) {
  const std::vector<float> w = m.get_weights();
  const model_layout l = layout_of(m);
  save_safetensors(path, weight_views(l, w), detail::metadata(l, "weights"));
}

/// Keras `model.load_weights(path)`: the file must hold this architecture's variables.
template <class Model>
void load_weights(Model& m, const std::filesystem::path& path) {
  const auto f = load_safetensors(path);
  const model_layout l = layout_of(m);
  detail::check_signature(l, f, path.string(), "load_weights");
  std::vector<float> staged = m.get_weights();  // nothing changes unless all fit
  detail::copy_in(f, weight_views(l, staged), staged, path.string(), "load_weights");
  m.set_weights(staged);
}

/// What a model file holds for a model: its weights, and the optimizer's state and constant learning
/// rate when the model is compiled with that optimizer. `read_model` fills it from a file, checked
/// against the model but not yet in it, so a refused file changes nothing.
struct model_values {
  std::vector<float> weights;
  std::optional<optimizer_state> optimizer;
  std::optional<float> learning_rate;  // a constant rate is state: a callback (ReduceLROnPlateau) may change it
  float rate_now = 0;  // the rate at these values' step (a schedule's too), written as optimizer/vars/1
};

/// The model's values now.
template <class Model>
model_values values_of(Model& m) {
  model_values v{m.get_weights(), std::nullopt, std::nullopt};
  if (m.compiled()) {
    v.optimizer = m.optimizer().state();
    v.rate_now = m.optimizer().learning_rate();
    if (m.optimizer().learning_rate_is_constant()) v.learning_rate = v.rate_now;
  }
  return v;
}

/// Writes `v` (values of a model of layout `l`) with its signature, `extra` metadata and `more` tensors to `path`.
inline void save_values(const model_layout& l, const model_values& v, const std::filesystem::path& path,
                        const std::map<std::string, std::string>& extra = {},
                        const std::vector<tensor_view>& more = {}) {
  auto tensors = weight_views(l, v.weights);
  auto meta = detail::metadata(l, "model");
  optimizer_scalars scalars;
  if (v.optimizer && l.optimizer) {
    const optimizer_state& st = *v.optimizer;
    scalars = {st.iterations, v.learning_rate.value_or(v.rate_now)};
    auto ov = optimizer_views(l, st, scalars);
    tensors.insert(tensors.end(), ov.begin(), ov.end());
    if (!st.extra.empty()) tensors.push_back({"optimizer/extra", {st.extra.size()}, st.extra});
    meta["dtrain.optimizer"] = l.optimizer->name;
    meta["dtrain.optimizer.iterations"] = std::to_string(st.iterations);
    const std::size_t n = l.trainable_count;
    meta["dtrain.optimizer.slots"] = std::to_string(n == 0 ? 0 : st.slots.size() / n);
    if (l.optimizer->compile_config) meta["dtrain.compile"] = *l.optimizer->compile_config;
  }
  for (const auto& [k, x] : extra) meta[k] = x;
  tensors.insert(tensors.end(), more.begin(), more.end());
  save_safetensors(path, tensors, meta);
}

/// Keras `model.save(path)`: weights, optimizer state and the architecture's signature; extra named
/// strings go into the metadata.
template <class Model>
void save_model(Model& m, const std::filesystem::path& path, const std::map<std::string, std::string>& extra = {}) {
  save_values(layout_of(m), values_of(m), path, extra);
}

namespace detail {
/// The metadata value `key` of `f`, which must be there.
inline const std::string& meta_text(const safetensors_file& f, const std::string& key, const std::string& file) {
  const auto it = f.metadata.find(key);
  if (it == f.metadata.end()) throw io_error("load_model: " + file + ": the metadata has no '" + key + "'");
  return it->second;
}
/// The metadata value `key` of `f` as a whole number in [lo, hi].
inline std::int64_t meta_int(const safetensors_file& f, const std::string& key, const std::string& file, std::int64_t lo,
                             std::int64_t hi) {
  const std::string& v = meta_text(f, key, file);
  std::int64_t x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc{} || end != v.data() + v.size() || x < lo || x > hi)
    throw io_error("load_model: " + file + ": metadata '" + key + "' is \"" + v.substr(0, 40) +
                   "\", not a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}
}  // namespace detail

/// What `save_values` / `save_model` wrote in `f` (named `file` in errors), checked against the layout
/// `l`: the architecture, the optimizer, every shape and number. Every weight is in the file (the
/// variables cover them all). A damaged file is an `io_error`, another model or optimizer a
/// `shape_error` / `value_error`.
inline model_values read_values(const model_layout& l, const safetensors_file& f, const std::string& file) {
  detail::check_signature(l, f, file, "load_model");
  model_values v{std::vector<float>(l.weight_count), std::nullopt, std::nullopt};
  detail::copy_in(f, weight_views(l, v.weights), v.weights, file, "load_model");
  if (!l.optimizer || !f.metadata.count("dtrain.optimizer.iterations")) return v;
  const std::string name = detail::meta_text(f, "dtrain.optimizer", file);
  if (name != l.optimizer->name)
    throw value_error("load_model: " + file + " holds the state of optimizer " + name +
                      " but the model is compiled with " + l.optimizer->name);
  // every slot is a copy of the parameters that the file must hold: that bounds what is allocated
  std::size_t in_file = 0;
  for (const auto& t : f.tensors) in_file += t.data.size();
  const std::size_t n = l.trainable_count;
  const auto slots = std::size_t(detail::meta_int(f, "dtrain.optimizer.slots", file, 0, std::int64_t(n ? in_file / n : 0)));
  optimizer_state& st = v.optimizer.emplace();
  st.iterations = detail::meta_int(f, "dtrain.optimizer.iterations", file, 0, std::numeric_limits<std::int64_t>::max());
  if (const named_tensor* it = f.find("optimizer/vars/0"); it && it->int64.size() == 1 && it->int64[0] != st.iterations)
    throw io_error("load_model: " + file + ": optimizer/vars/0 says " + std::to_string(it->int64[0]) +
                   " iterations but the metadata says " + std::to_string(st.iterations));
  st.slots.assign(slots * n, 0.0f);
  optimizer_scalars scalars;
  const auto want = optimizer_views(l, st, scalars);
  for (std::size_t i = 2; i < want.size(); ++i) {
    const named_tensor* t = f.find(want[i].name);
    if (!t || t->shape != want[i].shape || t->data.size() != want[i].data.size())
      throw io_error("load_model: " + file + ": optimizer tensor '" + want[i].name + "' is missing or mis-shaped");
    std::copy(t->data.begin(), t->data.end(), st.slots.begin() + (want[i].data.data() - st.slots.data()));
  }
  if (const named_tensor* e = f.find("optimizer/extra")) {  // a wrapping optimizer's values (the loss scale)
    if (e->shape.size() != 1 || e->data.size() != e->shape[0] || e->data.size() > 16)
      throw io_error("load_model: " + file + ": optimizer/extra is mis-shaped");
    st.extra = e->data;
  }
  const named_tensor* lr = f.find("optimizer/vars/1");
  if (l.optimizer->constant_rate && lr && lr->data.size() == 1) {
    if (!(std::isfinite(lr->data[0]) && lr->data[0] >= 0.0f))
      throw io_error("load_model: " + file + ": the learning rate (optimizer/vars/1) is " + std::to_string(lr->data[0]) +
                     ", not a finite non-negative number");
    v.learning_rate = lr->data[0];
  }
  return v;
}
/// `read_values` against `m`'s layout; `m` is not changed.
template <class Model>
model_values read_model(const Model& m, const safetensors_file& f, const std::string& file) {
  return read_values(layout_of(m), f, file);
}

/// Puts what `read_model` returned into `m`.
template <class Model>
void apply_values(Model& m, model_values v) {
  m.set_weights(v.weights);
  if (v.optimizer) m.optimizer().set_state(std::move(*v.optimizer));
  if (v.learning_rate) m.optimizer().set_learning_rate(*v.learning_rate);
}

/// Restores what `save_model` wrote into `m` (weights, and the optimizer state when `m` is compiled with
/// the same optimizer); returns the file's metadata. A refused file leaves `m` as it was.
template <class Model>
std::map<std::string, std::string> restore_model(Model& m, const std::filesystem::path& path) {
  const auto f = load_safetensors(path);
  apply_values(m, read_model(m, f, path.string()));
  return f.metadata;
}

/// The weights as a NumPy .npz archive (`numpy.load(path)["layers/dense/vars/0"]`).
template <class Model>
void export_npz(const Model& m, const std::filesystem::path& path) {
  std::map<std::string, tensor> arrays;
  const std::vector<float> weights = m.get_weights();
  for (const auto& v : weight_views(m, weights)) arrays[v.name] = from_span(v.data, extents(v.shape.begin(), v.shape.end()));
  data::write_npz(path, arrays);
}

/// `keras.models.load_model(path)` for a known architecture: builds `Model`, compiles it as the saved
/// model was (when the file carries its compile config, compile_config.hpp) and restores it, so `fit`
/// goes on with the optimizer's moments, iteration count and schedule position.
template <class Model>
Model load_model(const std::filesystem::path& path) {
  Model m;
  const auto f = load_safetensors(path);
  if (const auto it = f.metadata.find("dtrain.compile"); it != f.metadata.end()) {
    compile_settings s = compile_settings_from(it->second, Model::num_outputs, path.string());
    m.compile({.optimizer = std::move(s.optimizer), .losses = std::move(s.losses),
               .loss_weights = std::move(s.loss_weights), .output_metrics = std::move(s.output_metrics)});
  }
  apply_values(m, read_model(m, f, path.string()));
  return m;
}

}  // namespace dtrain::checkpoint
