#pragma once
/// \file
/// Keras `callbacks.LearningRateScheduler(schedule)`: `learning_rate_scheduler(f)` sets the learning rate
/// `f(epoch, lr)` at each epoch's start.

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>

#include "dtrain/callbacks/callback.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain {

/// Keras `callbacks.LearningRateScheduler(schedule)`: sets `schedule(epoch, lr)` at each epoch's start.
class learning_rate_scheduler : public callback {
 public:
  explicit learning_rate_scheduler(std::function<float(int, float)> schedule, int verbose = 0)
      : schedule_(std::move(schedule)), verbose_(verbose) {}
  void on_epoch_begin(int epoch, const logs&) override {
    auto& opt = model().optimizer();
    const float lr = schedule_(epoch, opt.learning_rate());
    if (!std::isfinite(lr) || lr < 0.0f)
      throw value_error("learning_rate_scheduler: the schedule returned " + std::to_string(lr) + " for epoch " +
                        std::to_string(epoch));
    opt.set_learning_rate(lr);
    if (verbose_ > 0) std::printf("\nEpoch %d: LearningRateScheduler setting learning rate to %g.\n", epoch + 1, lr);
  }

 private:
  std::function<float(int, float)> schedule_;
  int verbose_;
};

}  // namespace dtrain
