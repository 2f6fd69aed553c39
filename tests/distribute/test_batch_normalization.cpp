// Batch normalization across replicas, over real loopback sockets and in mirrored_strategy's
// in-process replicas: synchronised statistics make N replicas with a global batch B train like one
// replica with B (also through a step where a replica has no rows, and in a functional model with a
// skip connection); by default each replica normalises by its own rows and every replica keeps the mean
// of their batch statistics as moving statistics.
#include "support/helpers.hpp"
#include "support/loopback.hpp"
#include "support/mirrored.hpp"

using namespace dtrain;
namespace tt = boost::test_tools;
using dtrain_test::three_class_problem;
using dtrain_test::weights_close;

namespace {
// (a bias right before batch normalization would get a zero gradient, and Adam would turn its rounding
// noise into steps that depend on the summation order: the tanh keeps every gradient real)
template <bool Sync>
using normed = sequential<input<6>, dense<8, dtrain::tanh>, batch_normalization<{.momentum = 0.9f, .synchronized = Sync}>,
                          dense<3>>;

template <class Model>
void compile(Model& m) {
  m.compile({.optimizer = adam{{.learning_rate = 0.01f}}, .loss = sparse_categorical_crossentropy{{.from_logits = true}}});
}

/// 50 examples in global batches of 12 for 2 epochs: the last batch of each epoch has 2 rows, so with
/// 3 replicas one of them has none in that step.
auto dataset() {
  auto [x, y] = three_class_problem(50);
  return data::from_tensor_slices(x, y) | data::batch(12);
}

struct hidden;
struct normalised;
/// A skip connection around the synchronised normalization.
using residual = functional<input<6>, node<hidden, dense<8, dtrain::tanh>>,
                            node<normalised, batch_normalization<{.momentum = 0.9f, .synchronized = true}>>,
                            node<void, add, hidden, normalised>, dense<3>>;

/// Every worker's weights (trainable, then the moving statistics) after training `Model` (default:
/// `normed<Sync>`) on p workers.
template <bool Sync, class Model = normed<Sync>>
std::vector<std::vector<float>> train_workers(int p) {
  std::vector<std::vector<float>> out(static_cast<std::size_t>(p));
  dtrain_test::on_workers(p, [&](auto& s, int r) {
    auto model = s.template make_model<Model>(3);
    compile(model);
    model.fit(dataset(), {.epochs = 2, .verbose = 0});
    out[std::size_t(r)] = model.get_weights();
  });
  return out;
}

/// The same under mirrored_strategy with n replicas in this process.
template <bool Sync>
std::vector<float> train_mirrored(int n) {
  std::vector<std::string> devices;
  for (int i = 0; i < n; ++i) devices.push_back("/cpu:" + std::to_string(i));
  mirrored_strategy<> s(devices);
  auto model = s.make_model<normed<Sync>>(3);
  compile(model);
  model.fit(s.distribute_dataset(dataset()), {.epochs = 2, .verbose = 0});
  return model.get_weights();
}

/// Mean and biased variance of each column of `tanh(x w + b)` (8 units) over the rows [lo, hi) of x, in double.
std::pair<std::vector<double>, std::vector<double>> dense_moments(const tensor& x, std::size_t lo, std::size_t hi,
                                                                  const std::vector<float>& w) {
  std::vector<double> mean(8), var(8);
  for (std::size_t u = 0; u < 8; ++u) {
    std::vector<double> z;
    for (std::size_t i = lo; i < hi; ++i) {
      double v = w[48 + u];
      for (std::size_t j = 0; j < 6; ++j) v += double(x(i, j)) * w[j * 8 + u];
      z.push_back(std::tanh(v));
    }
    for (double v : z) mean[u] += v / double(z.size());
    for (double v : z) var[u] += (v - mean[u]) * (v - mean[u]) / double(z.size());
  }
  return {mean, var};
}
}  // namespace

BOOST_AUTO_TEST_SUITE(batch_normalization_across_replicas)

