// The CUDA backend's own machinery, on the emulated device here and on a GPU in the `gpu` suite: graph
// replay gives the bits of launched steps, N steps agree with the cpu backend, the allocator stops
// allocating once a step is stable, errors name the device and the sizes, and one_device_strategy
// places the model by TF's device names. The kernels themselves run through every backend-parameterised
// case of the suite.
#include "support/gradcheck.hpp"
#include "support/helpers.hpp"
#include "support/mirrored.hpp"

#if !defined(DTRAIN_TEST_GPU)
#include <dtrain/distribute/comm/nccl_emulated.hpp>
#define DTRAIN_TEST_HAS_NCCL 1
#elif defined(DTRAIN_TEST_NCCL)  // the GPU suite, built where NCCL was found
#include <dtrain/distribute/comm/nccl.hpp>
#define DTRAIN_TEST_HAS_NCCL 1
#endif

using namespace dtrain;
using dtrain_test::on;
using dtrain_test::to_host;
namespace tt = boost::test_tools;

#ifdef DTRAIN_TEST_GPU
using gpu_backend = cuda;
#ifdef DTRAIN_TEST_HAS_NCCL
using gpu_nccl = comm::nccl;
#endif
#else
using gpu_backend = cuda_emulated;
using gpu_nccl = comm::nccl_emulated;
#endif
#ifdef DTRAIN_TEST_HAS_NCCL
// the GPU strategies model the strategy concept: "swap one type" is checked by the compiler
static_assert(strategy<mirrored_strategy<gpu_nccl, gpu_backend>>);
static_assert(strategy<multi_worker_mirrored_strategy<gpu_nccl, gpu_backend>>);
#endif

namespace {

using pooled = sequential<input<8, 8, 2>, conv2d<3, 3, relu, padding::same, l2<0.001f>>, max_pooling2d<2>,
                          conv2d<4, 2, sigmoid, strides<2>>, average_pooling2d<2, padding::same>, flatten,
                          dense<16, gelu>, dropout<0.25f>, dense<5>>;

std::pair<tensor, tensor> batch(std::uint64_t seed, std::size_t n = 6) {
  rng r(seed);
  tensor x = zeros({n, 8, 8, 2}), y = zeros({n});
  for (auto& v : x) v = r.normal();
  for (std::size_t i = 0; i < n; ++i) y(i) = float((i + seed) % 5);
  return {x, y};
}

/// `steps` Adam steps (a step size that changes every step, a dropout key per step) on device `d`:
/// the weights, the optimizer's slots and the last step's loss.
template <class B>
std::vector<float> train(const B& d, int steps) {
  on<pooled, B> m(4, d);
  m.compile({.optimizer = adam{{.learning_rate = 0.01f}}, .loss = sparse_categorical_crossentropy{{.from_logits = true}},
             .metrics = {accuracy{}}});
  logs l;
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch(std::uint64_t(s % 3));
    l = m.train_step(x, y);
  }
  std::vector<float> out = m.get_weights(), slots = m.optimizer().state().slots;
  out.insert(out.end(), slots.begin(), slots.end());
  out.push_back(l["loss"]);
  out.push_back(l["accuracy"]);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_backend)

BOOST_AUTO_TEST_CASE(graph_replay_gives_the_bits_of_launched_steps) {
  const gpu_backend graphs(0, cuda_options{.graphs = true}), launched(0, cuda_options{.graphs = false});
  const auto a = train(graphs, 8), b = train(launched, 8);
  BOOST_TEST(a == b, tt::per_element());
  // the graph path was taken: the step was captured once and replayed from then on (its Adam step
  // size and dropout key patched into the graph every step), and never with graphs off
  const auto g = graphs.issued(), l = launched.issued();
  BOOST_TEST(g.captured >= 1u);
  BOOST_TEST(g.replayed >= 5u);
  BOOST_TEST(l.captured == 0u);
  BOOST_TEST(l.replayed == 0u);
}

BOOST_AUTO_TEST_CASE(steps_agree_with_the_cpu_backend) {
  // 10 steps from the same initial weights: the kernels sum in other orders (two-pass reductions,
  // gathers instead of scatters, cuBLAS on a GPU), so the results agree to float tolerance, not bits
  const auto c = train(cpu{}, 10), g = train(gpu_backend{}, 10);
  BOOST_REQUIRE_EQUAL(c.size(), g.size());
  double worst = 0;
  for (std::size_t i = 0; i < c.size(); ++i) worst = std::max(worst, double(std::abs(c[i] - g[i])) / (1e-3 + std::abs(c[i])));
  BOOST_TEST(worst < 2e-3, "largest relative difference " << worst);
}

