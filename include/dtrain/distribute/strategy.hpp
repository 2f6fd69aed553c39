#pragma once
/// \file
/// Strategies (`tf.distribute.Strategy`): how a model's replicas are laid out and kept in sync.
/// - `default_strategy`: one replica, no communication (what `get_strategy()` returns);
/// - `one_device_strategy<B>`: one replica on a named device ("/cpu:0", or "/gpu:N" with B = cuda);
/// - `multi_worker_mirrored_strategy<Comm, Backend>`: one replica per worker of a cluster (TF_CONFIG,
///   Slurm, torchrun or MPI variables, or an explicit cluster), gradients summed by `Comm` (ring_tcp),
///   computed on `Backend` (cpu).
/// A strategy has a `backend_type`: `make_model<Model>()` builds the model on it, so a program names its
/// model type once (`sequential<...>`, a cpu model) and the strategy binds it to its hardware.
/// The user's program changes only in the strategy type: every strategy offers the same members, as
/// in TensorFlow's distributed-training guides: num_replicas_in_sync, make_model (the "scope": every worker starts from the chief's
/// weights), run, reduce, experimental_local_results, distribute_dataset,
/// distribute_datasets_from_function, cluster_resolver(), is_chief().
///
/// A model made by a strategy keeps a pointer to it: the strategy must outlive its models.
/// A process whose peer fails gets a `comm_error`; ending with `peer_failure_exit_code` (138) lets an
/// orchestrator restart the job.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "dtrain/backend/cpu.hpp"
#include "dtrain/core/random.hpp"
#include "dtrain/data/any_dataset.hpp"
#include "dtrain/distribute/cluster.hpp"
#include "dtrain/distribute/comm/communicator.hpp"
#include "dtrain/core/replica_group.hpp"
#include "dtrain/distribute/gradient_sync.hpp"
#include "dtrain/distribute/input.hpp"
#include "dtrain/distribute/replica_context.hpp"

