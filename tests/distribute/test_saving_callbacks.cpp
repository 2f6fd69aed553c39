// The callbacks that save or stop, on real loopback rings of 2 and 3 workers: the batch logs they see
// are the global ones on every worker, every decision that leads to a collective is the same on every
// worker, only the chief writes, and a backup written by N workers resumes on M when the global batch is
// the same.
#include <csignal>
#include <filesystem>
#include <map>
#include <optional>

#include "support/helpers.hpp"
#include "support/loopback.hpp"
#include "support/mirrored.hpp"

using namespace dtrain;
namespace fs = std::filesystem;
namespace tt = boost::test_tools;
using dtrain_test::temp_dir;

namespace {
using net = dtrain_test::small_net;

struct outcome {
  std::vector<float> weights;
  history hist;
  std::int64_t iterations = 0;
  float learning_rate = 0.0f;
};

/// Throws after `limit` batches: a crash of every worker at the same step.
struct crash_after : callback {
  std::int64_t limit, seen = 0;
  explicit crash_after(std::int64_t l) : limit(l) {}
  void on_train_batch_end(std::int64_t, const logs&) override {
    if (++seen == limit) throw std::runtime_error("simulated crash");
  }
};

/// Trains `net` on p workers, global batch `global` (DATA sharding: each replica its rows of every
/// batch), `epochs` epochs of 48 examples; `callbacks(rank)` gives
/// each worker its callbacks. Returns each worker's outcome.
template <class Callbacks>
std::vector<outcome> train(int p, Callbacks callbacks, int epochs = 4, std::size_t global = 12,
                           std::optional<tensor> features = std::nullopt,
                           communication_options comm = {.timeout = std::chrono::seconds(20),
                                                         .connect_timeout = std::chrono::seconds(20)}) {
  auto [x, y] = dtrain_test::three_class_problem(48);
  if (features) x = *features;
  std::vector<outcome> out(std::size_t(p), outcome{});
  dtrain_test::on_workers(p, [&](auto& s, int r) {
    auto model = s.template make_model<net>(3 + std::uint64_t(r));
    model.compile({.optimizer = adam{{.learning_rate = 0.01f}},
                   .loss = sparse_categorical_crossentropy{{.from_logits = true}},
                   .metrics = {accuracy{}}});
    fit_options o{.epochs = epochs, .verbose = 0};
    o.callbacks = callback_list(callbacks(r));
    auto& mine = out[std::size_t(r)];
    mine.hist = model.fit(data::from_tensor_slices(x, y) | data::batch(global), o);
    mine.weights = model.get_weights();
    mine.iterations = model.optimizer().iterations();
    mine.learning_rate = model.optimizer().learning_rate();
  }, comm);
  return out;
}

void same_on_every_worker(const std::vector<outcome>& out) {
  for (std::size_t r = 1; r < out.size(); ++r) {
    BOOST_TEST_CONTEXT("worker " << r) {
      BOOST_TEST(out[r].weights == out[0].weights, tt::per_element());
      BOOST_TEST(out[r].hist.history == out[0].hist.history);
      BOOST_TEST(out[r].iterations == out[0].iterations);
      BOOST_TEST(out[r].learning_rate == out[0].learning_rate);
    }
  }
}
}  // namespace

BOOST_AUTO_TEST_SUITE(saving_callbacks)

