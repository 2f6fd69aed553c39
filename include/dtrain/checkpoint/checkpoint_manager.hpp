#pragma once
/// \file
/// `checkpoint_manager` (tf.train.CheckpointManager): numbered checkpoints `ckpt-N.safetensors` in a
/// directory, the newest `max_to_keep` kept, and a `checkpoint` index naming the latest (TF's text
/// format). A checkpoint is written completely and durably before the index points at it, so a crash
/// at any instant leaves the previous good one as latest; on restore a damaged latest checkpoint is
/// reported and the previous one used.

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/checkpoint/model_io.hpp"

namespace dtrain::checkpoint {

namespace detail {
/// The checkpoints the index lists, oldest first.
/// The checkpoint names the index lists. A name must be a plain file name in the folder: the manager
/// deletes files by these names, so an edited index must not reach outside it.
inline std::vector<std::string> read_index(const std::filesystem::path& dir) {
  std::ifstream in(dir / "checkpoint");
  std::vector<std::string> all;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const auto q1 = line.find('"'), q2 = line.rfind('"');
    if (line.rfind("all_model_checkpoint_paths:", 0) != 0 || q1 == q2) continue;
    std::string name = line.substr(q1 + 1, q2 - q1 - 1);
    if (name.empty() || name == "." || name == ".." || name.find_first_of("/\\") != std::string::npos ||
        name.find('\0') != std::string::npos)
      throw io_error("checkpoint index " + (dir / "checkpoint").string() + ", line " + std::to_string(n) + ": \"" +
                     name + "\" is not a checkpoint name in this folder");
    all.push_back(std::move(name));
  }
  return all;
}
/// N of a checkpoint named `<prefix>-N`; nothing when the name does not end in a number that fits.
inline std::optional<std::int64_t> checkpoint_number(std::string_view name) {
  const auto dash = name.rfind('-');
  if (dash == std::string_view::npos) return std::nullopt;
  std::int64_t v = 0;
  const char *b = name.data() + dash + 1, *e = name.data() + name.size();
  const auto [end, ec] = std::from_chars(b, e, v);
  if (b == e || ec != std::errc{} || end != e || v < 0) return std::nullopt;
  return v;
}
inline void write_index(const std::filesystem::path& dir, const std::vector<std::string>& all) {
  std::string s = "model_checkpoint_path: \"" + all.back() + "\"\n";
  for (const auto& a : all) s += "all_model_checkpoint_paths: \"" + a + "\"\n";
  dtrain::detail::write_file_atomic(dir / "checkpoint", std::span<const char>(s.data(), s.size()));
}
}  // namespace detail

/// `tf.train.latest_checkpoint(directory)`: the path of the newest checkpoint, if any.
inline std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& dir) {
  const auto all = detail::read_index(dir);
  if (all.empty()) return std::nullopt;
  return dir / (all.back() + ".safetensors");
}

class checkpoint_manager {
 public:
  explicit checkpoint_manager(std::filesystem::path directory, int max_to_keep = 5)
      : dir_(std::move(directory)), max_to_keep_(max_to_keep) {
    if (max_to_keep_ < 1) throw value_error("checkpoint_manager: max_to_keep must be at least 1");
  }
  const std::filesystem::path& directory() const { return dir_; }
  std::optional<std::filesystem::path> latest_checkpoint() const { return checkpoint::latest_checkpoint(dir_); }
  /// Every checkpoint the index lists, oldest first.
  std::vector<std::filesystem::path> checkpoints() const {
    std::vector<std::filesystem::path> out;
    for (const auto& a : detail::read_index(dir_)) out.push_back(dir_ / (a + ".safetensors"));
    return out;
  }

  /// Writes checkpoint N (the next number unless given) with the model, its optimizer and `state`
  /// (extra strings, e.g. the training position), reads it back, then points the index at it and drops
  /// the oldest.
  template <class Model>
  std::filesystem::path save(Model& m, const std::map<std::string, std::string>& state = {}, std::int64_t number = -1) {
    return save_with([&](const std::filesystem::path& p) { save_model(m, p, state); },
                     [&](const std::filesystem::path& p) { read_model(m, load_safetensors(p), p.string()); }, number);
  }

  /// Writes checkpoint N with `write(path)` and checks it with `verify(path)` (which throws when the file
  /// does not read back: checksums, architecture), and only then points the index at it and drops the
  /// oldest. A checkpoint that does not verify is removed and the error rethrown; the index and the
  /// older checkpoints stay as they were.
  std::filesystem::path save_with(const std::function<void(const std::filesystem::path&)>& write,
                                  const std::function<void(const std::filesystem::path&)>& verify,
                                  std::int64_t number = -1) {
    auto all = detail::read_index(dir_);
    if (number < 0) {
      number = 1;
      for (const auto& a : all)
        if (const auto k = detail::checkpoint_number(a)) {
          if (*k == std::numeric_limits<std::int64_t>::max())
            throw value_error("checkpoint_manager: the index lists " + a + ", after which no number is left");
          number = std::max<std::int64_t>(number, *k + 1);
        }
    }
    const std::string name = "ckpt-" + std::to_string(number);
    const auto path = dir_ / (name + ".safetensors");
    write(path);  // durable before the index names it
    try {
      verify(path);
    } catch (const error&) {
      std::error_code ec;
      if (std::find(all.begin(), all.end(), name) == all.end()) std::filesystem::remove(path, ec);
      throw;
    }
    std::erase(all, name);
    all.push_back(name);
    std::vector<std::string> dropped;
    while (int(all.size()) > max_to_keep_) dropped.push_back(all.front()), all.erase(all.begin());
    detail::write_index(dir_, all);  // before any file goes: the index never names a deleted file
    for (const auto& d : dropped) {
      std::error_code ec;
      std::filesystem::remove(dir_ / (d + ".safetensors"), ec);
    }
    return path;
  }

  /// Restores the newest checkpoint that loads; a damaged one is reported and the one before it tried.
  /// Returns its metadata, or nothing when there is no usable checkpoint.
  template <class Model>
  std::optional<std::map<std::string, std::string>> restore_latest(Model& m, std::FILE* log = stderr) const {
    const auto all = checkpoints();
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      try {
        return restore_model(m, *it);
      } catch (const io_error& e) {
        if (log) std::fprintf(log, "WARNING: checkpoint %s is unusable (%s); trying the previous one\n", it->string().c_str(), e.what());
      }
    }
    return std::nullopt;
  }

 private:
  std::filesystem::path dir_;
  int max_to_keep_;
};

}  // namespace dtrain::checkpoint