namespace dtrain {

/// What `strategy.cluster_resolver()` tells (TF: `strategy.cluster_resolver.task_type`, `.task_id`).
struct task_info {
  std::string task_type = "worker";
  int task_id = 0;
};

namespace detail {
/// `Model` built on backend B: `Model::rebind<B>` for a model that can be rebound, else `Model`.
template <class Model, class B>
struct rebind_model {
  using type = Model;
};
template <class Model, class B>
  requires requires { typename Model::template rebind<B>; }
struct rebind_model<Model, B> {
  using type = typename Model::template rebind<B>;
};
}  // namespace detail

namespace detail {
/// `Model` on S's backend, or what S says its models are (`S::model_type<Model>`: mirrored_strategy's
/// hold their replicas).
template <class S, class Model>
struct model_for {
  using type = typename rebind_model<Model, typename S::backend_type>::type;
};
template <class S, class Model>
  requires requires { typename S::template model_type<Model>; }
struct model_for<S, Model> {
  using type = typename S::template model_type<Model>;
};
}  // namespace detail

/// `Model` as strategy S builds it (on S's backend).
template <class S, class Model>
using model_for_t = typename detail::model_for<S, Model>::type;

namespace detail {
/// What a custom loop's step returns (a replica's loss), for the concept below.
struct step_archetype {
  float operator()() const { return 0.0f; }
};
}  // namespace detail

/// What user programs, `fit` and library code rely on of a strategy, so that "swap one type" is checked
/// by the compiler (every strategy of dtrain is `static_assert`ed to model it). Contract:
/// - `backend_type`: the backend its models compute on; `make_model<Model>(seed)` builds `Model` there
///   (`model_for_t<S, Model>`), every replica from the same weights, attached to the strategy, which must
///   outlive it (a model type needs what `strategy_for` lists);
/// - `num_replicas_in_sync()` >= 1; exactly one process in a job has `is_chief()`; `cluster_resolver()`
///   tells its task;
/// - `run(fn, args...)` runs a step on the replicas this process holds, in the strategy's scope;
///   `reduce(op, result)` combines what it returned over all replicas, the same value everywhere;
///   `experimental_local_results(result)` lists this process's replicas' values;
/// - `distribute_dataset(d)` (and TF's name `experimental_distribute_dataset`) yields, on each
///   process, what its replicas train on from a dataset of global batches;
///   `distribute_datasets_from_function(fn)` calls `fn(input_context)` for this process's pipeline.
template <class S>
concept strategy = requires(S& s, const S& cs, data::any_dataset<data::example> d) {
  typename S::backend_type;
  requires model_backend<typename S::backend_type>;
  { cs.num_replicas_in_sync() } -> std::convertible_to<int>;
  { cs.is_chief() } -> std::convertible_to<bool>;
  { cs.cluster_resolver() } -> std::same_as<task_info>;
  { s.reduce(reduce_op::sum, s.run(detail::step_archetype{})) } -> std::convertible_to<float>;
  { s.experimental_local_results(s.run(detail::step_archetype{})) } -> std::same_as<std::vector<float>>;
  { s.distribute_dataset(d) } -> data::dataset;
  { s.experimental_distribute_dataset(d) } -> data::dataset;
  { s.distribute_datasets_from_function([](const input_context&) { return data::any_dataset<data::example>{}; }) } -> data::dataset;
};

/// A strategy that can make models of type `Model`: `Model::rebind<backend_type>` (or Model itself)
/// built from (seed, backend object), with `get_weights`/`set_weights` (the chief's weights reach every
/// worker) and `set_strategy` (the strategy's replica context and gradient synchronisation).
template <class S, class Model>
concept strategy_for = strategy<S> && requires(S& s, std::uint64_t seed) {
  { s.template make_model<Model>(seed) } -> std::same_as<model_for_t<S, Model>>;
};

/// One replica, no communication: what a program without a strategy runs under.
class default_strategy {
 public:
  using backend_type = cpu;
  int num_replicas_in_sync() const { return 1; }
  bool is_chief() const { return true; }
  task_info cluster_resolver() const { return {}; }
  template <class Model>
  model_for_t<default_strategy, Model> make_model(std::uint64_t seed = default_seed) {
    return model_for_t<default_strategy, Model>(seed);
  }
  template <class F, class... A>
  auto run(F&& f, A&&... args) {
    return std::forward<F>(f)(std::forward<A>(args)...);
  }
  float reduce(reduce_op, float value) { return value; }
  tensor reduce(reduce_op op, const tensor& value, std::optional<std::size_t> axis = std::nullopt) {
    return detail::reduce_tensor(nullptr, op, value, axis);
  }
  template <class T>
  std::vector<T> experimental_local_results(T value) const {
    return {std::move(value)};
  }
  template <data::dataset D>
  D distribute_dataset(D d) const {
    return d;
  }
  /// TF's name for `distribute_dataset`.
  template <data::dataset D>
  D experimental_distribute_dataset(D d) const {
    return d;
  }
  template <class F>
  auto distribute_datasets_from_function(F&& f) const {
    auto d = std::forward<F>(f)(input_context{});
    return per_replica_dataset<decltype(d)>{std::move(d), nullptr};
  }
};

/// What `get_strategy()` returns: the strategy in scope on this thread, seen through what
/// distribution-aware library code needs of it (the guide's pattern: ask the strategy how many
/// replicas there are, reduce across them, run a step). Outside any scope it is the default strategy:
/// one replica, no communication.
class strategy_ref {
 public:
  explicit strategy_ref(replica_context* context = nullptr) : c_(context) {}
  /// Whether this is the default strategy (no strategy is in scope).
  bool is_default() const { return c_ == nullptr; }
  int num_replicas_in_sync() const { return c_ ? c_->num_replicas_in_sync() : 1; }
  bool is_chief() const { return !c_ || c_->is_chief(); }
  template <class F, class... A>
  auto run(F&& f, A&&... args) {
    strategy_scope scope(c_);
    return std::forward<F>(f)(std::forward<A>(args)...);
  }
  float reduce(reduce_op op, float value) {
    if (c_) c_->all_reduce(std::span<float>(&value, 1), op);
    return value;
  }
  tensor reduce(reduce_op op, const tensor& value, std::optional<std::size_t> axis = std::nullopt) {
    return detail::reduce_tensor(c_, op, value, axis);
  }
  template <class T>
  std::vector<T> experimental_local_results(T value) const {
    return {std::move(value)};
  }

