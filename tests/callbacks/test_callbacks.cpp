// Callbacks driven by hand with fabricated logs, as fit would call them.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <regex>

#include "support/gradcheck.hpp"

using namespace dtrain;

namespace {
struct fake_model : training_model {
  std::vector<float> p{1.0f, 2.0f};
  any_optimizer opt = sgd{{.learning_rate = 0.1f}};
  std::vector<float> get_weights() override { return p; }
  void set_weights(std::span<const float> w) override { p.assign(w.begin(), w.end()); }
  any_optimizer& optimizer() override { return opt; }
  std::int64_t iterations() const override { return opt.iterations(); }
  std::vector<std::pair<std::string, std::vector<float>>> layer_weights() override { return {{"dense/kernel", p}}; }
  training_state capture_state() override { return {}; }
  checkpoint::state_io no_states{{}, 0};
  const checkpoint::state_io& states() override { return no_states; }
  void apply_state(training_state) override {}
  void save_weights(const std::filesystem::path&) override {}
  void broadcast_from_chief(chief_message&) override {}
  bool chief_decides(bool d) override { return d; }
  bool is_chief() const override { return true; }
  int num_replicas_in_sync() const override { return 1; }
  void barrier() override {}
};
logs make(std::initializer_list<std::pair<const char*, float>> kv) {
  logs l;
  for (auto& [k, v] : kv) l.set(k, v);
  return l;
}
template <class C>
void attach(C& c, fake_model& m, int epochs = 10, std::int64_t steps = 5, int verbose = 1) {
  c.set_model(&m);
  c.set_params({epochs, steps, verbose});
  c.on_train_begin({});
}
std::string read_file(std::FILE* f) {
  std::rewind(f);
  std::string s;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, f)) s.append(buf, n);
  return s;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(callbacks)

BOOST_AUTO_TEST_CASE(early_stopping_patience_and_restore) {
  fake_model m;
  early_stopping es({.monitor = "val_loss", .patience = 2, .restore_best_weights = true});
  attach(es, m);
  const float losses[] = {1.0f, 0.5f, 0.6f, 0.55f, 0.4f};
  int e = 0;
  for (; e < 5 && !m.stop_training; ++e) {
    if (e == 1) m.p = {9.0f, 9.0f};  // the weights at the best epoch
    else m.p = {float(e), float(e)};
    es.on_epoch_end(e, make({{"loss", 1.0f}, {"val_loss", losses[e]}}));
  }
  BOOST_TEST(e == 4);  // epochs 2 and 3 did not improve on 0.5
  BOOST_TEST(es.stopped_epoch() == 3);
  BOOST_TEST(es.best_epoch() == 1);
  es.on_train_end({});
  BOOST_TEST(m.p[0] == 9.0f);
}

BOOST_AUTO_TEST_CASE(early_stopping_modes_min_delta_baseline) {
  fake_model m;
  early_stopping acc({.monitor = "val_accuracy", .min_delta = 0.01f, .patience = 1});  // auto -> max
  attach(acc, m);
  acc.on_epoch_end(0, make({{"val_accuracy", 0.5f}}));
  acc.on_epoch_end(1, make({{"val_accuracy", 0.505f}}));  // below min_delta: no improvement
  BOOST_TEST(m.stop_training);
  fake_model m2;
  early_stopping base({.monitor = "loss", .patience = 2, .baseline = 0.1f});
  attach(base, m2);
  base.on_epoch_end(0, make({{"loss", 0.5f}}));
  base.on_epoch_end(1, make({{"loss", 0.4f}}));  // never beats the baseline
  BOOST_TEST(m2.stop_training);
  fake_model m3;
  early_stopping missing({.monitor = "val_auc"});
  attach(missing, m3);
  missing.on_epoch_end(0, make({{"loss", 0.5f}}));  // warns, does nothing
  BOOST_TEST(!m3.stop_training);
}

BOOST_AUTO_TEST_CASE(reduce_lr_on_plateau_with_cooldown_and_floor) {
  fake_model m;
  // Keras counts the cooldown down before looking: cooldown 2 skips one epoch
  reduce_lr_on_plateau r({.monitor = "loss", .factor = 0.5f, .patience = 1, .cooldown = 2, .min_lr = 0.03f});
  attach(r, m);
  r.on_epoch_end(0, make({{"loss", 1.0f}}));
  BOOST_TEST(m.opt.learning_rate() == 0.1f);
  r.on_epoch_end(1, make({{"loss", 1.0f}}));  // plateau -> 0.05
  BOOST_TEST(m.opt.learning_rate() == 0.05f);
  r.on_epoch_end(2, make({{"loss", 1.0f}}));  // cooldown
  BOOST_TEST(m.opt.learning_rate() == 0.05f);
  r.on_epoch_end(3, make({{"loss", 1.0f}}));  // -> 0.025, floored at 0.03
  BOOST_TEST(m.opt.learning_rate() == 0.03f);
  BOOST_CHECK_THROW(reduce_lr_on_plateau({.factor = 1.0f}), value_error);
}

