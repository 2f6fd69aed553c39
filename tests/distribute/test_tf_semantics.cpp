// The programs of TensorFlow's distributed-training guides behave as in TensorFlow under a multi-worker
// strategy (real loopback sockets, 1, 2 and 3 workers): the guide's custom loop without a global batch
// size, uneven input (a short last batch, workers whose own pipelines run out at different steps),
// get_strategy() in scope, strategy.reduce on tensors, predict split across the workers, and AUTO
// sharding by file.
#include <fstream>

#include "support/gradcheck.hpp"
#include "support/helpers.hpp"
#include "support/loopback.hpp"
#include "support/mirrored.hpp"

using namespace dtrain;
namespace tt = boost::test_tools;
using dtrain_test::on_workers;

namespace {
using net = dtrain_test::small_net;
using dtrain_test::three_class_problem;
using dtrain_test::weights_close;

// Plain SGD: a gradient scaled by the number of workers shows in the weights (Adam would hide it).
void compile(auto& model) {
  model.compile({.optimizer = sgd{{.learning_rate = 0.1f}},
                 .loss = sparse_categorical_crossentropy{{.from_logits = true}},
                 .metrics = {accuracy{}}});
}

/// The distributed training guide's custom loop as a user ports it: no global batch size anywhere
/// (value_and_gradients and compute_average_loss default to the per-replica batch times the replicas).
std::vector<std::vector<float>> guide_loop(int p) {
  std::vector<std::vector<float>> out(static_cast<std::size_t>(p));
  auto [x, y] = three_class_problem(48);
  on_workers(p, [&](auto& strategy, int r) {
    auto dist_dataset = strategy.distribute_dataset(data::from_tensor_slices(x, y) | data::batch(12));
    auto model = strategy.template make_model<net>(3);
    const any_loss loss_object = sparse_categorical_crossentropy{{.from_logits = true, .reduction = reduction::none}};
    sgd optimizer{{.learning_rate = 0.1f}};  // plain SGD: N times the gradient would show
    auto train_step = [&](const data::example& inputs) {
      const float loss = model.value_and_gradients(inputs.first, inputs.second, loss_object);
      optimizer.apply_gradients(model.gradients(), model.parameters());
      return loss;
    };
    for (int epoch = 0; epoch < 2; ++epoch) {
      auto iterator = data::make_iterator(dist_dataset, std::uint64_t(epoch));
      while (auto batch = iterator.next()) strategy.reduce(reduce_op::sum, strategy.run(train_step, *batch));
    }
    out[std::size_t(r)] = model.get_weights();
  });
  return out;
}

/// The guide's GAN-style pattern: two models under one strategy, the generator trained through the
/// discriminator (the generator's loss gradient is the discriminator's gradient with respect to its
/// input). Returns every worker's generator weights followed by its discriminator weights.
std::vector<std::vector<float>> gan_loop(int p) {
  using generator = sequential<input<4>, dense<8, dtrain::tanh>, dense<6>>;
  using discriminator = sequential<input<6>, dense<8, dtrain::tanh>, dense<1>>;
  std::vector<std::vector<float>> out(static_cast<std::size_t>(p));
  auto [x, y] = three_class_problem(48);  // the "real" samples: 6 features
  on_workers(p, [&](auto& strategy, int r) {
    auto dist_dataset = strategy.distribute_dataset(data::from_tensor_slices(x, y) | data::batch(12));
    auto gen = strategy.template make_model<generator>(5);
    auto disc = strategy.template make_model<discriminator>(6);
    disc.watch_inputs();
    const any_loss bce = binary_crossentropy{{.from_logits = true, .reduction = reduction::none}};
    sgd gen_optimizer{{.learning_rate = 0.1f}}, disc_optimizer{{.learning_rate = 0.1f}};
    auto train_step = [&](const data::example& batch) {
      const tensor& real = batch.first;
      const std::size_t n = real.shape()[0];
      tensor noise = zeros({n, 4});  // a fixed function of the real rows, so every split draws the same
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < 4; ++j) noise(i, j) = 0.5f * real(i, j + 2) - 0.1f * float(j);
      // the discriminator on real (label 1) and generated (label 0) rows
      const tensor fake = gen(noise, true);
      tensor both = zeros({2 * n, 6}), labels = zeros({2 * n, 1});
      for (std::size_t i = 0; i < n; ++i) {
        labels(i, 0) = 1.0f;
        for (std::size_t j = 0; j < 6; ++j) both(i, j) = real(i, j), both(n + i, j) = fake(i, j);
      }
      disc.value_and_gradients(both, labels, bce);
      disc_optimizer.apply_gradients(disc.gradients(), disc.parameters());
      // the generator through the discriminator: its generated rows should pass as real
      gen.value_and_gradients(noise, [&](const tensor& generated, tensor& d_generated) {
        tensor real_labels = zeros({n, 1});
        for (auto& v : real_labels) v = 1.0f;
        const float loss = disc.value_and_gradients(generated, real_labels, bce);
        d_generated = disc.input_gradients();
        return loss;
      });
      gen_optimizer.apply_gradients(gen.gradients(), gen.parameters());
      return 0.0f;
    };
    for (int epoch = 0; epoch < 2; ++epoch) {
      auto iterator = data::make_iterator(dist_dataset, std::uint64_t(epoch));
      while (auto batch = iterator.next()) strategy.run(train_step, *batch);
    }
    out[std::size_t(r)] = gen.get_weights();
    const auto d = disc.get_weights();
    out[std::size_t(r)].insert(out[std::size_t(r)].end(), d.begin(), d.end());
  });
  return out;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(tf_semantics)

BOOST_AUTO_TEST_CASE(guide_loop_without_a_global_batch_size_trains_like_one_worker) {
  const auto one = guide_loop(1);
  for (int p : {2, 3}) {
    const auto many = guide_loop(p);
    BOOST_TEST_CONTEXT("p = " << p) {
      BOOST_TEST(weights_close(many[0], one[0]));
      for (int r = 1; r < p; ++r) BOOST_TEST(many[std::size_t(r)] == many[0], tt::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(a_gan_style_loop_trains_two_models_under_one_strategy_like_one_worker) {
  const auto one = gan_loop(1);
  // the generator did learn through the discriminator's input gradient
  const auto initial = sequential<input<4>, dense<8, dtrain::tanh>, dense<6>>(5).get_weights();
  BOOST_TEST(!weights_close(std::vector<float>(one[0].begin(), one[0].begin() + std::ptrdiff_t(initial.size())), initial));
  for (int p : {2, 3}) {
    const auto many = gan_loop(p);
    BOOST_TEST_CONTEXT("p = " << p) {
      BOOST_TEST(weights_close(many[0], one[0]));
      for (int r = 1; r < p; ++r) BOOST_TEST(many[std::size_t(r)] == many[0], tt::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(a_standalone_metric_reads_the_global_value_on_every_worker) {
  // The saving guide's loop: a metric made beside the model, updated inside strategy.run, printed by
  // every worker after the epoch. Its result there is over every worker's batches (TF's sync-on-read).
  auto [x, y] = three_class_problem(48);
  struct reading {
    float accuracy, loss, local_accuracy;
  };
  auto loop = [&](int p) {
    std::vector<reading> out(static_cast<std::size_t>(p));
    on_workers(p, [&](auto& strategy, int r) {
      auto dist_dataset = strategy.distribute_dataset(data::from_tensor_slices(x, y) | data::batch(12));
      auto model = strategy.template make_model<net>(3);
      any_metric train_accuracy = sparse_categorical_accuracy{};
      mean train_loss{"loss"};
      const any_loss loss_fn = sparse_categorical_crossentropy{{.from_logits = true}};
      auto iterator = data::make_iterator(dist_dataset);
      while (auto batch = iterator.next())
        strategy.run(
            [&](const data::example& b) {
              const tensor predictions = model(b.first);
              train_accuracy.update_state(b.second, predictions);
              train_loss.update_state(loss_fn(b.second, predictions).data()[0], double(b.first.shape()[0]));
            },
            *batch);
      out[std::size_t(r)] = {train_accuracy.result(), train_loss.result(), train_accuracy.state().result()};
    });
    return out;
  };
  const auto one = loop(1);
  bool some_worker_differs_locally = false;
  for (int p : {2, 3}) {
    const auto many = loop(p);
    BOOST_TEST_CONTEXT("p = " << p) {
      for (const reading& w : many) {
        BOOST_TEST(w.accuracy == one[0].accuracy, tt::tolerance(1e-6f));
        BOOST_TEST(w.loss == one[0].loss, tt::tolerance(1e-5f));
        some_worker_differs_locally = some_worker_differs_locally || w.local_accuracy != one[0].accuracy;
      }
    }
  }
  BOOST_TEST(some_worker_differs_locally);  // the shards differ: a local result would fail the checks above
}

BOOST_AUTO_TEST_CASE(average_and_regularization_scaling_follow_the_strategy_in_scope) {
  // outside any strategy: one replica
  BOOST_TEST(compute_average_loss(std::vector<float>{1, 2, 3, 4}, 8) == 10.0f / 8);
  BOOST_TEST(compute_average_loss(std::vector<float>{1, 2, 3, 4}) == 10.0f / 4);
  BOOST_TEST(scale_regularization_loss(3.0f, 2) == 1.5f);
  BOOST_TEST(scale_regularization_loss(3.0f) == 3.0f);
  BOOST_CHECK_THROW(scale_regularization_loss(3.0f, -1), value_error);
  // inside strategy.run on 3 workers: 4 examples are a third of a global batch of 12
  on_workers(3, [](auto& strategy, int) {
    const float avg = strategy.run([] { return compute_average_loss(std::vector<float>{1, 2, 3, 4}); });
    WORKER_CHECK(avg == 10.0f / 12);
    WORKER_CHECK(strategy.run([] { return scale_regularization_loss(3.0f); }) == 1.0f);
    WORKER_CHECK(compute_average_loss(std::vector<float>{1, 2, 3, 4}) == 10.0f / 4);  // out of scope again
  });
}

BOOST_AUTO_TEST_CASE(a_short_last_batch_is_split_unevenly_and_averaged_over_the_global_batch) {
  // 100 examples, global batch 12: the last batch has 4 rows, 1 + 1 + 2 on 3 workers (0 + 1 + ... on 5)
  auto [x, y] = three_class_problem(100);
  auto train = [&](int p) {
    std::vector<std::vector<float>> w(static_cast<std::size_t>(p));
    std::vector<history> h(static_cast<std::size_t>(p));
    on_workers(p, [&](auto& s, int r) {
      auto model = s.template make_model<net>(3);
      compile(model);
      h[std::size_t(r)] = model.fit(data::from_tensor_slices(x, y) | data::batch(12), {.epochs = 2, .verbose = 0});
      w[std::size_t(r)] = model.get_weights();
    });
    return std::pair{w, h};
  };
  const auto [one, one_h] = train(1);
  for (int p : {3, 5}) {
    const auto [many, many_h] = train(p);
    BOOST_TEST_CONTEXT("p = " << p) {
      BOOST_TEST(weights_close(many[0], one[0]));
      BOOST_TEST(many_h[0]["loss"][1] == one_h[0]["loss"][1], tt::tolerance(1e-4f));
      BOOST_TEST(many_h[0]["accuracy"][1] == one_h[0]["accuracy"][1], tt::tolerance(1e-6f));
      for (int r = 1; r < p; ++r) BOOST_TEST(many[std::size_t(r)] == many[0], tt::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(workers_whose_pipelines_run_out_at_different_steps_end_the_epoch_together) {
  // three "files" of 24, 12 and 24 examples on 2 workers: worker 0 reads files 0 and 2 (8 batches of 6),
  // worker 1 file 1 (2 batches); both train 8 steps per epoch, worker 1 with empty batches after its 2nd
  auto [x, y] = three_class_problem(60);
  const std::vector<std::pair<std::size_t, std::size_t>> files{{0, 24}, {24, 36}, {36, 60}};
  std::vector<std::vector<float>> w(2);
  std::vector<std::int64_t> steps(2, 0);
  std::vector<std::size_t> evaluated(2, 0);
  on_workers(2, [&](auto& s, int r) {
    auto per_worker = s.distribute_datasets_from_function([&](const input_context& ctx) {
      tensor xs = zeros({0, 6}), ys = zeros({0});
      for (std::size_t f = 0; f < files.size(); ++f)
        if (int(f) % ctx.num_input_pipelines == ctx.input_pipeline_id) {
          xs = xt::concatenate(xt::xtuple(xs, xt::view(x, xt::range(files[f].first, files[f].second))));
          ys = xt::concatenate(xt::xtuple(ys, xt::view(y, xt::range(files[f].first, files[f].second))));
        }
      return data::from_tensor_slices(xs, ys) | data::batch(ctx.get_per_replica_batch_size(12));
    });
    auto model = s.template make_model<net>(3);
    compile(model);
    const history h = model.fit(per_worker, {.epochs = 2, .callbacks = {lambda_callback({.on_train_batch_end = [&](std::int64_t, const logs&) { ++steps[std::size_t(r)]; }})}, .verbose = 0});
    WORKER_CHECK(h["loss"].size() == 2u);
    // fit carries the agreement on each next batch with the step's gradients; a hand loop, whose
    // iterator agrees by itself at every batch, trains the same
    auto hand = s.template make_model<net>(3);
    compile(hand);
    for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
      auto it = per_worker.iterate(epoch);
      while (auto b = it.next()) hand.train_step(b->first, b->second, it.global_rows());
    }
    WORKER_CHECK(hand.get_weights() == model.get_weights());
    // evaluation sees every worker's examples: 48 + 12 weighted into the aggregated metrics
    const logs l = model.evaluate(per_worker, {.verbose = 0});
    WORKER_CHECK(std::isfinite(l.at("loss")));
    evaluated[std::size_t(r)] = std::size_t(model.loss_tracker().state().values[1]);
    w[std::size_t(r)] = model.get_weights();
  });
  BOOST_TEST(steps[0] == 16);  // 2 epochs of 8 steps, on both workers
  BOOST_TEST(steps[1] == 16);
  BOOST_TEST(evaluated[0] == 60u);
  BOOST_TEST(evaluated[1] == 60u);
  BOOST_TEST(w[0] == w[1], tt::per_element());
}

BOOST_AUTO_TEST_CASE(get_strategy_is_the_strategy_in_scope) {
  BOOST_TEST(get_strategy().is_default());
  auto [x, y] = three_class_problem(24);
  on_workers(3, [&](auto& s, int) {
    WORKER_CHECK(get_strategy().num_replicas_in_sync() == 1);  // not in scope yet
    WORKER_CHECK(s.run([] { return get_strategy().num_replicas_in_sync(); }) == 3);
    {
      auto scope = s.scope();
      WORKER_CHECK(has_strategy());
      WORKER_CHECK(get_strategy().reduce(reduce_op::sum, 1.0f) == 3.0f);  // library code reduces through it
    }
    WORKER_CHECK(!has_strategy());
    auto model = s.template make_model<net>(3);
    compile(model);
    int seen = 0;
    model.fit(data::from_tensor_slices(x, y) | data::batch(12),
              {.epochs = 1, .callbacks = {lambda_callback({.on_epoch_end = [&](int, const logs&) {
                 seen = get_strategy().num_replicas_in_sync();
               }})}, .verbose = 0});
    WORKER_CHECK(seen == 3);
  });
}

BOOST_AUTO_TEST_CASE(reduce_takes_tensors_with_an_axis) {
  // worker r holds r + 1 rows of [r, 10 r]: axis 0 reduces the rows of all workers
  on_workers(3, [](auto& s, int r) {
    tensor v = zeros({std::size_t(r) + 1, 2});
    for (std::size_t i = 0; i <= std::size_t(r); ++i) v(i, 0) = float(r), v(i, 1) = 10.0f * float(r);
    const tensor sum0 = s.reduce(reduce_op::sum, v, 0);
    WORKER_CHECK(sum0.dimension() == 1u);
    WORKER_CHECK(sum0(0) == 0.0f + 2 * 1 + 3 * 2);
    WORKER_CHECK(sum0(1) == 80.0f);
    const tensor mean0 = s.reduce(reduce_op::mean, v, 0);  // over 6 rows
    WORKER_CHECK(std::abs(mean0(0) - 8.0f / 6) < 1e-6f);
    // no axis: element by element across workers (same shapes)
    tensor u = zeros({2});
    u(0) = float(r), u(1) = 1.0f;
    const tensor sum = s.reduce(reduce_op::sum, u);
    WORKER_CHECK(sum(0) == 3.0f);
    WORKER_CHECK(sum(1) == 3.0f);
    WORKER_CHECK(s.reduce(reduce_op::mean, u)(0) == 1.0f);
    WORKER_CHECK(s.reduce(reduce_op::max, u)(0) == 2.0f);
    // different shapes without an axis: an error on every worker, and the workers stay in step
    WORKER_CHECK_THROW(s.reduce(reduce_op::sum, v), value_error);
    WORKER_CHECK_THROW(s.reduce(reduce_op::sum, v, 1), value_error);
    WORKER_CHECK(s.reduce(reduce_op::sum, 1.0f) == 3.0f);
  });
  default_strategy d;
  tensor v = zeros({2, 2});
  v(0, 0) = 1, v(1, 0) = 3;
  BOOST_TEST(d.reduce(reduce_op::mean, v, 0)(0) == 2.0f);
  BOOST_TEST(d.reduce(reduce_op::sum, v)(1, 0) == 3.0f);
}

BOOST_AUTO_TEST_CASE(predict_is_split_across_workers_and_gathered_in_order) {
  auto [x, y] = three_class_problem(10);
  net reference(3);  // every worker starts from the chief's weights: those of seed 3
  const tensor expected = reference.predict(x, {.verbose = 0, .batch_size = 4});
  on_workers(3, [&](auto& s, int) {
    auto model = s.template make_model<net>(3);
    // batches of 4, 4, 2: shares of 1, 1, 2 rows, then 1, 1, 2, then 0, 1, 1
    const tensor got = model.predict(data::from_tensor_slices(x) | data::batch(4), {.verbose = 0});
    WORKER_CHECK(extents_of(got) == extents_of(expected));
    WORKER_CHECK(weights_close(std::vector<float>(got.begin(), got.end()), std::vector<float>(expected.begin(), expected.end())));
  });
}

BOOST_AUTO_TEST_CASE(auto_sharding_reads_files_per_worker_when_the_pipeline_lists_files) {
  // 5 CSV files of 8 rows on 2 workers, global batch 4: AUTO takes FILE, worker 0 reads files 0, 2, 4
  // (12 batches of 2), worker 1 files 1, 3 (8 batches); both train 12 steps and end with equal weights
  dtrain_test::temp_dir t;
  auto [x, y] = three_class_problem(40);
  for (int f = 0; f < 5; ++f) {
    std::ofstream out(t.path / ("part-" + std::to_string(f) + ".csv"));
    out << "a,b,c,d,e,f,label\n";
    for (std::size_t i = std::size_t(f) * 8; i < std::size_t(f + 1) * 8; ++i) {
      for (std::size_t j = 0; j < 6; ++j) out << x(i, j) << ',';
      out << y(i) << '\n';
    }
  }
  const auto pipeline = [&](const std::string& pattern) {
    return data::list_files((t.path / pattern).string()) |
           data::interleave([](const std::string& f) { return data::csv_dataset(f); }, 1) | data::batch(4);
  };
  std::vector<std::vector<float>> w(2);
  std::vector<std::int64_t> steps(2, 0);
  on_workers(2, [&](auto& s, int r) {
    auto dist = s.distribute_dataset(pipeline("part-*.csv"));
    WORKER_CHECK((dist.policy() == data::auto_shard_policy::file));
    auto model = s.template make_model<net>(3);
    compile(model);
    model.fit(dist, {.epochs = 1, .callbacks = {lambda_callback({.on_train_batch_end = [&](std::int64_t, const logs&) { ++steps[std::size_t(r)]; }})}, .verbose = 0});
    model.evaluate(pipeline("part-*.csv"), {.verbose = 0});  // fit and evaluate shard it themselves too
    WORKER_CHECK(std::size_t(model.loss_tracker().state().values[1]) == 40u);  // every row, once
    w[std::size_t(r)] = model.get_weights();
    // one file for two workers: AUTO falls back to DATA (with a warning), FILE is refused
    auto one = s.experimental_distribute_dataset(pipeline("part-0.csv"));  // TF's name, the same member
    WORKER_CHECK((one.policy() == data::auto_shard_policy::data));
    WORKER_CHECK_THROW(s.distribute_dataset(pipeline("part-0.csv") |
                                           data::with_options({.auto_shard = data::auto_shard_policy::file})),
                      config_error);
    // a pipeline that does not read files stays DATA, without a warning
    WORKER_CHECK((s.distribute_dataset(data::from_tensor_slices(x, y) | data::batch(4)).policy() ==
                data::auto_shard_policy::data));
  });
  BOOST_TEST(steps[0] == 12);
  BOOST_TEST(steps[1] == 12);
  BOOST_TEST(w[0] == w[1], tt::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
