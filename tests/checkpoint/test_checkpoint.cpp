// Saving and restoring: safetensors files (checked against numpy when present), corrupt files,
// mismatched models, checkpoint_manager's fallback, and backup_and_restore's exact resume.
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "support/gradcheck.hpp"
#include "support/helpers.hpp"

#include <dtrain/callbacks/backup_and_restore.hpp>
#include <dtrain/checkpoint/checkpoint_manager.hpp>

using namespace dtrain;
using dtrain_test::error_of;
using dtrain_test::have_numpy;
using dtrain_test::temp_dir;
namespace fs = std::filesystem;
namespace tt = boost::test_tools;

namespace {
using net = sequential<input<5>, dense<7, relu>, dropout<0.2f>, dense<3>>;
using other = sequential<input<5>, dense<8, relu>, dense<3>>;

std::pair<tensor, tensor> problem(std::size_t n) {
  rng r(3);
  tensor x = zeros({n, 5}), y = zeros({n});
  for (auto& v : x) v = r.normal();
  for (auto& v : y) v = float(r.below(3));
  return {x, y};
}
net compiled(std::uint64_t seed = 1) {
  net m(seed);
  m.compile({.optimizer = adam{{.learning_rate = 0.01f}}, .loss = sparse_categorical_crossentropy{{.from_logits = true}},
             .metrics = {accuracy{}}});
  return m;
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
void flip_byte(const fs::path& p, std::size_t at) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(std::streamoff(at));
  char c = 0;
  f.get(c);
  f.seekp(std::streamoff(at));
  f.put(char(c ^ 0x10));
}
/// Throws after `limit` batches: a crash in the middle of training.
struct crash_after : callback {
  std::int64_t limit, seen = 0;
  explicit crash_after(std::int64_t l) : limit(l) {}
  void on_train_batch_end(std::int64_t, const logs&) override {
    if (++seen == limit) throw std::runtime_error("simulated crash");
  }
};
}  // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_files)

BOOST_AUTO_TEST_CASE(weights_round_trip_with_keras_names) {
  temp_dir t;
  net a(1), b(2);
  checkpoint::save_weights(a, t.path / "w.safetensors");
  const auto f = checkpoint::load_safetensors(t.path / "w.safetensors");
  BOOST_TEST(f.find("layers/dense/vars/0") != nullptr);
  BOOST_TEST((f.find("layers/dense_1/vars/1")->shape == std::vector<std::size_t>{3}));
  BOOST_TEST(f.metadata.at("dtrain.version") == version);
  checkpoint::load_weights(b, t.path / "w.safetensors");
  BOOST_TEST(a.get_weights() == b.get_weights(), tt::per_element());
}

BOOST_AUTO_TEST_CASE(numpy_reads_the_safetensors_file) {
  if (!have_numpy()) {
    BOOST_TEST_MESSAGE("numpy not installed: interop skipped");
    return;
  }
  temp_dir t;
  net a(1);
  checkpoint::save_weights(a, t.path / "w.safetensors");
  const auto kernel = a.layer_parameters<0>();
  const std::string code =
      "import json, struct, numpy as np\n"
      "b = open('" + (t.path / "w.safetensors").string() + "', 'rb').read()\n"
      "n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])\n"
      "e = h['layers/dense/vars/0']; s, t = e['data_offsets']\n"
      "k = np.frombuffer(b[8 + n + s:8 + n + t], '<f4').reshape(e['shape'])\n"
      "assert k.shape == (5, 7), k.shape\n"
      "assert abs(float(k[1, 2]) - (" + std::to_string(kernel[1 * 7 + 2]) + ")) < 1e-6\n";
  std::ofstream(t.path / "check.py") << code;
  BOOST_TEST(std::system(("/usr/bin/python3 " + (t.path / "check.py").string()).c_str()) == 0);
}

