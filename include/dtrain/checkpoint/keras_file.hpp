#pragma once
/// \file
/// Keras 3 `.keras` files, both ways: `save_keras(model, "model.keras")` writes what Keras'
/// `model.save("model.keras")` writes (a zip of `metadata.json`, `config.json`: the architecture as Keras'
/// `Sequential` or functional `Model` config, and `model.weights.h5`: every weight under Keras' HDF5 paths),
/// so `keras.saving.load_model` opens it and predicts as the dtrain model does; `load_keras(model, path)`
/// reads a `.keras` file Keras (or dtrain) wrote into the matching dtrain model type, after checking the
/// file's architecture layer by layer against the model's: an error names the first layer that differs
/// and how. `to_json(model)` is Keras' `model.to_json()`.
///
/// The weights only: the optimizer's state and the compile settings stay in dtrain's own model files
/// (model_io.hpp), which resume training exactly; a `.keras` file is for moving a model between dtrain
/// and Keras. Needs the `dtrain::keras` target (HDF5 and libzip; Debian: libhdf5-dev libzip-dev). The
/// HDF5 library Debian builds is not thread-safe: save and load `.keras` files from one thread at a time.

#include <hdf5.h>
#include <zip.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/checkpoint/model_io.hpp"
#include "dtrain/core/file_io.hpp"
#include "dtrain/layers/concepts.hpp"

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

