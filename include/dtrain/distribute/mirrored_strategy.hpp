#pragma once
/// \file
/// `mirrored_strategy<Ops, B>`: TF's `MirroredStrategy`, synchronous data parallelism over several devices
/// of ONE process. Each device holds a replica of the model (`make_model` builds them all from the same
/// seed); a step splits the global batch among the replicas, runs them at once (one thread each), sums
/// their gradients with an in-process communicator and lets every replica apply the same update.
/// - On the cpu backend the devices are TF's logical CPU devices ("/cpu:0", "/cpu:1", ...): replica
///   threads sharing the process's math threads (`num_threads()` split among them), summing gradients
///   through shared memory (`comm::threads`). It runs and is tested on any machine.
/// - On a GPU backend the devices are GPUs ("/gpu:0", ...; default: all of them). The gradients are
///   summed through host memory (comm::threads), or, with `mirrored_strategy<comm::nccl, cuda>` (TF's
///   `cross_device_ops=NcclAllReduce()`), by NCCL between the devices: one communicator per device,
///   the replicas' collectives issued as one NCCL group.
///
/// The program is the single-device one: `fit`, `evaluate`, `predict` take global batches; a custom
/// loop calls `strategy.run(step, batch)`, which runs `step` once per replica, on its thread, with the
/// replica's rows of every tensor or (x, y) argument, and returns a `per_replica` of the results for
/// `reduce` / `experimental_local_results`. Inside `run`, a model made by the strategy is the running
/// replica's copy (TF's mirrored variables), and a free optimizer's `apply_gradients` steps one copy of
/// the optimizer's variables per replica (optimizers/optimizer.hpp), counting the step once.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <type_traits>
#include <variant>

#include "dtrain/distribute/comm/threads.hpp"
#include "dtrain/distribute/mirrored_model.hpp"
#include "dtrain/distribute/strategy.hpp"

namespace dtrain {

/// TF's `PerReplica`: one value per replica of a mirrored strategy, in replica order.
template <class T>
struct per_replica {
  std::vector<T> values;
};

namespace detail {
/// Whether `Ops` sums device memory of B between the devices of one process (comm::nccl's local groups).
template <class Ops, class B>
concept local_device_ops = requires(const std::vector<B>& devices, typename Ops::local_rank& r, device_span<float, B> d) {
  { Ops::make_local_group(devices, std::chrono::milliseconds(1)) } -> std::same_as<std::vector<typename Ops::local_rank>>;
  r.all_reduce(d, reduce_op::sum);
  r.abort(std::string());
};
template <class Ops, bool>
struct local_rank_of {
  struct type {};
};
template <class Ops>
struct local_rank_of<Ops, true> {
  using type = typename Ops::local_rank;
};
}  // namespace detail

/// `CrossDeviceOps`: how the replicas' gradients are summed. `comm::threads` (the default): through host
/// memory (in place on the cpu; a GPU model's staged through pinned host memory). `comm::nccl` (with a
/// GPU backend): by NCCL, in device memory.
/// The template arguments come in the order of `multi_worker_mirrored_strategy<Comm, Backend>`'s.
template <class CrossDeviceOps = comm::threads, class B = cpu>
class mirrored_strategy : public replica_context, public local_replicas {
  static_assert(!backend<CrossDeviceOps>,
                "mirrored_strategy<CrossDeviceOps, B>: the first argument is how gradients are summed (comm::threads, "
                "comm::nccl), the backend comes second: mirrored_strategy<comm::threads, cuda>");
  static_assert(model_backend<B>, "mirrored_strategy<CrossDeviceOps, B>: B must be a backend (dtrain::cpu, dtrain::cuda)");
  static constexpr bool device_ops = detail::local_device_ops<CrossDeviceOps, B>;
  static_assert(std::is_same_v<CrossDeviceOps, comm::threads> || device_ops,
                "mirrored_strategy<CrossDeviceOps, B>: CrossDeviceOps is comm::threads, or a communicator of B's "
                "device memory (comm::nccl for cuda, comm::nccl_emulated for cuda_emulated)");

