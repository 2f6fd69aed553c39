// Writes the training_state fuzzer's seeds: a backup as backup_and_restore writes it for the harness's
// model, and a plain saved model. Build and run: cmake --build build --target fuzz_training_state_seed &&
// build/tests/fuzz/fuzz_training_state_seed tests/fuzz/corpus/training_state
#include <filesystem>

#include <dtrain/dtrain.hpp>

using namespace dtrain;
using net = sequential<input<3>, dense<4, relu>, dense<2>>;

int main(int argc, char** argv) {
  const std::filesystem::path dir = argc > 1 ? argv[1] : ".";
  std::filesystem::create_directories(dir);
  const auto x = tensor(xt::ones<float>({6, 3}));
  const auto y = tensor(xt::zeros<float>({6}));
  net m;
  m.compile({.optimizer = adam{}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}, .metrics = {accuracy{}}});
  m.train_step(x, y);
  dtrain::detail::model_handle<net> h(m);
  h.position = {.epoch = 1, .step = 2, .data = {.iteration = 1, .produced = 2}, .global_batch = 6};
  h.states().write(h.capture_state(), dir / "backup");
  checkpoint::save_model(m, dir / "model");
  return 0;
}
