// A functional model of two inputs and two outputs, as in the Keras functional API guide's
// "models with multiple inputs and outputs": a Fashion-MNIST image and a side input (a 16-bin histogram
// of the image's intensities) go in; the class (10 logits) and whether the item is footwear (one
// logit: sandals, sneakers, ankle boots) come out, each with its own loss, weight and metric.
//   multi_input_fashion_mnist --epochs 3 --batch-size 64 --samples 60000
#include <CLI/CLI.hpp>

#include <dtrain/dtrain.hpp>

using namespace dtrain;

// image_input = keras.Input(shape=(28, 28, 1)); hist_input = keras.Input(shape=(16,))
// x = Conv2D(16, 3, activation="relu")(image_input); x = MaxPooling2D(2)(x)
// x = Conv2D(32, 3, activation="relu")(x); x = Flatten()(MaxPooling2D(2)(x))
// h = Dense(16, activation="relu")(hist_input); x = Concatenate()([x, h])
// label = Dense(10)(x); footwear = Dense(1)(x)  (logged as dense_1_*, dense_2_*: their layers' names)
// model = keras.Model(inputs=[image_input, hist_input], outputs=[label, footwear])
struct image;
struct hist;
struct pooled;
struct side;
struct joined;
struct label;
struct footwear;
using model_type = functional<inputs<node<image, input<28, 28, 1>>, node<hist, input<16>>>,
                              conv2d<16, 3, relu>, max_pooling2d<2>, conv2d<32, 3, relu>, max_pooling2d<2>,
                              node<pooled, flatten>, node<side, dense<16, relu>, hist>,
                              node<joined, concatenate, pooled, side>, node<label, dense<10>, joined>,
                              node<footwear, dense<1>, joined>, outputs<label, footwear>>;

/// The model's inputs and targets from (images, labels): [images (n, 28, 28, 1), histograms (n, 16)],
/// [labels (n,), footwear (n, 1)].
std::pair<std::vector<tensor>, std::vector<tensor>> arrays(const data::example& e, std::size_t limit) {
  const std::size_t n = std::min(limit, e.first.shape()[0]);
  tensor images = zeros({n, 28, 28, 1}), hists = zeros({n, 16}), labels = zeros({n}), shoes = zeros({n, 1});
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t p = 0; p < 784; ++p) {
      const float v = e.first.data()[i * 784 + p];
      images.data()[i * 784 + p] = v;
      hists(i, std::min<std::size_t>(15, std::size_t(v * 16.0f))) += 1.0f / 784.0f;
    }
    const float c = e.second(i);
    labels(i) = c;
    shoes(i, 0) = c == 5.0f || c == 7.0f || c == 9.0f ? 1.0f : 0.0f;
  }
  return {{images, hists}, {labels, shoes}};
}

int main(int argc, char** argv) {
  CLI::App app("A two-input, two-output functional model on Fashion-MNIST");
  int epochs = 3, verbose = 1;
  std::size_t batch_size = 64, samples = 60000;
  app.add_option("--epochs", epochs, "epochs")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch_size, "batch size")->check(CLI::PositiveNumber);
  app.add_option("--samples", samples, "training images to use (of 60000)")->check(CLI::PositiveNumber);
  app.add_option("--verbose", verbose, "0 silent, 1 progress bar, 2 one line per epoch");
  CLI11_PARSE(app, argc, argv);
  try {
    const auto [x_train, y_train] = arrays(data::load_fashion_mnist(data::split::train), samples);
    const auto [x_test, y_test] = arrays(data::load_fashion_mnist(data::split::test), 10000);

    model_type model;
    model.summary();
    model.compile({.optimizer = adam{{.learning_rate = 0.002f}},
                   .losses = {sparse_categorical_crossentropy{{.from_logits = true}},
                              binary_crossentropy{{.from_logits = true}}},
                   .loss_weights = {1.0f, 0.2f},
                   .output_metrics = {{sparse_categorical_accuracy{}}, {binary_accuracy{.threshold = 0.0f}}}});
    model.fit(x_train, y_train, {.epochs = epochs, .verbose = verbose, .batch_size = batch_size,
                                 .validation_split = 0.1});
    for (const auto& [name, value] : model.evaluate(x_test, y_test, {.verbose = 0}))
      std::printf("test_%s: %.4f\n", name.c_str(), value);
  } catch (const std::exception& e) {  // a dtrain::error, std::bad_alloc, ...: not retryable
    std::fprintf(stderr, "multi_input_fashion_mnist: %s\n", e.what());
    return 1;
  }
}
