#pragma once
/// \file
/// Keras `callbacks.EarlyStopping`: `early_stopping({.monitor =, .patience =, ...})` stops training when
/// the monitored quantity has stopped improving, optionally restoring the best epoch's weights.

#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/callbacks/callback.hpp"
#include "dtrain/callbacks/monitor_mode.hpp"

namespace dtrain {

struct early_stopping_options {
  std::string monitor = "val_loss";
  float min_delta = 0.0f;
  int patience = 0;
  int verbose = 0;
  monitor_mode mode = monitor_mode::auto_;
  std::optional<float> baseline{};
  bool restore_best_weights = false;
  int start_from_epoch = 0;
};

/// Keras `callbacks.EarlyStopping`: stops when the monitored quantity has not improved for `patience` epochs.
class early_stopping : public callback {
 public:
  explicit early_stopping(early_stopping_options o = {}) : o_(std::move(o)), m_{o_.monitor, o_.mode, o_.min_delta} {}

  int stopped_epoch() const { return stopped_epoch_; }
  int best_epoch() const { return best_epoch_; }

  void on_train_begin(const logs&) override {
    wait_ = 0, stopped_epoch_ = 0, best_epoch_ = 0;
    m_.reset(o_.baseline);
    best_weights_.clear();
  }
  void on_epoch_end(int epoch, const logs& l) override {
    const auto v = m_.read(l, "Early stopping");
    if (!v || epoch < o_.start_from_epoch) return;
    if (o_.restore_best_weights && best_weights_.empty()) save_weights();
    ++wait_;
    if (m_.improved(*v)) {
      m_.best = *v, best_epoch_ = epoch, wait_ = 0;
      if (o_.restore_best_weights) save_weights();
      return;
    }
    if (wait_ >= o_.patience && epoch > 0) {
      stopped_epoch_ = epoch;
      model().stop_training = true;
    }
  }
  void on_train_end(const logs&) override {
    if (stopped_epoch_ > 0 && o_.verbose > 0) std::printf("Epoch %d: early stopping\n", stopped_epoch_ + 1);
    if (stopped_epoch_ > 0 && o_.restore_best_weights && !best_weights_.empty()) {
      if (o_.verbose > 0) std::printf("Restoring model weights from the end of the best epoch: %d.\n", best_epoch_ + 1);
      model().set_weights(best_weights_);
    }
  }

 private:
  void save_weights() { best_weights_ = model().get_weights(); }
  early_stopping_options o_;
  detail::monitor m_;
  int wait_ = 0, stopped_epoch_ = 0, best_epoch_ = 0;
  std::vector<float> best_weights_;
};

}  // namespace dtrain
