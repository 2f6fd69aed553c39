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
#include "guide_mnist.hpp"
#ifdef DTRAIN_EXAMPLE_CUDA
#include <dtrain/backend/cuda.hpp>
#endif
#ifdef DTRAIN_EXAMPLE_NCCL
#include <dtrain/distribute/comm/nccl.hpp>
#endif

int main(int argc, char** argv) try {
  guide_mnist::options o;
  guide_mnist::parse(o, argc, argv, "mirrored_mnist", "The Keras guide's MirroredStrategy example on Fashion-MNIST.");
  if (o.device == "gpu") {
#if defined(DTRAIN_EXAMPLE_NCCL)
    dtrain::mirrored_strategy<dtrain::comm::nccl, dtrain::cuda> strategy;
    return guide_mnist::train(strategy, "MirroredStrategy", o);
#elif defined(DTRAIN_EXAMPLE_CUDA)
    dtrain::mirrored_strategy<dtrain::comm::threads, dtrain::cuda> strategy;
    return guide_mnist::train(strategy, "MirroredStrategy", o);
#else
    throw dtrain::config_error("--device gpu: this build has no cuda backend (configure where the CUDA Toolkit is, "
                               "-DDTRAIN_CUDA=ON)");
#endif
  }
  dtrain::mirrored_strategy<> strategy(o.cpus());
  return guide_mnist::train(strategy, "MirroredStrategy", o);
} catch (...) {
  return mnist_setup::exit_code_of_current_exception();
}
