// comm::mpi under mpirun (tests/CMakeLists.txt runs it with 1 to 4 ranks). Each mode is one check; every
// rank prints what failed and the program exits 1 on any failure, so mpirun's exit status is the verdict.
// Results are compared across ranks with raw MPI, not with the communicator under test.
//   collectives  all_reduce (sum, mean, max, min; sizes 0 to 100003; async in flight together; in bf16 and
//                fp16 on the wire), broadcast
//                from the last rank, all_gather, barrier: equal to the arithmetic, bitwise equal on all ranks,
//                each a slice of a trace with its bytes
//   train        multi_worker_mirrored_strategy<comm::mpi> trains like one worker with the global batch
//   mismatch     rank 0 all-reduces another size than the others: a comm_error on every rank, latched;
//                the ranks then exit 138 as after any collective failure (without MPI_Finalize)
//   hang         the last rank stops calling; the others' barrier is a comm_error within the timeout and
//                they exit 138 (peer_failure_exit_code), as the training programs do
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <dtrain/distribute/comm/mpi.hpp>
#include <dtrain/distribute/strategy.hpp>

#include "support/mirrored.hpp"

using namespace dtrain;

namespace {
int failures = 0;
int my_rank = 0;
void check(bool ok, const std::string& what) {
  if (ok) return;
  ++failures;
  std::printf("rank %d: FAIL: %s\n", my_rank, what.c_str());
}

comm::mpi make_comm(std::chrono::milliseconds timeout = std::chrono::milliseconds(60'000)) {
  const cluster_info c = comm::mpi::resolve_cluster();
  return comm::mpi({.rank = c.rank, .world_size = c.world_size, .fingerprint = c.fingerprint(),
                    .operation_timeout = timeout});
}

/// Whether `v` holds the same bytes on every rank (raw MPI).
bool same_on_all_ranks(const std::vector<float>& v) {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  std::vector<float> all(v.size() * std::size_t(n));
  MPI_Allgather(v.data(), int(v.size()), MPI_FLOAT, all.data(), int(v.size()), MPI_FLOAT, MPI_COMM_WORLD);
  for (int r = 0; r < n; ++r)
    if (std::memcmp(all.data() + std::size_t(r) * v.size(), v.data(), v.size() * sizeof(float)) != 0) return false;
  return true;
}

/// Rank r's i-th value: distinct per rank and element, not exactly representable sums.
float value(int r, std::size_t i) { return float(r + 1) * 0.37f + float(i % 101) * 0.013f - 0.5f; }

void collectives() {
  auto c = make_comm();
  const int p = c.size();
  for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(7), std::size_t(100003)}) {
    for (reduce_op op : {reduce_op::sum, reduce_op::mean, reduce_op::max, reduce_op::min}) {
      std::vector<float> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = value(c.rank(), i);
      c.all_reduce(v, op);
      bool ok = true;
      for (std::size_t i = 0; i < n && ok; ++i) {
        double sum = 0, hi = -1e30, lo = 1e30;
        for (int r = 0; r < p; ++r) sum += value(r, i), hi = std::max(hi, double(value(r, i))), lo = std::min(lo, double(value(r, i)));
        const double want = op == reduce_op::sum ? sum : op == reduce_op::mean ? sum / p : op == reduce_op::max ? hi : lo;
        ok = std::abs(v[i] - want) <= 1e-5 * (1 + std::abs(want));
      }
      check(ok, "all_reduce op " + std::to_string(int(op)) + " of " + std::to_string(n) + " floats is not the reduction");
      check(same_on_all_ranks(v), "all_reduce op " + std::to_string(int(op)) + " of " + std::to_string(n) +
                                      " floats differs between ranks");
    }
  }
  // in 16 bits: within a rounding per rank of the exact reduction, values of the wire type, the same bits
  // on every rank (a size that is not a multiple of anything, and one that takes the async path)
  const auto compressed = [&]<half_float T>(T, compression wire, double unit) {
    for (std::size_t n : {std::size_t(0), std::size_t(7), std::size_t(100003)})
      for (reduce_op op : {reduce_op::sum, reduce_op::mean, reduce_op::max}) {
        std::vector<float> v(n);
        for (std::size_t i = 0; i < n; ++i) v[i] = value(c.rank(), i);
        c.all_reduce_async(v, op, wire).wait();
        bool ok = true, rounded = true;
        for (std::size_t i = 0; i < n && ok; ++i) {
          double sum = 0, hi = -1e30, mass = 0;
          for (int r = 0; r < p; ++r) sum += value(r, i), hi = std::max(hi, double(value(r, i))), mass += std::abs(value(r, i));
          const double want = op == reduce_op::sum ? sum : op == reduce_op::mean ? sum / p : hi;
          ok = std::abs(v[i] - want) <= (p + 2) * unit * (op == reduce_op::mean ? mass / p : mass);
          rounded = rounded && (p == 1 || float(T::from(v[i])) == v[i]);
        }
        const std::string what = std::string("all_reduce in ") + name_of(wire) + " op " + std::to_string(int(op)) +
                                 " of " + std::to_string(n) + " floats";
        check(ok, what + " is not the reduction within rounding");
        check(rounded, what + " gives values that are not " + name_of(wire) + "'s");
        check(same_on_all_ranks(v), what + " differs between ranks");
      }
  };
  compressed(bfloat16{}, compression::bf16, std::ldexp(1.0, -8));
  compressed(float16{}, compression::fp16, std::ldexp(1.0, -11));
  trace::start();  // the collectives below, each a slice of this rank's trace with its bytes
  // three all-reduces in flight at once, waited for in order
  std::vector<std::vector<float>> bufs{std::vector<float>(1000, float(c.rank())), std::vector<float>(3, 1.0f),
                                       std::vector<float>(50000, float(c.rank() + 1))};
  std::vector<comm::mpi::handle> hs;
  for (auto& b : bufs) hs.push_back(c.all_reduce_async(b, reduce_op::sum));
  for (auto& h : hs) h.wait();
  check(bufs[0][999] == float(p * (p - 1) / 2) && bufs[1][0] == float(p) && bufs[2][0] == float(p * (p + 1) / 2),
        "asynchronous all-reduces in flight together give wrong sums");
  // broadcast from the last rank: bytes and floats
  std::vector<std::byte> bytes(1001, std::byte(c.rank()));
  c.broadcast(bytes, p - 1);
  check(bytes[0] == std::byte(p - 1) && bytes[1000] == std::byte(p - 1), "broadcast of bytes from the last rank");
  std::vector<float> f(10, float(c.rank()) + 0.5f);
  c.broadcast(std::span<float>(f), p - 1);
  check(f[9] == float(p - 1) + 0.5f, "broadcast of floats from the last rank");
  // all_gather in rank order
  const std::vector<float> mine{float(c.rank()), float(c.rank()) + 0.25f};
  std::vector<float> all(2 * std::size_t(p));
  c.all_gather(mine, all);
  bool gathered = true;
  for (int r = 0; r < p; ++r) gathered = gathered && all[2 * std::size_t(r)] == float(r) && all[2 * std::size_t(r) + 1] == float(r) + 0.25f;
  check(gathered, "all_gather is not every rank's input in rank order");
  c.barrier();
  std::vector<std::string> traced;
  for (const auto& e : trace::stop().events)
    if (std::string_view(e.category) == "comm") traced.push_back(e.name + ":" + std::to_string(e.bytes));
  const std::vector<std::string> want{"all_reduce (wait):4000", "all_reduce (wait):12", "all_reduce (wait):200000",
                                      "broadcast:1001", "broadcast:40", "all_gather:" + std::to_string(8 * p),
                                      "barrier:-1"};
  check(traced == want, "the trace's collectives are not the ones run, with their bytes");
  try {
    std::vector<float> small(3);
    c.all_gather(mine, small);
    check(false, "all_gather into a too small output was accepted");
  } catch (const value_error&) {
  }
  if (!failures) std::printf("rank %d: PASS: collectives on %d ranks\n", c.rank(), p);
}

