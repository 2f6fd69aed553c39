// The dtrain side of the Keras interop check (tests/interop/check_keras.py), for two models: `cnn`, the
// tutorial's CNN, and `modern`, one of the layers real models add (zero padding, strided convolutions,
// leaky ReLU, layer normalization, separable and depthwise convolutions, batch normalization, global
// average pooling).
//   keras_cnn <model> predict <weights.safetensors> <dir>: loads the weights (as Keras wrote them,
//     converted by tools/keras_weights.py), writes the first 100 Fashion-MNIST test images
//     (dir/images.npy) and the model's logits on them (dir/logits.npy)
//   keras_cnn <model> train <dir>: trains the model 20 steps on Fashion-MNIST, saves its weights
//     (dir/trained.safetensors), the images and its logits, for Keras to load and predict
#include <cstring>
#include <string_view>

#include <dtrain/dtrain.hpp>

using namespace dtrain;
using cnn = sequential<input<28, 28>, reshape<28, 28, 1>, conv2d<32, 3, relu>, flatten, dense<128, relu>, dense<10>>;
using modern = sequential<input<28, 28>, reshape<28, 28, 1>, zero_padding2d<1>, conv2d<16, 3, linear, strides<2>>,
                          leaky_relu<>, layer_normalization<>, separable_conv2d<16, 3, relu, padding::same>,
                          conv2d<32, 3, linear, strides<2>, padding::same>, batch_normalization<>, relu,
                          depthwise_conv2d<3, linear, padding::same, depth_multiplier<2>>, global_average_pooling2d<>,
                          dense<10>>;

template <class Model>
int run(bool predict, char** argv, const std::filesystem::path& dir) {
  Model model(5);
  if (predict) {
    checkpoint::load_weights(model, argv[3]);
  } else {
    model.compile({.optimizer = adam{}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
    model.fit(data::fashion_mnist_train() | data::shuffle(60000, 1) | data::batch(32),
              {.epochs = 1, .steps_per_epoch = 20, .verbose = 0});
    checkpoint::save_weights(model, dir / "trained.safetensors");
  }
  auto it = data::make_iterator(data::fashion_mnist_test() | data::batch(100));
  const auto images = it.next()->first;
  data::write_npy(dir / "images.npy", images);
  data::write_npy(dir / "logits.npy", model.predict(images, {.batch_size = 100}));
  return 0;
}

int main(int argc, char** argv) {
  const bool predict = argc == 5 && std::strcmp(argv[2], "predict") == 0;
  const bool train = argc == 4 && std::strcmp(argv[2], "train") == 0;
  if (!predict && !train) return 2;
  const std::string_view which = argv[1];
  if (which == "cnn") return run<cnn>(predict, argv, argv[argc - 1]);
  if (which == "modern") return run<modern>(predict, argv, argv[argc - 1]);
  return 2;
}
