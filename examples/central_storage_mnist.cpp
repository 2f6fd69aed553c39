// The Keras distributed-training guide's single-host example with the guide's other synchronous
// strategy, TF's CentralStorageStrategy, on Fashion-MNIST from Debian's IDX files:
//
//   strategy = tf.distribute.experimental.CentralStorageStrategy()
//   with strategy.scope():
//       model = get_compiled_model()
//   model.fit(train_dataset, epochs=2, validation_data=val_dataset)
//
// The replicas compute as mirrored_mnist's do; the variables and the optimizer's state are kept once, on
// the parameter device ("/cpu:0"; with --device gpu the first GPU), which alone applies each update.
//
//   central_storage_mnist [--replicas 2] [--device cpu|gpu] [--epochs 2] [--steps-per-epoch 0]
#include "guide_mnist.hpp"
#ifdef DTRAIN_EXAMPLE_CUDA
#include <dtrain/backend/cuda.hpp>
#endif

int main(int argc, char** argv) try {
  guide_mnist::options o;
  guide_mnist::parse(o, argc, argv, "central_storage_mnist",
                     "The Keras guide's example under CentralStorageStrategy, on Fashion-MNIST.");
  if (o.device == "gpu") {
#if defined(DTRAIN_EXAMPLE_CUDA)
    dtrain::central_storage_strategy<dtrain::cuda> strategy;
    std::printf("Variables on %s\n", strategy.parameter_device().c_str());
    return guide_mnist::train(strategy, "CentralStorageStrategy", o);
#else
    throw dtrain::config_error("--device gpu: this build has no cuda backend (configure where the CUDA Toolkit is, "
                               "-DDTRAIN_CUDA=ON)");
#endif
  }
  dtrain::central_storage_strategy<> strategy(o.cpus());
  std::printf("Variables on %s\n", strategy.parameter_device().c_str());
  return guide_mnist::train(strategy, "CentralStorageStrategy", o);
} catch (...) {
  return mnist_setup::exit_code_of_current_exception();
}
