// Loss values worked out by hand, gradients against central differences (on every backend of the
// suite), reductions, bad input, and a loss of the user's own computed on the host.
#include "support/gradcheck.hpp"
#include "support/host_loss.hpp"

using namespace dtrain;
using dtrain_test::backends;

namespace {
tensor t2(std::vector<float> v, std::size_t r, std::size_t c) { return from_span(v, {r, c}); }
tensor t1(std::vector<float> v) { return from_span(v, {v.size()}); }

/// Checks the loss kernel's d_pred on backend B against differences of sum(per_example) * scale.
template <class B>
void check_loss_gradient(const std::string& what, const any_loss& l, const tensor& y_true, std::vector<float> pred,
                         const extents& pe) {
  const extents te = extents_of(y_true);
  l.validate({y_true.data(), te}, {pred.data(), pe});
  const B dev;
  const std::size_t rows = pred.size() / pe.back();
  auto t = dtrain_test::upload(dev, std::vector<float>(y_true.begin(), y_true.end()));
  auto p = dev.template allocate<float>(pred.size()), per = dev.template allocate<float>(rows);
  auto d = dev.template allocate<float>(pred.size());
  const float scale = 0.5f;
  auto run = [&](bool grad) {
    dev.upload(pred.size(), pred.data(), p.data());
    std::visit([&](const auto& o) {
      dev.loss(o, rows, pe.back(), scale, t.data(), p.data(), per.data(), grad ? d.data() : pointer_t<B, float>{});
    }, *l.kernel());
  };
  run(true);
  const std::vector<float> analytic = dtrain_test::download(dev, d);
  auto f = [&]() -> double {
    run(false);
    double s = 0;
    for (float v : dtrain_test::download(dev, per)) s += v;
    return s * scale;
  };
  dtrain_test::check_gradient(what, pred, analytic, f);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(losses)

BOOST_AUTO_TEST_CASE(sparse_categorical_values) {
  // logits (0, ln 2, ln 3)... softmax = (1, 2, 3) / 6; label 2 -> -ln(0.5)
  const float l2v = std::log(2.0f), l3 = std::log(3.0f);
  sparse_categorical_crossentropy logits{{.from_logits = true}};
  tensor y = t1({2, 0});
  tensor z = t2({0, l2v, l3, 0, l2v, l3}, 2, 3);
  BOOST_TEST(logits(y, z)() == (std::log(2.0f) + std::log(6.0f)) / 2, boost::test_tools::tolerance(1e-5f));
  sparse_categorical_crossentropy probs{};
  tensor p = t2({1 / 6.f, 2 / 6.f, 3 / 6.f, 1 / 6.f, 2 / 6.f, 3 / 6.f}, 2, 3);
  BOOST_TEST(probs(y, p)() == (std::log(2.0f) + std::log(6.0f)) / 2, boost::test_tools::tolerance(1e-5f));
  sparse_categorical_crossentropy summed{{.from_logits = true, .reduction = reduction::sum}};
  BOOST_TEST(summed(y, z)() == std::log(2.0f) + std::log(6.0f), boost::test_tools::tolerance(1e-5f));
  sparse_categorical_crossentropy none{{.from_logits = true, .reduction = reduction::none}};
  const tensor per = none(y, z);
  BOOST_TEST(per.dimension() == 1u);
  BOOST_TEST(per(1) == std::log(6.0f), boost::test_tools::tolerance(1e-5f));
  // a probability of 0 is clipped to epsilon, not -inf
  tensor hard = t2({1, 0, 0}, 1, 3);
  BOOST_TEST(probs(t1({1}), hard)() == -std::log(loss_epsilon), boost::test_tools::tolerance(1e-4f));
}

BOOST_AUTO_TEST_CASE(categorical_binary_mse_values) {
  tensor y = t2({0, 1, 0, 1, 0, 0}, 2, 3);
  tensor p = t2({0.2f, 0.6f, 0.2f, 0.5f, 0.25f, 0.25f}, 2, 3);
  BOOST_TEST(categorical_crossentropy{}(y, p)() == -(std::log(0.6f) + std::log(0.5f)) / 2,
             boost::test_tools::tolerance(1e-5f));
  // unnormalised scores are normalised first
  tensor p2 = t2({0.4f, 1.2f, 0.4f, 1.0f, 0.5f, 0.5f}, 2, 3);
  BOOST_TEST(categorical_crossentropy{}(y, p2)() == -(std::log(0.6f) + std::log(0.5f)) / 2,
             boost::test_tools::tolerance(1e-5f));
  // binary: mean over the last axis, then over the batch
  tensor yb = t2({1, 0}, 1, 2), pb = t2({0.8f, 0.4f}, 1, 2);
  BOOST_TEST(binary_crossentropy{}(yb, pb)() == -(std::log(0.8f) + std::log(0.6f)) / 2,
             boost::test_tools::tolerance(1e-4f));
  tensor zb = t2({std::log(4.0f), std::log(2.0f / 3.0f)}, 1, 2);  // sigmoid -> 0.8, 0.4
  BOOST_TEST(binary_crossentropy{{.from_logits = true}}(yb, zb)() == -(std::log(0.8f) + std::log(0.6f)) / 2,
             boost::test_tools::tolerance(1e-5f));
  BOOST_TEST(mean_squared_error{}(t2({1, 2, 3, 4}, 2, 2), t2({1, 4, 3, 3}, 2, 2))() == (4.0f / 2 + 1.0f / 2) / 2,
             boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(regression_kl_and_smoothed_values) {
  namespace tt = boost::test_tools;
  const tensor y = t2({1, 2, 3, 4}, 2, 2), p = t2({1, 4, 3, 3}, 2, 2);
  BOOST_TEST(mean_absolute_error{}(y, p)() == (2.0f / 2 + 1.0f / 2) / 2, tt::tolerance(1e-6f));
  // errors 0.5 (quadratic: 0.125) and -2 (linear: 2 - 0.5), the row's mean
  BOOST_TEST(huber{}(t2({0, 0}, 1, 2), t2({0.5f, -2}, 1, 2))() == (0.125f + 1.5f) / 2, tt::tolerance(1e-6f));
  // delta 3: both quadratic
  BOOST_TEST(huber{{.delta = 3.0f}}(t2({0, 0}, 1, 2), t2({0.5f, -2}, 1, 2))() == (0.125f + 2.0f) / 2, tt::tolerance(1e-6f));
  // a row's sum, not its mean
  BOOST_TEST(kl_divergence{}(t2({0.5f, 0.5f}, 1, 2), t2({0.25f, 0.75f}, 1, 2))() ==
                 0.5f * std::log(2.0f) + 0.5f * std::log(2.0f / 3.0f), tt::tolerance(1e-6f));
  // Keras' documented example: -0 (orthogonal), -1 (the same direction), 1 (opposite)
  const tensor per = cosine_similarity{{.reduction = reduction::none}}(t2({0, 1, 1, 1, 1, 1}, 3, 2), t2({1, 0, 1, 1, -1, -1}, 3, 2));
  BOOST_TEST(per(0) == 0.0f, tt::tolerance(1e-6f));
  BOOST_TEST(per(1) == -1.0f, tt::tolerance(1e-6f));
  BOOST_TEST(per(2) == 1.0f, tt::tolerance(1e-6f));
  // label smoothing 0.3 over 3 classes: (0, 1, 0) -> (0.1, 0.8, 0.1)
  BOOST_TEST(categorical_crossentropy{{.label_smoothing = 0.3f}}(t2({0, 1, 0}, 1, 3), t2({0.2f, 0.6f, 0.2f}, 1, 3))() ==
                 -(0.2f * std::log(0.2f) + 0.8f * std::log(0.6f)), tt::tolerance(1e-5f));
  // binary, 0.2: 1 -> 0.9
  BOOST_TEST(binary_crossentropy{{.label_smoothing = 0.2f}}(t2({1}, 1, 1), t2({0.8f}, 1, 1))() ==
                 -(0.9f * std::log(0.8f) + 0.1f * std::log(0.2f)), tt::tolerance(1e-4f));
  BOOST_CHECK_THROW(categorical_crossentropy{{.label_smoothing = 1.5f}}(t2({0, 1}, 1, 2), t2({0.5f, 0.5f}, 1, 2)), value_error);
  BOOST_CHECK_THROW(huber{{.delta = 0.0f}}(t2({0}, 1, 1), t2({1}, 1, 1)), value_error);
  BOOST_CHECK_THROW(kl_divergence{}(t2({0.5f, 0.5f}, 1, 2), t1({1})), shape_error);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(gradients_match_central_differences, B, backends) {
  rng r(5);
  for (std::size_t n : {1, 5}) {
    const std::size_t c = 7;
    extents pe{n, c};
    std::vector<float> logits = dtrain_test::random_vector(n * c, r, 2.0f);
    std::vector<float> labels(n), onehot(n * c, 0.0f), probs(n * c), soft(n * c);
    for (std::size_t i = 0; i < n; ++i) labels[i] = float(r.below(c)), onehot[i * c + std::size_t(labels[i])] = 1.0f;
    for (auto& v : probs) v = 0.1f + 0.8f * r.uniform();
    for (auto& v : soft) v = r.uniform();
    const tensor y_sparse = from_span(labels, {n}), y_onehot = from_span(onehot, pe), y_soft = from_span(soft, pe);
    check_loss_gradient<B>("scce logits", sparse_categorical_crossentropy{{.from_logits = true}}, y_sparse, logits, pe);
    check_loss_gradient<B>("scce probs", sparse_categorical_crossentropy{}, y_sparse, probs, pe);
    check_loss_gradient<B>("cce logits", categorical_crossentropy{{.from_logits = true}}, y_soft, logits, pe);
    check_loss_gradient<B>("cce probs", categorical_crossentropy{}, y_onehot, probs, pe);
    check_loss_gradient<B>("bce logits", binary_crossentropy{{.from_logits = true}}, y_soft, logits, pe);
    check_loss_gradient<B>("bce probs", binary_crossentropy{}, y_soft, probs, pe);
    check_loss_gradient<B>("mse", mean_squared_error{}, y_soft, logits, pe);
    check_loss_gradient<B>("cce logits smoothed", categorical_crossentropy{{.from_logits = true, .label_smoothing = 0.2f}}, y_onehot, logits, pe);
    check_loss_gradient<B>("cce probs smoothed", categorical_crossentropy{{.label_smoothing = 0.2f}}, y_onehot, probs, pe);
    check_loss_gradient<B>("bce logits smoothed", binary_crossentropy{{.from_logits = true, .label_smoothing = 0.1f}}, y_soft, logits, pe);
    check_loss_gradient<B>("bce probs smoothed", binary_crossentropy{{.label_smoothing = 0.1f}}, y_soft, probs, pe);
    check_loss_gradient<B>("mae", mean_absolute_error{}, y_soft, logits, pe);  // (no error lands at 0)
    check_loss_gradient<B>("huber", huber{{.delta = 0.7f}}, y_soft, logits, pe);  // both sides of delta
    check_loss_gradient<B>("kl divergence", kl_divergence{}, y_soft, probs, pe);
    check_loss_gradient<B>("cosine", cosine_similarity{}, y_soft, logits, pe);
  }
}

BOOST_AUTO_TEST_CASE(bad_labels_and_shapes_name_the_loss_and_shapes) {
  const tensor z = zeros({2, 3});
  try {
    sparse_categorical_crossentropy{{.from_logits = true}}(t1({1, 3}), z);
    BOOST_FAIL("expected value_error");
  } catch (const value_error& e) {
    const std::string m = e.what();
    BOOST_TEST(m.find("sparse_categorical_crossentropy") != std::string::npos);
    BOOST_TEST(m.find("label 3") != std::string::npos);
    BOOST_TEST(m.find("(2, 3)") != std::string::npos);
  }
  BOOST_CHECK_THROW(sparse_categorical_crossentropy{}(t1({0.5f, 1}), z), value_error);
  BOOST_CHECK_THROW(sparse_categorical_crossentropy{}(t1({-1, 1}), z), value_error);
  BOOST_CHECK_THROW(sparse_categorical_crossentropy{}(t1({0, 1, 2}), z), shape_error);
  try {
    mean_squared_error{}(zeros({2, 4}), z);
    BOOST_FAIL("expected shape_error");
  } catch (const shape_error& e) {
    const std::string m = e.what();
    BOOST_TEST(m.find("mean_squared_error") != std::string::npos);
    BOOST_TEST(m.find("(2, 4)") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(a_host_loss_through_any_loss) {
  const any_loss l = dtrain_test::half_squared_error{};
  BOOST_TEST(!l.kernel().has_value());
  // rows (1, 2) vs (1, 4): 0.5 * 4; (3, 4) vs (3, 3): 0.5 * 1; the mean of the two rows
  BOOST_TEST(l(t2({1, 2, 3, 4}, 2, 2), t2({1, 4, 3, 3}, 2, 2))() == (2.0f + 0.5f) / 2, boost::test_tools::tolerance(1e-6f));
  BOOST_CHECK_THROW(l(t2({1, 2, 3, 4}, 2, 2), t1({1, 2})), shape_error);
}

BOOST_AUTO_TEST_SUITE_END()
