#pragma once
/// \file
/// The profiler's recorder: while a trace is on (`trace::start()` to `trace::stop()`), every
/// `trace::scope` records the interval it lived as an event (category, name, thread, start and duration),
/// which callbacks/profiler.hpp writes as a Chrome trace. The library scopes a step's parts: each layer's
/// forward and backward, the loss, the optimizer, each collective a communicator runs, the wait for the
/// gradients' sums, and `fit`'s data loading. While no trace is on a scope costs a thread-local load.
/// A trace belongs to the thread that started it; the threads working for that thread (a
/// communicator's, a mirrored strategy's replicas) record into it by adopting it.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "dtrain/core/error.hpp"

namespace dtrain::trace {

/// One recorded interval. Times are nanoseconds since the trace started.
struct event {
  std::string name;
  const char* category = "";  // a string literal: "forward", "backward", "comm", ...
  std::int64_t begin_ns = 0, duration_ns = 0;
  std::uint32_t thread = 0;   // 0: the thread that started the trace, then in order of first event
  std::int64_t bytes = -1;    // what a collective moved, or -1
};

/// A finished trace: its events in the order they ended, each thread's name (index: `event::thread`),
/// and when it started (nanoseconds since the Unix epoch, the system clock's).
struct recording {
  std::vector<event> events;
  std::vector<std::string> threads;
  std::int64_t start_unix_ns = 0;
};

namespace detail {
struct session {
  std::atomic<bool> on{true};
  std::mutex m;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::int64_t start_unix_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::vector<event> events;
  std::vector<std::pair<std::thread::id, std::string>> threads;
};
/// The trace the calling thread records into (its own, or one it adopted), or null.
inline thread_local std::shared_ptr<session> current;
inline thread_local std::string thread_label;  // what `name_thread` called this thread
/// This thread's index in the trace (the caller holds the session's lock).
inline std::uint32_t thread_index(session& s) {
  const auto id = std::this_thread::get_id();
  for (std::size_t i = 0; i < s.threads.size(); ++i)
    if (s.threads[i].first == id) return std::uint32_t(i);
  s.threads.emplace_back(id, thread_label.empty() ? "thread " + std::to_string(s.threads.size()) : thread_label);
  return std::uint32_t(s.threads.size() - 1);
}
}  // namespace detail

/// Whether the calling thread records into a trace that is on.
inline bool active() { return detail::current && detail::current->on.load(std::memory_order_relaxed); }

/// Names the calling thread in traces ("ring_tcp", "replica 1"); the thread that starts a trace is "main".
inline void name_thread(std::string name) { detail::thread_label = std::move(name); }

/// Starts a trace on the calling thread (TF's `tf.profiler.experimental.start`); the threads working for
/// it join it (`adopt`). A trace already on here is a usage_error. Each worker of a job traces its own:
/// one trace per thread that starts one (workers run as threads of one process in tests).
inline void start() {
  if (active()) throw usage_error("trace::start: a trace is already on on this thread");
  detail::current = std::make_shared<detail::session>();
  detail::current->threads.emplace_back(std::this_thread::get_id(), detail::thread_label.empty() ? "main" : detail::thread_label);
}

/// Stops the calling thread's trace and returns what it recorded (nothing if none was on). Scopes still
/// open then are not recorded.
inline recording stop() {
  const std::shared_ptr<detail::session> s = std::exchange(detail::current, nullptr);
  if (!s) return {};
  std::lock_guard lk(s->m);
  s->on.store(false);
  recording r{std::exchange(s->events, {}), {}, s->start_unix_ns};
  for (auto& [id, name] : std::exchange(s->threads, {})) r.threads.push_back(std::move(name));
  return r;
}

/// The calling thread's trace, for a thread that works for it to `adopt` (null: none).
inline std::shared_ptr<detail::session> current_trace() { return active() ? detail::current : nullptr; }

/// While it lives, the calling thread records into `t` (a communicator's or a replica's thread doing a
/// traced thread's work).
class adopt {
 public:
  explicit adopt(std::shared_ptr<detail::session> t) : saved_(std::exchange(detail::current, std::move(t))) {}
  adopt(const adopt&) = delete;
  adopt& operator=(const adopt&) = delete;
  ~adopt() { detail::current = std::move(saved_); }

 private:
  std::shared_ptr<detail::session> saved_;
};

/// Records the interval from its construction to its destruction while a trace is on.
class scope {
 public:
  scope(const char* category, std::string_view name, std::int64_t bytes = -1) {
    if (!active()) return;
    session_ = detail::current;
    category_ = category;
    name_ = name;
    bytes_ = bytes;
    begin_ = std::chrono::steady_clock::now();
  }
  scope(const scope&) = delete;
  scope& operator=(const scope&) = delete;
  ~scope() {
    if (!session_) return;
    const auto end = std::chrono::steady_clock::now();
    detail::session& s = *session_;
    std::lock_guard lk(s.m);
    if (!s.on.load()) return;  // the trace stopped meanwhile
    using ns = std::chrono::nanoseconds;
    s.events.push_back({std::move(name_), category_, std::chrono::duration_cast<ns>(begin_ - s.start).count(),
                        std::chrono::duration_cast<ns>(end - begin_).count(), detail::thread_index(s), bytes_});
  }

 private:
  std::shared_ptr<detail::session> session_;
  const char* category_ = "";
  std::string name_;
  std::int64_t bytes_ = -1;
  std::chrono::steady_clock::time_point begin_;
};

}  // namespace dtrain::trace
