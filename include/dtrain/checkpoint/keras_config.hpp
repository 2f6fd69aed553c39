#pragma once
/// \file
/// A model's architecture as Keras configures it: `keras_config(model)` / `to_json(model)` (Keras'
/// `model.to_json()`: a `Sequential` for `sequential<...>`, a functional `Model` for `functional<...>`,
/// each layer's `get_config`, the shapes it was built for and what it takes), and `check_architecture`,
/// which compares a Keras config read from a file with a model's and names the first layer and setting
/// that differ. What `.keras` files (keras_file.hpp) and the ONNX export (onnx_export.hpp) are made from;
/// needs nlohmann-json only.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/layers/concepts.hpp"
#include "dtrain/model/dtype_policy.hpp"

namespace dtrain::checkpoint {

namespace detail {
using json = nlohmann::json;

/// A float as the shortest decimal that reads back as it (1e-3f is 0.001, not 0.0010000000474974513).
inline double shortest(float v) {
  char b[32];
  const auto r = std::to_chars(b, b + sizeof b, v);
  double d = 0;
  std::from_chars(b, r.ptr, d);
  return d;
}

/// The `config_writer` (layers/concepts.hpp) that layers' `get_config` write their Keras config to.
struct json_config {
  json* j;
  template <class V>
  void set(const char* key, const V& v) {
    if constexpr (std::is_same_v<V, float>) (*j)[key] = shortest(v);
    else (*j)[key] = v;
  }
  json_config object(const char* key, const char* module, const char* class_name) {
    (*j)[key] = {{"module", module}, {"class_name", class_name}, {"config", json::object()}, {"registered_name", nullptr}};
    return {&(*j)[key]["config"]};
  }
};

static_assert(config_writer<json_config>);

template <class L>
concept has_keras_config = requires(json_config& c) { L::get_config(c); };

/// Keras' DTypePolicy object of policy `name` ("float32", "mixed_bfloat16", ...).
inline json dtype_policy(const std::string& name = "float32") {
  return {{"module", "keras"}, {"class_name", "DTypePolicy"}, {"config", {{"name", name}}}, {"registered_name", nullptr}};
}
/// The policy layer L has in model m: float32 for a layer that declares it (in_float32), else the model's.
template <class L, class Model>
std::string layer_dtype_policy(const Model& m) {
  if constexpr (requires { L::dtype_policy_name; }) return L::dtype_policy_name;
  else return m.dtype_policy().name();
}
/// Keras' shape of a batch of `dims`: [null, dims...].
inline json batch_shape(const std::vector<std::size_t>& dims) {
  json s = json::array({nullptr});
  for (std::size_t d : dims) s.push_back(d);
  return s;
}

/// The per-sample shape of each source of `Model` (its inputs, then every node's output).
template <class Model>
std::vector<std::vector<std::size_t>> source_shapes() {
  std::vector<std::vector<std::size_t>> s;
  for (const auto& e : Model::input_shapes()) s.emplace_back(e.begin(), e.end());
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (s.emplace_back(Model::template layer_type<I>::output_shape::dims.begin(),
                    Model::template layer_type<I>::output_shape::dims.end()),
     ...);
  }(std::make_index_sequence<Model::depth>{});
  return s;
}

/// Layer I's entry in Keras' model config: class, config (name, dtype and what `get_config` writes),
/// the shapes it was built for and, in a functional model, the tensors it takes.
template <class Model, std::size_t I>
json layer_entry(const Model& m, const std::string& name, const std::vector<std::vector<std::size_t>>& shapes,
                 bool functional) {
  using L = typename Model::template layer_type<I>;
  static_assert(has_keras_config<L>, "save_keras / load_keras: a layer of the model has no get_config (its Keras "
                                     "config; layers/concepts.hpp), so it cannot be written as Keras has it");
  json config = {{"name", name}, {"dtype", dtype_policy(layer_dtype_policy<L>(m))}};  // (trainable: Keras' default)
  json_config c{&config};
  L::get_config(c);
  const auto& src = Model::graph_type::template sources<I>;
  json in = json::array(), args = json::array();
  for (std::size_t s : src) {
    in.push_back(batch_shape(shapes[s]));
    args.push_back({{"class_name", "__keras_tensor__"},
                    {"config", {{"shape", batch_shape(shapes[s])}, {"dtype", "float32"},
                                {"keras_history", {m.source_name(s), 0, 0}}}}});
  }
  json build = {{"input_shape", src.size() == 1 ? in[0] : in}}, call = json::array({src.size() == 1 ? args[0] : args});
  json kwargs = json::object();
  if constexpr (requires { L::keras_call_inputs; }) {
    // a layer called with its inputs as named arguments (MultiHeadAttention's query, value, key):
    // self-attention is mha(x, x); build_config names each input's shape
    json shapes = json::object();
    call = json::array();
    for (std::size_t k = 0; k < L::keras_call_inputs.size(); ++k) {
      const std::size_t at = src.size() == 1 ? 0 : k;
      if (k < 2 || src.size() > k) call.push_back(args[at]), shapes[std::string(L::keras_call_inputs[k]) + "_shape"] = in[at];
    }
    build = {{"shapes_dict", std::move(shapes)}};
    json_config kc{&kwargs};
    L::call_config(kc);
  }
  json entry = {{"module", "keras.layers"}, {"class_name", L::class_name}, {"config", std::move(config)},
                {"registered_name", nullptr}, {"build_config", std::move(build)}};
  if (functional) {
    entry["name"] = name;
    entry["inbound_nodes"] = json::array({{{"args", std::move(call)}, {"kwargs", std::move(kwargs)}}});
  }
  return entry;
}

inline json input_layer_entry(const std::string& name, const std::vector<std::size_t>& dims, bool functional) {
  json e = {{"module", "keras.layers"}, {"class_name", "InputLayer"},
            {"config", {{"batch_shape", batch_shape(dims)}, {"dtype", "float32"}, {"sparse", false}, {"name", name}}},
            {"registered_name", nullptr}};
  if (functional) e["name"] = name, e["inbound_nodes"] = json::array();
  return e;
}
}  // namespace detail

