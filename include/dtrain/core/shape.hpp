#pragma once
/// \file
/// Compile-time per-sample shapes. The batch dimension is the only run-time extent in dtrain;
/// every other extent is a template argument, so a mismatched layer stack fails to compile.

#include <array>
#include <cstddef>
#include <string>

namespace dtrain {

/// A per-sample shape, e.g. `shape<28, 28, 1>` for one grey image (channels last, as Keras).
template <std::size_t... D>
struct shape {
  static constexpr std::size_t rank = sizeof...(D);
  static constexpr std::size_t size = (std::size_t{1} * ... * D);
  static constexpr std::array<std::size_t, rank> dims{D...};

  /// Keras' spelling of a batched shape: `(None, 26, 26, 32)`.
  static std::string str(const char* batch = "None") {
    std::string s = "(";
    s += batch;
    ((s += ", " + std::to_string(D)), ...);
    return s + ")";
  }
};

namespace detail {
template <class T>
struct is_shape : std::false_type {};
template <std::size_t... D>
struct is_shape<shape<D...>> : std::true_type {};
}  // namespace detail

/// Satisfied by `shape<D...>`.
template <class S>
concept static_shape = detail::is_shape<S>::value;

/// A run-time shape rendered like `(32, 28, 28)`, for error messages.
template <class Range>
std::string shape_str(const Range& dims) {
  std::string s = "(";
  bool first = true;
  for (auto d : dims) {
    if (!first) s += ", ";
    s += std::to_string(d);
    first = false;
  }
  if (dims.size() == 1) s += ",";
  return s + ")";
}

}  // namespace dtrain
