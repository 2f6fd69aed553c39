// The multi-worker tutorial: the same training, mirrored on every worker of a TF_CONFIG cluster.
// It differs from single_worker_mnist.cpp only in the strategy type. Start it by hand with TF_CONFIG
// set per worker, as in the tutorial, or with the launcher:
//   dtrain-launch -n 2 -- multi_worker_mnist --model cnn --batch-size 64 --epochs 3 --steps-per-epoch 70
//   dtrain-launch -n 2 -- multi_worker_mnist --model resnet --optimizer adam   (a small ResNet)
//   dtrain-launch -n 3 -- multi_worker_mnist --model resnet20 --optimizer adam (ResNet-20)
#include "mnist_setup.hpp"

#include <dtrain/distribute/comm/ring_tcp.hpp>
#ifdef DTRAIN_EXAMPLE_CUDA
#include <dtrain/backend/cuda.hpp>
#endif
#ifdef DTRAIN_EXAMPLE_NCCL
#include <dtrain/distribute/comm/nccl.hpp>
#endif

using strategy_type = dtrain::multi_worker_mirrored_strategy<dtrain::comm::ring_tcp>;
#if defined(DTRAIN_EXAMPLE_NCCL)
// GPU workers: NCCL for the gradients (--implementation auto or nccl), the TCP ring for the rest
using gpu_strategy_type = dtrain::multi_worker_mirrored_strategy<dtrain::comm::nccl, dtrain::cuda>;
#elif defined(DTRAIN_EXAMPLE_CUDA)
// GPU workers in a build without NCCL: the gradients staged through pinned host memory to the TCP ring
using gpu_strategy_type = dtrain::multi_worker_mirrored_strategy<dtrain::comm::ring_tcp, dtrain::cuda>;
#endif

template <class Net, class Strategy>
int train(Strategy& strategy, const mnist_setup::arguments& args) {
  const std::size_t global_batch_size = args.batch_size * strategy.num_replicas_in_sync();
  auto dataset = mnist_setup::mnist_dataset(global_batch_size, args.seed);
  auto model = strategy.template make_model<Net>(args.seed);
  mnist_setup::compile(model, args);
  model.fit(dataset, {.epochs = args.epochs, .steps_per_epoch = mnist_setup::steps(args, global_batch_size),
                      .validation_data = mnist_setup::validation(args), .callbacks = mnist_setup::callbacks(args),
                      .verbose = args.verbose});
  mnist_setup::save_weights(model, args, strategy.is_chief());
  mnist_setup::report_test(model);
  return 0;
}

/// --device gpu: each worker's replica on its GPU 0 (one GPU per worker, or workers sharing one: then
/// with --implementation ring, as NCCL refuses two ranks on one GPU).
template <class Net>
int run(const mnist_setup::arguments& args) {
  const dtrain::communication_options options{.implementation = mnist_setup::implementation(args),
                                              .gradient_compression = mnist_setup::gradient_compression(args)};
  if (args.device == "gpu") {
#ifdef DTRAIN_EXAMPLE_CUDA
    gpu_strategy_type strategy(options);
    return train<Net>(strategy, args);
#else
    throw dtrain::config_error("--device gpu: this build has no cuda backend (configure where the CUDA Toolkit is, "
                               "-DDTRAIN_CUDA=ON)");
#endif
  }
  strategy_type strategy(options);
  return train<Net>(strategy, args);
}

int main(int argc, char** argv) {
  return mnist_setup::main<run<mnist_setup::cnn>, run<mnist_setup::mlp>, true, true, run<mnist_setup::resnet>,
                           run<mnist_setup::resnet20>>(argc, argv);
}
