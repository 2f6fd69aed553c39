#pragma once
/// \file
/// A model's compile settings as a model file carries them (Keras' `compile_config`): the optimizer and
/// its options (with a learning-rate schedule), each output's loss and weight, and the metrics, as JSON
/// `{"class_name": ..., "config": {...}}` entries with Keras' option names. `load_model` compiles the
/// model it returns from them, so `fit` goes on with the saved optimizer state.
///
/// The library's own optimizers, schedules, losses and metrics have a config; a model compiled with
/// anything else (a user's loss, a schedule written as a lambda) is saved without one, and loads
/// uncompiled, as before (compile it, then `restore_model` restores the optimizer state).

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "dtrain/core/error.hpp"
#include "dtrain/losses/crossentropy.hpp"
#include "dtrain/losses/mean_squared_error.hpp"
#include "dtrain/losses/regression.hpp"
#include "dtrain/metrics/accuracy.hpp"
#include "dtrain/metrics/confusion.hpp"
#include "dtrain/metrics/iou.hpp"
#include "dtrain/optimizers/adagrad.hpp"
#include "dtrain/optimizers/adam.hpp"
#include "dtrain/optimizers/lion.hpp"
#include "dtrain/optimizers/loss_scale_optimizer.hpp"
#include "dtrain/optimizers/rmsprop.hpp"
#include "dtrain/optimizers/sgd.hpp"

