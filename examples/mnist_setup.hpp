// The tutorial's mnist_setup.py, on Fashion-MNIST: the dataset, the two models and the command line
// shared by the single-worker and multi-worker examples.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include <dtrain/dtrain.hpp>

namespace mnist_setup {

/// The tutorial's CNN.
using cnn = dtrain::sequential<dtrain::input<28, 28>,
                               dtrain::reshape<28, 28, 1>,
                               dtrain::conv2d<32, 3, dtrain::relu>,
                               dtrain::flatten,
                               dtrain::dense<128, dtrain::relu>,
                               dtrain::dense<10>>;

/// The distributed-training guide's MLP.
using mlp = dtrain::sequential<dtrain::input<28, 28>,
                               dtrain::flatten,
                               dtrain::dense<256, dtrain::relu>,
                               dtrain::dense<256, dtrain::relu>,
                               dtrain::dense<10>>;

struct arguments {
  std::string model = "cnn";
  std::string optimizer = "sgd";
  float learning_rate = 1e-3f;
  std::size_t batch_size = 64;
  int epochs = 3;
  std::int64_t steps_per_epoch = 70;  // the tutorial's; 0 = full passes over the 60,000 images
  std::uint64_t seed = 1;
  int verbose = 1;
  std::string backup_dir;    // --backup-dir: backup_and_restore there
  std::string save_freq = "epoch";  // --save-freq epoch|N
  std::string save_weights;  // --save-weights: the chief writes the final weights (safetensors)
  std::string dir;           // --dir: where the saving examples write their files
};

inline arguments parse(int argc, char** argv) {
  arguments a;
  auto usage = [&](const std::string& why) {
    std::fprintf(stderr,
                 "%s\nusage: %s [--model cnn|mlp] [--optimizer sgd|adam] [--learning-rate X] [--batch-size N]\n"
                 "          [--epochs N] [--steps-per-epoch N (0: full epochs)] [--seed N] [--verbose 0|1|2]\n"
                 "          [--backup-dir DIR [--save-freq epoch|N]] [--save-weights PATH] [--dir DIR]\n",
                 why.c_str(), argv[0]);
    std::exit(2);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--help" || k == "-h") usage("Trains the tutorial's model on Fashion-MNIST.");
    if (i + 1 >= argc) usage("missing value after " + k);
    const std::string v = argv[++i];
    char* end = nullptr;
    auto num = [&](auto parsed) {
      if (!end || *end != '\0' || v.empty()) usage("bad value '" + v + "' for " + k);
      return parsed;
    };
    if (k == "--model") a.model = v;
    else if (k == "--optimizer") a.optimizer = v;
    else if (k == "--learning-rate") a.learning_rate = num(std::strtof(v.c_str(), &end));
    else if (k == "--batch-size") a.batch_size = num(std::strtoull(v.c_str(), &end, 10));
    else if (k == "--epochs") a.epochs = static_cast<int>(num(std::strtol(v.c_str(), &end, 10)));
    else if (k == "--steps-per-epoch") a.steps_per_epoch = num(std::strtoll(v.c_str(), &end, 10));
    else if (k == "--seed") a.seed = num(std::strtoull(v.c_str(), &end, 10));
    else if (k == "--verbose") a.verbose = static_cast<int>(num(std::strtol(v.c_str(), &end, 10)));
    else if (k == "--backup-dir") a.backup_dir = v;
    else if (k == "--save-freq") a.save_freq = v;
    else if (k == "--save-weights") a.save_weights = v;
    else if (k == "--dir") a.dir = v;
    else usage("unknown option " + k);
  }
  if (a.model != "cnn" && a.model != "mlp") usage("--model must be cnn or mlp");
  if (a.optimizer != "sgd" && a.optimizer != "adam") usage("--optimizer must be sgd or adam");
  if (a.batch_size == 0 || a.epochs < 1 || a.steps_per_epoch < 0 || !(a.learning_rate > 0.0f))
    usage("--batch-size, --epochs and --learning-rate must be positive");
  if (a.save_freq != "epoch" && (a.save_freq.empty() || a.save_freq.find_first_not_of("0123456789") != std::string::npos ||
                                 std::stoll(a.save_freq) == 0))
    usage("--save-freq must be epoch or a positive number of batches");
  return a;
}

/// The fit callbacks the command line asks for: backup_and_restore (the seeds' fault tolerance).
inline dtrain::callback_list callbacks(const arguments& a) {
  dtrain::callback_list c;
  if (!a.backup_dir.empty()) {
    std::variant<std::string, std::int64_t> freq = a.save_freq;
    if (a.save_freq != "epoch") freq = std::int64_t(std::stoll(a.save_freq));
    c.push_back(dtrain::backup_and_restore({.backup_dir = a.backup_dir, .save_freq = freq}));
  }
  return c;
}

/// --save-weights: the chief writes the final weights; the other workers write nothing (the seeds'
/// "only the chief saves").
template <class Net>
void save_weights(const Net& model, const arguments& a, bool chief) {
  if (!a.save_weights.empty() && chief) dtrain::checkpoint::save_weights(model, a.save_weights);
}

/// --dir, else the seeds' folder under the temporary directory (/tmp/keras-model, /tmp/ckpt, ...). Every
/// worker of a local cluster gets the same folder, as the tutorial's workers share /tmp.
inline std::filesystem::path work_dir(const arguments& a, const char* seed_name) {
  return a.dir.empty() ? std::filesystem::temp_directory_path() / seed_name : std::filesystem::path(a.dir);
}

/// `mnist_dataset(batch_size)`: shuffled, repeated, batched training images.
inline auto mnist_dataset(std::size_t batch_size, std::uint64_t seed) {
  return dtrain::data::fashion_mnist_train() | dtrain::data::shuffle(60000, seed) | dtrain::data::repeat() |
         dtrain::data::batch(batch_size);
}

/// `build_and_compile_model()`: the model with the tutorial's loss and the chosen optimizer.
template <class Net>
void compile(Net& model, const arguments& a) {
  dtrain::any_optimizer opt;
  if (a.optimizer == "adam") opt = dtrain::adam{{.learning_rate = a.learning_rate}};
  else opt = dtrain::sgd{{.learning_rate = a.learning_rate}};
  model.compile({.optimizer = opt,
                 .loss = dtrain::sparse_categorical_crossentropy{{.from_logits = true}},
                 .metrics = {dtrain::accuracy{}}});
}

/// Steps per epoch: the tutorial's 70, or (0) one full pass over the 60,000 training images.
inline std::int64_t steps(const arguments& a, std::size_t global_batch_size) {
  return a.steps_per_epoch > 0 ? a.steps_per_epoch : std::int64_t((60000 + global_batch_size - 1) / global_batch_size);
}

/// The closing lines: loss and accuracy on the 10,000 test images. Every worker evaluates its share and
/// the results are aggregated, so every worker prints the same numbers.
template <class Net>
void report_test(Net& model) {
  const auto logs = model.evaluate(dtrain::data::fashion_mnist_test() | dtrain::data::batch(1000), {.verbose = 0});
  std::printf("test_loss: %.4f\ntest_accuracy: %.4f\n", logs["loss"], logs["accuracy"]);
}

/// Parses the command line and runs the chosen model; errors become messages and exit codes
/// (138, retryable, when a peer failed or the job was preempted).
template <int (*Cnn)(const arguments&), int (*Mlp)(const arguments&)>
int main(int argc, char** argv) try {
  const auto args = parse(argc, argv);
  return args.model == "cnn" ? Cnn(args) : Mlp(args);
} catch (const dtrain::comm_error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return dtrain::peer_failure_exit_code;
} catch (const dtrain::preempted& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return dtrain::retryable_exit_code;
} catch (const dtrain::error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}

}  // namespace mnist_setup
