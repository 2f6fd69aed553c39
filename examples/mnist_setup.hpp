// The tutorial's mnist_setup.py, on Fashion-MNIST: the dataset, the models (mnist_models.hpp) and the
// command line shared by the single-worker and multi-worker examples.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>
#include <dtrain/dtrain.hpp>

#include "mnist_models.hpp"

namespace mnist_setup {

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
  std::int64_t save_every = 0;  // --save-freq N: back up every N batches; 0 ("epoch"): every epoch
  std::string save_weights;  // --save-weights: the chief writes the final weights (safetensors)
  std::string dir;           // --dir: where the saving examples write their files
  std::string device = "cpu";  // --device (the examples that offer it): cpu, or gpu (the cuda backend)
  std::string implementation = "auto";  // --implementation (with --device): TF's CommunicationImplementation
  std::string gradient_compression = "none";  // --gradient-compression (with --implementation): none, bf16, fp16
  std::string dtype_policy = "float32";  // --dtype-policy: float32, mixed_bfloat16 or mixed_float16
  bool validate = false;     // --validate: the test images as fit's validation data (val_loss, val_accuracy)
};

/// TF's `CommunicationOptions(implementation=...)` from --implementation.
inline dtrain::communication_options::implementation_type implementation(const arguments& a) {
  using impl = dtrain::communication_options::implementation_type;
  return a.implementation == "ring" ? impl::ring : a.implementation == "nccl" ? impl::nccl : impl::auto_;
}

/// `communication_options::gradient_compression` from --gradient-compression.
inline dtrain::compression gradient_compression(const arguments& a) {
  return a.gradient_compression == "bf16"   ? dtrain::compression::bf16
         : a.gradient_compression == "fp16" ? dtrain::compression::fp16
                                            : dtrain::compression::none;
}

/// Parses `app`'s command line: --help prints the help and exits with 0, a mistake is one line naming
/// the flag on stderr and exit code 2.
inline void parse_or_exit(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    std::exit(0);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s; see --help\n", app.get_name().c_str(), e.what());
    std::exit(2);
  }
}

/// The command line, parsed by CLI11: every value into its type with its range checked; a mistake is one
/// line naming the flag and exit code 2, --help the help and exit code 0.
inline arguments parse(int argc, char** argv, bool device_flag = false, bool implementation_flag = false) {
  arguments a;
  CLI::App app("Trains the tutorial's model on Fashion-MNIST.", std::filesystem::path(argv[0]).filename().string());
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a repeated flag: the last wins
  app.add_option("--model", a.model, "cnn, mlp, resnet (small) or resnet20")
      ->check(CLI::IsMember({"cnn", "mlp", "resnet", "resnet20"}))
      ->capture_default_str();
  app.add_option("--optimizer", a.optimizer, "sgd or adam")->check(CLI::IsMember({"sgd", "adam"}))->capture_default_str();
  app.add_option("--learning-rate", a.learning_rate)->check(CLI::Range(1e-9f, 10.0f))->capture_default_str();
  app.add_option("--batch-size", a.batch_size, "per worker")->check(CLI::Range(std::size_t(1), std::size_t(60000)))
      ->capture_default_str();
  app.add_option("--epochs", a.epochs)->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--steps-per-epoch", a.steps_per_epoch, "0: full passes over the 60,000 images")
      ->check(CLI::Range(std::int64_t(0), std::int64_t(1) << 40))->capture_default_str();
  app.add_option("--dtype-policy", a.dtype_policy, "what the layers compute in (Keras' dtype policy)")
      ->check(CLI::IsMember({"float32", "mixed_bfloat16", "mixed_float16"}))
      ->capture_default_str();
  app.add_option("--seed", a.seed)->capture_default_str();
  app.add_option("--verbose", a.verbose, "0 silent, 1 progress bar, 2 a line per epoch")
      ->check(CLI::IsMember({0, 1, 2}))->capture_default_str();
  app.add_option("--backup-dir", a.backup_dir, "back up there (backup_and_restore)");
  std::string save_freq = "epoch";
  app.add_option("--save-freq", save_freq, "epoch, or a number of batches")
      ->check(CLI::IsMember({"epoch"}) | CLI::Range(std::int64_t(1), std::int64_t(1) << 40))->capture_default_str();
  app.add_option("--save-weights", a.save_weights, "the chief writes the final weights there");
  app.add_option("--dir", a.dir, "where the saving examples write their files");
  app.add_flag("--validate", a.validate, "evaluate on the 10,000 test images after every epoch (val_accuracy)");
  if (device_flag) {
    app.add_option("--device", a.device, "cpu, or gpu: the model on GPU 0")
        ->check(CLI::IsMember({"cpu", "gpu"}))
        ->capture_default_str();
  }
  if (implementation_flag) {
    app.add_option("--implementation", a.implementation,
                   "the gradients' collectives: auto (NCCL for GPU workers where built), ring or nccl")
        ->check(CLI::IsMember({"auto", "ring", "nccl"}))
        ->capture_default_str();
    app.add_option("--gradient-compression", a.gradient_compression,
                   "the gradients between workers: none (FP32), bf16 or fp16 (the same on every worker)")
        ->check(CLI::IsMember({"none", "bf16", "fp16"}))
        ->capture_default_str();
  }
  parse_or_exit(app, argc, argv);
  if (!std::isfinite(a.learning_rate)) {  // CLI11's range check lets nan through
    std::fprintf(stderr, "%s: --learning-rate: %g is not a number in [1e-09 - 10]; see --help\n", app.get_name().c_str(),
                 double(a.learning_rate));
    std::exit(2);
  }
  if (save_freq != "epoch") a.save_every = std::stoll(save_freq);  // checked above: digits in range
  if (!a.save_weights.empty()) try {  // now, not after the training whose weights it would save
      dtrain::detail::create_folder_of(a.save_weights);
    } catch (const dtrain::io_error& e) {
      std::fprintf(stderr, "%s: --save-weights: %s; see --help\n", app.get_name().c_str(), e.what());
      std::exit(2);
    }
  return a;
}

