#pragma once
/// \file
/// `parameter_server_strategy`: TF's `ParameterServerStrategy` with `Model.fit` (the coordinator's
/// scheduling of TF's `ClusterCoordinator` inside `fit`), asynchronous data parallelism. The cluster (TF_CONFIG) has one `chief` (the coordinator), workers
/// and `ps` tasks; every task runs the same program, as under the multi-worker strategy:
/// - a ps task's constructor is TF's `server.join()`: it holds its share of the variables (placed round
///   robin, or split by the `variable_partitioner`, ps/partitioner.hpp), applies the optimizer to each
///   push of gradients (ps/server.hpp), and when the coordinator ends the job it ends the process (exit 0;
///   `peer_failure_exit_code` when the coordinator failed);
/// - `make_model` builds the model everywhere; the coordinator's values initialise the ps tasks when
///   `fit` first runs;
/// - `fit` on the coordinator schedules the epoch's `steps_per_epoch` steps (required, as in TF) on the
///   workers, each as soon as one is free, reports each finished step to the callbacks (the loss and
///   metrics over every step of the epoch so far), re-runs a step whose worker failed on another one,
///   and at the epoch's end reads the variables back for validation, callbacks and checkpoints;
/// - `fit` on a worker serves the coordinator: for each step it reads the variables from the ps tasks,
///   trains on its next batch (worker i of W takes batches i, i + W, ... of the dataset) and pushes the
///   gradients, which the ps tasks apply; when training ends it keeps the final variables, so
///   `evaluate`, `predict` and saving work on every task as after any `fit`.
/// The model is a compile-time type as everywhere; one model per strategy.

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <random>
#include <thread>

#include "dtrain/core/environment.hpp"
#include "dtrain/distribute/ps/partitioner.hpp"
#include "dtrain/distribute/ps/server.hpp"
#include "dtrain/distribute/strategy.hpp"
#include "dtrain/model/fit.hpp"

