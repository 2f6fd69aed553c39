// What the compile-fail programs take of dtrain: the model and every layer (dtrain.hpp's strategies,
// data, callbacks and checkpoints would triple the time of each of these two dozen compilations).
#pragma once
#include <dtrain/layers/activations.hpp>
#include <dtrain/layers/attention.hpp>
#include <dtrain/layers/bidirectional.hpp>
#include <dtrain/layers/conv1d.hpp>
#include <dtrain/layers/conv2d.hpp>
#include <dtrain/layers/conv2d_transpose.hpp>
#include <dtrain/layers/dense.hpp>
#include <dtrain/layers/depthwise_conv2d.hpp>
#include <dtrain/layers/dropout.hpp>
#include <dtrain/layers/embedding.hpp>
#include <dtrain/layers/merging.hpp>
#include <dtrain/layers/normalization.hpp>
#include <dtrain/layers/pooling.hpp>
#include <dtrain/layers/recurrent.hpp>
#include <dtrain/layers/reshape.hpp>
#include <dtrain/layers/time_distributed.hpp>
#include <dtrain/model/sequential.hpp>