 public:
  using backend_type = B;
  /// What `make_model<Model>()` returns: Model on B, holding a replica per device.
  template <class Model>
  using model_type = mirrored_model<typename detail::rebind_model<Model, B>::type>;

  /// Replicas on `devices` (TF names; default: every GPU of a GPU backend, "/cpu:0" on the cpu).
  /// `o.timeout` bounds how long a replica waits for the others in a collective (zero: no bound).
  explicit mirrored_strategy(std::vector<std::string> devices = {}, communication_options o = {})
      : mirrored_strategy(std::move(devices), o, "mirrored_strategy", false) {}

 protected:
  /// `central`: central_storage_strategy's replicas, whose variables are kept in one place.
  mirrored_strategy(std::vector<std::string> devices, communication_options o, std::string who, bool central)
      : names_(devices.empty() ? default_devices(who) : std::move(devices)), timeout_(o.timeout), central_(central) {
    if (o.gradient_compression != compression::none)
      throw config_error(who + ": gradient_compression applies between workers (multi_worker_mirrored_strategy); "
                         "replicas in one process sum each other's gradients in memory, in FP32");
    std::set<std::string> seen;
    for (const auto& d : names_) {
      if (!seen.insert(d).second) throw config_error(who + ": device '" + d + "' is listed twice");
      devices_.push_back(detail::device_for<B>(d, who, true));
    }
    comms_ = comm::threads::make_group(int(names_.size()), timeout_);
    if constexpr (device_ops) device_comms_ = CrossDeviceOps::make_local_group(devices_, timeout_);
    for (int i = 0; i < int(names_.size()); ++i) syncs_.push_back(std::make_unique<replica_sync>(*this, std::size_t(i)));
    for (int i = 1; i < int(names_.size()); ++i) workers_.emplace_back([this, i] { serve(i); });
  }

