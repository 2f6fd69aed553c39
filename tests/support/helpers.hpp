#pragma once
// Small helpers shared by the tests: a scratch folder, the message of an expected dtrain error or of a
// thread's exception, the difference of two results at their scale, whether Debian's numpy is there,
// weights drawn at random.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <iterator>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include <dtrain/core/error.hpp>
#include <dtrain/core/random.hpp>

namespace dtrain_test {

/// A fresh folder under the system's temp dir, removed with everything in it.
struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    static std::atomic<int> n{0};
    path = std::filesystem::temp_directory_path() /
           ("dtrain_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    std::filesystem::create_directories(path);
  }
  temp_dir(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

/// The message of the dtrain::error `f` throws, or "no error".
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const dtrain::error& e) {
    return e.what();
  }
  return "no error";
}

/// What the exception in `e` says ("" for none): for what worker threads threw.
inline std::string message(const std::exception_ptr& e) {
  try {
    if (e) std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  }
  return "";
}

/// The largest |a - b| over the largest |b|: how far two computations of one tensor (or list of floats)
/// differ, at the tensor's own scale. Products of other shapes (a batch split, another instruction set or
/// BLAS kernel) round differently relative to the magnitudes summed, not to each result, so an element
/// near zero may differ from itself by far more than its own epsilon: compare with this, not per element.
template <class A, class B>
double scaled_difference(const A& a, const B& b) {
  double diff = 0, scale = 0;
  auto i = std::begin(a);
  for (auto j = std::begin(b); j != std::end(b); ++i, ++j) {
    diff = std::max(diff, std::abs(double(*i) - double(*j)));
    scale = std::max(scale, std::abs(double(*j)));
  }
  return scale == 0 ? diff : diff / scale;
}

/// Whether Debian's python3-numpy is installed (interop checks skip cleanly without it).
inline bool have_numpy() { return std::system("/usr/bin/python3 -c 'import numpy' > /dev/null 2>&1") == 0; }

/// Sets every weight of `m` to a normal draw times 0.5 (moving variances to 0.5 + |draw|, positive), so
/// that no value is an initialiser's: what a saved file is checked with.
template <class Model>
void randomize_weights(Model& m, std::uint64_t seed) {
  dtrain::rng r(seed);
  std::vector<float> w = m.get_weights();
  for (auto& v : w) v = r.normal() * 0.5f;
  for (const auto& l : m.layers())
    for (const auto& v : l.variables)
      if (v.name == "moving_variance")
        for (std::size_t i = 0; i < v.size; ++i) w[v.offset + i] = 0.5f + std::abs(w[v.offset + i]);
  m.set_weights(w);
}

}  // namespace dtrain_test
