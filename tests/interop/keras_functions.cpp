// dtrain's losses and metrics on inputs a Python check chooses (tests/interop/check_functions.py), computed
// by the cpu backend's kernels as training computes them. Reads cases as JSON, each either
//   {"loss": <compile config>, "y_true": [...], "true_shape": [...], "y_pred": [...], "shape": [...]}
//     -> {"per_row": the per-row losses, "grad": the gradient of their sum with respect to y_pred}, or
//   {"metric": <compile config>, "batches": [{"y_true", "true_shape", "y_pred", "shape"}, ...]}
//     -> {"result": the metric after every batch, "state": its (total, count)}, or
//   {"optimizer": <compile config>, "params": [...], "grads": [[...], ...]}
//     -> {"params": the parameters after one apply_gradients per gradient list, then
//     finalize_variable_values (with use_ema: the moving average)}, or
//   {"schedule": <a learning rate's config>, "steps": [...]} -> {"rates": the rate at each step}.
// usage: interop_functions <cases.json> <out.json>
#include <fstream>

#include <dtrain/dtrain.hpp>

using namespace dtrain;
using json = nlohmann::json;

int main(int argc, char** argv) try {
  if (argc != 3) return 2;
  const json cases = json::parse(std::ifstream(argv[1]));
  json out = json::array();
  for (const auto& c : cases) {
    if (c.contains("schedule")) {
      const learning_rate_schedule lr = checkpoint::detail::schedule_from(c.at("schedule"));
      std::vector<float> rates;
      for (const auto& s : c.at("steps")) rates.push_back(lr(s.get<std::int64_t>()));
      out.push_back({{"rates", rates}});
      continue;
    }
    if (c.contains("optimizer")) {
      any_optimizer o = checkpoint::detail::optimizer_from(c.at("optimizer"));
      auto p = c.at("params").get<std::vector<float>>();
      for (const auto& g : c.at("grads")) o.apply_gradients(g.get<std::vector<float>>(), p);
      o.finalize_variable_values(p);
      out.push_back({{"params", p}});
      continue;
    }
    if (c.contains("metric")) {
      any_metric m = checkpoint::detail::metric_from(c.at("metric"));
      for (const auto& b : c.at("batches")) {
        const auto t = b.at("y_true").get<std::vector<float>>(), p = b.at("y_pred").get<std::vector<float>>();
        m.update_state(batch_view{t.data(), b.at("true_shape").get<extents>()}, batch_view{p.data(), b.at("shape").get<extents>()});
      }
      out.push_back({{"result", m.result()}, {"state", m.state().values}});
      continue;
    }
    const any_loss loss = checkpoint::detail::loss_from(c.at("loss"));
    const auto y_true = c.at("y_true").get<std::vector<float>>(), y_pred = c.at("y_pred").get<std::vector<float>>();
    const auto shape = c.at("shape").get<extents>(), true_shape = c.at("true_shape").get<extents>();
    std::vector<float> per(y_pred.size() / shape.back()), grad(y_pred.size());
    loss.per_example(batch_view{y_true.data(), true_shape}, batch_view{y_pred.data(), shape}, per.data(), grad.data(), 1.0f);
    out.push_back({{"per_row", per}, {"grad", grad}});
  }
  std::ofstream(argv[2]) << out.dump();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "interop_functions: %s\n", e.what());
  return 1;
}
