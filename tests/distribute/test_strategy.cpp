// Strategies end to end over real loopback sockets: N workers (threads, each with its own strategy
// and sockets) train like one worker with the global batch; runs are deterministic; metrics agree.
#include <atomic>
#include <thread>

#include "support/gradcheck.hpp"
#include "support/loopback.hpp"
#include "support/mirrored.hpp"
#include "support/helpers.hpp"

#include <dtrain/distribute/comm/nccl_emulated.hpp>

using namespace dtrain;
namespace tt = boost::test_tools;
using mwms = multi_worker_mirrored_strategy<comm::ring_tcp>;

namespace {
using net = dtrain_test::small_net;
using dtrain_test::three_class_problem;

struct outcome {
  std::vector<float> weights;
  history hist;
};

/// Trains `net` with global batch 12 on p workers (threads), each computing on backend B and summing
/// gradients with Comm; returns each worker's outcome.
template <class B = cpu, class Comm = comm::ring_tcp>
std::vector<outcome> train(int p, std::uint64_t seed = 3, int epochs = 2,
                           communication_options o = {.timeout = std::chrono::seconds(20),
                                                      .connect_timeout = std::chrono::seconds(20)},
                           const any_optimizer& optimizer = adam{{.learning_rate = 0.01f}}) {
  std::vector<outcome> out(static_cast<std::size_t>(p));
  auto [x, y] = three_class_problem(48);
  dtrain_test::on_workers<B, Comm>(p, [&](auto& s, int r) {
    WORKER_CHECK(s.reduces_device_gradients() ==
                 (device_communicator<Comm, B> && o.implementation != communication_options::implementation_type::ring));
    static_assert(std::is_same_v<typename decltype(s.template make_model<net>())::backend_type, B>);
    auto model = s.template make_model<net>(seed + std::uint64_t(r));  // different seeds: the chief's weights win
    model.compile({.optimizer = optimizer,
                   .loss = sparse_categorical_crossentropy{{.from_logits = true}},
                   .metrics = {accuracy{}, mean_iou{{.num_classes = 3, .sparse_y_pred = false}}}});
    auto ds = data::from_tensor_slices(x, y) | data::shuffle(48, 7) | data::batch(12);
    out[std::size_t(r)].hist = model.fit(ds, {.epochs = epochs, .validation_data = data::from_tensor_slices(x, y) | data::batch(10), .verbose = 0});
    out[std::size_t(r)].weights = model.get_weights();
  }, o);
  return out;
}

/// Whether p workers' outcomes agree with one worker's: weights to float rounding (the replicas'
/// gradients are summed in another order than one worker's GEMMs sum them: |a - b| <= 1e-5 + 1e-4 |b|
/// after 8 Adam steps), the loss to 1e-4, the metrics to 1e-6; and with each other, bitwise.
void check_like_one(const std::vector<outcome>& many, const std::vector<outcome>& one) {
  BOOST_REQUIRE_EQUAL(many[0].weights.size(), one[0].weights.size());
  std::size_t off = 0;
  for (std::size_t i = 0; i < one[0].weights.size(); ++i)
    off += std::abs(many[0].weights[i] - one[0].weights[i]) > 1e-5f + 1e-4f * std::abs(one[0].weights[i]);
  BOOST_TEST(off == 0u);
  for (std::size_t r = 1; r < many.size(); ++r) {
    // every worker holds the same weights and reports the same (aggregated) metrics
    BOOST_TEST(many[r].weights == many[0].weights, tt::per_element());
    BOOST_TEST(many[r].hist.history == many[0].hist.history);
  }
  BOOST_TEST(many[0].hist["loss"][1] == one[0].hist["loss"][1], tt::tolerance(1e-4f));
  BOOST_TEST(many[0].hist["val_accuracy"][1] == one[0].hist["val_accuracy"][1], tt::tolerance(1e-6f));
  // a metric whose state is a confusion matrix, summed over the workers with the gradients each step
  BOOST_TEST(many[0].hist["mean_iou"][1] == one[0].hist["mean_iou"][1], tt::tolerance(1e-6f));
  BOOST_TEST(many[0].hist["val_mean_iou"][1] == one[0].hist["val_mean_iou"][1], tt::tolerance(1e-6f));
}

/// Whether p workers whose gradients went in 16 bits agree with one worker's FP32 run within a few
/// rounding units of the wire type (|a - b| <= 1e-3 + 1e-2 |b| after 8 Adam steps of 0.01), and with each
/// other bitwise.
void check_like_one_in_16_bits(const std::vector<outcome>& many, const std::vector<outcome>& one) {
  BOOST_TEST(dtrain_test::weights_close(many[0].weights, one[0].weights, 1e-3f, 1e-2f));
  for (std::size_t r = 1; r < many.size(); ++r) BOOST_TEST(many[r].weights == many[0].weights, tt::per_element());
}
}  // namespace

