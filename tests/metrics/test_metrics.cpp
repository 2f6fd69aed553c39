#include "support/gradcheck.hpp"

using namespace dtrain;

namespace {
struct batch {
  std::vector<float> data;
  extents shape;
  batch_view view() const { return {data.data(), shape}; }
};
}  // namespace

BOOST_AUTO_TEST_SUITE(metrics)

/// A metric's (total, count) after one batch of host values.
metric_state one_batch(any_metric m, const batch& t, const batch& p) {
  m.update_state(t.view(), p.view());
  return m.state();
}

BOOST_AUTO_TEST_CASE(accuracies_by_hand) {
  const batch pred{{0.1f, 0.7f, 0.2f, 0.6f, 0.3f, 0.1f, 0.2f, 0.2f, 0.6f}, {3, 3}};  // argmax 1, 0, 2
  const batch labels{{1, 1, 2}, {3}};
  BOOST_TEST(one_batch(sparse_categorical_accuracy{}, labels, pred).values[0] == 2.0f);
  const batch onehot{{0, 1, 0, 0, 0, 1, 0, 0, 1}, {3, 3}};
  BOOST_TEST(one_batch(categorical_accuracy{}, onehot, pred).values[0] == 2.0f);
  const batch prob{{0.7f, 0.2f, 0.5f, 0.9f}, {2, 2}}, bin{{1, 0, 1, 1}, {2, 2}};
  // row 0: both right; row 1: 0.5 is not above the threshold -> one of two
  const metric_state b = one_batch(binary_accuracy{}, bin, prob);
  BOOST_TEST(b.values[0] == 1.5f);
  BOOST_TEST(b.values[1] == 2.0f);
  BOOST_CHECK_THROW(one_batch(categorical_accuracy{}, labels, pred), shape_error);
}

/// A metric of the user's own, on the host: the mean of the predictions.
struct mean_prediction {
  std::string name() const { return "mean_prediction"; }
  metric_update update(batch_view, batch_view p) const {
    double s = 0;
    for (std::size_t i = 0; i < p.size(); ++i) s += p.data[i];
    return {s, double(p.size())};
  }
};

BOOST_AUTO_TEST_CASE(a_host_metric_through_any_metric) {
  static_assert(metric_function<mean_prediction> && !kernel_metric<mean_prediction>);
  any_metric m = mean_prediction{};
  BOOST_TEST(!m.kernel(batch{{1}, {1}}.view(), batch{{1}, {1}}.view()).has_value());
  m.update_state(batch{{0, 0}, {2}}.view(), batch{{1, 2, 3, 6}, {2, 2}}.view());
  BOOST_TEST(m.result() == 3.0f);
}

BOOST_AUTO_TEST_CASE(accuracy_string_resolves_like_keras) {
  const batch pred{{0.1f, 0.7f, 0.2f, 0.6f, 0.3f, 0.1f}, {2, 3}};
  accuracy sparse;
  sparse.kernel(batch{{1, 1}, {2}}.view(), pred.view());
  BOOST_TEST((sparse.resolved == accuracy::kind::sparse));
  accuracy sparse_col;
  sparse_col.kernel(batch{{1, 1}, {2, 1}}.view(), pred.view());
  BOOST_TEST((sparse_col.resolved == accuracy::kind::sparse));
  accuracy cat;
  cat.kernel(batch{{0, 1, 0, 1, 0, 0}, {2, 3}}.view(), pred.view());
  BOOST_TEST((cat.resolved == accuracy::kind::categorical));
  accuracy bin;
  bin.kernel(batch{{1, 0}, {2, 1}}.view(), batch{{0.9f, 0.8f}, {2, 1}}.view());
  BOOST_TEST((bin.resolved == accuracy::kind::binary));
}

BOOST_AUTO_TEST_CASE(state_is_total_and_count) {
  any_metric m = sparse_categorical_accuracy{};
  const batch pred{{0.1f, 0.9f, 0.8f, 0.2f}, {2, 2}};
  m.update_state(batch{{1, 1}, {2}}.view(), pred.view());
  m.update_state(batch{{1, 0}, {2}}.view(), pred.view());
  BOOST_TEST(m.state().values[0] == 3.0f);
  BOOST_TEST(m.state().values[1] == 4.0f);
  BOOST_TEST(m.result() == 0.75f);
  // states from two workers summed give the global result
  any_metric other = m;
  other.reset_state();
  other.update_state(batch{{0, 0}, {2}}.view(), pred.view());
  metric_state merged = m.state();
  merged.values[0] += other.state().values[0], merged.values[1] += other.state().values[1];
  BOOST_TEST(merged.result() == 4.0f / 6.0f, boost::test_tools::tolerance(1e-6f));
  BOOST_CHECK_THROW(m.update_state(batch{{1, 0, 1}, {3}}.view(), pred.view()), shape_error);
}

BOOST_AUTO_TEST_CASE(mean_is_weighted) {
  mean loss("loss");
  loss.update_state(1.0, 32);
  loss.update_state(4.0, 16);
  BOOST_TEST(loss.result() == 2.0f);
  loss.reset_state();
  BOOST_TEST(loss.result() == 0.0f);
}

BOOST_AUTO_TEST_SUITE_END()
