#pragma once
/// \file
/// Keras `callbacks.TerminateOnNaN`: `terminate_on_nan` stops training at the first batch whose loss is
/// NaN or infinite.

#include <cmath>
#include <cstdint>
#include <cstdio>

#include "dtrain/callbacks/callback.hpp"

namespace dtrain {

/// Keras `callbacks.TerminateOnNaN`: stops as soon as a batch's loss is NaN or infinite.
class terminate_on_nan : public callback {
 public:
  void on_train_batch_end(std::int64_t batch, const logs& l) override {
    if (l.contains("loss") && !std::isfinite(l.at("loss"))) {
      std::printf("Batch %lld: Invalid loss, terminating training\n", static_cast<long long>(batch));
      model().stop_training = true;
    }
  }
};

}  // namespace dtrain
