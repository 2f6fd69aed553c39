#pragma once
/// \file
/// The one error channel of dtrain: every failure a user can cause or meet is a `dtrain::error`.
/// Messages name what was wrong and where (layer, loss, file, peer), so a caught error is actionable.

#include <stdexcept>
#include <string>

namespace dtrain {

/// Base of every exception dtrain throws.
struct error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A run-time shape disagreement (batch against model input, labels against predictions).
struct shape_error : error {
  using error::error;
};

/// A value outside its domain (a label out of range, a negative learning rate, an empty batch).
struct value_error : error {
  using error::error;
};

/// A file that is missing, unreadable or malformed.
struct io_error : error {
  using error::error;
};

/// A malformed configuration (cluster spec, command line, options).
struct config_error : error {
  using error::error;
};

/// The exit code of a process that stops for a reason a restart can fix (a failed peer, a
/// preemption): Kubeflow and TF treat 138 as retryable.
inline constexpr int retryable_exit_code = 138;

/// The model was used before `compile()` or in another wrong order.
struct usage_error : error {
  using error::error;
};

/// An error of a device (a GPU backend's): the message names the device, the operation and the sizes.
struct device_error : error {
  using error::error;
};

}  // namespace dtrain
