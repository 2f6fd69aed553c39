#pragma once
/// \file
/// `cluster_coordinator`: TF's `tf.distribute.coordinator.ClusterCoordinator`, the custom training loop
/// of parameter_server_strategy. TF ships functions to workers that only run `server.join()`; C++ cannot,
/// so every task runs the same program, and the coordinator's calls have a counterpart on each worker:
/// - on the coordinator (the chief), `schedule(fn, args...)` queues `fn` and returns a `remote_value`;
///   a thread per worker sends each queued function to its worker as soon as that one is free, and
///   queues it again when the worker fails; `join()` waits for every function scheduled so far,
///   `fetch()` for one, `done()` tells whether all have finished;
/// - on a worker, `schedule` records `fn` with the worker's own arguments, and `join`, `fetch` and `done`
///   run the coordinator's functions until the coordinator's matching call returns, then return what it
///   returned (so both sides go on through the same program); the destructor runs them until the
///   coordinator's destructor ends the job.
/// A function is known by its type and its arguments' types, numbered in the order the program first
/// schedules them, so a worker whose program started again runs them too: the coordinator looks for
/// failed workers every second, and one that answers takes functions at once. A function runs on the variables as the ps tasks hold them when it
/// starts; its updates go through the strategy's optimizer (`make_optimizer`: each `apply_gradients`
/// is applied by the ps tasks, once, even when the function runs again elsewhere), and what it adds to
/// the strategy's metrics (`make_metric`) is added into the coordinator's once it has run.
/// Arguments are the worker's `per_worker_iterator`s (each worker reads its own) and values of trivially
/// copyable types (the coordinator's, sent along); the result is void or a trivially copyable value.

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <typeindex>

#include "dtrain/distribute/parameter_server_strategy.hpp"

namespace dtrain {

template <data::dataset D>
class per_worker_iterator;

/// TF's `PerWorkerDataset`: on each worker the pipeline the dataset function built for it (input
/// pipeline i of W); nothing on the coordinator, which reads no data.
template <data::dataset D>
class per_worker_dataset {
 public:
  explicit per_worker_dataset(std::optional<D> d) : d_(std::move(d)) {}
  /// TF's `iter(per_worker_dataset)`: the worker's iterator, which the scheduled functions advance.
  per_worker_iterator<D> make_iterator() const { return per_worker_iterator<D>(d_); }

 private:
  std::optional<D> d_;
};

/// TF's `PerWorkerDistributedIterator`: pass it to `schedule`; inside the function `next()` is the
/// running worker's next element (nullopt at the end of its data).
template <data::dataset D>
class per_worker_iterator {
 public:
  explicit per_worker_iterator(const std::optional<D>& d) {
    if (d) it_.emplace(*d, 0);
  }
  auto next() {
    if (!it_) throw usage_error("per_worker_iterator: read it inside a function scheduled with cluster_coordinator");
    return it_->next();
  }

 private:
  std::optional<data::iterator<D>> it_;
};

namespace detail {
template <class T>
struct is_per_worker_iterator : std::false_type {};
template <class D>
struct is_per_worker_iterator<per_worker_iterator<D>> : std::true_type {};

/// How a scheduled function's argument reaches the worker: a per-worker iterator stays the worker's
/// own; a value is the coordinator's, its bytes sent with the function.
template <class A>
struct closure_argument {
  using T = std::remove_cvref_t<A>;
  static_assert(std::is_trivially_copyable_v<T>,
                "cluster_coordinator::schedule: an argument is a per_worker_iterator or a trivially copyable value "
                "(sent to the worker); capture anything else in the function, which every task builds alike");
  T value;
  static void write(std::string& out, const T& v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void read(std::string_view& in) {
    if (in.size() < sizeof(T)) throw comm_error("cluster_coordinator: a scheduled function's arguments are short");
    std::memcpy(&value, in.data(), sizeof(T));
    in.remove_prefix(sizeof(T));
  }
  T& get() { return value; }
};
template <class A>
  requires is_per_worker_iterator<std::remove_cvref_t<A>>::value
struct closure_argument<A> {
  using T = std::remove_cvref_t<A>;
  T* it;
  closure_argument(T& i) : it(&i) {}
  static void write(std::string&, const T&) {}
  void read(std::string_view&) {}
  T& get() { return *it; }
};

template <class... A>
struct closure_key {};

/// A scheduled function's result once it has run (its bytes; a failure is the coordinator's `failure_`).
struct closure_slot {
  bool finished = false;
  std::string result;
};
}  // namespace detail

class cluster_coordinator;

/// TF's `RemoteValue`: what `schedule` returns; `fetch()` waits for the function and returns its
/// result (on a worker: the value the coordinator fetched).
template <class R>
class remote_value {
 public:
  R fetch();