/// Keras' `model.to_json()` as a JSON value: the model's architecture as Keras' config, a `Sequential`
/// for `sequential<...>`, a functional `Model` for `functional<...>`.
template <class Model>
nlohmann::json keras_config(const Model& m) {
  using detail::json;
  constexpr bool functional = std::string_view(Model::graph_type::name) != "sequential";
  const auto shapes = detail::source_shapes<Model>();
  const auto infos = m.layers();
  json layers = json::array();
  for (std::size_t k = 0; k < Model::num_inputs; ++k) layers.push_back(detail::input_layer_entry(m.source_name(k), shapes[k], functional));
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (layers.push_back(detail::layer_entry<Model, I>(m, infos[I].name, shapes, functional)), ...);
  }(std::make_index_sequence<Model::depth>{});
  json config = {{"name", Model::graph_type::name}, {"trainable", true}, {"dtype", detail::dtype_policy(m.dtype_policy().name())},
                 {"layers", std::move(layers)}};
  if constexpr (functional) {
    json ins = json::array(), outs = json::array();
    for (std::size_t k = 0; k < Model::num_inputs; ++k) ins.push_back({m.source_name(k), 0, 0});
    for (std::size_t o = 0; o < Model::num_outputs; ++o) outs.push_back({m.output_name(o), 0, 0});
    config["input_layers"] = std::move(ins);
    config["output_layers"] = std::move(outs);
    return {{"module", "keras.src.models.functional"}, {"class_name", "Functional"}, {"config", std::move(config)},
            {"registered_name", "Functional"}};
  } else {
    config["build_input_shape"] = detail::batch_shape(shapes[0]);
    return {{"module", "keras"}, {"class_name", "Sequential"}, {"config", std::move(config)}, {"registered_name", nullptr},
            {"build_config", {{"input_shape", detail::batch_shape(shapes[0])}}}};
  }
}

/// Keras' `model.to_json()`.
template <class Model>
std::string to_json(const Model& m) {
  return keras_config(m).dump();
}

