#pragma once
/// \file
/// Callbacks that watch a logged quantity: early_stopping and reduce_lr_on_plateau (Keras semantics),
/// and the learning-rate scheduler, TerminateOnNaN, CSVLogger and LambdaCallback.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/callbacks/callback.hpp"

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

struct csv_logger_options {
  char separator = ',';
  bool append = false;
};

/// Keras `callbacks.CSVLogger(filename)`: one row per epoch, the epoch then the logs in sorted order
/// (Keras sorts the keys), every value in full precision, flushed as it is written. Under a strategy
/// only the chief writes (the logs are the same on every worker).
class csv_logger : public callback {
 public:
  explicit csv_logger(std::string filename, csv_logger_options o = {}) : file_(std::move(filename)), o_(o) {}
  void on_train_begin(const logs&) override {
    if (!model().is_chief()) return;
    const bool had = o_.append && std::ifstream(file_).good();
    out_ = std::make_shared<std::ofstream>(file_, o_.append ? std::ios::app : std::ios::trunc);
    if (!*out_) throw io_error("csv_logger: cannot open " + file_ + " for writing");
    header_written_ = had;
  }
  void on_epoch_end(int epoch, const logs& l) override {
    if (!out_) return;
    std::vector<std::pair<std::string, float>> sorted(l.begin(), l.end());
    std::sort(sorted.begin(), sorted.end());
    if (!header_written_) {
      *out_ << "epoch";
      for (const auto& [k, v] : sorted) *out_ << o_.separator << k;
      *out_ << '\n';
      header_written_ = true;
    }
    *out_ << epoch;
    for (const auto& [k, v] : sorted) *out_ << o_.separator << detail::full_precision(v);
    *out_ << '\n';
    out_->flush();
  }
  void on_train_end(const logs&) override { out_.reset(); }

 private:
  std::string file_;
  csv_logger_options o_;
  std::shared_ptr<std::ofstream> out_;
  bool header_written_ = false;
};

/// The hooks of a `lambda_callback`, named as Keras' LambdaCallback arguments.
struct lambda_callback_options {
  std::function<void(const logs&)> on_train_begin{}, on_train_end{};
  std::function<void(int, const logs&)> on_epoch_begin{}, on_epoch_end{};
  std::function<void(std::int64_t, const logs&)> on_train_batch_begin{}, on_train_batch_end{};
};

/// Keras `callbacks.LambdaCallback`: any hook as a function.
class lambda_callback : public callback {
 public:
  explicit lambda_callback(lambda_callback_options o) : o_(std::move(o)) {}
  void on_train_begin(const logs& l) override { call(o_.on_train_begin, l); }
  void on_train_end(const logs& l) override { call(o_.on_train_end, l); }
  void on_epoch_begin(int e, const logs& l) override { call(o_.on_epoch_begin, e, l); }
  void on_epoch_end(int e, const logs& l) override { call(o_.on_epoch_end, e, l); }
  void on_train_batch_begin(std::int64_t b, const logs& l) override { call(o_.on_train_batch_begin, b, l); }
  void on_train_batch_end(std::int64_t b, const logs& l) override { call(o_.on_train_batch_end, b, l); }

 private:
  template <class F, class... A>
  static void call(const F& f, const A&... a) {
    if (f) f(a...);
  }
  lambda_callback_options o_;
};

}  // namespace dtrain
