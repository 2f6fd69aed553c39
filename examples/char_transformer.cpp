// Character-level text generation with a small GPT: the text-generation tutorial's task (predict the
// next character) with the miniature GPT of Keras' examples, trained on the fortune cookies of Debian's
// `fortunes` package; or with the tutorial's recurrent model (--model lstm). Mirrored over the workers
// of a cluster (TF_CONFIG, or the launcher), one worker without one; every worker reports the same
// losses and perplexities and prints the same sampled text.
//   char_transformer --epochs 2 --steps-per-epoch 200
//   dtrain-launch -n 2 -- char_transformer --epochs 2 --steps-per-epoch 100
//   char_transformer --model lstm
#include "mnist_setup.hpp"  // the examples' command-line and exit-code helpers

#include <random>

#include <dtrain/distribute/comm/ring_tcp.hpp>

namespace {

constexpr std::size_t sequence_length = 128, max_tokens = 128, d_model = 128, heads = 4;

/// GPT-2's decoder block (normalization first): causal self-attention and a GELU feed-forward, each
/// added to its input. Block I reads node tag<4 I> and ends in tag<4 I + 4>.
template <int I>
struct tag;
template <int I>
using decoder_block = dtrain::block<
    dtrain::layer_normalization<>,
    dtrain::node<tag<4 * I + 1>, dtrain::multi_head_attention<heads, d_model / heads, dtrain::use_causal_mask<true>>>,
    dtrain::node<tag<4 * I + 2>, dtrain::add, tag<4 * I>, tag<4 * I + 1>>, dtrain::layer_normalization<>,
    dtrain::dense<4 * d_model, dtrain::gelu>, dtrain::dropout<0.1f>, dtrain::node<tag<4 * I + 3>, dtrain::dense<d_model>>,
    dtrain::node<tag<4 * I + 4>, dtrain::add, tag<4 * I + 2>, tag<4 * I + 3>>>;
struct tokens;
struct positions;
/// Token and position embeddings added, two decoder blocks, the next character's logits at every step.
using gpt = dtrain::functional<dtrain::input<sequence_length>, dtrain::node<tokens, dtrain::embedding<max_tokens, d_model>>,
                               dtrain::node<positions, dtrain::position_embedding<sequence_length>>,
                               dtrain::node<tag<0>, dtrain::add, tokens, positions>, decoder_block<0>, decoder_block<1>,
                               dtrain::layer_normalization<>, dtrain::dense<max_tokens>>;

/// The tutorial's recurrent model: embeddings, an LSTM over the sequence, the logits at every step.
using lstm_model = dtrain::sequential<dtrain::input<sequence_length>, dtrain::embedding<max_tokens, 64>,
                                      dtrain::lstm<256, dtrain::return_sequences<true>>, dtrain::dense<max_tokens>>;

struct arguments {
  std::string model = "transformer";
  std::string corpus = "/usr/share/games/fortunes";
  std::size_t batch_size = 32;
  int epochs = 2;
  std::int64_t steps_per_epoch = 200;
  float learning_rate = 1e-3f;
  std::string prompt = "The ";
  std::size_t sample_length = 300;
  float temperature = 0.8f;
  std::uint64_t seed = 1;
  int verbose = 2;
};

arguments parse(int argc, char** argv) {
  arguments a;
  CLI::App app("Trains a small GPT on text, one character at a time, and samples from it.",
               std::filesystem::path(argv[0]).filename().string());
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--model", a.model, "transformer (two GPT blocks) or lstm")
      ->check(CLI::IsMember({"transformer", "lstm"}))
      ->capture_default_str();
  app.add_option("--corpus", a.corpus, "a text file, or a folder whose files without an extension are the text "
                                       "(the fortunes package's layout)")
      ->capture_default_str();
  app.add_option("--batch-size", a.batch_size, "per worker")->check(CLI::Range(std::size_t(1), std::size_t(4096)))
      ->capture_default_str();
  app.add_option("--epochs", a.epochs)->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--steps-per-epoch", a.steps_per_epoch, "0: full passes over the text")
      ->check(CLI::Range(std::int64_t(0), std::int64_t(1) << 40))->capture_default_str();
  app.add_option("--learning-rate", a.learning_rate, "AdamW's, after a warm-up, along a cosine")
      ->check(CLI::Range(1e-9f, 10.0f))->capture_default_str();
  app.add_option("--prompt", a.prompt, "where the sampled text starts")->capture_default_str();
  app.add_option("--sample-length", a.sample_length, "characters to sample after training")
      ->check(CLI::Range(std::size_t(0), std::size_t(100000)))->capture_default_str();
  app.add_option("--temperature", a.temperature)->check(CLI::Range(0.01f, 10.0f))->capture_default_str();
  app.add_option("--seed", a.seed)->capture_default_str();
  app.add_option("--verbose", a.verbose, "0 silent, 1 progress bar, 2 a line per epoch")
      ->check(CLI::IsMember({0, 1, 2}))->capture_default_str();
  mnist_setup::parse_or_exit(app, argc, argv);
  return a;
}

/// The corpus: one file, or the files of a folder that have no extension, in name order.
std::string read_corpus(const std::filesystem::path& path) {
  if (!std::filesystem::is_directory(path)) return dtrain::data::read_text(path);
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(path))
    if (e.is_regular_file() && !e.path().has_extension()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& f : files) text += dtrain::data::read_text(f);
  if (text.empty())
    throw dtrain::io_error(path.string() + ": no text (no file without an extension in the folder; install the "
                           "fortunes package, or give --corpus a text file)");
  return text;
}

