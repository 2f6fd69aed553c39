// The profiler: the traced batches' steps on every worker, each layer's forward and backward inside its
// step, collectives with their bytes on the communicator's thread, written as Chrome trace events (read
// back here as JSON), the TensorBoard profile gzipped and as an XSpace (the same intervals) where its
// plugin looks, and the workers' summary, which names a worker made slow (by a sleep in its callbacks) as
// the one the others waited for.
#include <zlib.h>

#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <thread>
#include <tuple>

#include <dtrain/data/tfrecord.hpp>

#include <nlohmann/json.hpp>

#include "support/gradcheck.hpp"
#include "support/helpers.hpp"
#include "support/loopback.hpp"
#include "support/mirrored.hpp"

using namespace dtrain;
using json = nlohmann::json;

namespace {
using net = sequential<input<6>, dense<16, relu>, dense<3>>;

auto batches(std::size_t n = 64) {
  auto [x, y] = dtrain_test::three_class_problem(n);
  return data::from_tensor_slices(x, y) | data::batch(8);
}
template <class Model>
void compile(Model& m) {
  m.compile({.optimizer = adam{}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
}
json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  BOOST_REQUIRE_MESSAGE(in, "no trace at " << p);
  return json::parse(in);
}
std::vector<json> events_of(const json& trace, const std::string& category, const std::string& name = "") {
  std::vector<json> out;
  for (const json& e : trace.at("traceEvents"))
    if (e.value("ph", "") == "X" && e.value("cat", "") == category && (name.empty() || e.value("name", "") == name))
      out.push_back(e);
  return out;
}
/// The events of an XSpace's planes as Chrome trace "X" events (name, cat, tid, ts and dur in
/// microseconds from the plane's line times), read with the TFRecord reader's protobuf wire reader.
json xspace_events(std::string_view bytes, std::string& host) {
  using reader = data::detail::proto_reader;
  json out = json::array();
  reader space{bytes, "not an XSpace"};
  while (!space.done()) {
    const std::uint64_t key = space.varint();
    if (key == (4 << 3 | 2)) host = std::string(space.bytes());
    if (key != (1 << 3 | 2)) {
      if (key != (4 << 3 | 2)) space.skip(key & 7);
      continue;
    }
    reader plane = space.inner();
    std::map<std::uint64_t, std::string> names, stats;
    std::vector<std::string_view> lines;
    while (!plane.done()) {
      const std::uint64_t k = plane.varint();
      if (k == (3 << 3 | 2)) lines.push_back(plane.bytes());
      else if (k == (4 << 3 | 2) || k == (5 << 3 | 2)) {  // map entries: key (1), value (2: id 1, name 2)
        reader entry = plane.inner();
        std::uint64_t id = 0;
        std::string name;
        while (!entry.done()) {
          const std::uint64_t e = entry.varint();
          if (e == (1 << 3)) id = entry.varint();
          else if (e == (2 << 3 | 2)) {
            reader value = entry.inner();
            while (!value.done()) {
              const std::uint64_t v = value.varint();
              if (v == (2 << 3 | 2)) name = std::string(value.bytes());
              else value.skip(v & 7);
            }
          } else entry.skip(e & 7);
        }
        (k == (4 << 3 | 2) ? names : stats)[id] = name;
      } else plane.skip(k & 7);
    }
    for (std::string_view l : lines) {
      reader line{l, "not an XLine"};
      std::uint64_t tid = 0;
      std::vector<json> events;
      while (!line.done()) {
        const std::uint64_t k = line.varint();
        if (k == (1 << 3)) tid = line.varint();
        else if (k == (4 << 3 | 2)) {
          reader event = line.inner();
          json e = {{"ph", "X"}};
          while (!event.done()) {
            const std::uint64_t f = event.varint();
            if (f == (1 << 3)) e["name"] = names.at(event.varint());
            else if (f == (2 << 3)) e["ts"] = double(event.varint()) / 1e6;
            else if (f == (3 << 3)) e["dur"] = double(event.varint()) / 1e6;
            else if (f == (4 << 3 | 2)) {
              reader stat = event.inner();
              std::string name;
              while (!stat.done()) {
                const std::uint64_t g = stat.varint();
                if (g == (1 << 3)) name = stats.at(stat.varint());
                else if (g == (5 << 3 | 2)) e[name == "category" ? "cat" : name] = std::string(stat.bytes());
                else if (g == (4 << 3)) e["args"][name] = stat.varint();
                else stat.skip(g & 7);
              }
            } else event.skip(f & 7);
          }
          events.push_back(std::move(e));
        } else line.skip(k & 7);
      }
      for (json& e : events) e["tid"] = tid, out.push_back(std::move(e));
    }
  }
  return out;
}
bool inside(const json& e, const json& outer) {
  return e.at("ts").get<double>() >= outer.at("ts").get<double>() &&
         e.at("ts").get<double>() + e.at("dur").get<double>() <= outer.at("ts").get<double>() + outer.at("dur").get<double>();
}
}  // namespace

BOOST_AUTO_TEST_SUITE(profiler_callback)

BOOST_AUTO_TEST_CASE(the_traced_batches_hold_every_layers_forward_and_backward_inside_their_steps) {
  dtrain_test::temp_dir dir;
  net m(3);
  compile(m);
  auto prof = std::make_shared<profiler>(profiler_options{.log_dir = dir.path, .profile_batch = {2, 5}, .summary = false});
  m.fit(batches(), {.epochs = 1, .callbacks = {prof}, .verbose = 0});  // 8 batches, 2-5 traced
  BOOST_TEST(!trace::active());
  const json t = read_json(dir.path / "worker_0.trace.json");
  const auto steps = events_of(t, "step", "train_step");
  BOOST_REQUIRE_EQUAL(steps.size(), 4u);
  BOOST_TEST(events_of(t, "data", "next batch").size() == 4u);
  for (const char* layer : {"dense", "dense_1"})
    for (const char* pass : {"forward", "backward"}) {
      const auto es = events_of(t, pass, layer);
      BOOST_TEST_CONTEXT(pass << " " << layer) {
        BOOST_REQUIRE_EQUAL(es.size(), 4u);
        for (std::size_t k = 0; k < 4; ++k) BOOST_TEST(inside(es[k], steps[k]));
      }
    }
  BOOST_TEST(events_of(t, "optimizer").size() == 4u);
  BOOST_TEST(events_of(t, "loss", "sparse_categorical_crossentropy").size() == 4u);
  // a process and its threads are named, as trace viewers show them
  bool named = false;
  for (const json& e : t.at("traceEvents")) named |= e.value("ph", "") == "M" && e.value("name", "") == "process_name";
  BOOST_TEST(named);
  // the summary: one worker, four steps, the parts nested in the steps add up to no more than them
  const auto& s = prof->summary();
  BOOST_REQUIRE_EQUAL(s.size(), 1u);
  BOOST_TEST(s[0].steps == 4);
  BOOST_TEST(s[0].forward_ms > 0.0);
  BOOST_TEST(s[0].forward_ms + s[0].backward_ms + s[0].loss_ms + s[0].optimizer_ms <= s[0].step_ms);
  BOOST_TEST(s[0].last_arrivals == 0);
}

BOOST_AUTO_TEST_CASE(a_short_fit_ends_the_trace_and_nothing_is_recorded_outside_it) {
  dtrain_test::temp_dir dir;
  net m(3);
  compile(m);
  auto prof = std::make_shared<profiler>(profiler_options{.log_dir = dir.path, .profile_batch = {7, 100}, .summary = false});
  m.fit(batches(), {.epochs = 1, .callbacks = {prof}, .verbose = 0});  // batches 7 and 8 only
  BOOST_TEST(!trace::active());
  BOOST_TEST(events_of(read_json(dir.path / "worker_0.trace.json"), "step", "train_step").size() == 2u);
  m.fit(batches(), {.epochs = 1, .verbose = 0});  // untraced
  BOOST_TEST(trace::stop().events.empty());
}

BOOST_AUTO_TEST_CASE(tensorboard_writes_the_profile_gzipped_and_as_an_xspace_where_its_plugin_looks) {
  dtrain_test::temp_dir dir;
  net m(3);
  compile(m);
  m.fit(batches(), {.epochs = 1, .callbacks = {tensorboard({.log_dir = dir.path, .profile_batch = 3})}, .verbose = 0});
  std::vector<std::filesystem::path> found;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path / "plugins" / "profile"))
    if (e.path().filename() == "worker_0.trace.json.gz") found.push_back(e.path());
  BOOST_REQUIRE_EQUAL(found.size(), 1u);
  gzFile f = gzopen(found[0].c_str(), "rb");
  BOOST_REQUIRE(f);
  std::string text;
  char buf[4096];
  for (int n; (n = gzread(f, buf, sizeof buf)) > 0;) text.append(buf, std::size_t(n));
  gzclose(f);
  const json trace = json::parse(text);
  BOOST_TEST(events_of(trace, "step", "train_step").size() == 1u);
  // the XSpace beside it holds the same intervals, to the nanosecond, on the same threads
  std::ifstream in(found[0].parent_path() / "worker_0.xplane.pb", std::ios::binary);
  BOOST_REQUIRE(in);
  const std::string bytes{std::istreambuf_iterator<char>(in), {}};
  std::string host;
  const json x = xspace_events(bytes, host);
  BOOST_TEST(host == "worker_0");
  std::vector<json> chrome;
  for (const json& e : trace.at("traceEvents"))
    if (e.value("ph", "") == "X") chrome.push_back(e);
  BOOST_REQUIRE_EQUAL(x.size(), chrome.size());
  const auto key = [](const json& e) { return std::tuple(e.at("tid").get<int>(), e.at("ts").get<double>(), -e.at("dur").get<double>()); };
  std::sort(chrome.begin(), chrome.end(), [&](const json& a, const json& b) { return key(a) < key(b); });
  for (std::size_t i = 0; i < chrome.size(); ++i) {
    const json& c = chrome[i];
    const json& e = x[i];
    BOOST_TEST_CONTEXT(c.dump() << " and " << e.dump()) {
      BOOST_TEST(e.at("name") == c.at("name"));
      BOOST_TEST(e.at("cat") == c.at("cat"));
      BOOST_TEST(e.at("tid") == c.at("tid"));
      BOOST_TEST(std::abs(e.at("ts").get<double>() - c.at("ts").get<double>()) < 1e-3);
      BOOST_TEST(std::abs(e.at("dur").get<double>() - c.at("dur").get<double>()) < 1e-3);
      BOOST_TEST(e.value("args", json::object()).value("bytes", -1) == c.value("args", json::object()).value("bytes", -1));
    }
  }
}

