// The Keras distributed-training guide's single-host, multi-device example (MirroredStrategy) in dtrain,
// on Fashion-MNIST from Debian's IDX files:
//
//   strategy = tf.distribute.MirroredStrategy()
//   print("Number of devices: {}".format(strategy.num_replicas_in_sync))
//   with strategy.scope():
//       model = get_compiled_model()
//   train_dataset, val_dataset, test_dataset = get_dataset()
//   model.fit(train_dataset, epochs=2, validation_data=val_dataset)
//   model.evaluate(test_dataset)
//
// The batches are global (32): each step splits one among the replicas. On the CPU the devices are
// logical ("/cpu:0".."/cpu:N-1", --replicas N), replica threads sharing the cores; with --device gpu
// (a build with the cuda backend) they are every GPU of the machine, their gradients summed by NCCL
// (TF's NcclAllReduce) where the build has it, else through host memory.
//
//   mirrored_mnist [--replicas 2] [--device cpu|gpu] [--epochs 2] [--steps-per-epoch 0]
#include "mnist_setup.hpp"
#ifdef DTRAIN_EXAMPLE_CUDA
#include <dtrain/backend/cuda.hpp>
#endif
#ifdef DTRAIN_EXAMPLE_NCCL
#include <dtrain/distribute/comm/nccl.hpp>
#endif

namespace {

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
auto get_dataset() {
  const std::size_t batch_size = 32, num_val_samples = 10000;
  auto train = dtrain::data::fashion_mnist_train();
  return std::tuple{train | dtrain::data::take(60000 - num_val_samples) | dtrain::data::batch(batch_size),
                    train | dtrain::data::skip(60000 - num_val_samples) | dtrain::data::batch(batch_size),
                    dtrain::data::fashion_mnist_test() | dtrain::data::batch(batch_size)};
}

template <class Strategy>
int train(Strategy& strategy, int epochs, std::int64_t steps_per_epoch) {
  std::string devices;
  for (const auto& d : strategy.devices()) devices += (devices.empty() ? "'" : ", '") + d + "'";
  std::printf("Using MirroredStrategy with devices (%s)\nNumber of devices: %d\n", devices.c_str(),
              strategy.num_replicas_in_sync());
  auto model = get_compiled_model(strategy);
  auto [train_dataset, val_dataset, test_dataset] = get_dataset();
  model.fit(train_dataset, {.epochs = epochs, .steps_per_epoch = steps_per_epoch, .validation_data = val_dataset});
  const auto logs = model.evaluate(test_dataset, {.verbose = 0});
  std::printf("test_loss: %.4f\ntest_accuracy: %.4f\n", logs["loss"], logs["sparse_categorical_accuracy"]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  int replicas = 2, epochs = 2;
  std::int64_t steps_per_epoch = 0;
  std::string device = "cpu";
  CLI::App app("The Keras guide's MirroredStrategy example on Fashion-MNIST.", "mirrored_mnist");
  app.add_option("--replicas", replicas, "logical CPU devices (replica threads)")->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--device", device, "cpu, or gpu: every GPU")->check(CLI::IsMember({"cpu", "gpu"}))->capture_default_str();
  app.add_option("--epochs", epochs)->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--steps-per-epoch", steps_per_epoch, "0: full passes")
      ->check(CLI::Range(std::int64_t(0), std::int64_t(1) << 40))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (device == "gpu") {
#if defined(DTRAIN_EXAMPLE_NCCL)
    dtrain::mirrored_strategy<dtrain::comm::nccl, dtrain::cuda> strategy;
    return train(strategy, epochs, steps_per_epoch);
#elif defined(DTRAIN_EXAMPLE_CUDA)
    dtrain::mirrored_strategy<dtrain::comm::threads, dtrain::cuda> strategy;
    return train(strategy, epochs, steps_per_epoch);
#else
    throw dtrain::config_error("--device gpu: this build has no cuda backend (configure where the CUDA Toolkit is, "
                               "-DDTRAIN_CUDA=ON)");
#endif
  }
  std::vector<std::string> devices;
  for (int i = 0; i < replicas; ++i) devices.push_back("/cpu:" + std::to_string(i));
  dtrain::mirrored_strategy<> strategy(devices);
  return train(strategy, epochs, steps_per_epoch);
} catch (...) {
  return mnist_setup::exit_code_of_current_exception();
}
