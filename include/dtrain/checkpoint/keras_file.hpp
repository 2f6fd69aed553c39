#pragma once
/// \file
/// Keras 3 `.keras` files, both ways: `save_keras(model, "model.keras")` writes what Keras'
/// `model.save("model.keras")` writes (a zip of `metadata.json`, `config.json`: the architecture as Keras'
/// `Sequential` or functional `Model` config, and `model.weights.h5`: every weight under Keras' HDF5 paths),
/// so `keras.saving.load_model` opens it and predicts as the dtrain model does; `load_keras(model, path)`
/// reads a `.keras` file Keras (or dtrain) wrote into the matching dtrain model type, after checking the
/// file's architecture layer by layer against the model's: an error names the first layer that differs
/// and how (keras_config.hpp).
///
/// The weights only: the optimizer's state and the compile settings stay in dtrain's own model files
/// (model_io.hpp), which resume training exactly; a `.keras` file is for moving a model between dtrain
/// and Keras. Needs the `dtrain::keras` target (HDF5; Debian: libhdf5-dev). The
/// HDF5 library Debian builds is not thread-safe: save and load `.keras` files from one thread at a time.

#include <hdf5.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "dtrain/checkpoint/keras_config.hpp"
#include "dtrain/checkpoint/model_io.hpp"
#include "dtrain/core/file_io.hpp"
#include "dtrain/core/zip.hpp"

namespace dtrain::checkpoint {

namespace detail {

/// An HDF5 handle, closed once.
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
/// While it lives, HDF5 prints no error stack: its errors come back as negative ids and become dtrain
/// errors here.
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
inline hid_t h5_memory_file(std::optional<std::span<const char>> image) {
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
  h5 f(h5_memory_file(std::nullopt), H5Fclose);
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
inline void h5_read(std::span<const char> image, const std::vector<tensor_view>& want, std::span<float> base,
                    const std::string& file) {
  h5_quiet quiet;
  const std::string where = "load_keras: " + file + ": model.weights.h5";
  h5 f(h5_memory_file(image), H5Fclose);
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
  const auto zip = dtrain::detail::zip_archive({{"metadata.json", metadata},
                                                 {"config.json", config},
                                                 {"model.weights.h5", std::string_view(weights.data(), weights.size())}},
                                                "save_keras: " + path.string());
  dtrain::detail::write_file_atomic(path, zip);
}

/// Keras `keras.saving.load_model(path)` into `m`, a model of the file's architecture: checks the file's
/// config against the model's, layer by layer (a `shape_error` naming the first layer that differs and
/// how), then reads every weight (a damaged file is an `io_error`). A refused file leaves `m` as it was.
template <class Model>
void load_keras(Model& m, const std::filesystem::path& path) {
  const std::string file = "load_keras: " + path.string();
  const model_layout l = layout_of(m);
  // the weights, perhaps an optimizer's state (Adam: 2 slots more) and HDF5's overhead; the config; the zip's
  const std::uint64_t config_cap = std::uint64_t(64) << 20, weights_cap = std::uint64_t(l.weight_count) * 4 * 8 + config_cap;
  std::error_code ec;
  if (const auto size = std::filesystem::file_size(path, ec); !ec && size > config_cap + weights_cap + (1 << 20))
    throw io_error(file + ": " + std::to_string(size) + " bytes, more than a .keras file of this model can hold");
  const std::vector<char> bytes = dtrain::detail::read_file(path);
  const dtrain::detail::zip_view zip(bytes, file);
  const auto* config = zip.find("config.json");
  if (!config) throw io_error(file + " has no config.json");
  const auto text = zip.read(*config, config_cap);
  detail::json theirs;
  try {
    theirs = detail::json::parse(text.begin(), text.end());
  } catch (const detail::json::exception& e) {
    throw io_error(file + ": config.json is not JSON (" + e.what() + ")");
  }
  detail::check_architecture(keras_config(m), theirs, path.string());
  const ::dtrain::dtype_policy policy = detail::file_dtype_policy(theirs, path.string());
  const auto* weights = zip.find("model.weights.h5");
  if (!weights)
    throw io_error(file + " has no model.weights.h5 (dtrain reads a .keras file's weights in Keras' default HDF5 "
                   "format)");
  const auto image = zip.read(*weights, weights_cap);
  std::vector<float> staged(l.weight_count);
  detail::h5_read(image, weight_views(l, staged), staged, path.string());
  m.set_weights(staged);
  m.set_dtype_policy(policy);
}

/// `keras.saving.load_model(path)` as a `Model` (seeded as `Model()` is, then every weight read).
template <class Model>
Model load_keras(const std::filesystem::path& path) {
  Model m;
  load_keras(m, path);
  return m;
}

}  // namespace dtrain::checkpoint
