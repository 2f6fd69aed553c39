#pragma once
// Shared by the fuzz harnesses: the input as a file (the readers under test take paths, as users call
// them), and the rule that only a dtrain::error may come out of a reader.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <dtrain/core/error.hpp>

namespace dtrain_fuzz {

/// A file of this process holding `data` (under /dev/shm when there is one: no disk I/O per input).
inline const std::filesystem::path& as_file(const std::uint8_t* data, std::size_t size, const char* suffix = "") {
  static const std::filesystem::path dir =
      std::filesystem::exists("/dev/shm") ? std::filesystem::path("/dev/shm") : std::filesystem::temp_directory_path();
  static std::filesystem::path file;
  file = dir / ("dtrain-fuzz-" + std::to_string(::getpid()) + suffix);
  std::ofstream(file, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), std::streamsize(size));
  return file;
}

/// Runs `f`; a dtrain::error is the expected answer to bad input. Anything else escapes: libFuzzer
/// reports it as a crash (an uncaught exception aborts).
template <class F>
void expect_only_dtrain_errors(F&& f) {
  try {
    f();
  } catch (const dtrain::error&) {
  }
}

/// An image decoder, `decode(channels)`, to its own channels and converted: only dtrain errors, and a
/// decoded image has the shape it claims and its values are bytes.
template <class Decode>
void decode_every_way(Decode decode) {
  for (int channels : {0, 1, 4})
    expect_only_dtrain_errors([&] {
      const auto t = decode(channels);
      if (t.dimension() != 3 || t.size() != t.shape()[0] * t.shape()[1] * t.shape()[2]) __builtin_trap();
      for (float v : t)
        if (!(v >= 0.0f && v <= 255.0f)) __builtin_trap();
    });
}

/// Splits the input at NUL bytes into at most `n` fields (missing ones empty).
inline std::vector<std::string> fields(const std::uint8_t* data, std::size_t size, std::size_t n) {
  std::vector<std::string> out(n);
  std::size_t k = 0;
  for (std::size_t i = 0; i < size && k < n; ++i) {
    if (data[i] == 0) ++k;
    else out[k] += char(data[i]);
  }
  return out;
}

}  // namespace dtrain_fuzz
