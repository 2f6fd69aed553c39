// dtrain's losses and metrics on inputs a Python check chooses (tests/interop/check_functions.py), computed
// by the cpu backend's kernels as training computes them. Reads cases as JSON, each either
//   {"loss": <compile config>, "y_true": [...], "true_shape": [...], "y_pred": [...], "shape": [...]}
//     -> {"per_row": the per-row losses, "grad": the gradient of their sum with respect to y_pred}, or
//   {"metric": <compile config>, "batches": [{"y_true", "true_shape", "y_pred", "shape"}, ...]}
//     -> {"result": the metric after every batch, "state": its (total, count)}, or
//   {"optimizer": <compile config>, "params": [...], "grads": [[...], ...], "variables": [sizes...]}
//     -> {"params": the parameters (variables of those sizes) after one apply_gradients per gradient list, then
//     finalize_variable_values (with use_ema: the moving average)}, or
//   {"schedule": <a learning rate's config>, "steps": [...]} -> {"rates": the rate at each step}, or
//   {"fit": <loss config>, "weights": [kernel (4, 3), bias (3)], "x": [...] (n, 4), "y": [...], "y_shape": [...],
//    "sample_weight": [...] (n) or "class_weight": {"class": weight, ...}, "weighted_metrics": [<config>, ...],
//    "batch_size", "epochs"}
//     -> {"weights": after fit(x, y) of a Dense(3) with SGD(0.1), unshuffled, "history": fit's,
//     "evaluate": evaluate(x, y)'s loss with the sample weights}.
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
      const auto variables = c.value("variables", std::vector<std::size_t>{});
      for (const auto& g : c.at("grads")) o.apply_gradients(g.get<std::vector<float>>(), p, variables);
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
    if (c.contains("fit")) {
      sequential<input<4>, dense<3>> m;
      std::vector<any_metric> weighted;
      for (const auto& w : c.value("weighted_metrics", json::array())) weighted.push_back(checkpoint::detail::metric_from(w));
      m.compile({.optimizer = sgd{{.learning_rate = 0.1f}}, .loss = checkpoint::detail::loss_from(c.at("fit")),
                 .weighted_metrics = weighted});
      m.set_weights(c.at("weights").get<std::vector<float>>());
      const auto xv = c.at("x").get<std::vector<float>>();
      const tensor x = from_span(xv, {xv.size() / 4, 4});
      const tensor y = from_span(c.at("y").get<std::vector<float>>(), c.at("y_shape").get<extents>());
      fit_options o{.epochs = c.at("epochs").get<int>(), .verbose = 0, .batch_size = c.at("batch_size").get<std::size_t>(),
                    .shuffle = false};
      evaluate_options e{.verbose = 0, .batch_size = o.batch_size};
      if (c.contains("sample_weight")) {
        const auto w = c.at("sample_weight").get<std::vector<float>>();
        o.sample_weight = e.sample_weight = {from_span(w, {w.size()})};
      }
      if (c.contains("class_weight"))
        for (const auto& [k, v] : c.at("class_weight").items()) o.class_weight[std::stoi(k)] = v.get<float>();
      const history h = m.fit(x, y, o);
      const float evaluated = m.evaluate(x, y, e).at("loss");
      out.push_back({{"weights", m.get_weights()}, {"history", h.history}, {"evaluate", evaluated}});
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
