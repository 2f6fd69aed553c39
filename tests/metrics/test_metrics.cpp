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

BOOST_AUTO_TEST_CASE(precision_recall_by_hand) {
  // predicted positive (> 0.5): 0.7, 0.9, 0.6; actual: values 0, 2, 3 -> tp 2 (0.7, 0.6), fp 1 (0.9), fn 1
  const batch pred{{0.7f, 0.2f, 0.4f, 0.6f, 0.9f, 0.1f}, {2, 3}}, truth{{1, 0, 1, 1, 0, 0}, {2, 3}};
  const metric_state p = one_batch(precision{}, truth, pred), r = one_batch(recall{}, truth, pred);
  BOOST_TEST(p.values[0] == 2.0f);
  BOOST_TEST(p.values[1] == 3.0f);
  BOOST_TEST(r.values[1] == 3.0f);
  // threshold 0.3: 0.4 too (tp 3 of 4 predicted)
  BOOST_TEST(one_batch(precision{{.thresholds = 0.3f}}, truth, pred).result() == 0.75f);
  // class 0 only: rows' first values 0.7 (actual) and 0.6 (actual): precision 1, recall 1
  BOOST_TEST(one_batch(recall{{.class_id = 0}}, truth, pred).result() == 1.0f);
  // top 1 per row: 0.7 (actual) and 0.9 (not): precision 1/2; recall 1/3
  BOOST_TEST(one_batch(precision{{.top_k = 1}}, truth, pred).result() == 0.5f);
  BOOST_TEST(one_batch(recall{{.top_k = 1}}, truth, pred).result() == 1.0f / 3.0f, boost::test_tools::tolerance(1e-6f));
  // nothing predicted positive: 0, not NaN
  BOOST_TEST(one_batch(precision{{.thresholds = 0.95f}}, truth, pred).result() == 0.0f);
  BOOST_CHECK_THROW(one_batch(precision{{.class_id = 3}}, truth, pred), value_error);
  BOOST_CHECK_THROW(one_batch(recall{}, batch{{1, 0}, {2}}, pred), shape_error);
}

BOOST_AUTO_TEST_CASE(top_k_and_a_loss_as_a_metric) {
  const batch pred{{0.1f, 0.7f, 0.2f, 0.6f, 0.3f, 0.1f}, {2, 3}};
  BOOST_TEST(one_batch(sparse_top_k_categorical_accuracy{1}, batch{{1, 1}, {2}}, pred).values[0] == 1.0f);
  BOOST_TEST(one_batch(sparse_top_k_categorical_accuracy{2}, batch{{1, 1}, {2}}, pred).values[0] == 2.0f);
  BOOST_CHECK_THROW(one_batch(sparse_top_k_categorical_accuracy{2}, batch{{1, 3}, {2}}, pred), value_error);
  BOOST_CHECK_THROW(one_batch(top_k_categorical_accuracy{0}, batch{{0, 1, 0, 1, 0, 0}, {2, 3}}, pred), value_error);
  // Keras' metrics=["mae"]: the mean over the rows of each row's mean absolute error
  any_metric mae = mean_absolute_error{};
  BOOST_TEST(mae.name() == "mean_absolute_error");
  mae.update_state(batch{{1, 2, 3, 4}, {2, 2}}.view(), batch{{1, 4, 3, 3}, {2, 2}}.view());
  BOOST_TEST(mae.result() == 0.75f);
  BOOST_TEST(mae.state().values[1] == 2.0f);
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
