// mirrored_strategy on the CPU: N replica threads of one process with global batch B train like one
// replica with batch B; reruns are bitwise identical; run / reduce / experimental_local_results and
// distribute_datasets_from_function behave as TF's MirroredStrategy; a failing replica fails the step
// on all replicas with its own error, and the strategy stays usable.
#include <atomic>

#include "support/helpers.hpp"
#include "support/mirrored.hpp"

using namespace dtrain;
namespace tt = boost::test_tools;

namespace {
using net = dtrain_test::small_net;
using dtrain_test::three_class_problem;
using dtrain_test::weights_close;

std::vector<std::string> cpus(int n) {
  std::vector<std::string> d;
  for (int i = 0; i < n; ++i) d.push_back("/cpu:" + std::to_string(i));
  return d;
}

struct outcome {
  std::vector<float> weights;
  history hist;
  logs eval;
  tensor pred;
};

/// Trains `net` (batch 12, 48 examples, Adam, an l2 penalty) under mirrored_strategy on n replicas.
outcome train(int n, std::uint64_t seed = 3, int epochs = 2, std::size_t batch = 12) {
  mirrored_strategy<> s(cpus(n));
  BOOST_REQUIRE_EQUAL(s.num_replicas_in_sync(), n);
  auto [x, y] = three_class_problem(48);
  auto model = s.make_model<net>(seed);
  model.compile({.optimizer = adam{{.learning_rate = 0.01f}},
                 .loss = sparse_categorical_crossentropy{{.from_logits = true}},
                 .metrics = {accuracy{}}});
  auto ds = s.distribute_dataset(data::from_tensor_slices(x, y) | data::shuffle(48, 7) | data::batch(batch));
  outcome o;
  o.hist = model.fit(ds, {.epochs = epochs, .validation_data = data::from_tensor_slices(x, y) | data::batch(10), .verbose = 0});
  o.weights = model.get_weights();
  o.eval = model.evaluate(data::from_tensor_slices(x, y) | data::batch(7), {.verbose = 0});
  o.pred = model.predict(x, {.batch_size = 7});
  return o;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(mirrored)

BOOST_AUTO_TEST_CASE(n_replicas_train_like_one_with_the_global_batch) {
  const outcome one = train(1);
  for (int n : {2, 3, 4, 5, 8}) {
    BOOST_TEST_CONTEXT("replicas = " << n) {
      const outcome many = train(n);
      BOOST_TEST(weights_close(many.weights, one.weights));
      BOOST_TEST(many.weights != one.weights);  // the replicas did split the batch (another summation order)
      BOOST_TEST(many.hist["loss"][1] == one.hist["loss"][1], tt::tolerance(1e-4f));
      BOOST_TEST(many.hist["accuracy"][1] == one.hist["accuracy"][1], tt::tolerance(1e-6f));
      BOOST_TEST(many.hist["val_accuracy"][1] == one.hist["val_accuracy"][1], tt::tolerance(1e-6f));
      // evaluate and predict split batches of 7 (uneven shares, and shares of 0 rows for n = 8)
      BOOST_TEST(many.eval["loss"] == one.eval["loss"], tt::tolerance(1e-4f));
      BOOST_TEST(many.eval["accuracy"] == one.eval["accuracy"], tt::tolerance(1e-6f));
      BOOST_REQUIRE(many.pred.shape() == one.pred.shape());
      for (std::size_t i = 0; i < one.pred.size(); ++i)
        BOOST_TEST(many.pred.data()[i] == one.pred.data()[i], tt::tolerance(1e-3f));
    }
  }
}

BOOST_AUTO_TEST_CASE(uneven_and_empty_shares_train_like_one) {
  // batch 5 on 4 replicas gives shares of 1, 1, 1, 2 rows; the last batch of 3 (48 = 9 * 5 + 3) gives 0, 1, 1, 1
  const outcome one = train(1, 3, 1, 5), many = train(4, 3, 1, 5);
  BOOST_TEST(weights_close(many.weights, one.weights));
  BOOST_TEST(many.hist["loss"][0] == one.hist["loss"][0], tt::tolerance(1e-4f));
}

BOOST_AUTO_TEST_CASE(reruns_are_bitwise_identical) {
  const outcome a = train(3, 11, 1), b = train(3, 11, 1);
  BOOST_TEST(a.weights == b.weights, tt::per_element());
  BOOST_TEST(a.hist.history == b.hist.history);
  BOOST_TEST(train(3, 12, 1).weights != a.weights);
}

BOOST_AUTO_TEST_CASE(replicas_keep_the_same_weights_after_changes_from_outside) {
  // set_weights and an optimizer state restored between steps reach every replica: two steps after a
  // set_weights equal the same two steps of a single replica started from those weights
  auto [x, y] = three_class_problem(24);
  std::vector<float> start;
  auto run = [&](int n) {
    mirrored_strategy<> s(cpus(n));
    auto m = s.make_model<net>(1);
    m.compile({.optimizer = sgd{{.learning_rate = 0.1f, .momentum = 0.9f}}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
    m.train_step(x, y);
    if (start.empty()) start = m.get_weights();
    for (float& w : start) w *= 0.5f;
    m.set_weights(start);
    m.optimizer().set_learning_rate(0.05f);
    m.train_step(x, y);
    m.train_step(x, y);
    return m.get_weights();
  };
  const auto one = run(1);
  start.clear();
  BOOST_TEST(weights_close(run(3), one));
}

BOOST_AUTO_TEST_CASE(a_dtype_policy_set_from_outside_reaches_every_replica) {
  // predict splits the rows over 3 replicas: each computes its rows under the policy, as one model does
  auto [x, y] = three_class_problem(24);
  mirrored_strategy<> s(cpus(3));
  auto m = s.make_model<net>(1);
  m.set_dtype_policy(dtype_policy::mixed_bfloat16());
  net one(2), plain(2);
  one.set_weights(m.get_weights()), plain.set_weights(m.get_weights());
  one.set_dtype_policy(dtype_policy::mixed_bfloat16());
  const tensor many = m.predict(x, {.batch_size = 24}), single = one.predict(x, {.batch_size = 24});
  BOOST_TEST(dtrain_test::scaled_difference(many, single) < 1e-6);
  BOOST_TEST(dtrain_test::scaled_difference(plain.predict(x, {.batch_size = 24}), single) > 1e-4);
}

BOOST_AUTO_TEST_CASE(loss_scaled_float16_replicas_train_like_one_and_keep_one_scale) {
  // every replica checks the same summed gradients: they skip together and hold one scale
  auto [x, y] = three_class_problem(48);
  auto run = [&](int n) {
    mirrored_strategy<> s(cpus(n));
    auto m = s.make_model<net>(3);
    m.set_dtype_policy(dtype_policy::mixed_float16());
    m.compile({.optimizer = adam{{.learning_rate = 0.01f}}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
    m.fit(data::from_tensor_slices(x, y) | data::batch(12), {.epochs = 2, .verbose = 0});
    const optimizer_state state = m.optimizer().state();
    std::vector<optimizer_state> per(static_cast<std::size_t>(n));
    s.run([&] { per[std::size_t(s.replica_id())] = m.optimizer().state(); });  // each replica's own
    for (const auto& p : per) BOOST_TEST((p == state));
    BOOST_TEST(m.optimizer().iterations() == 8);
    return std::pair{m.get_weights(), state};
  };
  const auto one = run(1), three = run(3);
  BOOST_TEST(weights_close(three.first, one.first, 1e-3f, 1e-2f));
  BOOST_TEST(three.second.extra == one.second.extra, tt::per_element());  // the step counter and scale
  BOOST_TEST(three.second.extra.at(1) == 32768.0f);  // (no overflow here: 8 finite steps)
}

BOOST_AUTO_TEST_CASE(backup_and_restore_resumes_bitwise) {
  // A fit on 3 replicas with dropout dies in epoch 2; a new strategy and model resume from the backup and
  // end with the uninterrupted run's weights, bitwise: the replicas' weights, optimizer state and random
  // streams all come back.
  dtrain_test::temp_dir t;
  const auto o = dtrain_test::crash_and_resume<mirrored_strategy<>>(t.path);
  BOOST_TEST(o.crashed);
  BOOST_TEST(o.resumed.first == o.straight.first, tt::per_element());
  BOOST_TEST(o.resumed.second == o.straight.second);
  BOOST_TEST(o.other_seed != o.straight.first);  // the seed matters: the comparison above can fail
}

BOOST_AUTO_TEST_CASE(custom_loop_run_reduce_and_local_results) {
  // The guide's custom loop: run(step, global batch) gives each replica its rows; inside, the model is
  // the replica's copy; reduce(sum) of the per-replica losses is the global batch's loss.
  auto [x, y] = three_class_problem(24);
  const any_loss loss = sparse_categorical_crossentropy{{.from_logits = true, .reduction = reduction::none}};
  auto losses = [&](int n) {
    mirrored_strategy<> s(cpus(n));
    auto model = s.make_model<net>(4);
    model.compile({.optimizer = adam{{.learning_rate = 0.01f}}, .loss = loss});
    std::vector<float> out;
    std::atomic<int> in_scope{0};  // Boost.Test is not thread-safe: the replicas count, the test checks
    for (int step = 0; step < 3; ++step) {
      const per_replica<float> l = s.run(
          [&](const data::example& b) {
            in_scope += get_strategy().num_replicas_in_sync() == n;
            const float v = model.value_and_gradients(b.first, b.second, loss, 24);
            model.optimizer().apply_gradients(model.gradients(), model.parameters());
            return v;
          },
          data::example{x, y});
      BOOST_TEST(s.experimental_local_results(l).size() == std::size_t(n));
      out.push_back(s.reduce(reduce_op::sum, l));
    }
    BOOST_TEST(in_scope == 3 * n);
    out.push_back(model.get_weights()[0]);
    return out;
  };
  const auto one = losses(1), three = losses(3);
  for (std::size_t i = 0; i < one.size(); ++i) BOOST_TEST(three[i] == one[i], tt::tolerance(1e-4f));
}

BOOST_AUTO_TEST_CASE(a_free_optimizer_steps_once_per_step_on_every_replica) {
  // The guide's loop with the optimizer made beside the model, as TF users write it: every replica
  // calls apply_gradients on the same object. It must step once per step (Adam's bias correction and
  // the schedule follow the count), keep the replicas equal and train as one replica does.
  auto [x, y] = three_class_problem(24);
  const any_loss loss = sparse_categorical_crossentropy{{.from_logits = true, .reduction = reduction::none}};
  struct result {
    std::vector<float> weights;
    std::int64_t iterations;
    optimizer_state state;
    bool replicas_equal = true;
  };
  auto loop = [&](int n) {
    mirrored_strategy<> s(cpus(n));
    auto model = s.make_model<net>(4);
    adam optimizer{{.learning_rate = exponential_decay{.initial_learning_rate = 0.02f, .decay_steps = 2,
                                                       .decay_rate = 0.5f}}};
    for (int step = 0; step < 5; ++step)
      s.run(
          [&](const data::example& b) {
            model.value_and_gradients(b.first, b.second, loss, 24);
            optimizer.apply_gradients(model.gradients(), model.parameters());
          },
          data::example{x, y});
    result r{model.get_weights(), optimizer.iterations(), optimizer.state()};
    std::vector<std::vector<float>> per(std::size_t(n), std::vector<float>{});
    s.run([&] {
      const auto w = model.parameters();  // the running replica's copy
      per[std::size_t(s.replica_id())].assign(w.begin(), w.end());
    });
    for (const auto& w : per) r.replicas_equal = r.replicas_equal && w == per[0];
    return r;
  };
  const result one = loop(1);
  BOOST_TEST(one.iterations == 5);
  for (int n : {2, 3}) {
    BOOST_TEST_CONTEXT("replicas = " << n) {
      const result many = loop(n);
      BOOST_TEST(many.iterations == 5);
      BOOST_TEST(many.replicas_equal);
      BOOST_TEST(weights_close(many.weights, one.weights));
      BOOST_TEST(weights_close(many.state.slots, one.state.slots));
    }
  }
}

BOOST_AUTO_TEST_CASE(a_standalone_metric_sums_every_replica_outside_run) {
  // Updated by every replica inside run, read outside: the result over the global batches, as TF's
  // sync-on-read metric variables; inside run each replica reads its own.
  auto [x, y] = three_class_problem(24);
  auto loop = [&](int n) {
    mirrored_strategy<> s(cpus(n));
    auto model = s.make_model<net>(4);
    any_metric acc = sparse_categorical_accuracy{};
    mean ids{"replica_id"};
    std::vector<float> inside(std::size_t(n), -1.0f);
    for (int step = 0; step < 3; ++step)
      s.run(
          [&](const data::example& b) {
            acc.update_state(b.second, model(b.first));
            ids.update_state(double(s.replica_id()));
            inside[std::size_t(s.replica_id())] = ids.result();  // this replica's own
          },
          data::example{x, y});
    std::pair<float, float> r{acc.result(), ids.result()};
    acc.reset_state();
    BOOST_TEST(acc.result() == 0.0f);
    for (int i = 0; i < n; ++i) BOOST_TEST(inside[std::size_t(i)] == float(i));
    return r;
  };
  const auto one = loop(1);
  for (int n : {2, 3}) {
    BOOST_TEST_CONTEXT("replicas = " << n) {
      const auto many = loop(n);
      BOOST_TEST(many.first == one.first, tt::tolerance(1e-6f));
      BOOST_TEST(many.second == float(n - 1) / 2.0f);  // the mean over every replica's updates
    }
  }
}

BOOST_AUTO_TEST_CASE(kernel_and_host_metrics_sum_their_states_over_the_replicas) {
  // a top-k accuracy (a backend kernel) and a loss as a metric (on the host): 1, 2 and 3 replicas give
  // the same results on batches of 7 (uneven shares), as states summed, not averages of averages
  auto [x, y] = three_class_problem(30);
  auto evaluate = [&](int n) {
    mirrored_strategy<> s(cpus(n));
    auto m = s.make_model<net>(4);
    m.compile({.optimizer = sgd{}, .loss = sparse_categorical_crossentropy{{.from_logits = true}},
               .metrics = {sparse_top_k_categorical_accuracy{2}, sparse_categorical_crossentropy{{.from_logits = true}}}});
    return m.evaluate(data::from_tensor_slices(x, y) | data::batch(7), {.verbose = 0});
  };
  const logs one = evaluate(1);
  for (int n : {2, 3}) {
    const logs many = evaluate(n);
    BOOST_TEST(many["sparse_top_k_categorical_accuracy"] == one["sparse_top_k_categorical_accuracy"]);
    BOOST_TEST(many["sparse_categorical_crossentropy"] == one["sparse_categorical_crossentropy"], tt::tolerance(1e-6f));
  }
  BOOST_TEST(one["sparse_top_k_categorical_accuracy"] > 0.0f);
}

BOOST_AUTO_TEST_CASE(state_metrics_sum_their_states_over_the_replicas) {
  // AUC (thresholds x 4 counts per label) and MeanIoU (a confusion matrix): 1, 2 and 3 replicas on batches
  // of 7 give the metric of all predictions at once, exactly (their states are counts)
  auto [x, labels] = three_class_problem(30);
  tensor y = zeros({30, 3});
  for (std::size_t i = 0; i < 30; ++i) y(i, std::size_t(labels(i))) = 1.0f;
  const auc pr{{.curve = auc_curve::pr, .multi_label = true, .num_labels = 3, .from_logits = true}};
  const mean_iou iou{{.num_classes = 3, .sparse_y_true = false, .sparse_y_pred = false}};
  auto evaluate = [&](int n) {
    mirrored_strategy<> s(cpus(n));
    auto m = s.make_model<net>(4);
    m.compile({.optimizer = sgd{}, .loss = categorical_crossentropy{{.from_logits = true}}, .metrics = {pr, iou}});
    return m.evaluate(data::from_tensor_slices(x, y) | data::batch(7), {.verbose = 0});
  };
  const logs one = evaluate(1);
  auto model = net(4);
  const tensor logits = model.predict(x);
  any_metric whole_auc = pr, whole_iou = iou;
  whole_auc.update_state(y, logits);
  whole_iou.update_state(y, logits);
  BOOST_TEST(one["auc"] == whole_auc.result());
  BOOST_TEST(one["mean_iou"] == whole_iou.result());
  BOOST_TEST((one["auc"] > 0.0f && one["auc"] < 1.0f && one["mean_iou"] > 0.0f && one["mean_iou"] < 1.0f));
  for (int n : {2, 3}) {
    const logs many = evaluate(n);
    BOOST_TEST(many["auc"] == one["auc"]);
    BOOST_TEST(many["mean_iou"] == one["mean_iou"]);
  }
}

BOOST_AUTO_TEST_CASE(custom_loop_losses_follow_their_reduction_as_in_tf) {
  // sum: each replica's sum, summed over the replicas, is the global batch's; sum_over_batch_size would
  // average each replica's share alone, so TF raises under a strategy, and so does dtrain.
  auto [x, y] = three_class_problem(24);
  auto grads = [&](int n, reduction red) {
    mirrored_strategy<> s(cpus(n));
    auto model = s.make_model<net>(4);
    const any_loss loss = sparse_categorical_crossentropy{{.from_logits = true, .reduction = red}};
    const float total = s.reduce(reduce_op::sum, s.run([&](const data::example& b) {
      return model.value_and_gradients(b.first, b.second, loss);
    }, data::example{x, y}));
    std::vector<float> g(model.gradients().begin(), model.gradients().end());
    g.push_back(total);
    return g;
  };
  const auto one = grads(1, reduction::sum);
  BOOST_TEST(weights_close(grads(3, reduction::sum), one));
  BOOST_TEST(!weights_close(grads(3, reduction::none), one));  // the comparison can fail
  BOOST_TEST(dtrain_test::error_of([&] { grads(2, reduction::sum_over_batch_size); }).find("reduction::none") !=
             std::string::npos);
  BOOST_CHECK_NO_THROW(grads(1, reduction::sum_over_batch_size));
}

BOOST_AUTO_TEST_CASE(run_gives_each_replica_its_rows_and_id) {
  mirrored_strategy<> s(cpus(3));
  tensor x = zeros({7, 2});
  for (std::size_t i = 0; i < 7; ++i) x(i, 0) = float(i);
  const auto r = s.run([&](const tensor& share, int k) {
    return std::vector<float>{float(get_strategy().is_default() ? -1 : s.replica_id()), float(share.shape()[0]),
                              share.shape()[0] ? share(0, 0) : -1.0f, float(k)};
  }, x, 5);
  // rows [i 7/3, (i+1) 7/3): 0-1, 2-3, 4-6
  BOOST_TEST((r.values[0] == std::vector<float>{0, 2, 0, 5}));
  BOOST_TEST((r.values[1] == std::vector<float>{1, 2, 2, 5}));
  BOOST_TEST((r.values[2] == std::vector<float>{2, 3, 4, 5}));
  BOOST_TEST(s.replica_id() == 0);  // cross-replica context
}

BOOST_AUTO_TEST_CASE(reduce_follows_tf) {
  mirrored_strategy<> s(cpus(4));
  const auto v = s.run([&] { return float(s.replica_id() + 1); });  // 1, 2, 3, 4
  BOOST_TEST(s.reduce(reduce_op::sum, v) == 10.0f);
  BOOST_TEST(s.reduce(reduce_op::mean, v) == 2.5f);
  BOOST_TEST(s.reduce(reduce_op::max, v) == 4.0f);
  BOOST_TEST(s.reduce(reduce_op::min, v) == 1.0f);
  // a value that is not per replica: mean gives it back, sum only of 0 (TF's reduce_non_distributed_value)
  BOOST_TEST(s.reduce(reduce_op::mean, 3.0f) == 3.0f);
  BOOST_TEST(s.reduce(reduce_op::sum, 0.0f) == 0.0f);
  BOOST_CHECK_THROW(s.reduce(reduce_op::sum, 3.0f), value_error);
  // tensors, across replicas and along the batch axis (replicas with 1, 2, 3, 4 rows of [i, 10 i])
  const auto t = s.run([&] {
    const std::size_t rows = std::size_t(s.replica_id() + 1);
    tensor a = zeros({rows, 2});
    for (std::size_t r = 0; r < rows; ++r) a(r, 0) = float(rows), a(r, 1) = 10.0f * float(rows);
    return a;
  });
  const tensor mean0 = s.reduce(reduce_op::mean, t, 0);  // (1*1 + 2*2 + 3*3 + 4*4) / 10 = 3
  BOOST_TEST(mean0(0) == 3.0f);
  BOOST_TEST(mean0(1) == 30.0f);
  BOOST_CHECK_THROW(s.reduce(reduce_op::sum, t), value_error);  // different shapes without an axis
}

BOOST_AUTO_TEST_CASE(datasets_from_function_hand_out_per_replica_batches) {
  // fn builds per-replica batches of 4 (global 12 on 3 replicas); replica i trains on the i-th of
  // every 3, which the strategy joins into one global batch: the same batches as batch(12)
  mirrored_strategy<> s(cpus(3));
  auto [x, y] = three_class_problem(30);
  int calls = 0;
  auto ds = s.distribute_datasets_from_function([&](const input_context& ctx) {
    ++calls;
    BOOST_TEST(ctx.num_input_pipelines == 1);
    BOOST_TEST(ctx.num_replicas_in_sync == 3);
    return data::from_tensor_slices(x, y) | data::batch(ctx.get_per_replica_batch_size(12));
  });
  BOOST_TEST(calls == 1);
  BOOST_TEST(ds.cardinality() == 3);  // 8 batches of 4 (the last of 2), in groups of 3
  auto it = ds.iterate(0);
  std::vector<std::size_t> rows;
  while (auto b = it.next()) {
    rows.push_back(b->first.shape()[0]);
    BOOST_TEST(b->second.shape()[0] == b->first.shape()[0]);
  }
  BOOST_TEST((rows == std::vector<std::size_t>{12, 12, 6}));
  auto skipped = ds.iterate(0);
  BOOST_TEST(skipped.skip(2) == 2);
  BOOST_TEST(skipped.next()->first(0, 0) == x(24, 0));
}

BOOST_AUTO_TEST_CASE(a_failing_replica_fails_the_step_with_its_error) {
  mirrored_strategy<> s(cpus(3), {.timeout = std::chrono::milliseconds(20'000)});
  auto model = s.make_model<net>(2);
  model.compile({.optimizer = sgd{}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
  auto [x, y] = three_class_problem(9);
  // replica 1 throws before the gradient all-reduce the others wait in: they are released (no hang)
  // and the user sees replica 1's own error, not the others' comm_error
  BOOST_CHECK_EXCEPTION(s.run([&](const data::example& b) {
    if (s.replica_id() == 1) throw value_error("replica 1's data is bad");
    model.train_step(b.first, b.second);
  }, data::example{x, y}), value_error, [](const value_error& e) { return std::string(e.what()) == "replica 1's data is bad"; });
  // the strategy stays usable: a later step runs on every replica
  std::atomic<int> ran{0};
  s.run([&](const data::example& b) {
    model.train_step(b.first, b.second);
    ++ran;
  }, data::example{x, y});
  BOOST_TEST(ran == 3);
}

BOOST_AUTO_TEST_CASE(bad_devices_are_config_errors) {
  BOOST_CHECK_THROW(mirrored_strategy<>({"/cpu:0", "/cpu:0"}), config_error);
  BOOST_CHECK_THROW(mirrored_strategy<>({"/gpu:0"}), config_error);
  BOOST_CHECK_THROW(mirrored_strategy<>({"/tpu:0"}), config_error);
  BOOST_TEST(mirrored_strategy<>().devices() == std::vector<std::string>{"/cpu:0"});
  BOOST_TEST(mirrored_strategy<>({"/device:CPU:0", "/job:localhost/replica:0/task:0/device:CPU:1"}).num_replicas_in_sync() == 2);
}

BOOST_AUTO_TEST_CASE(value_and_gradients_with_a_host_loss_needs_run) {
  mirrored_strategy<> s(cpus(2));
  auto model = s.make_model<net>(2);
  auto [x, y] = three_class_problem(4);
  BOOST_CHECK_THROW(model.value_and_gradients(x, [](const tensor&, tensor&) { return 0.0f; }), usage_error);
  const auto l = s.run([&](const tensor& share) {
    return model.value_and_gradients(share, [](const tensor& p, tensor& d) {
      d = p;
      return float(p.shape()[0]);
    });
  }, x);
  // each replica's value carries its share (1 / replicas) of the l2 penalty: the sum holds it once
  BOOST_TEST(s.reduce(reduce_op::sum, l) == 4.0f + model.regularization_loss(), tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_SUITE_END()