 private:
  friend class cluster_coordinator;
  remote_value(cluster_coordinator& c, std::shared_ptr<detail::closure_slot> s) : c_(&c), slot_(std::move(s)) {}
  cluster_coordinator* c_;
  std::shared_ptr<detail::closure_slot> slot_;
};

class cluster_coordinator {
 public:
  explicit cluster_coordinator(parameter_server_strategy& s) : s_(s), next_step_(std::uint64_t(std::random_device{}()) << 24) {
    if (!s_.is_chief()) return;
    threads_.resize(std::size_t(s_.num_workers()));
    syncs_.resize(std::size_t(s_.num_workers()));
    rejoiner_ = std::thread([this] { rejoin(); });
  }
  cluster_coordinator(const cluster_coordinator&) = delete;
  cluster_coordinator& operator=(const cluster_coordinator&) = delete;
  /// The coordinator waits for what is scheduled and ends the workers' part (each worker's destructor
  /// returns then); a worker runs functions until that happens. While an exception unwinds the
  /// coordinator, the workers' calls fail too (a comm_error: the job restarts).
  ~cluster_coordinator() {
    if (!s_.is_chief()) {
      if (std::uncaught_exceptions() == 0) try {
          serve(true);
        } catch (const std::exception& e) {
          s_.log(std::string("the coordinator failed: ") + e.what());
        }
      return;
    }
    if (std::uncaught_exceptions() == 0) try {
        wait_all();
      } catch (const std::exception& e) {
        s_.log(e.what());
      }
    {
      std::lock_guard l(m_);
      start_threads();  // every live worker is told, whether or not it ran a function
      if (std::uncaught_exceptions() > 0) sync_locked("%the coordinator failed");
      for (std::size_t w = 0; w < syncs_.size(); ++w)
        if (running_.count(w)) syncs_[w].push_back({ps::message::stop, {}});
      stopping_ = true;
    }
    cv_.notify_all();
    rejoiner_.join();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

  parameter_server_strategy& strategy() { return s_; }

  /// TF's `create_per_worker_dataset(dataset_fn)`: each worker builds `fn(input_context)` for itself.
  template <class F>
  auto create_per_worker_dataset(F&& fn) {
    using D = std::invoke_result_t<F&, const input_context&>;
    if (s_.is_chief()) return per_worker_dataset<D>(std::nullopt);
    return per_worker_dataset<D>(fn(input_context{s_.num_workers(), s_.worker_index(), 1}));
  }

  /// TF's `schedule(fn, args)`: `fn(args...)` runs on some worker; the result comes as a remote value.
  template <class F, class... A>
  auto schedule(F&& fn, A&&... args) {
    using R = std::invoke_result_t<std::decay_t<F>&, typename detail::closure_argument<A>::T&...>;
    static_assert(std::is_void_v<R> || std::is_trivially_copyable_v<R>,
                  "cluster_coordinator::schedule: the function returns void or a trivially copyable value");
    const std::uint64_t id = function_id<std::decay_t<F>, std::remove_cvref_t<A>...>();
    auto slot = std::make_shared<detail::closure_slot>();
    if (!s_.is_chief()) {  // the worker's function, with its arguments, for when the coordinator sends it
      functions_[id] = [f = std::decay_t<F>(fn), held = std::tuple<detail::closure_argument<A>...>{{args}...}](
                           std::string_view in) mutable {
        std::apply([&](auto&... a) { (a.read(in), ...); }, held);
        std::string out;
        if constexpr (std::is_void_v<R>) {
          std::apply([&](auto&... a) { f(a.get()...); }, held);
        } else {
          const R r = std::apply([&](auto&... a) { return f(a.get()...); }, held);
          out.assign(reinterpret_cast<const char*>(&r), sizeof r);
        }
        return out;
      };
      return remote_value<R>(*this, std::move(slot));
    }
    s_.initialise_for_closures();
    work w{id, 0, {}, slot, result_size<R>()};
    (detail::closure_argument<A>::write(w.args, args), ...);
    {
      std::lock_guard l(m_);  // (after a failure nothing runs: the next join or fetch throws it)
      w.step = next_step_++;
      queue_.push_back(std::move(w));
      ++unfinished_;
      start_threads();
    }
    cv_.notify_all();
    return remote_value<R>(*this, std::move(slot));
  }

  /// TF's `join()`: returns when every function scheduled so far has run; the first failure of one is
  /// thrown here. Workers that failed and came back take functions again from here on.
  void join() {
    if (!s_.is_chief()) return void(answer());
    wait_all();
    {
      std::lock_guard l(m_);
      s_.reconnect_workers();
      start_threads();
    }
    s_.read_into_model();
    sync({});
  }
  /// TF's `done()`: whether every function scheduled so far has run (a failure is thrown).
  bool done() {
    if (!s_.is_chief()) return answer() == "1";
    bool all;
    {
      std::lock_guard l(m_);
      if (!failure_.empty()) throw_failure();
      all = unfinished_ == 0;
    }
    sync(all ? "1" : "0");
    return all;
  }

 private:
  template <class R>
  friend class remote_value;

  struct work {
    std::uint64_t function, step;
    std::string args;
    std::shared_ptr<detail::closure_slot> slot;
    std::size_t result_size;
  };
  template <class R>
  static constexpr std::size_t result_size() {
    if constexpr (std::is_void_v<R>) return 0;
    else return sizeof(R);
  }

  /// The number of function F with arguments A: the order in which the program first schedules it.
  template <class F, class... A>
  std::uint64_t function_id() {
    const std::type_index key(typeid(detail::closure_key<F, A...>));
    const auto [at, fresh] = ids_.try_emplace(key, ids_.size());
    return at->second;
  }

  /// The coordinator's answer to a join / fetch / done, for every live worker's matching call: '='
  /// and the value, or the failure thrown ('!' a function's, '#' a ps task's, '%' the coordinator's)
  /// with its message.
  void sync(const std::string& answer, char how = '=') {
    {
      std::lock_guard l(m_);
      sync_locked(how + answer);
    }
    cv_.notify_all();
  }
  void sync_locked(const std::string& payload) {
    for (std::size_t w = 0; w < syncs_.size(); ++w)
      if (running_.count(w)) syncs_[w].push_back({ps::message::sync, payload});
  }
  /// A worker's join / fetch / done: the coordinator's answer, or its failure thrown here too.
  std::string answer() {
    std::string a = serve(false);
    if (a.empty()) return a;  // the job ended
    if (a[0] == '#') throw ps::ps_task_failed(a.substr(1));
    if (a[0] == '%') throw comm_error("cluster_coordinator: " + a.substr(1));
    if (a[0] == '!') throw error(a.substr(1));
    return a.substr(1);
  }

  /// Waits for every function queued so far.
  void wait_all() {
    std::unique_lock l(m_);
    cv_.wait(l, [&] { return unfinished_ == 0 || !failure_.empty() || live_threads_ == 0; });
    if (!failure_.empty()) throw_failure();
    if (unfinished_ > 0) throw comm_error("cluster_coordinator: every worker failed; the scheduled functions cannot run");
  }
  /// Waits for one function (fetch).
  std::string wait_for(const std::shared_ptr<detail::closure_slot>& slot) {
    std::unique_lock l(m_);
    cv_.wait(l, [&] { return slot->finished || !failure_.empty() || live_threads_ == 0; });
    if (!slot->finished) {
      if (!failure_.empty()) throw_failure();
      throw comm_error("cluster_coordinator: every worker failed; the scheduled functions cannot run");
    }
    return slot->result;
  }
  /// The first failure: a function that threw (an error of the program, as TF raises it), or a ps task
  /// lost (the job restarts from its checkpoint).
  /// The workers throw it at the same call (with m_ held).
  [[noreturn]] void throw_failure() {
    sync_locked((ps_lost_ ? "#" : "!") + failure_);
    cv_.notify_all();
    if (ps_lost_) throw ps::ps_task_failed(failure_);
    throw error(failure_);
  }

  /// A thread for each live worker that has none (called with m_ held).
  void start_threads() {
    for (std::size_t w = 0; w < threads_.size(); ++w) {
      if (!s_.worker_alive(w) || running_.count(w)) continue;
      if (threads_[w].joinable()) threads_[w].join();  // it ended when its worker failed
      syncs_[w].clear();
      running_.insert(w);
      ++live_threads_;
      threads_[w] = std::thread([this, w] { dispatch(w); });
    }
  }

  /// Worker w's thread: the coordinator's answers to its calls, and the queued functions, in order.
  void dispatch(std::size_t w) {
    ps::channel& c = s_.worker_channel(w);
    for (;;) {
      std::unique_lock l(m_);
      cv_.wait(l, [&] { return !syncs_[w].empty() || (!queue_.empty() && failure_.empty()) || stopping_; });
      if (!syncs_[w].empty()) {
        const auto [kind, answer] = syncs_[w].front();
        syncs_[w].pop_front();
        l.unlock();
        try {
          c.send(kind, answer);
        } catch (const std::exception& e) {
          return lost(w, nullptr, e.what());
        }
        if (kind == ps::message::stop) return finish(w);
        continue;
      }
      if (queue_.empty() || !failure_.empty()) return finish(w);  // stopping
      work job = std::move(queue_.front());
      queue_.pop_front();
      l.unlock();
      std::string reply;
      bool failed = false, ps_lost = false;
      try {
        std::string head(16, '\0');
        std::memcpy(head.data(), &job.function, 8);
        std::memcpy(head.data() + 8, &job.step, 8);
        c.send(ps::message::closure, head + job.args);
        const ps::message_header h = c.receive(job.result_size + 4 * s_.metric_values() + 65536);
        reply.assign(h.length, '\0');
        c.read_payload(h, {asio::buffer(reply)});
        failed = h.kind == std::uint32_t(ps::message::failed);
        ps_lost = h.kind == std::uint32_t(ps::message::ps_failed);
        if (!failed && !ps_lost) {
          c.expect(h, ps::message::ok);
          if (reply.size() != job.result_size + 4 * s_.metric_values())
            c.fail("answered a scheduled function with " + std::to_string(reply.size()) + " bytes, " +
                   std::to_string(job.result_size + 4 * s_.metric_values()) + " expected (is every task running the "
                   "same program?)");
        }
      } catch (const std::exception& e) {
        return lost(w, &job, e.what());
      }
      l.lock();
      if (failed || ps_lost) {
        if (failure_.empty()) {
          failure_ = ps_lost ? "cluster_coordinator: worker " + std::to_string(w) + " lost a ps task: " + reply +
                                   "; the job cannot go on: restart it (it resumes from its latest checkpoint)"
                             : "cluster_coordinator: a scheduled function failed on worker " + std::to_string(w) + ": " + reply;
          ps_lost_ = ps_lost;
        }
      } else {
        std::vector<float> totals(s_.metric_values());
        std::memcpy(totals.data(), reply.data() + job.result_size, totals.size() * sizeof(float));
        s_.add_metric_totals(totals);
        job.slot->result = reply.substr(0, job.result_size);
      }
      job.slot->finished = true;
      --unfinished_;
      l.unlock();
      cv_.notify_all();
    }
  }
  /// The coordinator's watch for failed workers whose program started again: every second or so it tries
  /// to reach them, and one that answers takes functions again at once.
  void rejoin() {
    std::unique_lock l(m_);
    while (!stopping_) {
      cv_.wait_for(l, std::chrono::seconds(1), [&] { return stopping_; });
      for (std::size_t w = 0; w < threads_.size() && !stopping_; ++w) {
        if (s_.worker_alive(w) || running_.count(w)) continue;
        l.unlock();
        auto c = s_.reach_worker(w);  // (nothing else touches a failed worker's connection)
        l.lock();
        if (!c) continue;
        if (stopping_) {  // too late: its calls end at once
          try {
            c->send(ps::message::stop);
          } catch (const comm_error&) {
          }
          continue;
        }
        s_.worker_rejoined(w, std::move(*c));
        start_threads();
      }
    }
  }

  /// Worker w failed: its function (if any) goes back to the queue for another worker.
  void lost(std::size_t w, work* job, const std::string& why) {
    {
      std::lock_guard l(m_);
      s_.worker_failed(w);
      s_.log("worker " + std::to_string(w) + " failed (" + why + ")" +
             (job ? "; its function runs on another worker" : ""));
      if (job) queue_.push_front(std::move(*job));
    }
    finish(w);
  }
  void finish(std::size_t w) {
    {
      std::lock_guard l(m_);
      running_.erase(w);
      --live_threads_;
    }
    cv_.notify_all();
  }

  /// A worker's side of join / fetch / done (`final`: of the destructor): runs the functions the
  /// coordinator sends until it answers the matching call; returns that answer.
  std::string serve(bool final) {
    if (ended_) return {};
    ps::channel& c = s_.coordinator();
    for (;;) {
      const ps::message_header h = c.receive(std::uint64_t(16) << 20);
      if (h.kind == std::uint32_t(ps::message::stop)) {
        c.read_payload(h, {});
        ended_ = true;  // before this worker's program got here: it started again, and was behind
        return {};
      }
      std::string payload(h.length, '\0');
      if (h.kind == std::uint32_t(ps::message::sync)) {
        c.read_payload(h, {asio::buffer(payload)});
        if (final) continue;
        return payload;
      }
      c.expect(h, ps::message::closure);
      if (h.length < 16) c.fail("sent a scheduled function without its number");
      c.read_payload(h, {asio::buffer(payload)});
      std::uint64_t id = 0, step = 0;
      std::memcpy(&id, payload.data(), 8);
      std::memcpy(&step, payload.data() + 8, 8);
      const auto f = functions_.find(id);
      if (f == functions_.end()) {
        c.send(ps::message::error, "this worker's program has not scheduled function " + std::to_string(id) + " yet");
        c.close();
        throw usage_error("cluster_coordinator: the coordinator sent function " + std::to_string(id) +
                          ", which this worker's program has not scheduled (is every task running the same program?)");
      }
      std::string result;
      std::vector<float> totals;
      try {
        totals = s_.run_closure(step, [&] { result = f->second(std::string_view(payload).substr(16)); });
      } catch (const ps::ps_task_failed& e) {
        try {
          c.send(ps::message::ps_failed, e.what());
        } catch (const comm_error&) {
        }
        c.close();
        throw;
      } catch (const std::exception& e) {
        c.send(ps::message::failed, e.what());
        continue;
      }
      result.append(reinterpret_cast<const char*>(totals.data()), totals.size() * sizeof(float));
      c.send(ps::message::ok, result);
    }
  }

  parameter_server_strategy& s_;
  std::map<std::type_index, std::uint64_t> ids_;
  // the worker's functions
  std::map<std::uint64_t, std::function<std::string(std::string_view)>> functions_;
  // the coordinator's queue and threads
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<work> queue_;
  std::vector<std::thread> threads_;
  std::thread rejoiner_;
  std::set<std::size_t> running_;
  std::vector<std::deque<std::pair<ps::message, std::string>>> syncs_;
  std::int64_t unfinished_ = 0;
  int live_threads_ = 0;
  std::string failure_;
  bool ps_lost_ = false, stopping_ = false;
  bool ended_ = false;  // a worker: the coordinator ended the job
  std::uint64_t next_step_;
};

template <class R>
R remote_value<R>::fetch() {
  std::string bytes;
  if (c_->s_.is_chief()) {
    bytes = c_->wait_for(slot_);
    c_->sync(bytes);
  } else {
    bytes = c_->answer();
    if (bytes.empty()) bytes.assign(cluster_coordinator::result_size<R>(), '\0');  // the job ended: this worker's program was behind
  }
  if constexpr (std::is_void_v<R>) {
    return;  // (a worker's answer is empty)
  } else {
    if (bytes.size() != sizeof(R))
      throw comm_error("cluster_coordinator: fetch got " + std::to_string(bytes.size()) + " bytes for a value of " +
                       std::to_string(sizeof(R)));
    R r;
    std::memcpy(&r, bytes.data(), sizeof r);
    return r;
  }
}

}  // namespace dtrain
