#pragma once
/// \file
/// Keras `callbacks.BackupAndRestore(backup_dir, save_freq, delete_checkpoint)`, resuming EXACTLY:
/// the backup is a `training_state` (checkpoint/training_state.hpp): weights, optimizer state, the
/// generator and metric states, and the position (epoch, batch within it, dataset iterator state), so
/// an interrupted run that is restarted continues with the very batches it would have seen and ends
/// with bitwise the same weights. (Keras also backs up every epoch or every `save_freq` batches and
/// resumes at the saved epoch and batch; it restores weights, optimizer and counters but not the
/// dataset iterator's position or the generators.)
///
/// Backups survive damage: the two newest are kept (a `checkpoint_manager`, as TF's BackupAndRestore
/// keeps its checkpoints), each read back and checked (checksums, architecture, state) before the
/// older one is deleted. On restart a damaged newest backup is reported, naming the file and the
/// damage, and the one before it is used; when backups exist but none is usable, `fit` stops with an
/// error rather than silently starting over, unless `start_over_if_unusable` says to.
///
/// Multi-worker: only the chief writes, and every worker waits until the backup is durable; on restart
/// the chief reads the backup and broadcasts its bytes, and every worker restores from them, so no
/// shared file system is needed. A backup resumes on another number of workers when the global batch
/// is the same and the data is sharded by DATA (`fit` checks both). A SIGTERM makes the workers agree
/// on the next step boundary, back up there, and end `fit` with `preempted`.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <variant>
#include <vector>

#include "dtrain/callbacks/callback.hpp"
#include "dtrain/checkpoint/checkpoint_manager.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/preemption.hpp"

namespace dtrain {

struct backup_and_restore_options {
  std::filesystem::path backup_dir{};
  /// "epoch", or a number of batches.
  std::variant<std::string, std::int64_t> save_freq = std::string("epoch");
  /// Delete the backups when `fit` ends (early stop included), as Keras does.
  bool delete_checkpoint = true;
  /// When backups exist but none can be restored: false refuses (an `io_error` naming each file and its
  /// damage); true warns and trains from scratch (the damaged backups are replaced as training goes).
  bool start_over_if_unusable = false;
};

namespace detail {
/// What the chief found in the backup folder, as every worker learns it in one broadcast: nothing to
/// restore, a backup to restore (its file and bytes, checked by the chief), or why training must not
/// start: backups that exist but none reads, or a folder it cannot write (`unusable`, an io_error), or
/// backups of another model or job (`mismatch`, a config_error).
struct backup_finding {
  enum class outcome : int { none, restore, unusable, mismatch };
  outcome what = outcome::none;
  std::string text;         // restore: the file; otherwise the error message
  std::vector<char> bytes;  // restore: the backup's contents

  chief_message message() && { return {int(what), std::move(text), std::move(bytes)}; }
  static backup_finding from(chief_message&& m) { return {outcome(m.kind), std::move(m.text), std::move(m.bytes)}; }
};
}  // namespace detail

class backup_and_restore : public callback {
 public:
  explicit backup_and_restore(backup_and_restore_options o)
      : o_(std::move(o)), backups_(o_.backup_dir.empty() ? "." : o_.backup_dir, 2) {
    if (o_.backup_dir.empty()) throw value_error("backup_and_restore: backup_dir is required");
    if (const auto* s = std::get_if<std::string>(&o_.save_freq); s && *s != "epoch")
      throw value_error("backup_and_restore: save_freq must be \"epoch\" or a number of batches, got \"" + *s + "\"");
    if (const auto* n = std::get_if<std::int64_t>(&o_.save_freq); n && *n <= 0)
      throw value_error("backup_and_restore: save_freq must be positive");
  }

  void on_train_begin(const logs&) override {
    install_preemption_handler();
    auto& m = model();
    using outcome = detail::backup_finding::outcome;
    chief_message message;
    if (m.is_chief()) try {
        message = find_on_chief().message();
      } catch (const error& e) {  // a mismatch: the chief throws it, the others learn it
        message = detail::backup_finding{outcome::mismatch, e.what(), {}}.message();
        m.broadcast_from_chief(message);
        throw;
      }
    m.broadcast_from_chief(message);
    const auto found = detail::backup_finding::from(std::move(message));
    if (found.what == outcome::none) return;
    if (found.what == outcome::unusable) throw io_error(found.text);
    if (found.what == outcome::mismatch) throw config_error(found.text);
    training_state s = m.states().read(found.bytes, found.text);
    m.resume = s.position;
    m.apply_state(std::move(s));
  }
  void on_train_batch_end(std::int64_t, const logs&) override {
    const auto* every = std::get_if<std::int64_t>(&o_.save_freq);
    if (every && model().iterations() % *every == 0) save();
  }
  void on_epoch_end(int, const logs&) override {
    if (std::holds_alternative<std::string>(o_.save_freq)) save();
  }
  void on_preemption(const logs&) override { save(); }
  void on_train_end(const logs&) override {
    if (!o_.delete_checkpoint) return;  // Keras deletes after an early stop too: nothing is left to resume
    auto& m = model();
    m.barrier();
    if (m.is_chief()) remove_backups();
  }

