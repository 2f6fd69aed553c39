#pragma once
/// \file
/// The profiler: a trace of chosen training steps on every worker (core/trace.hpp records it: each
/// layer's forward and backward, the loss, the optimizer, each collective of the communicator, the wait
/// for the gradients' sums, data loading), written in the Chrome trace event format that Perfetto
/// (ui.perfetto.dev, trace_processor) and chrome://tracing open, and a per-worker summary of where the
/// steps went: compute, data, the communication backward did not hide, and stragglers (in each traced
/// step the worker that reached the gradients' all-reduce last made the others wait; the summary says
/// who, how often and how long).
///
/// `profiler` is the callback (`fit(..., {.callbacks = {profiler({.profile_batch = {2, 6}})}})`); the
/// TensorBoard callback's `profile_batch` writes the same trace, gzipped, where TensorBoard's profile
/// plugin looks (`log_dir/plugins/profile/<run>/`). On a device backend the scopes time the host's side
/// of each step (its kernels run on ahead; the waits show where the host waited for them).

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dtrain/callbacks/callback.hpp"
#include "dtrain/core/file_io.hpp"
#include "dtrain/core/trace.hpp"

namespace dtrain {

/// Batches to profile, counted from 1 across epochs (Keras' `profile_batch`): one batch (`3`) or a
/// range (`{10, 20}`, both included); 0: none.
struct profile_batches {
  std::int64_t first = 0, last = 0;
  profile_batches() = default;
  profile_batches(std::int64_t batch) : first(batch), last(batch) {}
  profile_batches(std::int64_t from, std::int64_t to) : first(from), last(to) {}
  bool on() const { return first > 0; }
  void check(const char* who) const {
    if (first < 0 || last < first || (first == 0 && last != 0))
      throw value_error(std::string(who) + ": profile_batch {" + std::to_string(first) + ", " + std::to_string(last) +
                        "} is not a batch or a range of batches counted from 1 (0: no profiling)");
  }
};

/// What one worker's traced steps spent, in milliseconds (busy times summed over its threads).
struct worker_profile {
  int worker = 0;
  std::int64_t steps = 0;
  double step_ms = 0, forward_ms = 0, backward_ms = 0, loss_ms = 0, optimizer_ms = 0, data_ms = 0;
  double wait_ms = 0;                  // waiting for the gradients' sums: communication backward did not hide
  std::int64_t last_arrivals = 0;      // traced steps in which it reached the gradients' all-reduce last
  double others_waited_ms = 0;         // over those steps, how long the other workers waited for it (their mean)
};

namespace detail {

/// A recording as Chrome trace events: one process (`pid`, named `process`), one track per thread,
/// complete ("X") events in microseconds with the category and, for a collective, its bytes.
inline std::string chrome_trace_json(const trace::recording& r, int pid, const std::string& process) {
  using json = nlohmann::json;
  json events = json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", process}}}});
  for (std::size_t t = 0; t < r.threads.size(); ++t)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", t}, {"args", {{"name", r.threads[t]}}}});
  for (const trace::event& e : r.events) {
    json j = {{"name", e.name}, {"cat", e.category}, {"ph", "X"}, {"pid", pid}, {"tid", e.thread},
              {"ts", double(e.begin_ns) / 1e3}, {"dur", double(e.duration_ns) / 1e3}};
    if (e.bytes >= 0) j["args"] = {{"bytes", e.bytes}};
    events.push_back(std::move(j));
  }
  return json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}}.dump();
}

/// `text` gzip-compressed (what TensorBoard's profile plugin and Perfetto read as .json.gz).
inline std::string gzipped(const std::string& text) {
  std::string out;
  const auto append = [&](std::span<const char> b) { out.append(b.data(), b.size()); };
  deflater z(true, "profiler: a trace");
  z.put(text, append);
  z.finish(append);
  return out;
}

/// Collective over the workers: each worker's profile of a recording of the same steps.
inline std::vector<worker_profile> summarize(training_model& m, const trace::recording& r) {
  const int w = m.num_workers(), me = m.worker_index();
  const auto ms = [](std::int64_t ns) { return double(ns) / 1e6; };
  std::vector<const trace::event*> steps;
  worker_profile mine;
  for (const trace::event& e : r.events) {
    const std::string_view c = e.category;
    if (c == "step" && e.name == "train_step") steps.push_back(&e), mine.step_ms += ms(e.duration_ns);
    else if (c == "forward") mine.forward_ms += ms(e.duration_ns);
    else if (c == "backward") mine.backward_ms += ms(e.duration_ns);
    else if (c == "loss") mine.loss_ms += ms(e.duration_ns);
    else if (c == "optimizer") mine.optimizer_ms += ms(e.duration_ns);
    else if (c == "data") mine.data_ms += ms(e.duration_ns);
  }
  std::sort(steps.begin(), steps.end(), [](auto* a, auto* b) { return a->begin_ns < b->begin_ns; });
  std::vector<double> waits(steps.size(), 0.0);  // each step's wait for the gradients
  for (const trace::event& e : r.events)
    if (std::string_view(e.category) == "comm" && e.name == "wait for gradients")
      for (std::size_t k = 0; k < steps.size(); ++k)
        if (e.begin_ns >= steps[k]->begin_ns && e.begin_ns <= steps[k]->begin_ns + steps[k]->duration_ns)
          waits[k] += ms(e.duration_ns), mine.wait_ms += ms(e.duration_ns);
  mine.steps = std::int64_t(steps.size());
  // every worker's totals and step count, then the steps all traced, each worker's wait in each
  constexpr std::size_t fields = 8;
  std::vector<float> totals(fields * std::size_t(w), 0.0f);
  const double own[fields] = {double(mine.steps), mine.step_ms,    mine.forward_ms, mine.backward_ms,
                              mine.loss_ms,       mine.optimizer_ms, mine.data_ms,  mine.wait_ms};
  for (std::size_t f = 0; f < fields; ++f) totals[f * std::size_t(w) + std::size_t(me)] = float(own[f]);
  m.sum_over_workers(totals);
  std::int64_t common = mine.steps;
  for (int i = 0; i < w; ++i) common = std::min(common, std::int64_t(totals[std::size_t(i)]));
  common = std::max<std::int64_t>(0, common);
  std::vector<float> each(std::size_t(common) * std::size_t(w), 0.0f);
  for (std::int64_t k = 0; k < common; ++k) each[std::size_t(k) * std::size_t(w) + std::size_t(me)] = float(waits[std::size_t(k)]);
  m.sum_over_workers(each);
  std::vector<worker_profile> out(static_cast<std::size_t>(w));
  for (int i = 0; i < w; ++i) {
    auto at = [&](std::size_t f) { return double(totals[f * std::size_t(w) + std::size_t(i)]); };
    out[std::size_t(i)] = {i, std::int64_t(at(0)), at(1), at(2), at(3), at(4), at(5), at(6), at(7), 0, 0.0};
  }
  if (w > 1)
    for (std::int64_t k = 0; k < common; ++k) {
      const float* row = each.data() + std::size_t(k) * std::size_t(w);
      const auto last = std::size_t(std::min_element(row, row + w) - row);  // waited least: arrived last
      double others = 0.0;
      for (int i = 0; i < w; ++i) others += double(row[i] - row[last]);
      ++out[last].last_arrivals;
      out[last].others_waited_ms += others / double(w - 1);
    }
  return out;
}

