#pragma once
/// \file
/// What the callbacks that watch a logged quantity share (early_stopping, reduce_lr_on_plateau,
/// model_checkpoint): `monitor_mode`, Keras' `mode`, and `detail::monitor`, which tracks the quantity's
/// best value.

#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>

#include "dtrain/core/logs.hpp"

namespace dtrain {

/// Keras' `mode`: which direction is better.
enum class monitor_mode { auto_, min, max };

namespace detail {
/// Tracks the best value of a monitored quantity.
struct monitor {
  std::string name;
  monitor_mode mode;
  float min_delta;
  float best = 0.0f;

  void reset(std::optional<float> baseline = std::nullopt) {
    best = baseline ? *baseline : (higher_is_better() ? -std::numeric_limits<float>::infinity()
                                                      : std::numeric_limits<float>::infinity());
  }
  bool higher_is_better() const {
    if (mode != monitor_mode::auto_) return mode == monitor_mode::max;
    return name.find("acc") != std::string::npos || name.rfind("fmeasure", 0) == 0 || name.find("auc") != std::string::npos;
  }
  bool improved(float v) const {
    return higher_is_better() ? v - std::fabs(min_delta) > best : v + std::fabs(min_delta) < best;
  }
  /// The value in `l`, or nothing (with Keras' warning naming what is available).
  std::optional<float> read(const logs& l, const char* who) const {
    if (l.contains(name)) return l.at(name);
    std::string avail;
    for (const auto& [k, v] : l) avail += (avail.empty() ? "" : ",") + k;
    std::fprintf(stderr, "WARNING: %s conditioned on metric `%s` which is not available. Available metrics are: %s\n",
                 who, name.c_str(), avail.c_str());
    return std::nullopt;
  }
};
}  // namespace detail

}  // namespace dtrain
