#pragma once
// A parameter server job over real loopback sockets for the tests: the coordinator, the workers and the
// ps tasks run as threads of the test process, each task with its own sockets (the ps tasks as bare
// servers: the strategy's own ps path ends its process, which the example's test runs as processes).
#include "support/helpers.hpp"
#include "support/loopback.hpp"
#include "support/mirrored.hpp"

#include <dtrain/distribute/parameter_server_strategy.hpp>

namespace dtrain_test {
using namespace dtrain;

/// A loopback job: one chief, `workers` workers and `ps` ps tasks.
struct job {
  cluster_spec spec;
  int workers, ps;
  std::string token = "";
  bool tls = false;  // (needs a token)
  job(int w, int p) : workers(w), ps(p) {
    const auto a = dtrain_test::free_addresses(1 + w + p);
    spec.jobs["chief"] = {a[0]};
    for (int i = 0; i < w; ++i) spec.jobs["worker"].push_back(a[std::size_t(1 + i)]);
    for (int i = 0; i < p; ++i) spec.jobs["ps"].push_back(a[std::size_t(1 + w + i)]);
  }
  cluster_info task(const std::string& type, int i) const { return simple_cluster_resolver{spec, {type, i}}.resolve(); }
  parameter_server_options options(variable_partitioner partitioner = {}) const {
    return {.variable_partitioner = std::move(partitioner), .connect_timeout = std::chrono::seconds(20), .job_token = token,
            .tls = tls, .log = [](const std::string&) {}};
  }
  ps::endpoint_identity ps_identity(int j) const {
    ps::endpoint_identity id{ps::task_numbering{workers, ps}.ps_task(j), {workers, ps}, ps::job_fingerprint(spec), token};
    if (tls) id.tls = std::make_shared<comm::detail::tls_context>();
    return id;
  }

  /// Runs the ps tasks, then `chief(strategy)` and `worker(strategy, i)` on their threads; rethrows the
  /// first failure.
  template <class Chief, class Worker>
  void run(Chief chief, Worker worker, variable_partitioner partitioner = {}) const {
    const auto errs = dtrain_test::run_threads(1 + workers + ps, [&](int t) {
      if (t > workers) {
        const int j = t - 1 - workers;
        ps::server s(ps_identity(j), spec.jobs.at("ps")[std::size_t(j)], [](const std::string&) {});
        s.join(std::chrono::seconds(20));
      } else if (t == 0) {
        parameter_server_strategy s(options(partitioner), task("chief", 0));
        chief(s);
      } else {
        parameter_server_strategy s(options(partitioner), task("worker", t - 1));
        worker(s, t - 1);
      }
    });
    for (const auto& failure : std::exchange(dtrain_test::failed_checks(), {})) BOOST_ERROR(failure);
    for (const auto& e : errs)
      if (e) std::rethrow_exception(e);
  }
};

inline void compile(auto& model) {
  model.compile({.optimizer = adam{{.learning_rate = 0.01f}}, .loss = sparse_categorical_crossentropy{{.from_logits = true}},
                 .metrics = {accuracy{}}});
}
inline auto dataset() {
  auto [x, y] = three_class_problem(96);
  return data::from_tensor_slices(x, y) | data::shuffle(96, 7) | data::batch(12) | data::repeat();
}
}  // namespace dtrain_test
