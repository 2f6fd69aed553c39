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

BOOST_AUTO_TEST_CASE(auc_by_hand) {
  // scores 0.1, 0.4, 0.35, 0.8 for labels 0, 0, 1, 1: the ROC curve steps (0,0) (0,.5) (.5,.5) (.5,1) (1,1),
  // area 0.75; the 200 thresholds fall between every two scores, so the trapezoids find it exactly
  const batch truth{{0, 0, 1, 1}, {4}}, pred{{0.1f, 0.4f, 0.35f, 0.8f}, {4}};
  any_metric roc = auc{};
  BOOST_TEST(roc.state().values.size() == 4u * 200u);
  roc.update_state(truth.view(), pred.view());
  BOOST_TEST(roc.result() == 0.75f, boost::test_tools::tolerance(1e-6f));
  // minoring: the lower of each pair of heights; on this staircase either x or y moves between two
  // thresholds, never both, so the same area
  any_metric lower = auc{{.summation_method = auc_summation::minoring}};
  lower.update_state(truth.view(), pred.view());
  BOOST_TEST(lower.result() == 0.75f, boost::test_tools::tolerance(1e-6f));
  // logits: the sigmoid keeps the order, so the area
  any_metric logits = auc{{.from_logits = true}};
  logits.update_state(truth.view(), batch{{-2.0f, 0.3f, 0.1f, 1.5f}, {4}}.view());
  BOOST_TEST(logits.result() == 0.75f, boost::test_tools::tolerance(1e-6f));
  // a perfect ranking: area 1 (ROC) and 1 (PR), with two thresholds between the classes
  const batch ranked{{0.2f, 0.3f, 0.7f, 0.9f}, {4}};
  any_metric pr = auc{{.curve = auc_curve::pr, .thresholds = {0.5f}}};
  pr.update_state(truth.view(), ranked.view());
  BOOST_TEST(pr.result() == 1.0f, boost::test_tools::tolerance(1e-6f));
  any_metric three = auc{{.num_thresholds = 3}};  // thresholds -eps, 0.5, 1 + eps
  three.update_state(truth.view(), ranked.view());
  BOOST_TEST(three.result() == 1.0f, boost::test_tools::tolerance(1e-6f));
  // the state of two batches is the state of both at once
  any_metric halves = auc{};
  halves.update_state(batch{{0, 0}, {2}}.view(), batch{{0.1f, 0.4f}, {2}}.view());
  halves.update_state(batch{{1, 1}, {2}}.view(), batch{{0.35f, 0.8f}, {2}}.view());
  BOOST_TEST(halves.state().values == roc.state().values);
  // multi_label: one curve per column, their mean; label_weights weigh the labels' areas
  const batch t2{{0, 1, 0, 0, 1, 1, 1, 0}, {4, 2}}, p2{{0.1f, 0.9f, 0.4f, 0.2f, 0.35f, 0.8f, 0.8f, 0.3f}, {4, 2}};
  // column 0: the case above (0.75); column 1: labels 1 0 1 0 for 0.9 0.2 0.8 0.3, ranked perfectly (1)
  any_metric per_label = auc{{.multi_label = true, .num_labels = 2}};
  per_label.update_state(t2.view(), p2.view());
  BOOST_TEST(per_label.result() == 0.875f, boost::test_tools::tolerance(1e-6f));
  any_metric weighted = auc{{.multi_label = true, .num_labels = 2, .label_weights = {3.0f, 1.0f}}};
  weighted.update_state(t2.view(), p2.view());
  BOOST_TEST(weighted.result() == (3 * 0.75f + 1.0f) / 4, boost::test_tools::tolerance(1e-6f));
  // bad arguments and shapes
  BOOST_CHECK_THROW(auc{{.num_thresholds = 1}}, value_error);
  BOOST_CHECK_THROW((auc{{.thresholds = {0.5f, 1.5f}}}), value_error);
  BOOST_CHECK_THROW(auc{{.multi_label = true}}, value_error);
  BOOST_CHECK_THROW(auc{{.num_labels = 2}}, value_error);
  BOOST_CHECK_THROW(per_label.update_state(truth.view(), pred.view()), shape_error);  // 1 label, not 2
  BOOST_CHECK_THROW(roc.update_state(batch{{0, 1}, {2}}.view(), pred.view()), shape_error);
}

