#pragma once
/// \file
/// Keras `callbacks.ModelCheckpoint(filepath, monitor, mode, save_best_only, save_weights_only,
/// save_freq)`. `filepath` may hold Keras' fields: `{epoch}` / `{epoch:02d}` (1-based, as Keras) and any
/// logged quantity, e.g. `{val_loss:.4f}`. Only the chief writes (atomically), every worker waits. A
/// full save is a `training_state` (checkpoint/training_state.hpp), which `load_model` reads too.

#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "dtrain/callbacks/callback.hpp"
#include "dtrain/callbacks/monitor_mode.hpp"

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
/// A Keras `filepath`: literal text and `{name}` / `{name:spec}` fields, as Python's `str.format` reads
/// it (Keras calls `filepath.format(epoch=epoch + 1, **logs)`): `{{` and `}}` are braces, `epoch` is an
/// integer and every other name a logged float. Parsed once, when the callback is made, so that a
/// pattern Python would refuse (`{epoch:s}`, `{val_loss:d}`, a lone `}`) is an error then, not after an
/// epoch of training; each field's spec becomes a printf conversion of the same output.
class filepath_pattern {
 public:
  explicit filepath_pattern(const std::string& pattern) : pattern_(pattern) {
    std::string text;
    for (std::size_t i = 0; i < pattern.size(); ++i) {
      const char c = pattern[i];
      if ((c == '{' || c == '}') && i + 1 < pattern.size() && pattern[i + 1] == c) {
        text += c, ++i;
        continue;
      }
      if (c == '}') bad("a single '}' (write '}}' for a brace)");
      if (c != '{') {
        text += c;
        continue;
      }
      const auto close = pattern.find('}', i);
      if (close == std::string::npos) bad("an unclosed '{'");
      const std::string field = pattern.substr(i + 1, close - i - 1);
      const auto colon = field.find(':');
      field_ f{field.substr(0, colon), ""};
      if (f.name.empty()) bad("the field {" + field + "} has no name (Keras fills {epoch} and logged names)");
      f.format = printf_format(colon == std::string::npos ? "" : field.substr(colon + 1), f.name == "epoch", field);
      parts_.push_back(std::move(text)), text.clear();
      fields_.push_back(std::move(f));
      i = close;
    }
    parts_.push_back(std::move(text));
  }

  /// The path for `epoch` (1-based) and the logs; a field the logs lack is a `value_error`.
  std::string operator()(int epoch, const logs& l) const {
    std::string out = parts_[0];
    for (std::size_t k = 0; k < fields_.size(); ++k) {
      const auto& f = fields_[k];
      if (f.name != "epoch" && !l.contains(f.name))
        throw value_error("model_checkpoint: filepath field {" + f.name + "} is not in the logs");
      const auto print = [&](char* buf, std::size_t n) {
        return f.name == "epoch" ? std::snprintf(buf, n, f.format.c_str(), epoch)
                                 : std::snprintf(buf, n, f.format.c_str(), static_cast<double>(l.at(f.name)));
      };
      std::string value(std::size_t(print(nullptr, 0)), '\0');
      print(value.data(), value.size() + 1);
      out += value + parts_[k + 1];
    }
    return out;
  }

 private:
  struct field_ {
    std::string name, format;
  };
  [[noreturn]] void bad(const std::string& why) const {
    throw value_error("model_checkpoint: filepath \"" + pattern_ + "\": " + why);
  }
  /// Python's format spec `[sign][0][width][.precision][type]` as printf's conversion.
  std::string printf_format(const std::string& spec, bool integer, const std::string& field) const {
    std::size_t i = 0;
    std::string flags, width, precision;
    if (i < spec.size() && (spec[i] == '+' || spec[i] == ' ')) flags += spec[i++];
    else if (i < spec.size() && spec[i] == '-') ++i;  // Python's default: a sign for negatives only
    if (i < spec.size() && spec[i] == '0') flags += spec[i++];
    while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i])) && width.size() < 3) width += spec[i++];
    if (i < spec.size() && spec[i] == '.') {
      for (++i; i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i])) && precision.size() < 2;)
        precision += spec[i++];
      if (precision.empty()) bad("the field {" + field + "}: '.' without a precision");
    }
    char type = i < spec.size() ? spec[i++] : '\0';
    const std::string kind = integer ? "an integer (epoch)" : "a logged float";
    if (i != spec.size()) bad("the field {" + field + "}: format \"" + spec + "\" is not [sign][0][width][.precision][type]");
    if (integer && !precision.empty()) bad("the field {" + field + "}: an integer (epoch) takes no precision");
    if (integer ? type != '\0' && type != 'd' : type != '\0' && std::string("eEfFgG").find(type) == std::string::npos)
      bad("the field {" + field + "}: format type '" + std::string(1, type) + "' does not apply to " + kind +
          (integer ? " (use d)" : " (use e, f or g)"));
    if (type == '\0') type = integer ? 'd' : 'g';
    return "%" + flags + width + (precision.empty() ? "" : "." + precision) + type;
  }

  std::string pattern_;
  std::vector<std::string> parts_;  // the text before each field, and after the last
  std::vector<field_> fields_;
};

}  // namespace detail

class model_checkpoint : public callback {
 public:
  explicit model_checkpoint(model_checkpoint_options o)
      : o_(std::move(o)), filepath_(required(o_.filepath)), best_{o_.monitor, o_.mode, 0.0f} {
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
      const std::filesystem::path path = filepath_(epoch + 1, l);
      if (o_.verbose > 0) std::printf("\nEpoch %d: saving model to %s\n", epoch + 1, path.string().c_str());
      if (state) m.states().write(*state, path);
      else m.save_weights(path);
    }
    m.barrier();
  }
  static const std::string& required(const std::string& filepath) {
    if (filepath.empty()) throw value_error("model_checkpoint: filepath is required");
    return filepath;
  }

  model_checkpoint_options o_;
  detail::filepath_pattern filepath_;
  detail::monitor best_;
};

}  // namespace dtrain
