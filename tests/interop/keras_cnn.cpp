// The dtrain side of the Keras interop check (tests/interop/check_keras.py): the tutorial's CNN.
//   keras_cnn predict <weights.safetensors> <dir>: loads the weights (as Keras wrote them, converted by
//     tools/keras_weights.py), writes the first 100 Fashion-MNIST test images (dir/images.npy) and the
//     model's logits on them (dir/logits.npy)
//   keras_cnn train <dir>: trains the CNN 20 steps on Fashion-MNIST, saves its weights
//     (dir/trained.safetensors), the images and its logits, for Keras to load and predict
#include <cstring>

#include <dtrain/dtrain.hpp>

using namespace dtrain;
using cnn = sequential<input<28, 28>, reshape<28, 28, 1>, conv2d<32, 3, relu>, flatten, dense<128, relu>, dense<10>>;

int main(int argc, char** argv) {
  const bool predict = argc == 4 && std::strcmp(argv[1], "predict") == 0, train = argc == 3 && std::strcmp(argv[1], "train") == 0;
  if (!predict && !train) return 2;
  const std::filesystem::path dir = argv[argc - 1];
  cnn model(5);
  if (predict) {
    checkpoint::load_weights(model, argv[2]);
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
