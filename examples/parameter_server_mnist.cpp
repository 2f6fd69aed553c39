// The parameter server tutorial with Model.fit: a coordinator (the chief task) schedules the training
// steps on the workers, and the ps tasks hold the variables and apply the updates (asynchronous
// training). Every task runs this program with its own TF_CONFIG; the ps tasks serve until the
// coordinator is done. With the launcher (one chief, N workers, K ps tasks on this machine):
//   dtrain-launch -n 2 --ps 1 -- parameter_server_mnist --model cnn --epochs 3 --steps-per-epoch 70
// or by hand, each process with TF_CONFIG = {"cluster": {"chief": [...], "worker": [...], "ps": [...]},
// "task": {"type": "worker", "index": 0}} and so on, as the tutorial's in-process cluster.
// With --backup-dir the coordinator backs up the ps tasks' variables and optimizer state every epoch,
// and a job restarted after a failure resumes from there. With an `evaluator` task in the cluster the
// coordinator writes a checkpoint every epoch (to --dir, else /tmp/ps-ckpt), which the evaluator task,
// running this program too, evaluates on the test images as each appears (the guide's side-car).
#include "mnist_setup.hpp"

#include <dtrain/distribute/parameter_server_strategy.hpp>

template <class Net>
int run(const mnist_setup::arguments& args) {
  const dtrain::cluster_info cluster = dtrain::resolve_cluster();
  const std::filesystem::path checkpoint_dir = mnist_setup::work_dir(args, "ps-ckpt");
  if (cluster.task_type == "evaluator") return mnist_setup::evaluate_checkpoints<Net>(args, checkpoint_dir);
  // the tutorial's partitioner: shards of at least 256 KiB, at most one per ps task
  const auto num_ps = std::size_t(cluster.spec.num_tasks("ps"));
  dtrain::parameter_server_strategy strategy(
      {.variable_partitioner = dtrain::min_size_partitioner{.min_shard_bytes = 256 << 10, .max_shards = std::max<std::size_t>(1, num_ps)}},
      cluster);

  auto model = strategy.make_model<Net>(args.seed);
  mnist_setup::compile(model, args);
  dtrain::callback_list callbacks = mnist_setup::callbacks(args);
  std::optional<dtrain::checkpoint::checkpoint_manager> manager;  // the coordinator's, for an evaluator task
  const auto save_each_epoch = dtrain::lambda_callback({.on_epoch_end = [&](int epoch, const dtrain::logs&) {
    manager->save(model, {}, epoch + 1);  // the ps tasks' variables (read back at each epoch's end)
  }});
  if (strategy.is_chief() && cluster.spec.num_tasks("evaluator") > 0) {
    manager.emplace(checkpoint_dir, /*max_to_keep=*/args.epochs);
    callbacks.push_back(save_each_epoch);
  }
  // every worker reads the same pipeline and trains on its share of the batches (worker i of W: i, i + W, ...)
  model.fit(mnist_setup::mnist_dataset(args.batch_size, args.seed),
            {.epochs = args.epochs, .steps_per_epoch = mnist_setup::steps(args, args.batch_size),
             .validation_data = mnist_setup::validation(args), .callbacks = callbacks,
             .verbose = args.verbose});
  mnist_setup::save_weights(model, args, strategy.is_chief());
  if (strategy.is_chief()) mnist_setup::report_test(model);  // the coordinator evaluates, as in the tutorial
  return 0;
}

int main(int argc, char** argv) { return mnist_setup::main<run<mnist_setup::cnn>, run<mnist_setup::mlp>>(argc, argv); }