/// The summary as a table.
inline std::string summary_table(const std::vector<worker_profile>& p, const profile_batches& b) {
  std::string s = "Profile of batches " + std::to_string(b.first) + "-" + std::to_string(b.last) + " on " +
                  std::to_string(p.size()) + (p.size() == 1 ? " worker" : " workers") +
                  " (ms, summed over the traced steps):\n"
                  "worker  steps     step  forward  backward     loss  optimizer     data  waiting for gradients  "
                  "last to the all-reduce  others waited for it\n";
  char line[256];
  for (const worker_profile& w : p) {
    std::snprintf(line, sizeof line, "%6d %6lld %8.2f %8.2f %9.2f %8.2f %10.2f %8.2f %13.2f (%5.1f%%) %14lld of %-5lld %21.2f\n",
                  w.worker, static_cast<long long>(w.steps), w.step_ms, w.forward_ms, w.backward_ms, w.loss_ms,
                  w.optimizer_ms, w.data_ms, w.wait_ms, w.step_ms > 0 ? 100.0 * w.wait_ms / w.step_ms : 0.0,
                  static_cast<long long>(w.last_arrivals), static_cast<long long>(w.steps), w.others_waited_ms);
    s += line;
  }
  return s;
}

/// Starts the trace at the first batch of a range and hands the recording over after its last (or when
/// training ends first): what `profiler` and the TensorBoard callback's `profile_batch` share.
class batch_tracer {
 public:
  explicit batch_tracer(profile_batches b = {}) : b_(b) {}
  void train_begin() { global_ = 0; }
  void batch_begin() {
    if (b_.on() && ++global_ == b_.first) trace::start(), on_ = true;
  }
  /// The recording, once its last batch ended.
  std::optional<trace::recording> batch_end() {
    if (!on_ || global_ != b_.last) return std::nullopt;
    return train_end();
  }
  std::optional<trace::recording> train_end() {
    if (!on_) return std::nullopt;
    on_ = false;
    return trace::stop();
  }

 private:
  profile_batches b_;
  std::int64_t global_ = 0;
  bool on_ = false;
};

/// The file name of worker `w`'s trace.
inline std::string trace_file_name(int worker) { return "worker_" + std::to_string(worker) + ".trace.json"; }

}  // namespace detail

struct profiler_options {
  /// Where each worker writes its trace, `worker_<i>.trace.json`.
  std::filesystem::path log_dir = "profile";
  profile_batches profile_batch{2, 6};
  /// Print the per-worker summary (the chief) when the trace ends.
  bool summary = true;
};

/// The profiler as a callback: traces `profile_batch` on every worker, writes the traces and (with
/// `summary`) prints the workers' summary. Every worker must have it (the summary is a collective).
class profiler : public callback {
 public:
  explicit profiler(profiler_options o = {}) : o_(std::move(o)), tracer_(o_.profile_batch) {
    o_.profile_batch.check("profiler");
  }
  void on_train_begin(const logs&) override { tracer_.train_begin(); }
  void on_train_batch_begin(std::int64_t, const logs&) override { tracer_.batch_begin(); }
  void on_train_batch_end(std::int64_t, const logs&) override {
    if (auto r = tracer_.batch_end()) finish(*r);
  }
  void on_train_end(const logs&) override {
    if (auto r = tracer_.train_end()) finish(*r);
  }
  /// The workers' profiles of the last trace (empty before one ended).
  const std::vector<worker_profile>& summary() const { return summary_; }

 private:
  void finish(const trace::recording& r) {
    const int me = model().worker_index();
    const auto path = o_.log_dir / detail::trace_file_name(me);
    detail::create_folder_of(path);
    detail::write_file_atomic(path, detail::chrome_trace_json(r, me, "worker " + std::to_string(me)));
    summary_ = detail::summarize(model(), r);
    if (o_.summary && model().is_chief()) std::fputs(detail::summary_table(summary_, o_.profile_batch).c_str(), stdout);
  }

  profiler_options o_;
  detail::batch_tracer tracer_;
  std::vector<worker_profile> summary_;
};

}  // namespace dtrain
