// The multi-worker tutorial's first step, "train the model on a single worker and make sure
// everything works", on Fashion-MNIST. multi_worker_mnist.cpp is this file with another strategy type.
//   single_worker_mnist --model cnn --optimizer sgd --learning-rate 0.001 --batch-size 64 --epochs 3 --steps-per-epoch 70
// --model resnet trains a small ResNet (mnist_setup.hpp), a functional model with skip connections;
// --model resnet20 the 20-layer ResNet of three stages (16, 32, 64 channels).
// With --device gpu the same program runs under one_device_strategy<cuda>("/gpu:0") (TF's
// OneDeviceStrategy): the backend is part of the model's type, so the strategy type is what changes.
#include "mnist_setup.hpp"
#ifdef DTRAIN_EXAMPLE_CUDA
#include <dtrain/backend/cuda.hpp>
#endif

template <class Net, class Strategy>
int train(Strategy& strategy, const mnist_setup::arguments& args) {
  const std::size_t global_batch_size = args.batch_size * strategy.num_replicas_in_sync();
  auto dataset = mnist_setup::mnist_dataset(global_batch_size, args.seed);
  auto model = strategy.template make_model<Net>(args.seed);
  mnist_setup::compile(model, args);
  model.fit(dataset, {.epochs = args.epochs, .steps_per_epoch = mnist_setup::steps(args, global_batch_size),
                      .callbacks = mnist_setup::callbacks(args), .verbose = args.verbose});
  mnist_setup::save_weights(model, args, strategy.is_chief());
  mnist_setup::report_test(model);
  return 0;
}

template <class Net>
int run(const mnist_setup::arguments& args) {
  if (args.device == "gpu") {
#ifdef DTRAIN_EXAMPLE_CUDA
    dtrain::one_device_strategy<dtrain::cuda> strategy("/gpu:0");
    return train<Net>(strategy, args);
#else
    throw dtrain::config_error("--device gpu: this build has no cuda backend (configure where the CUDA Toolkit is, "
                               "-DDTRAIN_CUDA=ON)");
#endif
  }
  dtrain::default_strategy strategy;
  return train<Net>(strategy, args);
}

int main(int argc, char** argv) {
  return mnist_setup::main<run<mnist_setup::cnn>, run<mnist_setup::mlp>, true, false, run<mnist_setup::resnet>,
                           run<mnist_setup::resnet20>>(argc, argv);
}
