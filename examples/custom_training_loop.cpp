// The distributed training guide's custom training loop: strategy.run + reduce + compute_average_loss.
// Runs on one worker as is, or on many under the launcher (the strategy reads TF_CONFIG):
//   custom_training_loop --epochs 2 --steps-per-epoch 50
//   dtrain-launch -n 2 -- custom_training_loop --epochs 2 --steps-per-epoch 50
#include "mnist_setup.hpp"

#include <dtrain/distribute/comm/ring_tcp.hpp>

using strategy_type = dtrain::multi_worker_mirrored_strategy<dtrain::comm::ring_tcp>;

template <class Net>
int run(const mnist_setup::arguments& args) {
  strategy_type strategy;
  const std::size_t global_batch_size = args.batch_size * strategy.num_replicas_in_sync();
  auto dist_dataset = strategy.distribute_dataset(mnist_setup::mnist_dataset(global_batch_size, args.seed));

  auto model = strategy.make_model<Net>(args.seed);
  // reduction none: the per-example losses, averaged over the GLOBAL batch by hand below
  const dtrain::any_loss loss_object =
      dtrain::sparse_categorical_crossentropy{{.from_logits = true, .reduction = dtrain::reduction::none}};
  dtrain::adam optimizer{{.learning_rate = args.learning_rate}};

  // train_step: the GradientTape block of the guide. Under the strategy the gradients are summed over
  // the replicas inside value_and_gradients, so every replica applies the same update.
  auto train_step = [&](const dtrain::data::example& inputs) {
    const auto& [features, labels] = inputs;
    const float loss = model.value_and_gradients(features, labels, loss_object, global_batch_size,
                                                 strategy.num_replicas_in_sync());
    optimizer.apply_gradients(model.gradients(), model.parameters());
    return loss;
  };

  auto iterator = dtrain::data::make_iterator(dist_dataset);
  const std::int64_t steps = mnist_setup::steps(args, global_batch_size);
  for (int epoch = 0; epoch < args.epochs; ++epoch) {
    float total_loss = 0.0f;
    for (std::int64_t step = 0; step < steps; ++step) {
      const float per_replica_loss = strategy.run(train_step, *iterator.next());
      total_loss += strategy.reduce(dtrain::reduce_op::sum, per_replica_loss);
    }
    if (strategy.is_chief())
      std::printf("Epoch %d, Loss: %.4f\n", epoch + 1, total_loss / static_cast<float>(steps));
  }
  model.compile({.optimizer = optimizer, .loss = loss_object, .metrics = {dtrain::accuracy{}}});
  mnist_setup::report_test(model);
  return 0;
}

int main(int argc, char** argv) { return mnist_setup::main<run<mnist_setup::cnn>, run<mnist_setup::mlp>>(argc, argv); }
