#pragma once
/// \file
/// Keras `callbacks.BackupAndRestore(backup_dir, save_freq, delete_checkpoint)`, resuming EXACTLY:
/// the backup holds the weights, the optimizer state, the generator and metric states, and the
/// position (epoch, batch within it, dataset iterator state), so an interrupted run that is restarted
/// continues with the very batches it would have seen and ends with bitwise the same weights. (Keras
/// also backs up every epoch or every `save_freq` batches, as the tutorial shows, and resumes at the
/// saved epoch and batch; it restores weights, optimizer and counters but not the dataset iterator's
/// position or the generators, so a resumed shuffled run sees other batches than an uninterrupted one.)
///
/// Multi-worker: only the chief writes (atomically; the previous backup stays until the new one is
/// durable) and every worker waits until it is; on restart the chief reads the backup and gives its
/// state to every worker, so no shared file system is needed. A backup of another model, optimizer
/// or number of workers is refused with an explanation. A SIGTERM makes the workers agree on the next
/// step boundary, back up there, and end `fit` with `preempted` (exit with `retryable_exit_code`).

#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "dtrain/callbacks/callback.hpp"
#include "dtrain/core/preemption.hpp"

namespace dtrain {

struct backup_and_restore_options {
  std::filesystem::path backup_dir;
  /// "epoch", or a number of batches.
  std::variant<std::string, std::int64_t> save_freq = std::string("epoch");
  bool delete_checkpoint = true;
};

class backup_and_restore : public callback {
 public:
  explicit backup_and_restore(backup_and_restore_options o) : o_(std::move(o)) {
    if (o_.backup_dir.empty()) throw value_error("backup_and_restore: backup_dir is required");
    if (const auto* s = std::get_if<std::string>(&o_.save_freq); s && *s != "epoch")
      throw value_error("backup_and_restore: save_freq must be \"epoch\" or a number of batches, got \"" + *s + "\"");
    if (const auto* n = std::get_if<std::int64_t>(&o_.save_freq); n && *n <= 0)
      throw value_error("backup_and_restore: save_freq must be positive");
  }

  void on_train_begin(const logs&) override {
    install_preemption_handler();
    auto& m = model();
    std::string text;  // "epoch step data_state" of the backup, empty when there is none
    if (m.is_chief()) text = restore_on_chief();
    m.sync_from_chief(text);
    if (!text.empty()) m.resume = parse_position(text, file(0).string());
  }
  void on_train_batch_end(std::int64_t, const logs&) override {
    const auto* every = std::get_if<std::int64_t>(&o_.save_freq);
    if (every && model().optimizer().iterations() % *every == 0) save();
  }
  void on_epoch_end(int, const logs&) override {
    if (std::holds_alternative<std::string>(o_.save_freq)) save();
  }
  void on_preemption(const logs&) override { save(); }
  void on_train_end(const logs&) override {
    auto& m = model();
    if (!o_.delete_checkpoint || m.stop_training) return;  // an early stop keeps nothing to resume; Keras deletes too
    m.barrier();
    if (m.is_chief()) std::filesystem::remove_all(o_.backup_dir);
  }

  /// "epoch step data_state" as written by `save`: both numbers not negative, the data state a JSON
  /// object; anything else is an `io_error` naming the file.
  static training_position parse_position(const std::string& text, const std::string& file) {
    training_position p;
    std::istringstream in(text);
    const bool numbers = static_cast<bool>(in >> p.epoch >> p.step);
    if (numbers) std::getline(in >> std::ws, p.data_state);
    const auto state = nlohmann::json::parse(p.data_state, nullptr, false);
    if (!numbers || p.epoch < 0 || p.step < 0 || state.is_discarded() || !state.is_object())
      throw io_error("backup_and_restore: " + file + ": the training position \"" + text.substr(0, 80) +
                     "\" is damaged (expected \"epoch batch {dataset state}\"); delete the backup to start over");
    return p;
  }

 private:
  std::filesystem::path file(int k) const { return o_.backup_dir / ("backup-" + std::to_string(k) + ".safetensors"); }

  /// Writes the backup: the new file first, then it replaces the old (a crash leaves one good backup).
  void save() {
    auto& m = model();
    if (m.is_chief()) {
      const auto& p = m.position;
      m.save_state(file(0), {{"dtrain.backup.position", std::to_string(p.epoch) + " " + std::to_string(p.step) + " " + p.data_state},
                             {"dtrain.backup.world_size", std::to_string(m.num_replicas_in_sync())}});
    }
    m.barrier();  // every worker goes on only once the backup is durable
  }

  std::string restore_on_chief() {
    auto& m = model();
    if (!std::filesystem::exists(file(0))) return "";
    std::map<std::string, std::string> meta;
    try {
      meta = m.load_state(file(0));
    } catch (const io_error& e) {
      std::fprintf(stderr, "WARNING: backup_and_restore: the backup is unusable (%s); starting from scratch\n", e.what());
      return "";
    }
    const std::string workers = meta.count("dtrain.backup.world_size") ? meta.at("dtrain.backup.world_size") : "?";
    if (workers != std::to_string(m.num_replicas_in_sync()))
      throw config_error("backup_and_restore: the backup in " + o_.backup_dir.string() + " was written by " + workers +
                         " workers but this run has " + std::to_string(m.num_replicas_in_sync()) +
                         "; resume with the same number of workers or delete the backup");
    const auto position = meta.find("dtrain.backup.position");
    if (position == meta.end())
      throw io_error("backup_and_restore: " + file(0).string() + " holds no training position "
                     "(dtrain.backup.position); it is not a backup of fit, or damaged: delete it to start over");
    const training_position p = parse_position(position->second, file(0).string());  // before any worker uses it
    std::fprintf(stderr, "backup_and_restore: resuming at epoch %d, batch %lld from %s\n", p.epoch + 1,
                 static_cast<long long>(p.step), file(0).string().c_str());
    return position->second;
  }


  backup_and_restore_options o_;
};

}  // namespace dtrain