BOOST_AUTO_TEST_CASE(a_chief_that_saves_for_longer_than_the_heartbeat_timeout_is_waited_for) {
  // No operation timeout (the default, as in TF) and a heartbeat timeout of 250 ms: the chief spends
  // 1.5 s at the end of each epoch (a large save) while the others wait in the next collective. The
  // job ends as it does without the pause, on every worker.
  BOOST_TEST(communication_options{}.timeout.count() == 0);  // by default no bound on slowness, as in TF
  struct slow_save : callback {
    void on_epoch_end(int, const logs&) override { std::this_thread::sleep_for(std::chrono::milliseconds(1500)); }
  };
  const auto quick = train(3, [](int) { return std::vector<callback_ref>{}; }, 2);
  const auto slow = train(
      3, [](int r) { return r == 0 ? std::vector<callback_ref>{slow_save{}} : std::vector<callback_ref>{}; }, 2, 12,
      std::nullopt, {.connect_timeout = std::chrono::seconds(20), .heartbeat_timeout = std::chrono::milliseconds(250)});
  same_on_every_worker(slow);
  BOOST_TEST(slow[0].weights == quick[0].weights, tt::per_element());
  BOOST_TEST(slow[0].iterations == 8);
}

BOOST_AUTO_TEST_CASE(batch_logs_are_the_global_running_values_on_every_worker) {
  // tf.keras aggregates the per-batch logs every step: what on_train_batch_end (and so the progress bar,
  // TensorBoard's batch scalars, model_checkpoint's batch decisions) sees on every worker is the running
  // loss and accuracy over all workers' rows, the values one worker with the global batch logs
  struct recorder : callback {
    std::vector<float>* seen;
    explicit recorder(std::vector<float>* s) : seen(s) {}
    void on_train_batch_end(std::int64_t, const logs& l) override {
      seen->push_back(l["loss"]);
      seen->push_back(l["accuracy"]);
    }
  };
  std::vector<std::vector<float>> one(1);
  train(1, [&](int) { return std::vector<callback_ref>{recorder(&one[0])}; }, 2);
  BOOST_REQUIRE_EQUAL(one[0].size(), 2u * 8u);  // 2 epochs of 4 batches
  for (int p : {2, 3}) {
    std::vector<std::vector<float>> seen(static_cast<std::size_t>(p));
    train(p, [&](int r) { return std::vector<callback_ref>{recorder(&seen[std::size_t(r)])}; }, 2);
    BOOST_TEST_CONTEXT("p = " << p) {
      for (int r = 0; r < p; ++r) {
        BOOST_TEST(seen[std::size_t(r)] == seen[0], tt::per_element());
        BOOST_TEST(dtrain_test::weights_close(seen[std::size_t(r)], one[0]));
      }
    }
  }
}

/// The loopback ring, counting the blocking all-reduces each worker makes (the gradients' are asynchronous).
struct counting_ring : comm::ring_tcp {
  using comm::ring_tcp::ring_tcp;
  static counting_ring connect(const cluster_info& c, const communication_options& o) {
    return counting_ring(options_for(c, o));
  }
  void all_reduce(std::span<float> data, reduce_op op) {
    ++blocking;
    comm::ring_tcp::all_reduce(data, op);
  }
  int blocking = 0;
};