 private:
  /// Writes the next backup and reads it back; only then is the oldest deleted (two stay).
  void save() {
    auto& m = model();
    const training_state s = m.capture_state();
    if (m.is_chief()) try {
        backups_.save_with([&](const std::filesystem::path& p) { m.states().write(s, p); },
                           [&](const std::filesystem::path& p) {
                             const auto bytes = checkpoint::detail::read_file(p);
                             m.states().read(bytes, p.string());
                           });
      } catch (const io_error& e) {  // the previous backups are kept: training goes on
        std::fprintf(stderr, "WARNING: backup_and_restore: the backup was not saved (%s); the previous ones are kept\n",
                     e.what());
      }
    m.barrier();  // every worker goes on only once the backup is durable
  }

  /// The training is done: its backups go, as in Keras. A folder that cannot go (a mount point, as a
  /// Kubernetes volume is) is emptied; whatever cannot be removed is a warning, never a failed run.
  void remove_backups() const {
    std::error_code ec, ignored;
    std::filesystem::remove_all(o_.backup_dir, ec);  // (the folder's entries first, then the folder)
    if (ec && !std::filesystem::is_empty(o_.backup_dir, ignored))
      std::fprintf(stderr, "WARNING: backup_and_restore: the training is complete but its backups in %s could not "
                           "be removed (%s)\n", o_.backup_dir.string().c_str(), ec.message().c_str());
  }

  /// A folder the chief cannot write backups to, found before any training: why.
  std::optional<detail::backup_finding> check_writable() const {
    const auto probe = o_.backup_dir / ".dtrain-write-check";
    std::error_code ec;
    std::filesystem::create_directories(o_.backup_dir, ec);
    if (!ec) {
      if (const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644); fd >= 0)
        ::close(fd), ::unlink(probe.c_str());
      else
        ec.assign(errno, std::generic_category());
    }
    if (!ec) return std::nullopt;
    return detail::backup_finding{detail::backup_finding::outcome::unusable, "backup_and_restore: cannot write backups to " + o_.backup_dir.string() + " (" + ec.message() +
                           "): choose a backup_dir this worker can create and write", {}};
  }

  /// The newest backup that reads; nothing when there is none; `unusable` when backups exist but none
  /// reads (unless told to start over), or when the folder cannot be written.
  detail::backup_finding find_on_chief() {
    using outcome = detail::backup_finding::outcome;
    std::error_code ec;
    const bool existed = std::filesystem::exists(o_.backup_dir, ec);
    if (auto bad = check_writable()) return *bad;
    if (!existed) return {};
    std::vector<std::filesystem::path> candidates;  // newest first
    std::string damage;
    try {
      candidates = backups_.checkpoints();
      std::reverse(candidates.begin(), candidates.end());
    } catch (const io_error& e) {
      damage += std::string("\n  ") + e.what();
    }
    std::vector<std::filesystem::path> unlisted;  // files no index lists, the highest number first
    for (const auto& entry : std::filesystem::directory_iterator(o_.backup_dir, ec))
      if (entry.path().extension() == ".safetensors" &&
          std::find(candidates.begin(), candidates.end(), entry.path()) == candidates.end())
        unlisted.push_back(entry.path());
    std::sort(unlisted.begin(), unlisted.end(), [](const auto& a, const auto& b) {
      return checkpoint::detail::checkpoint_number(a.stem().string()).value_or(-1) >
             checkpoint::detail::checkpoint_number(b.stem().string()).value_or(-1);
    });
    candidates.insert(candidates.end(), unlisted.begin(), unlisted.end());
    auto& m = model();
    for (const auto& file : candidates) {
      try {
        std::vector<char> bytes = checkpoint::detail::read_file(file);
        const training_state s = m.states().read(bytes, file.string());  // checked before any worker uses it
        if (!damage.empty())
          std::fprintf(stderr, "WARNING: backup_and_restore: the newer backups are unusable, falling back to an older one:%s\n", damage.c_str());
        std::fprintf(stderr, "backup_and_restore: resuming at epoch %d, batch %lld from %s\n", s.position.epoch + 1,
                     static_cast<long long>(s.position.step), file.string().c_str());
        return {outcome::restore, file.string(), std::move(bytes)};
      } catch (const io_error& e) {
        damage += std::string("\n  ") + e.what();
      }
    }
    if (damage.empty()) return {};  // an empty folder
    if (o_.start_over_if_unusable) {
      std::fprintf(stderr, "WARNING: backup_and_restore: no backup in %s is usable; starting from scratch as asked:%s\n",
                   o_.backup_dir.string().c_str(), damage.c_str());
      return {};
    }
    const std::string message = "backup_and_restore: backups exist in " + o_.backup_dir.string() +
                                " but none is usable:" + damage +
                                "\nRestore one from elsewhere, delete the folder to start over, or pass "
                                "start_over_if_unusable = true";
    return {outcome::unusable, message, {}};
  }

  backup_and_restore_options o_;
  checkpoint::checkpoint_manager backups_;
};

}  // namespace dtrain