BOOST_AUTO_TEST_CASE(mean_iou_by_hand) {
  // Keras' docstring case: truth 0 0 1 1, predictions 0 1 0 1 -> each class 1 / (2 + 2 - 1)
  any_metric m = mean_iou{{.num_classes = 2}};
  BOOST_TEST(m.state().values.size() == 4u);
  m.update_state(batch{{0, 0, 1, 1}, {4}}.view(), batch{{0, 1, 0, 1}, {4}}.view());
  BOOST_TEST(m.result() == 1.0f / 3.0f, boost::test_tools::tolerance(1e-6f));
  // scores per class (their argmax) against class ids; class 2 never occurs: averaged over 0 and 1
  const batch scores{{0.9f, 0.1f, 0.0f, 0.2f, 0.7f, 0.1f, 0.6f, 0.3f, 0.1f}, {3, 3}};  // argmax 0, 1, 0
  any_metric argmax = mean_iou{{.num_classes = 3, .sparse_y_pred = false}};
  argmax.update_state(batch{{0, 1, 1}, {3}}.view(), scores.view());
  // class 0: tp 1, predicted 2, actual 1 -> 1/2; class 1: tp 1, predicted 1, actual 2 -> 1/2
  BOOST_TEST(argmax.result() == 0.5f, boost::test_tools::tolerance(1e-6f));
  // ignore_class: the third value (truth 1) is not counted -> both classes right
  any_metric ignoring = mean_iou{{.num_classes = 3, .ignore_class = 1, .sparse_y_pred = false}};
  ignoring.update_state(batch{{0, 2, 1}, {3}}.view(), batch{{0.9f, 0.1f, 0.0f, 0.1f, 0.2f, 0.7f, 0.6f, 0.3f, 0.1f}, {3, 3}}.view());
  BOOST_TEST(ignoring.result() == 1.0f, boost::test_tools::tolerance(1e-6f));
  // a class out of range is named, with where it is
  try {
    m.update_state(batch{{0, 5}, {2}}.view(), batch{{0, 1}, {2}}.view());
    BOOST_FAIL("class 5 of 2 was accepted");
  } catch (const value_error& e) {
    BOOST_TEST(std::string(e.what()).find("y_true holds class 5") != std::string::npos);
  }
  BOOST_CHECK_THROW(m.update_state(batch{{0, 1, 1}, {3}}.view(), batch{{0, 1}, {2}}.view()), shape_error);
  BOOST_CHECK_THROW(mean_iou{{}}, value_error);
}

BOOST_AUTO_TEST_CASE(state_metrics_round_trip_their_compile_config) {
  const any_metric a = auc{{.curve = auc_curve::pr, .summation_method = auc_summation::majoring, .thresholds = {0.2f, 0.6f},
                             .multi_label = true, .num_labels = 2, .label_weights = {1.0f, 2.0f}, .from_logits = true}};
  const any_metric back = checkpoint::detail::metric_from(checkpoint::detail::metric_config(a));
  const auc* b = back.target<auc>();
  BOOST_REQUIRE(b);
  BOOST_TEST(b->thresholds() == a.target<auc>()->thresholds());
  BOOST_TEST((b->options().curve == auc_curve::pr && b->options().summation_method == auc_summation::majoring));
  BOOST_TEST((b->options().multi_label && b->options().from_logits && *b->options().num_labels == 2));
  BOOST_TEST(b->options().label_weights == a.target<auc>()->options().label_weights);
  const any_metric iou = checkpoint::detail::metric_from(checkpoint::detail::metric_config(
      any_metric(mean_iou{{.num_classes = 4, .ignore_class = 0, .sparse_y_true = false}})));
  BOOST_REQUIRE(iou.target<mean_iou>());
  BOOST_TEST(iou.target<mean_iou>()->options().num_classes == 4);
  BOOST_TEST(*iou.target<mean_iou>()->options().ignore_class == 0);
  BOOST_TEST((!iou.target<mean_iou>()->options().sparse_y_true && iou.target<mean_iou>()->options().sparse_y_pred));
  BOOST_CHECK_THROW(checkpoint::detail::metric_from({{"class_name", "auc"}, {"config", {{"curve", "XY"}}}}), value_error);
}

BOOST_AUTO_TEST_CASE(mean_is_weighted) {
  mean loss("loss");
  loss.update_state(1.0, 32);
  loss.update_state(4.0, 16);
  BOOST_TEST(loss.result() == 2.0f);
  loss.reset_state();
  BOOST_TEST(loss.result() == 0.0f);
}

BOOST_AUTO_TEST_CASE(perplexity_is_the_exponential_of_the_mean_token_crossentropy) {
  // uniform scores over 5 tokens: a perplexity of 5, however many tokens
  const batch uniform{std::vector<float>(2 * 3 * 5, 0.0f), {2, 3, 5}}, targets{{0, 1, 2, 3, 4, 0}, {2, 3}};
  any_metric logits = perplexity{.from_logits = true};
  logits.update_state(targets.view(), uniform.view());
  BOOST_TEST(logits.result() == 5.0f, boost::test_tools::tolerance(1e-5f));
  // probabilities: the first token's target has 1/2 (crossentropy ln 2), the second's 1/4 (ln 4)
  const batch probs{{0.5f, 0.25f, 0.25f, 0.5f, 0.25f, 0.25f}, {1, 2, 3}}, t{{0, 2}, {1, 2}};
  any_metric both = perplexity{};
  both.update_state(t.view(), probs.view());
  BOOST_TEST(both.result() == std::pow(2.0f, 1.5f), boost::test_tools::tolerance(1e-5f));
  // target 2 as the padding: only the first token counts
  any_metric masked = perplexity{.mask_token_id = 2};
  masked.update_state(t.view(), probs.view());
  BOOST_TEST(masked.result() == 2.0f, boost::test_tools::tolerance(1e-5f));
  BOOST_TEST(masked.state().values[1] == 1.0f);
  // the states of two batches add up (as replicas' and workers' do)
  masked.update_state(t.view(), probs.view());
  BOOST_TEST(masked.state().values[1] == 2.0f);
  BOOST_TEST(masked.result() == 2.0f, boost::test_tools::tolerance(1e-5f));
  const batch wrong{{0, 1, 2}, {1, 3}};
  BOOST_CHECK_THROW(both.update_state(wrong.view(), probs.view()), shape_error);
}

BOOST_AUTO_TEST_SUITE_END()
