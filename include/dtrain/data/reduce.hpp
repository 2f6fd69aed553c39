#pragma once
/// \file
/// `reduce(dataset, initial, f)`: tf.data's `Dataset.reduce`, a fold over one pass (not a stage: it
/// returns the folded value).

#include <utility>

#include "dtrain/data/dataset.hpp"

namespace dtrain::data {

/// `Dataset.reduce(initial, f)`: folds one pass.
template <dataset D, class T, class F>
T reduce(const D& d, T initial, F f) {
  auto it = d.iterate(0);
  while (auto e = it.next()) initial = f(std::move(initial), std::move(*e));
  return initial;
}

}  // namespace dtrain::data
