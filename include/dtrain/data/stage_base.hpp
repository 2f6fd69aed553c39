#pragma once
/// \file
/// What every pipeline stage is built on: `detail::over`, the base that holds a stage's upstream and
/// forwards its options; `detail::iter_t`, the type of an upstream's iterator; and `detail::mix`, which
/// derives the per-pass seeds of the stages that draw random numbers. Each stage's header (data/shuffle.hpp,
/// data/batch.hpp, ...) includes this one; data/stages.hpp includes them all.

#include <cstdint>
#include <utility>

#include "dtrain/data/dataset.hpp"

namespace dtrain::data {

namespace detail {

/// splitmix64: derives independent per-pass seeds from (seed, pass).
constexpr std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a + 0x9e3779b97f4a7c15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <class D>
using iter_t = decltype(std::declval<const D&>().iterate(0));

/// Base of a stage dataset: holds the upstream, forwards cardinality and options.
template <class D>
struct over {
  D up;
  data::options options() const { return up.options(); }
};

}  // namespace detail

}  // namespace dtrain::data
