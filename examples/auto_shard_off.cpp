// The tutorial's "Dataset sharding": by default each worker trains on its own share of every global
// batch (auto-shard DATA). With the policy OFF, no sharding: every worker sees every example.
//   dtrain-launch -n 2 -- auto_shard_off --epochs 2 --steps-per-epoch 20
#include "mnist_setup.hpp"

#include <dtrain/distribute/comm/ring_tcp.hpp>

using strategy_type = dtrain::multi_worker_mirrored_strategy<dtrain::comm::ring_tcp>;

template <class Net>
int run(const mnist_setup::arguments& args) {
  strategy_type strategy;
  const std::size_t global_batch_size = args.batch_size * strategy.num_replicas_in_sync();

  dtrain::data::options options;
  options.auto_shard = dtrain::data::auto_shard_policy::off;
  auto dataset_no_auto_shard = mnist_setup::mnist_dataset(global_batch_size, args.seed) | dtrain::data::with_options(options);

  auto model = strategy.make_model<Net>(args.seed);
  mnist_setup::compile(model, args);
  model.fit(dataset_no_auto_shard, {.epochs = args.epochs, .steps_per_epoch = mnist_setup::steps(args, global_batch_size),
                                    .verbose = args.verbose});
  mnist_setup::report_test(model);
  return 0;
}

int main(int argc, char** argv) { return mnist_setup::main<run<mnist_setup::cnn>, run<mnist_setup::mlp>>(argc, argv); }
