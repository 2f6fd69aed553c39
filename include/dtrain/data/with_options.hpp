#pragma once
/// \file
/// The `with_options(options)` stage: tf.data's `Dataset.with_options`, which sets the options that
/// `distribute_dataset` reads to shard.

#include <cstdint>
#include <utility>

#include "dtrain/data/stage_base.hpp"

namespace dtrain::data {

/// `Dataset.with_options(options)`: what `distribute_dataset` reads to shard.
template <dataset D>
struct options_dataset {
  using element_type = typename D::element_type;
  D up;
  data::options opt;
  std::int64_t cardinality() const { return up.cardinality(); }
  data::options options() const { return opt; }
  void shard_by_files(file_sharding& s)
    requires file_shardable<D>
  {
    up.shard_by_files(s);
  }
  auto iterate(std::uint64_t pass) const { return up.iterate(pass); }
};
struct options_stage {
  data::options opt;
  template <dataset D>
  options_dataset<D> apply(D d) const {
    return {std::move(d), opt};
  }
};
inline options_stage with_options(data::options o) { return {o}; }

}  // namespace dtrain::data
