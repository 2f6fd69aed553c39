#pragma once
/// \file
/// Fashion-MNIST as Debian's `dataset-fashion-mnist` package installs it
/// (/usr/share/datasets/fashion-mnist/*-idx?-ubyte.gz), or from the folder named by the
/// environment variable `DTRAIN_FASHION_MNIST_DIR`. Same format and sizes as MNIST: 60,000 training
/// and 10,000 test images of 28x28 grey pixels, labels 0..9.

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "dtrain/core/environment.hpp"
#include "dtrain/data/idx.hpp"
#include "dtrain/data/sources.hpp"

namespace dtrain::data {

/// Where the files are looked for: $DTRAIN_FASHION_MNIST_DIR, else Debian's location.
inline std::filesystem::path fashion_mnist_dir() {
  if (std::string d = environment::get(environment::fashion_mnist_dir); !d.empty()) return d;
  return "/usr/share/datasets/fashion-mnist";
}

enum class split { train, test };

namespace detail {
inline std::filesystem::path find_idx(const std::filesystem::path& dir, const std::string& stem) {
  for (const char* ext : {".gz", ""}) {
    auto p = dir / (stem + ext);
    if (std::filesystem::exists(p)) return p;
  }
  const std::string env = environment::get(environment::fashion_mnist_dir);
  const std::string where = !env.empty() && dir == std::filesystem::path(env)
                                ? " (the folder DTRAIN_FASHION_MNIST_DIR names): point it at the folder holding "
                                  "the four IDX files (.gz or not)"
                                : "; install it with `apt-get install dataset-fashion-mnist`, or set "
                                  "DTRAIN_FASHION_MNIST_DIR to a folder holding the four IDX files";
  throw io_error("fashion_mnist: " + (dir / (stem + ".gz")).string() + " not found" + where);
}
}  // namespace detail

/// The tutorial's `mnist_setup` on Fashion-MNIST: images (n, 28, 28) scaled to [0, 1], labels (n,).
inline example load_fashion_mnist(split s, const std::filesystem::path& dir = fashion_mnist_dir()) {
  const std::string prefix = s == split::train ? "train" : "t10k";
  const auto ip = detail::find_idx(dir, prefix + "-images-idx3-ubyte");
  const auto lp = detail::find_idx(dir, prefix + "-labels-idx1-ubyte");
  tensor images = read_idx(ip), labels = read_idx(lp);
  if (images.dimension() != 3 || images.shape()[1] != 28 || images.shape()[2] != 28)
    throw io_error("fashion_mnist: " + ip.string() + " holds shape " + shape_str(images.shape()) +
                   ", expected (n, 28, 28) images");
  if (labels.dimension() != 1)
    throw io_error("fashion_mnist: " + lp.string() + " holds shape " + shape_str(labels.shape()) +
                   ", expected (n,) labels");
  if (labels.shape()[0] != images.shape()[0])
    throw io_error("fashion_mnist: " + ip.string() + " has " + std::to_string(images.shape()[0]) + " images but " +
                   lp.string() + " has " + std::to_string(labels.shape()[0]) + " labels");
  for (std::size_t i = 0; i < labels.size(); ++i)
    if (const float v = labels.data()[i]; !(v >= 0.0f && v <= 9.0f) || v != std::floor(v))  // NaN too
      throw io_error("fashion_mnist: " + lp.string() + ": label " + std::to_string(labels.data()[i]) + " at index " +
                     std::to_string(i) + " is not a class in 0..9");
  images /= 255.0f;
  return {std::move(images), std::move(labels)};
}

/// `from_tensor_slices((x_train, y_train))` on the training / test split.
inline tensor_slices<example> fashion_mnist(split s, const std::filesystem::path& dir = fashion_mnist_dir()) {
  auto [x, y] = load_fashion_mnist(s, dir);
  return from_tensor_slices(std::move(x), std::move(y));
}
inline tensor_slices<example> fashion_mnist_train() { return fashion_mnist(split::train); }
inline tensor_slices<example> fashion_mnist_test() { return fashion_mnist(split::test); }

}  // namespace dtrain::data
