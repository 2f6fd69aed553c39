// The parameter server tutorial's custom training loop, with a ClusterCoordinator, on Fashion-MNIST:
//
//   coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
//   with strategy.scope():
//       model = ...; optimizer = tf.keras.optimizers.RMSprop(learning_rate=0.1)
//       accuracy = tf.keras.metrics.Accuracy()
//   per_worker_dataset = coordinator.create_per_worker_dataset(per_worker_dataset_fn)
//   per_worker_iterator = iter(per_worker_dataset)
//   for i in range(num_epochs):
//       accuracy.reset_states()
//       for _ in range(steps_per_epoch):
//           coordinator.schedule(step_fn, args=(per_worker_iterator,))
//       coordinator.join()
//       print("Finished epoch %d, accuracy is %f." % (i, accuracy.result().numpy()))
//   loss = coordinator.schedule(step_fn, args=(per_worker_iterator,))
//   print("Final loss is %f" % loss.fetch())
//
// Every task runs this program (C++ ships no functions to workers): on the chief the coordinator
// schedules, on a worker `join` and `fetch` run what the coordinator sends until it returns, and a ps
// task's strategy serves the variables and never returns. Launched on this machine:
//   dtrain-launch -n 2 --ps 1 -- parameter_server_custom_loop --epochs 4 --steps-per-epoch 70
#include "mnist_setup.hpp"

#include <dtrain/distribute/cluster_coordinator.hpp>

template <class Net>
int run(const mnist_setup::arguments& args) {
  dtrain::parameter_server_strategy strategy;

  // the strategy's scope: the model's variables, the optimizer's and the metrics' live on the ps tasks
  auto model = strategy.make_model<Net>(args.seed);
  auto& optimizer = strategy.make_optimizer(dtrain::rmsprop{{.learning_rate = args.learning_rate}});
  auto& accuracy = strategy.make_metric(dtrain::sparse_categorical_accuracy{});
  const dtrain::any_loss loss_object =
      dtrain::sparse_categorical_crossentropy{{.from_logits = true, .reduction = dtrain::reduction::none}};
  dtrain::cluster_coordinator coordinator(strategy);  // (after what its functions use, so it ends first)

  // each worker shuffles and batches its own shard of the images
  auto per_worker_dataset = coordinator.create_per_worker_dataset([&](const dtrain::input_context& ctx) {
    return dtrain::data::fashion_mnist_train() | dtrain::data::shard(ctx.num_input_pipelines, ctx.input_pipeline_id) |
           dtrain::data::shuffle(60000, args.seed) | dtrain::data::repeat() | dtrain::data::batch(args.batch_size);
  });
  auto per_worker_iterator = per_worker_dataset.make_iterator();

  auto step_fn = [&](decltype(per_worker_iterator)& iterator) {
    auto [x, y] = *iterator.next();
    const float loss = model.value_and_gradients(x, y, loss_object, args.batch_size);
    optimizer.apply_gradients(model.gradients(), model.parameters());
    accuracy.update_state(y, model(x));
    return loss;
  };

  const std::int64_t steps_per_epoch = mnist_setup::steps(args, args.batch_size);
  for (int i = 0; i < args.epochs; ++i) {
    accuracy.reset_state();
    for (std::int64_t k = 0; k < steps_per_epoch; ++k) coordinator.schedule(step_fn, per_worker_iterator);
    coordinator.join();  // wait at epoch boundaries
    if (strategy.is_chief()) std::printf("Finished epoch %d, accuracy is %f.\n", i, double(accuracy.result()));
  }
  auto loss = coordinator.schedule(step_fn, per_worker_iterator);
  const float final_loss = loss.fetch();
  if (strategy.is_chief()) std::printf("Final loss is %f\n", double(final_loss));
  coordinator.join();  // the coordinator's model takes the ps tasks' final variables
  if (strategy.is_chief()) {
    mnist_setup::compile(model, args);  // for evaluate: the loss and the accuracy metric
    mnist_setup::report_test(model);
  }
  return 0;
}

int main(int argc, char** argv) { return mnist_setup::main<run<mnist_setup::cnn>, run<mnist_setup::mlp>>(argc, argv); }
