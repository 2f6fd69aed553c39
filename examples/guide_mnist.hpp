#pragma once
// The Keras distributed-training guide's single-host example, shared by the strategies that run it
// (mirrored_mnist, central_storage_mnist): its get_compiled_model(), get_dataset() and the lines that
// train and evaluate, on Fashion-MNIST from Debian's IDX files.
#include "mnist_setup.hpp"

namespace guide_mnist {

/// The command line: --replicas N (logical CPU devices), --device cpu|gpu, --epochs, --steps-per-epoch.
struct options {
  int replicas = 2, epochs = 2;
  std::int64_t steps_per_epoch = 0;
  std::string device = "cpu";
  /// "/cpu:0" .. "/cpu:N-1".
  std::vector<std::string> cpus() const {
    std::vector<std::string> d;
    for (int i = 0; i < replicas; ++i) d.push_back("/cpu:" + std::to_string(i));
    return d;
  }
};
/// Parses the command line into `o` (mnist_setup::parse_or_exit: --help exits with 0, a mistake with 2).
inline void parse(options& o, int argc, char** argv, const std::string& name, const std::string& what) {
  CLI::App app(what, name);
  app.add_option("--replicas", o.replicas, "logical CPU devices (replica threads)")->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--device", o.device, "cpu, or gpu: every GPU")->check(CLI::IsMember({"cpu", "gpu"}))->capture_default_str();
  app.add_option("--epochs", o.epochs)->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--steps-per-epoch", o.steps_per_epoch, "0: full passes")
      ->check(CLI::Range(std::int64_t(0), std::int64_t(1) << 40))->capture_default_str();
  mnist_setup::parse_or_exit(app, argc, argv);
}

/// The guide's get_compiled_model(): two dense layers of 256 and 10 logits, Adam.
template <class Strategy>
auto get_compiled_model(Strategy& strategy) {
  auto model = strategy.template make_model<mnist_setup::mlp>();
  model.compile({.optimizer = dtrain::adam{},
                 .loss = dtrain::sparse_categorical_crossentropy{{.from_logits = true}},
                 .metrics = {dtrain::sparse_categorical_accuracy{}}});
  return model;
}

/// The guide's get_dataset(): batches of 32, the last 10,000 training images kept for validation.
inline auto get_dataset() {
  const std::size_t batch_size = 32, num_val_samples = 10000;
  auto train = dtrain::data::fashion_mnist_train();
  return std::tuple{train | dtrain::data::take(60000 - num_val_samples) | dtrain::data::batch(batch_size),
                    train | dtrain::data::skip(60000 - num_val_samples) | dtrain::data::batch(batch_size),
                    dtrain::data::fashion_mnist_test() | dtrain::data::batch(batch_size)};
}

/// The guide's lines after the strategy: its devices, fit with validation, evaluate on the test images.
template <class Strategy>
int train(Strategy& strategy, const char* tf_name, const options& o) {
  std::string devices;
  for (const auto& d : strategy.devices()) devices += (devices.empty() ? "'" : ", '") + d + "'";
  std::printf("Using %s with devices (%s)\nNumber of devices: %d\n", tf_name, devices.c_str(),
              strategy.num_replicas_in_sync());
  auto model = get_compiled_model(strategy);
  auto [train_dataset, val_dataset, test_dataset] = get_dataset();
  model.fit(train_dataset, {.epochs = o.epochs, .steps_per_epoch = o.steps_per_epoch, .validation_data = val_dataset});
  const auto logs = model.evaluate(test_dataset, {.verbose = 0});
  std::printf("test_loss: %.4f\ntest_accuracy: %.4f\n", logs["loss"], logs["sparse_categorical_accuracy"]);
  return 0;
}

}  // namespace guide_mnist
