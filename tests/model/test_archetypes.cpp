// Archetypes (as Asio's tests have them): for each seam, the least type that models its concept, and
// the library's generic code instantiated with it. A model, an optimizer step, a strategy or a dataset
// stage that used anything of its seam beyond the concept would fail to compile here; and the types
// below are what an author of a new backend, layer, communicator, dataset or strategy starts from.
#include <dtrain/backend/kernel_table.hpp>
#include <dtrain/dtrain.hpp>

#include <boost/test/unit_test.hpp>

namespace archetype {
using namespace dtrain;

/// An address in memory host code cannot read: the model must go through upload/download.
template <class T>
class pointer {
 public:
  pointer() = default;
  pointer(std::nullptr_t) {}
  pointer operator+(std::size_t) const { return *this; }
  bool operator!() const { return true; }
  explicit operator bool() const { return false; }
  operator pointer<const T>() const
    requires(!std::is_const_v<T>)
  {
    return {};
  }
};

/// A kernel that does nothing, declared from its row of the kernel table (backend/kernel_table.hpp).
#define ARCHETYPE_KERNEL(head, targs, result, name, ...)                                                      \
  DTRAIN_KERNEL_TABLE_UNPACK head result name(DTRAIN_KERNEL_TABLE_MAP(DTRAIN_KERNEL_TYPE, , __VA_ARGS__)) const { \
    return result();                                                                                          \
  }

/// What a model of dense layers needs of its backend (`model_backend` and the activation kernels), each
/// operation doing nothing...
struct dense_backend {
  static constexpr const char* name = "archetype";
  static constexpr device_kind device = device_kind::cpu;
  template <class T>
  using pointer = archetype::pointer<T>;
  template <class T>
  struct buffer {
    using value_type = T;
    pointer<T> data() const { return {}; }
    std::size_t size() const { return 0; }
  };
  template <class T>
  buffer<T> allocate(std::size_t) const {
    return {};
  }
  void upload(std::size_t, const float*, pointer<float>) const {}
  void download(std::size_t, pointer<const float>, float*) const {}
  void synchronize() const {}
  DTRAIN_BLAS_KERNELS(ARCHETYPE_KERNEL)
  DTRAIN_ACTIVATION_KERNELS(ARCHETYPE_KERNEL)
  DTRAIN_LOSS_KERNELS(ARCHETYPE_KERNEL)
  DTRAIN_UPDATE_KERNELS(ARCHETYPE_KERNEL)
};
static_assert(model_backend<dense_backend> && activation_kernels<dense_backend>);
static_assert(!window_kernels<dense_backend> && !dtrain::backend<dense_backend>);

/// ...and the whole backend concept: every other family too.
struct backend : dense_backend {
  DTRAIN_WINDOW_KERNELS(ARCHETYPE_KERNEL)
  DTRAIN_NORMALIZATION_KERNELS(ARCHETYPE_KERNEL)
  DTRAIN_EMBEDDING_KERNELS(ARCHETYPE_KERNEL)
  DTRAIN_REGULARIZATION_KERNELS(ARCHETYPE_KERNEL)
};
static_assert(dtrain::backend<backend>);
static_assert(!host_addressable_v<backend>);

/// The layer contract's minimum: shapes, names, no parameters, and the four calls (the identity).
struct layer_spec {
  template <class In, class B>
  struct bind {
    using input_shape = In;
    using output_shape = In;
    static constexpr const char* keras_name = "identity";
    static constexpr const char* class_name = "Identity";
    static constexpr std::array<param_spec, 0> params{};
    void initialize(std::span<float>, rng&) {}
    void forward(layer_context<B>& ctx, pointer_t<B, const float> x, pointer_t<B, float> y, std::size_t n,
                 pointer_t<B, const float>) const {
      ctx.device.copy(n * In::size, x, y);
    }
    void backward(layer_context<B>& ctx, pointer_t<B, const float>, pointer_t<B, const float>, pointer_t<B, float> dy,
                  pointer_t<B, float> dx, std::size_t n, pointer_t<B, const float>, pointer_t<B, float>) const {
      if (dx) ctx.device.copy(n * In::size, dy, dx);
    }
    void regularization(layer_context<B>&, pointer_t<B, const float>, pointer_t<B, float>, float, pointer_t<B, float>) const {}
  };
};
static_assert(layer<bind_t<layer_spec, shape<4>, cpu>, cpu>);
static_assert(layer<bind_t<layer_spec, shape<4>, backend>, backend>);

/// The communicator concept's minimum (one rank: every collective is the identity), made from a cluster.
struct communicator {
  struct handle {
    void wait() {}
  };
  static communicator connect(const cluster_info&, const communication_options&) { return {}; }
  int rank() const { return 0; }
  int size() const { return 1; }
  void all_reduce(std::span<float>, reduce_op) {}
  handle all_reduce_async(std::span<float>, reduce_op) { return {}; }
  void broadcast(std::span<float>, int) {}
  void broadcast(std::span<std::byte>, int) {}
  void all_gather(std::span<const float>, std::span<float>) {}
  void barrier() {}
};
static_assert(cluster_communicator<communicator>);

/// The dataset concept's minimum: no element, cardinality 0.
struct dataset {
  using element_type = data::example;
  struct iterator {
    std::optional<data::example> next() { return std::nullopt; }
    std::int64_t skip(std::int64_t) { return 0; }
  };
  std::int64_t cardinality() const { return 0; }
  data::options options() const { return {}; }
  iterator iterate(std::uint64_t) const { return {}; }
};
static_assert(data::dataset<dataset>);

/// The strategy concept's minimum: one replica on the archetype backend.
struct strategy {
  using backend_type = backend;
  int num_replicas_in_sync() const { return 1; }
  bool is_chief() const { return true; }
  task_info cluster_resolver() const { return {}; }
  template <class Model>
  model_for_t<strategy, Model> make_model(std::uint64_t seed = default_seed) {
    return model_for_t<strategy, Model>(seed, backend{});
  }
  template <class F>
  auto run(F&& f) {
    return f();
  }
  float reduce(reduce_op, float v) { return v; }
  std::vector<float> experimental_local_results(float v) const { return {v}; }
  template <data::dataset D>
  D distribute_dataset(D d) const {
    return d;
  }
  template <data::dataset D>
  D experimental_distribute_dataset(D d) const {
    return d;
  }
  template <class F>
  auto distribute_datasets_from_function(F&& f) const {
    return f(input_context{});
  }
};
static_assert(dtrain::strategy<strategy>);
using model = sequential<input<4>, layer_spec, dense<3, relu>, dense<2>>;
static_assert(strategy_for<strategy, model>);

}  // namespace archetype