namespace {
/// A net with moving statistics and dropout: a step changes more than its weights.
using stateful_net = sequential<input<6>, dense<16, relu>, batch_normalization<>, dropout<0.25f>, dense<3>>;

struct run_record {
  std::vector<float> weights;
  history hist;
  std::int64_t iterations = 0, begun = 0, ended = 0, after_one_more = 0;
  std::uint64_t next_draw = 0;  // the generator's next value after fit
};


/// Each worker's record of a fit of 3 epochs of 4 batches (`stop`: the last worker's callback stops
/// after batch 3), or of one that trains 3 steps and ends. `per_worker`: each worker's own pipeline,
/// worker 0's of 5 batches (3 when it does not stop), the others' of one, so the others' shares are empty
/// from the second step on.
template <class B>
std::vector<run_record> stop_run(int p, bool stop, bool per_worker = false) {
  auto [x, y] = dtrain_test::three_class_problem(48);
  std::vector<run_record> out(static_cast<std::size_t>(p));
  dtrain_test::on_workers<B>(p, [&](auto& s, int r) {
    auto model = s.template make_model<stateful_net>(3);
    model.compile({.optimizer = adam{{.learning_rate = 0.01f}},
                   .loss = sparse_categorical_crossentropy{{.from_logits = true}}, .metrics = {accuracy{}}});
    auto& mine = out[std::size_t(r)];
    struct stop_after : callback {
      run_record* rec;
      bool mine;
      stop_after(run_record* c, bool m) : rec(c), mine(m) {}
      void on_train_batch_begin(std::int64_t, const logs&) override { ++rec->begun; }
      void on_train_batch_end(std::int64_t b, const logs&) override {
        ++rec->ended;
        if (mine && b == 2) model().stop_training = true;
      }
    };
    auto ds = data::from_tensor_slices(x, y) | data::batch(12);
    if (per_worker)
      mine.hist = model.fit(s.distribute_datasets_from_function([&](const input_context& c) {
        const std::size_t w = std::size_t(c.input_pipeline_id), from = w == 0 ? 0 : 30 + 6 * (w - 1),
                          to = w == 0 ? (stop ? 30 : 18) : from + 6;
        return data::from_tensor_slices(dtrain::detail::rows_of(x, from, to), dtrain::detail::rows_of(y, from, to)) |
               data::batch(6);
      }), {.epochs = stop ? 3 : 1, .callbacks = {stop_after(&mine, stop && r == p - 1)}, .verbose = 0});
    else if (stop)
      mine.hist = model.fit(ds, {.epochs = 3, .callbacks = {stop_after(&mine, r == p - 1)}, .verbose = 0});
    else
      mine.hist = model.fit(ds | data::repeat(), {.epochs = 1, .steps_per_epoch = 3, .callbacks = {stop_after(&mine, false)}, .verbose = 0});
    mine.weights = model.get_weights();
    mine.iterations = model.optimizer().iterations();
    mine.next_draw = model.generator().next();
    model.train_step(dtrain::detail::rows_of(x, 0, 12), dtrain::detail::rows_of(y, 0, 12));  // the veto is spent
    mine.after_one_more = model.optimizer().iterations();
  });
  return out;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(strategy)

BOOST_AUTO_TEST_CASE_TEMPLATE(n_workers_train_like_one_worker_with_the_global_batch, B, dtrain_test::backends) {
  // Tolerance: the replicas' gradients are summed in another order than one worker's GEMMs sum them,
  // so weights agree to float rounding: |a - b| <= 1e-5 + 1e-4 |b| after 8 Adam steps. On a backend whose
  // memory is not host memory (opaque) the gradients reach the ring through a host copy.
  const auto one = train(1);
  for (int p : {2, 3}) {
    BOOST_TEST_CONTEXT("p = " << p) { check_like_one(train<B>(p), one); }
  }
}

BOOST_AUTO_TEST_CASE(clipped_and_accumulated_updates_train_like_one_worker) {
  // Every worker clips (and accumulates) the summed gradients: the same global gradient as one worker's.
  // SGD, as Adam's steps hardly depend on the gradients' scale; the clipping norms are below the
  // gradients' (the runs differ from unclipped ones).
  const communication_options o{.timeout = std::chrono::seconds(20), .connect_timeout = std::chrono::seconds(20)};
  const any_optimizer plain = sgd{{.learning_rate = 0.5f}};
  for (const any_optimizer& opt :
       {any_optimizer(sgd{{.learning_rate = 0.5f, .global_clipnorm = 0.05f}}),
        any_optimizer(sgd{{.learning_rate = 0.5f, .clipnorm = 0.02f, .gradient_accumulation_steps = 2}})}) {
    const auto one = train(1, 3, 2, o, opt);
    BOOST_TEST(!dtrain_test::weights_close(one[0].weights, train(1, 3, 2, o, plain)[0].weights, 1e-3f, 1e-3f));
    for (int p : {2, 3}) {
      BOOST_TEST_CONTEXT("p = " << p << ", " << checkpoint::detail::optimizer_config(opt).dump()) {
        check_like_one(train(p, 3, 2, o, opt), one);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(gpu_workers_over_nccl_or_the_ring_train_like_one_worker) {
  // comm::nccl's code (on the emulated NCCL and devices): gradients summed in device memory by NCCL
  // (implementation auto, TF's AUTO for GPU workers), or staged through host memory, layer by layer,
  // to the TCP ring (implementation ring)
  using impl = communication_options::implementation_type;
  const auto one = train(1);
  for (impl i : {impl::auto_, impl::ring})
    for (int p : {1, 2, 3}) {
      BOOST_TEST_CONTEXT("p = " << p << ", implementation " << (i == impl::ring ? "ring" : "auto")) {
        check_like_one(train<cuda_emulated, comm::nccl_emulated>(p, 3, 2, {.implementation = i, .timeout = std::chrono::seconds(20),
                                                                          .connect_timeout = std::chrono::seconds(20)}),
                       one);
      }
    }
  // the staged gradients in 16 bits on the TCP ring: like one worker within rounding, the same bits on
  // every worker
  for (int p : {2, 3}) {
    BOOST_TEST_CONTEXT("p = " << p << ", implementation ring, bf16") {
      const auto many = train<cuda_emulated, comm::nccl_emulated>(
          p, 3, 2, {.implementation = impl::ring, .timeout = std::chrono::seconds(20),
                    .connect_timeout = std::chrono::seconds(20), .gradient_compression = compression::bf16});
      check_like_one_in_16_bits(many, one);
    }
  }
  // NCCL for a strategy whose communicator takes host memory only: a config_error saying what to use
  const std::string msg = dtrain_test::error_of([] {
    multi_worker_mirrored_strategy<comm::local, cuda_emulated>({.implementation = impl::nccl}, cluster_info{});
  });
  BOOST_TEST(msg.find("multi_worker_mirrored_strategy<comm::nccl, cuda>") != std::string::npos, msg);
}

BOOST_AUTO_TEST_CASE(gradients_in_16_bits_train_like_one_worker_and_metrics_stay_exact) {
  communication_options o{.timeout = std::chrono::seconds(20), .connect_timeout = std::chrono::seconds(20)};
  const auto one = train(1);
  for (compression c : {compression::bf16, compression::fp16})
    for (int p : {2, 3}) {
      BOOST_TEST_CONTEXT(name_of(c) << ", p = " << p) {
        o.gradient_compression = c;
        const auto many = train(p, 3, 2, o);
        // each gradient rounded to 8 (bf16) or 11 (fp16) significant bits on the way: after 8 Adam steps
        // of 0.01 the weights are within a few rounding units of one worker's, the same bits on every
        // worker, and the metrics (whose states ride in FP32) as one worker's
        check_like_one_in_16_bits(many, one);
        BOOST_TEST(many[0].weights != one[0].weights);  // (the gradients were rounded)
        BOOST_TEST(many[0].hist["accuracy"][1] == one[0].hist["accuracy"][1], tt::tolerance(1e-6f));
      }
    }
  // with the weights left alone (SGD at rate 0) the running loss and metrics each batch shows (their
  // states summed over the workers in the gradients' collective) are one worker's to FP32 rounding: had
  // the states been rounded with the gradients, the loss would be 1e-3 off
  auto [x, y] = three_class_problem(48);
  auto fit_frozen = [&](int p, compression c) {
    std::vector<std::vector<float>> shown(static_cast<std::size_t>(p));
    o.gradient_compression = c;
    dtrain_test::on_workers(p, [&](auto& s, int r) {
      auto model = s.template make_model<net>(3);
      model.compile({.optimizer = sgd{{.learning_rate = 0.0f}}, .loss = sparse_categorical_crossentropy{{.from_logits = true}},
                     .metrics = {accuracy{}, mean_iou{{.num_classes = 3, .sparse_y_pred = false}}}});
      model.fit(data::from_tensor_slices(x, y) | data::batch(12),
                {.epochs = 1, .callbacks = {lambda_callback({.on_train_batch_end = [&, r](std::int64_t, const logs& l) {
                   for (const char* k : {"loss", "accuracy", "mean_iou"}) shown[std::size_t(r)].push_back(l[k]);
                 }})}, .verbose = 0});
    }, o);
    return shown;
  };
  const auto alone = fit_frozen(1, compression::none);
  for (compression c : {compression::bf16, compression::fp16}) {
    const auto three = fit_frozen(3, c);
    BOOST_TEST(three[0] == three[2], tt::per_element());
    BOOST_TEST(three[0] == alone[0], tt::tolerance(1e-6f) << tt::per_element());
  }
}

namespace {
/// A one-worker communicator that has no 16-bit all-reduce (comm::local's collectives without it).
struct fp32_only_communicator : comm::local {
  static fp32_only_communicator connect(const cluster_info& c, const communication_options& o) {
    comm::local::connect(c, o);
    return {};
  }
  void all_reduce(std::span<float>, reduce_op) {}
  handle all_reduce_async(std::span<float>, reduce_op) { return {}; }
};
static_assert(cluster_communicator<fp32_only_communicator> && !compressing_communicator<fp32_only_communicator>);
}  // namespace

BOOST_AUTO_TEST_CASE(gradient_compression_the_workers_disagree_on_or_cannot_do_is_refused) {
  std::vector<std::string> errors(3);
  const auto addrs = dtrain_test::free_addresses(3);
  dtrain_test::run_threads(3, [&](int r) {
    errors[std::size_t(r)] = dtrain_test::error_of([&] {
      multi_worker_mirrored_strategy<comm::ring_tcp> s(
          {.timeout = std::chrono::seconds(20), .connect_timeout = std::chrono::seconds(20),
           .gradient_compression = r == 1 ? compression::bf16 : compression::none},
          make_cluster_info({{{"worker", addrs}}}, "worker", r));
    });
  });
  for (const auto& e : errors) BOOST_TEST(e.find("disagree on gradient_compression") != std::string::npos, e);
  // NCCL's device data plane (which sums FP32), a communicator that sends FP32 only, and replicas in one
  // process: said, not ignored
  const std::string nccl = dtrain_test::error_of([] {
    dtrain_test::on_workers<cuda_emulated, comm::nccl_emulated>(1, [](auto&, int) {}, {.gradient_compression = compression::fp16});
  });
  BOOST_TEST(nccl.find("comm::nccl sums device memory in FP32") != std::string::npos, nccl);
  const std::string threads = dtrain_test::error_of([] {
    multi_worker_mirrored_strategy<fp32_only_communicator>({.gradient_compression = compression::bf16}, cluster_info{});
  });
  BOOST_TEST(threads.find("gradient_compression needs a communicator that sums in 16 bits") != std::string::npos, threads);
  const std::string mirrored = dtrain_test::error_of([] { mirrored_strategy<>({}, {.gradient_compression = compression::bf16}); });
  BOOST_TEST(mirrored.find("gradient_compression applies between workers") != std::string::npos, mirrored);
}

BOOST_AUTO_TEST_CASE(workers_on_one_host_take_the_gpu_of_their_local_rank) {
  // 3 workers on localhost, 2 emulated GPUs: local ranks 0, 1, 2 take GPUs 0, 1 and (round-robin) 0;
  // an explicit device wins
  std::vector<std::string> used(3);
  dtrain_test::on_workers<cuda_emulated>(3, [&](auto& s, int r) {
    WORKER_CHECK(s.cluster().local_rank == r && s.cluster().local_size == 3);
    used[std::size_t(r)] = s.template make_model<net>().device().describe();
  });
  BOOST_TEST(used[0].find("device 0") != std::string::npos, used[0]);
  BOOST_TEST(used[1].find("device 1") != std::string::npos, used[1]);
  BOOST_TEST(used[2].find("device 0") != std::string::npos, used[2]);
  cluster_info second;
  second.local_rank = 1, second.local_size = 2;  // as a launcher would say, for a world of one here
  BOOST_TEST(detail::device_for_local_rank<cuda_emulated>(second).describe().find("device 1") != std::string::npos);
  multi_worker_mirrored_strategy<comm::local, cuda_emulated> pinned({}, cluster_info{}, cuda_emulated(1));
  BOOST_TEST(pinned.make_model<net>().device().describe().find("device 1") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(same_seed_same_workers_bitwise_identical) {
  const auto a = train(2, 11, 1), b = train(2, 11, 1);
  BOOST_TEST(a[0].weights == b[0].weights, tt::per_element());
  BOOST_TEST(train(2, 12, 1)[0].weights != a[0].weights);
}

// What callbacks and saving rely on: a real barrier (no worker leaves before the last arrives) and
// all_gather in replica order, through the replica context a model sees.
BOOST_AUTO_TEST_CASE(replica_context_barrier_and_all_gather) {
  for (int p : {1, 3}) {
    std::atomic<int> arrived{0};
    dtrain_test::on_workers(p, [&](auto& s, int r) {
      replica_context& rc = s;
      const float mine[2] = {float(r), float(10 * r)};
      std::vector<float> all(std::size_t(2 * p));
      rc.all_gather(mine, all);
      for (int k = 0; k < p; ++k) WORKER_CHECK(all[std::size_t(2 * k)] == float(k) && all[std::size_t(2 * k + 1)] == float(10 * k));
      if (r == p - 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the last one is late
      ++arrived;
      rc.barrier();
      WORKER_CHECK(arrived == p);
    });
  }
}

BOOST_AUTO_TEST_CASE(distribute_dataset_policies) {
  tensor x = zeros({8, 1}), y = zeros({8});
  for (std::size_t i = 0; i < 8; ++i) x(i, 0) = float(i), y(i) = float(i);
  auto global = data::from_tensor_slices(x, y) | data::batch(4);
  // DATA / AUTO: replica 1 of 2 keeps rows 2..3 of each global batch
  distributed_dataset<decltype(global)> data_1(global, 2, 1);
  auto it = data_1.iterate(0);
  BOOST_TEST(it.next()->second(0) == 2.0f);
  BOOST_TEST(it.next()->second(1) == 7.0f);
  BOOST_TEST(!it.next());
  // OFF: every replica takes every piece
  auto off = global | data::with_options({.auto_shard = data::auto_shard_policy::off});
  distributed_dataset<decltype(off)> off_0(off, 2, 0);
  BOOST_TEST(off_0.cardinality() == 4);
  auto io = off_0.iterate(0);
  std::vector<float> seen;
  while (auto e = io.next()) seen.push_back(e->second(0));
  BOOST_TEST(seen == (std::vector<float>{0, 2, 4, 6}), tt::per_element());
  // a global batch that does not divide: rows [0, 1), [1, 2), [2, 4) of 4, each knowing the global rows
  for (int r = 0; r < 3; ++r) {
    distributed_dataset<decltype(global)> three(global, 3, r);
    auto i3 = three.iterate(0);
    const auto b = i3.next();
    BOOST_TEST(b->first.shape()[0] == (r == 2 ? 2u : 1u));
    BOOST_TEST(b->second(0) == float(r));
    BOOST_TEST(i3.global_rows() == 4u);
  }
  auto file = global | data::with_options({.auto_shard = data::auto_shard_policy::file});
  BOOST_CHECK_THROW((distributed_dataset<decltype(file)>(file, 2, 0)), config_error);
  // per-replica batch size for distribute_datasets_from_function
  BOOST_TEST((input_context{2, 1, 2}.get_per_replica_batch_size(64)) == 32u);
  BOOST_CHECK_THROW((input_context{3, 0, 3}.get_per_replica_batch_size(64)), value_error);
}

BOOST_AUTO_TEST_CASE(single_worker_strategies_and_bad_requests) {
  strategy_ref d = get_strategy();
  BOOST_TEST(d.is_default());
  BOOST_TEST(!has_strategy());
  BOOST_TEST(d.num_replicas_in_sync() == 1);
  BOOST_TEST(d.reduce(reduce_op::sum, 2.5f) == 2.5f);
  BOOST_TEST(d.run([](int a) { return a + 1; }, 1) == 2);
  BOOST_TEST(d.experimental_local_results(3).size() == 1u);
  one_device_strategy od("/cpu:0");
  auto m = od.make_model<net>(1);
  BOOST_TEST(m.count_params() == 6u * 16 + 16 + 16 * 3 + 3);
  BOOST_CHECK_THROW(one_device_strategy("/gpu:0"), config_error);
  // no TF_CONFIG: one worker, no network
  mwms solo({}, make_cluster_info({{{"worker", {"127.0.0.1:1"}}}}, "worker", 0));
  BOOST_TEST(solo.num_replicas_in_sync() == 1);
  BOOST_TEST(solo.is_chief());
  BOOST_TEST(solo.reduce(reduce_op::mean, 4.0f) == 4.0f);
  BOOST_CHECK_THROW(mwms({.implementation = communication_options::implementation_type::nccl},
                         make_cluster_info({{{"worker", {"127.0.0.1:1"}}}}, "worker", 0)),
                    config_error);
  BOOST_CHECK_THROW(mwms({}, make_cluster_info({{{"worker", {"127.0.0.1:1"}}, {"evaluator", {"127.0.0.1:2"}}}},
                                               "evaluator", 0)),
                    config_error);
}

BOOST_AUTO_TEST_CASE(tf_config_cases) {
  const std::string two = R"({"cluster": {"worker": ["host1:1111", "host2:2222"]}, "task": {"type": "worker", "index": 1}})";
  auto c = tf_config_resolver{two}.resolve();
  BOOST_TEST(c.rank == 1);
  BOOST_TEST(c.world_size == 2);
  BOOST_TEST(!c.is_chief());
  BOOST_TEST(c.ring[0].str() == "host1:1111");
  // a chief comes first; the evaluator is not in the ring
  auto ch = tf_config_resolver{R"({"cluster": {"chief": ["c:1"], "worker": ["w0:2", "w1:3"], "evaluator": ["e:4"]},
                                   "task": {"type": "worker", "index": 0}})"}.resolve();
  BOOST_TEST(ch.rank == 1);
  BOOST_TEST(ch.world_size == 3);
  auto ev = tf_config_resolver{R"({"cluster": {"chief": ["c:1"], "evaluator": ["e:4"]}, "task": {"type": "evaluator", "index": 0}})"}.resolve();
  BOOST_TEST(!ev.in_ring());
  BOOST_TEST(ch.fingerprint() != c.fingerprint());
  BOOST_TEST(tf_config_resolver{two}.resolve().fingerprint() == c.fingerprint());
  const std::pair<std::string, std::string> bad[] = {
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0})", "not valid JSON"},
      {R"({"task": {"type": "worker", "index": 0}})", "no \"cluster\""},
      {R"({"cluster": {"worker": ["a:1"]}})", "no \"task\""},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}})", "task index 3 is out of range"},
      {R"({"cluster": {"worker": ["a:1", "a:1"]}, "task": {"type": "worker", "index": 0}})", "duplicate address \"a:1\""},
      {R"({"cluster": {"worker": ["a:1"], "boss": ["b:2"]}, "task": {"type": "worker", "index": 0}})", "unknown job \"boss\""},
      {R"({"cluster": {"worker": ["a:99999"]}, "task": {"type": "worker", "index": 0}})", "\"a:99999\""},
      {R"({"cluster": {"worker": ["nohost"]}, "task": {"type": "worker", "index": 0}})", "\"nohost\""},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "chief", "index": 0}})", "task type \"chief\""},
      {R"({"cluster": {"worker": [7]}, "task": {"type": "worker", "index": 0}})", "non-string address 7"},
  };
  for (const auto& [text, expect] : bad) {
    try {
      tf_config_resolver{text}.resolve();
      BOOST_ERROR("accepted: " << text);
    } catch (const config_error& e) {
      BOOST_TEST(std::string(e.what()).find(expect) != std::string::npos, e.what() << " lacks " << expect);
    }
  }
}