/// Continues `prompt` one character at a time: the logits at the last character of the (at most
/// sequence_length) context, divided by the temperature, sampled. The model is causal, so the context
/// sits at the start of the window and what follows it does not matter.
template <class Model>
std::string sample(Model& model, const dtrain::data::text_vectorization& vectorize, const arguments& a) {
  std::vector<std::int32_t> ids = vectorize(a.prompt);
  if (ids.empty()) ids.push_back(dtrain::data::text_vectorization::oov);
  std::mt19937_64 rng(a.seed);
  dtrain::tensor x = dtrain::zeros({1, sequence_length});
  const std::size_t vocabulary = vectorize.vocabulary_size();
  for (std::size_t n = 0; n < a.sample_length; ++n) {
    const std::size_t context = std::min(ids.size(), sequence_length), from = ids.size() - context;
    std::fill(x.begin(), x.end(), 0.0f);
    for (std::size_t k = 0; k < context; ++k) x(0, k) = float(ids[from + k]);
    const dtrain::tensor logits = model.predict_on_batch(x);
    std::vector<double> weights(vocabulary);
    const float* last = logits.data() + (context - 1) * max_tokens;
    const float top = *std::max_element(last, last + vocabulary);
    for (std::size_t v = 2; v < vocabulary; ++v)  // never the padding or [UNK]
      weights[v] = std::exp(double(last[v] - top) / double(a.temperature));
    ids.push_back(std::int32_t(std::discrete_distribution<std::size_t>(weights.begin(), weights.end())(rng)));
  }
  return vectorize.decode(ids);
}

template <class Net>
int run(const arguments& a) {
  dtrain::multi_worker_mirrored_strategy<dtrain::comm::ring_tcp> strategy;
  const std::string text = read_corpus(a.corpus);

  // the characters' vocabulary; the last tenth of the text is the validation text
  dtrain::data::text_vectorization vectorize({.max_tokens = max_tokens});
  vectorize.adapt(text);
  const std::vector<std::int32_t> ids = vectorize(text);
  const std::size_t split = ids.size() / 10 * 9;
  if (strategy.is_chief())
    std::printf("%zu characters, a vocabulary of %zu\n", ids.size(), vectorize.vocabulary_size());

  const std::size_t global_batch_size = a.batch_size * strategy.num_replicas_in_sync();
  auto train = dtrain::data::next_token_windows({ids.begin(), ids.begin() + std::ptrdiff_t(split)}, sequence_length) |
               dtrain::data::shuffle(10000, a.seed) | dtrain::data::repeat() |
               dtrain::data::batch(global_batch_size, true);
  auto validation = dtrain::data::next_token_windows({ids.begin() + std::ptrdiff_t(split), ids.end()}, sequence_length) |
                    dtrain::data::batch(global_batch_size);
  const std::int64_t steps =
      a.steps_per_epoch > 0 ? a.steps_per_epoch
                            : std::int64_t(split / (sequence_length + 1) / global_batch_size);

  auto model = strategy.template make_model<Net>(a.seed);
  const dtrain::cosine_decay schedule{.initial_learning_rate = 0.0f, .decay_steps = std::max<std::int64_t>(1, a.epochs * steps),
                                      .alpha = 0.1f, .warmup_target = a.learning_rate,
                                      .warmup_steps = std::min<std::int64_t>(100, a.epochs * steps / 10)};
  model.compile({.optimizer = dtrain::adamw{{.learning_rate = schedule, .weight_decay = 0.01f, .global_clipnorm = 1.0f}},
                 .loss = dtrain::sparse_categorical_crossentropy{{.from_logits = true}},
                 .metrics = {dtrain::perplexity{.from_logits = true}, dtrain::accuracy{}}});
  if (strategy.is_chief() && a.verbose > 0) model.summary();
  model.fit(train, {.epochs = a.epochs, .steps_per_epoch = steps, .validation_data = validation, .verbose = a.verbose});

  const auto logs = model.evaluate(validation, {.verbose = 0});
  std::printf("validation: loss %.4f, perplexity %.3f, accuracy %.4f\n", logs["loss"], logs["perplexity"],
              logs["accuracy"]);
  std::printf("sampled text (temperature %.2f):\n%s\n", double(a.temperature), sample(model, vectorize, a).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  const arguments a = parse(argc, argv);
  return a.model == "lstm" ? run<lstm_model>(a) : run<gpt>(a);
} catch (...) {
  return mnist_setup::exit_code_of_current_exception();
}
