// cluster_coordinator over real loopback sockets (the tasks as threads, support/ps_job.hpp): the TF
// guide's custom loop. With one worker it equals the same loop on one process, bit for bit; with several
// every scheduled function runs once (counted on the ps tasks and in the strategy's metrics); a worker
// that fails mid-function has it run elsewhere, and one that starts again rejoins; a function's error is
// raised by join on every task; fetch and done give every task the coordinator's answer.
#include <atomic>

#include "support/ps_job.hpp"

#include <dtrain/distribute/cluster_coordinator.hpp>

using namespace dtrain;
namespace tt = boost::test_tools;

namespace {
using net = dtrain_test::small_net;
using dtrain_test::dataset;
using dtrain_test::job;

const any_loss loss_object = sparse_categorical_crossentropy{{.from_logits = true, .reduction = reduction::none}};

/// What a task's custom loop saw.
struct seen {
  std::vector<float> weights;
  std::vector<float> epoch_loss;  // the strategy's loss metric after each epoch's join
  double functions = 0;           // how many function runs the coordinator's metric counted
  float fetched = 0;
  bool done = false;
  std::vector<std::uint64_t> applied;
};

/// The guide's custom loop, run by every task: `epochs` x (`steps` scheduled steps, join), then a last
/// step whose loss is fetched. `before_step(strategy, worker)` runs at the start of each step function.
template <class Hook>
seen custom_loop(parameter_server_strategy& s, int epochs, int steps, Hook before_step) {
  auto model = s.make_model<net>(3);
  auto& optimizer = s.make_optimizer(adam{{.learning_rate = 0.01f}});
  auto& loss_metric = s.make_metric(mean{"loss"});
  auto& accuracy = s.make_metric(sparse_categorical_accuracy{});
  cluster_coordinator coordinator(s);
  auto per_worker_dataset = coordinator.create_per_worker_dataset([](const input_context& ctx) {
    return dataset() | data::shard(ctx.num_input_pipelines, ctx.input_pipeline_id);
  });
  auto per_worker_iterator = per_worker_dataset.make_iterator();
  auto step_fn = [&](decltype(per_worker_iterator)& iterator) {
    before_step(s, s.worker_index());
    auto [x, y] = *iterator.next();
    const float loss = model.value_and_gradients(x, y, loss_object, 12);
    optimizer.apply_gradients(model.gradients(), model.parameters());
    loss_metric.update_state(loss);
    accuracy.update_state(y, model(x));
    return loss;
  };
  seen r;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    loss_metric.reset_state();
    for (int k = 0; k < steps; ++k) coordinator.schedule(step_fn, per_worker_iterator);
    coordinator.join();
    r.epoch_loss.push_back(loss_metric.result());
    r.functions += loss_metric.state().values[1];
  }
  auto last = coordinator.schedule(step_fn, per_worker_iterator);
  r.fetched = last.fetch();
  r.done = coordinator.done();
  coordinator.join();
  if (s.is_chief()) r.weights = model.get_weights(), r.applied = s.applied_steps();
  return r;
}
auto no_hook = [](parameter_server_strategy&, int) {};
}  // namespace

BOOST_AUTO_TEST_SUITE(cluster_coordinator_suite)

BOOST_AUTO_TEST_CASE(one_worker_equals_the_loop_on_one_process) {
  // the same loop without a strategy: the same batches, gradients and Adam steps
  net single(3);
  any_optimizer optimizer = adam{{.learning_rate = 0.01f}};
  auto it = data::make_iterator(dataset());
  float last = 0;
  for (int k = 0; k < 2 * 5 + 1; ++k) {
    auto [x, y] = *it.next();
    last = single.value_and_gradients(x, y, loss_object, 12);
    optimizer.apply_gradients(single.gradients(), single.parameters());
  }
  for (int tasks : {1, 2}) {
    BOOST_TEST_CONTEXT("ps tasks = " << tasks) {
      const job j(1, tasks);
      seen chief, worker;
      j.run([&](parameter_server_strategy& s) { chief = custom_loop(s, 2, 5, no_hook); },
            [&](parameter_server_strategy& s, int) { worker = custom_loop(s, 2, 5, no_hook); });
      BOOST_TEST(chief.weights == single.get_weights(), tt::per_element());
      BOOST_TEST(chief.applied == std::vector<std::uint64_t>(std::size_t(tasks), 11u), tt::per_element());
      BOOST_TEST(chief.fetched == last);
      BOOST_TEST(chief.functions == 10.0);
      BOOST_TEST(chief.done);
      // the worker's join, fetch and done returned the coordinator's answers
      BOOST_TEST(worker.fetched == chief.fetched);
      BOOST_TEST(worker.done);
    }
  }
}

BOOST_AUTO_TEST_CASE(every_function_runs_once_on_several_workers) {
  for (int workers : {2, 3}) {
    BOOST_TEST_CONTEXT("workers = " << workers) {
      const job j(workers, 2);
      seen chief;
      j.run([&](parameter_server_strategy& s) { chief = custom_loop(s, 4, 12, no_hook); },
            [&](parameter_server_strategy& s, int) { custom_loop(s, 4, 12, no_hook); }, min_size_partitioner{64, 2});
      BOOST_TEST(chief.applied == std::vector<std::uint64_t>(2, 49u), tt::per_element());
      BOOST_TEST(chief.functions == 48.0);
      BOOST_TEST(chief.epoch_loss.back() < chief.epoch_loss.front());
    }
  }
}

