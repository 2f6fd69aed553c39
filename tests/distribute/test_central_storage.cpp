// central_storage_strategy on the CPU: 1-4 replicas train like one replica with the global batch, and
// exactly like mirrored_strategy (the same sums, one update instead of one per replica); only the
// parameter device's replica steps the optimizer, the others read its variables; a backup resumes
// bitwise; bad parameter devices are config errors naming them.
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
};

/// Two epochs of `net` (batch 12 of 48 examples, Adam, an l2 penalty) under strategy S on n replicas.
template <class S>
outcome train(int n, std::size_t batch = 12) {
  S s(cpus(n));
  BOOST_REQUIRE_EQUAL(s.num_replicas_in_sync(), n);
  auto [x, y] = three_class_problem(48);
  auto model = s.template make_model<net>(3);
  model.compile({.optimizer = adam{{.learning_rate = 0.01f}},
                 .loss = sparse_categorical_crossentropy{{.from_logits = true}},
                 .metrics = {accuracy{}}});
  outcome o;
  o.hist = model.fit(s.distribute_dataset(data::from_tensor_slices(x, y) | data::shuffle(48, 7) | data::batch(batch)),
                     {.epochs = 2, .verbose = 0});
  o.weights = model.get_weights();
  o.eval = model.evaluate(data::from_tensor_slices(x, y) | data::batch(7), {.verbose = 0});
  return o;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(central_storage)

BOOST_AUTO_TEST_CASE(replicas_train_like_one_with_the_global_batch) {
  const outcome one = train<mirrored_strategy<>>(1);
  for (int n : {1, 2, 3, 4}) {
    BOOST_TEST_CONTEXT("replicas = " << n) {
      const outcome central = train<central_storage_strategy<>>(n), mirrored = train<mirrored_strategy<>>(n);
      BOOST_TEST(weights_close(central.weights, one.weights));
      BOOST_TEST(central.hist["loss"][1] == one.hist["loss"][1], tt::tolerance(1e-4f));
      BOOST_TEST(central.hist["accuracy"][1] == one.hist["accuracy"][1], tt::tolerance(1e-6f));
      BOOST_TEST(central.eval["loss"] == one.eval["loss"], tt::tolerance(1e-4f));
      // the same sums and the same update, applied once: mirrored_strategy's numbers to the bit
      BOOST_TEST(central.weights == mirrored.weights, tt::per_element());
      BOOST_TEST(central.hist.history == mirrored.hist.history);
    }
  }
  // uneven shares (batch 5 on 4 replicas: 1, 1, 1, 2 rows; the last batch of 3: 0, 1, 1, 1)
  BOOST_TEST(weights_close(train<central_storage_strategy<>>(4, 5).weights, train<mirrored_strategy<>>(1, 5).weights));
}

BOOST_AUTO_TEST_CASE(only_the_parameter_device_steps_the_optimizer) {
  // two steps inside strategy.run: every replica ends with the same variables, and only replica 0's
  // optimizer counted them; under mirrored_strategy every replica steps its own copy
  auto [x, y] = three_class_problem(24);
  auto steps = [&](auto& s) {
    auto m = s.template make_model<net>(1);
    m.compile({.optimizer = sgd{{.learning_rate = 0.1f, .momentum = 0.9f}},
               .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
    auto r = s.run([&](const tensor& xs, const tensor& ys) {
      m.train_step(xs, ys, 24);
      m.train_step(xs, ys, 24);
      const auto p = m.parameters();
      return std::pair{m.optimizer().iterations(), std::vector<float>(p.begin(), p.end())};
    }, x, y);
    return r.values;
  };
  central_storage_strategy<> central(cpus(3));
  mirrored_strategy<> mirrored(cpus(3));
  const auto c = steps(central), m = steps(mirrored);
  BOOST_REQUIRE_EQUAL(c.size(), 3u);
  BOOST_TEST(c[0].first == 2);
  BOOST_TEST(c[1].first == 0);
  BOOST_TEST(c[2].first == 0);
  BOOST_TEST(m[2].first == 2);
  for (std::size_t i = 0; i < 3; ++i) {
    BOOST_TEST(c[i].second == c[0].second, tt::per_element());
    BOOST_TEST(c[i].second == m[i].second, tt::per_element());
  }
}

BOOST_AUTO_TEST_CASE(backup_and_restore_resumes_bitwise) {
  // dropout (each replica its own masks) and Adam; a crash in epoch 2, a new strategy and model resume
  // from the backup and end with the uninterrupted run's weights and step count
  dtrain_test::temp_dir t;
  const auto o = dtrain_test::crash_and_resume<central_storage_strategy<>>(t.path);
  BOOST_TEST(o.crashed);
  BOOST_TEST(o.resumed.first == o.straight.first, tt::per_element());
  BOOST_TEST(o.resumed.second == o.straight.second);
  BOOST_TEST(o.other_seed != o.straight.first);  // the seed matters: the comparison above can fail
}

BOOST_AUTO_TEST_CASE(loss_scaled_float16_trains_as_under_mirrored_strategy_with_one_scale) {
  // replica 0 alone steps the optimizer; every replica's scale follows the same summed gradients (it grows
  // every 2 steps here), so they keep scaling alike, and the numbers are mirrored_strategy's, bit for bit
  auto [x, y] = three_class_problem(48);
  auto run = [&]<class S>(S s) {
    auto m = s.template make_model<net>(3);
    m.set_dtype_policy(dtype_policy::mixed_float16());
    m.compile({.optimizer = loss_scale_optimizer(adam{{.learning_rate = 0.01f}}, {.dynamic_growth_steps = 2}),
               .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
    m.fit(s.distribute_dataset(data::from_tensor_slices(x, y) | data::batch(12)), {.epochs = 2, .verbose = 0});
    std::vector<float> scales(2);
    s.run([&] { scales[std::size_t(s.replica_id())] = m.optimizer().state().extra.at(1); });
    BOOST_TEST(scales[0] == scales[1]);
    BOOST_TEST(scales[0] > 32768.0f);  // (it grew)
    return m.get_weights();
  };
  const auto central = run(central_storage_strategy<>(cpus(2))), mirrored = run(mirrored_strategy<>(cpus(2)));
  BOOST_TEST(central == mirrored, tt::per_element());
}

BOOST_AUTO_TEST_CASE(parameter_devices) {
  BOOST_TEST(central_storage_strategy<>().parameter_device() == "/cpu:0");
  BOOST_TEST(central_storage_strategy<>(cpus(2), "/cpu:0").num_replicas_in_sync() == 2);
  BOOST_CHECK_THROW(central_storage_strategy<>(cpus(2), "/gpu:0"), config_error);
  const std::string bad = dtrain_test::error_of([] { central_storage_strategy<>(cpus(2), "/gpu:0"); });
  BOOST_TEST(bad.find("parameter_device '/gpu:0'") != std::string::npos, bad);
  const std::string twice = dtrain_test::error_of([] { central_storage_strategy<>({"/cpu:0", "/cpu:0"}); });
  BOOST_TEST(twice.find("central_storage_strategy: device '/cpu:0' is listed twice") != std::string::npos, twice);
}

BOOST_AUTO_TEST_SUITE_END()