void train() {
  using net = dtrain_test::small_net;
  auto [x, y] = dtrain_test::three_class_problem(48);
  const auto fit = [&](auto& model) {
    model.compile({.optimizer = adam{{.learning_rate = 0.01f}},
                   .loss = sparse_categorical_crossentropy{{.from_logits = true}}, .metrics = {accuracy{}}});
    auto ds = data::from_tensor_slices(x, y) | data::shuffle(48, 7) | data::batch(12);
    return model.fit(ds, {.epochs = 2, .verbose = 0});
  };
  multi_worker_mirrored_strategy<comm::mpi> strategy;
  auto model = strategy.make_model<net>(3 + std::uint64_t(strategy.replica_id()));  // the chief's weights win
  const history h = fit(model);
  net one(3);  // one worker, the global batch
  const history h1 = fit(one);
  check(strategy.cluster().source == "MPI", "the cluster does not come from MPI: " + strategy.cluster().source);
  check(dtrain_test::weights_close(model.get_weights(), one.get_weights()),
        "the weights differ from one worker's beyond float rounding");
  check(same_on_all_ranks(model.get_weights()), "the ranks hold different weights");
  check(std::abs(h["loss"].back() - h1["loss"].back()) <= 1e-4f * (1 + std::abs(h1["loss"].back())),
        "the last epoch's loss " + std::to_string(h["loss"].back()) + " is not one worker's " + std::to_string(h1["loss"].back()));
  if (!failures)
    std::printf("rank %d: PASS: %d ranks train like one worker (loss %.6f)\n", strategy.replica_id(),
                strategy.num_replicas_in_sync(), h["loss"].back());
}