namespace dtrain::checkpoint {

/// What `compile` takes, rebuilt from a config (one loss, weight and metric list per output).
struct compile_settings {
  any_optimizer optimizer;
  std::vector<any_loss> losses;
  std::vector<float> loss_weights;
  std::vector<std::vector<any_metric>> output_metrics;
};

namespace detail {
using json = nlohmann::json;

/// Option `key` of config `c` as a T.
template <class T>
T option(const json& c, const char* key) {
  return c.at(key).get<T>();
}
inline json entry(const std::string& class_name, json config) {
  return {{"class_name", class_name}, {"config", std::move(config)}};
}

inline json schedule_config(const learning_rate_schedule& lr) {
  if (lr.is_constant()) return lr(0);
  if (const auto* e = lr.target<exponential_decay>())
    return entry("ExponentialDecay", {{"initial_learning_rate", e->initial_learning_rate},
                                      {"decay_steps", e->decay_steps},
                                      {"decay_rate", e->decay_rate},
                                      {"staircase", e->staircase}});
  if (const auto* p = lr.target<piecewise_constant_decay>())
    return entry("PiecewiseConstantDecay", {{"boundaries", p->boundaries}, {"values", p->values}});
  if (const auto* p = lr.target<polynomial_decay>())
    return entry("PolynomialDecay", {{"initial_learning_rate", p->initial_learning_rate}, {"decay_steps", p->decay_steps},
                                     {"end_learning_rate", p->end_learning_rate}, {"power", p->power}, {"cycle", p->cycle}});
  if (const auto* i = lr.target<inverse_time_decay>())
    return entry("InverseTimeDecay", {{"initial_learning_rate", i->initial_learning_rate}, {"decay_steps", i->decay_steps},
                                      {"decay_rate", i->decay_rate}, {"staircase", i->staircase}});
  if (const auto* c = lr.target<cosine_decay>())
    return entry("CosineDecay", {{"initial_learning_rate", c->initial_learning_rate}, {"decay_steps", c->decay_steps},
                                 {"alpha", c->alpha}, {"warmup_target", c->warmup_target ? json(*c->warmup_target) : json()},
                                 {"warmup_steps", c->warmup_steps}});
  return nullptr;
}
inline learning_rate_schedule schedule_from(const json& j) {
  if (j.is_number()) return j.get<float>();
  const json& c = j.at("config");
  const auto name = option<std::string>(j, "class_name");
  if (name == "ExponentialDecay")
    return exponential_decay{option<float>(c, "initial_learning_rate"), option<std::int64_t>(c, "decay_steps"),
                             option<float>(c, "decay_rate"), option<bool>(c, "staircase")};
  if (name == "PiecewiseConstantDecay")
    return piecewise_constant_decay{option<std::vector<std::int64_t>>(c, "boundaries"), option<std::vector<float>>(c, "values")};
  if (name == "PolynomialDecay")
    return polynomial_decay{option<float>(c, "initial_learning_rate"), option<std::int64_t>(c, "decay_steps"),
                            option<float>(c, "end_learning_rate"), option<float>(c, "power"), option<bool>(c, "cycle")};
  if (name == "InverseTimeDecay")
    return inverse_time_decay{option<float>(c, "initial_learning_rate"), option<std::int64_t>(c, "decay_steps"),
                              option<float>(c, "decay_rate"), option<bool>(c, "staircase")};
  if (name == "CosineDecay") {
    const json& t = c.at("warmup_target");
    return cosine_decay{option<float>(c, "initial_learning_rate"), option<std::int64_t>(c, "decay_steps"),
                        option<float>(c, "alpha"), t.is_null() ? std::nullopt : std::optional<float>(t.get<float>()),
                        option<std::int64_t>(c, "warmup_steps")};
  }
  throw value_error("unknown learning rate schedule '" + name + "'");
}

inline json optimizer_config(const any_optimizer& o) {
  auto with_rate = [](const auto& opt, json c) -> json {
    json lr = schedule_config(opt->options.learning_rate);
    if (lr.is_null()) return nullptr;
    c["learning_rate"] = std::move(lr);
    c["use_ema"] = opt->options.use_ema;
    c["ema_momentum"] = opt->options.ema_momentum;
    c["ema_overwrite_frequency"] = opt->options.ema_overwrite_frequency ? json(opt->options.ema_overwrite_frequency) : json();
    const auto set = [](auto v) { return v ? json(v) : json(); };  // Keras writes None for an option not set
    c["clipnorm"] = set(opt->options.clipnorm);
    c["clipvalue"] = set(opt->options.clipvalue);
    c["global_clipnorm"] = set(opt->options.global_clipnorm);
    c["gradient_accumulation_steps"] = set(opt->options.gradient_accumulation_steps);
    return entry(opt->name(), std::move(c));
  };
  if (const auto* ls = o.target<loss_scale_optimizer>()) {
    json inner = optimizer_config(ls->inner_optimizer());
    if (inner.is_null()) return nullptr;
    return entry(ls->name(), {{"inner_optimizer", std::move(inner)},
                              {"initial_scale", ls->options.initial_scale},
                              {"dynamic_growth_steps", ls->options.dynamic_growth_steps}});
  }
  if (const auto* a = o.target<adam>())
    return with_rate(a, {{"beta_1", a->options.beta_1}, {"beta_2", a->options.beta_2},
                         {"epsilon", a->options.epsilon}, {"amsgrad", a->options.amsgrad}});
  if (const auto* a = o.target<adamw>())
    return with_rate(a, {{"weight_decay", a->options.weight_decay}, {"beta_1", a->options.beta_1},
                         {"beta_2", a->options.beta_2}, {"epsilon", a->options.epsilon}, {"amsgrad", a->options.amsgrad}});
  if (const auto* g = o.target<sgd>())
    return with_rate(g, {{"momentum", g->options.momentum}, {"nesterov", g->options.nesterov}});
  if (const auto* r = o.target<rmsprop>())
    return with_rate(r, {{"rho", r->options.rho}, {"momentum", r->options.momentum},
                         {"epsilon", r->options.epsilon}, {"centered", r->options.centered}});
  if (const auto* a = o.target<adagrad>())
    return with_rate(a, {{"initial_accumulator_value", a->options.initial_accumulator_value}, {"epsilon", a->options.epsilon}});
  if (const auto* a = o.target<adamax>())
    return with_rate(a, {{"beta_1", a->options.beta_1}, {"beta_2", a->options.beta_2}, {"epsilon", a->options.epsilon}});
  if (const auto* a = o.target<nadam>())
    return with_rate(a, {{"beta_1", a->options.beta_1}, {"beta_2", a->options.beta_2}, {"epsilon", a->options.epsilon}});
  if (const auto* l = o.target<lion>()) return with_rate(l, {{"beta_1", l->options.beta_1}, {"beta_2", l->options.beta_2}});
  return nullptr;
}
inline any_optimizer optimizer_from(const json& j) {
  const auto name = option<std::string>(j, "class_name");
  const json& c = j.at("config");
  if (name == "loss_scale_optimizer")
    return loss_scale_optimizer(optimizer_from(c.at("inner_optimizer")),
                                {option<float>(c, "initial_scale"), option<std::int64_t>(c, "dynamic_growth_steps")});
  const learning_rate_schedule lr = schedule_from(c.at("learning_rate"));
  auto f = [&](const char* key) { return option<float>(c, key); };
  auto b = [&](const char* key) { return option<bool>(c, key); };
  // Keras' options every optimizer has (moving average, clipping, accumulation; older files may lack them)
  auto common = [&](auto opts) {
    const auto set = [&](const char* key) { return c.contains(key) && !c.at(key).is_null(); };
    if (set("use_ema")) opts.use_ema = b("use_ema");
    if (set("ema_momentum")) opts.ema_momentum = f("ema_momentum");
    if (set("ema_overwrite_frequency")) opts.ema_overwrite_frequency = option<std::int64_t>(c, "ema_overwrite_frequency");
    if (set("clipnorm")) opts.clipnorm = f("clipnorm");
    if (set("clipvalue")) opts.clipvalue = f("clipvalue");
    if (set("global_clipnorm")) opts.global_clipnorm = f("global_clipnorm");
    if (set("gradient_accumulation_steps"))
      opts.gradient_accumulation_steps = option<std::int64_t>(c, "gradient_accumulation_steps");
    return opts;
  };
  if (name == adam{}.name()) return adam{common(adam_options{lr, f("beta_1"), f("beta_2"), f("epsilon"), b("amsgrad")})};
  if (name == adamw{}.name())
    return adamw{common(adamw_options{lr, f("weight_decay"), f("beta_1"), f("beta_2"), f("epsilon"), b("amsgrad")})};
  if (name == sgd{}.name()) return sgd{common(sgd_options{lr, f("momentum"), b("nesterov")})};
  if (name == rmsprop{}.name()) return rmsprop{common(rmsprop_options{lr, f("rho"), f("momentum"), f("epsilon"), b("centered")})};
  if (name == adagrad{}.name()) return adagrad{common(adagrad_options{lr, f("initial_accumulator_value"), f("epsilon")})};
  if (name == adamax{}.name()) return adamax{common(adamax_options{lr, f("beta_1"), f("beta_2"), f("epsilon")})};
  if (name == nadam{}.name()) return nadam{common(nadam_options{lr, f("beta_1"), f("beta_2"), f("epsilon")})};
  if (name == lion{}.name()) return lion{common(lion_options{lr, f("beta_1"), f("beta_2")})};
  throw value_error("unknown optimizer '" + name + "'");
}

inline const char* reduction_name(reduction r) {
  return r == reduction::none ? "none" : r == reduction::sum ? "sum" : "sum_over_batch_size";
}
inline reduction reduction_from(const std::string& s) {
  if (s == "none") return reduction::none;
  if (s == "sum") return reduction::sum;
  if (s == "sum_over_batch_size") return reduction::sum_over_batch_size;
  throw value_error("unknown loss reduction '" + s + "'");
}
inline json loss_config(const any_loss& l) {
  auto crossentropy = [&](const auto* x) {
    return entry(x->name(), {{"from_logits", x->options.from_logits}, {"reduction", reduction_name(x->options.reduction)}});
  };
  auto smoothed = [&](const auto* x) {
    json j = crossentropy(x);
    j["config"]["label_smoothing"] = x->options.label_smoothing;
    return j;
  };
  auto plain = [&](const auto* x) { return entry(x->name(), {{"reduction", reduction_name(x->options.reduction)}}); };
  if (const auto* x = l.target<sparse_categorical_crossentropy>()) return crossentropy(x);
  if (const auto* x = l.target<categorical_crossentropy>()) return smoothed(x);
  if (const auto* x = l.target<binary_crossentropy>()) return smoothed(x);
  if (const auto* x = l.target<mean_squared_error>()) return plain(x);
  if (const auto* x = l.target<mean_absolute_error>()) return plain(x);
  if (const auto* x = l.target<kl_divergence>()) return plain(x);
  if (const auto* x = l.target<cosine_similarity>()) return plain(x);
  if (const auto* x = l.target<huber>())
    return entry(x->name(), {{"delta", x->options.delta}, {"reduction", reduction_name(x->options.reduction)}});
  return nullptr;
}
inline any_loss loss_from(const json& j) {
  const auto name = option<std::string>(j, "class_name");
  const json& c = j.at("config");
  const reduction red = reduction_from(option<std::string>(c, "reduction"));
  auto ce = [&] { return crossentropy_options{.from_logits = option<bool>(c, "from_logits"), .reduction = red}; };
  auto smoothed = [&] {  // (files written before label smoothing have none)
    return smoothed_crossentropy_options{.from_logits = option<bool>(c, "from_logits"),
                                         .label_smoothing = c.contains("label_smoothing") ? option<float>(c, "label_smoothing") : 0.0f,
                                         .reduction = red};
  };
  if (name == sparse_categorical_crossentropy{}.name()) return sparse_categorical_crossentropy{ce()};
  if (name == categorical_crossentropy{}.name()) return categorical_crossentropy{smoothed()};
  if (name == binary_crossentropy{}.name()) return binary_crossentropy{smoothed()};
  if (name == mean_squared_error{}.name()) return mean_squared_error{{.reduction = red}};
  if (name == mean_absolute_error{}.name()) return mean_absolute_error{{.reduction = red}};
  if (name == kl_divergence{}.name()) return kl_divergence{{.reduction = red}};
  if (name == cosine_similarity{}.name()) return cosine_similarity{{.reduction = red}};
  if (name == huber{}.name()) return huber{{.delta = option<float>(c, "delta"), .reduction = red}};
  throw value_error("unknown loss '" + name + "'");
}

inline json metric_config(const any_metric& m) {
  if (m.target<sparse_categorical_accuracy>() || m.target<categorical_accuracy>() || m.target<accuracy>())
    return entry(m.name(), json::object());
  if (const auto* b = m.target<binary_accuracy>()) return entry(m.name(), {{"threshold", b->threshold}});
  if (const auto* k = m.target<sparse_top_k_categorical_accuracy>()) return entry(m.name(), {{"k", k->k}});
  if (const auto* k = m.target<top_k_categorical_accuracy>()) return entry(m.name(), {{"k", k->k}});
  auto confusion = [&](const confusion_options& o) {
    json c = json::object();
    if (o.thresholds) c["thresholds"] = *o.thresholds;
    if (o.top_k) c["top_k"] = *o.top_k;
    if (o.class_id) c["class_id"] = *o.class_id;
    return entry(m.name(), std::move(c));
  };
  if (const auto* x = m.target<precision>()) return confusion(x->options);
  if (const auto* x = m.target<recall>()) return confusion(x->options);
  if (const auto* a = m.target<auc>()) {
    const auc_options& o = a->options();
    json c = {{"num_thresholds", o.num_thresholds}, {"curve", o.curve == auc_curve::roc ? "ROC" : "PR"},
              {"summation_method", o.summation_method == auc_summation::interpolation ? "interpolation"
                                   : o.summation_method == auc_summation::minoring    ? "minoring"
                                                                                       : "majoring"},
              {"multi_label", o.multi_label}, {"from_logits", o.from_logits}};
    if (!o.thresholds.empty()) c["thresholds"] = o.thresholds;
    if (o.num_labels) c["num_labels"] = *o.num_labels;
    if (!o.label_weights.empty()) c["label_weights"] = o.label_weights;
    return entry(m.name(), std::move(c));
  }
  if (const auto* i = m.target<mean_iou>()) {
    const mean_iou_options& o = i->options();
    return entry(m.name(), {{"num_classes", o.num_classes}, {"ignore_class", o.ignore_class ? json(*o.ignore_class) : json()},
                            {"sparse_y_true", o.sparse_y_true}, {"sparse_y_pred", o.sparse_y_pred}});
  }
  if (const auto* w = m.target<loss_metric>()) {  // a loss as a metric: Keras' MeanMetricWrapper
    json l = loss_config(w->loss);
    return l.is_null() ? l : entry("mean_metric_wrapper", {{"loss", std::move(l)}});
  }
  return nullptr;
}
inline any_metric metric_from(const json& j) {
  const auto name = option<std::string>(j, "class_name");
  if (name == sparse_categorical_accuracy{}.name()) return sparse_categorical_accuracy{};
  if (name == categorical_accuracy{}.name()) return categorical_accuracy{};
  if (name == accuracy{}.name()) return accuracy{};
  const json& c = j.at("config");
  if (name == binary_accuracy{}.name()) return binary_accuracy{option<float>(c, "threshold")};
  if (name == sparse_top_k_categorical_accuracy{}.name()) return sparse_top_k_categorical_accuracy{option<int>(c, "k")};
  if (name == top_k_categorical_accuracy{}.name()) return top_k_categorical_accuracy{option<int>(c, "k")};
  auto confusion = [&] {
    confusion_options o;
    if (c.contains("thresholds")) o.thresholds = option<float>(c, "thresholds");
    if (c.contains("top_k")) o.top_k = option<int>(c, "top_k");
    if (c.contains("class_id")) o.class_id = option<int>(c, "class_id");
    return o;
  };
  if (name == precision{}.name()) return precision{confusion()};
  if (name == recall{}.name()) return recall{confusion()};
  auto given = [&](const char* key) { return c.contains(key) && !c.at(key).is_null(); };
  if (name == "auc") {
    auc_options o;
    if (given("num_thresholds")) o.num_thresholds = option<int>(c, "num_thresholds");
    if (given("curve")) {
      const auto v = option<std::string>(c, "curve");
      if (v != "ROC" && v != "PR") throw value_error("auc: curve '" + v + "' is not ROC or PR");
      o.curve = v == "ROC" ? auc_curve::roc : auc_curve::pr;
    }
    if (given("summation_method")) {
      const auto v = option<std::string>(c, "summation_method");
      if (v != "interpolation" && v != "minoring" && v != "majoring")
        throw value_error("auc: summation_method '" + v + "' is not interpolation, minoring or majoring");
      o.summation_method = v == "interpolation" ? auc_summation::interpolation
                           : v == "minoring"    ? auc_summation::minoring
                                                : auc_summation::majoring;
    }
    if (given("thresholds")) o.thresholds = option<std::vector<float>>(c, "thresholds");
    if (given("multi_label")) o.multi_label = option<bool>(c, "multi_label");
    if (given("num_labels")) o.num_labels = option<int>(c, "num_labels");
    if (given("label_weights")) o.label_weights = option<std::vector<float>>(c, "label_weights");
    if (given("from_logits")) o.from_logits = option<bool>(c, "from_logits");
    return auc{std::move(o)};
  }
  if (name == "mean_iou") {
    mean_iou_options o{.num_classes = option<int>(c, "num_classes")};
    if (given("ignore_class")) o.ignore_class = option<int>(c, "ignore_class");
    if (given("sparse_y_true")) o.sparse_y_true = option<bool>(c, "sparse_y_true");
    if (given("sparse_y_pred")) o.sparse_y_pred = option<bool>(c, "sparse_y_pred");
    return mean_iou{o};
  }
  if (name == "mean_metric_wrapper") return loss_from(c.at("loss"));
  throw value_error("unknown metric '" + name + "'");
}
}  // namespace detail

/// The compile config of a compiled model, or nothing when a part of it has none (a user's type).
template <class Model>
std::optional<std::string> compile_config(const Model& m) {
  using detail::json;
  json c = {{"optimizer", detail::optimizer_config(m.optimizer())}, {"loss", json::array()},
            {"loss_weights", m.loss_weights()}, {"metrics", json::array()}};
  if (c["optimizer"].is_null()) return std::nullopt;
  for (const auto& l : m.losses()) {
    c["loss"].push_back(detail::loss_config(l));
    if (c["loss"].back().is_null()) return std::nullopt;
  }
  for (std::size_t o = 0; o < m.losses().size(); ++o) c["metrics"].push_back(json::array());
  for (std::size_t i = 0; i < m.metrics().size(); ++i) {
    json e = detail::metric_config(m.metrics()[i]);
    if (e.is_null()) return std::nullopt;
    if (m.metrics()[i].weighted()) e["weighted"] = true;  // compile's weighted_metrics
    c["metrics"][m.metric_outputs()[i]].push_back(std::move(e));
  }
  return c.dump();
}

/// The settings a compile config holds, for a model of `outputs` outputs (`file` names the file in
/// errors). A config that does not parse, or names something unknown, is an `io_error`.
inline compile_settings compile_settings_from(const std::string& config, std::size_t outputs, const std::string& file) {
  try {
    const auto c = detail::json::parse(config);
    compile_settings s{detail::optimizer_from(c.at("optimizer")), {}, detail::option<std::vector<float>>(c, "loss_weights"), {}};
    for (const auto& l : c.at("loss")) s.losses.push_back(detail::loss_from(l));
    for (const auto& list : c.at("metrics")) {
      s.output_metrics.emplace_back();
      for (const auto& m : list) {
        s.output_metrics.back().push_back(detail::metric_from(m));
        s.output_metrics.back().back().set_weighted(m.value("weighted", false));
      }
    }
    if (s.losses.size() != outputs || s.loss_weights.size() != outputs || s.output_metrics.size() != outputs)
      throw value_error("it is for a model of " + std::to_string(s.losses.size()) + " outputs, this one has " +
                        std::to_string(outputs));
    return s;
  } catch (const detail::json::exception& e) {
    throw io_error("load_model: " + file + ": the compile config (metadata 'dtrain.compile') is malformed: " + e.what());
  } catch (const value_error& e) {
    throw io_error("load_model: " + file + ": the compile config (metadata 'dtrain.compile') cannot be used: " + e.what());
  }
}

}  // namespace dtrain::checkpoint