/// The fit callbacks the command line asks for: backup_and_restore (the tutorial's fault tolerance).
inline dtrain::callback_list callbacks(const arguments& a) {
  dtrain::callback_list c;
  if (!a.backup_dir.empty()) {
    std::variant<std::string, std::int64_t> freq = std::string("epoch");
    if (a.save_every > 0) freq = a.save_every;
    c.push_back(dtrain::backup_and_restore({.backup_dir = a.backup_dir, .save_freq = freq}));
  }
  return c;
}

/// --save-weights: the chief writes the final weights; the other workers write nothing (the
/// tutorial's "only the chief saves").
template <class Net>
void save_weights(const Net& model, const arguments& a, bool chief) {
  if (!a.save_weights.empty() && chief) dtrain::checkpoint::save_weights(model, a.save_weights);
}

/// --dir, else the tutorial's folder under the temporary directory (/tmp/keras-model, /tmp/ckpt, ...). Every
/// worker of a local cluster gets the same folder, as the tutorial's workers share /tmp.
inline std::filesystem::path work_dir(const arguments& a, const char* seed_name) {
  return a.dir.empty() ? std::filesystem::temp_directory_path() / seed_name : std::filesystem::path(a.dir);
}

/// `mnist_dataset(batch_size)`: shuffled, repeated, batched training images.
inline auto mnist_dataset(std::size_t batch_size, std::uint64_t seed) {
  return dtrain::data::fashion_mnist_train() | dtrain::data::shuffle(60000, seed) | dtrain::data::repeat() |
         dtrain::data::batch(batch_size);
}

/// fit's validation data: the test images with --validate, else none.
inline dtrain::data::any_dataset<dtrain::data::example> validation(const arguments& a) {
  if (!a.validate) return {};
  return dtrain::data::fashion_mnist_test() | dtrain::data::batch(1000);
}

/// `build_and_compile_model()`: the model with the tutorial's loss and the chosen optimizer, under the
/// chosen dtype policy.
template <class Net>
void compile(Net& model, const arguments& a) {
  model.set_dtype_policy(dtrain::dtype_policy(a.dtype_policy));
  dtrain::any_optimizer opt;
  if (a.optimizer == "adam") opt = dtrain::adam{{.learning_rate = a.learning_rate}};
  else opt = dtrain::sgd{{.learning_rate = a.learning_rate}};
  model.compile({.optimizer = opt,
                 .loss = dtrain::sparse_categorical_crossentropy{{.from_logits = true}},
                 .metrics = {dtrain::accuracy{}}});
}

/// The evaluator task (Keras SidecarEvaluator): evaluates each checkpoint the chief writes to
/// `checkpoint_dir` on the test images, until the last epoch's; 0 when it evaluated any.
template <class Net>
int evaluate_checkpoints(const arguments& a, const std::filesystem::path& checkpoint_dir) {
  Net model(a.seed);
  compile(model, a);  // the loss and metrics to evaluate
  dtrain::checkpoint::sidecar_evaluator evaluator(
      model, {.checkpoint_dir = checkpoint_dir, .max_evaluations = a.epochs,  // the last epoch's checkpoint
              .idle_timeout = std::chrono::minutes(5)});
  const int n = evaluator.start(dtrain::data::fashion_mnist_test() | dtrain::data::batch(1000));
  std::printf("evaluator: %d checkpoint(s) evaluated\n", n);
  return n > 0 ? 0 : 1;
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

/// For a `catch (...)` in main: the message of the exception being handled on stderr, and the exit code
/// docs/troubleshooting.md lists. 138 (retryable) when a peer failed or the job was preempted; 1 for
/// anything else, dtrain's errors and every other exception (std::bad_alloc, a file system error), which
/// a restart would meet again. Uncaught, an exception would end the process with SIGABRT (134), which
/// orchestrators take for retryable.
inline int exit_code_of_current_exception() {
  try {
    throw;
  } catch (const dtrain::comm_error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return dtrain::peer_failure_exit_code;
  } catch (const dtrain::preempted& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return dtrain::retryable_exit_code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "error: an exception of unknown type\n");
  }
  return 1;
}

/// Parses the command line and runs the chosen model (the ResNets where the example offers them); errors
/// become messages and exit codes (exit_code_of_current_exception).
template <int (*Cnn)(const arguments&), int (*Mlp)(const arguments&), bool DeviceFlag = false,
          bool ImplementationFlag = false, int (*Resnet)(const arguments&) = nullptr,
          int (*Resnet20)(const arguments&) = nullptr>
int main(int argc, char** argv) try {
  const auto args = parse(argc, argv, DeviceFlag, ImplementationFlag);
  if (args.model == "resnet" || args.model == "resnet20") {
    if constexpr (Resnet != nullptr && Resnet20 != nullptr)
      return args.model == "resnet" ? Resnet(args) : Resnet20(args);
    std::fprintf(stderr, "--model %s: this example trains cnn or mlp (single_worker_mnist and "
                         "multi_worker_mnist train the ResNets)\n", args.model.c_str());
    return 2;
  }
  return args.model == "cnn" ? Cnn(args) : Mlp(args);
} catch (...) {
  return exit_code_of_current_exception();
}

}  // namespace mnist_setup