BOOST_AUTO_TEST_CASE(bad_ranges_and_a_second_trace_are_errors) {
  BOOST_CHECK_THROW(profiler({.profile_batch = {5, 2}}), value_error);
  BOOST_CHECK_THROW(profiler({.profile_batch = -1}), value_error);
  BOOST_CHECK_THROW(tensorboard({.profile_batch = {0, 3}}), value_error);
  trace::start();
  BOOST_CHECK_THROW(trace::start(), usage_error);
  trace::stop();
}

BOOST_AUTO_TEST_CASE(the_summary_names_the_worker_the_others_waited_for) {
  for (int p : {2, 3}) {
    BOOST_TEST_CONTEXT("workers = " << p) {
      dtrain_test::temp_dir dir;
      std::vector<std::vector<worker_profile>> summaries(static_cast<std::size_t>(p));
      const int slow = p - 1;
      dtrain_test::on_workers(p, [&](auto& s, int r) {
        auto model = s.template make_model<net>(3);
        compile(model);
        auto prof = std::make_shared<profiler>(profiler_options{.log_dir = dir.path, .profile_batch = {2, 5}, .summary = false});
        callback_list cbs;
        cbs.push_back(prof);
        if (r == slow)  // this worker reaches every step 50 ms after the others
          cbs.push_back(lambda_callback({.on_train_batch_begin = [](std::int64_t, const logs&) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
          }}));
        model.fit(batches(96), {.epochs = 1, .callbacks = cbs, .verbose = 0});
        summaries[std::size_t(r)] = prof->summary();
      });
      for (int r = 0; r < p; ++r) {
        const auto& s = summaries[std::size_t(r)];
        BOOST_REQUIRE_EQUAL(s.size(), std::size_t(p));  // every worker's, on every worker
        BOOST_TEST(s[std::size_t(slow)].last_arrivals == 4);
        BOOST_TEST(s[std::size_t(slow)].others_waited_ms > 0.0);
        for (int o = 0; o < slow; ++o) BOOST_TEST(s[std::size_t(o)].last_arrivals == 0);
        BOOST_TEST(s[std::size_t(r)].steps == 4);
      }
      // each worker wrote its trace; its gradient all-reduces carry their bytes
      for (int r = 0; r < p; ++r) {
        const json t = read_json(dir.path / ("worker_" + std::to_string(r) + ".trace.json"));
        const auto reduces = events_of(t, "comm", "all_reduce");
        BOOST_TEST(!reduces.empty());
        BOOST_TEST(events_of(t, "comm", "wait for gradients").size() == 4u);
        for (const json& e : reduces) BOOST_TEST(e.at("args").at("bytes").get<std::int64_t>() > 0);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(mirrored_replicas_record_on_their_own_tracks) {
  dtrain_test::temp_dir dir;
  mirrored_strategy<> s({"/cpu:0", "/cpu:1"});
  auto model = s.make_model<net>(3);
  compile(model);
  model.fit(s.distribute_dataset(batches()), {.epochs = 1, .callbacks = {profiler({.log_dir = dir.path, .profile_batch = {2, 3},
                                                                                     .summary = false})}, .verbose = 0});
  const json t = read_json(dir.path / "worker_0.trace.json");
  std::map<int, std::string> tracks;  // tid -> thread name
  for (const json& e : t.at("traceEvents"))
    if (e.value("ph", "") == "M" && e.value("name", "") == "thread_name") tracks[e.at("tid").get<int>()] = e.at("args").at("name");
  std::set<std::string> forward_on, reduce_on;
  for (const json& e : events_of(t, "forward", "dense")) forward_on.insert(tracks.at(e.at("tid").get<int>()));
  for (const json& e : events_of(t, "comm", "all_reduce")) reduce_on.insert(tracks.at(e.at("tid").get<int>()));
  BOOST_TEST(forward_on == (std::set<std::string>{"main", "replica 1"}));  // replica 0 runs on the caller
  BOOST_TEST(reduce_on == (std::set<std::string>{"main", "replica 1"}));
  BOOST_TEST(events_of(t, "step", "train_step").size() == 2u);
}

BOOST_AUTO_TEST_SUITE_END()
