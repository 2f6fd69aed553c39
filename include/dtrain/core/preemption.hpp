#pragma once
/// \file
/// Preemption: a SIGTERM (what Kubernetes and Slurm send before killing a job) is turned into a flag
/// that training checks at every step boundary; the workers agree on the step, a backup is written
/// there, and `fit` throws `preempted`, after which the program exits with `retryable_exit_code` so the
/// orchestrator restarts the job, which resumes from that backup.

#include <atomic>
#include <csignal>

#include "dtrain/core/error.hpp"

namespace dtrain {

/// Thrown by `fit` once the backup at the agreed step is durable.
struct preempted : error {
  using error::error;
};

namespace detail {
inline std::atomic<bool>& preemption_flag() {
  static std::atomic<bool> flag{false};
  return flag;
}
extern "C" inline void on_preemption_signal(int) { preemption_flag().store(true); }
}  // namespace detail

/// Routes SIGTERM to the preemption flag (and clears it); `backup_and_restore` calls it.
inline void install_preemption_handler() {
  detail::preemption_flag().store(false);
  std::signal(SIGTERM, detail::on_preemption_signal);
}

inline bool preemption_requested() { return detail::preemption_flag().load(); }

}  // namespace dtrain