// The library's generic code on the archetypes: a model of archetype layers on the archetype backend,
// every member; the dataset stages over the archetype dataset; each strategy with the archetype model.
template class dtrain::basic_model<
    archetype::backend, dtrain::detail::graph<dtrain::detail::sequential_name, dtrain::input<4>, archetype::layer_spec,
                                              dtrain::dense<3, dtrain::relu>, dtrain::dense<2>>>;
template class dtrain::basic_model<archetype::dense_backend,
                                   dtrain::detail::graph<dtrain::detail::sequential_name, dtrain::input<4>,
                                                         dtrain::dense<3, dtrain::relu>, dtrain::dense<2>>>;
static_assert(dtrain::strategy_for<dtrain::multi_worker_mirrored_strategy<archetype::communicator>, archetype::model>);
static_assert(dtrain::strategy_for<dtrain::mirrored_strategy<>, archetype::model>);
static_assert(dtrain::strategy_for<dtrain::one_device_strategy<>, archetype::model>);
static_assert(dtrain::strategy_for<dtrain::default_strategy, archetype::model>);

BOOST_AUTO_TEST_SUITE(archetypes)

BOOST_AUTO_TEST_CASE(generic_code_runs_on_the_archetypes) {
  using namespace dtrain;
  // the archetype model trains through fit on the archetype dataset (no batch: nothing to do) and the
  // identity layer passes its input through on the cpu
  archetype::strategy s;
  auto m = s.make_model<archetype::model>(1);
  m.compile({.optimizer = sgd{}, .loss = mean_squared_error{}});
  const auto h = m.fit(s.distribute_dataset(archetype::dataset{}) | data::prefetch(), {.epochs = 1, .verbose = 0});
  BOOST_TEST(h.history.empty());
  sequential<input<4>, archetype::layer_spec> id;
  tensor x = zeros({2, 4});
  x(1, 3) = 5.0f;
  BOOST_TEST(id(x)(1, 3) == 5.0f);
  multi_worker_mirrored_strategy<archetype::communicator> one({}, cluster_info{});
  BOOST_TEST(one.num_replicas_in_sync() == 1);
}

BOOST_AUTO_TEST_SUITE_END()
