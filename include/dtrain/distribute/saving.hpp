#pragma once
/// \file
/// The seeds' helpers for saving under a multi-worker strategy: every worker must run the saving code
/// (it may hold collectives), but only the chief's file is kept; the others write to a
/// `workertemp_<task_id>` folder beside it and remove it afterwards.
///
///     auto path = dtrain::write_filepath("/tmp/keras-model", task.task_type, task.task_id);
///     dtrain::checkpoint::save_weights(model, path);
///     dtrain::remove_temp_dir("/tmp/keras-model", task.task_type, task.task_id);

#include <filesystem>
#include <string>

namespace dtrain {

/// TF's `_is_chief`: the chief task, worker 0 when there is no chief, or no cluster at all.
inline bool is_chief_task(const std::string& task_type, int task_id, bool has_chief_job = false) {
  return task_type.empty() || task_type == "chief" || (task_type == "worker" && task_id == 0 && !has_chief_job);
}

/// The seeds' `write_filepath`: `filepath` on the chief, `<dir>/workertemp_<id>/<name>` elsewhere (created).
inline std::filesystem::path write_filepath(const std::filesystem::path& filepath, const std::string& task_type,
                                            int task_id, bool has_chief_job = false) {
  if (is_chief_task(task_type, task_id, has_chief_job)) return filepath;
  const auto dir = filepath.parent_path() / ("workertemp_" + std::to_string(task_id));
  std::filesystem::create_directories(dir);
  return dir / filepath.filename();
}

/// Removes a non-chief's `workertemp_<id>` folder (nothing on the chief).
inline void remove_temp_dir(const std::filesystem::path& filepath, const std::string& task_type, int task_id,
                            bool has_chief_job = false) {
  if (is_chief_task(task_type, task_id, has_chief_job)) return;
  std::error_code ec;
  std::filesystem::remove_all(filepath.parent_path() / ("workertemp_" + std::to_string(task_id)), ec);
}

}  // namespace dtrain