 private:
  replica_context* c_;
};

/// `tf.distribute.get_strategy()`: the strategy whose scope this thread is in (inside `strategy.run`,
/// `strategy.scope()`, `make_model`, and `fit`/`evaluate`/`predict` of a model a strategy made), else
/// the default strategy.
inline strategy_ref get_strategy() { return strategy_ref(detail::current_replica_context()); }
/// `tf.distribute.has_strategy()`: whether a strategy other than the default is in scope.
inline bool has_strategy() { return detail::current_replica_context() != nullptr; }

namespace detail {
/// The index N of a TF device name of one of `kinds`: "/gpu:N", "/GPU:N", "/device:GPU:N", "gpu:N",
/// "gpu" (0), with the job prefix or without; nullopt for anything else.
inline std::optional<int> device_index(std::string d, std::initializer_list<const char*> kinds) {
  for (const char* prefix : {"/job:localhost/replica:0/task:0/device:", "/device:", "/"})
    if (d.starts_with(prefix)) d = d.substr(std::string(prefix).size());
  for (const char* name : kinds) {
    const std::string n(name);
    if (d == n) return 0;
    if (d.starts_with(n + ":") && d.size() > n.size() + 1 && d.size() <= n.size() + 4 &&
        d.find_first_not_of("0123456789", n.size() + 1) == std::string::npos)
      return std::stoi(d.substr(n.size() + 1));
  }
  return std::nullopt;
}
inline std::optional<int> gpu_index(const std::string& d) { return device_index(d, {"gpu", "GPU", "cuda", "CUDA"}); }
inline std::optional<int> cpu_index(const std::string& d) { return device_index(d, {"cpu", "CPU"}); }

/// The backend object for the TF device name `name`, for strategy `who`: a GPU by index for a GPU
/// backend; for the cpu backend "/cpu:0", or with `logical_cpus` any "/cpu:N" (TF's logical CPU
/// devices, each a replica thread). Errors say which backend type a name needs.
template <backend_memory B>
B device_for(const std::string& name, const std::string& who, bool logical_cpus = false) {
  const auto gpu = gpu_index(name);
  if constexpr (B::device == device_kind::gpu) {
    if (!gpu)
      throw config_error(who + "<" + std::string(B::name) + ">: '" + name +
                         "' is not a GPU device name (use \"/gpu:N\"; the CPU is " + who + "<>)");
    try {
      return B(*gpu);
    } catch (const std::exception& e) {
      throw config_error(who + ": device '" + name + "' is not available: " + e.what());
    }
  } else {
    if (gpu)
      throw config_error(who + ": device '" + name + "' is a GPU, and this strategy's backend is " + B::name +
                         ": use " + who + "<dtrain::cuda> (dtrain/backend/cuda.hpp, CMake target dtrain::cuda)");
    const auto cpu = cpu_index(name);
    if (!cpu || (*cpu != 0 && !logical_cpus))
      throw config_error(who + ": unknown device '" + name + "' (the CPU is \"/cpu:0\"" +
                         (logical_cpus ? std::string(", its logical devices \"/cpu:N\")") : std::string(")")));
    return B{};
  }
}

/// A worker's device when none is given: on a GPU backend, the GPU of its local rank among those this
/// process sees (so workers sharing a host take a GPU each; with more workers than GPUs they share them
/// round-robin, which NCCL refuses: use the TCP ring then); one visible GPU (a launcher pinned
/// CUDA_VISIBLE_DEVICES) is that one. On the cpu backend, the cpu.
template <backend_memory B>
B device_for_local_rank(const cluster_info& c) {
  if constexpr (B::device == device_kind::gpu) {
    const int n = B::device_count();
    return B(n > 1 ? c.local_rank % n : 0);
  } else {
    return B{};
  }
}
}  // namespace detail

/// `tf.distribute.OneDeviceStrategy(device)`: one replica placed on `device`. On the cpu backend (the
/// default) the device is "/cpu:0"; on a GPU backend, `one_device_strategy<cuda>("/gpu:1")`, it is a
/// GPU by TF's names ("/gpu:N", "/device:GPU:N"). A backend is a compile-time choice in dtrain, so a
/// GPU name given to the cpu strategy is an error that says which type to use.
template <model_backend B = cpu>
class one_device_strategy : public default_strategy {
 public:
  using backend_type = B;
  explicit one_device_strategy(std::string device = B::device == device_kind::gpu ? "/gpu:0" : "/cpu:0")
      : name_(std::move(device)), device_(detail::device_for<B>(name_, "one_device_strategy")) {}
  const std::string& device() const { return name_; }

  template <class Model>
  model_for_t<one_device_strategy, Model> make_model(std::uint64_t seed = default_seed) {
    return model_for_t<one_device_strategy, Model>(seed, device_);
  }

