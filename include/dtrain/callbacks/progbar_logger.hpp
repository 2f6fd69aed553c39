#pragma once
/// \file
/// Keras `callbacks.ProgbarLogger` in tf.keras 2's format. On a terminal (verbose 1) a live bar:
///     `  23/70 [=========>....................] - ETA: 1s - loss: 0.5012 - accuracy: 0.8361`
/// ending with `70/70 [==============================] - 1s 9ms/step - loss: ... - accuracy: ...`.
/// When the output is not a terminal, verbose 1 prints only that final line per epoch (unless
/// `DTRAIN_PROGRESS=live`: a launcher that forwards the lines to a terminal sets it); verbose 2
/// prints `70/70 - 1s - loss: ... - 1s/epoch - 9ms/step`; verbose 0 prints nothing.

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "dtrain/core/environment.hpp"
#include "dtrain/callbacks/callback.hpp"

namespace dtrain {

namespace detail {
/// A metric value as Keras prints it.
inline std::string keras_number(float v) {
  char b[32];
  std::snprintf(b, sizeof b, std::fabs(v) > 1e-3f || v == 0.0f ? "%.4f" : "%.4e", static_cast<double>(v));
  return b;
}
inline std::string logs_text(const logs& l, const std::string& prefix = "") {
  std::string s;
  for (const auto& [k, v] : l) s += " - " + prefix + k + ": " + keras_number(v);
  return s;
}
inline std::string duration_text(double seconds) {
  char b[32];
  if (seconds >= 1.0 || seconds == 0.0)
    std::snprintf(b, sizeof b, "%.0fs", seconds);
  else if (seconds >= 1e-3)
    std::snprintf(b, sizeof b, "%.0fms", seconds * 1e3);
  else
    std::snprintf(b, sizeof b, "%.0fus", seconds * 1e6);
  return b;
}

/// Whether a bar on `out` redraws itself: a terminal, or a pipe to one (`DTRAIN_PROGRESS=live`).
inline bool live_output(std::FILE* out) {
  if (isatty(fileno(out))) return true;
  return environment::get(environment::progress) == "live";
}
}  // namespace detail

/// A Keras progress bar over `target` steps (-1 when unknown), printing to `out`.
class progbar {
 public:
  progbar(std::int64_t target, int verbose, std::FILE* out = stdout)
      : target_(target), verbose_(verbose), out_(out), dynamic_(detail::live_output(out)),
        start_(clock::now()) {}

  /// Step `current` is done; `l` holds the running results. `final` forces the closing line.
  void update(std::int64_t current, const logs& l, bool final = false) {
    if (verbose_ == 0) return;
    const double elapsed = seconds_since(start_);
    const bool finished = final;  // the last batch still draws the bar; epoch end closes it (Keras)
    if (verbose_ == 1 && dynamic_ && !finished) {
      if (seconds_since(last_) < 0.1 && current > 1) return;  // at most 10 redraws a second
      last_ = clock::now();
      const double per = current > 0 ? elapsed / static_cast<double>(current) : 0.0;
      std::string line = "\r" + counter(current) + bar(current);
      if (target_ > 0) line += " - ETA: " + eta(per * static_cast<double>(target_ - current));
      line += detail::logs_text(l);
      const std::size_t len = line.size();
      if (len < width_) line += std::string(width_ - len, ' ');
      width_ = len;
      std::fputs(line.c_str(), out_);
      std::fflush(out_);
      return;
    }
    if (!finished) return;
    const double per = current > 0 ? elapsed / static_cast<double>(current) : 0.0;
    std::string line = dynamic_ && verbose_ == 1 ? "\r" : "";
    const std::string total = " - " + std::to_string(std::lround(elapsed)) + "s";  // whole seconds, as Keras
    if (verbose_ == 1) {
      line += counter(current) + bar(current) + total + " " + detail::duration_text(per) + "/step" + detail::logs_text(l);
    } else {
      line += counter(current) + total + detail::logs_text(l) + " - " + detail::duration_text(elapsed) + "/epoch - " +
              detail::duration_text(per) + "/step";
    }
    if (dynamic_ && line.size() < width_) line += std::string(width_ - line.size(), ' ');
    std::fputs((line + "\n").c_str(), out_);
    std::fflush(out_);
  }

 private:
  using clock = std::chrono::steady_clock;
  static double seconds_since(clock::time_point t) {
    return std::chrono::duration<double>(clock::now() - t).count();
  }
  std::string counter(std::int64_t current) const {
    if (target_ <= 0) {  // Keras: "%7d/Unknown"
      const std::string c = std::to_string(current);
      return std::string(c.size() < 7 ? 7 - c.size() : 0, ' ') + c + "/Unknown";
    }
    const std::string t = std::to_string(target_);
    std::string c = std::to_string(current);
    return std::string(t.size() > c.size() ? t.size() - c.size() : 0, ' ') + c + "/" + t;
  }
  std::string bar(std::int64_t current) const {
    if (target_ <= 0) return "";
    const int w = 30;
    const int done = static_cast<int>(w * std::min<double>(1.0, double(current) / double(target_)));
    std::string b = " [";
    if (done > 0) b += std::string(static_cast<std::size_t>(done - 1), '=') + (current < target_ ? ">" : "=");
    return b + std::string(static_cast<std::size_t>(w - done), '.') + "]";
  }
  static std::string eta(double s) {
    char b[32];
    const long e = std::lround(s);
    if (e > 3600)
      std::snprintf(b, sizeof b, "%ld:%02ld:%02ld", e / 3600, (e % 3600) / 60, e % 60);
    else if (e > 60)
      std::snprintf(b, sizeof b, "%ld:%02ld", e / 60, e % 60);
    else
      std::snprintf(b, sizeof b, "%lds", e);
    return b;
  }

  std::int64_t target_;
  int verbose_;
  std::FILE* out_;
  bool dynamic_;
  clock::time_point start_, last_{};
  std::size_t width_ = 0;
};

/// Prints `Epoch k/n` and a progress bar per epoch; `fit` adds one when verbose > 0.
class progbar_logger : public callback {
 public:
  explicit progbar_logger(std::FILE* out = stdout) : out_(out) {}

  void on_epoch_begin(int epoch, const logs&) override {
    if (params().verbose == 0) return;
    std::fprintf(out_, "Epoch %d/%d\n", epoch + 1, params().epochs);
    std::fflush(out_);
    bar_.emplace(params().steps, params().verbose, out_);
    seen_ = 0;
  }
  void on_train_batch_end(std::int64_t batch, const logs& l) override {
    seen_ = batch + 1;
    if (bar_) bar_->update(seen_, l);
  }
  void on_epoch_end(int, const logs& l) override {
    if (bar_) bar_->update(seen_, l, true);
    bar_.reset();
  }

 private:
  std::FILE* out_;
  std::optional<progbar> bar_;
  std::int64_t seen_ = 0;
};

}  // namespace dtrain
