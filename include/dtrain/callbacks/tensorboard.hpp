#pragma once
/// \file
/// Keras `callbacks.TensorBoard(log_dir, histogram_freq, write_steps_per_second, update_freq)`: event
/// files TensorBoard reads, in `log_dir/train` and `log_dir/validation`, with Keras' tags:
/// - every epoch, `epoch_<name>` for each training log and `epoch_learning_rate` in train/, and for each
///   `val_<name>` log `epoch_<name>` in validation/, at step = the 0-based epoch;
/// - with `update_freq` = N batches, `batch_<name>` every N batches at step = the batch count (1-based,
///   across epochs); `write_steps_per_second` adds `epoch_steps_per_second` / `batch_steps_per_second`;
/// - after `evaluate` (and validation), `evaluation_<name>_vs_iterations` in validation/ at step = the
///   optimizer's iterations;
/// - every `histogram_freq` epochs, a histogram of each variable, `<layer>/<kernel|bias>/histogram`;
/// - with `profile_batch`, a trace of those batches on every worker (callbacks/profiler.hpp), written
///   where TensorBoard's profile plugin looks, `log_dir/plugins/profile/<date_time>/`: in the Chrome trace
///   event format, gzipped (`worker_<i>.trace.json.gz`, for Perfetto and chrome://tracing), and as the
///   XSpace the plugin reads (`worker_<i>.xplane.pb`, its trace viewer's host threads).
/// Under a strategy only the chief writes: epoch and evaluation logs are the same on every worker, while
/// `batch_<name>` are the chief's own running values (per-batch logs are not aggregated).
///
/// The format (TensorFlow's record and Event protos, written without TensorFlow): each record is the
/// data length (u64 little endian), its masked CRC-32C (u32), the data, and the data's masked CRC-32C;
/// the data is an `Event` protocol buffer: wall_time (1, double), step (2, int64), then file_version (3,
/// "brain.Event:2") in the first record or a `Summary` (5) of `Value`s: tag (1) with simple_value (2,
/// float) or a `HistogramProto` (5: min, max, num, sum, sum_squares, bucket_limit, bucket).

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "dtrain/callbacks/callback.hpp"
#include "dtrain/callbacks/profiler.hpp"
#include "dtrain/core/crc32c.hpp"

namespace dtrain {

namespace tensorboard_events {

using detail::masked_crc32c;  // TFRecord's (core/crc32c.hpp)

/// The few protocol-buffer encodings an Event needs.
class proto {
 public:
  proto& varint(int field, std::uint64_t v) { return key(field, 0).raw_varint(v); }
  proto& f64(int field, double v) { return key(field, 1).fixed(v); }
  proto& f32(int field, float v) { return key(field, 5).fixed(v); }
  proto& bytes(int field, std::string_view s) {
    key(field, 2).raw_varint(s.size());
    out_.append(s);
    return *this;
  }
  proto& message(int field, const proto& m) { return bytes(field, m.out_); }
  proto& packed_f64(int field, std::span<const double> v) {
    proto p;
    for (double d : v) p.fixed(d);
    return bytes(field, p.out_);
  }
  const std::string& str() const { return out_; }

