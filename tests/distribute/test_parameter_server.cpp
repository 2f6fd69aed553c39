// Parameter server training over real loopback sockets: the coordinator, the workers and the ps tasks
// run as threads of this process, each task with its own sockets (the ps tasks as bare servers: the
// strategy's own ps path ends its process, which the example's test runs as separate processes).
#include "support/ps_job.hpp"

using namespace dtrain;
namespace tt = boost::test_tools;

namespace {
using net = dtrain_test::small_net;
using dtrain_test::compile;
using dtrain_test::dataset;
using dtrain_test::job;
using dtrain_test::three_class_problem;
}  // namespace

BOOST_AUTO_TEST_SUITE(parameter_server)

// The partitioners' arithmetic, on the examples of TF's documentation of each.
BOOST_AUTO_TEST_CASE(partitioners_follow_tf) {
  const std::vector<std::size_t> six{6, 1}, ten{10, 3};
  BOOST_TEST(fixed_shards_partitioner{2}(ten, 4) == 2u);
  BOOST_TEST(fixed_shards_partitioner{20}(ten, 4) == 10u);
  BOOST_TEST((min_size_partitioner{4, 2})(six, 4) == 2u);
  BOOST_TEST((min_size_partitioner{4, 10})(six, 4) == 6u);
  BOOST_TEST((min_size_partitioner{})(six, 4) == 1u);
  BOOST_TEST((max_size_partitioner{4})(six, 4) == 6u);
  BOOST_TEST((max_size_partitioner{4, 2})(six, 4) == 2u);
  BOOST_TEST((max_size_partitioner{1024})(six, 4) == 1u);
  BOOST_CHECK_THROW(max_size_partitioner{}(six, 4), value_error);
}

// Shards of n rows cut into p: the first n % p get one row more; shards go round robin on from the
// previous variable's last; every value of the buffer is in exactly one region.
BOOST_AUTO_TEST_CASE(placement_covers_the_buffer_once) {
  const std::vector<ps::variable> vars{{"a/kernel", {5, 3}, 0, 15}, {"a/bias", {3}, 15, 3}, {"b/kernel", {3, 2}, 18, 6}};
  for (std::size_t tasks : {1u, 2u, 3u}) {
    const auto p = ps::place(vars, tasks, fixed_shards_partitioner{2});
    BOOST_TEST_REQUIRE(p.tasks.size() == tasks);
    std::vector<int> seen(24, 0);
    for (const auto& t : p.tasks)
      for (const auto& r : t)
        for (std::size_t k = r.offset; k < r.offset + r.size; ++k) ++seen[k];
    BOOST_TEST(seen == std::vector<int>(24, 1), tt::per_element());
    BOOST_TEST(p.tasks[0][0].size == 9u);  // a/kernel's rows 0-2
  }
  const auto two = ps::place(vars, 2, {});  // whole variables alternate
  BOOST_TEST(two.tasks[0].size() == 2u);
  BOOST_TEST(two.tasks[0][1].variable == "b/kernel");
  BOOST_TEST(two.tasks[1][0].variable == "a/bias");
  BOOST_CHECK_THROW(ps::place(vars, 0, {}), config_error);
}

// The values the coordinator sends, split across 1, 2 and 3 ps tasks by each partitioner, come back
// whole: a worker pulls exactly the coordinator's weights.
BOOST_AUTO_TEST_CASE(variables_split_and_reassemble) {
  const std::vector<variable_partitioner> partitioners{{}, fixed_shards_partitioner{3}, min_size_partitioner{16, 4},
                                                       max_size_partitioner{40}};
  for (int tasks : {1, 2, 3})
    for (const auto& partitioner : partitioners) {
      const job j(1, tasks);
      std::vector<float> sent, pulled;
      j.run(
          [&](parameter_server_strategy& s) {
            auto model = s.make_model<net>(11);
            compile(model);
            sent = model.get_weights();
            model.fit(dataset(), {.epochs = 0, .steps_per_epoch = 1, .verbose = 0});  // initialises, trains nothing
          },
          [&](parameter_server_strategy& s, int) {
            auto model = s.make_model<net>(99);  // other weights: the pull replaces them
            compile(model);
            model.fit(dataset(), {.epochs = 1, .steps_per_epoch = 1, .verbose = 0});
            pulled = model.get_weights();
          },
          partitioner);
      BOOST_TEST(pulled == sent, tt::per_element());
    }
}