BOOST_AUTO_TEST_CASE(slurm_torchrun_mpi_and_precedence) {
  BOOST_TEST(expand_hostlist("node[01-03,07],gpu5") ==
                 (std::vector<std::string>{"node01", "node02", "node03", "node07", "gpu5"}),
             tt::per_element());
  auto s = slurm_resolver{"3", "4", "n[1-2]", "2(x2)", "4000"}.resolve();
  BOOST_TEST(s.rank == 3);
  BOOST_TEST(s.ring[3].str() == "n2:4001");
  BOOST_CHECK_THROW((slurm_resolver{"4", "4", "n[1-2]", "2(x2)", ""}.resolve()), config_error);
  BOOST_CHECK_THROW((slurm_resolver{"0", "4", "n[1-2]", "2(x3)", ""}.resolve()), config_error);
  auto t = master_resolver{"2", "4", "10.0.0.1", "1234", "torchrun"}.resolve();
  BOOST_TEST(t.ring.empty());
  BOOST_TEST(t.master->str() == "10.0.0.1:1234");
  BOOST_CHECK_THROW((master_resolver{"0", "2", "", "", "torchrun"}.resolve()), config_error);
  // precedence: TF_CONFIG over the others; nothing set: one worker
  ::setenv("RANK", "1", 1), ::setenv("WORLD_SIZE", "2", 1), ::setenv("MASTER_ADDR", "m", 1);
  BOOST_TEST(resolve_cluster().source == "torchrun");
  ::setenv("TF_CONFIG", R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}})", 1);
  BOOST_TEST(resolve_cluster().source == "TF_CONFIG");
  BOOST_TEST(resolve_cluster({{cluster_spec{{{"worker", {"x:1", "y:2"}}}}, {"worker", 1}}}).source == "explicit");
  ::unsetenv("TF_CONFIG"), ::unsetenv("RANK"), ::unsetenv("WORLD_SIZE"), ::unsetenv("MASTER_ADDR");
  BOOST_TEST(resolve_cluster().world_size == 1);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(one_workers_stop_after_a_batch_ends_every_worker_there_as_if_no_later_step_ran, B,
                              dtrain_test::backends) {
  // The last worker's callback stops after batch 3 of epoch 1 (of 4). Its flag reaches the others with
  // the next step, which every worker drops: all end after 3 updates with the weights, moving statistics,
  // metrics and generator of a run that trains 3 steps and stops; the other workers' callbacks saw batch 4
  // begin, never end. On every backend: the riders and the moving statistics in device memory too. With
  // per-worker pipelines the stopping worker's share of the dropped step is empty.
  for (int p : {2, 3}) {
    for (bool per_worker : {false, true}) {
      const auto stopped = stop_run<B>(p, true, per_worker), three = stop_run<B>(p, false, per_worker);
      BOOST_TEST_CONTEXT("p = " << p << (per_worker ? ", per-worker pipelines" : "")) {
        for (int r = 0; r < p; ++r) {
          const auto& got = stopped[std::size_t(r)];
          BOOST_TEST_CONTEXT("worker " << r) {
            BOOST_TEST(got.iterations == 3);
            BOOST_TEST(got.after_one_more == 4);
            BOOST_TEST(got.weights == three[0].weights, tt::per_element());  // moving statistics included
            BOOST_TEST(got.hist.history == three[0].hist.history);           // the running metrics
            BOOST_TEST(got.next_draw == three[std::size_t(r)].next_draw);    // the generator
            BOOST_TEST(got.ended == 3);
            BOOST_TEST(got.begun == (r == p - 1 ? 3 : 4));
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