 private:
  proto& key(int field, int wire) { return raw_varint(std::uint64_t(field) << 3 | std::uint64_t(wire)); }
  proto& raw_varint(std::uint64_t v) {
    for (; v >= 0x80; v >>= 7) out_ += char((v & 0x7f) | 0x80);
    out_ += char(v);
    return *this;
  }
  template <class T>
  proto& fixed(T v) {
    char b[sizeof v];
    std::memcpy(b, &v, sizeof v);  // little endian, as protocol buffers are, on the machines dtrain runs on
    out_.append(b, sizeof v);
    return *this;
  }
  std::string out_;
};

/// A histogram of `v` as TensorBoard's HistogramProto: 30 equal buckets between the extremes (one
/// bucket when every value is the same, as TF's summary does).
inline proto histogram(std::span<const float> v) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo, sum = 0, squares = 0;
  for (float x : v) lo = std::min(lo, double(x)), hi = std::max(hi, double(x)), sum += x, squares += double(x) * x;
  std::vector<double> limits, counts;
  if (v.empty()) lo = hi = 0;
  const int buckets = hi > lo ? 30 : 1;
  for (int b = 0; b < buckets; ++b) limits.push_back(b + 1 == buckets ? hi : lo + (hi - lo) * (b + 1) / buckets);
  counts.assign(std::size_t(buckets), 0.0);
  for (float x : v) {
    int b = hi > lo ? int((double(x) - lo) / (hi - lo) * buckets) : 0;
    counts[std::size_t(std::clamp(b, 0, buckets - 1))] += 1;
  }
  proto h;
  h.f64(1, lo).f64(2, hi).f64(3, double(v.size())).f64(4, sum).f64(5, squares);
  return h.packed_f64(6, limits).packed_f64(7, counts);
}

/// A recording as TensorFlow's profiler saves one (an `XSpace`, tsl/profiler/protobuf/xplane.proto), the
/// `<host>.xplane.pb` TensorBoard's profile plugin (xprof) reads: one plane, "/host:CPU", with a line per
/// thread (its name; the trace's start as the line's time) and an event per interval (offset and
/// duration in picoseconds), each distinct name an event metadata, the category and a collective's bytes
/// as stats. Events go in order of their start on each line, an enclosing one before what it encloses.
inline std::string xspace(const trace::recording& r, const std::string& host) {
  enum : std::uint64_t { category_stat = 1, bytes_stat = 2 };
  std::map<std::string, std::uint64_t> names;  // event metadata ids, from 1
  std::vector<const trace::event*> order;
  for (const trace::event& e : r.events) order.push_back(&e), names.emplace(e.name, names.size() + 1);
  std::sort(order.begin(), order.end(), [](const trace::event* a, const trace::event* b) {
    return std::tuple(a->thread, a->begin_ns, -a->duration_ns, a) < std::tuple(b->thread, b->begin_ns, -b->duration_ns, b);
  });
  proto plane;
  plane.varint(1, 0).bytes(2, "/host:CPU");
  auto it = order.begin();
  for (std::uint32_t t = 0; t < r.threads.size(); ++t) {
    proto line;
    line.varint(1, t).varint(10, t).bytes(2, r.threads[t]).bytes(11, r.threads[t]);
    line.varint(3, std::uint64_t(r.start_unix_ns));
    for (; it != order.end() && (*it)->thread == t; ++it) {
      const trace::event& e = **it;
      proto event, category;
      category.varint(1, category_stat).bytes(5, e.category);
      event.varint(1, names.at(e.name)).varint(2, std::uint64_t(e.begin_ns) * 1000).varint(3, std::uint64_t(e.duration_ns) * 1000);
      event.message(4, category);
      if (e.bytes >= 0) event.message(4, proto().varint(1, bytes_stat).varint(4, std::uint64_t(e.bytes)));
      line.message(4, event);
    }
    plane.message(3, line);
  }
  for (const auto& [name, id] : names)  // map<int64, XEventMetadata>: entries of key (1) and value (2)
    plane.message(4, proto().varint(1, id).message(2, proto().varint(1, id).bytes(2, name)));
  for (const auto& [id, name] : {std::pair<std::uint64_t, const char*>{category_stat, "category"}, {bytes_stat, "bytes"}})
    plane.message(5, proto().varint(1, id).message(2, proto().varint(1, id).bytes(2, name)));
  return proto().message(1, plane).bytes(4, host).str();
}

/// One event file: `events.out.tfevents.<time>.<host>.<pid>.v2` in `dir`, records flushed as written.
class event_file {
 public:
  explicit event_file(const std::filesystem::path& dir) {
    std::filesystem::create_directories(dir);
    char host[256] = "localhost";
    ::gethostname(host, sizeof host - 1);
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    path_ = dir / ("events.out.tfevents." + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now).count()) +
                   "." + host + "." + std::to_string(::getpid()) + ".v2");
    out_.open(path_, std::ios::binary | std::ios::app);
    if (!out_) throw io_error("tensorboard: cannot open " + path_.string() + " for writing");
    write(proto().f64(1, wall_time()).bytes(3, "brain.Event:2"));
  }
  const std::filesystem::path& path() const { return path_; }

  void scalar(const std::string& tag, std::int64_t step, float value) {
    summary(step, proto().bytes(1, tag).f32(2, value));
  }
  void histogram(const std::string& tag, std::int64_t step, std::span<const float> values) {
    summary(step, proto().bytes(1, tag).message(5, tensorboard_events::histogram(values)));
  }

 private:
  static double wall_time() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
  void summary(std::int64_t step, const proto& value) {
    write(proto().f64(1, wall_time()).varint(2, std::uint64_t(step)).message(5, proto().message(1, value)));
  }
  void write(const proto& event) {
    const std::string& d = event.str();
    char len[8];
    const std::uint64_t n = d.size();
    std::memcpy(len, &n, 8);
    const std::uint32_t c1 = masked_crc32c(len, 8), c2 = masked_crc32c(d.data(), d.size());
    out_.write(len, 8).write(reinterpret_cast<const char*>(&c1), 4).write(d.data(), std::streamsize(d.size()));
    out_.write(reinterpret_cast<const char*>(&c2), 4).flush();
    if (!out_) throw io_error("tensorboard: writing " + path_.string() + " failed");
  }
  std::filesystem::path path_;
  std::ofstream out_;
};

}  // namespace tensorboard_events

struct tensorboard_options {
  std::filesystem::path log_dir = "logs";
  /// Every how many epochs to write weight histograms (0: never).
  int histogram_freq = 0;
  bool write_steps_per_second = false;
  /// "epoch", or a number of batches: batch-level scalars every that many batches.
  std::variant<std::string, std::int64_t> update_freq = std::string("epoch");
  /// Batches to trace (Keras' `profile_batch`: one, or a range `{first, last}`, counted from 1; 0: none).
  profile_batches profile_batch = 0;
};

