#pragma once
/// \file
/// Keras `callbacks.ReduceLROnPlateau`: `reduce_lr_on_plateau({...})` lowers the optimizer's learning rate
/// when the monitored quantity has stopped improving.

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "dtrain/callbacks/callback.hpp"
#include "dtrain/callbacks/monitor_mode.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain {

struct reduce_lr_on_plateau_options {
  std::string monitor = "val_loss";
  float factor = 0.1f;
  int patience = 10;
  int verbose = 0;
  monitor_mode mode = monitor_mode::auto_;
  float min_delta = 1e-4f;
  int cooldown = 0;
  float min_lr = 0.0f;
};

/// Keras `callbacks.ReduceLROnPlateau`: multiplies the learning rate by `factor` after `patience`
/// epochs without improvement, then waits `cooldown` epochs.
class reduce_lr_on_plateau : public callback {
 public:
  explicit reduce_lr_on_plateau(reduce_lr_on_plateau_options o = {}) : o_(std::move(o)), m_{o_.monitor, o_.mode, o_.min_delta} {
    if (!(o_.factor < 1.0f)) throw value_error("reduce_lr_on_plateau: factor must be < 1");
  }
  void on_train_begin(const logs&) override {
    m_.reset();
    wait_ = 0, cooldown_ = 0;
  }
  void on_epoch_end(int epoch, const logs& l) override {
    const auto v = m_.read(l, "Learning rate reduction");
    if (!v) return;
    if (cooldown_ > 0) --cooldown_, wait_ = 0;
    if (m_.improved(*v)) {
      m_.best = *v, wait_ = 0;
    } else if (cooldown_ == 0 && ++wait_ >= o_.patience) {
      auto& opt = model().optimizer();
      const float old = opt.learning_rate();
      if (old > o_.min_lr) {
        const float lr = std::max(old * o_.factor, o_.min_lr);
        opt.set_learning_rate(lr);
        if (o_.verbose > 0) std::printf("\nEpoch %d: ReduceLROnPlateau reducing learning rate to %g.\n", epoch + 1, lr);
        cooldown_ = o_.cooldown, wait_ = 0;
      }
    }
  }

 private:
  reduce_lr_on_plateau_options o_;
  detail::monitor m_;
  int wait_ = 0, cooldown_ = 0;
};

}  // namespace dtrain
