#pragma once
/// \file
/// The seeded random source of dtrain. It is `std::mt19937_64`: its sequence is fixed by the C++
/// standard, so a seed gives the same numbers with every compiler and library. The standard
/// distributions are not portable, so the conversions to float below are written out here.
///
/// Kernels that need many random numbers at once (dropout masks) draw one key from the model's
/// generator and use the counter-based Philox4x32-10 (Salmon et al., SC'11; cuRAND, JAX and TF use it):
/// value i depends on the key and i alone, so every backend computes the same mask in any order.

#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <sstream>
#include <string>

#include "dtrain/core/error.hpp"

namespace dtrain {

/// Default seed for models and stages created without one: runs are reproducible unless asked not to be.
inline constexpr std::uint64_t default_seed = 1337;

/// Seeded generator with a serialisable state (for exact resume).
class rng {
 public:
  explicit rng(std::uint64_t seed = default_seed) : engine_(seed) {}

  std::uint64_t next() { return engine_(); }

  /// Uniform in [0, 1) with 24 random bits (every float in the grid is reachable).
  float uniform() { return static_cast<float>(engine_() >> 40) * 0x1.0p-24f; }
  float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }

  /// Standard normal (Box-Muller on two uniforms; no cached spare, so the state is the engine's alone).
  float normal() {
    const double u1 = (static_cast<double>(engine_() >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(engine_() >> 11) * 0x1.0p-53;
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
  }

  /// Uniform integer in [0, n) without modulo bias (Lemire's method).
  std::uint64_t below(std::uint64_t n) {
    if (n == 0) return 0;
    for (;;) {
      const unsigned __int128 m = static_cast<unsigned __int128>(engine_()) * n;
      const auto low = static_cast<std::uint64_t>(m);
      if (low >= n || low >= (-n) % n) return static_cast<std::uint64_t>(m >> 64);
    }
  }

  /// The engine state as text (the standard's stream format).
  std::string state() const {
    std::ostringstream os;
    os << engine_;
    return os.str();
  }

  void set_state(const std::string& s) {
    std::istringstream is(s);
    std::mt19937_64 e;
    is >> e;
    if (!is) throw value_error("rng::set_state: not a saved mt19937_64 state");
    engine_ = e;
  }

  friend bool operator==(const rng&, const rng&) = default;

 private:
  std::mt19937_64 engine_;
};

/// Philox4x32-10: four random words from a 128-bit counter and a 64-bit key.
constexpr std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> c, std::uint64_t key) {
  std::uint32_t k0 = static_cast<std::uint32_t>(key), k1 = static_cast<std::uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = std::uint64_t{0xD2511F53u} * c[0], p1 = std::uint64_t{0xCD9E8D57u} * c[2];
    c = {static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ k0, static_cast<std::uint32_t>(p1),
         static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ k1, static_cast<std::uint32_t>(p0)};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

/// The four uniform floats in [0, 1) (24 random bits each) at positions 4 block .. 4 block + 3 of the
/// stream of `key`.
constexpr std::array<float, 4> counter_uniform4(std::uint64_t key, std::uint64_t block) {
  const auto w = philox4x32({static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32), 0u, 0u}, key);
  return {static_cast<float>(w[0] >> 8) * 0x1.0p-24f, static_cast<float>(w[1] >> 8) * 0x1.0p-24f,
          static_cast<float>(w[2] >> 8) * 0x1.0p-24f, static_cast<float>(w[3] >> 8) * 0x1.0p-24f};
}

}  // namespace dtrain
