#pragma once
/// \file
/// Keras `callbacks.ModelCheckpoint(filepath, monitor, mode, save_best_only, save_weights_only,
/// save_freq)`. `filepath` may hold Keras' fields: `{epoch}` / `{epoch:02d}` (1-based, as Keras) and any
/// logged quantity, e.g. `{val_loss:.4f}`. Only the chief writes (atomically), every worker waits. A
/// full save is a `training_state` (checkpoint/training_state.hpp), which `load_model` reads too.

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <variant>

#include "dtrain/callbacks/callback.hpp"
#include "dtrain/callbacks/monitors.hpp"

namespace dtrain {

struct model_checkpoint_options {
  std::string filepath;
  std::string monitor = "val_loss";
  int verbose = 0;
  bool save_best_only = false;
  bool save_weights_only = false;
  monitor_mode mode = monitor_mode::auto_;
  /// "epoch", or a number of batches.
  std::variant<std::string, std::int64_t> save_freq = std::string("epoch");
};

namespace detail {
/// Fills Keras-style `{name}` / `{name:fmt}` fields from the epoch (1-based) and the logs.
inline std::string format_filepath(const std::string& pattern, int epoch, const logs& l) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '{') {
      out += pattern[i];
      continue;
    }
    const auto close = pattern.find('}', i);
    if (close == std::string::npos) throw value_error("model_checkpoint: unclosed '{' in filepath \"" + pattern + "\"");
    const std::string field = pattern.substr(i + 1, close - i - 1);
    const auto colon = field.find(':');
    const std::string name = field.substr(0, colon), spec = colon == std::string::npos ? "" : field.substr(colon + 1);
    char buf[64];
    if (name == "epoch") {
      const std::string fmt = "%" + (spec.empty() ? std::string("d") : spec);
      std::snprintf(buf, sizeof buf, fmt.c_str(), epoch);
    } else {
      if (!l.contains(name)) throw value_error("model_checkpoint: filepath field {" + name + "} is not in the logs");
      const std::string fmt = "%" + (spec.empty() ? std::string("g") : spec);
      std::snprintf(buf, sizeof buf, fmt.c_str(), static_cast<double>(l.at(name)));
    }
    out += buf;
    i = close;
  }
  return out;
}
}  // namespace detail

class model_checkpoint : public callback {
 public:
  explicit model_checkpoint(model_checkpoint_options o) : o_(std::move(o)), best_{o_.monitor, o_.mode, 0.0f} {
    if (o_.filepath.empty()) throw value_error("model_checkpoint: filepath is required");
    if (const auto* n = std::get_if<std::int64_t>(&o_.save_freq); n && *n <= 0)
      throw value_error("model_checkpoint: save_freq must be positive");
    if (const auto* s = std::get_if<std::string>(&o_.save_freq); s && *s != "epoch")
      throw value_error("model_checkpoint: save_freq must be \"epoch\" or a number of batches");
  }
  void on_train_begin(const logs&) override { best_.reset(); }
  void on_train_batch_end(std::int64_t, const logs& l) override {
    const auto* every = std::get_if<std::int64_t>(&o_.save_freq);
    if (every && model().iterations() % *every == 0) save(model().position.epoch, l);
  }
  void on_epoch_end(int epoch, const logs& l) override {
    if (std::holds_alternative<std::string>(o_.save_freq)) save(epoch, l);
  }

 private:
  void save(int epoch, const logs& l) {
    auto& m = model();
    if (o_.save_best_only) {
      // batch logs are this replica's own: the chief's decision is every replica's
      const auto v = best_.read(l, "ModelCheckpoint");
      if (!m.chief_decides(v && best_.improved(*v))) {
        if (v && o_.verbose > 0 && m.is_chief())
          std::printf("\nEpoch %d: %s did not improve from %.5f\n", epoch + 1, o_.monitor.c_str(), double(best_.best));
        return;
      }
      if (o_.verbose > 0 && m.is_chief())
        std::printf("\nEpoch %d: %s improved from %.5f to %.5f\n", epoch + 1, o_.monitor.c_str(), double(best_.best), double(*v));
      if (v) best_.best = *v;
    }
    const auto state = o_.save_weights_only ? std::optional<training_state>() : m.capture_state();
    if (m.is_chief()) {
      const std::filesystem::path path = detail::format_filepath(o_.filepath, epoch + 1, l);
      if (o_.verbose > 0) std::printf("\nEpoch %d: saving model to %s\n", epoch + 1, path.string().c_str());
      if (state) m.write_state(*state, path);
      else m.save_weights(path);
    }
    m.barrier();
  }

  model_checkpoint_options o_;
  detail::monitor best_;
};

}  // namespace dtrain