 private:
  std::string name_;
  B device_;
};

/// `tf.distribute.MultiWorkerMirroredStrategy`: synchronous data parallelism over the workers of a cluster.
template <cluster_communicator Comm, backend Backend = cpu>
class multi_worker_mirrored_strategy final : public replica_context {
 public:
  using backend_type = Backend;

  /// Resolves the cluster (explicit spec, else the communicator's own membership when it has one (MPI),
  /// else TF_CONFIG, Slurm, torchrun or MPI variables, else one worker) and connects to the other
  /// workers (blocks until all are there). The model computes on `device`, by default the GPU of the
  /// worker's local rank on a GPU backend (`detail::device_for_local_rank`).
  explicit multi_worker_mirrored_strategy(communication_options o = {}, std::optional<cluster_info> cluster = {},
                                          std::optional<Backend> device = {})
      : o_(o), cluster_(cluster ? std::move(*cluster) : default_cluster()),
        device_(device ? std::move(*device) : detail::device_for_local_rank<Backend>(cluster_)),
        comm_(connect(o_, cluster_, device_)), host_sync_(*this, o.first_bucket_bytes, o.bucket_bytes) {
    if (o_.gradient_compression != compression::none && reduces_device_gradients())
      throw config_error("multi_worker_mirrored_strategy: gradient_compression is for gradients in host memory; comm::nccl "
                         "sums device memory in FP32 (implementation ring stages the gradients through host memory to "
                         "the TCP ring, which compresses them)");
    if (comm_.size() > 1) {  // a worker compressing for others that do not would garble the sums
      const float c = float(o_.gradient_compression);
      float seen[2] = {c, -c};  // the largest and the smallest, in one all-reduce
      comm_.all_reduce(std::span<float>(seen, 2), reduce_op::max);
      if (seen[0] != -seen[1])
        throw config_error("multi_worker_mirrored_strategy: the workers disagree on gradient_compression (this worker: " +
                           std::string(name_of(o_.gradient_compression)) + "); it must be the same on every worker");
    }
  }
  multi_worker_mirrored_strategy(const multi_worker_mirrored_strategy&) = delete;
  multi_worker_mirrored_strategy& operator=(const multi_worker_mirrored_strategy&) = delete;

  int num_replicas_in_sync() const override { return comm_.size(); }
  int replica_id() const override { return comm_.rank(); }
  bool is_chief() const override { return cluster_.is_chief(); }
  task_info cluster_resolver() const { return {cluster_.task_type, cluster_.task_id}; }
  const cluster_info& cluster() const { return cluster_; }
  Comm& communicator() { return comm_; }

  /// Gradient communication that backward did not hide: the time steps spent waiting for the last
  /// buckets after backward ended.
  struct communication_stats {
    double exposed_seconds = 0.0;
    std::int64_t steps = 0;
  };
  const communication_stats& stats() const { return stats_; }