BOOST_AUTO_TEST_CASE(synchronized_workers_train_like_one_worker_with_the_global_batch) {
  const auto one = train_workers<true>(1);
  for (int p : {2, 3}) {
    BOOST_TEST_CONTEXT("workers = " << p) {
      const auto many = train_workers<true>(p);
      BOOST_TEST(weights_close(many[0], one[0]));  // moving statistics included
      for (int r = 1; r < p; ++r) BOOST_TEST(many[std::size_t(r)] == many[0], tt::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(a_functional_model_with_a_skip_connection_trains_like_one_worker) {
  const auto one = train_workers<true, residual>(1);
  for (int p : {2, 3}) {
    BOOST_TEST_CONTEXT("workers = " << p) {
      const auto many = train_workers<true, residual>(p);
      BOOST_TEST(weights_close(many[0], one[0]));
      for (int r = 1; r < p; ++r) BOOST_TEST(many[std::size_t(r)] == many[0], tt::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(synchronized_mirrored_replicas_train_like_one_replica) {
  const auto one = train_mirrored<true>(1);
  for (int n : {2, 3}) BOOST_TEST_CONTEXT("replicas = " << n) { BOOST_TEST(weights_close(train_mirrored<true>(n), one)); }
}

BOOST_AUTO_TEST_CASE(unsynchronized_workers_normalise_alone_and_share_mean_moving_statistics) {
  // unsynchronised, the replicas train on differently normalised batches: not like one worker
  BOOST_TEST(!weights_close(train_workers<false>(2)[0], train_workers<false>(1)[0]));
  // one step of 2 workers on 12 rows each: each normalises by its rows alone (its training outputs are a
  // lone model's on its rows), and both hold 0.9 initial + 0.1 times the mean of their batch moments
  auto [x, y] = three_class_problem(24);
  for (bool sync : {false, true}) {
    std::vector<std::vector<float>> before(2), after(2);
    std::vector<tensor> outputs(2);
    dtrain_test::on_workers(2, [&](auto& s, int r) {
      auto run = [&]<bool Sync>() {
        auto model = s.template make_model<normed<Sync>>(3);
        compile(model);
        const std::size_t lo = std::size_t(r) * 12;
        const tensor xs = dtrain::detail::rows_of(x, lo, lo + 12), ys = dtrain::detail::rows_of(y, lo, lo + 12);
        before[std::size_t(r)] = model.get_weights();
        model.train_step(xs, ys, 24);
        after[std::size_t(r)] = model.get_weights();
        outputs[std::size_t(r)] = model(xs, true);
      };
      if (sync) run.template operator()<true>();
      else run.template operator()<false>();
    });
    BOOST_TEST_CONTEXT("synchronized = " << sync) {
      BOOST_TEST(after[1] == after[0], tt::per_element());
      const auto [m0, v0] = dense_moments(x, 0, 12, before[0]);
      const auto [m1, v1] = dense_moments(x, 12, 24, before[0]);
      const auto [mg, vg] = dense_moments(x, 0, 24, before[0]);
      const std::size_t at = normed<false>::param_count;  // moving mean, then moving variance
      for (std::size_t u = 0; u < 8; ++u) {
        // the mean of the two halves' means is the global mean; their variances' mean is not the global variance
        BOOST_TEST(after[0][at + u] == 0.1 * (m0[u] + m1[u]) / 2, tt::tolerance(2e-4));
        const double var = sync ? vg[u] : (v0[u] + v1[u]) / 2;
        BOOST_TEST(after[0][at + 8 + u] == 0.9 + 0.1 * var, tt::tolerance(1e-5));
      }
      // training-mode outputs: unsynchronised, a lone model's on the worker's rows; synchronised, the
      // worker's rows of a lone model's on the global batch
      for (std::size_t r = 0; r < 2; ++r) {
        std::vector<float> lone_out;
        if (sync) {
          normed<true> lone(1);
          lone.set_weights(after[r]);
          const tensor all = lone(x, true);
          lone_out.assign(all.begin() + std::ptrdiff_t(r * 36), all.begin() + std::ptrdiff_t(r * 36 + 36));
        } else {
          normed<false> lone(1);
          lone.set_weights(after[r]);
          const tensor mine = lone(dtrain::detail::rows_of(x, r * 12, r * 12 + 12), true);
          lone_out.assign(mine.begin(), mine.end());
        }
        const std::vector<float> got(outputs[r].begin(), outputs[r].end());
        BOOST_TEST(weights_close(got, lone_out));  // to the rounding of another summation order
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
