// Conan's test_package: one training step of a small model through the packaged headers.
#include <cstdio>

#include <dtrain/dtrain.hpp>

int main() {
  dtrain::sequential<dtrain::input<4>, dtrain::dense<8, dtrain::relu>, dtrain::dense<2>> model;
  model.compile({.optimizer = dtrain::sgd{{.learning_rate = 0.1f}},
                 .loss = dtrain::sparse_categorical_crossentropy{{.from_logits = true}}});
  const dtrain::tensor x = dtrain::zeros({8, 4}), y = dtrain::zeros({8});
  const auto logs = model.train_step(x, y);
  std::printf("dtrain %s: loss %.4f\n", dtrain::version, logs["loss"]);
}