BOOST_AUTO_TEST_CASE(damaged_files_are_detected) {
  temp_dir t;
  net a(1);
  const auto p = t.path / "w.safetensors";
  checkpoint::save_weights(a, p);
  const auto size = fs::file_size(p);
  fs::copy_file(p, t.path / "flip.safetensors");
  flip_byte(t.path / "flip.safetensors", size - 10);
  BOOST_TEST(error_of([&] { checkpoint::load_weights(a, t.path / "flip.safetensors"); }).find("checksum mismatch") != std::string::npos);
  fs::copy_file(p, t.path / "short.safetensors");
  fs::resize_file(t.path / "short.safetensors", size - 50);
  BOOST_TEST(error_of([&] { checkpoint::load_weights(a, t.path / "short.safetensors"); }).find("truncated") != std::string::npos);
  std::ofstream(t.path / "empty.safetensors").close();
  BOOST_TEST(error_of([&] { checkpoint::load_weights(a, t.path / "empty.safetensors"); }).find("truncated") != std::string::npos);
  // a tensor of another dtype
  const std::string h = R"({"layers/dense/vars/0":{"dtype":"F64","shape":[5,7],"data_offsets":[0,280]}})";
  std::string bytes(8, '\0');
  bytes[0] = char(h.size());
  bytes += h + std::string(280, '\0');
  std::ofstream(t.path / "f64.safetensors", std::ios::binary) << bytes;
  BOOST_TEST(error_of([&] { checkpoint::load_weights(a, t.path / "f64.safetensors"); }).find("dtype \"F64\"") != std::string::npos);
  // a hostile file: a shape whose element count wraps 2^64 (4 * 2^62 * 2^2 bytes "fit" offsets of 0), and a folder
  const std::string wrap = R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})";
  std::string wb(8, '\0');
  wb[0] = char(wrap.size());
  std::ofstream(t.path / "wrap.safetensors", std::ios::binary) << wb + wrap;
  BOOST_TEST(error_of([&] { checkpoint::load_weights(a, t.path / "wrap.safetensors"); }).find("more values than the file holds") !=
             std::string::npos);
  fs::create_directory(t.path / "folder.safetensors");
  BOOST_TEST(error_of([&] { checkpoint::load_weights(a, t.path / "folder.safetensors"); }).find("not a regular file") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(mismatched_models_are_refused_naming_the_difference) {
  temp_dir t;
  net a(1);
  other o(1);
  checkpoint::save_weights(a, t.path / "w.safetensors");
  const auto before = o.get_weights();
  const std::string m = error_of([&] { checkpoint::load_weights(o, t.path / "w.safetensors"); });
  BOOST_TEST(m.find("another architecture") != std::string::npos, m);
  BOOST_TEST(m.find("dense:Dense[(5, 7)|(7,)]") != std::string::npos, m);
  BOOST_TEST(o.get_weights() == before, tt::per_element());  // untouched
  // a file without dtrain's signature (from elsewhere) that lacks a tensor
  checkpoint::save_safetensors(t.path / "partial.safetensors",
                               {{"layers/dense/vars/0", {5, 7}, a.layer_parameters<0>().first(35)}});
  BOOST_TEST(error_of([&] { checkpoint::load_weights(a, t.path / "partial.safetensors"); }).find("no tensor 'layers/dense/vars/1'") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(model_with_optimizer_resumes_bitwise) {
  temp_dir t;
  auto [x, y] = problem(32);
  net straight = compiled();
  for (int i = 0; i < 6; ++i) straight.train_step(x, y);
  net first = compiled();
  for (int i = 0; i < 3; ++i) first.train_step(x, y);
  checkpoint::save_model(first, t.path / "m.safetensors", {{"note", "three steps"}});
  net second = compiled(99);  // other initial weights: all of it comes from the file
  const auto meta = checkpoint::restore_model(second, t.path / "m.safetensors");
  BOOST_TEST(meta.at("note") == "three steps");
  second.generator() = first.generator();  // dropout masks continue too (backups save this)
  for (int i = 0; i < 3; ++i) second.train_step(x, y);
  BOOST_TEST(second.get_weights() == straight.get_weights(), tt::per_element());
  auto loaded = checkpoint::load_model<net>(t.path / "m.safetensors");
  BOOST_TEST(loaded.get_weights() == first.get_weights(), tt::per_element());
}

BOOST_AUTO_TEST_CASE(every_optimizer_schedule_and_metric_resumes_bitwise_through_a_model_file) {
  // each new optimizer (its slots and step count) and schedule, and the metrics the file names: three
  // steps, save, load_model, three more equal six straight
  temp_dir t;
  auto [x, y] = problem(32);
  const std::vector<any_optimizer> optimizers{
      adagrad{{.learning_rate = 0.05f}}, adamax{{.learning_rate = cosine_decay{0.02f, 10, 0.1f}}}, nadam{},
      lion{{.learning_rate = polynomial_decay{0.01f, 8}}}, sgd{{.learning_rate = inverse_time_decay{0.1f, 4, 0.5f}}},
      adam{{.learning_rate = 0.01f, .use_ema = true, .ema_momentum = 0.9f}},
      loss_scale_optimizer(adam{{.learning_rate = 0.01f}}, {.initial_scale = 8.0f, .dynamic_growth_steps = 2})};
  for (const auto& o : optimizers) {
    BOOST_TEST_CONTEXT(o.name()) {
      auto make = [&](std::uint64_t seed) {
        net m(seed);
        m.compile({.optimizer = o, .loss = sparse_categorical_crossentropy{{.from_logits = true}},
                   .metrics = {sparse_top_k_categorical_accuracy{2}, sparse_categorical_crossentropy{{.from_logits = true}}}});
        return m;
      };
      net straight = make(1);
      for (int i = 0; i < 6; ++i) straight.train_step(x, y);
      net first = make(1);
      for (int i = 0; i < 3; ++i) first.train_step(x, y);
      checkpoint::save_model(first, t.path / "m.safetensors");
      auto second = checkpoint::load_model<net>(t.path / "m.safetensors");
      BOOST_TEST(second.optimizer().name() == o.name());
      BOOST_TEST(second.metrics().size() == 2u);
      second.generator() = first.generator();
      for (int i = 0; i < 3; ++i) second.train_step(x, y);
      BOOST_TEST(second.get_weights() == straight.get_weights(), tt::per_element());
      BOOST_TEST(second.optimizer().iterations() == 6);
      BOOST_TEST(second.optimizer().state().slots == straight.optimizer().state().slots, tt::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(fit_with_use_ema_ends_on_the_average_and_resumes_bitwise) {
  // Keras: fit ends with the weights' moving average swapped in; a backup mid-fit holds the average with
  // the optimizer's slots, so a resumed fit ends on the same average
  temp_dir t;
  auto [x, y] = problem(40);
  auto run = [&](std::vector<callback_ref> cbs) {
    net m(1);
    m.compile({.optimizer = adam{{.learning_rate = 0.01f, .use_ema = true, .ema_momentum = 0.8f}},
               .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
    m.fit(data::from_tensor_slices(x, y) | data::batch(8), {.epochs = 3, .callbacks = callback_list(std::move(cbs)), .verbose = 0});
    return std::pair{m.get_weights(), m.optimizer().state().slots};
  };
  struct crash_after : callback {
    int seen = 0;
    void on_train_batch_end(std::int64_t, const logs&) override {
      if (++seen == 7) throw std::runtime_error("simulated crash");
    }
  };
  const auto straight = run({});
  // the weights are the average: the last n slot values (after Adam's m and v)
  const std::size_t n = net::param_count;
  BOOST_REQUIRE_EQUAL(straight.second.size(), 3 * n);
  const std::vector<float> average(straight.second.end() - std::ptrdiff_t(n), straight.second.end());
  BOOST_TEST(std::vector<float>(straight.first.begin(), straight.first.begin() + std::ptrdiff_t(n)) == average,
             tt::per_element());
  BOOST_CHECK_THROW(run({backup_and_restore({.backup_dir = t.path / "b", .save_freq = std::int64_t(3)}), crash_after{}}),
                    std::runtime_error);
  const auto resumed = run({backup_and_restore({.backup_dir = t.path / "b", .save_freq = std::int64_t(3)})});
  BOOST_TEST(resumed.first == straight.first, tt::per_element());
}

BOOST_AUTO_TEST_CASE(load_model_then_fit_goes_on_like_an_uninterrupted_fit) {
  // Keras: load_model returns the model compiled as saved, its optimizer keeping moments, iteration
  // count and schedule position; fit then goes on as if never stopped (same data order, no dropout).
  using plain = sequential<input<5>, dense<7, relu>, dense<3>>;
  auto [x, y] = problem(32);
  const std::vector<compile_options> settings = {
      {.optimizer = adam{{.learning_rate = exponential_decay{.initial_learning_rate = 0.02f, .decay_steps = 3, .decay_rate = 0.5f}}},
       .loss = sparse_categorical_crossentropy{{.from_logits = true}}, .metrics = {sparse_categorical_accuracy{}}},
      {.optimizer = sgd{{.learning_rate = piecewise_constant_decay{{4, 8}, {0.1f, 0.05f, 0.01f}}, .momentum = 0.9f, .nesterov = true}},
       .loss = sparse_categorical_crossentropy{{.from_logits = true, .reduction = reduction::sum}}, .metrics = {accuracy{}}},
      {.optimizer = rmsprop{{.learning_rate = 0.01f, .momentum = 0.5f, .centered = true}},
       .loss = sparse_categorical_crossentropy{{.from_logits = true}}},
      {.optimizer = adamw{{.learning_rate = 0.01f, .weight_decay = 0.1f, .amsgrad = true}},
       .loss = sparse_categorical_crossentropy{{.from_logits = true}}}};
  for (std::size_t k = 0; k < settings.size(); ++k) {
    BOOST_TEST_CONTEXT("settings " << k) {
      temp_dir t;
      const fit_options epochs{.epochs = 1, .verbose = 0, .batch_size = 8, .shuffle = false};
      plain straight(1), first(1);
      straight.compile(settings[k]), first.compile(settings[k]);
      for (int e = 0; e < 3; ++e) straight.fit(x, y, epochs);
      first.fit(x, y, epochs);
      checkpoint::save_model(first, t.path / "m.safetensors");
      auto loaded = checkpoint::load_model<plain>(t.path / "m.safetensors");
      BOOST_REQUIRE(loaded.compiled());
      BOOST_TEST(loaded.optimizer().name() == first.optimizer().name());
      BOOST_TEST(loaded.optimizer().iterations() == 4);
      BOOST_TEST((loaded.losses()[0].get_reduction() == first.losses()[0].get_reduction()));
      BOOST_TEST(loaded.metrics().size() == first.metrics().size());
      for (int e = 0; e < 2; ++e) loaded.fit(x, y, epochs);
      BOOST_TEST(loaded.get_weights() == straight.get_weights(), tt::per_element());
      BOOST_TEST(loaded.evaluate(x, y, {.verbose = 0})["loss"] == straight.evaluate(x, y, {.verbose = 0})["loss"]);
    }
  }
}

void rewrite(const fs::path& from, const fs::path& to,
             const std::function<void(std::map<std::string, std::string>&, std::vector<checkpoint::named_tensor>&)>& edit);

BOOST_AUTO_TEST_CASE(load_model_without_a_compile_config_or_with_a_broken_one) {
  temp_dir t;
  auto [x, y] = problem(16);
  // a schedule written as a lambda has no config: the model loads uncompiled, as Keras needs
  // custom_objects for it; compile + restore_model then restores the optimizer state
  net m(1);
  m.compile({.optimizer = adam{{.learning_rate = [](std::int64_t) { return 0.01f; }}},
             .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
  m.train_step(x, y);
  checkpoint::save_model(m, t.path / "lambda.safetensors");
  BOOST_TEST(!checkpoint::load_model<net>(t.path / "lambda.safetensors").compiled());
  // a config that is not JSON, or names an optimizer dtrain does not have, is an io_error naming it
  net c = compiled();
  c.train_step(x, y);
  checkpoint::save_model(c, t.path / "ok.safetensors");
  for (const std::string& bad : {std::string("{not json"), std::string(R"({"optimizer": {"class_name": "lion", "config": {}}})")}) {
    rewrite(t.path / "ok.safetensors", t.path / "bad.safetensors", [&](auto& meta, auto&) { meta["dtrain.compile"] = bad; });
    const std::string e = error_of([&] { checkpoint::load_model<net>(t.path / "bad.safetensors"); });
    BOOST_TEST((contains(e, "bad.safetensors") && contains(e, "compile config")), e);
  }
}

BOOST_AUTO_TEST_CASE(moving_statistics_are_saved_with_keras_names_and_resume_bitwise) {
  using normed = sequential<input<5>, dense<4>, batch_normalization<>, relu, dense<3>>;
  auto make = [](std::uint64_t seed) {
    normed m(seed);
    m.compile({.optimizer = adam{{.learning_rate = 0.01f}}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
    return m;
  };
  temp_dir t;
  auto [x, y] = problem(16);
  normed straight = make(1), first = make(1);
  for (int i = 0; i < 6; ++i) straight.train_step(x, y);
  for (int i = 0; i < 3; ++i) first.train_step(x, y);
  checkpoint::save_model(first, t.path / "m.safetensors");
  const auto f = checkpoint::load_safetensors(t.path / "m.safetensors");
  // Keras' order: gamma, beta, moving_mean, moving_variance; the optimizer keeps slots for the 6
  // trainable variables only (iterations, learning rate, then m and v of each)
  const auto w = first.get_weights();
  BOOST_REQUIRE(f.find("layers/batch_normalization/vars/2"));
  BOOST_TEST(f.find("layers/batch_normalization/vars/2")->data ==
                 std::vector<float>(w.begin() + normed::param_count, w.begin() + normed::param_count + 4),
             tt::per_element());
  BOOST_TEST(f.find("layers/batch_normalization/vars/3")->data[0] != 1.0f);  // it moved from its initial value
  std::size_t optimizer_tensors = 0;
  for (const auto& tensor : f.tensors) optimizer_tensors += tensor.name.rfind("optimizer/", 0) == 0;
  BOOST_TEST(optimizer_tensors == 2u + 2u * 6u);
  normed second = make(99);
  checkpoint::restore_model(second, t.path / "m.safetensors");
  BOOST_TEST(second.get_weights() == first.get_weights(), tt::per_element());
  for (int i = 0; i < 3; ++i) second.train_step(x, y);
  BOOST_TEST(second.get_weights() == straight.get_weights(), tt::per_element());
}

BOOST_AUTO_TEST_CASE(damaged_optimizer_metadata_is_an_io_error_and_allocates_nothing_it_claims) {
  // a hostile file: every value is a claim of the file: a clear error, the model untouched
  temp_dir t;
  net m = compiled();
  auto [x, y] = problem(16);
  m.train_step(x, y);
  const auto bad = [&](const std::string& key, const std::string& value) {
    checkpoint::save_model(m, t.path / "bad.safetensors", {{key, value}});
    net r = compiled(5);
    const auto before = r.get_weights();
    const std::string e = error_of([&] { checkpoint::restore_model(r, t.path / "bad.safetensors"); });
    BOOST_TEST(r.get_weights() == before, tt::per_element());
    return e;
  };
  for (const std::string v : {"abc", "-5", "99999999999999999999", ""})
    BOOST_TEST(contains(bad("dtrain.optimizer.iterations", v), "metadata 'dtrain.optimizer.iterations' is"));
  // 10^15 slots of the parameters: refused before allocating (the file cannot hold them)
  BOOST_TEST(contains(bad("dtrain.optimizer.slots", "1000000000000000"), "metadata 'dtrain.optimizer.slots' is"));
  BOOST_TEST(contains(bad("dtrain.optimizer.slots", "1000"), "metadata 'dtrain.optimizer.slots' is"));
  BOOST_TEST(contains(bad("dtrain.optimizer", "sgd"), "holds the state of optimizer sgd"));
  // the metadata and the int64 tensor optimizer/vars/0 must agree (one step was taken)
  BOOST_TEST(contains(bad("dtrain.optimizer.iterations", "7"), "optimizer/vars/0 says 1 iterations but the metadata says 7"));
}

BOOST_AUTO_TEST_CASE(the_iteration_count_is_int64_as_keras_keeps_it) {
  temp_dir t;
  net m = compiled();
  auto [x, y] = problem(16);
  for (int i = 0; i < 3; ++i) m.train_step(x, y);
  checkpoint::save_model(m, t.path / "m.safetensors");
  const auto f = checkpoint::load_safetensors(t.path / "m.safetensors");
  const auto* it = f.find("optimizer/vars/0");
  BOOST_REQUIRE(it != nullptr);
  BOOST_TEST(it->data.empty());
  BOOST_TEST((it->int64 == std::vector<std::int64_t>{m.optimizer().iterations()}));
  BOOST_TEST(m.optimizer().iterations() == 3);
  BOOST_TEST(f.find("optimizer/vars/1")->data.size() == 1u);
  BOOST_TEST(f.metadata.at("format") == "keras");  // Keras' names and layouts, not PyTorch's ("pt")

  // int64 values beyond float's (and double's) exact range round-trip, and their checksum guards them
  const std::vector<std::int64_t> big{(std::int64_t(1) << 60) + 1, -3};
  const std::vector<float> w{1.5f, -2.0f, 0.25f};
  checkpoint::save_safetensors(t.path / "i64.safetensors", {{"w", {3}, w}, {"n", {2}, {}, big}});
  const auto g = checkpoint::load_safetensors(t.path / "i64.safetensors");
  BOOST_TEST(g.find("n")->int64 == big, tt::per_element());
  BOOST_TEST(g.find("w")->data == w, tt::per_element());
  BOOST_TEST(g.find("w")->int64.empty());
  flip_byte(t.path / "i64.safetensors", fs::file_size(t.path / "i64.safetensors") - 3);
  BOOST_TEST(contains(error_of([&] { checkpoint::load_safetensors(t.path / "i64.safetensors"); }),
                      "checksum mismatch in tensor 'n'"));

  // a weight stored as I64 is refused by name, not copied as nothing
  net a(1);
  std::vector<checkpoint::tensor_view> views;
  const std::vector<float> aw = a.get_weights();
  const std::vector<std::int64_t> ints(5 * 7, 1);
  for (auto v : checkpoint::weight_views(a, aw))
    views.push_back(v.name == "layers/dense/vars/0" ? checkpoint::tensor_view{v.name, v.shape, {}, ints} : v);
  checkpoint::save_safetensors(t.path / "int_weights.safetensors", views);
  BOOST_TEST(contains(error_of([&] { checkpoint::load_weights(a, t.path / "int_weights.safetensors"); }),
                      "tensor 'layers/dense/vars/0' is I64, not F32"));
}

BOOST_AUTO_TEST_CASE(an_edited_checkpoint_index_is_a_dtrain_error_or_ignored) {
  // hostile file names: parsed without exceptions that escape, and never lead outside the folder
  temp_dir t;
  net m = compiled();
  checkpoint::checkpoint_manager mgr(t.path, 2);
  const auto index = [&](const std::string& name) {
    std::ofstream(t.path / "checkpoint") << "model_checkpoint_path: \"" << name << "\"\nall_model_checkpoint_paths: \""
                                         << name << "\"\n";
  };
  index("ckpt-final");  // no number: numbering starts at 1
  BOOST_TEST(mgr.save(m).filename() == "ckpt-1.safetensors");
  index("ckpt-99999999999999999999");  // does not fit: ignored as well
  BOOST_TEST(mgr.save(m).filename() == "ckpt-1.safetensors");
  index("ckpt-9223372036854775807");  // the last number: nothing after it
  BOOST_CHECK_THROW(mgr.save(m), value_error);
  index("../outside");
  BOOST_TEST(contains(error_of([&] { mgr.save(m); }), "is not a checkpoint name in this folder"));
  BOOST_CHECK_THROW(checkpoint::latest_checkpoint(t.path), io_error);
}

BOOST_AUTO_TEST_CASE(checkpoint_manager_keeps_n_and_falls_back) {
  temp_dir t;
  checkpoint::checkpoint_manager mgr(t.path, 2);
  BOOST_TEST(!mgr.latest_checkpoint());
  net m = compiled();
  auto [x, y] = problem(16);
  std::vector<std::vector<float>> w;
  for (int i = 0; i < 3; ++i) {
    m.train_step(x, y);
    mgr.save(m);
    w.push_back(m.get_weights());
  }
  BOOST_TEST(mgr.checkpoints().size() == 2u);
  BOOST_TEST(mgr.latest_checkpoint()->filename() == "ckpt-3.safetensors");
  BOOST_TEST(!fs::exists(t.path / "ckpt-1.safetensors"));
  BOOST_TEST(checkpoint::latest_checkpoint(t.path)->filename() == "ckpt-3.safetensors");
  flip_byte(t.path / "ckpt-3.safetensors", fs::file_size(t.path / "ckpt-3.safetensors") - 4);  // damage the latest
  net r = compiled(5);
  const auto meta = mgr.restore_latest(r, nullptr);
  BOOST_REQUIRE(meta.has_value());
  BOOST_TEST(r.get_weights() == w[1], tt::per_element());  // ckpt-2
  BOOST_CHECK_THROW(checkpoint::checkpoint_manager(t.path, 0), value_error);
}

BOOST_AUTO_TEST_CASE(backup_and_restore_resumes_exactly) {
  auto [x, y] = problem(40);
  auto dataset = [&] { return data::from_tensor_slices(x, y) | data::shuffle(40, 3) | data::batch(8); };  // 5 batches
  for (const auto& freq : {std::variant<std::string, std::int64_t>(std::string("epoch")), std::variant<std::string, std::int64_t>(std::int64_t(3))}) {
    for (bool repeated : {false, true}) {
      temp_dir t;
      const fit_options base{.epochs = 4, .steps_per_epoch = repeated ? 4 : 0, .verbose = 0};
      auto run = [&](net& m, std::vector<callback_ref> extra) {
        fit_options o = base;
        o.callbacks = callback_list(std::move(extra));
        if (repeated) return m.fit(dataset() | data::repeat(), o);
        return m.fit(dataset(), o);
      };
      net straight = compiled();
      run(straight, {});
      net crashed = compiled();
      auto b = backup_and_restore({.backup_dir = t.path / "backup", .save_freq = freq});
      BOOST_CHECK_THROW(run(crashed, {b, crash_after(11)}), std::runtime_error);  // dies in epoch 2 or 3
      BOOST_REQUIRE(fs::exists(t.path / "backup"));
      net resumed = compiled(7);  // a new process: other weights until the backup is restored
      const history h = run(resumed, {backup_and_restore({.backup_dir = t.path / "backup", .save_freq = freq})});
      BOOST_TEST_CONTEXT("save_freq " << (freq.index() ? "3" : "epoch") << (repeated ? ", steps_per_epoch" : ", full passes")) {
        BOOST_TEST(resumed.get_weights() == straight.get_weights(), tt::per_element());
        BOOST_TEST(resumed.optimizer().iterations() == straight.optimizer().iterations());
        BOOST_TEST(!fs::exists(t.path / "backup"));  // removed after a successful fit
        BOOST_TEST(h.epochs.back() == 3);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_loss_scaled_float16_run_resumes_exactly_with_its_scale) {
  // a scale far too large at first: the first steps overflow and are skipped, and it grows every 3 finite
  // steps, so it keeps moving; a run resumed from the backup ends as the uninterrupted one, bit for bit
  auto [x, y] = problem(40);
  auto make = [](std::uint64_t seed) {
    net m(seed);
    m.set_dtype_policy(dtype_policy::mixed_float16());
    m.compile({.optimizer = loss_scale_optimizer(adam{{.learning_rate = 0.01f}},
                                                 {.initial_scale = 67108864.0f, .dynamic_growth_steps = 3}),
               .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
    return m;
  };
  temp_dir t;
  auto run = [&](net& m, std::vector<callback_ref> extra) {
    return m.fit(data::from_tensor_slices(x, y) | data::shuffle(40, 3) | data::batch(8),
                 {.epochs = 4, .callbacks = callback_list(std::move(extra)), .verbose = 0});
  };
  net straight = make(1);
  run(straight, {});
  BOOST_TEST(straight.optimizer().iterations() < 20);  // (steps were skipped)
  net crashed = make(1);
  BOOST_CHECK_THROW(run(crashed, {backup_and_restore({.backup_dir = t.path / "backup", .save_freq = std::int64_t(3)}),
                                  crash_after(11)}),
                    std::runtime_error);
  net resumed = make(7);
  run(resumed, {backup_and_restore({.backup_dir = t.path / "backup", .save_freq = std::int64_t(3)})});
  BOOST_TEST(resumed.get_weights() == straight.get_weights(), tt::per_element());
  BOOST_TEST((resumed.optimizer().state() == straight.optimizer().state()));
  BOOST_TEST(straight.optimizer().state().extra.at(1) != 67108864.0f);
}

BOOST_AUTO_TEST_CASE(a_two_output_model_resumes_mid_epoch_with_every_running_loss_and_metric) {
  struct x_in;
  struct trunk;
  struct cls;
  struct reg;
  using two_heads = functional<inputs<node<x_in, input<5>>>, node<trunk, dense<7, relu>>, dropout<0.2f>,
                               node<cls, dense<3>>, node<reg, dense<1>, trunk>, outputs<cls, reg>>;
  auto [x, y] = problem(40);
  tensor target = zeros({40, 1});
  for (std::size_t i = 0; i < 40; ++i) target(i, 0) = x(i, 0) - x(i, 1);
  const std::vector<tensor> xs{x}, ys{y, target};
  auto compiled_heads = [](std::uint64_t seed) {
    two_heads m(seed);
    m.compile({.optimizer = adam{{.learning_rate = 0.01f}},
               .losses = {sparse_categorical_crossentropy{{.from_logits = true}}, mean_squared_error{}},
               .loss_weights = {1.0f, 0.5f},
               .output_metrics = {{accuracy{}, mean_iou{{.num_classes = 3, .sparse_y_pred = false}}}, {}}});
    return m;
  };
  auto run = [&](two_heads& m, std::vector<callback_ref> cbs) {
    return m.fit(data::from_tensor_slices(xs, ys) | data::shuffle(40, 3) | data::batch(8),
                 {.epochs = 3, .callbacks = callback_list(std::move(cbs)), .verbose = 0});
  };
  temp_dir t;
  two_heads straight = compiled_heads(1);
  const history want = run(straight, {});
  two_heads crashed = compiled_heads(1);
  BOOST_CHECK_THROW(run(crashed, {backup_and_restore({.backup_dir = t.path, .save_freq = std::int64_t(2)}), crash_after(8)}),
                    std::runtime_error);  // backed up after batch 6: epoch 2, batch 1 of 5
  two_heads resumed = compiled_heads(9);
  const history got = run(resumed, {backup_and_restore({.backup_dir = t.path, .save_freq = std::int64_t(2)})});
  BOOST_TEST(resumed.get_weights() == straight.get_weights(), tt::per_element());
  // the resumed epoch's logs count the batches before the crash: the running losses were restored
  BOOST_REQUIRE(!got.epochs.empty());
  BOOST_TEST(got.epochs.front() == 1);
  for (const char* k : {"loss", "dense_1_loss", "dense_2_loss", "dense_1_accuracy", "dense_1_mean_iou"})
    for (std::size_t j = 0; j < got.epochs.size(); ++j)
      BOOST_TEST(got.history.at(k)[j] == want.history.at(k)[std::size_t(got.epochs[j])], k << " epoch " << got.epochs[j]);
}

BOOST_AUTO_TEST_CASE(sigterm_backs_up_at_the_step_and_resumes_exactly) {
  temp_dir t;
  auto [x, y] = problem(40);
  auto ds = data::from_tensor_slices(x, y) | data::shuffle(40, 3) | data::repeat() | data::batch(8);
  const fit_options base{.epochs = 3, .steps_per_epoch = 5, .verbose = 0};
  net straight = compiled();
  straight.fit(ds, base);
  net first = compiled();
  fit_options o = base;
  o.callbacks = {backup_and_restore({.backup_dir = t.path / "b", .save_freq = std::string("epoch")}),
                 lambda_callback({.on_train_batch_end = [](std::int64_t, const logs&) {
                   static int n = 0;
                   if (++n == 7) std::raise(SIGTERM);  // the orchestrator's notice, mid-epoch
                 }})};
  const std::string e = error_of([&] { first.fit(ds, o); });
  BOOST_TEST(e.find("preempted (SIGTERM) after epoch 2, batch 2") != std::string::npos, e);
  net resumed = compiled(3);
  resumed.fit(ds, {.epochs = 3, .steps_per_epoch = 5, .callbacks = {backup_and_restore({.backup_dir = t.path / "b"})}, .verbose = 0});
  BOOST_TEST(resumed.get_weights() == straight.get_weights(), tt::per_element());
  std::signal(SIGTERM, SIG_DFL);
}

// A backup taken after batch 6 of an epoch cannot be a position of a run whose epochs have 5 steps: the
// resume is refused, naming both, and the backup stays (it would otherwise skip the rest of the epoch).
BOOST_AUTO_TEST_CASE(a_backup_past_the_end_of_this_runs_epoch_is_refused) {
  temp_dir t;
  auto [x, y] = problem(40);
  auto ds = data::from_tensor_slices(x, y) | data::repeat() | data::batch(8);
  net first = compiled();
  BOOST_CHECK_THROW(first.fit(ds, {.epochs = 2, .steps_per_epoch = 10, .callbacks = {backup_and_restore(
                                       {.backup_dir = t.path, .save_freq = std::int64_t(3)}), crash_after(7)},
                                   .verbose = 0}),
                    std::runtime_error);  // backed up after batch 6
  net resumed = compiled();
  const std::string e = error_of([&] {
    resumed.fit(ds, {.epochs = 2, .steps_per_epoch = 5, .callbacks = {backup_and_restore({.backup_dir = t.path})},
                     .verbose = 0});
  });
  BOOST_TEST(e.find("the backup's position, epoch 1 after batch 6, is not a position of this run, whose epochs have "
                    "5 steps") != std::string::npos, e);
  BOOST_TEST(resumed.optimizer().iterations() == 6);  // the backup's, and no step after it
  net again = compiled();  // with the steps it was written with, it resumes
  again.fit(ds, {.epochs = 2, .steps_per_epoch = 10, .callbacks = {backup_and_restore({.backup_dir = t.path})},
                 .verbose = 0});
  BOOST_TEST(again.optimizer().iterations() == 20);
}

// A backup taken after an epoch's last batch, before its end (validation, on_epoch_end) ran, is a
// position of the run: the resume finishes that epoch and trains on as if nothing had happened.
BOOST_AUTO_TEST_CASE(a_backup_after_an_epochs_last_batch_resumes_at_its_end) {
  temp_dir t;
  auto [x, y] = problem(40);
  auto ds = data::from_tensor_slices(x, y) | data::repeat() | data::batch(8);
  net straight = compiled();
  straight.fit(ds, {.epochs = 2, .steps_per_epoch = 5, .verbose = 0});
  net first = compiled();
  BOOST_CHECK_THROW(first.fit(ds, {.epochs = 2, .steps_per_epoch = 5, .callbacks = {backup_and_restore(
                                       {.backup_dir = t.path, .save_freq = std::int64_t(5)}), crash_after(5)},
                                   .verbose = 0}),
                    std::runtime_error);  // backed up after batch 5 of 5
  net resumed = compiled();
  resumed.fit(ds, {.epochs = 2, .steps_per_epoch = 5, .callbacks = {backup_and_restore({.backup_dir = t.path})}, .verbose = 0});
  BOOST_TEST(resumed.optimizer().iterations() == 10);
  BOOST_TEST(resumed.get_weights() == straight.get_weights(), tt::per_element());
}

// A backup folder that cannot be made is an error naming it before the first step, not a failed backup
// after hours of training; the end of training empties the folder (tests/scripts/backup_folders.sh: a
// mount point and a read-only file system).
BOOST_AUTO_TEST_CASE(a_backup_folder_that_cannot_be_written_is_refused_before_training) {
  temp_dir t;
  std::ofstream(t.path / "file") << "not a folder";
  auto [x, y] = problem(40);
  net m = compiled();
  const std::string e = error_of([&] {
    m.fit(x, y, {.epochs = 1, .callbacks = {backup_and_restore({.backup_dir = t.path / "file" / "backup"})},
                 .verbose = 0, .batch_size = 8});
  });
  BOOST_TEST(e.find("backup_and_restore: cannot write backups to " + (t.path / "file" / "backup").string() +
                    " (Not a directory)") != std::string::npos, e);
  BOOST_TEST(m.optimizer().iterations() == 0);
}

// A learning rate a callback changed (ReduceLROnPlateau's way) is part of the backup: the resumed run
// goes on with the reduced rate, so it ends where an uninterrupted one does.
BOOST_AUTO_TEST_CASE(backup_and_restore_keeps_a_learning_rate_a_callback_changed) {
  struct halve_after_first_epoch : callback {
    void on_epoch_end(int epoch, const logs&) override {
      if (epoch == 0) model().optimizer().set_learning_rate(model().optimizer().learning_rate() / 2);
    }
  };
  auto [x, y] = problem(40);
  temp_dir t;
  const fit_options base{.epochs = 3, .verbose = 0, .batch_size = 8, .shuffle = false};
  auto run = [&](net& m, std::vector<callback_ref> extra) {
    fit_options o = base;
    o.callbacks = callback_list(std::move(extra));
    return m.fit(x, y, o);
  };
  net straight = compiled();
  run(straight, {halve_after_first_epoch()});
  net crashed = compiled();
  BOOST_CHECK_THROW(run(crashed, {halve_after_first_epoch(), backup_and_restore({.backup_dir = t.path}), crash_after(8)}),
                    std::runtime_error);  // in epoch 2, after the rate was halved and backed up
  net resumed = compiled(7);  // compiled with the original rate; the callback does not run again for epoch 0
  run(resumed, {halve_after_first_epoch(), backup_and_restore({.backup_dir = t.path})});
  BOOST_TEST(resumed.optimizer().learning_rate() == straight.optimizer().learning_rate());
  BOOST_TEST(resumed.get_weights() == straight.get_weights(), tt::per_element());
}

BOOST_AUTO_TEST_CASE(sidecar_evaluator_evaluates_each_new_checkpoint) {
  temp_dir t;
  auto [x, y] = problem(24);
  // the evaluator task: its own model, watching the chief's directory
  net watcher = compiled(9);
  std::vector<std::pair<std::string, float>> seen;
  checkpoint::sidecar_evaluator<net> eval(
      watcher, {.checkpoint_dir = t.path, .max_evaluations = 3, .idle_timeout = std::chrono::seconds(20),
                .poll_interval = std::chrono::milliseconds(20),
                .on_result = [&](const fs::path& p, const logs& l) { seen.emplace_back(p.filename().string(), l["loss"]); }});
  std::vector<float> expected;
  std::thread chief([&] {  // the chief: trains and checkpoints three times
    net m = compiled();
    checkpoint::checkpoint_manager mgr(t.path, 5);
    for (int i = 0; i < 3; ++i) {
      for (int s = 0; s < 5; ++s) m.train_step(x, y);
      expected.push_back(m.evaluate(x, y, {.verbose = 0})["loss"]);
      mgr.save(m);
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
    }
  });
  const int n = eval.start(data::from_tensor_slices(x, y) | data::batch(32));
  chief.join();
  BOOST_TEST(n == 3);
  BOOST_REQUIRE_EQUAL(seen.size(), 3u);
  BOOST_TEST(seen[2].first == "ckpt-3.safetensors");
  for (std::size_t i = 0; i < 3; ++i) BOOST_TEST(seen[i].second == expected[i], tt::tolerance(1e-5f));
}

BOOST_AUTO_TEST_CASE(sidecar_evaluator_stops_at_the_last_checkpoint_even_when_it_skipped_some) {
  temp_dir t;
  auto [x, y] = problem(24);
  net m = compiled();
  checkpoint::checkpoint_manager mgr(t.path, 5);
  for (int i = 0; i < 3; ++i) {  // written before the evaluator looks: it sees only ckpt-3
    m.train_step(x, y);
    mgr.save(m);
  }
  net watcher = compiled(9);
  std::vector<std::string> seen;
  checkpoint::sidecar_evaluator<net> eval(
      watcher, {.checkpoint_dir = t.path, .max_evaluations = 3, .idle_timeout = std::chrono::hours(1),
                .on_result = [&](const fs::path& p, const logs&) { seen.push_back(p.filename().string()); }});
  BOOST_TEST(eval.start(data::from_tensor_slices(x, y) | data::batch(32)) == 1);  // no wait for the idle timeout
  BOOST_TEST(seen == std::vector<std::string>{"ckpt-3.safetensors"}, tt::per_element());
}

BOOST_AUTO_TEST_CASE(sidecar_evaluator_watches_model_checkpoint_files) {
  // The Keras guide's pattern: the chief's fit saves with model_checkpoint, the evaluator (compiled
  // with another optimizer: it needs the weights only) evaluates each file as it appears, including a
  // file written again under the same name.
  auto [x, y] = problem(24);
  for (const std::string pattern : {"ckpt-{epoch}.safetensors", "latest.safetensors"}) {
    BOOST_TEST_CONTEXT(pattern) {
      temp_dir t;
      net watcher(9);
      watcher.compile({.optimizer = sgd{}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
      std::vector<float> seen, expected;
      checkpoint::sidecar_evaluator<net> eval(
          watcher, {.checkpoint_dir = t.path, .max_evaluations = 3, .idle_timeout = std::chrono::seconds(2),
                    .poll_interval = std::chrono::milliseconds(20),
                    .on_result = [&](const fs::path&, const logs& l) { seen.push_back(l["loss"]); }});
      std::thread chief([&] {
        net m = compiled();
        auto pause = lambda_callback({.on_epoch_end = [&](int, const logs&) {
          expected.push_back(m.evaluate(x, y, {.verbose = 0})["loss"]);
          std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the evaluator's turn
        }});
        m.fit(x, y, {.epochs = 3, .callbacks = {model_checkpoint({.filepath = (t.path / pattern).string(),
                                                                   .save_weights_only = true}), pause},
                     .verbose = 0, .batch_size = 8});
      });
      const int n = eval.start(data::from_tensor_slices(x, y) | data::batch(32));
      chief.join();
      BOOST_TEST(n == 3);
      BOOST_REQUIRE_EQUAL(seen.size(), expected.size());
      for (std::size_t i = 0; i < seen.size(); ++i) BOOST_TEST(seen[i] == expected[i], tt::tolerance(1e-5f));
    }
  }
}

BOOST_AUTO_TEST_CASE(backup_of_another_model_is_explained) {
  temp_dir t;
  auto [x, y] = problem(16);
  net m = compiled();
  BOOST_CHECK_THROW(m.fit(x, y, {.epochs = 3, .callbacks = {backup_and_restore({.backup_dir = t.path}), crash_after(3)},
                                 .verbose = 0, .batch_size = 8}),
                    std::runtime_error);
  other o(1);
  o.compile({.optimizer = adam{}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
  const std::string e = error_of([&] { o.fit(x, y, {.epochs = 3, .callbacks = {backup_and_restore({.backup_dir = t.path})}, .verbose = 0}); });
  BOOST_TEST(e.find("another architecture") != std::string::npos, e);
  net with_sgd(1);
  with_sgd.compile({.optimizer = sgd{}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
  const std::string e2 =
      error_of([&] { with_sgd.fit(x, y, {.epochs = 3, .callbacks = {backup_and_restore({.backup_dir = t.path})}, .verbose = 0}); });
  BOOST_TEST(e2.find("holds the state of optimizer adam but the model is compiled with SGD") != std::string::npos, e2);
  BOOST_CHECK_THROW(backup_and_restore({.backup_dir = t.path, .save_freq = std::string("batch")}), value_error);
}

/// A copy of the safetensors file `from` at `to`, with `edit` applied to its metadata and tensors.
void rewrite(const fs::path& from, const fs::path& to,
             const std::function<void(std::map<std::string, std::string>&, std::vector<checkpoint::named_tensor>&)>& edit) {
  auto f = checkpoint::load_safetensors(from);
  edit(f.metadata, f.tensors);
  std::vector<checkpoint::tensor_view> views;
  for (const auto& t : f.tensors) views.push_back({t.name, t.shape, t.data, t.int64});
  checkpoint::save_safetensors(to, views, f.metadata);
}
std::vector<char> bytes_of(const fs::path& p) { return checkpoint::detail::read_file(p); }

BOOST_AUTO_TEST_CASE(a_damaged_training_state_is_an_io_error_naming_what) {
  // a hostile backup: garbage positions, generators and metric states: a clear error naming the file and the
  // field, never a crash, and nothing restored
  temp_dir t;
  auto [x, y] = problem(16);
  net m = compiled();
  m.train_step(x, y);
  dtrain::detail::model_handle<net> saved(m);
  saved.position = {.epoch = 1, .step = 2, .data = {.iteration = 0, .produced = 2}, .global_batch = 8};
  const auto good = t.path / "good.safetensors", file = t.path / "state.safetensors";
  saved.states().write(saved.capture_state(), good);
  const auto state = nlohmann::json::parse(checkpoint::load_safetensors(good).metadata.at("dtrain.training_state"));
  struct damage {
    std::string field;
    nlohmann::json value;  // null: the field is removed
  };
  for (const auto& d : {damage{"epoch", -1}, damage{"step", "abc"}, damage{"step", 1.5}, damage{"data", {1, 2}},
                        damage{"data", nlohmann::json::object({{"iteration", 0}})},
                        damage{"data", nlohmann::json::object({{"iteration", 0}, {"produced", -1}})},
                        damage{"world_size", 0}, damage{"global_batch", nullptr}, damage{"generator", "not a generator"},
                        damage{"generator", 7}}) {
    rewrite(good, file, [&](auto& meta, auto&) {
      auto j = state;
      if (d.value.is_null()) j.erase(d.field);
      else j[d.field] = d.value;
      meta["dtrain.training_state"] = j.dump();
    });
    net r = compiled(2);
    dtrain::detail::model_handle<net> h(r);
    const std::string e = error_of([&] { h.states().read(bytes_of(file), file.string()); });
    BOOST_TEST(contains(e, "state.safetensors: the training state is damaged: \"" + d.field + "\""), d.value.dump() << ": " << e);
  }
  for (const std::string text : {"", "not json", "[1, 2]"}) {
    rewrite(good, file, [&](auto& meta, auto&) { meta["dtrain.training_state"] = text; });
    net r = compiled(2);
    dtrain::detail::model_handle<net> h(r);
    BOOST_TEST(contains(error_of([&] { h.states().read(bytes_of(file), file.string()); }), "not a JSON object"), text);
  }
  // the metric states: one value too few, or none
  for (int drop : {1, 0}) {
    rewrite(good, file, [&](auto&, auto& tensors) {
      for (auto& t : tensors)
        if (t.name == "dtrain/metric_states") t.data.pop_back(), t.shape = {t.data.size()};
      if (drop == 0) std::erase_if(tensors, [](const auto& t) { return t.name == "dtrain/metric_states"; });
    });
    net r = compiled(2);
    dtrain::detail::model_handle<net> h(r);
    const std::string e = error_of([&] { h.states().read(bytes_of(file), file.string()); });
    BOOST_TEST(contains(e, "dtrain/metric_states is " + std::string(drop ? "of 3 values" : "missing") +
                               "; the model's loss and metrics keep 4"), e);
  }
  // a saved model without a training state is not a backup
  checkpoint::save_model(m, file);
  dtrain::detail::model_handle<net> h(m);
  BOOST_TEST(contains(error_of([&] { h.states().read(bytes_of(file), file.string()); }), "holds no training state"));
}

BOOST_AUTO_TEST_CASE(a_training_state_round_trips_with_a_diverged_loss) {
  temp_dir t;
  auto [x, y] = problem(16);
  net m = compiled();
  m.train_step(x, y);
  m.loss_tracker().state().values[0] = std::numeric_limits<float>::quiet_NaN();  // a diverged loss
  dtrain::detail::model_handle<net> saved(m);
  saved.position = {.epoch = 2, .step = 3, .data = {.iteration = 2, .produced = 3}, .global_batch = 8};
  saved.states().write(saved.capture_state(), t.path / "s.safetensors");
  net r = compiled(2);
  dtrain::detail::model_handle<net> h(r);
  training_state s = h.states().read(bytes_of(t.path / "s.safetensors"), "s");
  BOOST_TEST(s.position.epoch == 2);
  BOOST_TEST(s.position.step == 3);
  BOOST_TEST(s.position.global_batch == 8);
  BOOST_TEST((s.position.data == saved.position.data));
  BOOST_TEST((r.get_weights() != m.get_weights()));  // reading changes nothing
  h.apply_state(std::move(s));
  BOOST_TEST((r.get_weights() == m.get_weights()));
  BOOST_TEST((r.optimizer().state() == m.optimizer().state()));
  BOOST_TEST(r.generator().state() == m.generator().state());
  BOOST_TEST(std::isnan(r.loss_tracker().state().values[0]));
  BOOST_TEST(r.metrics()[0].state().values[1] == m.metrics()[0].state().values[1]);
}

/// Trains `net` for 3 epochs of 5 batches with a backup every batch, crashing after `crash` batches
/// when it is positive; returns the weights.
std::vector<float> backed_up_run(net& m, const fs::path& dir, int crash = 0, backup_and_restore_options o = {}) {
  auto [x, y] = problem(40);
  o.backup_dir = dir;
  o.save_freq = std::int64_t(1);
  std::vector<callback_ref> cbs{backup_and_restore(o)};
  if (crash > 0) cbs.push_back(crash_after(crash));
  fit_options f{.epochs = 3, .verbose = 0, .batch_size = 8};
  f.callbacks = callback_list(cbs);
  m.fit(x, y, f);
  return m.get_weights();
}
/// The backup files in `dir`, newest first (the index's order, reversed).
std::vector<fs::path> backups_in(const fs::path& dir) {
  auto v = checkpoint::checkpoint_manager(dir, 2).checkpoints();
  std::reverse(v.begin(), v.end());
  return v;
}

BOOST_AUTO_TEST_CASE(backups_keep_two_and_a_damaged_newest_falls_back_to_the_previous) {
  temp_dir t;
  net straight = compiled();
  const auto want = backed_up_run(straight, t.path / "straight");
  for (const std::string how : {"flipped byte", "truncated", "deleted"}) {
    BOOST_TEST_CONTEXT(how) {
      const auto dir = t.path / how;
      net crashed = compiled();
      BOOST_CHECK_THROW(backed_up_run(crashed, dir, 7), std::runtime_error);
      const auto files = backups_in(dir);
      BOOST_REQUIRE_EQUAL(files.size(), 2u);  // two kept: after batch 7 and batch 6
      BOOST_TEST(files[0].filename() == "ckpt-7.safetensors");
      if (how == "flipped byte") flip_byte(files[0], fs::file_size(files[0]) - 3);
      if (how == "truncated") fs::resize_file(files[0], fs::file_size(files[0]) / 2);
      if (how == "deleted") fs::remove(files[0]);
      net resumed = compiled(7);
      BOOST_TEST(backed_up_run(resumed, dir) == want, tt::per_element());  // one batch earlier, still exact
    }
  }
}

BOOST_AUTO_TEST_CASE(no_usable_backup_is_refused_unless_asked_to_start_over) {
  temp_dir t;
  net crashed = compiled();
  BOOST_CHECK_THROW(backed_up_run(crashed, t.path, 4), std::runtime_error);
  for (const auto& f : backups_in(t.path)) flip_byte(f, fs::file_size(f) - 3);
  net r = compiled(7);
  const auto before = r.get_weights();
  const std::string e = error_of([&] { backed_up_run(r, t.path); });
  BOOST_TEST(contains(e, "backups exist in " + t.path.string() + " but none is usable"), e);
  BOOST_TEST(contains(e, "ckpt-4.safetensors: checksum mismatch"), e);
  BOOST_TEST(contains(e, "ckpt-3.safetensors: checksum mismatch"), e);
  BOOST_TEST(contains(e, "start_over_if_unusable"), e);
  BOOST_TEST((r.get_weights() == before));
  BOOST_TEST(fs::exists(t.path / "ckpt-4.safetensors"));  // nothing the user had is deleted
  // asked to: trains from scratch, exactly as a run without a backup
  net fresh = compiled(7), scratch = compiled(7);
  BOOST_TEST(backed_up_run(fresh, t.path, 0, {.start_over_if_unusable = true}) ==
                 backed_up_run(scratch, t.path / "none"),
             tt::per_element());
}

BOOST_AUTO_TEST_CASE(a_backup_that_does_not_verify_keeps_the_previous_ones) {
  temp_dir t;
  auto [x, y] = problem(8);
  net m = compiled();
  checkpoint::checkpoint_manager mgr(t.path, 2);
  mgr.save(m);
  mgr.save(m);
  BOOST_CHECK_THROW(mgr.save_with([&](const fs::path& p) { checkpoint::save_model(m, p); },
                                  [](const fs::path& p) { throw io_error(p.string() + ": does not read back"); }),
                    io_error);
  BOOST_TEST(!fs::exists(t.path / "ckpt-3.safetensors"));  // the bad one is gone, the two before stay
  BOOST_TEST(backups_in(t.path) == (std::vector<fs::path>{t.path / "ckpt-2.safetensors", t.path / "ckpt-1.safetensors"}),
             tt::per_element());
}

BOOST_AUTO_TEST_CASE(an_early_stop_deletes_the_backup_as_keras_does) {
  // run 1 stopped early and kept its backup; an identical run 2 then "resumed" after the stop
  temp_dir t;
  auto [x, y] = problem(16);
  net m = compiled();
  const history h = m.fit(x, y, {.epochs = 10,
                                 .callbacks = {backup_and_restore({.backup_dir = t.path / "b"}),
                                               early_stopping({.monitor = "loss", .min_delta = 100.0f})},
                                 .verbose = 0, .batch_size = 8});
  BOOST_TEST(h.epochs.size() == 2u);  // nothing improves by 100 after the first epoch: stopped after the second
  BOOST_TEST(!fs::exists(t.path / "b"));
}

BOOST_AUTO_TEST_CASE(callbacks_see_a_model_in_fit_evaluate_and_predict_and_never_a_dangling_one) {
  struct probe : callback {
    std::vector<std::string> seen;
    void note(const char* hook) { seen.push_back(std::string(hook) + (has_model() ? ":" + std::to_string(model().get_weights().size()) : ":none")); }
    void on_train_begin(const logs&) override { note("train"); }
    void on_test_begin(const logs&) override { note("test"); }
    void on_predict_begin(const logs&) override { note("predict"); }
    void on_predict_batch_end(std::int64_t, const logs&) override { note("predict_batch"); }
    void on_train_batch_end(std::int64_t b, const logs&) override {
      if (b == 1) throw std::runtime_error("crash");
    }
  };
  auto [x, y] = problem(16);
  net m = compiled();
  const std::string n = std::to_string(m.count_params());
  auto p = std::make_shared<probe>();
  BOOST_CHECK_THROW(m.fit(x, y, {.epochs = 1, .callbacks = {p}, .verbose = 0, .batch_size = 8}), std::runtime_error);
  BOOST_TEST(!p->has_model());  // the model of a fit that threw is not kept
  m.evaluate(x, y, {.verbose = 0, .callbacks = {p}});
  BOOST_TEST(!p->has_model());
  m.predict(x, {.batch_size = 8, .callbacks = {p}});
  BOOST_TEST(!p->has_model());
  BOOST_TEST(p->seen == (std::vector<std::string>{"train:" + n, "test:" + n, "predict:" + n, "predict_batch:" + n,
                                                  "predict_batch:" + n}),
             tt::per_element());
}

BOOST_AUTO_TEST_CASE(model_checkpoint_names_best_only_and_weights_only) {
  temp_dir t;
  auto [x, y] = problem(32);
  net m = compiled();
  const auto pattern = (t.path / "w-{epoch:02d}-{loss:.3f}.safetensors").string();
  const history h = m.fit(x, y, {.epochs = 3, .callbacks = {model_checkpoint({.filepath = pattern, .save_weights_only = true})},
                                 .verbose = 0, .batch_size = 8});
  char name[64];
  std::snprintf(name, sizeof name, "w-03-%.3f.safetensors", double(h["loss"][2]));
  BOOST_TEST(fs::exists(t.path / name), name);
  net back(5);
  checkpoint::load_weights(back, t.path / name);
  BOOST_TEST(back.get_weights() == m.get_weights(), tt::per_element());
  // save_best_only on a quantity that never improves (learning rate 0, no dropout): one file
  other frozen(1);
  frozen.compile({.optimizer = sgd{{.learning_rate = 0.0f}}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
  frozen.fit(x, y, {.epochs = 3, .callbacks = {model_checkpoint({.filepath = (t.path / "best-{epoch}.safetensors").string(),
                                                                 .monitor = "loss", .save_best_only = true})},
                    .verbose = 0, .shuffle = false});
  BOOST_TEST(fs::exists(t.path / "best-1.safetensors"));
  BOOST_TEST(!fs::exists(t.path / "best-2.safetensors"));
  BOOST_CHECK_THROW(model_checkpoint({.filepath = ""}), value_error);
  BOOST_TEST(detail::filepath_pattern("ckpt-{epoch:03d}-{val_loss:.2f}")(7, [] {
               logs l;
               l.set("val_loss", 0.25f);
               return l;
             }()) == "ckpt-007-0.25");
  // the pattern is read as Python's str.format reads it; what Python refuses is refused when the callback is
  // made, naming the field, not after an epoch of training (and never reaches printf)
  logs l;
  l.set("loss", -1.5f);
  BOOST_TEST(detail::filepath_pattern("{{x}}-{epoch:03}-{loss:+.1e}-{epoch:4d}")(7, l) == "{x}-007--1.5e+00-   7");
  for (const auto& [pattern, why] : std::vector<std::pair<std::string, std::string>>{
           {"m-{epoch:s}", "{epoch:s}: format type 's' does not apply to an integer (epoch)"},
           {"m-{loss:d}", "{loss:d}: format type 'd' does not apply to a logged float"},
           {"m-{epoch:.2d}", "an integer (epoch) takes no precision"},
           {"m-{epoch:%n}", "format \"%n\" is not [sign][0][width][.precision][type]"},
           {"m-{epoch", "an unclosed '{'"},
           {"m-}", "a single '}'"},
           {"m-{}", "the field {} has no name"}}) {
    const std::string m = error_of([&] { model_checkpoint({.filepath = pattern}); });
    BOOST_TEST(m.find("model_checkpoint: filepath \"" + pattern + "\"") != std::string::npos, m);
    BOOST_TEST(m.find(why) != std::string::npos, m);
  }
}

BOOST_AUTO_TEST_CASE(write_filepath_and_npz_export) {
  temp_dir t;
  BOOST_TEST(write_filepath(t.path / "model.safetensors", "worker", 0) == t.path / "model.safetensors");
  BOOST_TEST(write_filepath(t.path / "model.safetensors", "chief", 0, true) == t.path / "model.safetensors");
  const auto w1 = write_filepath(t.path / "model.safetensors", "worker", 1);
  BOOST_TEST(w1 == t.path / "workertemp_1" / "model.safetensors");
  BOOST_TEST(fs::is_directory(t.path / "workertemp_1"));
  remove_temp_dir(t.path / "model.safetensors", "worker", 1);
  BOOST_TEST(!fs::exists(t.path / "workertemp_1"));
  BOOST_TEST(write_filepath(t.path / "m", "worker", 0, true) != t.path / "m");  // worker 0 is not chief when a chief exists
  // the tutorial's form: the cluster spec says whether there is a chief job
  const cluster_spec with_chief{{{"chief", {"a:1"}}, {"worker", {"b:1", "c:1"}}}}, workers_only{{{"worker", {"b:1", "c:1"}}}};
  BOOST_TEST(write_filepath(t.path / "m", "worker", 0, with_chief) == t.path / "workertemp_0" / "m");
  BOOST_TEST(write_filepath(t.path / "m", "chief", 0, with_chief) == t.path / "m");
  BOOST_TEST(write_filepath(t.path / "m", "worker", 0, workers_only) == t.path / "m");
  remove_temp_dir(t.path / "m", "worker", 0, with_chief);
  BOOST_TEST(!fs::exists(t.path / "workertemp_0"));
  net m(1);
  checkpoint::export_npz(m, t.path / "w.npz");
  const auto arrays = data::read_npz(t.path / "w.npz");
  BOOST_TEST((extents_of(arrays.at("layers/dense/vars/0")) == extents{5, 7}));
  if (have_numpy()) {
    const std::string code = "import numpy as np; z = np.load('" + (t.path / "w.npz").string() +
                             "'); k = z['layers/dense_1/vars/0']; assert k.shape == (7, 3) and abs(float(k[6, 2]) - (" +
                             std::to_string(m.layer_parameters<2>()[6 * 3 + 2]) + ")) < 1e-6";
    BOOST_TEST(std::system(("/usr/bin/python3 -c \"" + code + "\"").c_str()) == 0);
  }
}

BOOST_AUTO_TEST_SUITE_END()
