#pragma once
// Small helpers shared by the tests: a scratch folder, the message of an expected dtrain error or of a
// thread's exception,
// whether Debian's numpy is there, and free loopback ports.
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include <dtrain/core/error.hpp>

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

/// Whether Debian's python3-numpy is installed (interop checks skip cleanly without it).
inline bool have_numpy() { return std::system("/usr/bin/python3 -c 'import numpy' > /dev/null 2>&1") == 0; }

}  // namespace dtrain_test
