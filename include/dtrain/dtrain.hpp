#pragma once
/// \file
/// The whole of dtrain in one include (the optional parts, the ring_tcp communicator and the opaque test
/// backend, are included on their own).

#include "dtrain/version.hpp"

#include "dtrain/backend/backend.hpp"
#include "dtrain/backend/cpu.hpp"
#include "dtrain/core/logs.hpp"
#include "dtrain/core/preemption.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/random.hpp"
#include "dtrain/core/shape.hpp"
#include "dtrain/core/tensor.hpp"
#include "dtrain/core/threads.hpp"
#include "dtrain/core/view.hpp"

#include "dtrain/callbacks/backup_and_restore.hpp"
#include "dtrain/callbacks/callback.hpp"
#include "dtrain/callbacks/history.hpp"
#include "dtrain/callbacks/model_checkpoint.hpp"
#include "dtrain/callbacks/monitors.hpp"
#include "dtrain/callbacks/progbar_logger.hpp"
#include "dtrain/callbacks/tensorboard.hpp"

#include "dtrain/layers/activations.hpp"
#include "dtrain/layers/concepts.hpp"
#include "dtrain/layers/conv2d.hpp"
#include "dtrain/layers/dense.hpp"
#include "dtrain/layers/dropout.hpp"
#include "dtrain/layers/embedding.hpp"
#include "dtrain/layers/input.hpp"
#include "dtrain/layers/merging.hpp"
#include "dtrain/layers/normalization.hpp"
#include "dtrain/layers/pooling.hpp"
#include "dtrain/layers/regularizers.hpp"
#include "dtrain/layers/reshape.hpp"
#include "dtrain/layers/zero_padding2d.hpp"

#include "dtrain/checkpoint/checkpoint_manager.hpp"
#include "dtrain/checkpoint/model_io.hpp"
#include "dtrain/checkpoint/safetensors.hpp"
#include "dtrain/checkpoint/sidecar_evaluator.hpp"

#include "dtrain/data/any_dataset.hpp"
#include "dtrain/data/csv.hpp"
#include "dtrain/data/dataset.hpp"
#include "dtrain/data/fashion_mnist.hpp"
#include "dtrain/data/files.hpp"
#include "dtrain/data/idx.hpp"
#include "dtrain/data/npy.hpp"
#include "dtrain/data/sources.hpp"
#include "dtrain/data/stages.hpp"

#include "dtrain/distribute/cluster.hpp"
#include "dtrain/distribute/comm/communicator.hpp"
#include "dtrain/distribute/comm/threads.hpp"
#include "dtrain/distribute/input.hpp"
#include "dtrain/distribute/mirrored_strategy.hpp"
#include "dtrain/distribute/replica_context.hpp"
#include "dtrain/distribute/saving.hpp"
#include "dtrain/distribute/strategy.hpp"

#include "dtrain/losses/crossentropy.hpp"
#include "dtrain/losses/loss.hpp"
#include "dtrain/losses/mean_squared_error.hpp"

#include "dtrain/metrics/accuracy.hpp"
#include "dtrain/metrics/metric.hpp"

#include "dtrain/optimizers/adam.hpp"
#include "dtrain/optimizers/optimizer.hpp"
#include "dtrain/optimizers/rmsprop.hpp"
#include "dtrain/optimizers/schedules.hpp"
#include "dtrain/optimizers/sgd.hpp"

#include "dtrain/model/fit.hpp"
#include "dtrain/model/sequential.hpp"