void mismatch() {
  auto c = make_comm();
  std::vector<float> v(c.rank() == 0 ? 5 : 6, 1.0f);
  std::string first, again;
  try {
    c.all_reduce(v, reduce_op::sum);
  } catch (const comm_error& e) {
    first = e.what();
  }
  try {
    c.barrier();
  } catch (const comm_error& e) {
    again = e.what();
  }
  check(first.find("disagree on the collective") != std::string::npos, "no comm_error for a mismatched size: '" + first + "'");
  check(!again.empty() && again == first, "the failure is not latched: '" + again + "'");
  if (!failures) std::printf("rank %d: PASS: %s\n", c.rank(), first.c_str());
}

int hang() {
  auto c = make_comm(std::chrono::milliseconds(1'000));
  if (c.rank() == c.size() - 1) {  // stops taking part; mpirun ends it once the others have exited
    std::this_thread::sleep_for(std::chrono::seconds(120));
    std::_Exit(3);
  }
  try {
    c.barrier();
    std::printf("rank %d: FAIL: the barrier completed without the last rank\n", c.rank());
    return 1;
  } catch (const comm_error& e) {
    std::printf("rank %d: comm_error: %s\n", c.rank(), e.what());
    std::fflush(stdout);
    return peer_failure_exit_code;  // as the training programs do: a normal exit, without MPI_Finalize
  }
}
}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc == 2 ? argv[1] : "";
  my_rank = comm::mpi::resolve_cluster().rank;
  if (mode == "collectives") collectives();
  else if (mode == "train") train();
  else if (mode == "mismatch") {
    mismatch();
    if (!failures) return peer_failure_exit_code;
  }
  else if (mode == "hang") return hang();
  else {
    std::fprintf(stderr, "usage: mpirun -np N mpi_worker collectives|train|mismatch|hang\n");
    return 2;
  }
  std::fflush(stdout);
  return failures ? 1 : 0;
}