BOOST_AUTO_TEST_CASE(learning_rate_scheduler_terminate_on_nan_lambda) {
  fake_model m;
  learning_rate_scheduler s([](int epoch, float lr) { return epoch < 2 ? lr : lr * 0.5f; });
  attach(s, m);
  s.on_epoch_begin(0, {});
  BOOST_TEST(m.opt.learning_rate() == 0.1f);
  s.on_epoch_begin(2, {});
  BOOST_TEST(m.opt.learning_rate() == 0.05f);
  learning_rate_scheduler bad([](int, float) { return -1.0f; });
  attach(bad, m);
  BOOST_CHECK_THROW(bad.on_epoch_begin(0, {}), value_error);

  terminate_on_nan t;
  attach(t, m);
  t.on_train_batch_end(0, make({{"loss", 1.0f}}));
  BOOST_TEST(!m.stop_training);
  t.on_train_batch_end(1, make({{"loss", std::numeric_limits<float>::quiet_NaN()}}));
  BOOST_TEST(m.stop_training);

  int epochs = 0;
  lambda_callback l({.on_epoch_end = [&](int, const logs&) { ++epochs; }});
  l.on_epoch_end(0, {});
  l.on_epoch_begin(0, {});  // not set: nothing happens
  BOOST_TEST(epochs == 1);
}

BOOST_AUTO_TEST_CASE(csv_logger_writes_header_then_rows_and_appends) {
  const auto path = (std::filesystem::temp_directory_path() / "dtrain_csv_logger_test.csv").string();
  fake_model m;
  {
    csv_logger c(path);
    attach(c, m);
    c.on_epoch_end(0, make({{"loss", 0.5f}, {"accuracy", 0.75f}}));
    c.on_epoch_end(1, make({{"loss", 0.25f}, {"accuracy", 1.0f}}));
    c.on_train_end({});
  }
  {
    csv_logger c(path, {.append = true});
    attach(c, m);
    c.on_epoch_end(2, make({{"loss", 1.0f / 3.0f}, {"accuracy", 0.1f}}));
    c.on_train_end({});
  }
  std::ifstream in(path);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Keras' form: sorted columns, every value as it reads back exactly
  BOOST_TEST(all == "epoch,accuracy,loss\n0,0.75,0.5\n1,1,0.25\n2,0.1,0.33333334\n");
  BOOST_TEST(std::stof("0.33333334") == 1.0f / 3.0f);
  std::filesystem::remove(path);
  csv_logger nowhere("/nonexistent-dir/x.csv");
  BOOST_CHECK_THROW(attach(nowhere, m), io_error);
}

BOOST_AUTO_TEST_CASE(history_keeps_every_epoch) {
  history h;
  h.on_train_begin({});
  h.on_epoch_end(0, make({{"loss", 2.0f}, {"val_loss", 3.0f}}));
  h.on_epoch_end(1, make({{"loss", 1.0f}, {"val_loss", 2.5f}}));
  BOOST_TEST(h["loss"] == (std::vector<float>{2.0f, 1.0f}), boost::test_tools::per_element());
  BOOST_TEST(h.history.at("val_loss") == (std::vector<float>{3.0f, 2.5f}), boost::test_tools::per_element());
  h.on_epoch_end(2, make({{"loss", std::numeric_limits<float>::quiet_NaN()}, {"val_loss", 0.1f}}));
  BOOST_TEST(h.to_json() == "{\"loss\": [2, 1, NaN], \"val_loss\": [3, 2.5, 0.1]}");
  BOOST_TEST(h.epochs == (std::vector<int>{0, 1, 2}), boost::test_tools::per_element());
  BOOST_CHECK_THROW(h["accuracy"], value_error);
}

