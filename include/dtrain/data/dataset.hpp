#pragma once
/// \file
/// The dataset seam (tf.data's role). A *dataset* is a cheap-to-copy description of a pipeline; its
/// `iterate(iteration)` starts a pass over it. Stages compose with `|`:
///
///     auto ds = data::from_tensor_slices(x, y) | data::shuffle(60000, 42) | data::repeat() | data::batch(64);
///
/// Dataset contract (`dataset`): `element_type`; `cardinality()` (elements per pass, or `infinite` /
/// `unknown`, as TF's `cardinality()`); `options()` (kept for the strategy's auto-sharding); and
/// `iterate(iteration)` returning a stage iterator with `next() -> std::optional<element_type>` and
/// `skip(n) -> skipped` that yields exactly what `n` calls of `next()` would have consumed.
/// Every stage is deterministic given its seed and the pass number `iteration` (which is what
/// `reshuffle_each_iteration` varies), so an iterator's state is just (iteration, elements produced):
/// `data::iterator` saves that and restores by starting the same pass and skipping, which yields
/// exactly the elements an uninterrupted iterator would (sources and 1:1 stages skip without work).

#include <array>
#include <concepts>
#include <cstdint>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "dtrain/core/error.hpp"

namespace dtrain::data {

/// `cardinality()` of a dataset that never ends / whose length is not known without reading it.
inline constexpr std::int64_t infinite = -1;
inline constexpr std::int64_t unknown = -2;

/// tf.data's AutoShardPolicy: how `distribute_dataset` splits this dataset among workers.
enum class auto_shard_policy { off, auto_, file, data };

/// tf.data.Options (the part dtrain reads).
struct options {
  auto_shard_policy auto_shard = auto_shard_policy::auto_;
};

template <class I, class E>
concept stage_iterator = requires(I& it, std::int64_t n) {
  { it.next() } -> std::same_as<std::optional<E>>;
  { it.skip(n) } -> std::convertible_to<std::int64_t>;
};

template <class D>
concept dataset = std::copy_constructible<D> && requires(const D& d, std::uint64_t iteration) {
  typename D::element_type;
  { d.cardinality() } -> std::convertible_to<std::int64_t>;
  { d.options() } -> std::convertible_to<data::options>;
  { d.iterate(iteration) } -> stage_iterator<typename D::element_type>;
};

/// A stage is anything `s.apply(dataset)` turns into a new dataset.
template <class S, class D>
concept stage_for = dataset<D> && requires(const S& s, D d) {
  { s.apply(std::move(d)) } -> dataset;
};

template <class D, class S>
  requires stage_for<S, std::remove_cvref_t<D>>
auto operator|(D&& d, const S& s) {
  return s.apply(std::forward<D>(d));
}

namespace detail {
/// `skip` by pulling elements: for stages that must see what they skip.
template <class It>
std::int64_t skip_by_next(It& it, std::int64_t n) {
  std::int64_t k = 0;
  while (k < n && it.next()) ++k;
  return k;
}
}  // namespace detail

/// Saved position of a `data::iterator`.
struct iterator_state {
  std::uint64_t iteration = 0;
  std::int64_t produced = 0;
  friend bool operator==(const iterator_state&, const iterator_state&) = default;
};

inline nlohmann::json to_json(const iterator_state& s) {
  return {{"iteration", s.iteration}, {"produced", s.produced}};
}
inline iterator_state iterator_state_from_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("iteration") || !j.contains("produced") || !j["iteration"].is_number_unsigned() ||
      !j["produced"].is_number_integer() || j["produced"].get<std::int64_t>() < 0)
    throw value_error("dataset iterator state: expected {\"iteration\": n, \"produced\": k}, got " + j.dump());
  return {j["iteration"].get<std::uint64_t>(), j["produced"].get<std::int64_t>()};
}

/// A resumable pass over a dataset (Python's `iter(ds)`).
template <dataset D>
class iterator {
 public:
  using element_type = typename D::element_type;

  explicit iterator(D d, std::uint64_t iteration = 0) : ds_(std::move(d)) {
    it_.emplace(ds_.iterate(iteration));
    state_.iteration = iteration;
  }

  std::optional<element_type> next() {
    auto e = it_->next();
    if (e) ++state_.produced;
    return e;
  }
  const iterator_state& state() const { return state_; }
  nlohmann::json save() const { return to_json(state_); }
  /// Over a distributed dataset: the rows of the global batch whose share the last element is (the
  /// divisor of the summed loss); elsewhere 0.
  std::size_t global_rows() const {
    if constexpr (requires { it_->global_rows(); }) return it_->global_rows();
    else return 0;
  }
  /// Over a distributed dataset whose workers agree on every batch (FILE sharding, per-worker
  /// pipelines): reads the next element early and returns this worker's part of the agreement on it
  /// (has data, rows), for a caller that sums it over the workers with its own collective; `agreed`
  /// hands back the sums, and the next `next()` then makes no collective of its own. Elsewhere: none.
  std::optional<std::array<float, 2>> ahead() {
    if constexpr (requires { it_->ahead(); }) return it_->ahead();
    else return std::nullopt;
  }
  void agreed(std::array<float, 2> sums) {
    if constexpr (requires { it_->agreed(sums); }) it_->agreed(sums);
  }

  /// Moves to a saved position: the same pass, `produced` elements in.
  void restore(const iterator_state& s) {
    it_.reset();  // stage iterators need not be assignable (a map's lambda is not)
    it_.emplace(ds_.iterate(s.iteration));
    state_ = {s.iteration, 0};
    const std::int64_t got = it_->skip(s.produced);
    state_.produced = got;
    if (got != s.produced)
      throw value_error("dataset iterator state: the saved position is " + std::to_string(s.produced) +
                        " elements into the pass but the dataset ends after " + std::to_string(got));
  }
  void restore(const nlohmann::json& j) { restore(iterator_state_from_json(j)); }

  const D& dataset() const { return ds_; }

 private:
  D ds_;
  std::optional<decltype(std::declval<const D&>().iterate(0))> it_;
  iterator_state state_;
};

template <dataset D>
iterator<D> make_iterator(D d, std::uint64_t iteration = 0) {
  return iterator<D>(std::move(d), iteration);
}

}  // namespace dtrain::data
