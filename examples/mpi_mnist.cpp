// The multi-worker tutorial over MPI: multi_worker_mnist.cpp with comm::mpi for comm::ring_tcp, so the
// workers are MPI's ranks and their traffic takes the transports the cluster's MPI is tuned for.
//   mpirun -np 2 mpi_mnist --model cnn --batch-size 64 --epochs 3 --steps-per-epoch 70
//   srun --ntasks=8 mpi_mnist ...            (an MPI built with Slurm support)
#include "mnist_setup.hpp"

#include <dtrain/distribute/comm/mpi.hpp>

using strategy_type = dtrain::multi_worker_mirrored_strategy<dtrain::comm::mpi>;

template <class Net>
int run(const mnist_setup::arguments& args) {
  strategy_type strategy;
  const std::size_t global_batch_size = args.batch_size * strategy.num_replicas_in_sync();
  auto dataset = mnist_setup::mnist_dataset(global_batch_size, args.seed);
  auto model = strategy.make_model<Net>(args.seed);
  mnist_setup::compile(model, args);
  model.fit(dataset, {.epochs = args.epochs, .steps_per_epoch = mnist_setup::steps(args, global_batch_size),
                      .callbacks = mnist_setup::callbacks(args), .verbose = args.verbose});
  mnist_setup::save_weights(model, args, strategy.is_chief());
  mnist_setup::report_test(model);
  return 0;
}

int main(int argc, char** argv) { return mnist_setup::main<run<mnist_setup::cnn>, run<mnist_setup::mlp>>(argc, argv); }