BOOST_AUTO_TEST_CASE(progbar_lines_when_not_a_terminal) {
  std::FILE* f = std::tmpfile();
  progbar p1(70, 1, f);
  for (int i = 1; i <= 70; ++i) p1.update(i, make({{"loss", 0.5f}, {"accuracy", 0.25f}}));
  p1.update(70, make({{"loss", 0.5f}, {"accuracy", 0.25f}}), true);
  progbar p2(70, 2, f);
  p2.update(70, make({{"loss", 1e-5f}}), true);
  progbar p0(70, 0, f);
  p0.update(70, make({{"loss", 1.0f}}), true);
  progbar unknown(-1, 1, f);  // an epoch of unknown length
  unknown.update(8, make({{"loss", 0.5f}}), true);
  const std::string out = read_file(f);
  std::fclose(f);
  // Keras: the epoch's time in whole seconds ("%.0fs"), the step's in s, ms or us
  const std::regex line1(R"(70/70 \[==============================\] - \d+s \d+(s|ms|us)/step - loss: 0\.5000 - accuracy: 0\.2500\n)");
  const std::regex line2(R"(70/70 - \d+s - loss: 1\.0000e-05 - \d+(s|ms|us)/epoch - \d+(s|ms|us)/step\n)");
  const std::regex line3(R"(\n      8/Unknown - \d+s \d+(s|ms|us)/step - loss: 0\.5000\n)");
  std::smatch mm;
  BOOST_TEST(std::regex_search(out, mm, line1));
  BOOST_TEST(std::regex_search(out, mm, line2));
  BOOST_TEST(std::regex_search(out, mm, line3));
  BOOST_TEST(std::count(out.begin(), out.end(), '\n') == 3);  // one line each, nothing for verbose 0
}

BOOST_AUTO_TEST_CASE(progbar_logger_prints_epoch_headers) {
  std::FILE* f = std::tmpfile();
  fake_model m;
  progbar_logger pl(f);
  attach(pl, m, 3, 2, 1);
  pl.on_epoch_begin(0, {});
  pl.on_train_batch_end(0, make({{"loss", 1.0f}}));
  pl.on_train_batch_end(1, make({{"loss", 0.9f}}));
  pl.on_epoch_end(0, make({{"loss", 0.9f}, {"val_loss", 1.1f}}));
  const std::string out = read_file(f);
  std::fclose(f);
  BOOST_TEST(out.find("Epoch 1/3\n2/2 [==============================]") == 0u);
  BOOST_TEST(out.find("- loss: 0.9000 - val_loss: 1.1000\n") != std::string::npos);
}

// The record framing TensorBoard reads (tests/interop/check_tensorboard.py reads the files with the real
// tensorboard package): CRC-32C's check value, and every record's length and masked CRCs.
BOOST_AUTO_TEST_CASE(tensorboard_event_files_are_framed_records) {
  BOOST_TEST(dtrain::detail::crc32c("123456789", 9) == 0xe3069283u);  // the CRC-32C check value
  const auto dir = std::filesystem::temp_directory_path() / "dtrain_tensorboard_test";
  std::filesystem::remove_all(dir);
  fake_model m;
  {
    tensorboard tb({.log_dir = dir, .histogram_freq = 1, .update_freq = std::int64_t(1)});
    attach(tb, m);
    tb.on_epoch_begin(0, {});
    tb.on_train_batch_begin(0, {});
    tb.on_train_batch_end(0, make({{"loss", 0.5f}}));
    tb.on_epoch_end(0, make({{"loss", 0.5f}, {"val_loss", 0.75f}}));
    tb.on_train_end({});
  }
  std::size_t files = 0;
  for (const char* run : {"train", "validation"})
    for (const auto& f : std::filesystem::directory_iterator(dir / run)) {
      ++files;
      BOOST_TEST(f.path().filename().string().rfind("events.out.tfevents.", 0) == 0u);
      std::ifstream in(f.path(), std::ios::binary);
      std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::size_t at = 0, records = 0;
      while (at < all.size()) {
        BOOST_REQUIRE(at + 12 <= all.size());
        std::uint64_t n = 0;
        std::uint32_t c1 = 0, c2 = 0;
        std::memcpy(&n, all.data() + at, 8);
        std::memcpy(&c1, all.data() + at + 8, 4);
        BOOST_TEST(c1 == tensorboard_events::masked_crc32c(all.data() + at, 8));
        BOOST_REQUIRE(at + 16 + n <= all.size());
        std::memcpy(&c2, all.data() + at + 12 + n, 4);
        BOOST_TEST(c2 == tensorboard_events::masked_crc32c(all.data() + at + 12, n));
        at += 16 + n, ++records;
      }
      // train: the file version, batch_loss, epoch_loss, epoch_learning_rate, one histogram; validation:
      // the file version, epoch_loss
      BOOST_TEST(records == (std::string(run) == "train" ? 5u : 2u), run);
    }
  BOOST_TEST(files == 2u);
  std::filesystem::remove_all(dir);
  BOOST_CHECK_THROW(tensorboard({.update_freq = std::string("batch")}), value_error);
}

BOOST_AUTO_TEST_SUITE_END()
