// The multi-worker tutorial's first step, "train the model on a single worker and make sure
// everything works", on Fashion-MNIST:
//   single_worker_mnist --model cnn --optimizer sgd --learning-rate 0.001 --batch-size 64 --epochs 3 --steps-per-epoch 70
#include "mnist_setup.hpp"

template <class Net>
int run(const mnist_setup::arguments& args) {
  auto dataset = mnist_setup::mnist_dataset(args.batch_size, args.seed);
  Net model(args.seed);
  mnist_setup::compile(model, args);
  const std::int64_t steps =
      args.steps_per_epoch > 0 ? args.steps_per_epoch : std::int64_t((60000 + args.batch_size - 1) / args.batch_size);
  model.fit(dataset, {.epochs = args.epochs, .steps_per_epoch = steps, .verbose = args.verbose});
  mnist_setup::report_test(model);
  return 0;
}

int main(int argc, char** argv) try {
  const auto args = mnist_setup::parse(argc, argv);
  return args.model == "cnn" ? run<mnist_setup::cnn>(args) : run<mnist_setup::mlp>(args);
} catch (const dtrain::error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