namespace detail {

/// Whether the file's config value `theirs` matches the model's `mine`: every key the model has (one the
/// file leaves out counts as None, as Keras reads it), with numbers compared as the float32 (or whole)
/// values the layers take.
inline bool same_value(const json& mine, const json& theirs) {
  if (mine.is_number_float() || (mine.is_number() && theirs.is_number_float()))
    return theirs.is_number() && float(mine.get<double>()) == float(theirs.get<double>());
  if (mine.is_number()) return theirs.is_number() && mine.get<double>() == theirs.get<double>();
  if (mine.is_array()) {
    if (!theirs.is_array() || theirs.size() != mine.size()) return false;
    for (std::size_t i = 0; i < mine.size(); ++i)
      if (!same_value(mine[i], theirs[i])) return false;
    return true;
  }
  if (mine.is_object()) {  // a nested Keras object: its class and config
    if (!theirs.is_object()) return false;
    for (const auto& [k, v] : mine.items())
      if (k != "module" && k != "registered_name" && !same_value(v, theirs.contains(k) ? theirs[k] : json())) return false;
    return true;
  }
  return mine == theirs;
}

/// The file's layer `theirs` in the form of the model's `mine` where Keras has two for one layer: an
/// `Activation("relu")` or `Activation("softmax")` where the model has the ReLU or Softmax layer.
inline json same_layer_as(json theirs, const json& mine) {
  const json& c = theirs["config"];
  if (theirs["class_name"] == "Activation" && c.contains("activation") && c["activation"].is_string()) {
    const std::string a = c["activation"];
    if ((a == "relu" && mine["class_name"] == "ReLU") || (a == "softmax" && mine["class_name"] == "Softmax")) {
      theirs["class_name"] = mine["class_name"];
      theirs["config"].erase("activation");
      if (a == "softmax") theirs["config"]["axis"] = -1;
    }
  }
  return theirs;
}

inline std::string brief(const json& v) {
  const std::string s = v.dump();
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

/// The dtype policy of the model in a file's config.json (Keras 3: a DTypePolicy object; older files: its
/// name, or none: float32). One dtrain cannot compute in (say "int8") is an io_error naming it.
inline ::dtrain::dtype_policy file_dtype_policy(const json& theirs, const std::string& file) {
  const json& d = theirs["config"].contains("dtype") ? theirs["config"]["dtype"] : json("float32");
  std::string name = "float32";
  if (d.is_string()) name = d.get<std::string>();
  else if (d.is_object() && d.contains("config") && d["config"].is_object() && d["config"].contains("name") &&
           d["config"]["name"].is_string())
    name = d["config"]["name"].get<std::string>();
  else if (!d.is_null())
    throw io_error("load_keras: " + file + ": config.json has a model dtype dtrain cannot read: " + brief(d));
  try {
    return ::dtrain::dtype_policy(name);
  } catch (const config_error& e) {
    throw io_error("load_keras: " + file + ": the model's " + e.what());
  }
}

/// Checks the architecture in the file's config.json against the model's (`mine`, keras_config): the
/// inputs' shapes, then each layer in order, its class, its config and, in a functional model, what it
/// takes. The error names the first difference.
inline void check_architecture(const json& mine, const json& theirs, const std::string& file) {
  const std::string where = "load_keras: " + file;
  auto layers_of = [&](const json& model, bool inputs) {
    std::vector<const json*> out;
    if (!model.is_object() || !model.contains("config") || !model["config"].is_object() ||
        !model["config"].contains("layers") || !model["config"]["layers"].is_array())
      throw io_error(where + ": config.json is not a Keras model config (no config.layers)");
    for (const auto& l : model["config"]["layers"]) {
      if (!l.is_object() || !l.contains("class_name") || !l["class_name"].is_string() || !l.contains("config") ||
          !l["config"].is_object())
        throw io_error(where + ": config.json has a layer entry without class_name and config: " + brief(l));
      // Keras records the operations that compute masks (NotEqual, LogicalOr...: module keras.src.ops.*)
      // as nodes of a functional model it saves; dtrain computes masks from the layers themselves
      if (l.value("module", std::string()).starts_with("keras.src.ops.")) continue;
      if ((l["class_name"] == "InputLayer") == inputs) out.push_back(&l);
    }
    return out;
  };
  const std::string kind = theirs.value("class_name", std::string("?"));
  if (kind != "Sequential" && kind != "Functional")
    throw shape_error(where + " holds a Keras " + kind + ", not a Sequential or functional model");
  const auto my_in = layers_of(mine, true), their_in = layers_of(theirs, true);
  if (my_in.size() != their_in.size())
    throw shape_error(where + " holds a model of " + std::to_string(their_in.size()) + " inputs but the model has " +
                      std::to_string(my_in.size()));
  for (std::size_t k = 0; k < my_in.size(); ++k) {
    const json& want = (*my_in[k])["config"]["batch_shape"];
    const json& have = (*their_in[k])["config"].value("batch_shape", json());
    if (!same_value(want, have))
      throw shape_error(where + ": input " + std::to_string(k) + " has shape " + brief(have) + " in the file but " +
                        brief(want) + " in the model");
  }
  const auto mine_l = layers_of(mine, false), theirs_l = layers_of(theirs, false);
  const bool functional = kind == "Functional" && mine["class_name"] == "Functional";
  for (std::size_t i = 0; i < std::max(mine_l.size(), theirs_l.size()); ++i) {
    auto name = [](const json* l) { return l->at("config").value("name", std::string("?")); };
    const std::string at = where + ": layer " + std::to_string(i) + " (";
    if (i >= theirs_l.size())
      throw shape_error(at + name(mine_l[i]) + ") is absent from the file, which has " + std::to_string(theirs_l.size()) +
                        " layers after its inputs");
    if (i >= mine_l.size())
      throw shape_error(at + name(theirs_l[i]) + " in the file) is absent from the model, which has " +
                        std::to_string(mine_l.size()) + " layers after its inputs");
    const json& a = *mine_l[i];
    const json b = same_layer_as(*theirs_l[i], a);
    const std::string both = name(&a) == name(&b) ? name(&a) + ")" : name(&a) + " in the model, " + name(&b) + " in the file)";
    if (a["class_name"] != b["class_name"])
      throw shape_error(at + both + " is " + b["class_name"].get<std::string>() + " in the file but " +
                        a["class_name"].get<std::string>() + " in the model");
    for (const auto& [k, v] : a["config"].items()) {
      if (k == "name" || k == "trainable" || k == "dtype") continue;
      const json have = b["config"].value(k, json());
      if (!same_value(v, have))
        throw shape_error(at + both + ", a " + a["class_name"].get<std::string>() + ", has " + k + " = " + brief(have) +
                          " in the file but " + brief(v) + " in the model");
    }
    if (b.contains("build_config") && b["build_config"].is_object() && b["build_config"].contains("input_shape") &&
        !same_value(a["build_config"]["input_shape"], b["build_config"]["input_shape"]))
      throw shape_error(at + both + " takes inputs of shape " + brief(b["build_config"]["input_shape"]) +
                        " in the file but " + brief(a["build_config"]["input_shape"]) + " in the model");
    // the call's keyword arguments the model sets (use_causal_mask); one the file leaves out is Keras'
    // default, false
    const json& my_call = a.value("inbound_nodes", json::array());
    const json& their_call = b.value("inbound_nodes", json::array());
    if (functional && !my_call.empty() && my_call[0].contains("kwargs"))
      for (const auto& [k, v] : my_call[0]["kwargs"].items()) {
        json have = false;
        if (!their_call.empty() && their_call[0].is_object() && their_call[0].contains("kwargs") &&
            their_call[0]["kwargs"].is_object() && their_call[0]["kwargs"].contains(k))
          have = their_call[0]["kwargs"][k];
        if (!same_value(v, have))
          throw shape_error(at + both + ", a " + a["class_name"].get<std::string>() + ", is called with " + k + " = " +
                            brief(have) + " in the file but " + brief(v) + " in the model");
      }
    if (functional && b.contains("inbound_nodes")) {  // what each takes, by the file's own names
      auto sources = [](const json& l, const std::map<std::string, std::string>& rename) {
        std::vector<std::string> s;
        std::function<void(const json&)> walk = [&](const json& v) {
          if (v.is_object() && v.value("class_name", "") == "__keras_tensor__") {
            const auto& h = v["config"]["keras_history"];
            const std::string n = h.is_array() && !h.empty() && h[0].is_string() ? h[0].get<std::string>() : "?";
            s.push_back(rename.count(n) ? rename.at(n) : n);
          } else if (v.is_array()) {
            for (const auto& x : v) walk(x);
          } else if (v.is_object()) {
            for (const auto& [k, x] : v.items())
              if (k != "mask") walk(x);  // (a mask passed in a call: see layers_of)
          }
        };
        walk(l.value("inbound_nodes", json()));
        return s;
      };
      std::map<std::string, std::string> rename;  // the file's layer names to the model's
      for (std::size_t k = 0; k < my_in.size(); ++k) rename[(*their_in[k])["config"].value("name", "")] = (*my_in[k])["config"]["name"];
      for (std::size_t j = 0; j <= i; ++j) rename[name(theirs_l[j])] = name(mine_l[j]);
      const auto want = sources(a, {}), have = sources(b, rename);
      if (want != have)
        throw shape_error(at + both + " takes " + json(have).dump() + " in the file but " + json(want).dump() +
                          " in the model");
    }
  }
}
}  // namespace detail

}  // namespace dtrain::checkpoint