class tensorboard : public callback {
 public:
  explicit tensorboard(tensorboard_options o = {}) : o_(std::move(o)) {
    if (o_.histogram_freq < 0) throw value_error("tensorboard: histogram_freq must not be negative");
    if (const auto* s = std::get_if<std::string>(&o_.update_freq); s && *s != "epoch")
      throw value_error("tensorboard: update_freq must be \"epoch\" or a number of batches, got \"" + *s + "\"");
    if (const auto* n = std::get_if<std::int64_t>(&o_.update_freq); n && *n <= 0)
      throw value_error("tensorboard: update_freq must be positive");
    o_.profile_batch.check("tensorboard");
    tracer_ = detail::batch_tracer(o_.profile_batch);
  }
  explicit tensorboard(std::filesystem::path log_dir) : tensorboard(tensorboard_options{.log_dir = std::move(log_dir)}) {}

  void on_train_begin(const logs&) override {
    global_batch_ = 0;
    writes_ = model().is_chief();
    tracer_.train_begin();
  }
  void on_train_end(const logs&) override {
    if (auto r = tracer_.train_end()) write_profile(*r);
    train_.reset(), validation_.reset();
  }
  void on_epoch_begin(int, const logs&) override {
    epoch_start_ = clock::now();
    epoch_iterations_ = model().iterations();
  }
  void on_train_batch_begin(std::int64_t, const logs&) override {
    ++global_batch_;
    tracer_.batch_begin();
    batch_start_ = clock::now();
  }
  void on_train_batch_end(std::int64_t, const logs& l) override {
    if (auto r = tracer_.batch_end()) write_profile(*r);
    const auto* every = std::get_if<std::int64_t>(&o_.update_freq);
    if (!writes_ || !every || global_batch_ % *every != 0) return;
    for (const auto& [name, value] : l) writer(train_, "train").scalar("batch_" + name, global_batch_, value);
    if (o_.write_steps_per_second)
      train_->scalar("batch_steps_per_second", global_batch_, float(1.0 / seconds_since(batch_start_)));
  }
  void on_epoch_end(int epoch, const logs& l) override {
    if (!writes_) return;
    auto& train = writer(train_, "train");
    for (const auto& [name, value] : l)
      if (name.rfind("val_", 0) == 0) writer(validation_, "validation").scalar("epoch_" + name.substr(4), epoch, value);
      else train.scalar("epoch_" + name, epoch, value);
    train.scalar("epoch_learning_rate", epoch, model().optimizer().learning_rate());
    if (o_.write_steps_per_second)
      train.scalar("epoch_steps_per_second", epoch,
                   float(double(model().iterations() - epoch_iterations_) / seconds_since(epoch_start_)));
    if (o_.histogram_freq > 0 && epoch % o_.histogram_freq == 0)
      for (const auto& [name, values] : model().layer_weights()) train.histogram(name + "/histogram", epoch, values);
  }
  void on_test_begin(const logs&) override {
    if (!has_model()) return;
    writes_ = model().is_chief();
  }
  void on_test_end(const logs& l) override {
    if (!has_model() || !writes_) return;
    for (const auto& [name, value] : l)
      writer(validation_, "validation").scalar("evaluation_" + name + "_vs_iterations", model().iterations(), value);
  }

 private:
  using clock = std::chrono::steady_clock;
  static double seconds_since(clock::time_point t) {
    return std::max(1e-9, std::chrono::duration<double>(clock::now() - t).count());
  }
  /// Every worker writes its own trace, in one run folder per trace named by the chief's clock.
  void write_profile(const trace::recording& r) {
    chief_message run{0, {}, {}};
    if (model().is_chief()) {
      const std::time_t now = std::time(nullptr);
      char stamp[32];
      std::strftime(stamp, sizeof stamp, "%Y_%m_%d_%H_%M_%S", std::localtime(&now));
      run.text = stamp;
    }
    model().broadcast_from_chief(run);
    const int me = model().worker_index();
    const auto path = o_.log_dir / "plugins" / "profile" / run.text / (detail::trace_file_name(me) + ".gz");
    detail::create_folder_of(path);
    detail::write_file_atomic(path, detail::gzipped(detail::chrome_trace_json(r, me, "worker " + std::to_string(me))));
    const std::string host = "worker_" + std::to_string(me);
    detail::write_file_atomic(path.parent_path() / (host + ".xplane.pb"), tensorboard_events::xspace(r, host));
  }
  tensorboard_events::event_file& writer(std::shared_ptr<tensorboard_events::event_file>& w, const char* run) {
    if (!w) w = std::make_shared<tensorboard_events::event_file>(o_.log_dir / run);
    return *w;
  }

  tensorboard_options o_;
  std::shared_ptr<tensorboard_events::event_file> train_, validation_;
  bool writes_ = true;
  std::int64_t global_batch_ = 0, epoch_iterations_ = 0;
  clock::time_point epoch_start_{}, batch_start_{};
  detail::batch_tracer tracer_;
};

}  // namespace dtrain
