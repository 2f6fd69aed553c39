// The tutorial's "Model saving and loading" and the saving Q&A: under a multi-worker strategy every
// worker runs the saving code, but only the chief's file is kept; the others write into a temporary
// folder beside it (write_filepath) and delete it (remove_temp_dir). Then the saved model is loaded
// and training goes on, on a single worker, as in the tutorial.
//   dtrain-launch -n 2 -- save_and_load --epochs 2 --steps-per-epoch 20 --dir /tmp/keras-model
#include "mnist_setup.hpp"

#include <dtrain/distribute/comm/ring_tcp.hpp>

using strategy_type = dtrain::multi_worker_mirrored_strategy<dtrain::comm::ring_tcp>;

template <class Net>
int run(const mnist_setup::arguments& args) {
  strategy_type strategy;
  const std::size_t global_batch_size = args.batch_size * strategy.num_replicas_in_sync();
  auto multi_worker_model = strategy.make_model<Net>(args.seed);
  mnist_setup::compile(multi_worker_model, args);
  multi_worker_model.fit(mnist_setup::mnist_dataset(global_batch_size, args.seed),
                         {.epochs = args.epochs, .steps_per_epoch = mnist_setup::steps(args, global_batch_size),
                          .verbose = args.verbose});

  // Every worker saves: the chief to model_path, the others to <dir>/workertemp_<id>/, removed at once.
  const auto [task_type, task_id] = strategy.cluster_resolver();
  const std::filesystem::path model_path = mnist_setup::work_dir(args, "keras-model") / "model.safetensors";
  const auto write_model_path = dtrain::write_filepath(model_path, task_type, task_id, strategy.cluster().spec);
  dtrain::checkpoint::save_model(multi_worker_model, write_model_path);
  dtrain::remove_temp_dir(model_path, task_type, task_id, strategy.cluster().spec);
  std::printf("%s %s:%d saved %s\n", strategy.is_chief() ? "chief" : "worker", task_type.c_str(), task_id,
              write_model_path.c_str());

  // Every worker loads the chief's file, once the chief has written it.
  strategy.communicator().barrier();
  auto loaded_model = dtrain::checkpoint::load_model<Net>(model_path);
  mnist_setup::compile(loaded_model, args);
  loaded_model.fit(mnist_setup::mnist_dataset(args.batch_size, args.seed),
                   {.epochs = 2, .steps_per_epoch = 20, .verbose = args.verbose});
  std::printf("loaded %s and trained it 2 more epochs\n", model_path.c_str());
  return 0;
}

int main(int argc, char** argv) { return mnist_setup::main<run<mnist_setup::cnn>, run<mnist_setup::mlp>>(argc, argv); }
