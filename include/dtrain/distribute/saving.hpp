#pragma once
/// \file
/// The saving helpers of TensorFlow's multi-worker tutorial: every worker must run the saving code
/// (it may hold collectives), but only the chief's file is kept; the others write to a
/// `workertemp_<task_id>` folder beside it and remove it afterwards.
///
///     const auto [task_type, task_id] = strategy.cluster_resolver();
///     auto path = dtrain::write_filepath("/tmp/keras-model", task_type, task_id, strategy.cluster().spec);
///     dtrain::checkpoint::save_weights(model, path);
///     dtrain::remove_temp_dir("/tmp/keras-model", task_type, task_id, strategy.cluster().spec);
///
/// The cluster spec tells whether the cluster has a `chief` job (then worker 0 is not the chief).

#include <filesystem>
#include <string>

#include "dtrain/distribute/cluster.hpp"

namespace dtrain {

/// TF's `_is_chief`: the chief task, worker 0 when there is no chief, or no cluster at all.
inline bool is_chief_task(const std::string& task_type, int task_id, bool has_chief_job = false) {
  return task_type.empty() || task_type == "chief" || (task_type == "worker" && task_id == 0 && !has_chief_job);
}

/// The tutorial's `write_filepath`: `filepath` on the chief, `<dir>/workertemp_<id>/<name>` elsewhere (created).
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

/// The tutorial's signatures: `write_filepath(filepath, task_type, task_id, cluster_spec)`.
inline std::filesystem::path write_filepath(const std::filesystem::path& filepath, const std::string& task_type,
                                            int task_id, const cluster_spec& spec) {
  return write_filepath(filepath, task_type, task_id, spec.jobs.count("chief") > 0);
}
inline void remove_temp_dir(const std::filesystem::path& filepath, const std::string& task_type, int task_id,
                            const cluster_spec& spec) {
  remove_temp_dir(filepath, task_type, task_id, spec.jobs.count("chief") > 0);
}

}  // namespace dtrain