// One worker runs the steps one after another: the ps tasks' updates are then the single-worker
// training's, bit for bit (the same batches, the same Adam arithmetic on the same values).
BOOST_AUTO_TEST_CASE(one_worker_equals_single_worker_training) {
  net single(3);
  compile(single);
  single.fit(dataset(), {.epochs = 2, .steps_per_epoch = 5, .verbose = 0});
  for (int tasks : {1, 2}) {
    const job j(1, tasks);
    std::vector<float> coordinator, worker;
    std::vector<std::uint64_t> applied;
    history hist;
    j.run(
        [&](parameter_server_strategy& s) {
          auto model = s.make_model<net>(3);
          compile(model);
          hist = model.fit(dataset(), {.epochs = 2, .steps_per_epoch = 5, .verbose = 0});
          coordinator = model.get_weights();
          applied = s.applied_steps();
        },
        [&](parameter_server_strategy& s, int) {
          auto model = s.make_model<net>(3);
          compile(model);
          model.fit(dataset(), {.epochs = 2, .steps_per_epoch = 5, .verbose = 0});
          worker = model.get_weights();
        });
    BOOST_TEST(applied == std::vector<std::uint64_t>(std::size_t(tasks), 10u), tt::per_element());
    BOOST_TEST(coordinator == single.get_weights(), tt::per_element());
    BOOST_TEST(worker == coordinator, tt::per_element());
    BOOST_TEST(hist.history.at("loss").size() == 2u);
  }
}

// Several workers train asynchronously: every scheduled step is applied once on every ps task, the
// loss falls, and every task ends with the ps tasks' final weights.
BOOST_AUTO_TEST_CASE(several_workers_train) {
  for (int workers : {2, 3}) {
    const job j(workers, 2);
    std::vector<std::vector<float>> weights(std::size_t(workers + 1));
    std::vector<std::uint64_t> applied;
    history hist;
    j.run(
        [&](parameter_server_strategy& s) {
          auto model = s.make_model<net>(3);
          compile(model);
          hist = model.fit(dataset(), {.epochs = 4, .steps_per_epoch = 12, .verbose = 0});
          applied = s.applied_steps();
          weights[0] = model.get_weights();
        },
        [&](parameter_server_strategy& s, int i) {
          auto model = s.make_model<net>(3);
          compile(model);
          model.fit(dataset(), {.epochs = 4, .steps_per_epoch = 12, .verbose = 0});
          weights[std::size_t(i + 1)] = model.get_weights();
        },
        min_size_partitioner{64, 2});
    BOOST_TEST(applied == std::vector<std::uint64_t>(2, 48u), tt::per_element());
    const auto& loss = hist.history.at("loss");
    BOOST_TEST(loss.back() < loss.front());
    for (int i = 1; i <= workers; ++i) BOOST_TEST(weights[std::size_t(i)] == weights[0], tt::per_element());
  }
}

// A worker that fails mid-epoch: its step runs on another worker, training ends, and every step was
// applied exactly once.
BOOST_AUTO_TEST_CASE(a_failed_workers_step_runs_elsewhere) {
  const job j(2, 1);
  history hist;
  std::vector<std::uint64_t> applied;
  j.run(
      [&](parameter_server_strategy& s) {
        auto model = s.make_model<net>(3);
        compile(model);
        hist = model.fit(dataset(), {.epochs = 2, .steps_per_epoch = 10, .verbose = 0});
        applied = s.applied_steps();
      },
      [&](parameter_server_strategy& s, int i) {
        auto model = s.make_model<net>(3);
        compile(model);
        int batches = 0;
        auto ds = dataset() | data::map([&](data::example e) {
                    if (i == 1 && ++batches == 1) throw io_error("worker 1's disk failed");  // its first step
                    return e;
                  });
        if (i == 1) WORKER_CHECK_THROW(model.fit(ds, {.epochs = 2, .steps_per_epoch = 10, .verbose = 0}), io_error);
        else model.fit(ds, {.epochs = 2, .steps_per_epoch = 10, .verbose = 0});
      });
  BOOST_TEST(applied == std::vector<std::uint64_t>{20u}, tt::per_element());
  BOOST_TEST(hist.history.at("loss").size() == 2u);
}

// When every worker has failed, the coordinator says so instead of waiting or calling the data short.
BOOST_AUTO_TEST_CASE(the_coordinator_stops_when_every_worker_failed) {
  const job j(1, 1);
  BOOST_CHECK_EXCEPTION(
      j.run(
          [&](parameter_server_strategy& s) {
            auto model = s.make_model<net>(3);
            compile(model);
            model.fit(dataset(), {.epochs = 2, .steps_per_epoch = 5, .verbose = 0});
          },
          [&](parameter_server_strategy& s, int) {
            auto model = s.make_model<net>(3);
            compile(model);
            auto failing = dataset() | data::map([](data::example) -> data::example { throw io_error("no data"); });
            WORKER_CHECK_THROW(model.fit(failing, {.epochs = 2, .steps_per_epoch = 5, .verbose = 0}), io_error);
          }),
      comm_error, [](const comm_error& e) { return std::string(e.what()).find("every worker failed") != std::string::npos; });
}