namespace dtrain {

struct parameter_server_options {
  /// How variables are split among the ps tasks (ps/partitioner.hpp); empty: each variable whole.
  dtrain::variable_partitioner variable_partitioner{};
  /// How long every task waits for the others to come up.
  std::chrono::milliseconds connect_timeout{300'000};
  /// A task whose host goes down or is cut off fails the connections to it within about this long
  /// (ps/channel.hpp); zero: the kernel's defaults. A slow task is waited for.
  std::chrono::milliseconds liveness_timeout{10'000};
  /// The job token every connection proves; nullopt: `comm::job_token_from_environment()`, "": none.
  std::optional<std::string> job_token{};
  /// TLS 1.3 on every connection, keyed by the job token (also DTRAIN_TLS=1; docs/security.md).
  bool tls = false;
  /// Where log lines go (default: stderr, prefixed "dtrain parameter_server:").
  std::function<void(const std::string&)> log{};
};

template <class M>
class ps_model;
class ps_optimizer;

namespace detail {
template <class D>
struct is_per_replica_dataset : std::false_type {};
template <class D>
struct is_per_replica_dataset<per_replica_dataset<D>> : std::true_type {};
}  // namespace detail

/// One replica per task and no collectives: `reduce`, `experimental_local_results` and
/// `distribute_dataset` are the default strategy's (each worker's `fit` takes its share of the batches).
class parameter_server_strategy final : public default_strategy, public replica_context {
 public:
  using backend_type = cpu;
  /// What `make_model<Model>()` returns: Model, whose `fit` runs the job's role.
  template <class Model>
  using model_type = ps_model<typename detail::rebind_model<Model, cpu>::type>;

  /// Resolves the cluster (explicit, else TF_CONFIG) and connects this task to the ones it talks to. A
  /// ps task serves the job here and never returns (see above).
  explicit parameter_server_strategy(parameter_server_options o = {}, std::optional<cluster_info> cluster = {})
      : o_(std::move(o)), cluster_(cluster ? std::move(*cluster) : resolve_cluster()) {
    if (!o_.log) o_.log = [](const std::string& s) { std::fprintf(stderr, "dtrain parameter_server: %s\n", s.c_str()); };
    const auto count = [&](const char* job) { return cluster_.spec.num_tasks(job); };
    if (count("chief") != 1 || count("worker") < 1 || count("ps") < 1)
      throw config_error("parameter_server_strategy: the cluster (" + cluster_.source + ") needs one chief task (the "
                         "coordinator), at least one worker and at least one ps task; it has " +
                         std::to_string(count("chief")) + ", " + std::to_string(count("worker")) + " and " +
                         std::to_string(count("ps")));
    id_.tasks = {count("worker"), count("ps")};
    id_.fingerprint = ps::job_fingerprint(cluster_.spec);
    id_.token = o_.job_token ? *o_.job_token : comm::job_token_from_environment();
    id_.liveness_timeout = o_.liveness_timeout;
    if (o_.tls || environment::get(environment::tls) == "1") {
      if (id_.token.empty())
        throw config_error("parameter_server_strategy: TLS (DTRAIN_TLS) is keyed by the job token: set DTRAIN_JOB_TOKEN "
                           "or DTRAIN_JOB_TOKEN_FILE too");
      id_.tls = std::make_shared<comm::detail::tls_context>();
    }
    const std::string& type = cluster_.task_type;
    const int i = cluster_.task_id;
    if (type == "evaluator")
      throw config_error("parameter_server_strategy: the evaluator task watches checkpoints with a "
                         "sidecar_evaluator (checkpoint/sidecar_evaluator.hpp), not with this strategy");
    id_.me = type == "chief" ? 0 : type == "worker" ? id_.tasks.worker(i) : id_.tasks.ps_task(i);
    const auto deadline = ps::clock::now() + o_.connect_timeout;
    if (type == "ps") serve_and_exit();
    for (int j = 0; j < id_.tasks.ps; ++j) ps_.push_back(ps::connect(id_, id_.tasks.ps_task(j), address("ps", j), deadline));
    if (type == "chief") {
      for (int w = 0; w < id_.tasks.workers; ++w)
        workers_.push_back(ps::connect(id_, id_.tasks.worker(w), address("worker", w), deadline));
      alive_.assign(workers_.size(), true);
    } else {
      ps::listener l(id_, address("worker", i), o_.log);
      auto c = l.accept([](int task) { return task == 0; }, deadline);
      if (!c)
        throw comm_error(id_.tasks.name(id_.me) + ": the coordinator (chief:0) did not connect within " +
                         std::to_string(o_.connect_timeout.count() / 1000) + " s");
      coordinator_.emplace(std::move(*c));
    }
  }
  parameter_server_strategy(const parameter_server_strategy&) = delete;
  parameter_server_strategy& operator=(const parameter_server_strategy&) = delete;
  /// The coordinator ends the job: the ps tasks end (their processes exit 0). Not while an exception
  /// unwinds the coordinator's program: then the ps tasks see it fail, and exit 138 for a restart.
  ~parameter_server_strategy() override {
    if (!is_chief() || std::uncaught_exceptions() > 0) return;
    for (auto& c : ps_) try {
        c.send(ps::message::shutdown);
        c.receive_text(ps::message::ok, 0);
      } catch (const std::exception&) {
      }
  }

  int num_replicas_in_sync() const override { return 1; }
  int replica_id() const override { return 0; }
  bool is_chief() const override { return id_.me == 0; }
  task_info cluster_resolver() const { return {cluster_.task_type, cluster_.task_id}; }
  const cluster_info& cluster() const { return cluster_; }
  /// The number of workers and ps tasks (TF: `strategy.extended._num_workers`, `_num_ps`).
  int num_workers() const { return id_.tasks.workers; }
  int num_ps() const { return id_.tasks.ps; }
  /// Where the variables live (after `make_model`): each ps task's regions of the parameter buffer.
  const ps::placement& placement() const { return placement_; }

  /// Builds the model on this task. Its trainable variables are placed on the ps tasks now (the
  /// coordinator sends their values when `fit` first runs).
  template <class Model>
  model_type<Model> make_model(std::uint64_t seed = default_seed) {
    using M = typename detail::rebind_model<Model, cpu>::type;
    if (made_) throw usage_error("parameter_server_strategy: make_model was called already (one model per strategy)");
    strategy_scope scope(this);
    M m(seed);
    std::vector<ps::variable> vars;
    for (const auto& l : m.layers())
      for (const auto& v : l.variables)
        (v.trainable ? vars : moving_).push_back({l.name + "/" + v.name, v.shape, v.offset, v.size});
    placement_ = ps::place(vars, std::size_t(id_.tasks.ps), o_.variable_partitioner);
    made_ = true;
    m.set_strategy(this, is_chief() ? nullptr : &push_);
    return model_type<Model>(std::move(m), *this);
  }
  [[nodiscard]] strategy_scope scope() { return strategy_scope(this); }

  template <class F, class... A>
  auto run(F&& f, A&&... args) {
    strategy_scope scope(this);
    return std::forward<F>(f)(std::forward<A>(args)...);
  }
  /// TF's dataset function: `fn(input_context)` builds this worker's pipeline (input pipeline i of W).
  template <class F>
  auto distribute_datasets_from_function(F&& f) const {
    const int w = id_.me >= 1 && id_.me <= id_.tasks.workers ? id_.me - 1 : 0;
    auto d = std::forward<F>(f)(input_context{id_.tasks.workers, w, 1});
    return per_replica_dataset<decltype(d)>{std::move(d), nullptr};
  }

  // ---- replica_context: one replica per task, no collectives ------------------------------------------
  using replica_context::broadcast;
  void all_reduce(std::span<float>, reduce_op) override {}
  void broadcast(std::span<std::byte>, int) override {}
  void all_gather(std::span<const float> in, std::span<float> out) override {
    if (out.size() != in.size()) throw value_error("all_gather: a parameter server task holds one replica");
    std::copy(in.begin(), in.end(), out.begin());
  }
  void barrier() override {}

  // ---- what ps_model's loops use -------------------------------------------------------------------------
  /// The worker this task is (0-based), or -1 on the coordinator.
  int worker_index() const { return is_chief() ? -1 : id_.me - 1; }
  /// Reads every ps task's values into their places of `params` (the parameter buffer's layout).
  void pull(std::span<float> params) {
    with_ps([&] {
      for (auto& c : ps_) c.send(ps::message::pull);
      for (std::size_t j = 0; j < ps_.size(); ++j) {
        const ps::message_header h = ps_[j].receive(placement_.values_on(j) * sizeof(float));
        ps_[j].expect(h, ps::message::values);
        std::vector<asio::mutable_buffer> parts;
        for (const auto& r : placement_.tasks[j]) parts.push_back(asio::buffer(params.data() + r.offset, r.size * sizeof(float)));
        ps_[j].read_payload(h, std::move(parts));
      }
    });
  }
  /// The optimizer options the ps tasks cannot honour, each holding part of the variables: a moving average
  /// (nothing would swap it in) and the norm clippings (which need a variable's, or every, gradient).
  static void refuse_on_ps_tasks(const any_optimizer& o, const std::string& who) {
    if (o.use_ema())
      throw usage_error(who + ": use_ema is not supported under parameter_server_strategy (the ps tasks would keep "
                        "the average, and nothing swaps it in)");
    const gradient_clipping c = o.clipping();
    if (c.clipnorm > 0.0f || c.global_clipnorm > 0.0f)
      throw usage_error(who + ": clipnorm and global_clipnorm are not supported under parameter_server_strategy: each "
                        "ps task holds only its share of the gradients; clipvalue clips each value where it is");
  }
  /// Sends the ps tasks their values (their regions of `weights`), the optimizer's config and its state
  /// (`state.slots`: each slot over the `params` trainable values, as an optimizer lays them out).
  /// Returns false when they held values already (a coordinator that restarted): those are kept.
  bool initialise_ps(std::span<const float> weights, const nlohmann::json& optimizer_config, const optimizer_state& state,
                     std::size_t params) {
    const std::size_t slots = params ? state.slots.size() / params : 0;
    bool fresh = true;
    with_ps([&] {
      for (std::size_t j = 0; j < ps_.size(); ++j) {
        nlohmann::json regions = nlohmann::json::array();
        for (const auto& r : placement_.tasks[j])
          regions.push_back({{"variable", r.variable}, {"shard", r.shard}, {"offset", r.offset}, {"size", r.size}});
        ps_[j].send(ps::message::init, nlohmann::json{{"optimizer", optimizer_config}, {"regions", regions},
                                                      {"slots", slots}, {"iterations", state.iterations}}.dump());
        if (ps_[j].receive_text(ps::message::ok, 64) != "new") {
          fresh = false;
          continue;
        }
        auto parts = parts_of(weights, j);
        for (std::size_t k = 0; k < slots; ++k) {
          const auto more = parts_of(std::span<const float>(state.slots).subspan(k * params, params), j);
          parts.insert(parts.end(), more.begin(), more.end());
        }
        ps_[j].send(ps::message::values, parts);
        ps_[j].receive_text(ps::message::ok, 0);
      }
    });
    return fresh;
  }
  /// The ps tasks' values, into their places of `weights`, and their optimizer's state laid out over the
  /// `params` trainable values (the step count is ps task 0's).
  optimizer_state read_state(std::span<float> weights, std::size_t params) {
    optimizer_state state;
    with_ps([&] {
      for (auto& c : ps_) c.send(ps::message::state);
      for (std::size_t j = 0; j < ps_.size(); ++j) {
        const auto head = nlohmann::json::parse(ps_[j].receive_text(ps::message::ok, 4096));
        const auto slots = head.at("slots").get<std::size_t>();
        if (slots > ps::max_slots || (j > 0 && slots * params != state.slots.size()))
          throw comm_error(ps_[j].peer() + " holds " + std::to_string(slots) + " optimizer slots per value, ps:0 " +
                           std::to_string(state.slots.size() / std::max<std::size_t>(1, params)));
        if (j == 0) state.iterations = head.at("iterations").get<std::int64_t>(), state.slots.assign(slots * params, 0.0f);
        const ps::message_header h = ps_[j].receive((1 + slots) * placement_.values_on(j) * sizeof(float));
        ps_[j].expect(h, ps::message::values);
        std::vector<asio::mutable_buffer> parts;
        auto add = [&](float* base) {
          for (const auto& r : placement_.tasks[j]) parts.push_back(asio::buffer(base + r.offset, r.size * sizeof(float)));
        };
        add(weights.data());
        for (std::size_t k = 0; k < slots; ++k) add(state.slots.data() + k * params);
        ps_[j].read_payload(h, std::move(parts));
      }
    });
    return state;
  }
  /// How many steps each ps task has applied.
  std::vector<std::uint64_t> applied_steps() {
    std::vector<std::uint64_t> n;
    for (auto& c : ps_) {
      c.send(ps::message::stats);
      n.push_back(nlohmann::json::parse(c.receive_text(ps::message::ok, 4096)).at("applied").get<std::uint64_t>());
    }
    return n;
  }
  /// The coordinator's connection (on a worker).
  ps::channel& coordinator() { return *coordinator_; }
  /// The step a worker's next push belongs to.
  void set_step(std::uint64_t s) { push_.step = s; }
  /// Sends the gradients of a step (the parameter buffer's layout) to the ps tasks, which apply them.
  void push(std::span<const float> g, std::uint64_t step) {
    with_ps([&] {
      for (std::size_t j = 0; j < ps_.size(); ++j) {
        auto parts = parts_of(g, j);
        parts.insert(parts.begin(), asio::buffer(&step, sizeof step));
        ps_[j].send(ps::message::push, parts);
      }
      for (auto& c : ps_) c.receive_number(ps::message::ok);
    });
  }
  /// The non-trainable variables (moving statistics), which workers report with each step.
  const std::vector<ps::variable>& moving() const { return moving_; }

  /// One worker's answer to a step.
  struct step_result {
    bool ran_out = false;
    std::vector<float> states, moving;
  };
  /// Runs steps [first, first + count) on the workers, each as soon as one is free (a step whose worker
  /// fails runs on another), calling `done(result)` on this thread as each finishes; `done` returns
  /// false to start no more. Returns the number of steps run. A failed worker that comes back (its
  /// program started again and waits for the coordinator) takes steps again within a second or so.
  std::int64_t run_steps(std::uint64_t first, std::int64_t count, const std::function<bool(const step_result&)>& done) {
    reconnect_workers();
    std::mutex m;
    std::condition_variable cv;
    std::deque<std::uint64_t> retry;
    std::deque<step_result> results;
    std::int64_t claimed = 0, finished = 0, in_flight = 0;
    bool stopping = false, ended = false;
    std::string fatal;  // a ps task failed
    int running = 0;
    std::vector<std::thread> threads;
    std::vector<bool> idle(workers_.size(), true);  // no thread of this call runs the worker
    std::function<void(std::size_t)> spawn;          // (with m held)
    auto work = [&](std::size_t w) {
      for (;;) {
        std::uint64_t id;
        {  // a step to run; or, when none is left, wait while others run theirs (one may fail and come back)
          std::unique_lock l(m);
          cv.wait(l, [&] { return stopping || !retry.empty() || claimed < count || in_flight == 0; });
          if (stopping) break;
          if (!retry.empty()) id = retry.front(), retry.pop_front();
          else if (claimed < count) id = first + std::uint64_t(claimed++);
          else break;
          ++in_flight;
        }
        step_result r;
        try {
          workers_[w].send(ps::message::step, id);
          const ps::message_header h = workers_[w].receive(std::uint64_t(64) << 20);
          if (h.kind == std::uint32_t(ps::message::ran_out)) {
            workers_[w].read_payload(h, {});
            r.ran_out = true;
          } else if (h.kind == std::uint32_t(ps::message::ps_failed)) {
            std::string why(h.length, '\0');
            workers_[w].read_payload(h, {asio::buffer(why)});
            std::lock_guard l(m);
            fatal = "worker " + std::to_string(w) + " lost a ps task: " + why;
            stopping = true;
            --in_flight;
            cv.notify_all();
            break;
          } else {
            workers_[w].expect(h, ps::message::ok);
            std::string text(h.length, '\0');
            workers_[w].read_payload(h, {asio::buffer(text)});
            const auto j = nlohmann::json::parse(text);
            r.states = j.at("states").get<std::vector<float>>();
            r.moving = j.at("moving").get<std::vector<float>>();
          }
        } catch (const std::exception& e) {
          std::lock_guard l(m);
          o_.log(std::string("worker ") + std::to_string(w) + " failed (" + e.what() + "); its step " +
                 std::to_string(id) + " runs on another worker");
          alive_[w] = false;
          retry.push_back(id);
          --in_flight;
          cv.notify_all();
          break;
        }
        std::lock_guard l(m);
        results.push_back(std::move(r));
        --in_flight;
        cv.notify_all();
      }
      std::lock_guard l(m);
      --running;
      idle[w] = true;
      cv.notify_all();
    };
    spawn = [&](std::size_t w) {
      ++running;
      idle[w] = false;
      threads.emplace_back(work, w);
    };
    {
      std::lock_guard l(m);  // (a worker thread that ends at once writes `idle` and `running` under it)
      for (std::size_t w = 0; w < workers_.size(); ++w)
        if (alive_[w]) spawn(w);
    }
    // a failed worker whose program started again: connected within a second or so, it takes steps too
    std::thread rejoiner([&] {
      std::unique_lock l(m);
      while (!ended) {
        cv.wait_for(l, std::chrono::seconds(1), [&] { return ended; });
        for (std::size_t w = 0; w < workers_.size() && !ended; ++w) {
          if (alive_[w] || !idle[w]) continue;
          l.unlock();
          auto c = reach_worker(w);  // (nothing else touches a failed worker's connection)
          l.lock();
          if (!c) continue;
          worker_rejoined(w, std::move(*c));
          if (!ended && !stopping) spawn(w);
        }
      }
    });
    std::exception_ptr failure;
    for (;;) {
      std::unique_lock l(m);
      cv.wait(l, [&] { return !results.empty() || running == 0; });
      if (results.empty()) {
        ended = true;
        cv.notify_all();
        break;
      }
      step_result r = std::move(results.front());
      results.pop_front();
      l.unlock();
      bool more = !r.ran_out;
      if (!r.ran_out) {
        ++finished;
        try {
          more = done(r);
        } catch (...) {
          failure = std::current_exception();
          more = false;
        }
      }
      l.lock();
      if (!more) stopping = true, cv.notify_all();
    }
    rejoiner.join();
    for (auto& t : threads) t.join();
    if (!fatal.empty())
      throw ps::ps_task_failed("parameter_server_strategy: " + fatal + "; the job cannot go on: restart it (it resumes "
                               "from its latest backup)");
    if (failure) std::rethrow_exception(failure);
    if (!stopping && (!retry.empty() || claimed < count))  // steps left and no worker to run them
      throw comm_error("parameter_server_strategy: every worker failed; the job cannot go on");
    return finished;
  }
  /// A new connection to worker w if it listens again (its program started again), tried briefly.
  std::optional<ps::channel> reach_worker(std::size_t w) const {
    try {
      return ps::connect(id_, id_.tasks.worker(int(w)), address("worker", int(w)), ps::clock::now() + std::chrono::milliseconds(200));
    } catch (const comm_error&) {  // not back (yet)
      return std::nullopt;
    }
  }
  /// Worker w is back, on `c`.
  void worker_rejoined(std::size_t w, ps::channel c) {
    workers_[w] = std::move(c);
    alive_[w] = true;
    o_.log("worker " + std::to_string(w) + " rejoined the job");
  }
  /// Connects again to each failed worker that listens again.
  void reconnect_workers() {
    for (std::size_t w = 0; w < workers_.size(); ++w)
      if (!alive_[w])
        if (auto c = reach_worker(w)) worker_rejoined(w, std::move(*c));
  }
  // ---- what cluster_coordinator uses (custom loops) --------------------------------------------------------
  /// A metric made in the strategy's scope (TF: created under `strategy.scope()`): what the scheduled
  /// functions add to it on the workers is added into the coordinator's, once per function run. `m` is
  /// a metric function (held as an any_metric) or a metric object (any_metric, mean).
  template <class Metric>
    requires requires(Metric& m) { m.state(); }
  Metric& make_metric(Metric m) {
    auto held = std::make_shared<Metric>(std::move(m));
    tracked_.push_back(&held->state());
    owned_.push_back(held);
    return *held;
  }
  template <class F>
    requires(!requires(F& f) { f.state(); })
  any_metric& make_metric(F f) {
    return make_metric(any_metric(std::move(f)));
  }
  /// The optimizer of a custom loop (TF: created under `strategy.scope()`): its variables live on the ps
  /// tasks, which apply what a scheduled function's `apply_gradients` sends them.
  template <class O>
  ps_optimizer& make_optimizer(O o);
  /// Where the model `make_model` made lives now (ps_model tells), for the scheduled functions.
  struct model_access {
    std::function<std::span<float>()> parameters;
    std::function<std::vector<float>()> get_weights;
  };
  void attach(model_access a) { model_ = std::move(a); }
  /// On the coordinator before the first scheduled function: the ps tasks get the model's values and the
  /// strategy's optimizer (nothing when they hold values already).
  void initialise_for_closures();
  /// On a worker: runs a scheduled function `f` as step `step` on the variables as the ps tasks hold them
  /// now; returns the totals it added to the strategy's metrics (which start from zero for it).
  std::vector<float> run_closure(std::uint64_t step, const std::function<void()>& f) {
    if (!model_.parameters) throw usage_error("cluster_coordinator: make the model with strategy.make_model first");
    pull(model_.parameters());
    for (metric_state* m : tracked_) m->reset();
    closure_step_ = step, closure_pushes_ = 0, in_closure_ = true;
    struct leave {
      bool& in;
      ~leave() { in = false; }
    } done{in_closure_};
    strategy_scope scope(this);
    f();
    std::vector<float> totals;
    for (metric_state* m : tracked_) totals.insert(totals.end(), m->values.begin(), m->values.end()), m->reset();
    return totals;
  }
  /// On the coordinator: adds a scheduled function's metric totals into the strategy's metrics.
  void add_metric_totals(std::span<const float> totals) {
    for (metric_state* m : tracked_)
      for (float& v : m->values) v += totals.front(), totals = totals.subspan(1);
  }
  /// The values of the metrics' states together (what a scheduled function's answer carries).
  std::size_t metric_values() const {
    std::size_t n = 0;
    for (const metric_state* m : tracked_) n += m->values.size();
    return n;
  }
  /// On the coordinator: the model takes the ps tasks' values (after a join).
  void read_into_model() {
    if (model_.parameters) pull(model_.parameters());
  }
  /// ps_optimizer's `apply_gradients` inside a scheduled function on a worker.
  void push_from_closure(std::span<const float> g) {
    if (!in_closure_)
      throw usage_error("apply_gradients of the strategy's optimizer: call it inside a function scheduled with "
                        "cluster_coordinator::schedule (the ps tasks apply it for the worker running it)");
    if (closure_pushes_ == 255) throw usage_error("a scheduled function may apply at most 255 updates");
    push(g, (closure_step_ << 8) | closure_pushes_++);
  }
  /// The coordinator's connection to worker w, and whether it is up.
  ps::channel& worker_channel(std::size_t w) { return workers_[w]; }
  bool worker_alive(std::size_t w) const { return alive_[w]; }
  void worker_failed(std::size_t w) { alive_[w] = false; }
  void log(const std::string& line) const { o_.log(line); }

  /// Tells every live worker that training is over.
  void stop_workers() {
    for (std::size_t w = 0; w < workers_.size(); ++w)
      if (alive_[w]) try {
          workers_[w].send(ps::message::stop);
          workers_[w].receive_text(ps::message::ok, 0);
        } catch (const std::exception& e) {
          alive_[w] = false;
          o_.log("worker " + std::to_string(w) + " failed at the end of training: " + e.what());
        }
  }

 private:
  /// A worker's gradients go to the ps tasks, which apply them.
  struct push_sync final : gradient_sync<cpu> {
    explicit push_sync(parameter_server_strategy& s) : s(s) {}
    void begin(std::span<float> grads, std::size_t) override { g = grads; }
    void ready(std::size_t, std::size_t) override {}
    void finish() override {
      if (!s.in_closure_) s.push(g, step);  // a scheduled function's optimizer pushes (ps_optimizer)
    }
    bool applies_update() const override { return true; }
    void updated(std::span<float>) override {
      if (s.in_closure_)
        throw usage_error("train_step inside a scheduled function: its update would stay on this worker; compute "
                          "value_and_gradients and apply them with the strategy's optimizer (make_optimizer), which "
                          "sends them to the ps tasks");
    }
    parameter_server_strategy& s;
    std::span<float> g;
    std::uint64_t step = 0;
  };

  /// Runs `f`, which talks to the ps tasks: a failure of theirs is a `ps::ps_task_failed`.
  template <class F>
  void with_ps(F&& f) {
    try {
      f();
    } catch (const comm_error& e) {
      throw ps::ps_task_failed(e.what());
    }
  }
  std::vector<asio::const_buffer> parts_of(std::span<const float> values, std::size_t j) const {
    std::vector<asio::const_buffer> parts;
    for (const auto& r : placement_.tasks[j]) parts.push_back(asio::buffer(values.data() + r.offset, r.size * sizeof(float)));
    return parts;
  }
  std::string address(const std::string& job, int i) const { return cluster_.spec.jobs.at(job).at(std::size_t(i)); }

  [[noreturn]] void serve_and_exit() {
    try {
      ps::server s(id_, address("ps", cluster_.task_id), o_.log);
      s.join(o_.connect_timeout);
    } catch (const std::exception& e) {
      o_.log(e.what());
      std::fflush(nullptr);
      std::exit(peer_failure_exit_code);
    }
    std::fflush(nullptr);
    std::exit(0);
  }

  parameter_server_options o_;
  cluster_info cluster_;
  ps::endpoint_identity id_;
  std::vector<ps::channel> ps_, workers_;
  std::vector<bool> alive_;
  std::optional<ps::channel> coordinator_;
  ps::placement placement_;
  std::vector<ps::variable> moving_;
  bool made_ = false;
  push_sync push_{*this};
  // custom loops (cluster_coordinator)
  model_access model_;
  std::vector<metric_state*> tracked_;
  std::vector<std::shared_ptr<void>> owned_;
  std::unique_ptr<ps_optimizer> optimizer_;
  bool closures_initialised_ = false, in_closure_ = false;
  std::uint64_t closure_step_ = 0;
  unsigned closure_pushes_ = 0;
};

/// What `parameter_server_strategy::make_optimizer` returns: an optimizer whose variables live on the ps
/// tasks. Inside a scheduled function, `apply_gradients` sends the gradients there and they apply them
/// (TF's `apply_gradients` on variables placed on ps tasks); its settings are what the ps tasks use.
class ps_optimizer {
 public:
  ps_optimizer(parameter_server_strategy& s, any_optimizer o) : s_(&s), o_(std::move(o)) {}
  void apply_gradients(std::span<const float> grads, std::span<const float> params) {
    if (grads.size() != params.size())
      throw shape_error(o_.name() + ".apply_gradients: " + std::to_string(grads.size()) + " gradients for " +
                        std::to_string(params.size()) + " parameters");
    s_->push_from_closure(grads);
  }
  std::string name() const { return o_.name(); }
  /// The optimizer the ps tasks rebuild (its Keras config and starting state).
  const any_optimizer& optimizer() const { return o_; }

 private:
  parameter_server_strategy* s_;
  any_optimizer o_;
};

template <class O>
ps_optimizer& parameter_server_strategy::make_optimizer(O o) {
  if (optimizer_) throw usage_error("parameter_server_strategy: make_optimizer was called already (one per strategy)");
  any_optimizer made(std::move(o));
  refuse_on_ps_tasks(made, "make_optimizer");
  optimizer_ = std::make_unique<ps_optimizer>(*this, std::move(made));
  return *optimizer_;
}

inline void parameter_server_strategy::initialise_for_closures() {
  if (closures_initialised_) return;
  if (!model_.get_weights) throw usage_error("cluster_coordinator::schedule: make the model with strategy.make_model first");
  if (!optimizer_)
    throw usage_error("cluster_coordinator::schedule: make the optimizer with strategy.make_optimizer(...) first: the "
                      "ps tasks apply it");
  const auto config = checkpoint::detail::optimizer_config(optimizer_->optimizer());
  if (config.is_null())
    throw usage_error("cluster_coordinator: the optimizer runs on the ps tasks, which rebuild it from its Keras config, "
                      "and this one has none: use dtrain's optimizers and schedules");
  const std::vector<float> w = model_.get_weights();
  initialise_ps(w, config, optimizer_->optimizer().state(), model_.parameters().size());
  closures_initialised_ = true;
}

static_assert(strategy<parameter_server_strategy>);

/// What `parameter_server_strategy::make_model` returns: the model, whose `fit` runs this task's part
/// of the job (see the strategy). Everything else is M's.
template <class M>
class ps_model : public M {
 public:
  ps_model(M m, parameter_server_strategy& s) : M(std::move(m)), s_(&s) { attach(); }
  ps_model(ps_model&& o) noexcept : M(std::move(o)), s_(o.s_) { attach(); }
  ps_model& operator=(ps_model&&) = delete;

  /// Keras `model.fit` under a parameter server strategy: `steps_per_epoch` is required (as in TF).
  template <data::dataset D>
  history fit(const D& ds, basic_fit_options<detail::element_of<M>> o = {}) {
    if (!this->compiled()) throw usage_error("fit: call compile() first (the model has no loss or optimizer)");
    if (o.steps_per_epoch <= 0)
      throw usage_error("fit: under parameter_server_strategy pass steps_per_epoch (the workers' datasets are "
                        "read independently, so an epoch has no natural end; TF requires it too)");
    if (s_->is_chief()) return coordinate(std::move(o));
    if constexpr (detail::is_per_replica_dataset<D>::value) return serve(ds);  // a dataset function's: this worker's
    else return serve(ds | data::shard(s_->num_workers(), s_->worker_index()));
  }

 private:
  M& model() { return *this; }
  /// Tells the strategy where this model is (its scheduled functions pull into it).
  void attach() {
    s_->attach({[this] { return model().parameters(); }, [this] { return model().get_weights(); }});
  }

  /// What the coordinator's callbacks see of the model: the ps tasks' variables and optimizer state,
  /// read when a callback asks for them after a step (a backup, a checkpoint, TensorBoard's histograms).
  class coordinator_handle final : public detail::model_handle<M> {
   public:
    explicit coordinator_handle(ps_model& m) : detail::model_handle<M>(m), m_(m) {}
    std::vector<float> get_weights() override { return m_.refresh(), detail::model_handle<M>::get_weights(); }
    std::vector<std::pair<std::string, std::vector<float>>> layer_weights() override {
      return m_.refresh(), detail::model_handle<M>::layer_weights();
    }
    training_state capture_state() override { return m_.refresh(), detail::model_handle<M>::capture_state(); }
    void save_weights(const std::filesystem::path& path) override {
      m_.refresh();
      detail::model_handle<M>::save_weights(path);
    }

   private:
    ps_model& m_;
  };

  /// The coordinator's loop: the steps on the workers, the callbacks here. A backup (backup_and_restore)
  /// holds the ps tasks' variables and optimizer state; a job that restarts resumes from it, at its epoch
  /// and step (the workers' datasets start over).
  history coordinate(basic_fit_options<detail::element_of<M>> o) {
    strategy_scope scope(s_);
    M& m = model();
    if (!o.class_weight.empty() || !o.sample_weight.empty())
      throw usage_error("fit: class_weight and sample_weight options are not supported under parameter_server_strategy; "
                        "the workers' datasets yield (x, y, sample_weight) batches instead");
    parameter_server_strategy::refuse_on_ps_tasks(m.optimizer(), "fit");
    const auto config = checkpoint::detail::optimizer_config(m.optimizer());
    if (config.is_null())
      throw usage_error("fit: the optimizer runs on the ps tasks, which rebuild it from its Keras config, and "
                        "this one has none (a learning-rate schedule written as a function?): use dtrain's "
                        "optimizers and schedules");
    auto hist = std::make_shared<history>();
    callback_list cbs = o.callbacks;
    if (o.verbose > 0) cbs.push_front(progbar_logger{});
    cbs.push_back(hist);
    coordinator_handle handle(*this);
    const auto bound = cbs.bind_model(&handle);
    cbs.set_params({o.epochs, o.steps_per_epoch, o.verbose});
    logs l;
    cbs.on_train_begin(l);  // a backup is restored into the model here
    const std::optional<training_position> resume = std::exchange(handle.resume, std::nullopt);
    if (!initialised_) {
      const std::vector<float> w = m.get_weights();
      if (!s_->initialise_ps(w, config, std::as_const(m).optimizer().state(), M::param_count))
        stale_ = true;  // they hold newer values than any backup: a restarted coordinator takes theirs
      initialised_ = true;
    }
    bool ran_out = false;
    for (int epoch = resume ? resume->epoch : o.initial_epoch; epoch < o.epochs && !ran_out; ++epoch) {
      std::int64_t step = 0;
      if (resume && epoch == resume->epoch && resume->step > 0) {
        if (resume->step > o.steps_per_epoch)
          throw config_error("fit: the backup's position, epoch " + std::to_string(epoch + 1) + " after batch " +
                             std::to_string(resume->step) + ", is not a position of this run, whose epochs have " +
                             std::to_string(o.steps_per_epoch) + " steps");
        step = resume->step;  // the restored running metrics go on
      } else {
        m.reset_metrics();
      }
      handle.position = {.epoch = epoch, .step = step};
      cbs.on_epoch_begin(epoch, l);
      l = m.metric_results();
      const std::int64_t first = step;
      const std::int64_t ran = s_->run_steps(next_step_, o.steps_per_epoch - first, [&](const auto& r) {
        cbs.on_train_batch_begin(step, l);
        std::vector<float> states = checkpoint::metric_states(m);
        if (r.states.size() != states.size())
          throw comm_error("a worker reported " + std::to_string(r.states.size()) + " metric states, the model has " +
                           std::to_string(states.size()) + " (is every task running the same program?)");
        for (std::size_t k = 0; k < states.size(); ++k) states[k] += r.states[k];
        checkpoint::set_metric_states(m, states);
        if (!r.moving.empty()) moving_ = r.moving;
        stale_ = true;
        l = m.metric_results();
        handle.position.step = step + 1;
        cbs.on_train_batch_end(step++, l);
        return !handle.stop_training;
      });
      next_step_ += std::uint64_t(o.steps_per_epoch - first);
      if (ran < o.steps_per_epoch - first && !handle.stop_training)
        ran_out = true, detail::ran_out_warning(o.steps_per_epoch, o.epochs);
      refresh();
      if (ran == 0) break;
      l = m.metric_results();
      if (o.validation_data && (epoch + 1) % o.validation_freq == 0) {
        const logs v = o.validation_data.visit([&](const auto& vd) {
          return detail::run_evaluate(m, vd, {.steps = o.validation_steps, .verbose = 0, .callbacks = cbs});
        });
        for (const auto& [k, x] : v) l.set("val_" + k, x);
      }
      handle.position = {.epoch = epoch + 1, .step = 0};  // a backup at the epoch's end resumes at the next one
      cbs.on_epoch_end(epoch, l);
      if (handle.stop_training) break;
    }
    s_->stop_workers();
    cbs.on_train_end(l);
    return *hist;
  }

  /// Brings the ps tasks' variables and optimizer state, and the latest moving statistics a worker
  /// reported, into the coordinator's model, when steps ran since it last did.
  void refresh() {
    if (!stale_) return;
    M& m = model();
    std::vector<float> w = m.get_weights();
    optimizer_state state = s_->read_state(w, M::param_count);
    if (!moving_.empty()) {
      std::size_t k = 0;
      for (const auto& v : s_->moving()) {
        if (k + v.size > moving_.size()) break;
        std::copy_n(moving_.begin() + std::ptrdiff_t(k), v.size, w.begin() + std::ptrdiff_t(v.offset));
        k += v.size;
      }
    }
    m.set_weights(w);
    m.optimizer().set_state(std::move(state));
    stale_ = false;
  }

  /// A worker's loop: each step the coordinator sends, on this worker's next batch. A step that fails
  /// here tells the coordinator why (it runs the step elsewhere, or ends the job when a ps task failed)
  /// and ends this worker's part.
  template <data::dataset D>
  history serve(const D& ds) {
    strategy_scope scope(s_);
    M& m = model();
    data::iterator<D> it(ds, 0);
    logs step_logs;
    ps::channel& c = s_->coordinator();
    for (;;) {
      const ps::message_header h = c.receive(8);
      if (h.kind == std::uint32_t(ps::message::stop)) {
        c.read_payload(h, {});
        s_->pull(m.parameters());
        c.send(ps::message::ok);
        return {};
      }
      c.expect(h, ps::message::step);
      std::uint64_t id = 0;
      c.read_payload(h, {asio::buffer(&id, sizeof id)});
      try {
        auto b = it.next();
        if (!b) {
          c.send(ps::message::ran_out);
          continue;
        }
        s_->pull(m.parameters());
        m.reset_metrics();
        s_->set_step(id);
        detail::train_on_batch(m, *b, {}, 0, step_logs);
      } catch (const std::exception& e) {
        try {
          c.send(dynamic_cast<const ps::ps_task_failed*>(&e) ? ps::message::ps_failed : ps::message::error, e.what());
        } catch (const comm_error&) {
        }
        c.close();
        throw;
      }
      std::vector<float> moving;
      if (!s_->moving().empty()) {
        const std::vector<float> w = m.get_weights();
        for (const auto& v : s_->moving()) moving.insert(moving.end(), w.begin() + std::ptrdiff_t(v.offset),
                                                         w.begin() + std::ptrdiff_t(v.offset + v.size));
      }
      c.send(ps::message::ok, nlohmann::json{{"states", checkpoint::metric_states(m)}, {"moving", moving}}.dump());
    }
  }

  parameter_server_strategy* s_;
  bool initialised_ = false;
  bool stale_ = false;         // steps ran since the coordinator's model last read the ps tasks
  std::vector<float> moving_;  // the latest moving statistics a worker reported
  /// The next step's number, which a push carries: a random start per coordinator, so a restarted one's
  /// steps are not taken for steps the ps tasks applied already.
  std::uint64_t next_step_ = std::uint64_t(std::random_device{}()) << 32;
};

}  // namespace dtrain
