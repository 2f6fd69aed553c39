#pragma once
/// \file
/// Keras `callbacks.LambdaCallback`: `lambda_callback({.on_epoch_end = ...})`, a callback whose hooks are
/// functions.

#include <cstdint>
#include <functional>
#include <utility>

#include "dtrain/callbacks/callback.hpp"

namespace dtrain {

/// The hooks of a `lambda_callback`, named as Keras' LambdaCallback arguments.
struct lambda_callback_options {
  std::function<void(const logs&)> on_train_begin{}, on_train_end{};
  std::function<void(int, const logs&)> on_epoch_begin{}, on_epoch_end{};
  std::function<void(std::int64_t, const logs&)> on_train_batch_begin{}, on_train_batch_end{};
};

/// Keras `callbacks.LambdaCallback`: any hook as a function.
class lambda_callback : public callback {
 public:
  explicit lambda_callback(lambda_callback_options o) : o_(std::move(o)) {}
  void on_train_begin(const logs& l) override { call(o_.on_train_begin, l); }
  void on_train_end(const logs& l) override { call(o_.on_train_end, l); }
  void on_epoch_begin(int e, const logs& l) override { call(o_.on_epoch_begin, e, l); }
  void on_epoch_end(int e, const logs& l) override { call(o_.on_epoch_end, e, l); }
  void on_train_batch_begin(std::int64_t b, const logs& l) override { call(o_.on_train_batch_begin, b, l); }
  void on_train_batch_end(std::int64_t b, const logs& l) override { call(o_.on_train_batch_end, b, l); }

 private:
  template <class F, class... A>
  static void call(const F& f, const A&... a) {
    if (f) f(a...);
  }
  lambda_callback_options o_;
};

}  // namespace dtrain