// A failed worker whose program starts again rejoins within the epoch (one epoch here: the coordinator
// looks for failed workers every second) and trains again; every step is still applied once.
BOOST_AUTO_TEST_CASE(a_failed_worker_rejoins_within_the_epoch) {
  const job j(2, 1);
  std::vector<std::uint64_t> applied;
  std::atomic<int> after_rejoining{0};
  j.run(
      [&](parameter_server_strategy& s) {
        auto model = s.make_model<net>(3);
        compile(model);
        model.fit(dataset(), {.epochs = 1, .steps_per_epoch = 600, .verbose = 0});
        applied = s.applied_steps();
      },
      [&](parameter_server_strategy& s, int i) {
        auto slow = [](data::example e) {  // steps of a few milliseconds: the epoch outlasts a restart
          std::this_thread::sleep_for(std::chrono::milliseconds(3));
          return e;
        };
        auto model = s.make_model<net>(3);
        compile(model);
        if (i == 0) {
          model.fit(dataset() | data::map(slow), {.epochs = 1, .steps_per_epoch = 600, .verbose = 0});
          return;
        }
        int batches = 0;
        auto failing = dataset() | data::map([&](data::example e) {
                         if (++batches == 3) throw io_error("worker 1's disk failed");
                         return slow(std::move(e));
                       });
        WORKER_CHECK_THROW(model.fit(failing, {.epochs = 1, .steps_per_epoch = 600, .verbose = 0}), io_error);
        // the program starts again: a new strategy (new connections) for the same task
        parameter_server_strategy again(j.options(), j.task("worker", 1));
        auto model2 = again.make_model<net>(3);
        compile(model2);
        model2.fit(dataset() | data::map([&](data::example e) {
                     ++after_rejoining;
                     return slow(std::move(e));
                   }),
                   {.epochs = 1, .steps_per_epoch = 600, .verbose = 0});
      });
  BOOST_TEST(applied == std::vector<std::uint64_t>{600u}, tt::per_element());
  BOOST_TEST(after_rejoining.load() > 0);
}

// TF's dataset function: each worker builds its own pipeline from its input context (pipeline i of W)
// and trains on all of it.
BOOST_AUTO_TEST_CASE(workers_build_their_pipelines_from_a_dataset_function) {
  const job j(2, 1);
  std::vector<input_context> seen(2);
  std::vector<std::uint64_t> applied;
  j.run(
      [&](parameter_server_strategy& s) {
        auto model = s.make_model<net>(3);
        compile(model);
        model.fit(dataset(), {.epochs = 2, .steps_per_epoch = 6, .verbose = 0});
        applied = s.applied_steps();
      },
      [&](parameter_server_strategy& s, int i) {
        auto model = s.make_model<net>(3);
        compile(model);
        auto [x, y] = three_class_problem(96);
        auto per_worker = s.distribute_datasets_from_function([&](const input_context& ctx) {
          seen[std::size_t(i)] = ctx;
          return data::from_tensor_slices(x, y) | data::shard(ctx.num_input_pipelines, ctx.input_pipeline_id) |
                 data::batch(12) | data::repeat();
        });
        model.fit(per_worker, {.epochs = 2, .steps_per_epoch = 6, .verbose = 0});
      });
  BOOST_TEST(applied == std::vector<std::uint64_t>{12u}, tt::per_element());
  for (int i : {0, 1}) {
    BOOST_TEST(seen[std::size_t(i)].num_input_pipelines == 2);
    BOOST_TEST(seen[std::size_t(i)].input_pipeline_id == i);
  }
}

