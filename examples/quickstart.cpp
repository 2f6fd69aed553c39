// dtrain in one page: build the tutorial's CNN, print its summary and train it for a few steps on
// generated 28x28 images (a bright square whose position is the class).
#include <dtrain/dtrain.hpp>

using net = dtrain::sequential<dtrain::input<28, 28>,
                               dtrain::reshape<28, 28, 1>,
                               dtrain::conv2d<32, 3, dtrain::relu>,
                               dtrain::flatten,
                               dtrain::dense<128, dtrain::relu>,
                               dtrain::dense<10>>;

int main() {
  net model;
  model.summary();
  model.compile({.optimizer = dtrain::sgd{{.learning_rate = 0.01f, .momentum = 0.9f}},
                 .loss = dtrain::sparse_categorical_crossentropy{{.from_logits = true}},
                 .metrics = {dtrain::accuracy{}}});

  dtrain::rng gen(1);
  dtrain::tensor x = dtrain::zeros({64, 28, 28}), y = dtrain::zeros({64});
  for (std::size_t i = 0; i < 64; ++i) {
    const std::size_t label = gen.below(10), top = 4 + 2 * label, left = 4 + label;
    y(i) = static_cast<float>(label);
    for (std::size_t r = 0; r < 28; ++r)
      for (std::size_t c = 0; c < 28; ++c)
        x(i, r, c) = 0.1f * gen.uniform() + (r >= top && r < top + 4 && c >= left && c < left + 4 ? 1.0f : 0.0f);
  }
  for (int step = 1; step <= 20; ++step) {
    model.reset_metrics();
    const auto logs = model.train_step(x, y);
    if (step % 5 == 0)
      std::printf("step %2d  loss: %.4f  accuracy: %.4f\n", step, logs["loss"], logs["accuracy"]);
  }
}
