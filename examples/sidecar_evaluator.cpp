// Side-car evaluation (Keras SidecarEvaluator, the distributed Keras guide): the cluster has an
// `evaluator` task besides the workers. The workers train and the chief writes a checkpoint every
// epoch; the evaluator, outside the ring, evaluates each new checkpoint on the test set as it appears.
// The same program plays both roles; TF_CONFIG's task type picks one:
//   TF_CONFIG='{"cluster": {"worker": ["localhost:12345", "localhost:23456"], "evaluator": ["localhost:34567"]},
//               "task": {"type": "evaluator", "index": 0}}' sidecar_evaluator --epochs 3 &
//   (and the two workers with "task": {"type": "worker", "index": 0 / 1})
#include "mnist_setup.hpp"

#include <dtrain/distribute/comm/ring_tcp.hpp>

using strategy_type = dtrain::multi_worker_mirrored_strategy<dtrain::comm::ring_tcp>;

template <class Net>
int run(const mnist_setup::arguments& args) {
  const std::filesystem::path checkpoint_dir = mnist_setup::work_dir(args, "sidecar-ckpt");
  if (dtrain::resolve_cluster().task_type == "evaluator") return mnist_setup::evaluate_checkpoints<Net>(args, checkpoint_dir);

  strategy_type strategy;
  const std::size_t global_batch_size = args.batch_size * strategy.num_replicas_in_sync();
  auto model = strategy.make_model<Net>(args.seed);
  mnist_setup::compile(model, args);
  dtrain::checkpoint::checkpoint_manager manager(checkpoint_dir, /*max_to_keep=*/args.epochs);
  const auto save_each_epoch = dtrain::lambda_callback({.on_epoch_end = [&](int epoch, const dtrain::logs&) {
    if (strategy.is_chief()) manager.save(model, {}, epoch + 1);  // ckpt-<epoch>, what the evaluator counts
  }});
  model.fit(mnist_setup::mnist_dataset(global_batch_size, args.seed),
            {.epochs = args.epochs, .steps_per_epoch = mnist_setup::steps(args, global_batch_size),
             .callbacks = {save_each_epoch}, .verbose = args.verbose});
  return 0;
}

int main(int argc, char** argv) { return mnist_setup::main<run<mnist_setup::cnn>, run<mnist_setup::mlp>>(argc, argv); }
