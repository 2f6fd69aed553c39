#pragma once
// The buffers the optimizer-update tests step over: long enough for several threads' chunks, with a
// length that leaves a tail of 3 after every vector width.
#include <cstdint>
#include <vector>

#include <dtrain/dtrain.hpp>

namespace dtrain_test {

inline constexpr std::size_t update_n = 2 * dtrain::detail::update_grain + 4 * 16 + 3;

/// `update_n` uniform values in [lo, hi) from `seed`.
inline std::vector<float> update_values(std::uint64_t seed, float lo, float hi) {
  dtrain::rng r(seed);
  std::vector<float> v(update_n);
  for (auto& x : v) x = r.uniform(lo, hi);
  return v;
}

}  // namespace dtrain_test