BOOST_AUTO_TEST_CASE(a_failed_workers_function_runs_elsewhere) {
  // worker 1 dies in its first function after pushing its update: the function runs on worker 0, whose
  // push of the same update the ps task does not apply again; the dead worker's metric totals never count
  const job j(2, 1);
  seen chief;
  j.run([&](parameter_server_strategy& s) { chief = custom_loop(s, 2, 6, no_hook); },
        [&](parameter_server_strategy& s, int i) {
          bool died = false;
          auto die_once = [&](parameter_server_strategy& st, int w) {
            if (w == 1 && !died) {
              died = true;
              st.coordinator().close();  // as if its process were killed mid-function
            }
          };
          if (i == 1) WORKER_CHECK_THROW(custom_loop(s, 2, 6, die_once), comm_error);
          else custom_loop(s, 2, 6, no_hook);
        });
  BOOST_TEST(chief.applied == std::vector<std::uint64_t>{13u}, tt::per_element());
  BOOST_TEST(chief.functions == 12.0);
}

BOOST_AUTO_TEST_CASE(a_failed_worker_rejoins) {
  // worker 1 fails in epoch 1, then its program starts again (a new strategy, listening again): the
  // coordinator connects to it at a join and it runs functions again; every function still runs once
  const job j(2, 1);
  seen chief;
  std::atomic<int> after_rejoining{0};
  j.run([&](parameter_server_strategy& s) { chief = custom_loop(s, 8, 10, [](auto&, int) {
                                              std::this_thread::sleep_for(std::chrono::milliseconds(2));
                                            }); },
        [&](parameter_server_strategy& s, int i) {
          if (i == 0) return void(custom_loop(s, 8, 10, [](auto&, int) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); }));
          int runs = 0;
          WORKER_CHECK_THROW(custom_loop(s, 8, 10,
                                         [&](parameter_server_strategy& st, int) {
                                           if (++runs == 3) st.coordinator().close();
                                         }),
                             comm_error);
          parameter_server_strategy again(j.options(), j.task("worker", 1));
          custom_loop(again, 8, 10, [&](auto&, int) {
            ++after_rejoining;
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
          });
        });
  BOOST_TEST(chief.applied == std::vector<std::uint64_t>{81u}, tt::per_element());
  BOOST_TEST(chief.functions == 80.0);
  BOOST_TEST(after_rejoining.load() > 0);
}

BOOST_AUTO_TEST_CASE(a_functions_error_is_raised_by_join_on_every_task) {
  const job j(2, 1);
  std::vector<std::string> errors(3);
  std::atomic<int> runs{0}, thrower{-1};  // the second function run, on whichever worker the coordinator sent it to
  j.run(
      [&](parameter_server_strategy& s) {
        try {
          custom_loop(s, 2, 4, no_hook);
        } catch (const dtrain::error& e) {
          errors[0] = e.what();
        }
      },
      [&](parameter_server_strategy& s, int i) {
        try {
          custom_loop(s, 2, 4, [&](auto&, int) {
            if (++runs == 2) {
              thrower = i;
              throw value_error("a bad batch");
            }
          });
        } catch (const dtrain::error& e) {
          errors[std::size_t(i + 1)] = e.what();
        }
      });
  BOOST_TEST_REQUIRE(thrower.load() >= 0);
  const std::string want = "a scheduled function failed on worker " + std::to_string(thrower.load()) + ": a bad batch";
  for (const auto& e : errors) BOOST_TEST(e.find(want) != std::string::npos, e);
}

BOOST_AUTO_TEST_CASE(misuse_is_a_clear_error) {
  const job j(1, 1);
  std::string no_optimizer, outside, clipnorm;
  j.run(
      [&](parameter_server_strategy& s) {
        auto model = s.make_model<net>(3);
        cluster_coordinator c(s);
        no_optimizer = dtrain_test::error_of([&] { c.schedule([] {}); });
        // each ps task holds part of the gradients: no norm to clip by
        clipnorm = dtrain_test::error_of([&] { s.make_optimizer(sgd{{.global_clipnorm = 1.0f}}); });
        auto& optimizer = s.make_optimizer(sgd{});
        outside = dtrain_test::error_of([&] { optimizer.apply_gradients(model.gradients(), model.parameters()); });
      },
      [&](parameter_server_strategy& s, int) {
        auto model = s.make_model<net>(3);
        cluster_coordinator c(s);
      });
  BOOST_TEST(no_optimizer.find("make_optimizer") != std::string::npos, no_optimizer);
  BOOST_TEST(outside.find("inside a function scheduled") != std::string::npos, outside);
  BOOST_TEST(clipnorm.find("global_clipnorm are not supported under parameter_server_strategy") != std::string::npos, clipnorm);
}

BOOST_AUTO_TEST_SUITE_END()