  /// The strategy's "scope": builds the model on every worker's backend and gives all of them the
  /// chief's weights.
  template <class Model>
  model_for_t<multi_worker_mirrored_strategy, Model> make_model(std::uint64_t seed = default_seed) {
    strategy_scope scope(this);
    model_for_t<multi_worker_mirrored_strategy, Model> m(seed, device_);
    std::vector<float> weights = m.get_weights();
    comm_.broadcast(std::span<float>(weights), 0);
    m.set_weights(weights);
    m.set_strategy(this, &gradient_sync_for());
    return m;
  }
  /// TF's `with strategy.scope():`: while the guard lives, `get_strategy()` on this thread is this one.
  [[nodiscard]] strategy_scope scope() { return strategy_scope(this); }
  /// `strategy.run(fn, args)`: runs the step on this worker's replica, in the strategy's scope.
  template <class F, class... A>
  auto run(F&& f, A&&... args) {
    strategy_scope scope(this);
    const detail::replica_thread here(0, group_);
    return std::forward<F>(f)(std::forward<A>(args)...);
  }
  /// `strategy.reduce(op, value)`: a value of every replica, reduced across them.
  float reduce(reduce_op op, float value) {
    comm_.all_reduce(std::span<float>(&value, 1), op);
    return value;
  }
  /// `strategy.reduce(op, per_replica_value, axis)` for tensors: `axis` none reduces element by element
  /// across replicas; `axis` 0 also over each replica's rows, `mean` dividing by the rows of all
  /// replicas (which may hold different numbers of rows).
  tensor reduce(reduce_op op, const tensor& value, std::optional<std::size_t> axis = std::nullopt) {
    return detail::reduce_tensor(this, op, value, axis);
  }
  template <class T>
  std::vector<T> experimental_local_results(T value) const {
    return {std::move(value)};
  }
  /// Splits a dataset of global batches among the replicas by its auto-shard policy (see input.hpp).
  template <data::dataset D>
  distributed_dataset<D> distribute_dataset(D d) {
    return distributed_dataset<D>(std::move(d), num_replicas_in_sync(), replica_id(), this);
  }
  /// TF's name for `distribute_dataset`.
  template <data::dataset D>
  distributed_dataset<D> experimental_distribute_dataset(D d) {
    return distribute_dataset(std::move(d));
  }
  /// `strategy.distribute_datasets_from_function(fn)`: fn(input_context) builds this worker's pipeline,
  /// already sharded and batched per replica. The workers' pipelines may yield different numbers of
  /// batches: iterating, they agree at every batch (one small all-reduce) on whether any has data, a
  /// worker that ran out gets empty batches until all have, and the epoch ends on all at the same step.
  template <class F>
  auto distribute_datasets_from_function(F&& f) {
    const input_context ctx{num_replicas_in_sync(), replica_id(), num_replicas_in_sync()};
    auto d = std::forward<F>(f)(ctx);
    return per_replica_dataset<decltype(d)>{std::move(d), num_replicas_in_sync() > 1 ? this : nullptr};
  }

  /// Whether a GPU model's gradients are summed in device memory (comm::nccl with implementation nccl
  /// or auto: one collective after backward, on the model's stream), not staged through host memory.
  bool reduces_device_gradients() const {
    if constexpr (device_communicator<Comm, Backend>) return comm_.device_data_plane();
    else return false;
  }

  // ---- replica_context: what the training loop of a model made here calls ----------------------------
  using replica_context::broadcast;
  void all_reduce(std::span<float> data, reduce_op op) override { comm_.all_reduce(data, op); }
  void broadcast(std::span<std::byte> data, int root) override { comm_.broadcast(data, root); }
  void all_gather(std::span<const float> in, std::span<float> out) override { comm_.all_gather(in, out); }
  void barrier() override { comm_.barrier(); }

 private:
  /// Gradients in host memory: fixed buckets launched as backward completes them, each an asynchronous
  /// all-reduce, waited for at the end.
  class host_sync final : public gradient_sync<cpu> {
   public:
    host_sync(multi_worker_mirrored_strategy& s, std::size_t first_bytes, std::size_t bucket_bytes)
        : s_(s), buckets_(first_bytes, bucket_bytes) {}
    void begin(std::span<float> g, std::size_t side) override {
      grads_ = g;
      side_ = side;
      pending_.clear();
      buckets_.begin(g.size());
    }
    void ready(std::size_t offset, std::size_t count) override {
      launcher l{this};
      buckets_.ready(offset, count, l);
    }
    void finish() override {
      const auto t0 = std::chrono::steady_clock::now();
      launcher l{this};
      buckets_.flush(l);
      for (auto& h : pending_) h.wait();
      pending_.clear();
      s_.count_exposed(t0);
    }

   private:
    /// Starts the all-reduce of grads_[begin, end): in 16 bits where the options say so, except the side
    /// values, which go in FP32 (in a collective of their own, queued first).
    struct launcher {
      host_sync* h;
      void operator()(std::size_t begin, std::size_t end) {
        const compression c = h->s_.o_.gradient_compression;
        if (c == compression::none) return launch(begin, end, c);
        if (begin < h->side_) launch(begin, std::min(end, h->side_), compression::none);
        if (end > h->side_) launch(std::max(begin, h->side_), end, c);
      }
      void launch(std::size_t begin, std::size_t end, compression c) {
        auto part = h->grads_.subspan(begin, end - begin);
        if constexpr (compressing_communicator<Comm>)
          h->pending_.push_back(h->s_.comm_.all_reduce_async(part, reduce_op::sum, c));
        else
          h->pending_.push_back(h->s_.comm_.all_reduce_async(part, reduce_op::sum));
      }
    };
    multi_worker_mirrored_strategy& s_;
    gradient_buckets<launcher> buckets_;
    std::span<float> grads_;
    std::size_t side_ = 0;
    std::vector<decltype(std::declval<Comm&>().all_reduce_async(std::span<float>{}, reduce_op::sum))> pending_;
  };
  /// Gradients in device memory summed where they are (comm::nccl): one collective once all are ready.
  class device_sync final : public gradient_sync<Backend> {
   public:
    explicit device_sync(multi_worker_mirrored_strategy& s) : s_(s) {}
    void begin(span_t<Backend, float> g, std::size_t) override { g_.emplace(g); }
    void ready(std::size_t, std::size_t) override {}
    void finish() override {
      const auto t0 = std::chrono::steady_clock::now();
      s_.comm_.all_reduce(*g_, reduce_op::sum);
      s_.count_exposed(t0);
    }

