#pragma once
/// \file
/// `sidecar_evaluator` (Keras `SidecarEvaluator`): the evaluator task of a cluster (TF_CONFIG task type
/// `evaluator`, outside the ring) watches the directory the chief writes checkpoints to and evaluates
/// every new one as it appears, while training goes on elsewhere. The directory is a
/// `checkpoint_manager`'s (its index names the latest checkpoint) or `model_checkpoint`'s (the Keras
/// guide's pattern: then the latest is the `.safetensors` file written last, and a file that
/// `model_checkpoint` writes again under the same name counts as new).

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <tuple>
#include <thread>

#include "dtrain/checkpoint/checkpoint_manager.hpp"
#include "dtrain/core/logs.hpp"

namespace dtrain::checkpoint {

struct sidecar_evaluator_options {
  std::filesystem::path checkpoint_dir;
  /// Stop once a checkpoint numbered this or higher (`ckpt-N`, the chief's save count) has been
  /// evaluated, as Keras' SidecarEvaluator does; 0: no limit. Checkpoints written faster than they are
  /// evaluated are skipped (only the latest one is evaluated), so this bounds the saves, not the runs.
  int max_evaluations = 0;
  /// Stop when no new checkpoint has appeared for this long.
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(10)};
  std::chrono::milliseconds poll_interval{std::chrono::seconds(1)};
  /// Called with each checkpoint's path and results (default: one printed line).
  std::function<void(const std::filesystem::path&, const logs&)> on_result{};
};

template <class Model>
class sidecar_evaluator {
 public:
  /// `model` must be compiled (its loss and metrics are what gets evaluated).
  sidecar_evaluator(Model& model, sidecar_evaluator_options o) : m_(model), o_(std::move(o)) {
    if (o_.checkpoint_dir.empty()) throw value_error("sidecar_evaluator: checkpoint_dir is required");
  }

  /// Evaluates each new latest checkpoint on `dataset` until it has evaluated checkpoint max_evaluations
  /// (or a later one), or the idle timeout passes; returns how many it evaluated. A checkpoint that
  /// cannot be read (damaged) is skipped; one of another architecture is an error.
  template <class Dataset>
  int start(const Dataset& dataset) {
    std::optional<written> last;
    int done = 0;
    auto idle_since = std::chrono::steady_clock::now();
    for (;;) {
      const auto newest = newest_checkpoint(o_.checkpoint_dir);
      if (newest && newest != last) {
        last = newest;
        const std::filesystem::path& latest = newest->path;
        idle_since = std::chrono::steady_clock::now();
        try {
          load_weights(m_, latest);  // the weights only: the evaluator's optimizer may differ
        } catch (const io_error& e) {
          std::fprintf(stderr, "WARNING: sidecar_evaluator: skipping %s (%s)\n", latest.string().c_str(), e.what());
          if (o_.max_evaluations > 0 && number(latest) >= o_.max_evaluations) break;  // no later one comes
          continue;
        }
        const logs l = m_.evaluate(dataset, {.verbose = 0});
        ++done;
        if (o_.on_result) o_.on_result(latest, l);
        else {
          std::printf("sidecar_evaluator: %s:", latest.filename().string().c_str());
          for (const auto& [k, v] : l) std::printf(" %s: %.4f", k.c_str(), double(v));
          std::printf("\n");
          std::fflush(stdout);
        }
        if (o_.max_evaluations > 0 && number(latest) >= o_.max_evaluations) break;
        continue;
      }
      if (std::chrono::steady_clock::now() - idle_since > o_.idle_timeout) break;
      std::this_thread::sleep_for(o_.poll_interval);
    }
    return done;
  }

 private:
  struct written {
    std::filesystem::path path;
    std::filesystem::file_time_type time;
    bool operator==(const written&) const = default;
  };
  /// The checkpoint the index names, else the `.safetensors` file written last (the later name on a
  /// tie), with its time.
  static std::optional<written> newest_checkpoint(const std::filesystem::path& dir) {
    std::error_code ec;
    if (const auto latest = latest_checkpoint(dir)) return written{*latest, std::filesystem::last_write_time(*latest, ec)};
    std::optional<written> best;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const auto& p = it->path();
      if (p.extension() != ".safetensors" || p.filename().string().starts_with(".") || !it->is_regular_file(ec)) continue;
      const auto t = it->last_write_time(ec);
      if (!ec && (!best || std::tie(t, p) > std::tie(best->time, best->path))) best = written{p, t};
    }
    return best;
  }
  /// N of `ckpt-N.safetensors` (0 when the name has no number).
  static long long number(const std::filesystem::path& p) {
    return detail::checkpoint_number(p.stem().string()).value_or(0);
  }

  Model& m_;
  sidecar_evaluator_options o_;
};

}  // namespace dtrain::checkpoint