// The coordinator's backups hold the ps tasks' variables and optimizer state: a job that failed after
// its second epoch and restarts (every task anew) resumes at its third, and ends where a job that never
// failed ends, bit for bit (one worker; its data repeat every epoch, as a restarted worker's start over).
BOOST_AUTO_TEST_CASE(a_restarted_job_resumes_from_its_backup) {
  struct fail_at_epoch_2 : callback {
    void on_epoch_begin(int epoch, const logs&) override {
      if (epoch == 2) throw io_error("the coordinator failed");
    }
  };
  auto [x, y] = three_class_problem(96);
  const auto ds = data::from_tensor_slices(x, y) | data::batch(12) | data::repeat();
  const dtrain_test::temp_dir dir;
  auto train = [&](int epochs, callback_list cbs) {
    const job j(1, 2);
    std::vector<float> weights;
    std::vector<std::uint64_t> applied;
    try {
      j.run(
          [&](parameter_server_strategy& s) {
            auto model = s.make_model<net>(3);
            compile(model);
            model.fit(ds, {.epochs = epochs, .steps_per_epoch = 8, .callbacks = cbs, .verbose = 0});
            weights = model.get_weights();
            applied = s.applied_steps();
          },
          [&](parameter_server_strategy& s, int) {
            auto model = s.make_model<net>(3);
            compile(model);
            model.fit(ds, {.epochs = epochs, .steps_per_epoch = 8, .verbose = 0});
          });
    } catch (const io_error&) {
    } catch (const comm_error&) {  // the other tasks of the failed job
    }
    return std::pair{weights, applied};
  };
  const auto whole = train(4, {});
  BOOST_TEST(whole.second == std::vector<std::uint64_t>(2, 32u), tt::per_element());
  const auto failed = train(4, {backup_and_restore({.backup_dir = dir.path}), fail_at_epoch_2{}});
  BOOST_TEST(failed.first.empty());  // it failed
  const auto resumed = train(4, {backup_and_restore({.backup_dir = dir.path})});
  BOOST_TEST(resumed.second == std::vector<std::uint64_t>(2, 16u), tt::per_element());  // epochs 3 and 4 only
  BOOST_TEST(resumed.first == whole.first, tt::per_element());
}

// A task without the job token cannot join: the ps task refuses it, naming why.
BOOST_AUTO_TEST_CASE(a_stranger_without_the_token_is_refused) {
  job j(1, 1);
  j.token = "0123456789abcdef0123456789abcdef";
  std::string why;
  const auto errs = dtrain_test::run_threads(2, [&](int t) {
    if (t == 0) {
      ps::server s(j.ps_identity(0), j.spec.jobs.at("ps")[0], [](const std::string&) {});
      s.join(std::chrono::seconds(2));  // nobody it admits comes
    } else {
      auto id = j.ps_identity(0);
      id.me = 1, id.token = "";
      try {
        ps::connect(id, 2, j.spec.jobs.at("ps")[0], ps::clock::now() + std::chrono::seconds(5));
      } catch (const comm_error& e) {
        why = e.what();
      }
    }
  });
  BOOST_TEST(why.find("job token") != std::string::npos, why);
  BOOST_TEST_REQUIRE(bool(errs[0]));  // the ps task saw no coordinator
  BOOST_TEST(dtrain_test::message(errs[0]).find("did not connect") != std::string::npos);
}