BOOST_AUTO_TEST_CASE(a_step_adds_no_collective_to_its_gradients_the_logs_flags_and_data_agreement_ride_with_them) {
  // The global batch logs, the stop and preemption flags and, for per-worker pipelines, the agreement on
  // the next batch travel with the last gradient bucket: the blocking all-reduces a fit makes do not grow
  // with its steps (only a few per epoch remain). The logs stay the global running values (the test above).
  constexpr int epochs = 2;
  for (int p : {2, 3}) {
    for (bool per_worker : {false, true}) {
      std::map<std::size_t, std::vector<int>> blocking;  // examples -> each worker's count
      std::vector<std::vector<float>> losses(static_cast<std::size_t>(p));
      for (std::size_t n : {48, 96}) {  // 4 and 8 steps an epoch
        blocking[n].assign(std::size_t(p), 0);
        auto [x, y] = dtrain_test::three_class_problem(n);
        dtrain_test::on_workers<cpu, counting_ring>(p, [&](auto& s, int r) {
          auto model = s.template make_model<net>(3);
          model.compile({.optimizer = adam{{.learning_rate = 0.01f}},
                         .loss = sparse_categorical_crossentropy{{.from_logits = true}}, .metrics = {accuracy{}}});
          const int before = s.communicator().blocking;
          const fit_options o{.epochs = epochs,
                              .callbacks = {lambda_callback({.on_train_batch_end = [&](std::int64_t, const logs& l) {
                                if (n == 48) losses[std::size_t(r)].push_back(l["loss"]);
                              }})},
                              .verbose = 0};
          if (per_worker)  // worker r reads rows [r n / p, (r + 1) n / p): the workers agree on every batch
            model.fit(s.distribute_datasets_from_function([&](const input_context& c) {
              const std::size_t from = n * std::size_t(c.input_pipeline_id) / std::size_t(p),
                                to = n * std::size_t(c.input_pipeline_id + 1) / std::size_t(p);
              return data::from_tensor_slices(dtrain::detail::rows_of(x, from, to), dtrain::detail::rows_of(y, from, to)) |
                     data::batch(5);
            }), o);
          else
            model.fit(data::from_tensor_slices(x, y) | data::batch(12), o);
          blocking[n][std::size_t(r)] = s.communicator().blocking - before;
        });
      }
      BOOST_TEST_CONTEXT("p = " << p << (per_worker ? ", per-worker pipelines" : ", DATA sharding")) {
        for (int r = 0; r < p; ++r) {
          BOOST_TEST(blocking[96][std::size_t(r)] == blocking[48][std::size_t(r)]);
          BOOST_TEST(losses[std::size_t(r)] == losses[0], tt::per_element());
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_sigterm_on_one_worker_preempts_every_worker_at_the_same_step_and_resumes_exactly) {
  // A SIGTERM during worker 1's callbacks after batch 5 (epoch 2, batch 1): the flag rides with the next
  // step, so every worker writes the backup and throws after epoch 2, batch 2; the restarted job resumes
  // there and ends with the weights of an uninterrupted run.
  for (int p : {2, 3}) {
    BOOST_TEST_CONTEXT("p = " << p) {
      const auto straight = train(p, [](int) { return std::vector<callback_ref>{}; });
      temp_dir t;
      std::vector<std::string> errors(static_cast<std::size_t>(p));
      auto [x, y] = dtrain_test::three_class_problem(48);
      dtrain_test::on_workers(p, [&](auto& s, int r) {
        auto model = s.template make_model<net>(3 + std::uint64_t(r));
        model.compile({.optimizer = adam{{.learning_rate = 0.01f}},
                       .loss = sparse_categorical_crossentropy{{.from_logits = true}}, .metrics = {accuracy{}}});
        std::int64_t seen = 0;
        try {
          model.fit(data::from_tensor_slices(x, y) | data::batch(12),
                    {.epochs = 4,
                     .callbacks = {backup_and_restore({.backup_dir = t.path}),
                                   lambda_callback({.on_train_batch_end = [&, r](std::int64_t, const logs&) {
                                     if (++seen == 5 && r == 1) std::raise(SIGTERM);
                                   }})},
                     .verbose = 0});
        } catch (const preempted& e) {
          errors[std::size_t(r)] = e.what();
        }
        WORKER_CHECK(model.optimizer().iterations() == 6);
      });
      for (const auto& e : errors) BOOST_TEST(e.find("preempted (SIGTERM) after epoch 2, batch 2") != std::string::npos, e);
      const auto resumed = train(p, [&](int) { return std::vector<callback_ref>{backup_and_restore({.backup_dir = t.path})}; });
      std::signal(SIGTERM, SIG_DFL);
      same_on_every_worker(resumed);
      BOOST_TEST(resumed[0].weights == straight[0].weights, tt::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(model_checkpoint_in_every_mode_decides_alike_and_only_the_chief_writes) {
  // save_best_only with a numeric save_freq decides on batch logs: the chief's decision is everyone's
  // (the logs are the same on every worker now; the decision stays the chief's for any callback's sake)
  for (int p : {2, 3}) {
    temp_dir t;
    const auto out = train(p, [&](int r) {
      std::vector<callback_ref> cbs;
      for (bool best : {false, true})
        for (bool weights_only : {false, true})
          for (int every : {0, 2}) {
            const auto dir = t.path / ("w" + std::to_string(r)) /
                             ((best ? "best-" : "all-") + std::string(weights_only ? "weights-" : "model-") +
                              (every ? "batch" : "epoch"));
            cbs.push_back(model_checkpoint({.filepath = (dir / "{epoch}.safetensors").string(), .monitor = "loss",
                                            .save_best_only = best, .save_weights_only = weights_only,
                                            .save_freq = every ? std::variant<std::string, std::int64_t>(std::int64_t(every))
                                                               : std::variant<std::string, std::int64_t>("epoch")}));
          }
      return cbs;
    });
    BOOST_TEST_CONTEXT("p = " << p) {
      same_on_every_worker(out);
      for (int r = 1; r < p; ++r) BOOST_TEST(!fs::exists(t.path / ("w" + std::to_string(r))));  // the chief writes
      BOOST_TEST(fs::exists(t.path / "w0/all-model-epoch/4.safetensors"));
      BOOST_TEST(fs::exists(t.path / "w0/all-weights-batch/4.safetensors"));
      BOOST_TEST(fs::exists(t.path / "w0/best-model-batch/1.safetensors"));  // the first batch always improves
      // what the chief wrote at the end is the weights every worker holds
      net back(9);
      checkpoint::load_weights(back, t.path / "w0/all-weights-epoch/4.safetensors");
      BOOST_TEST(back.get_weights() == out[0].weights, tt::per_element());
      net full(9);
      full.compile({.optimizer = adam{}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
      checkpoint::restore_model(full, t.path / "w0/all-model-epoch/4.safetensors");
      BOOST_TEST(full.get_weights() == out[0].weights, tt::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(early_stopping_reduce_lr_and_a_one_worker_stop_end_every_worker_alike) {
  for (int p : {2, 3}) {
    BOOST_TEST_CONTEXT("p = " << p) {
      // EarlyStopping and ReduceLROnPlateau on the aggregated epoch logs
      const auto out = train(p, [](int) {
        return std::vector<callback_ref>{early_stopping({.monitor = "loss", .min_delta = 0.02f, .patience = 1}),
                                         reduce_lr_on_plateau({.monitor = "loss", .factor = 0.5f, .patience = 0,
                                                               .min_delta = 0.05f})};
      }, 12);
      same_on_every_worker(out);
      BOOST_TEST(out[0].learning_rate < 0.01f);  // the plateau was reached...
      BOOST_TEST(out[0].hist.epochs.size() < 12u);  // ...and training stopped early, on every worker
      // a stop that only the last worker asks for, at the end of epoch 2, stops everyone there
      struct stop_here : callback {
        bool mine;
        explicit stop_here(bool m) : mine(m) {}
        void on_epoch_end(int epoch, const logs&) override {
          if (mine && epoch == 1) model().stop_training = true;
        }
      };
      const auto one = train(p, [p](int r) { return std::vector<callback_ref>{stop_here(r == p - 1)}; });
      same_on_every_worker(one);
      BOOST_TEST(one[0].hist.epochs.size() == 2u);
    }
  }
}

BOOST_AUTO_TEST_CASE(terminate_on_nan_on_one_replica_stops_every_worker_at_that_step) {
  // a NaN in the rows only replica 1 takes of batch 3: the batch's global loss, which every worker's
  // logs hold, is NaN on every worker (as in tf.keras), and all stop there
  auto [x, y] = dtrain_test::three_class_problem(48);
  for (int p : {2, 3}) {
    tensor bad = x;
    const std::size_t per = 12 / std::size_t(p);
    bad(2 * 12 + per + 1, 0) = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> first_losses(std::size_t(p), 0.0f);
    const auto out = train(p, [&](int r) {
      return std::vector<callback_ref>{terminate_on_nan(), lambda_callback({.on_train_batch_end = [&, r](std::int64_t b, const logs& l) {
        if (b == 2) first_losses[std::size_t(r)] = l["loss"];
      }})};
    }, 4, 12, bad);
    BOOST_TEST_CONTEXT("p = " << p) {
      for (float l : first_losses) BOOST_TEST(!std::isfinite(l));
      for (const auto& o : out) BOOST_TEST(o.iterations == 3);
    }
  }
}

BOOST_AUTO_TEST_CASE(the_chiefs_message_reaches_every_worker_as_sent) {
  // what backup_and_restore tells the workers: a kind, a text and bytes, zero bytes inside, empty parts
  const std::vector<chief_message> sent{{7, std::string("a\0b", 3), {'x', '\0', 'y'}}, {}, {-2, "only text", {}}};
  for (int p : {2, 3}) {
    std::vector<std::vector<chief_message>> got(static_cast<std::size_t>(p));
    struct tell : callback {
      const std::vector<chief_message>* sent;
      std::vector<chief_message>* got;
      tell(const std::vector<chief_message>* s, std::vector<chief_message>* g) : sent(s), got(g) {}
      void on_train_begin(const logs&) override {
        for (const chief_message& m : *sent) {
          chief_message here = model().is_chief() ? m : chief_message{99, "not the chief's", {'z'}};
          model().broadcast_from_chief(here);
          got->push_back(std::move(here));
        }
      }
    };
    train(p, [&](int r) { return std::vector<callback_ref>{tell(&sent, &got[std::size_t(r)])}; }, 1);
    for (int r = 0; r < p; ++r) {
      BOOST_TEST_CONTEXT("p = " << p << ", worker " << r) {
        BOOST_REQUIRE_EQUAL(got[std::size_t(r)].size(), sent.size());
        for (std::size_t k = 0; k < sent.size(); ++k) {
          BOOST_TEST(got[std::size_t(r)][k].kind == sent[k].kind);
          BOOST_TEST(got[std::size_t(r)][k].text == sent[k].text);
          BOOST_TEST(got[std::size_t(r)][k].bytes == sent[k].bytes, tt::per_element());
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(csv_logger_writes_on_the_chief_only) {
  temp_dir t;
  const auto out = train(3, [&](int r) {
    return std::vector<callback_ref>{csv_logger((t.path / ("log" + std::to_string(r) + ".csv")).string())};
  }, 2);
  BOOST_TEST(fs::exists(t.path / "log0.csv"));
  BOOST_TEST(!fs::exists(t.path / "log1.csv"));
  BOOST_TEST(!fs::exists(t.path / "log2.csv"));
}

namespace {
/// Every worker's backup_and_restore into `dir` (every 3 batches), plus a crash after `crash` batches.
auto backed_up(const fs::path& dir, int crash = 0) {
  return [dir, crash](int) {
    std::vector<callback_ref> cbs{backup_and_restore({.backup_dir = dir, .save_freq = std::int64_t(3)})};
    if (crash) cbs.push_back(crash_after(crash));
    return cbs;
  };
}
}  // namespace

BOOST_AUTO_TEST_CASE(a_backup_of_n_workers_resumes_on_m_with_the_same_global_batch) {
  // the data position counts global batches and the metric states are summed, so a backup resumes
  // on another number of workers; the weights then equal an uninterrupted run's to float rounding
  const auto straight = train(2, [](int) { return std::vector<callback_ref>{}; });
  for (const auto& [from, to] : {std::pair{2, 2}, std::pair{2, 3}, std::pair{3, 1}}) {
    BOOST_TEST_CONTEXT(from << " workers, then " << to) {
      temp_dir t;
      BOOST_CHECK_THROW(train(from, backed_up(t.path, 7)), std::runtime_error);  // in epoch 2
      BOOST_REQUIRE(fs::exists(t.path / "ckpt-2.safetensors"));  // after batches 3 and 6
      const auto resumed = train(to, backed_up(t.path));
      same_on_every_worker(resumed);
      if (from == to) BOOST_TEST(resumed[0].weights == straight[0].weights, tt::per_element());  // exact
      else BOOST_TEST(dtrain_test::weights_close(resumed[0].weights, straight[0].weights));
      BOOST_TEST(resumed[0].iterations == straight[0].iterations);
      BOOST_TEST(resumed[0].hist["loss"].back() == straight[0].hist["loss"].back(), tt::tolerance(1e-4f));
      BOOST_TEST(!fs::exists(t.path));
    }
  }
}

BOOST_AUTO_TEST_CASE(a_run_with_gradients_in_16_bits_resumes_bitwise) {
  // the rounding on the wire is a function of the values alone: a crashed run of 3 workers with bf16
  // gradients resumes from its backup to the bits of an uninterrupted one
  const communication_options bf16{.timeout = std::chrono::seconds(20), .connect_timeout = std::chrono::seconds(20),
                                    .gradient_compression = compression::bf16};
  const auto straight = train(3, [](int) { return std::vector<callback_ref>{}; }, 4, 12, std::nullopt, bf16);
  temp_dir t;
  BOOST_CHECK_THROW(train(3, backed_up(t.path, 7), 4, 12, std::nullopt, bf16), std::runtime_error);
  const auto resumed = train(3, backed_up(t.path), 4, 12, std::nullopt, bf16);
  same_on_every_worker(resumed);
  BOOST_TEST(resumed[0].weights == straight[0].weights, tt::per_element());
  BOOST_TEST(resumed[0].hist["loss"].back() == straight[0].hist["loss"].back());
  BOOST_TEST(straight[0].weights != train(3, [](int) { return std::vector<callback_ref>{}; })[0].weights);  // (FP32's differ)
}

BOOST_AUTO_TEST_CASE(a_resume_that_would_change_the_global_batch_or_a_per_worker_position_is_refused) {
  temp_dir t;
  BOOST_CHECK_THROW(train(2, backed_up(t.path, 5)), std::runtime_error);
  // 3 workers of 3 rows: a global batch of 9, not 12
  std::string e;
  try {
    train(3, backed_up(t.path), 4, 9);
  } catch (const config_error& c) {
    e = c.what();
  }
  BOOST_TEST(e.find("written with a global batch of 12 rows (2 workers) but this run's global batch is 9 rows "
                    "(3 workers)") != std::string::npos, e);
  BOOST_TEST(fs::exists(t.path / "ckpt-1.safetensors"));  // refused: the backup stays
  // a per-worker pipeline's position is per worker: only the same number of workers resumes it
  auto [x, y] = dtrain_test::three_class_problem(48);
  e.clear();
  try {
    dtrain_test::on_workers(3, [&](auto& s, int) {
      auto model = s.template make_model<net>(3);
      model.compile({.optimizer = adam{{.learning_rate = 0.01f}},
                     .loss = sparse_categorical_crossentropy{{.from_logits = true}}, .metrics = {accuracy{}}});
      auto ds = s.distribute_datasets_from_function([&](const input_context& c) {
        return data::from_tensor_slices(x, y) | data::shard(c.num_input_pipelines, c.input_pipeline_id) |
               data::batch(4);
      });
      model.fit(ds, {.epochs = 4, .callbacks = {backup_and_restore({.backup_dir = t.path, .save_freq = std::int64_t(3)})},
                     .verbose = 0});
    });
  } catch (const config_error& c) {
    e = c.what();
  }
  BOOST_TEST(e.find("written by 2 workers but this run has 3, and its data position is per worker") != std::string::npos, e);
}

BOOST_AUTO_TEST_SUITE_END()
