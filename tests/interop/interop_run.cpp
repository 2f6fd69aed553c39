// What a Python user reads from a dtrain run, for the interop checks (tests/interop/check_*.py) to read
// with the real packages: trains a small model with the tensorboard callback (epoch and batch scalars,
// learning rate, steps per second, validation, histograms, an evaluation, a profile of batches 2-4) into
// <dir>/train, <dir>/validation and <dir>/plugins/profile, writes its History (history.json), its weights as safetensors and .npz with the
// same values as JSON (weights.json), and the whole model (model.safetensors, with its optimizer's
// iteration count in model.json).
// usage: interop_run <dir>
#include <fstream>
#include <utility>

#include <dtrain/dtrain.hpp>

using namespace dtrain;

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::filesystem::path dir = argv[1];
  rng r(3);
  tensor x = zeros({64, 5}), y = zeros({64});
  for (auto& v : x) v = r.normal();
  for (std::size_t i = 0; i < 64; ++i) y(i) = x(i, 0) + x(i, 1) > 0 ? 1.0f : 0.0f;
  sequential<input<5>, dense<8, relu>, dense<2>> model(1);
  model.compile({.optimizer = adam{{.learning_rate = 0.01f}},
                 .loss = sparse_categorical_crossentropy{{.from_logits = true}},
                 .metrics = {accuracy{}}});
  auto board = tensorboard({.log_dir = dir, .histogram_freq = 1, .write_steps_per_second = true,
                            .update_freq = std::int64_t(3), .profile_batch = {2, 4}});
  const history h = model.fit(x, y, {.epochs = 4, .callbacks = {board}, .verbose = 0, .batch_size = 8,
                                     .validation_split = 0.25});
  model.evaluate(x, y, {.verbose = 0, .callbacks = {board}});
  std::ofstream(dir / "history.json") << h.to_json();
  checkpoint::save_weights(model, dir / "weights.safetensors");
  checkpoint::export_npz(model, dir / "weights.npz");
  checkpoint::save_model(model, dir / "model.safetensors");
  std::ofstream(dir / "model.json") << "{\"iterations\": " << model.optimizer().iterations() << "}";
  const std::vector<float> w = model.get_weights();
  std::ofstream json(dir / "weights.json");
  const char* separator = "{";
  for (const auto& v : checkpoint::weight_views(model, w)) {
    json << std::exchange(separator, ", ") << '"' << v.name << "\": {\"shape\": [";
    for (std::size_t i = 0; i < v.shape.size(); ++i) json << (i ? ", " : "") << v.shape[i];
    json << "], \"values\": [";
    for (std::size_t i = 0; i < v.data.size(); ++i) json << (i ? ", " : "") << dtrain::detail::full_precision(v.data[i], true);
    json << "]}";
  }
  json << "}";
  return 0;
}