   private:
    multi_worker_mirrored_strategy& s_;
    std::optional<span_t<Backend, float>> g_;
  };
  /// What a model made here sums its gradients with (one object for all of them: their steps never
  /// overlap, as each is a collective).
  gradient_sync<Backend>& gradient_sync_for() {
    if constexpr (host_addressable_v<Backend>) {
      return host_sync_;
    } else {
      if constexpr (device_communicator<Comm, Backend>)
        if (comm_.device_data_plane()) return device_sync_ ? *device_sync_ : device_sync_.emplace(*this);
      return staged_sync_ ? *staged_sync_ : staged_sync_.emplace(host_sync_);
    }
  }
  void count_exposed(std::chrono::steady_clock::time_point since) {
    stats_.exposed_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
    ++stats_.steps;
  }

  static cluster_info default_cluster() {
    if constexpr (requires { { Comm::resolve_cluster() } -> std::same_as<cluster_info>; }) return Comm::resolve_cluster();
    else return resolve_cluster();
  }
  static Comm connect(const communication_options& o, const cluster_info& c, const Backend& device) {
    using impl = communication_options::implementation_type;
    if constexpr (!device_communicator<Comm, Backend>)
      if (o.implementation == impl::nccl)
        throw config_error("multi_worker_mirrored_strategy: implementation nccl needs a GPU backend and comm::nccl: "
                           "multi_worker_mirrored_strategy<comm::nccl, cuda> (dtrain/distribute/comm/nccl.hpp, "
                           "CMake target dtrain::nccl); this strategy's communicator takes host memory only");
    if constexpr (!compressing_communicator<Comm>)
      if (o.gradient_compression != compression::none)
        throw config_error("multi_worker_mirrored_strategy: gradient_compression needs a communicator that sums in 16 "
                           "bits (comm::ring_tcp, comm::mpi, comm::nccl's TCP ring); this one sends FP32 only");
    if (!c.in_ring())
      throw config_error("multi_worker_mirrored_strategy: this process is task " + c.task_type + ":" +
                         std::to_string(c.task_id) + ", which takes no part in training (only chief and worker "
                         "tasks do; an evaluator watches checkpoints instead)");
    if constexpr (requires { Comm::connect(c, o, device); }) return Comm::connect(c, o, device);
    else return Comm::connect(c, o);
  }

  /// The worker's replica as state it shares with the others sees it (core/replica_group.hpp).
  struct group final : detail::replica_group {
    explicit group(multi_worker_mirrored_strategy& s) : s(s) {}
    int num_local_replicas() const override { return 1; }
    void local_barrier() override {}
    void sum_over_workers(std::span<float> values) override { s.comm_.all_reduce(values, reduce_op::sum); }
    multi_worker_mirrored_strategy& s;
  };

  communication_options o_;
  cluster_info cluster_;
  Backend device_;
  Comm comm_;
  std::shared_ptr<detail::replica_group> group_ = std::make_shared<group>(*this);
  communication_stats stats_;
  host_sync host_sync_;
  std::optional<std::conditional_t<device_communicator<Comm, Backend>, device_sync, std::monostate>>
      device_sync_;  // comm::nccl's, when it sums device memory
  /// A device model's, through host memory.
  std::optional<std::conditional_t<host_addressable_v<Backend>, std::monostate, detail::staged_gradient_sync<Backend>>>
      staged_sync_;
};

static_assert(strategy<default_strategy>);
static_assert(strategy<one_device_strategy<>>);
static_assert(strategy<multi_worker_mirrored_strategy<comm::local>>);

}  // namespace dtrain
