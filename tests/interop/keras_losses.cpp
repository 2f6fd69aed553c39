// dtrain's losses on inputs a Python check chooses (tests/interop/check_losses.py): reads cases as JSON
// ([{"loss": <the loss's compile config>, "y_true": [...], "true_shape": [...], "y_pred": [...],
// "shape": [rows, cols]}, ...])
// and writes each case's per-row losses and the gradient of their sum with respect to y_pred, computed
// by the cpu backend's kernels as training computes them.
// usage: interop_losses <cases.json> <out.json>
#include <fstream>

#include <dtrain/dtrain.hpp>

using namespace dtrain;
using json = nlohmann::json;

int main(int argc, char** argv) try {
  if (argc != 3) return 2;
  const json cases = json::parse(std::ifstream(argv[1]));
  json out = json::array();
  for (const auto& c : cases) {
    const any_loss loss = checkpoint::detail::loss_from(c.at("loss"));
    const auto y_true = c.at("y_true").get<std::vector<float>>(), y_pred = c.at("y_pred").get<std::vector<float>>();
    const auto shape = c.at("shape").get<extents>(), true_shape = c.at("true_shape").get<extents>();
    const std::size_t rows = y_pred.size() / shape.back();
    std::vector<float> per(rows), grad(y_pred.size());
    loss.per_example(batch_view{y_true.data(), true_shape}, batch_view{y_pred.data(), shape}, per.data(), grad.data(), 1.0f);
    out.push_back({{"per_row", per}, {"grad", grad}});
  }
  std::ofstream(argv[2]) << out.dump();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "interop_losses: %s\n", e.what());
  return 1;
}