// A message that does not fit what the receiver expects is a protocol error naming the peer, read no
// further than its header: a wrong magic, a length over the bound, a payload whose checksum fails.
BOOST_AUTO_TEST_CASE(garbage_messages_are_protocol_errors) {
  auto check = [](ps::message_header h, std::string payload, std::uint64_t bound, const std::string& want) {
    asio::io_context io;
    asio::ip::tcp::acceptor a(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    asio::ip::tcp::socket raw(io);
    raw.connect(a.local_endpoint());
    auto io2 = std::make_unique<asio::io_context>();
    asio::ip::tcp::socket s(*io2);
    a.accept(s);
    asio::write(raw, asio::buffer(&h, sizeof h));
    asio::write(raw, asio::buffer(payload));
    raw.shutdown(asio::ip::tcp::socket::shutdown_send);
    ps::channel c(std::move(io2), std::move(s), "worker:7");
    try {
      const auto got = c.receive(bound);
      std::vector<char> out(got.length);
      c.read_payload(got, {asio::buffer(out)});
      BOOST_ERROR("no error for " + want);
    } catch (const comm_error& e) {
      BOOST_TEST(std::string(e.what()).find("worker:7") != std::string::npos, e.what());
      BOOST_TEST(std::string(e.what()).find(want) != std::string::npos, e.what());
    }
  };
  const std::string eight = "12345678";
  ps::message_header h{.kind = std::uint32_t(ps::message::values), .length = 8,
                       .checksum = dtrain::detail::crc32c(eight.data(), eight.size())};
  auto bad_magic = h;
  bad_magic.magic = 0x12345678;
  check(bad_magic, eight, 8, "not a dtrain parameter server message");
  auto too_long = h;
  too_long.length = std::uint64_t(1) << 40;
  check(too_long, eight, 8, "at most 8 expected");
  auto corrupted = h;
  corrupted.checksum ^= 1;
  check(corrupted, eight, 8, "checksum does not match");
  check(h, "1234", 8, "lost worker:7");  // the peer closed in the middle of the payload
}

// With TLS (keyed by the job token) training is the same, bit for bit; a task without TLS is refused
// by name, and TLS without a token is a config error.
BOOST_AUTO_TEST_CASE(tls_trains_alike_and_refuses_plain_tasks) {
  auto train = [](bool tls) {
    job j(1, 2);
    j.token = "0123456789abcdef0123456789abcdef";
    j.tls = tls;
    std::vector<float> weights;
    j.run(
        [&](parameter_server_strategy& s) {
          auto model = s.make_model<net>(3);
          compile(model);
          model.fit(dataset(), {.epochs = 2, .steps_per_epoch = 5, .verbose = 0});
          weights = model.get_weights();
        },
        [&](parameter_server_strategy& s, int) {
          auto model = s.make_model<net>(3);
          compile(model);
          model.fit(dataset(), {.epochs = 2, .steps_per_epoch = 5, .verbose = 0});
        });
    return weights;
  };
  const auto plain = train(false), encrypted = train(true);
  BOOST_TEST(!encrypted.empty());
  BOOST_TEST(encrypted == plain, tt::per_element());

  job j(1, 1);
  j.token = "0123456789abcdef0123456789abcdef";
  j.tls = true;
  std::string why;
  dtrain_test::run_threads(2, [&](int t) {
    if (t == 0) {
      ps::server s(j.ps_identity(0), j.spec.jobs.at("ps")[0], [](const std::string&) {});
      try {
        s.join(std::chrono::seconds(2));  // nobody it admits comes
      } catch (const comm_error&) {
      }
    } else {
      auto id = j.ps_identity(0);
      id.me = 1, id.tls = nullptr;
      try {
        ps::connect(id, 2, j.spec.jobs.at("ps")[0], ps::clock::now() + std::chrono::seconds(5));
      } catch (const comm_error& e) {
        why = e.what();
      }
    }
  });
  BOOST_TEST(why.find("encrypts the data plane and this worker does not") != std::string::npos, why);
  BOOST_CHECK_EXCEPTION(parameter_server_strategy({.job_token = "", .tls = true}, j.task("worker", 0)), config_error,
                        [](const config_error& e) { return std::string(e.what()).find("keyed by the job token") != std::string::npos; });
}

// A ps task logs and drops a client that sends garbage instead of the handshake, and serves on.
BOOST_AUTO_TEST_CASE(a_ps_task_drops_a_garbage_client) {
  const job j(1, 1);
  std::mutex m;
  std::vector<std::string> lines;
  const auto errs = dtrain_test::run_threads(2, [&](int t) {
    if (t == 0) {
      ps::server s(j.ps_identity(0), j.spec.jobs.at("ps")[0], [&](const std::string& l) {
        std::lock_guard g(m);
        lines.push_back(l);
      });
      s.join(std::chrono::seconds(20));
      return;
    }
    asio::io_context io;
    auto raw = dtrain_test::connect_when_listening(io, j.spec.jobs.at("ps")[0]);
    const std::string garbage(48, 'x');
    asio::write(raw, asio::buffer(garbage));
    auto id = j.ps_identity(0);
    id.me = 0;  // then the coordinator ends the job
    auto c = ps::connect(id, 2, j.spec.jobs.at("ps")[0], ps::clock::now() + std::chrono::seconds(5));
    c.send(ps::message::shutdown);
    c.receive_text(ps::message::ok, 0);
  });
  for (const auto& e : errs)
    if (e) BOOST_ERROR(dtrain_test::message(e));
  BOOST_TEST_REQUIRE(lines.size() == 1u);
  BOOST_TEST(lines[0].find("wrong magic") != std::string::npos, lines[0]);
}

BOOST_AUTO_TEST_CASE(a_cluster_without_ps_tasks_is_refused) {
  cluster_spec spec;
  spec.jobs["chief"] = {"127.0.0.1:1"};
  spec.jobs["worker"] = {"127.0.0.1:2"};
  BOOST_CHECK_EXCEPTION(parameter_server_strategy({}, simple_cluster_resolver{spec, {"chief", 0}}.resolve()), config_error,
                        [](const config_error& e) { return std::string(e.what()).find("ps task") != std::string::npos; });
}

BOOST_AUTO_TEST_SUITE_END()
