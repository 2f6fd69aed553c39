// Peer for allreduce_perf: Gloo's ring all-reduce (gloo::AllreduceRing) over its TCP transport on
// loopback, ranks as processes rendezvousing through a FileStore. Prints allreduce_perf's columns.
//   gloo_allreduce -b 4K -e 64M -f 4 -n 20 -w 5 -p 2
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gloo/allreduce_ring.h>
#include <gloo/barrier_all_to_one.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include "../allreduce_table.hpp"

int main(int argc, char** argv) {
  allreduce_table::sweep sw;
  for (int i = 1; i + 1 < argc; i += 2)
    if (!allreduce_table::parse_flag(sw, argv[i], argv[i + 1])) {
      std::fprintf(stderr, "usage: gloo_allreduce [-b min] [-e max] [-f factor] [-n iters] [-w warmup] [-p ranks]\n");
      return 2;
    }
  allreduce_table::check(sw, "gloo_allreduce");
  const int p = sw.ranks, iters = sw.iters, warmup = sw.warmup;
  const auto dir = std::filesystem::temp_directory_path() / ("gloo_store_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  int rank = 0;
  std::vector<pid_t> kids;
  for (int r = 1; r < p; ++r)
    if (pid_t pid = ::fork(); pid == 0) {
      rank = r;
      kids.clear();
      break;
    } else {
      kids.push_back(pid);
    }
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(dir.string());
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, p);
  ctx->connectFullMesh(store, dev);
  std::vector<float> buf(sw.max_bytes / 4, 0.0f);
  if (rank == 0) allreduce_table::print_header("gloo AllreduceRing", p, sw);
  for (std::size_t bytes = sw.min_bytes; bytes <= sw.max_bytes; bytes *= sw.factor) {
    const std::size_t n = bytes / 4;
    gloo::AllreduceRing<float> op(ctx, {buf.data()}, int(n));
    for (int i = 0; i < warmup; ++i) op.run();
    gloo::BarrierAllToOne(ctx).run();
    std::vector<double> t;
    for (int i = 0; i < iters; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      op.run();
      t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    double us = t[t.size() / 2];  // the slowest rank's median, as dtrain's and MPI's benches report
    gloo::AllreduceRing<double>(ctx, {&us}, 1, gloo::ReductionFunction<double>::max).run();
    if (rank == 0) allreduce_table::print_row(bytes, "sum", us, p, -1);
  }
  std::fflush(stdout);
  if (rank != 0) ::_exit(0);
  for (pid_t k : kids) ::waitpid(k, nullptr, 0);
  std::filesystem::remove_all(dir);
}
