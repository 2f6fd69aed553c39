// Fault tolerance with backup_and_restore (Keras BackupAndRestore), as the tutorial and the Keras docs
// show it: training is interrupted (here by a callback that throws, as the docs' InterruptingCallback;
// in real life a worker dies and `dtrain-launch --max-restarts` starts them all again), then a new
// run with the same backup_dir resumes where the last backup was taken. Once with save_freq "epoch",
// once with a number of batches (the backup then also records the position inside the epoch).
//   dtrain-launch -n 2 -- backup_and_restore --epochs 4 --steps-per-epoch 20 --dir /tmp/backup
#include "mnist_setup.hpp"

#include <dtrain/distribute/comm/ring_tcp.hpp>

using strategy_type = dtrain::multi_worker_mirrored_strategy<dtrain::comm::ring_tcp>;

struct interrupted : std::runtime_error {
  interrupted() : std::runtime_error("Interrupting!") {}
};

/// Throws at the start of batch `batch` of epoch `epoch` (0-based, as the hooks count).
class interrupting_callback : public dtrain::callback {
 public:
  interrupting_callback(int epoch, std::int64_t batch) : epoch_(epoch), batch_(batch) {}
  void on_train_batch_begin(std::int64_t batch, const dtrain::logs&) override {
    if (model().position.epoch == epoch_ && batch == batch_) throw interrupted();
  }

 private:
  int epoch_;
  std::int64_t batch_;
};

template <class Net>
void train_interrupted_then_resume(strategy_type& strategy, const mnist_setup::arguments& args,
                                   std::variant<std::string, std::int64_t> save_freq) {
  const std::size_t global_batch_size = args.batch_size * strategy.num_replicas_in_sync();
  const std::int64_t steps = mnist_setup::steps(args, global_batch_size);
  const auto callback = dtrain::backup_and_restore({.backup_dir = mnist_setup::work_dir(args, "backup"),
                                                    .save_freq = save_freq});
  const int stop_epoch = args.epochs / 2;
  const std::int64_t stop_batch = steps / 2;
  {
    auto model = strategy.make_model<Net>(args.seed);
    mnist_setup::compile(model, args);
    try {
      model.fit(mnist_setup::mnist_dataset(global_batch_size, args.seed),
                {.epochs = args.epochs, .steps_per_epoch = steps,
                 .callbacks = {callback, interrupting_callback(stop_epoch, stop_batch)}, .verbose = args.verbose});
    } catch (const interrupted&) {
      if (strategy.is_chief()) std::printf("interrupted in epoch %d at batch %lld\n", stop_epoch + 1, (long long)stop_batch);
      std::fflush(stdout);
    }
  }
  // A fresh start (a restarted process builds its model anew): fit resumes from the backup.
  auto model = strategy.make_model<Net>(args.seed);
  mnist_setup::compile(model, args);
  const auto history = model.fit(mnist_setup::mnist_dataset(global_batch_size, args.seed),
                                 {.epochs = args.epochs, .steps_per_epoch = steps, .callbacks = {callback},
                                  .verbose = args.verbose});
  if (strategy.is_chief())
    std::printf("save_freq %s: the second run trained epochs %d to %d (%zu of %d)\n",
                std::holds_alternative<std::string>(save_freq) ? "epoch"
                                                               : std::to_string(std::get<std::int64_t>(save_freq)).c_str(),
                history.epochs.front() + 1, history.epochs.back() + 1, history.epochs.size(), args.epochs);
}

template <class Net>
int run(const mnist_setup::arguments& args) {
  strategy_type strategy;
  train_interrupted_then_resume<Net>(strategy, args, std::string("epoch"));
  train_interrupted_then_resume<Net>(strategy, args, std::int64_t{5});
  return 0;
}

int main(int argc, char** argv) { return mnist_setup::main<run<mnist_setup::cnn>, run<mnist_setup::mlp>>(argc, argv); }