inline json dtype_policy() {
  return {{"module", "keras"}, {"class_name", "DTypePolicy"}, {"config", {{"name", "float32"}}}, {"registered_name", nullptr}};
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
  json config = {{"name", name}, {"dtype", dtype_policy()}};  // (trainable: Keras' default; not every layer takes it)
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
  json entry = {{"module", "keras.layers"}, {"class_name", L::class_name}, {"config", std::move(config)},
                {"registered_name", nullptr}, {"build_config", {{"input_shape", src.size() == 1 ? in[0] : in}}}};
  if (functional) {
    entry["name"] = name;
    entry["inbound_nodes"] = json::array({{{"args", json::array({src.size() == 1 ? args[0] : args})}, {"kwargs", json::object()}}});
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
  json config = {{"name", Model::graph_type::name}, {"trainable", true}, {"dtype", detail::dtype_policy()},
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

/// HDF5 handles, closed once; HDF5's own error printing is off while one is alive (errors come back as
/// negative ids and become dtrain errors here).
class h5 {
 public:
  h5(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  h5(const h5&) = delete;
  h5& operator=(const h5&) = delete;
  ~h5() {
    if (id_ >= 0) close_(id_);
  }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};
class h5_quiet {
 public:
  h5_quiet() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  h5_quiet(const h5_quiet&) = delete;
  h5_quiet& operator=(const h5_quiet&) = delete;
  ~h5_quiet() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

/// An HDF5 file in memory (the core driver, no file on disk): an empty one to write, or `image` to read.
inline hid_t h5_memory_file(const std::vector<char>* image) {
  h5 fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (!fapl.ok() || H5Pset_fapl_core(fapl.get(), 1 << 20, 0) < 0) return -1;
  if (!image) return H5Fcreate("model.weights.h5", H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
  if (H5Pset_file_image(fapl.get(), const_cast<char*>(image->data()), image->size()) < 0) return -1;
  return H5Fopen("model.weights.h5", H5F_ACC_RDONLY, fapl.get());
}

/// An HDF5 file (Keras' model.weights.h5) holding `tensors` as float32 datasets at their names.
inline std::vector<char> h5_image(const std::vector<tensor_view>& tensors, const std::string& file) {
  h5_quiet quiet;
  auto fail = [&](const std::string& what) { return io_error("save_keras: " + file + ": HDF5 cannot " + what); };
  h5 f(h5_memory_file(nullptr), H5Fclose);
  h5 lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  if (!f.ok() || !lcpl.ok() || H5Pset_create_intermediate_group(lcpl.get(), 1) < 0) throw fail("create a file in memory");
  for (const auto& t : tensors) {
    std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
    h5 space(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
    h5 ds(space.ok() ? H5Dcreate2(f.get(), t.name.c_str(), H5T_IEEE_F32LE, space.get(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT) : -1,
          H5Dclose);
    if (!ds.ok() || H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data.data()) < 0)
      throw fail("write the dataset " + t.name);
  }
  if (H5Fflush(f.get(), H5F_SCOPE_GLOBAL) < 0) throw fail("flush the file");
  const ssize_t n = H5Fget_file_image(f.get(), nullptr, 0);
  std::vector<char> image(n > 0 ? std::size_t(n) : 0);
  if (n <= 0 || H5Fget_file_image(f.get(), image.data(), image.size()) != n) throw fail("copy the file out of memory");
  return image;
}

/// Reads the float datasets `want` names out of HDF5 file `image` into `base` (where the views point),
/// naming the first missing, mis-shaped or non-float one.
inline void h5_read(const std::vector<char>& image, const std::vector<tensor_view>& want, std::span<float> base,
                    const std::string& file) {
  h5_quiet quiet;
  const std::string where = "load_keras: " + file + ": model.weights.h5";
  h5 f(h5_memory_file(&image), H5Fclose);
  if (!f.ok()) throw io_error(where + " is not an HDF5 file HDF5 can open");
  for (const auto& w : want) {
    // walk the path so that a missing group is "no dataset", not an HDF5 error
    bool present = true;
    for (std::size_t at = w.name.find('/'); present; at = w.name.find('/', at + 1)) {
      present = H5Lexists(f.get(), w.name.substr(0, at).c_str(), H5P_DEFAULT) > 0;
      if (at == std::string::npos) break;
    }
    if (!present) throw io_error(where + " has no dataset '" + w.name + "'");
    h5 ds(H5Dopen2(f.get(), w.name.c_str(), H5P_DEFAULT), H5Dclose);
    h5 space(ds.ok() ? H5Dget_space(ds.get()) : -1, H5Sclose);
    h5 type(ds.ok() ? H5Dget_type(ds.get()) : -1, H5Tclose);
    if (!space.ok() || !type.ok()) throw io_error(where + ": '" + w.name + "' is not a dataset");
    const int rank = H5Sget_simple_extent_ndims(space.get());
    std::vector<hsize_t> dims(rank > 0 ? std::size_t(rank) : 0);
    if (rank < 0 || H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0)
      throw io_error(where + ": dataset '" + w.name + "' has no simple shape");
    const std::vector<std::size_t> shape(dims.begin(), dims.end());
    if (shape != w.shape)
      throw shape_error(where + ": dataset '" + w.name + "' has shape " + shape_str(shape) + " but the model expects " +
                        shape_str(w.shape));
    if (H5Tget_class(type.get()) != H5T_FLOAT)
      throw io_error(where + ": dataset '" + w.name + "' does not hold floating-point numbers");
    float* out = base.data() + (w.data.data() - base.data());
    if (H5Dread(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0)
      throw io_error(where + ": dataset '" + w.name + "' cannot be read");
  }
}

/// A zip archive in memory of `entries` (name, bytes), stored uncompressed as Keras stores them.
inline std::vector<char> zip_image(const std::vector<std::pair<std::string, std::string_view>>& entries,
                                   const std::string& file) {
  auto fail = [&](const std::string& what) { return io_error("save_keras: " + file + ": libzip cannot " + what); };
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* src = zip_source_buffer_create(nullptr, 0, 0, &error);
  if (!src) throw fail("create an archive in memory");
  zip_t* za = zip_open_from_source(src, ZIP_TRUNCATE, &error);
  if (!za) {
    zip_source_free(src);
    throw fail("open an archive in memory");
  }
  zip_source_keep(src);  // the bytes outlive zip_close
  struct release {
    zip_source_t* s;
    ~release() { zip_source_free(s); }
  } keep{src};
  for (const auto& [name, bytes] : entries) {
    zip_source_t* s = zip_source_buffer(za, bytes.data(), bytes.size(), 0);
    const zip_int64_t i = s ? zip_file_add(za, name.c_str(), s, ZIP_FL_ENC_UTF_8) : -1;
    if (i < 0 || zip_set_file_compression(za, zip_uint64_t(i), ZIP_CM_STORE, 0) < 0) {
      if (s && i < 0) zip_source_free(s);
      zip_discard(za);
      throw fail("add " + name);
    }
  }
  if (zip_close(za) < 0) {
    const std::string why = zip_strerror(za);
    zip_discard(za);
    throw fail("write the archive (" + why + ")");
  }
  zip_stat_t st;
  std::vector<char> out;
  if (zip_source_stat(src, &st) < 0 || !(st.valid & ZIP_STAT_SIZE) || zip_source_open(src) < 0)
    throw fail("read the archive back");
  out.resize(st.size);
  const zip_int64_t n = zip_source_read(src, out.data(), out.size());
  zip_source_close(src);
  if (n != zip_int64_t(out.size())) throw fail("read the archive back");
  return out;
}

/// A zip archive open for reading; `read` returns an entry, checked against its CRC and a size cap.
class zip_reader {
 public:
  explicit zip_reader(const std::filesystem::path& path) : file_(path.string()) {
    int code = 0;
    za_ = zip_open(file_.c_str(), ZIP_RDONLY, &code);
    if (!za_) {
      zip_error_t e;
      zip_error_init_with_code(&e, code);
      const std::string why = zip_error_strerror(&e);
      zip_error_fini(&e);
      throw io_error("load_keras: " + file_ + " cannot be opened as a zip archive, which a .keras file is (" + why + ")");
    }
  }
  zip_reader(const zip_reader&) = delete;
  zip_reader& operator=(const zip_reader&) = delete;
  ~zip_reader() { zip_discard(za_); }

  bool has(const char* name) const { return zip_name_locate(za_, name, 0) >= 0; }
  std::vector<char> read(const char* name, std::uint64_t cap) const {
    zip_stat_t st;
    if (zip_stat(za_, name, 0, &st) < 0) throw io_error("load_keras: " + file_ + " has no " + name);
    if (!(st.valid & ZIP_STAT_SIZE) || st.size > cap)
      throw io_error("load_keras: " + file_ + ": " + name + " declares " + std::to_string(st.size) +
                     " bytes, over the " + std::to_string(cap) + " this model's file can hold");
    std::vector<char> out(st.size);
    zip_file_t* f = zip_fopen(za_, name, 0);
    if (!f) throw io_error("load_keras: " + file_ + ": " + name + " cannot be opened (" + zip_strerror(za_) + ")");
    const zip_int64_t n = zip_fread(f, out.data(), out.size());
    char extra;  // reading past the end checks the CRC
    const zip_int64_t more = n == zip_int64_t(out.size()) ? zip_fread(f, &extra, 1) : -1;
    const std::string why = more != 0 ? zip_file_strerror(f) : "";
    zip_fclose(f);
    if (more != 0) throw io_error("load_keras: " + file_ + ": " + name + " is damaged (" + why + ")");
    return out;
  }

 private:
  std::string file_;
  zip_t* za_ = nullptr;
};

/// Whether the file's config value `theirs` matches the model's `mine`: every key the model has, with
/// numbers compared as the float32 (or whole) values the layers take.
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
      if (k != "module" && k != "registered_name" && (!theirs.contains(k) || !same_value(v, theirs[k]))) return false;
    return true;
  }
  return mine == theirs;
}

inline std::string brief(const json& v) {
  const std::string s = v.dump();
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
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
    const json &a = *mine_l[i], &b = *theirs_l[i];
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
    if (functional && b.contains("inbound_nodes")) {  // what each takes, by the file's own names
      auto sources = [](const json& l, const std::map<std::string, std::string>& rename) {
        std::vector<std::string> s;
        std::function<void(const json&)> walk = [&](const json& v) {
          if (v.is_object() && v.value("class_name", "") == "__keras_tensor__") {
            const auto& h = v["config"]["keras_history"];
            const std::string n = h.is_array() && !h.empty() && h[0].is_string() ? h[0].get<std::string>() : "?";
            s.push_back(rename.count(n) ? rename.at(n) : n);
          } else if (v.is_array() || v.is_object()) {
            for (const auto& x : v) walk(x);
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

/// Keras `model.save(path)` for a `.keras` file: the architecture and the weights, written atomically
/// (the file at `path` is the old one or the new one, never a part); `keras.saving.load_model(path)`
/// opens it.
template <class Model>
void save_keras(const Model& m, const std::filesystem::path& path) {
  const std::vector<float> w = m.get_weights();
  const std::vector<char> weights = detail::h5_image(weight_views(layout_of(m), w), path.string());
  const std::string config = to_json(m);
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::strftime(date, sizeof date, "%Y-%m-%d@%H:%M:%S", &utc);
  const std::string metadata =
      nlohmann::json{{"keras_version", "3.0.0"}, {"date_saved", date}, {"dtrain_version", version}}.dump();
  const auto zip = detail::zip_image({{"metadata.json", metadata},
                                      {"config.json", config},
                                      {"model.weights.h5", std::string_view(weights.data(), weights.size())}},
                                     path.string());
  dtrain::detail::write_file_atomic(path, zip);
}

/// Keras `keras.saving.load_model(path)` into `m`, a model of the file's architecture: checks the file's
/// config against the model's, layer by layer (a `shape_error` naming the first layer that differs and
/// how), then reads every weight (a damaged file is an `io_error`). A refused file leaves `m` as it was.
template <class Model>
void load_keras(Model& m, const std::filesystem::path& path) {
  const detail::zip_reader zip(path);
  const model_layout l = layout_of(m);
  const auto text = zip.read("config.json", std::uint64_t(64) << 20);
  detail::json theirs;
  try {
    theirs = detail::json::parse(text.begin(), text.end());
  } catch (const detail::json::exception& e) {
    throw io_error("load_keras: " + path.string() + ": config.json is not JSON (" + e.what() + ")");
  }
  detail::check_architecture(keras_config(m), theirs, path.string());
  if (!zip.has("model.weights.h5"))
    throw io_error("load_keras: " + path.string() + " has no model.weights.h5 (dtrain reads a .keras file's weights "
                   "in Keras' default HDF5 format)");
  // the weights, perhaps an optimizer's state (Adam: 2 slots more) and HDF5's overhead
  const auto image = zip.read("model.weights.h5", std::uint64_t(l.weight_count) * 4 * 8 + (std::uint64_t(64) << 20));
  std::vector<float> staged(l.weight_count);
  detail::h5_read(image, weight_views(l, staged), staged, path.string());
  m.set_weights(staged);
}

/// `keras.saving.load_model(path)` as a `Model` (seeded as `Model()` is, then every weight read).
template <class Model>
Model load_keras(const std::filesystem::path& path) {
  Model m;
  load_keras(m, path);
  return m;
}

}  // namespace dtrain::checkpoint