 public:
  mirrored_strategy(const mirrored_strategy&) = delete;
  mirrored_strategy& operator=(const mirrored_strategy&) = delete;
  ~mirrored_strategy() override {
    {
      std::lock_guard l(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  /// The replicas' devices, in replica order (TF's `strategy.extended.worker_devices`).
  const std::vector<std::string>& devices() const { return names_; }
  int num_replicas_in_sync() const override { return int(names_.size()); }
  /// The running replica inside `run` (TF's `replica_context.replica_id_in_sync_group`), else 0.
  int replica_id() const override { return std::max(0, detail::current_local_replica()); }
  bool is_chief() const override { return true; }
  task_info cluster_resolver() const { return {}; }

  /// The strategy's scope: builds one replica of the model per device, all from `seed`.
  template <class Model>
  model_type<Model> make_model(std::uint64_t seed = default_seed) {
    using M = typename detail::rebind_model<Model, B>::type;
    strategy_scope scope(this);
    M m(seed, devices_[0]);
    m.set_strategy(this, &syncs_[0]->for_model());
    std::vector<M> mirrors;
    for (std::size_t i = 1; i < devices_.size(); ++i) {
      mirrors.emplace_back(seed, devices_[i]);
      mirrors.back().set_strategy(this, &syncs_[i]->for_model());
    }
    return model_type<Model>(std::move(m), std::move(mirrors), *this, *this);
  }
  [[nodiscard]] strategy_scope scope() { return strategy_scope(this); }

  /// `strategy.run(fn, args...)`: `fn` once per replica at once, each on its replica's thread with its
  /// rows of every batch argument (a `tensor`, a `std::vector<tensor>` of a several-input model's batch,
  /// a `data::example` or `data::multi_example`; replica i of N: rows [i B/N, (i+1) B/N)), the
  /// other arguments as given. Returns the replicas' results (nothing for a void `fn`).
  template <class F, class... A>
  auto run(F&& f, A&&... args) {
    using R = std::invoke_result_t<F&, decltype(share_of(args, 0, 1))...>;
    const std::size_t p = names_.size();
    if constexpr (std::is_void_v<R>) {
      run_each([&](int i) { f(share_of(args, std::size_t(i), p)...); });
    } else {
      std::vector<std::optional<R>> out(p);
      run_each([&](int i) { out[std::size_t(i)].emplace(f(share_of(args, std::size_t(i), p)...)); });
      per_replica<R> r;
      for (auto& v : out) r.values.push_back(std::move(*v));
      return r;
    }
  }

  /// `strategy.reduce(op, per_replica_value)`: the replicas' values combined in replica order.
  float reduce(reduce_op op, const per_replica<float>& v) const {
    float acc = v.values.at(0);
    for (std::size_t i = 1; i < v.values.size(); ++i)
      acc = op == reduce_op::max ? std::max(acc, v.values[i]) : op == reduce_op::min ? std::min(acc, v.values[i]) : acc + v.values[i];
    return op == reduce_op::mean ? acc / float(v.values.size()) : acc;
  }
  /// For a value that is not per replica (the same on all, TF's rule): mean, max and min give it back,
  /// sum only of 0; any other sum is an error, as a sum of copies has no clear meaning.
  float reduce(reduce_op op, float value) const {
    if (op == reduce_op::sum && value != 0.0f && names_.size() > 1)
      throw value_error("mirrored_strategy.reduce: a value that is not per replica (" + std::to_string(value) +
                        ") cannot be reduced with sum; pass what strategy.run returned");
    return value;
  }
  /// Tensors: `axis` none reduces element by element across the replicas, `axis` 0 also over their rows
  /// (`mean` dividing by the rows of all replicas).
  tensor reduce(reduce_op op, const per_replica<tensor>& v, std::optional<std::size_t> axis = std::nullopt) {
    std::vector<tensor> out(v.values.size());
    run_each([&](int i) { out[std::size_t(i)] = detail::reduce_tensor(this, op, v.values.at(std::size_t(i)), axis); });
    return out[0];
  }
  template <class T>
  std::vector<T> experimental_local_results(per_replica<T> v) const {
    return std::move(v.values);
  }
  template <class T>
  std::vector<T> experimental_local_results(T value) const {
    return {std::move(value)};
  }

  /// The dataset as it is: it yields global batches, which `fit` and `run` split among the replicas.
  template <data::dataset D>
  D distribute_dataset(D d) const {
    return d;
  }
  template <data::dataset D>
  D experimental_distribute_dataset(D d) const {
    return d;
  }
  /// `fn(input_context)` builds a pipeline of per-replica batches (`ctx.get_per_replica_batch_size`);
  /// every N of them make one global batch, replica i getting the i-th (as TF hands them out).
  template <class F>
  auto distribute_datasets_from_function(F&& f) {
    auto d = std::forward<F>(f)(input_context{1, 0, num_replicas_in_sync()});
    return group_batches<decltype(d)>{std::move(d), names_.size()};
  }

  // ---- replica_context --------------------------------------------------------------------------------
  int num_input_pipelines() const override { return 1; }
  int input_pipeline_id() const override { return 0; }

  /// Whether a GPU model's gradients are summed in device memory (CrossDeviceOps comm::nccl).
  static constexpr bool reduces_device_gradients() { return device_ops; }

  void run_each(const std::function<void(int)>& f) override {
    if (detail::current_local_replica() >= 0) throw usage_error("mirrored_strategy: run is not reentrant (called inside a replica)");
    {
      std::lock_guard l(m_);
      job_ = &f;
      failures_.assign(names_.size(), nullptr);
      pending_ = int(names_.size()) - 1;
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    replica(0, f);
    if (!detail::spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; }, spin)) {
      std::unique_lock l(m_);
      done_.wait(l, [&] { return pending_.load(std::memory_order_acquire) == 0; });
    }
    job_ = nullptr;
    rethrow_first();
  }

  // the collectives of a model's step: among the replicas inside a replica's thread; outside, this
  // process is the only worker and they leave the data as it is
  using replica_context::broadcast;
  void all_reduce(std::span<float> data, reduce_op op) override {
    if (in_replica()) comms_[index()].all_reduce(data, op);
  }
  void broadcast(std::span<std::byte> data, int root) override {
    if (in_replica()) comms_[index()].broadcast(data, root);
  }
  void all_gather(std::span<const float> in, std::span<float> out) override {
    if (in_replica()) return comms_[index()].all_gather(in, out);
    if (out.size() != in.size()) throw value_error("all_gather: outside strategy.run there is one value");
    std::copy(in.begin(), in.end(), out.begin());
  }
  void barrier() override {
    if (in_replica()) comms_[index()].barrier();
  }

 private:
  /// Every N per-replica batches of `up` as one global batch (the last may hold fewer).
  template <data::dataset D>
  struct group_batches {
    using element_type = typename D::element_type;
    D up;
    std::size_t n;
    std::int64_t cardinality() const {
      const std::int64_t c = up.cardinality();
      return c >= 0 ? (c + std::int64_t(n) - 1) / std::int64_t(n) : c;
    }
    data::options options() const { return up.options(); }
    class iterator {
     public:
      iterator(const group_batches& d, std::uint64_t pass) : up_(d.up.iterate(pass)), n_(d.n) {}
      std::optional<element_type> next() {
        std::vector<element_type> parts;
        while (parts.size() < n_)
          if (auto e = up_.next()) parts.push_back(std::move(*e));
          else break;
        if (parts.empty()) return std::nullopt;
        if constexpr (data::is_supervised_v<element_type>) {
          std::vector<typename element_type::first_type> x;
          std::vector<typename element_type::second_type> y;
          for (auto& [a, b] : parts) x.push_back(std::move(a)), y.push_back(std::move(b));
          return element_type{concatenate(x), concatenate(y)};
        } else {
          return concatenate(parts);
        }
      }
      static tensor concatenate(const std::vector<tensor>& parts) { return detail::concatenate_rows(parts); }
      static std::vector<tensor> concatenate(const std::vector<std::vector<tensor>>& parts) {
        std::vector<tensor> out(parts.front().size());
        for (std::size_t c = 0; c < out.size(); ++c) {
          std::vector<tensor> column;
          for (const auto& p : parts) column.push_back(p.at(c));
          out[c] = detail::concatenate_rows(column);
        }
        return out;
      }
      std::int64_t skip(std::int64_t k) {
        const std::int64_t s = up_.skip(k * std::int64_t(n_));
        return (s + std::int64_t(n_) - 1) / std::int64_t(n_);
      }

     private:
      decltype(std::declval<const D&>().iterate(0)) up_;
      std::size_t n_;
    };
    iterator iterate(std::uint64_t pass) const { return iterator(*this, pass); }
  };

  static std::vector<std::string> default_devices(const std::string& who) {
    if constexpr (B::device == device_kind::gpu) {
      std::vector<std::string> d;
      for (int i = 0; i < B::device_count(); ++i) d.push_back("/gpu:" + std::to_string(i));
      if (d.empty())
        throw config_error(who + " on " + std::string(B::name) + ": no CUDA device (no GPU or no driver on "
                           "this machine)");
      return d;
    } else {
      return {"/cpu:0"};
    }
  }

  /// Replica i's rows of a batch argument; any other argument as it is.
  template <class T>
  static decltype(auto) share_of(T&& a, std::size_t i, std::size_t p) {
    using U = std::remove_cvref_t<T>;
    if constexpr (std::is_same_v<U, tensor> || std::is_same_v<U, std::vector<tensor>>) {
      const std::size_t b = detail::rows_in(a);
      return detail::rows_of(a, b * i / p, b * (i + 1) / p);
    } else if constexpr (data::is_supervised_v<U>) {
      return U{share_of(a.first, i, p), share_of(a.second, i, p)};
    } else {
      return std::forward<T>(a);
    }
  }

  bool in_replica() const { return detail::current_local_replica() >= 0; }

  /// Replica i's gradients, summed with the other replicas' by comms_[i] (host memory; a GPU model's
  /// staged through it) or device_comms_[i] (CrossDeviceOps' device memory).
  class replica_sync final : public gradient_sync<cpu> {
   public:
    replica_sync(mirrored_strategy& s, std::size_t i) : s_(s), i_(i) {}
    void begin(std::span<float> g, std::size_t) override { g_ = g; }
    void ready(std::size_t, std::size_t) override {}
    void finish() override {
      if (s_.in_replica()) s_.comms_[i_].all_reduce(g_, reduce_op::sum);
    }
    /// What replica i's model sums its gradients with (every model the strategy makes: their steps
    /// never overlap).
    gradient_sync<B>& for_model() {
      if (s_.central_) return central_ ? *central_ : central_.emplace(*this, summing());
      return summing();
    }

   private:
    gradient_sync<B>& summing() {
      if constexpr (device_ops) return device_ ? *device_ : device_.emplace(*this);
      else if constexpr (host_addressable_v<B>) return *this;
      else return staged_ ? *staged_ : staged_.emplace(*this);
    }
    /// Central storage: the gradients are summed as above; replica 0, whose variables are THE variables,
    /// alone applies the update (with the only optimizer state), then the others take its new values
    /// (on a GPU backend through host memory).
    struct central_copy final : gradient_sync<B> {
      central_copy(replica_sync& r, gradient_sync<B>& sum) : r(r), sum(sum) {}
      void begin(span_t<B, float> g, std::size_t side) override { sum.begin(g, side); }
      void ready(std::size_t offset, std::size_t count) override { sum.ready(offset, count); }
      void finish() override { sum.finish(); }
      bool applies_update() const override { return r.i_ != 0 && r.s_.in_replica(); }
      void updated(span_t<B, float> p) override {
        mirrored_strategy& s = r.s_;
        if (!s.in_replica() || s.names_.size() == 1) return;
        if (r.i_ == 0) {
          if constexpr (host_addressable_v<B>) s.variables_ = p.data();
          else s.host_variables_.resize(p.size()), p.device().download(p.size(), pointer_t<B, const float>(p.data()), s.host_variables_.data());
        }
        s.comms_[r.i_].barrier();  // replica 0's update is done; nobody writes the variables before the next sum
        if (r.i_ != 0) {
          if constexpr (host_addressable_v<B>) std::copy_n(s.variables_, p.size(), p.data());
          else p.device().upload(p.size(), static_cast<const float*>(s.host_variables_.data()), p.data());
        }
      }
      replica_sync& r;
      gradient_sync<B>& sum;
    };

    struct device_memory final : gradient_sync<B> {
      explicit device_memory(replica_sync& r) : r(r) {}
      void begin(span_t<B, float> g, std::size_t) override { this->g.emplace(g); }
      void ready(std::size_t, std::size_t) override {}
      void finish() override {
        if (r.s_.in_replica()) r.s_.device_comms_[r.i_].all_reduce(*g, reduce_op::sum);
      }
      replica_sync& r;
      std::optional<span_t<B, float>> g;
    };
    mirrored_strategy& s_;
    std::size_t i_;
    std::span<float> g_;
    std::optional<std::conditional_t<device_ops, device_memory, std::monostate>> device_;
    std::optional<std::conditional_t<host_addressable_v<B> || device_ops, std::monostate,
                                     detail::staged_gradient_sync<B>>> staged_;
    std::optional<central_copy> central_;
  };
  std::size_t index() const { return std::size_t(std::max(0, detail::current_local_replica())); }

  /// Runs replica i's part of a job on this thread: its index, the strategy's scope, its share of the
  /// math threads. A failure is kept, and the others are released from their collectives.
  void replica(int i, const std::function<void(int)>& f) {
    const detail::replica_thread here(i, group_);
    const int saved_budget = std::exchange(detail::thread_budget_override(),
                                           std::max(1, num_threads() / int(names_.size())));
    strategy_scope scope(this);
    try {
      f(i);
    } catch (...) {
      failures_[std::size_t(i)] = std::current_exception();
      std::string what = "replica " + std::to_string(i) + " (" + names_[std::size_t(i)] + ") failed";
      try {
        throw;
      } catch (const std::exception& e) {
        what += ": " + std::string(e.what());
      } catch (...) {
      }
      comms_[std::size_t(i)].abort(what);
      if constexpr (device_ops) device_comms_[std::size_t(i)].abort(what);
    }
    detail::thread_budget_override() = saved_budget;
  }

  /// A replica thread: runs each job as it comes.
  void serve(int i) {
    std::uint64_t seen = 0;
    for (;;) {
      if (!detail::spin_until([&] { return generation_.load(std::memory_order_acquire) != seen || stop_; }, spin)) {
        std::unique_lock l(m_);
        cv_.wait(l, [&] { return stop_ || generation_.load(std::memory_order_acquire) != seen; });
      }
      if (stop_) return;
      seen = generation_.load(std::memory_order_acquire);
      replica(i, *job_);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard l(m_);  // the caller may be between its check and its wait
        done_.notify_one();
      }
    }
  }
  /// After a failed job: the first failure that is not the others' echo of it (a comm_error from the
  /// abort), and a new group so the strategy stays usable.
  void rethrow_first() {
    std::exception_ptr first, echo;
    for (auto& e : failures_) {
      if (!e) continue;
      try {
        std::rethrow_exception(e);
      } catch (const comm_error&) {
        if (!echo) echo = e;
      } catch (...) {
        if (!first) first = e;
      }
    }
    if (!first) first = echo;
    if (!first) return;
    comms_ = comm::threads::make_group(int(names_.size()), timeout_);
    if constexpr (device_ops) {
      device_comms_.clear();  // the failed group's communicators go first (aborted)
      device_comms_ = CrossDeviceOps::make_local_group(devices_, timeout_);
    }
    std::rethrow_exception(first);
  }

  /// How long a replica thread polls for the next job, and the caller for the replicas to finish, before
  /// sleeping: a step's replicas start and end within microseconds of each other.
  static constexpr std::chrono::microseconds spin{50};

  /// The replicas as state they share sees them (core/replica_group.hpp); one process, no workers.
  struct group final : detail::replica_group {
    explicit group(mirrored_strategy& s) : s(s) {}
    int num_local_replicas() const override { return s.num_replicas_in_sync(); }
    void local_barrier() override { s.barrier(); }
    void sum_over_workers(std::span<float>) override {}
    mirrored_strategy& s;
  };

  std::vector<std::string> names_;
  std::shared_ptr<detail::replica_group> group_ = std::make_shared<group>(*this);
  std::vector<B> devices_;
  std::chrono::milliseconds timeout_;
  std::vector<comm::threads> comms_;
  /// The replicas' communicators of device memory (CrossDeviceOps' local group), when it has them.
  using device_comm = typename detail::local_rank_of<CrossDeviceOps, device_ops>::type;
  std::vector<device_comm> device_comms_;
  std::vector<std::unique_ptr<replica_sync>> syncs_;
  bool central_;
  const float* variables_ = nullptr;   // central storage: replica 0's variables after its update (cpu)
  std::vector<float> host_variables_;  // (a GPU backend: their copy in host memory)
  std::vector<std::thread> workers_;
  std::mutex m_;
  std::condition_variable cv_, done_;
  const std::function<void(int)>* job_ = nullptr;
  std::vector<std::exception_ptr> failures_;
  std::atomic<std::uint64_t> generation_{0};  // jobs started
  std::atomic<int> pending_{0};               // replica threads still running the current job
  std::atomic<bool> stop_{false};
};

static_assert(strategy<mirrored_strategy<>>);

}  // namespace dtrain
