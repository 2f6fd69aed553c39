// The TensorFlow autoencoder tutorial's denoising autoencoder, on Fashion-MNIST: Gaussian noise
// (factor 0.2, clipped to [0, 1]) is added to the images, and a convolutional encoder (two strided
// Conv2D) and decoder (two strided Conv2DTranspose, then a sigmoid Conv2D) learn to give back the clean
// image, with Adam and the mean squared error.
//   denoising_autoencoder --epochs 3 --samples 60000 --batch-size 32
#include <algorithm>

#include <CLI/CLI.hpp>

#include <dtrain/dtrain.hpp>

using namespace dtrain;

// encoder = Sequential([Input(shape=(28, 28, 1)),
//                       Conv2D(16, (3, 3), activation="relu", padding="same", strides=2),
//                       Conv2D(8, (3, 3), activation="relu", padding="same", strides=2)])
// decoder = Sequential([Conv2DTranspose(8, kernel_size=3, strides=2, activation="relu", padding="same"),
//                       Conv2DTranspose(16, kernel_size=3, strides=2, activation="relu", padding="same"),
//                       Conv2D(1, kernel_size=(3, 3), activation="sigmoid", padding="same")])
using autoencoder = sequential<input<28, 28, 1>,
                               conv2d<16, 3, relu, padding::same, strides<2>>,  // 14 x 14 x 16
                               conv2d<8, 3, relu, padding::same, strides<2>>,   // 7 x 7 x 8
                               conv2d_transpose<8, 3, relu, strides<2>, padding::same>,
                               conv2d_transpose<16, 3, relu, strides<2>, padding::same>,
                               conv2d<1, 3, sigmoid, padding::same>>;

/// The first n images of a split as (n, 28, 28, 1), and the same with noise: clip(x + 0.2 N(0, 1), 0, 1).
std::pair<tensor, tensor> clean_and_noisy(data::split s, std::size_t limit, std::uint64_t seed) {
  const tensor images = data::load_fashion_mnist(s).first;
  const std::size_t n = std::min(limit, images.shape()[0]);
  tensor clean = zeros({n, 28, 28, 1}), noisy = zeros({n, 28, 28, 1});
  rng gen(seed);
  for (std::size_t i = 0; i < n * 784; ++i) {
    clean.data()[i] = images.data()[i];
    noisy.data()[i] = std::clamp(images.data()[i] + 0.2f * gen.normal(), 0.0f, 1.0f);
  }
  return {clean, noisy};
}

int main(int argc, char** argv) {
  CLI::App app("The denoising convolutional autoencoder of TensorFlow's autoencoder tutorial, on Fashion-MNIST");
  int epochs = 3, verbose = 1;
  std::size_t batch_size = 32, samples = 60000;
  app.add_option("--epochs", epochs, "epochs")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch_size, "batch size")->check(CLI::PositiveNumber);
  app.add_option("--samples", samples, "training images to use (of 60000)")->check(CLI::PositiveNumber);
  app.add_option("--verbose", verbose, "0 silent, 1 progress bar, 2 one line per epoch");
  CLI11_PARSE(app, argc, argv);
  try {
    const auto [x_train, x_train_noisy] = clean_and_noisy(data::split::train, samples, 1);
    const auto [x_test, x_test_noisy] = clean_and_noisy(data::split::test, 10000, 2);

    autoencoder model;
    model.summary();
    model.compile({.optimizer = adam{}, .loss = mean_squared_error{}});
    model.fit(x_train_noisy, x_train,
              {.epochs = epochs,
               .validation_data = data::from_tensor_slices(x_test_noisy, x_test) | data::batch(batch_size),
               .verbose = verbose,
               .batch_size = batch_size});

    // how far the noisy test images are from the clean ones, and how far the model's reconstructions
    const tensor denoised = model.predict(x_test_noisy, {.batch_size = 1000});
    double noisy_error = 0.0, denoised_error = 0.0;
    for (std::size_t i = 0; i < x_test.size(); ++i) {
      const double c = x_test.data()[i];
      noisy_error += (x_test_noisy.data()[i] - c) * (x_test_noisy.data()[i] - c);
      denoised_error += (denoised.data()[i] - c) * (denoised.data()[i] - c);
    }
    std::printf("test mean squared error: noisy images %.4f, denoised %.4f\n", noisy_error / double(x_test.size()),
                denoised_error / double(x_test.size()));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "denoising_autoencoder: %s\n", e.what());
    return 1;
  }
}
