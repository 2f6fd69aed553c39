// The tutorial's "Checkpoint saving and restoring": a checkpoint_manager (tf.train.CheckpointManager)
// writes the model and its optimizer state; every worker writes, only the chief's folder is kept; then
// every worker restores the latest checkpoint and training goes on under the strategy.
//   dtrain-launch -n 2 -- checkpoint_manager --epochs 2 --steps-per-epoch 20 --dir /tmp/ckpt
#include "mnist_setup.hpp"

#include <dtrain/distribute/comm/ring_tcp.hpp>

using strategy_type = dtrain::multi_worker_mirrored_strategy<dtrain::comm::ring_tcp>;

template <class Net>
int run(const mnist_setup::arguments& args) {
  strategy_type strategy;
  const std::size_t global_batch_size = args.batch_size * strategy.num_replicas_in_sync();
  const std::int64_t steps = mnist_setup::steps(args, global_batch_size);
  auto multi_worker_dataset = mnist_setup::mnist_dataset(global_batch_size, args.seed);
  auto multi_worker_model = strategy.make_model<Net>(args.seed);
  mnist_setup::compile(multi_worker_model, args);
  multi_worker_model.fit(multi_worker_dataset, {.epochs = args.epochs, .steps_per_epoch = steps, .verbose = args.verbose});

  const auto [task_type, task_id] = strategy.cluster_resolver();
  const std::filesystem::path checkpoint_dir = mnist_setup::work_dir(args, "ckpt");
  const auto write_checkpoint_dir = dtrain::write_filepath(checkpoint_dir, task_type, task_id, strategy.cluster().spec);
  dtrain::checkpoint::checkpoint_manager checkpoint_manager(write_checkpoint_dir, /*max_to_keep=*/1);
  const auto saved = checkpoint_manager.save(multi_worker_model);
  dtrain::remove_temp_dir(checkpoint_dir, task_type, task_id, strategy.cluster().spec);
  std::printf("%s %s:%d saved %s\n", strategy.is_chief() ? "chief" : "worker", task_type.c_str(), task_id,
              saved.c_str());

  // Every worker restores the chief's latest checkpoint (weights and optimizer state) and trains on.
  strategy.communicator().barrier();
  const auto latest_checkpoint = dtrain::checkpoint::latest_checkpoint(checkpoint_dir);
  if (!latest_checkpoint) throw dtrain::io_error("no checkpoint in " + checkpoint_dir.string());
  dtrain::checkpoint::restore_model(multi_worker_model, *latest_checkpoint);
  std::printf("restored %s (optimizer iterations %lld)\n", latest_checkpoint->filename().c_str(),
              static_cast<long long>(multi_worker_model.optimizer().iterations()));
  multi_worker_model.fit(multi_worker_dataset, {.epochs = 2, .steps_per_epoch = 20, .verbose = args.verbose});
  mnist_setup::report_test(multi_worker_model);
  return 0;
}

int main(int argc, char** argv) { return mnist_setup::main<run<mnist_setup::cnn>, run<mnist_setup::mlp>>(argc, argv); }