BOOST_AUTO_TEST_CASE(a_stable_step_allocates_nothing) {
  const gpu_backend d(0, cuda_options{});
  on<pooled, gpu_backend> m(1, d);
  m.compile({.optimizer = adam{}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
  auto [x, y] = batch(1);
  m.train_step(x, y);
  const std::size_t in_use = d.bytes_in_use();
  for (int s = 0; s < 4; ++s) m.train_step(x, y);
  BOOST_TEST(d.bytes_in_use() == in_use);
  // a freed block is what the next allocation of its size class gets
  auto a = d.template allocate<float>(1000);
  const auto p = a.data();
  a = {};
  auto b = d.template allocate<float>(900);
  BOOST_TEST((b.data() == p));
}

BOOST_AUTO_TEST_CASE(one_device_strategy_places_the_model_by_tf_device_name) {
  one_device_strategy<gpu_backend> s("/gpu:0");
  BOOST_TEST(s.device() == "/gpu:0");
  auto m = s.make_model<pooled>(3);
  static_assert(std::is_same_v<decltype(m), on<pooled, gpu_backend>>);
  m.compile({.optimizer = sgd{}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
  auto [x, y] = batch(2);
  BOOST_TEST(std::isfinite(m.train_step(x, y)["loss"]));
  BOOST_TEST(one_device_strategy<gpu_backend>("/device:GPU:0").device() == "/device:GPU:0");
  // a device that does not exist, a name that is no GPU, a GPU for the cpu strategy
  const std::string missing = dtrain_test::error_of([] { one_device_strategy<gpu_backend>("/gpu:7"); });
  BOOST_TEST(missing.find("device '/gpu:7' is not available") != std::string::npos, missing);
  BOOST_TEST(missing.find("no CUDA device 7") != std::string::npos, missing);
  const std::string cpu_name = dtrain_test::error_of([] { one_device_strategy<gpu_backend>("/cpu:0"); });
  BOOST_TEST(cpu_name.find("'/cpu:0' is not a GPU device name") != std::string::npos, cpu_name);
  const std::string wrong_type = dtrain_test::error_of([] { one_device_strategy<>("/gpu:0"); });
  BOOST_TEST(wrong_type.find("use one_device_strategy<dtrain::cuda>") != std::string::npos, wrong_type);
  BOOST_CHECK_THROW(one_device_strategy<>("/tpu:0"), config_error);
}

#ifndef DTRAIN_TEST_GPU
BOOST_AUTO_TEST_CASE(out_of_memory_names_the_device_and_the_sizes) {
  const std::size_t before = emulated_runtime::capacity;
  emulated_runtime::capacity = std::size_t{64} << 20;
  const cuda_emulated d(0, cuda_options{});
  auto held = d.allocate<float>(std::size_t{10} << 20);  // 40 MiB
  const std::string msg = dtrain_test::error_of([&] { d.allocate<float>(std::size_t{8} << 20); });
  emulated_runtime::capacity = before;
  BOOST_TEST(msg.find("cuda device 0 (emulated on the host): out of memory allocating 32.0 MiB for a buffer") == 0u, msg);
  BOOST_TEST(msg.find("40.0 MiB in use by dtrain") != std::string::npos, msg);
  BOOST_TEST(msg.find("of 64.0 MiB") != std::string::npos, msg);
}

#endif

/// Trains small_net for 2 epochs (global batch 12) under strategy `s`: its weights and accuracy.
template <class Strategy>
std::pair<std::vector<float>, float> train_small(Strategy& s) {
  auto m = s.template make_model<dtrain_test::small_net>(3);
  m.compile({.optimizer = adam{{.learning_rate = 0.01f}}, .loss = sparse_categorical_crossentropy{{.from_logits = true}},
             .metrics = {accuracy{}}});
  auto [x, y] = dtrain_test::three_class_problem(36);
  m.fit(x, y, {.epochs = 2, .verbose = 0, .batch_size = 12, .shuffle = false});
  return {m.get_weights(), m.evaluate(x, y, {.verbose = 0})["accuracy"]};
}

BOOST_AUTO_TEST_CASE(mirrored_strategy_on_every_gpu_trains_like_one_replica) {
  // every GPU of the machine (the emulator's two here): the global batch split among them, gradients
  // summed through host copies or by NCCL (one communicator per device, grouped calls), each replica's
  // weights the same as one replica's with the whole batch
  mirrored_strategy<comm::threads, gpu_backend> all;
  BOOST_TEST_MESSAGE("mirrored_strategy<" << gpu_backend::name << "> on " << all.num_replicas_in_sync() << " device(s)");
  mirrored_strategy<comm::threads, gpu_backend> first({"/gpu:0"});
  const auto one = train_small(first), many = train_small(all);
  BOOST_TEST(dtrain_test::weights_close(many.first, one.first));
  BOOST_TEST(many.second == one.second, tt::tolerance(1e-6f));
#ifdef DTRAIN_TEST_HAS_NCCL
  mirrored_strategy<gpu_nccl, gpu_backend> by_nccl(all.devices());
  BOOST_TEST(by_nccl.reduces_device_gradients());
  const auto nccl = train_small(by_nccl);
  BOOST_TEST(dtrain_test::weights_close(nccl.first, one.first));
  BOOST_TEST(nccl.second == one.second, tt::tolerance(1e-6f));
#endif
}

BOOST_AUTO_TEST_CASE(central_storage_strategy_on_every_gpu_trains_like_mirrored) {
  // the variables on one GPU (the first, or the one named), the others reading them through host memory
  // after its update: the same numbers as mirrored_strategy's, where every GPU makes the update
  mirrored_strategy<comm::threads, gpu_backend> mirrored;
  central_storage_strategy<gpu_backend> central;
  BOOST_TEST(central.devices() == mirrored.devices());
  BOOST_TEST(central.parameter_device() == "/gpu:0");
  const auto m = train_small(mirrored), c = train_small(central);
  BOOST_TEST(c.first == m.first, tt::per_element());
  BOOST_TEST(c.second == m.second);
  if (mirrored.num_replicas_in_sync() > 1) {
    central_storage_strategy<gpu_backend> second({}, "/gpu:1");
    BOOST_TEST(second.devices().front() == "/gpu:1");
    BOOST_TEST(second.parameter_device() == "/gpu:1");
    BOOST_TEST(dtrain_test::weights_close(train_small(second).first, m.first));
  }
  const std::string cpu = dtrain_test::error_of([] { central_storage_strategy<gpu_backend>({}, "/cpu:0"); });
  BOOST_TEST(cpu.find("parameter_device '/cpu:0': variables in host memory with GPU replicas") != std::string::npos, cpu);
  const std::string absent = dtrain_test::error_of([] { central_storage_strategy<gpu_backend>({"/gpu:0"}, "/gpu:7"); });
  BOOST_TEST(absent.find("is not one of the compute devices") != std::string::npos, absent);
}

BOOST_AUTO_TEST_CASE(two_models_of_one_strategy_train_in_turn) {
  // every model a strategy makes sums its gradients through the strategy: making a second one must not
  // take the first one's way away (a fit of one epoch, then two of the other, then one more of the first
  // ends where two epochs of either do)
  mirrored_strategy<comm::threads, gpu_backend> all;
  auto first = all.make_model<dtrain_test::small_net>(3), second = all.make_model<dtrain_test::small_net>(3);
  auto [x, y] = dtrain_test::three_class_problem(36);
  for (auto* m : {&first, &second})
    m->compile({.optimizer = sgd{{.learning_rate = 0.05f}}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
  const fit_options o{.epochs = 1, .verbose = 0, .batch_size = 12, .shuffle = false};
  first.fit(x, y, o);
  second.fit(x, y, {.epochs = 2, .verbose = 0, .batch_size = 12, .shuffle = false});
  first.fit(x, y, o);
  BOOST_TEST(dtrain_test::weights_close(first.get_weights(), second.get_weights()));
}

#ifdef DTRAIN_TEST_HAS_NCCL
BOOST_AUTO_TEST_CASE(nccl_with_one_rank_trains_like_one_device) {
  // multi_worker_mirrored_strategy<comm::nccl> with a cluster of one: the gradients pass through NCCL
  // (a world of one) and the training equals one_device_strategy's on the same GPU
  one_device_strategy<gpu_backend> single("/gpu:0");
  multi_worker_mirrored_strategy<gpu_nccl, gpu_backend> mw({}, cluster_info{});
  BOOST_TEST(mw.reduces_device_gradients());
  const auto a = train_small(single), b = train_small(mw);
  BOOST_TEST(dtrain_test::weights_close(b.first, a.first));
  BOOST_TEST(b.second == a.second, tt::tolerance(1e-6f));
}
#endif

#ifndef DTRAIN_TEST_GPU
BOOST_AUTO_TEST_CASE(a_missing_device_is_named) {
  const std::string msg = dtrain_test::error_of([] { cuda_emulated d(3); });
  BOOST_TEST(msg.find("no CUDA device 3") != std::string::npos, msg);
}
#endif

BOOST_AUTO_TEST_SUITE_END()
