#pragma once
/// \file
/// Callbacks that watch a logged quantity: early_stopping and reduce_lr_on_plateau (Keras semantics),
/// and the learning-rate scheduler, TerminateOnNaN, CSVLogger and LambdaCallback.
///
/// Each is a header of its own, named after the callback (callbacks/early_stopping.hpp,
/// callbacks/reduce_lr_on_plateau.hpp, callbacks/learning_rate_scheduler.hpp, callbacks/terminate_on_nan.hpp,
/// callbacks/csv_logger.hpp, callbacks/lambda_callback.hpp), with `monitor_mode` and the best-value tracker
/// the watching ones share in callbacks/monitor_mode.hpp; this header includes them all.

#include "dtrain/callbacks/csv_logger.hpp"
#include "dtrain/callbacks/early_stopping.hpp"
#include "dtrain/callbacks/lambda_callback.hpp"
#include "dtrain/callbacks/learning_rate_scheduler.hpp"
#include "dtrain/callbacks/monitor_mode.hpp"
#include "dtrain/callbacks/reduce_lr_on_plateau.hpp"
#include "dtrain/callbacks/terminate_on_nan.hpp"
